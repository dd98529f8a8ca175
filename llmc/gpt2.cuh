// gpt2.cuh: the GPT-2 model on the GPU: buffers, forward, backward, and the training step.
//
// Memory: one allocation for all parameters, one for all gradients, one for the optimizer state
// (AdamW moments, and fp32 master weights in the bf16 build), one for all activations and
// scratch, each sized from the config, the micro-batch shape (B, T) and the GPT2Options at
// creation. gpt2_memory_plan gives the same sizes without allocating (what B fits).
//
// Classifier: the lm-head matmul, the fused softmax / loss / dlogits and the classifier's
// backward (dlnf = dlogits @ wte, dwte += dlogits^T @ lnf) run chunk by chunk over rows, so only
// a (chunk_rows, Vp) logits buffer exists. In training the classifier's backward thus runs in
// gpt2_forward, and gpt2_backward starts from the dlnf it left.
//
// Recompute (GPT2Options::recompute): 1 keeps no GELU output per layer (one shared buffer; the
// backward recomputes gelu(fch) before the fcproj weight gradient), 2 also keeps no ln1 / ln2
// (one shared buffer; the backward recomputes each from the stored residual it normalized). The
// recomputation runs the forward's kernels on the forward's inputs, so gradients are bitwise
// those of recompute 0. Memory and step time of each mode: docs/results.md.
//
// One training step (gpt2_step) = copy the step's tokens and per-step values in, zero the
// gradients and the loss, forward + backward for each of grad_accum micro-batches (gradients
// summed), global gradient norm, AdamW (with clipping), and an async copy of loss and norm to
// pinned host memory. It runs on ctx.stream with no host synchronisation; after one eager
// warm-up step it is captured into a CUDA graph and replayed (use_graph).
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "adamw.cuh"
#include "context.cuh"
#include "model_file.h"
#include "precision.cuh"

// Rows of logits per classifier chunk: 8192 x Vp keeps the lm-head GEMMs large enough to run
// near cuBLAS's peak while the buffer stays at 0.8 GB in bf16 (1.6 GB in fp32) for GPT-2's Vp.
constexpr int kDefaultClassifierChunkRows = 8192;

struct GPT2Options {
    // 0: keep every activation for the backward; 1: the GELU output is recomputed in the
    // backward (one (N, 4C) buffer instead of L); 2: also ln1 and ln2 (one (N, C) buffer
    // instead of 2L). Gradients are bitwise the same in every mode.
    int recompute = 0;
    // Rows of logits the classifier works on at once (capped at B*T).
    int classifier_chunk_rows = kDefaultClassifierChunkRows;
    // Ranks the optimizer state is divided over (ZeRO-1; 1 = the whole state here). Set by
    // gpt2_create from its MultiGpu; given here for gpt2_memory_plan.
    int zero_shards = 1;
};

struct MultiGpu;  // multi_gpu.cuh

// One activation per layer: layer l's slice starts at base + l * stride (elements). stride is
// the slice rounded up to 256 bytes, so every slice starts on a 256-byte boundary like a buffer
// of its own, whatever B, T, NH or C are (the flash attention kernels need 16-byte aligned
// slices, the matmul plans prefer 256); 0 when one buffer serves every layer (recomputed).
template <typename T>
struct LayerSlices {
    T* base = nullptr;
    size_t stride = 0;
    T* at(int l) const { return base + (size_t)l * stride; }
};
typedef LayerSlices<floatX> LayerTensor;

struct GPT2Activations {
    floatX* encoded;              // (N, C)     residual stream entering layer 0
    LayerTensor ln1;              // (L, N, C)  shared with ln2 when recompute == 2
    LayerSlices<float> ln1_mean;  // (L, N)
    LayerSlices<float> ln1_rstd;  // (L, N)
    LayerTensor qkv;              // (L, N, 3C)
    LayerTensor atty;             // (L, N, C)
    LayerSlices<float> att_lse;   // (L, B, NH, T)
    LayerTensor residual2;        // (L, N, C)  after attention
    LayerTensor ln2;              // (L, N, C)  shared with ln1 when recompute == 2
    LayerSlices<float> ln2_mean;  // (L, N)
    LayerSlices<float> ln2_rstd;  // (L, N)
    LayerTensor fch;              // (L, N, 4C) GELU input
    LayerTensor fch_gelu;         // (L, N, 4C) one (N, 4C) buffer when recompute >= 1
    LayerTensor residual3;        // (L, N, C)  after the MLP
    floatX* lnf;                  // (N, C)
    float* lnf_mean;              // (N)
    float* lnf_rstd;              // (N)
    floatX* logits;               // (chunk_rows, Vp) one chunk; dlogits after the classifier
    floatX* lnf_row;              // (C)  one position of lnf, aligned (gpt2_forward_logits_row)
    floatX* logits_row;           // (Vp) the logits of that position
    float* losses;                // (N)
    floatX* proj_out;             // (N, C)     output of a projection before its residual add
    // backward scratch, reused by every layer
    floatX* dresidual;      // (N, C)
    floatX* dln;            // (N, C)     holds dlnf from the forward until gpt2_backward reads it
    floatX* datty;          // (N, C)
    floatX* dqkv;           // (N, 3C)
    floatX* dfch;           // (N, 4C)
    float* dbias_scratch;   // matmul_bias_scratch_floats(4C)
    float* recompute_mean;  // (N)  statistics of a recomputed layernorm (recompute == 2)
    float* recompute_rstd;  // (N)
    void* att_scratch;
    void* enc_scratch;
    void* ln_scratch;
    void* norm_scratch;
};

// Device memory of a model, by part, in bytes (gpt2_memory_plan).
struct GPT2MemoryPlan {
    size_t params = 0, grads = 0, optimizer = 0, activations = 0, other = 0;
    // Allocated while running, outside the model's buffers: the cuBLASLt autotuner's random
    // operands (at most the classifier's rows x Vp dlogits and two copies of dwte) and what
    // cuBLASLt and the CUDA graph take.
    size_t reserve = 0;
    // Activation buffers grouped by name, largest first.
    std::vector<std::pair<std::string, size_t>> activation_parts;
    size_t total() const { return params + grads + optimizer + activations + other + reserve; }
};

struct GPT2StepIO {  // pinned host memory shared with the device copies of one step
    int* tokens;     // (grad_accum, 2, N): inputs then targets of each micro-batch
    AdamWStepValues* step_values;
    float* results;  // [0] mean loss of the step, [1] squared gradient norm
};

struct GPT2 {
    llmc::GPT2Config cfg;
    llmc::ParamLayout layout;
    int B = 0, T = 0, grad_accum = 1;
    GPT2Options opts;
    int chunk_rows = 0;  // rows per classifier chunk: min(opts.classifier_chunk_rows, B*T)
    size_t num_params = 0;
    floatX* params = nullptr;    // one allocation
    floatX* grads = nullptr;     // one allocation
    float* opt_state = nullptr;  // m, v (and master in bf16): one allocation
    size_t opt_elems = 0;        // elements of each of m, v, master: num_params, or the shard's
    float *adam_m = nullptr, *adam_v = nullptr, *master = nullptr;
    floatX* param[llmc::kNumParamTensors];
    floatX* grad[llmc::kNumParamTensors];
    void* act_memory = nullptr;
    size_t act_bytes = 0;
    GPT2Activations acts{};
    int* d_tokens = nullptr;  // device copy of io.tokens
    AdamWStepValues* d_step_values = nullptr;
    float* d_results = nullptr;  // [0] loss, [1] squared norm
    GPT2StepIO io{};
    AdamWTensors tensors{};
    AdamWHyper hyper{};
    cudaGraphExec_t graph = nullptr;
    bool warmed_up = false;
    // With kBranchZeroing (context.cuh): the branch's mark after this micro-step's memsets, which
    // ctx.stream waits for before the first write they precede; null otherwise (gpt2_step.cu).
    cudaEvent_t zeroed = nullptr;
    // Data parallel (multi_gpu.cuh), null on one GPU. reduce_grads: the backward hands each
    // finished gradient group to it (set by the step for the last micro-step only).
    MultiGpu* dist = nullptr;
    bool reduce_grads = false;

    GPT2() = default;
    GPT2(const GPT2&) = delete;
    GPT2& operator=(const GPT2&) = delete;
    ~GPT2();
};

// Whether this build runs the model `cfg` at micro-batches of (B, T): the config is valid, B >= 1,
// 1 <= T <= maxT, the head size is one the attention kernels take, C fits the layernorm
// backward, and every tensor index fits in an int. Otherwise false with one sentence (what to
// change) in *why. Every other kernel precondition holds for such a shape: the activation
// buffers and their per-layer slices are 256-byte aligned (ArenaCarver, LayerSlices), and every
// parameter tensor and per-layer slice starts at a multiple of C elements of the packed
// (llm.c file) layout, a multiple of 32 bytes in bf16 (C = NH * HS with HS % 16 == 0) and of 16
// bytes in fp32 (C % 4 == 0 is required there), so the parameter and gradient arenas stay
// packed for files, AdamW, the norm, ZeRO chunks and NCCL; kernels that vectorize check the
// alignment of what they get and fall back to scalar code otherwise.
bool gpt2_shape_supported(const llmc::GPT2Config& cfg, int B, int T, std::string* why);

// Allocates everything for micro-batches of (B, T) with grad_accum micro-steps per step and
// uploads `host_params` (fp32, model-file layout). Refuses, with the sizes and what to change,
// a model that does not fit in the free device memory. With `dist` (more than one process) the
// step reduces gradients over the ranks; with dist->zero == 1 the optimizer state is only this
// rank's shard (dist->shard).
void gpt2_create(const Context& ctx, GPT2* model, const llmc::GPT2Config& cfg,
                 const std::vector<float>& host_params, int B, int T, int grad_accum,
                 const AdamWHyper& hyper, const GPT2Options& opts = GPT2Options(),
                 MultiGpu* dist = nullptr);

// The device memory gpt2_create would allocate, by part, without allocating anything.
GPT2MemoryPlan gpt2_memory_plan(const Context& ctx, const llmc::GPT2Config& cfg, int B, int T,
                                int grad_accum, const GPT2Options& opts);
// The largest micro-batch B (up to max_B) whose plan fits in `bytes`; 0 when not even B = 1.
int gpt2_largest_batch(const Context& ctx, const llmc::GPT2Config& cfg, int T, int grad_accum,
                       const GPT2Options& opts, size_t bytes, int max_B);
// Prints the plan: each part in MiB and the largest activations.
void gpt2_print_memory_plan(const GPT2MemoryPlan& plan, FILE* out);

// Forward on inputs/targets already in device memory (B*T each), chunk by chunk through the
// classifier: per-position losses in acts.losses; *d_loss (device) += mean loss * loss_scale.
// With backward_classifier also the classifier's backward: dlnf into acts.dln and
// dwte += dlogits^T @ lnf (accumulates), ready for gpt2_backward. logits_copy, when given, is
// an (N, Vp) device buffer that receives every chunk's logits (tests; not with
// backward_classifier, which overwrites them with dlogits).
void gpt2_forward(const Context& ctx, GPT2* model, const int* d_inputs, const int* d_targets,
                  float* d_loss, float loss_scale, bool backward_classifier,
                  floatX* logits_copy = nullptr);

// Backward of the last gpt2_forward (run with backward_classifier), from the dlnf it left;
// gradients accumulate (+=).
void gpt2_backward(const Context& ctx, GPT2* model, const int* d_inputs);

// Enqueues one whole training step on ctx.stream using io.tokens and io.step_values, which
// the caller fills before the call. With use_graph the step runs from a CUDA graph (captured on
// the first call after one eager warm-up step). Returns without synchronising; the results
// land in io.results once the stream reaches the end of the step.
void gpt2_step(const Context& ctx, GPT2* model, bool use_graph);
// Drops the captured graph, so that the next gpt2_step with use_graph captures the step again
// (after a change that capture must see, such as a profiler starting to trace).
void gpt2_reset_graph(GPT2* model);

// Forward-only evaluation of one batch held in io.tokens (micro-batch 0); synchronises and
// returns the mean loss. logits_copy: as in gpt2_forward.
float gpt2_eval_loss(const Context& ctx, GPT2* model, floatX* logits_copy = nullptr);

// Per-position losses for evaluation (llmc/hellaswag.h): the forward of io.tokens' micro-batch 0
// viewed as `rows` sequences of `row_len` tokens (rows * row_len <= B*T, row_len <= T; inputs in
// the first rows * row_len ints of the micro-batch's inputs, targets likewise, all below V), as
// gpt2_forward_logits_row runs on fewer rows; host_losses receives the rows * row_len losses
// -log p(target). Outside the step's graph; synchronises; B and T are the model's again after.
void gpt2_position_losses(const Context& ctx, GPT2* model, int rows, int row_len,
                          float* host_losses);

// Sampling: the forward of sequence 0 of io.tokens' micro-batch 0 alone (its T inputs and
// targets, which must be token ids below V), then the logits of one position only,
// lnf[pos] @ wte^T, whose V values land in host_out as fp32; synchronises. Outside the step's
// graph: the activations and io.tokens are left for the next step to overwrite, as
// gpt2_eval_loss leaves them.
void gpt2_forward_logits_row(const Context& ctx, GPT2* model, int pos, float* host_out);

// Copies parameters (as fp32, model-file layout) back to the host.
void gpt2_download_params(const Context& ctx, const GPT2& model, std::vector<float>* out);
// Copies gradients (as fp32, model-file layout) back to the host.
void gpt2_download_grads(const Context& ctx, const GPT2& model, std::vector<float>* out);

// Training FLOPs per token, forward + backward: 6 * params + 12 * L * C * T (attention).
double gpt2_flops_per_token(const llmc::GPT2Config& cfg, int T);
