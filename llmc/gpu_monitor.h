// gpu_monitor.h: GPU telemetry through NVML, loaded at run time (dlopen of libnvidia-ml.so.1,
// or the library LLMC_NVML_LIB names): no link-time dependency, and a machine without NVML
// prints one line and trains on. Host-only C++; the few NVML functions and types used are
// declared here from NVML's documented C API (nvml.h is not needed to build).
//
// A sample: SM and memory clocks (MHz), power draw (W), GPU temperature (C), memory in use
// (MiB) and the clock throttle reasons (NVML's bit mask: 0x1 idle, 0x2 application clocks,
// 0x4 software power cap, 0x8 hardware slowdown, 0x10 sync boost, 0x20 software thermal,
// 0x40 hardware thermal, 0x80 hardware power brake, 0x100 display clocks).
#pragma once
#include <cstdint>
#include <string>

namespace llmc {

// The throttle reasons that mean the GPU is slowed by power or heat (not idle, not a setting).
constexpr uint64_t kThrottlePowerOrHeat = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

struct GpuSample {
    unsigned sm_mhz = 0, mem_mhz = 0;
    double power_w = 0;
    unsigned temp_c = 0;
    double mem_used_mib = 0;
    uint64_t throttle = 0;
};

// "software power cap, hardware thermal slowdown" for a mask; "none" for 0.
std::string throttle_reason_names(uint64_t mask);

// The sample as JSON pairs for log.jsonl (StepRecord::extra): "gpu_sm_mhz": ..., ...
std::string gpu_sample_json(const GpuSample& s);

class GpuMonitor {
  public:
    GpuMonitor() = default;
    GpuMonitor(const GpuMonitor&) = delete;
    GpuMonitor& operator=(const GpuMonitor&) = delete;
    ~GpuMonitor();

    // Loads NVML and finds the GPU at this PCI address (cudaDeviceProp's pciDomainID, pciBusID,
    // pciDeviceID). False with one sentence in *why when NVML or the GPU is not to be had.
    bool open(int pci_domain, int pci_bus, int pci_device, std::string* why);
    bool is_open() const { return device_ != nullptr; }
    // Reads one sample; false with *why when NVML refuses one of the readings.
    bool sample(GpuSample* out, std::string* why);
    // The first time a sample shows power or heat throttling, one sentence (then never again).
    std::string throttle_warning(long long step, const GpuSample& s);

  private:
    void* lib_ = nullptr;
    void* device_ = nullptr;
    bool warned_ = false;
    struct Api;
    Api* api_ = nullptr;
};

}  // namespace llmc
