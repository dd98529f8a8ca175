// context.cu: creating and destroying the Context (stream, cuBLASLt handle, workspace).
#include <string>

#include "arch.cuh"
#include "context.cuh"

// cuBLASLt's heuristics pick faster kernels (split-K, stream-K) when given room to work;
// 32 MiB is what Hopper's largest tiles ask for.
constexpr size_t kLtWorkspaceBytes = 32u << 20;

namespace {

// Launched once at start: a GPU for which the binary holds no code fails here, at a launch the
// message below can explain, rather than at the first real kernel.
__global__ void architecture_probe_kernel() {}

// Fails with one sentence when `props` names a GPU these kernels cannot run on, or one this
// binary holds no code for (built for another GPU_ARCH).
void check_architecture(const cudaDeviceProp& props, int device, cudaStream_t stream) {
    const int cc = props.major * 10 + props.minor;
    LLMC_CHECK(cc >= kMinComputeCapability,
               "GPU %d (%s) has compute capability %d.%d; llmc needs %d.%d or newer (A100, RTX "
               "30xx, A10, L4, L40S, RTX 40xx, H100, H200, B200, RTX 50xx).",
               device, props.name, props.major, props.minor, kMinComputeCapability / 10,
               kMinComputeCapability % 10);
    architecture_probe_kernel<<<1, 1, 0, stream>>>();
    const cudaError_t err = cudaGetLastError();
    if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidKernelImage) {
        const int want = build_arch_for(cc);
        std::string supported;
        for (int a : kSupportedArchs)
            supported += (supported.empty() ? "sm_" : ", sm_") + std::to_string(a);
        LLMC_CHECK(want != 0,
                   "GPU %d (%s) has compute capability %d.%d, for which llmc has no GPU_ARCH "
                   "(it supports %s and the later GPUs of their families); this binary was "
                   "built for sm_%d (%s).",
                   device, props.name, props.major, props.minor, supported.c_str(), kCudaArch,
                   cudaGetErrorString(err));
        LLMC_FAIL(
            "this binary was built for GPU_ARCH=sm_%d, which GPU %d (%s, compute "
            "capability %d.%d) cannot run; rebuild with make GPU_ARCH=sm_%d (%s).",
            kCudaArch, device, props.name, props.major, props.minor, want, cudaGetErrorString(err));
    }
    CUDA_CHECK(err);
}

}  // namespace

void context_init(Context* ctx, int device, bool tf32) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    LLMC_CHECK(err == cudaSuccess && count > 0,
               "CUDA cannot start (%s): this program needs an NVIDIA GPU that nvidia-smi lists, a "
               "driver that supports CUDA %d.%d (nvidia-smi's \"CUDA Version\") and, in a "
               "container, the GPU's /dev/nvidia* devices (e.g. docker --gpus all).",
               err == cudaSuccess ? "device count is 0" : cudaGetErrorString(err),
               CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    LLMC_CHECK(device >= 0 && device < count, "device %d does not exist (this machine has %d)",
               device, count);
    ctx->device = device;
    ctx->tf32 = tf32;
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaGetDeviceProperties(&ctx->props, device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    check_architecture(ctx->props, device, ctx->stream);
    CUBLAS_CHECK(cublasLtCreate(&ctx->lt));
    ctx->lt_workspace_bytes = kLtWorkspaceBytes;
    CUDA_CHECK(cudaMalloc(&ctx->lt_workspace, ctx->lt_workspace_bytes));
}

Context::~Context() {
    matmul_plans_destroy(*this);
    if (lt_workspace) cudaFree(lt_workspace);
    if (lt) cublasLtDestroy(lt);
    if (stream) cudaStreamDestroy(stream);
}
