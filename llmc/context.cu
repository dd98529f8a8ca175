// context.cu: creating and destroying the Context (streams, cuBLASLt handle, workspaces), the
// check that this GPU can run the binary, the overlap switches and the branch stream's fork /
// join events.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "arch.cuh"
#include "context.cuh"
#include "util.h"

namespace llmc {

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
    LLMC_CUDA_CHECK(err);
}

// LLMC_BRANCHES: "", "0", "none", "all", or a comma list of gemms, reduces, zeroing.
unsigned branches_from_env() {
    const char* v = std::getenv("LLMC_BRANCHES");
    if (v == nullptr) return kBranchAll;  // the default
    const std::string s = v;
    if (s.empty() || s == "0" || s == "none") return 0;
    if (s == "all" || s == "1") return kBranchAll;  // 1: a switch's usual "on"

    unsigned bits = 0;
    size_t pos = 0;
    while (pos <= s.size()) {
        const size_t comma = std::min(s.find(',', pos), s.size());
        const std::string item = s.substr(pos, comma - pos);
        if (item == "gemms")
            bits |= kBranchGemms;
        else if (item == "reduces")
            bits |= kBranchReduces;
        else if (item == "zeroing")
            bits |= kBranchZeroing;
        else
            LLMC_FAIL(
                "LLMC_BRANCHES=%s: '%s' is not one of gemms, reduces, zeroing (a comma list), all "
                "or 0",
                v, item.c_str());
        pos = comma + 1;
    }
    return bits;
}

cudaEvent_t next_event(const Context& ctx) {
    cudaEvent_t e = ctx.branch_events[ctx.branch_next_event];
    ctx.branch_next_event = (ctx.branch_next_event + 1) % kBranchEvents;
    return e;
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
    LLMC_CUDA_CHECK(cudaSetDevice(device));
    LLMC_CUDA_CHECK(cudaGetDeviceProperties(&ctx->props, device));
    LLMC_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    check_architecture(ctx->props, device, ctx->stream);
    LLMC_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->branch_stream, cudaStreamNonBlocking));
    for (cudaEvent_t& e : ctx->branch_events) {
        LLMC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    LLMC_CUBLAS_CHECK(cublasLtCreate(&ctx->lt));
    ctx->lt_workspace_bytes = kLtWorkspaceBytes;
    LLMC_CUDA_CHECK(cudaMalloc(&ctx->lt_workspace, ctx->lt_workspace_bytes));
    context_set_overlap(ctx, branches_from_env(), env_int("LLMC_PDL", 0, 1, 1) != 0);
    ctx->layernorm_backward_variant = env_int("LLMC_LAYERNORM_BACKWARD_VARIANT", 0, 2, 2);
    ctx->classifier_variant = env_int("LLMC_CLASSIFIER_VARIANT", 0, 1, 1);
    ctx->flash_fused_backward = env_int("LLMC_FLASH_FUSED_BACKWARD", 0, 2, 1);
    ctx->global_norm_variant = env_int("LLMC_GLOBAL_NORM_VARIANT", 0, 1, 1);
    ctx->gelu_gemm = env_int("LLMC_GELU_GEMM", 0, 3, 2);
    ctx->plain_gemm = (unsigned)env_int("LLMC_PLAIN_GEMM", 0, 7, (int)Context().plain_gemm);
    ctx->row_stats_gemm = env_int("LLMC_ROW_STATS_GEMM", 0, 1, Context().row_stats_gemm);
    ctx->attproj_weight_late =
        env_int("LLMC_ATTPROJ_WEIGHT_LATE", 0, 1, Context().attproj_weight_late);
}

void context_set_overlap(Context* ctx, unsigned branches, bool pdl) {
    ctx->branches = branches & kBranchAll;
    // griddepcontrol and the launch attribute are Hopper's (sm_90) and later.
    ctx->pdl = pdl && ctx->props.major >= 9;
    if ((ctx->branches & kBranchGemms) != 0 && ctx->branch_lt_workspace == nullptr) {
        LLMC_CUDA_CHECK(cudaMalloc(&ctx->branch_lt_workspace, ctx->lt_workspace_bytes));
    }
}

std::string context_overlap_summary(const Context& ctx) {
    std::string b;
    if (ctx.branches & kBranchGemms) b += "gemms,";
    if (ctx.branches & kBranchReduces) b += "reduces,";
    if (ctx.branches & kBranchZeroing) b += "zeroing,";
    b = b.empty() ? "none" : b.substr(0, b.size() - 1);
    return "branches " + b + " | pdl " + (ctx.pdl ? "on" : "off") +
           " | layernorm backward variant " + std::to_string(ctx.layernorm_backward_variant) +
           " | classifier variant " + std::to_string(ctx.classifier_variant) +
           " | flash backward " +
           (ctx.flash_fused_backward == 0   ? "split"
            : ctx.flash_fused_backward == 1 ? "fused on large grids"
                                            : "fused") +
           " | global norm variant " + std::to_string(ctx.global_norm_variant) + " | gelu gemm " +
           (ctx.gelu_gemm == 0   ? "cublaslt"
            : ctx.gelu_gemm == 1 ? "ours for dgelu"
            : ctx.gelu_gemm == 2 ? "ours"
                                 : "ours, the forward on 128 x 256 tiles") +
           " | plain gemm mask " + std::to_string(ctx.plain_gemm) + " | row stats " +
           (ctx.row_stats_gemm ? "in the attproj gemm" : "own pass") +
           " | attproj weight gradient " +
           (ctx.attproj_weight_late ? "beside the dq conversion" : "beside attention");
}

bool context_switches_default(const Context& ctx) {
    const Context defaults;
    // PDL's default is on where the device has it (sm_90 and later).
    const bool pdl_default = defaults.pdl && ctx.props.major >= 9;
    return ctx.branches == defaults.branches && ctx.pdl == pdl_default &&
           ctx.layernorm_backward_variant == defaults.layernorm_backward_variant &&
           ctx.classifier_variant == defaults.classifier_variant &&
           ctx.flash_fused_backward == defaults.flash_fused_backward &&
           ctx.global_norm_variant == defaults.global_norm_variant &&
           ctx.gelu_gemm == defaults.gelu_gemm && ctx.plain_gemm == defaults.plain_gemm &&
           ctx.row_stats_gemm == defaults.row_stats_gemm &&
           ctx.attproj_weight_late == defaults.attproj_weight_late;
}

void device_alloc(void** ptr, size_t bytes, const char* what) {
    if (cudaMalloc(ptr, bytes) == cudaSuccess) return;
    cudaGetLastError();  // clear the (non-sticky) allocation error
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    constexpr double kMiB = 1048576.0;
    LLMC_FAIL(
        "could not allocate %.0f MiB of device memory for the %s (%.0f MiB of %.0f MiB free): "
        "lower the micro-batch (-b) or recompute activations (--recompute 1 or 2)",
        bytes / kMiB, what, free_b / kMiB, total_b / kMiB);
}

void branch_fork(const Context& ctx) {
    cudaEvent_t e = next_event(ctx);
    LLMC_CUDA_CHECK(cudaEventRecord(e, ctx.stream));
    LLMC_CUDA_CHECK(cudaStreamWaitEvent(ctx.branch_stream, e, 0));
}

cudaEvent_t branch_mark(const Context& ctx) {
    cudaEvent_t e = next_event(ctx);
    LLMC_CUDA_CHECK(cudaEventRecord(e, ctx.branch_stream));
    return e;
}

void branch_wait(const Context& ctx, cudaEvent_t mark) {
    if (mark != nullptr) LLMC_CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, mark, 0));
}

void branch_join(const Context& ctx) { branch_wait(ctx, branch_mark(ctx)); }

void run_after_attention_main(const Context& ctx) {
    if (!ctx.after_attention_main) return;
    const std::function<void()> after = std::move(ctx.after_attention_main);
    ctx.after_attention_main = nullptr;
    after();
}

Context::~Context() {
    matmul_cache.reset();  // the plans first: cuBLASLt's descriptors, before its handle goes
    if (lt_workspace) cudaFree(lt_workspace);
    if (branch_lt_workspace) cudaFree(branch_lt_workspace);
    if (lt) cublasLtDestroy(lt);
    for (cudaEvent_t e : branch_events) {
        if (e) cudaEventDestroy(e);
    }
    if (branch_stream) cudaStreamDestroy(branch_stream);
    if (stream) cudaStreamDestroy(stream);
}

}  // namespace llmc
