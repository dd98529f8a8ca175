// arch.cuh: the GPU architecture this build targets and the limits of its SMs.
//
// The Makefile compiles every CUDA file for one architecture, GPU_ARCH = sm_XX, and passes
// -DLLMC_CUDA_ARCH=XX to both of nvcc's passes: host launchers that choose between compiled
// kernel shapes by kCudaArch (flash_attention.cu's tiles) choose the shapes the device code was
// built and register-capped for. A compile with several -gencode targets would give the device
// code of all but one a host that chose for another, so it is refused here.
#pragma once

namespace llmc {

#ifndef LLMC_CUDA_ARCH
#error "LLMC_CUDA_ARCH is not defined: build with the Makefile (make GPU_ARCH=sm_XX), which sets it"
#endif
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ / 10 != LLMC_CUDA_ARCH)
#error "device code for an architecture other than LLMC_CUDA_ARCH: one -gencode per compile"
#endif

// The architecture as compute capability x 10: 80, 86, 89, 90, 100 or 120.
constexpr int kCudaArch = LLMC_CUDA_ARCH;
// The oldest GPU the kernels run on: cp.async and bf16 mma.sync need compute capability 8.0.
constexpr int kMinComputeCapability = 80;

// Per-SM resources of an architecture (CUDA C++ Programming Guide, "Technical Specifications
// per Compute Capability"): what a kernel's __launch_bounds__ blocks per SM must fit in. The SM
// reserves 1 KiB of shared memory per resident block; one block may opt in to all the rest.
struct SmLimits {
    int smem_per_sm;     // bytes of shared memory per SM
    int threads_per_sm;  // resident threads per SM
};
constexpr int kSmemReservedPerBlock = 1024;

constexpr SmLimits sm_limits(int arch) {
    switch (arch) {
        case 80:  // A100
            return SmLimits{164 * 1024, 2048};
        case 90:   // H100, H200
        case 100:  // B200
            return SmLimits{228 * 1024, 2048};
        default:  // 86 (RTX 30xx, A10, A40), 89 (RTX 40xx, L4, L40S), 120 (RTX 50xx)
            return SmLimits{100 * 1024, 1536};
    }
}

// Dynamic shared memory one block may use on `arch`.
constexpr long long max_smem_per_block(int arch) {
    return sm_limits(arch).smem_per_sm - kSmemReservedPerBlock;
}

// Blocks of `threads` threads and `smem` bytes of shared memory that fit on one SM of `arch`
// (registers aside: __launch_bounds__ caps them to fit).
constexpr int blocks_that_fit(int arch, int threads, long long smem) {
    const SmLimits l = sm_limits(arch);
    const long long by_smem = l.smem_per_sm / (smem + kSmemReservedPerBlock);
    const long long by_threads = l.threads_per_sm / threads;
    return (int)(by_smem < by_threads ? by_smem : by_threads);
}

// The GPU_ARCH values the Makefile accepts, as compute capability x 10.
constexpr int kSupportedArchs[] = {80, 86, 89, 90, 100, 120};

// The GPU_ARCH to build for a GPU of compute capability `cc` (x 10): the newest supported entry
// of its family (major) not above it, since code for X.Z runs on X.Y for Z <= Y; 0 if none.
constexpr int build_arch_for(int cc) {
    int best = 0;
    for (int a : kSupportedArchs) {
        if (a / 10 == cc / 10 && a <= cc) best = a;
    }
    return best;
}

}  // namespace llmc
