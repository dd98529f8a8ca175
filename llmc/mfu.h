// mfu.h: peak dense matrix rates of known GPUs, for model FLOPs utilisation (MFU).
// Datasheet figures without sparsity, in TFLOP/s. The H200 has the H100 SXM's compute.
// MFU = (FLOPs per token * tokens per second) / peak of the precision the matmuls run in.
#pragma once
#include <cstring>

namespace llmc {

struct DevicePeak {
    const char* name_part;  // matched against cudaDeviceProp::name
    double bf16, tf32, fp32;
};

constexpr DevicePeak kDevicePeaks[] = {
    {"H200", 989.4, 494.7, 66.9},      {"H100 NVL", 835.0, 417.5, 60.0},
    {"H100 PCIe", 756.0, 378.0, 51.2}, {"H100", 989.4, 494.7, 66.9},
    {"H800", 989.4, 494.7, 66.9},      {"A100", 312.0, 156.0, 19.5},
    {"L40S", 362.1, 183.0, 91.6},      {"RTX 4090", 165.2, 82.6, 82.6},
    {"A10G", 70.0, 35.0, 31.2},        {"L4", 121.0, 60.0, 30.3},
};

// Peak TFLOP/s for the device and precision ("bf16", "tf32" or "fp32"); 0 when unknown.
inline double device_peak_tflops(const char* device_name, const char* precision) {
    for (const DevicePeak& d : kDevicePeaks) {
        if (std::strstr(device_name, d.name_part) != nullptr) {
            if (std::strcmp(precision, "bf16") == 0) return d.bf16;
            if (std::strcmp(precision, "tf32") == 0) return d.tf32;
            return d.fp32;
        }
    }
    return 0.0;
}

}  // namespace llmc
