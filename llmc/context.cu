// context.cu: creating and destroying the Context (stream, cuBLASLt handle, workspace).
#include "context.cuh"

// cuBLASLt's heuristics pick faster kernels (split-K, stream-K) when given room to work;
// 32 MiB is what Hopper's largest tiles ask for.
constexpr size_t kLtWorkspaceBytes = 32u << 20;

void context_init(Context* ctx, int device, bool tf32) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    LLMC_CHECK(err == cudaSuccess && count > 0,
               "no CUDA device is visible (%s); this program needs an NVIDIA GPU",
               err == cudaSuccess ? "device count is 0" : cudaGetErrorString(err));
    LLMC_CHECK(device >= 0 && device < count, "device %d does not exist (this machine has %d)",
               device, count);
    ctx->device = device;
    ctx->tf32 = tf32;
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaGetDeviceProperties(&ctx->props, device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
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
