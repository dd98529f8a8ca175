// gpu_monitor.cpp: NVML through dlopen (see gpu_monitor.h).
#include "gpu_monitor.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace llmc {
namespace {

// NVML's C API, as documented: functions return nvmlReturn_t (0 = NVML_SUCCESS); a device is an
// opaque handle; nvmlMemory_t is {total, free, used} in bytes.
using NvmlReturn = int;
using NvmlDevice = void*;
struct NvmlMemory {
    unsigned long long total, free, used;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;   // NVML_CLOCK_SM
constexpr int kNvmlClockMem = 2;  // NVML_CLOCK_MEM
constexpr int kNvmlTempGpu = 0;   // NVML_TEMPERATURE_GPU

const char* const kReasonNames[] = {
    "idle",
    "application clocks",
    "software power cap",
    "hardware slowdown",
    "sync boost",
    "software thermal slowdown",
    "hardware thermal slowdown",
    "hardware power brake",
    "display clocks",
};

}  // namespace

struct GpuMonitor::Api {
    NvmlReturn (*init)();
    NvmlReturn (*shutdown)();
    const char* (*error_string)(NvmlReturn);
    NvmlReturn (*by_pci)(const char*, NvmlDevice*);
    NvmlReturn (*clock)(NvmlDevice, int, unsigned*);
    NvmlReturn (*power)(NvmlDevice, unsigned*);
    NvmlReturn (*temperature)(NvmlDevice, int, unsigned*);
    NvmlReturn (*memory)(NvmlDevice, NvmlMemory*);
    NvmlReturn (*throttle)(NvmlDevice, unsigned long long*);
};

std::string throttle_reason_names(uint64_t mask) {
    std::string out;
    for (int i = 0; i < 9; i++) {
        if ((mask >> i & 1u) == 0) continue;
        out += (out.empty() ? "" : ", ");
        out += kReasonNames[i];
    }
    if (mask >> 9 != 0) out += out.empty() ? "other" : ", other";
    return out.empty() ? "none" : out;
}

std::string gpu_sample_json(const GpuSample& s) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "\"gpu_sm_mhz\": %u, \"gpu_mem_mhz\": %u, \"gpu_power_w\": %.1f, "
                  "\"gpu_temp_c\": %u, \"gpu_mem_used_mib\": %.0f, \"gpu_throttle\": %llu",
                  s.sm_mhz, s.mem_mhz, s.power_w, s.temp_c, s.mem_used_mib,
                  (unsigned long long)s.throttle);
    return buf;
}

GpuMonitor::~GpuMonitor() {
    if (api_ != nullptr && device_ != nullptr) api_->shutdown();
    delete api_;
    if (lib_ != nullptr) dlclose(lib_);
}

bool GpuMonitor::open(int pci_domain, int pci_bus, int pci_device, std::string* why) {
    const char* env = std::getenv("LLMC_NVML_LIB");
    const std::string name = env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
    lib_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
        *why = "NVML (" + name + ") could not be loaded: " + dlerror();
        return false;
    }
    api_ = new Api{};
    struct Entry {
        const char* symbol;
        void** slot;
    };
    // nvmlDeviceGetCurrentClocksThrottleReasons: deprecated for ...ClocksEventReasons in newer
    // drivers, which keep both with the same bits; the older name reaches more drivers.
    const Entry entries[] = {
        {"nvmlInit_v2", reinterpret_cast<void**>(&api_->init)},
        {"nvmlShutdown", reinterpret_cast<void**>(&api_->shutdown)},
        {"nvmlErrorString", reinterpret_cast<void**>(&api_->error_string)},
        {"nvmlDeviceGetHandleByPciBusId_v2", reinterpret_cast<void**>(&api_->by_pci)},
        {"nvmlDeviceGetClockInfo", reinterpret_cast<void**>(&api_->clock)},
        {"nvmlDeviceGetPowerUsage", reinterpret_cast<void**>(&api_->power)},
        {"nvmlDeviceGetTemperature", reinterpret_cast<void**>(&api_->temperature)},
        {"nvmlDeviceGetMemoryInfo", reinterpret_cast<void**>(&api_->memory)},
        {"nvmlDeviceGetCurrentClocksThrottleReasons", reinterpret_cast<void**>(&api_->throttle)},
    };
    for (const Entry& e : entries) {
        *e.slot = dlsym(lib_, e.symbol);
        if (*e.slot == nullptr) {
            *why = name + " has no " + e.symbol + " (an NVML older than the driver API used here)";
            return false;
        }
    }
    NvmlReturn rc = api_->init();
    if (rc != kNvmlSuccess) {
        *why = std::string("nvmlInit failed: ") + api_->error_string(rc);
        return false;
    }
    char bus_id[32];
    std::snprintf(bus_id, sizeof(bus_id), "%08x:%02x:%02x.0", pci_domain, pci_bus, pci_device);
    NvmlDevice dev = nullptr;
    rc = api_->by_pci(bus_id, &dev);
    if (rc != kNvmlSuccess || dev == nullptr) {
        *why = std::string("NVML does not know the GPU at PCI ") + bus_id + ": " +
               api_->error_string(rc);
        api_->shutdown();
        return false;
    }
    device_ = dev;
    return true;
}

bool GpuMonitor::sample(GpuSample* out, std::string* why) {
    if (device_ == nullptr) return false;
    unsigned power_mw = 0;
    NvmlMemory mem{};
    unsigned long long reasons = 0;
    const NvmlReturn rcs[] = {
        api_->clock(device_, kNvmlClockSm, &out->sm_mhz),
        api_->clock(device_, kNvmlClockMem, &out->mem_mhz),
        api_->power(device_, &power_mw),
        api_->temperature(device_, kNvmlTempGpu, &out->temp_c),
        api_->memory(device_, &mem),
        api_->throttle(device_, &reasons),
    };
    for (NvmlReturn rc : rcs) {
        if (rc != kNvmlSuccess) {
            *why = std::string("an NVML reading failed: ") + api_->error_string(rc);
            return false;
        }
    }
    out->power_w = power_mw / 1000.0;
    out->mem_used_mib = (double)mem.used / 1048576.0;
    out->throttle = reasons;
    return true;
}

std::string GpuMonitor::throttle_warning(long long step, const GpuSample& s) {
    if (warned_ || (s.throttle & kThrottlePowerOrHeat) == 0) return "";
    warned_ = true;
    char buf[320];
    std::snprintf(
        buf, sizeof(buf),
        "warning: the GPU is throttling at step %lld (%s): SM clock %u MHz, %.0f W, %u C; "
        "steps may be slower from here (gpu_* fields in log.jsonl)",
        step, throttle_reason_names(s.throttle & kThrottlePowerOrHeat).c_str(), s.sm_mhz, s.power_w,
        s.temp_c);
    return buf;
}

}  // namespace llmc
