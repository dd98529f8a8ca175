// context.cuh: the state every launcher takes first, instead of globals.
//
// A Context owns the device properties, the one non-default stream all work runs on, the
// cuBLASLt handle and its workspace, and an opaque cache that matmul.cu fills with its plans
// (descriptors and the chosen algorithm per shape, built once and reused, also inside CUDA
// graph capture); the Context only deletes it.
//
// It also carries the switches of work that may overlap within the training step, all on by
// default (context_init reads them from the environment; context_set_overlap sets them): at d12
// they take 1-3% off a B=4 step (the GPU's idle time between kernels) and cost a second stream
// and a second cuBLASLt workspace (docs/perf-log.md, "Step switches").
//   LLMC_BRANCHES  comma list of gemms, reduces, zeroing, or all (the default), or 0: that work
//                  runs on ctx.branch_stream, forked from ctx.stream and joined back with events
//                  (branch_fork / branch_mark / branch_wait / branch_join), which a CUDA graph
//                  capture turns into branches of the graph. The kernels and their order of
//                  sums are the same either way, so results are bitwise the same.
//   LLMC_PDL       1 (the default; sm_90+) or 0: programmatic dependent launch of our own
//                  kernels (launch.cuh): each may be scheduled while its predecessor finishes,
//                  and waits for it (griddepcontrol.wait) before touching memory.
// and the choice between kernel variants of one op: LLMC_LAYERNORM_BACKWARD_VARIANT (0-2, default
// 2: the staged-rows kernel; every variant gives the same bits), LLMC_CLASSIFIER_VARIANT (0-1,
// default 1: each row staged in shared memory between its passes; the same bits as 0)
// (layernorm.cu, classifier.cu), LLMC_FLASH_FUSED_BACKWARD (0-2, default 1: the Hopper attention
// backward in one kernel on large grids; 0: its dq and dk/dv kernels; 2: the one kernel wherever
// the Hopper backward runs), LLMC_GLOBAL_NORM_VARIANT (0-1, default 1: several loads in flight per
// thread; 0: one; the same bits) (global_norm.cu), and LLMC_GELU_GEMM (0-2, default 2: on sm_90
// the fc forward (bias + GELU) and the fc bias + DGELU backward product run on our own kernels,
// the latter also summing the fc bias gradient; 1: the forward on cuBLASLt's GELU_AUX_BIAS
// epilogue; 0: cuBLASLt's GELU epilogues for both. Not the same bits: the bias gradient summed
// in another order, GELU from the rounded pre)
// (matmul_sm90.cuh).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>

#include "check.h"

namespace llmc {

// Bits of Context::branches: what the step runs on the branch stream.
constexpr unsigned kBranchGemms = 1;    // the backward's weight-gradient GEMMs (and bias sums)
constexpr unsigned kBranchReduces = 2;  // the layernorm backward's weight/bias reduction
constexpr unsigned kBranchZeroing = 4;  // the step's memsets and step-values copy, beside forward
constexpr unsigned kBranchAll = kBranchGemms | kBranchReduces | kBranchZeroing;
// Events handed out by branch_fork / branch_mark in turn: a mark must be waited on before this
// many more forks and marks reuse its event.
constexpr int kBranchEvents = 32;

// What an op family keeps in the Context between calls (matmul.cu: its plans). The Context
// owns it and deletes it through this base, knowing nothing of what it holds.
struct ContextCache {
    virtual ~ContextCache() = default;
};

struct Context {
    int device = 0;
    cudaDeviceProp props{};
    cudaStream_t stream = nullptr;
    cublasLtHandle_t lt = nullptr;
    void* lt_workspace = nullptr;  // cuBLASLt workspace (device)
    size_t lt_workspace_bytes = 0;
    bool tf32 = true;  // fp32 build: TF32 tensor cores in matmuls ('high')
    // Time cuBLASLt's candidate algorithms once per plan and keep the fastest among those whose
    // results are bitwise the heuristic's first choice's (matmul.cu), so the bits are those of
    // autotune off, run after run. Off: the heuristic's first choice, untimed.
    bool autotune = true;
    // matmul.cu's plans, made on first use; mutable because launchers take a const Context&
    // yet fill the cache.
    mutable std::unique_ptr<ContextCache> matmul_cache;
    // Overlap within the step (see the top of this file).
    unsigned branches = kBranchAll;  // kBranch* bits
    bool pdl = true;                 // off before sm_90 whatever is asked (context_set_overlap)
    int layernorm_backward_variant = 2;
    int classifier_variant = 1;
    // Hopper flash attention backward (LLMC_FLASH_FUSED_BACKWARD): 0 the dq and dk/dv kernels,
    // 1 the fused kernel (flash_attention.cuh, kSm90Fused) on large grids, 2 the fused kernel
    // wherever the Hopper backward runs.
    int flash_fused_backward = 1;
    // Pass 1 of the global norm (LLMC_GLOBAL_NORM_VARIANT): 0 one pack per thread per trip, 1
    // several (global_norm.cu); the same bits.
    int global_norm_variant = 1;
    // The fc products around GELU (LLMC_GELU_GEMM, matmul_sm90.cuh): 0 cuBLASLt with its GELU
    // epilogues, 1 our own Hopper kernel for the DGELU product (with the fc bias gradient in
    // its epilogue) where it applies, 2 our forward kernel too, 3 as 2 with the forward on the
    // plain products' 128 x 256 kernel where its shape applies.
    int gelu_gemm = 2;
    // The plain forward products (LLMC_PLAIN_GEMM, matmul_sm90.cuh): a mask of kPlainGemm* bits,
    // those products on our Hopper kernel where it applies; 0: all on cuBLASLt.
    unsigned plain_gemm = 0;
    // The fused attention backward's row statistics (LLMC_ROW_STATS_GEMM): 0 their own pass in
    // the flash backward, 1 written by the attention projection's input-gradient product on our
    // Hopper kernel (matmul_sm90.cuh, row_stats_gemm_backward) where both apply (D then summed
    // in another order: other bits).
    int row_stats_gemm = 1;
    // Where the attention projection's weight gradient runs on the branch
    // (LLMC_ATTPROJ_WEIGHT_LATE): 0 beside its input gradient and the attention backward, 1
    // from the end of the fused attention backward's main kernel on, beside its dq conversion
    // (the same bits).
    int attproj_weight_late = 0;
    // Set by the backward for one attention backward call: the fused Hopper backward calls it
    // (and clears it) between its main kernel and the dq conversion; the caller runs it after
    // the attention backward when it is still set.
    mutable std::function<void()> after_attention_main;
    cudaStream_t branch_stream = nullptr;
    // The branch's own cuBLASLt workspace (with kBranchGemms): two GEMMs running at once must
    // not share one.
    void* branch_lt_workspace = nullptr;
    cudaEvent_t branch_events[kBranchEvents] = {};
    mutable int branch_next_event = 0;

    Context() = default;
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ~Context();
};

// Selects `device`, creates the stream, the cuBLASLt handle and a 32 MiB workspace, and sets
// the overlap switches and kernel variants from the environment (a bad value: one sentence).
void context_init(Context* ctx, int device, bool tf32);

// Sets the overlap switches; allocates the branch's workspace when GEMMs go on the branch. PDL
// stays off on devices before sm_90. Not while work is in flight on the branch.
void context_set_overlap(Context* ctx, unsigned branches, bool pdl);
// "branches gemms,reduces | pdl on | layernorm backward variant 1 | classifier variant 0 | ...".
std::string context_overlap_summary(const Context& ctx);
// Whether every switch above is at its default (the trainer prints the summary otherwise).
bool context_switches_default(const Context& ctx);

// cudaMalloc, or exit with one sentence: the sizes, the free memory and what to change.
void device_alloc(void** ptr, size_t bytes, const char* what);

// The branch stream waits for everything enqueued on ctx.stream so far.
void branch_fork(const Context& ctx);
// An event after everything enqueued on the branch so far, for branch_wait.
cudaEvent_t branch_mark(const Context& ctx);
// ctx.stream waits for `mark` (nothing when it is null).
void branch_wait(const Context& ctx, cudaEvent_t mark);
// ctx.stream waits for everything enqueued on the branch so far.
void branch_join(const Context& ctx);
// The stream a launcher asked to run on the branch uses.
inline cudaStream_t stream_for(const Context& ctx, bool on_branch) {
    return on_branch ? ctx.branch_stream : ctx.stream;
}

// Runs ctx.after_attention_main once if it is set, and clears it first.
void run_after_attention_main(const Context& ctx);

// Number of streaming multiprocessors (for sizing persistent grids).
inline int ctx_num_sms(const Context& ctx) { return ctx.props.multiProcessorCount; }

}  // namespace llmc
