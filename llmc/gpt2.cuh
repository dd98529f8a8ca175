// gpt2.cuh: the GPT-2 model on the GPU: its parameters, gradients and activation arena, and the
// forward and backward passes over a batch the caller gives.
//
// Memory: one allocation for all parameters, one for all gradients, one for all activations and
// scratch, each sized from the config, the batch shape (B, T) and the GPT2Options at creation.
// The optimizer's state (optimizer.cuh), the training step's I/O (train_step.cuh) and the
// forward-only passes' I/O (gpt2_eval.cuh) belong to their own owners.
//
// Batches: the forward runs any batch of B' sequences of T' tokens with B'*T' <= B*T and
// T' <= T (every activation buffer holds B*T rows; positions restart at 0 in each sequence),
// the backward a batch of the arena's own shape (B, T).
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
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "context.cuh"
#include "model_file.h"
#include "precision.cuh"

namespace llmc {

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
};

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
    floatX* lnf_row;              // (C)  one position of lnf, aligned (gpt2_eval.cuh's logits row)
    floatX* logits_row;           // (Vp) the logits of that position
    float* losses;                // (N)
    // backward scratch, reused by every layer
    floatX* dresidual;     // (N, C)
    floatX* dln;           // (N, C)     holds dlnf from the forward until gpt2_backward reads it
    floatX* datty;         // (N, C)
    floatX* dqkv;          // (N, 3C)
    floatX* dfch;          // (N, 4C)
    float* dbias_scratch;  // matmul_bias_scratch_floats(4C)
    float* dgelu_bias_scratch;  // matmul_gelu_bias_scratch_floats(N, 4C): fc bias gradient partials
    float* recompute_mean;      // (N)  statistics of a recomputed layernorm (recompute == 2)
    float* recompute_rstd;      // (N)
    void* att_scratch;
    void* enc_scratch;
    void* ln_scratch;
    void* norm_scratch;  // the optimizer's global gradient norm (global_norm_scratch_bytes)
};

struct GPT2 {
    GPT2Config cfg;
    ParamLayout layout;
    GPT2Options opts;
    int B = 0, T = 0;    // the batch shape the activation arena was sized for
    int chunk_rows = 0;  // rows per classifier chunk: min(opts.classifier_chunk_rows, B*T)
    size_t num_params = 0;
    floatX* params = nullptr;  // one allocation
    floatX* grads = nullptr;   // one allocation
    floatX* param[kNumParamTensors];
    floatX* grad[kNumParamTensors];
    void* act_memory = nullptr;
    size_t act_bytes = 0;
    GPT2Activations acts{};

    GPT2() = default;
    GPT2(const GPT2&) = delete;
    GPT2& operator=(const GPT2&) = delete;
    ~GPT2();
};

// One batch in device memory: B sequences of T tokens, inputs and targets (B*T ids below V
// each), targets[i] the token that follows inputs[i].
struct GPT2Batch {
    const int* inputs = nullptr;
    const int* targets = nullptr;
    int B = 0, T = 0;
};

// What a forward does besides the per-position losses it leaves in acts.losses.
struct GPT2ForwardArgs {
    // With d_loss (device): *d_loss += loss_scale * (the sum of the B*T positions' losses).
    float* d_loss = nullptr;
    float loss_scale = 1.0f;
    // Also the classifier's backward of loss_scale * (the sum of the losses): dlnf into
    // acts.dln and dwte += dlogits^T @ lnf (accumulates), ready for gpt2_backward.
    bool backward_classifier = false;
    // False: the classifier's backward writes dwte instead of adding to it (the first
    // micro-step of a step; gpt2_backward then takes accumulate = false too).
    bool accumulate_grads = true;
    // ctx.stream waits for this branch mark before its first write to *d_loss (the training
    // step zeroes it on the graph branch); null: nothing to wait for.
    cudaEvent_t zeroed = nullptr;
    // An (B*T, Vp) device buffer that receives every chunk's logits (tests; not with
    // backward_classifier, which overwrites them with dlogits).
    floatX* logits_copy = nullptr;
};

// Told by gpt2_backward as each group of gradients becomes final on ctx.stream, in this order:
// group L (lnfw, lnfb), then group l for l = L-1 down to 0 (layer l's twelve slices), then group
// L+1 (wte, wpe); llmc::grad_group_slices (shard_map.h) lists each group's slices. The
// multi-GPU reducer (multi_gpu.cuh) implements it to start each group's reduction at once.
class GradReadyHook {
  public:
    virtual ~GradReadyHook() = default;
    virtual void grads_ready(const Context& ctx, int group) = 0;
};

// Whether this build runs the model `cfg` at batches of (B, T): the config is valid, B >= 1,
// 1 <= T <= maxT, the head size is one the attention kernels take, C fits the layernorm
// backward, and every tensor index fits in an int. Otherwise false with one sentence (what to
// change) in *why. Every other kernel precondition holds for such a shape: the activation
// buffers and their per-layer slices are 256-byte aligned (ArenaCarver, LayerSlices), and every
// parameter tensor and per-layer slice starts at a multiple of C elements of the packed
// (llm.c file) layout, a multiple of 32 bytes in bf16 (C = NH * HS with HS % 16 == 0) and of 16
// bytes in fp32 (C % 4 == 0 is required there), so the parameter and gradient arenas stay
// packed for files, AdamW, the norm, ZeRO chunks and NCCL; kernels that vectorize check the
// alignment of what they get and fall back to scalar code otherwise.
bool gpt2_shape_supported(const GPT2Config& cfg, int B, int T, std::string* why);

// Allocates the parameters (uploading `host_params`, fp32 in the model-file layout, rounded to
// floatX), the gradients (zeroed) and the activation arena for batches of (B, T). Exits with
// one sentence (the sizes and what to change) when an allocation fails.
void gpt2_create(const Context& ctx, GPT2* model, const GPT2Config& cfg,
                 const std::vector<float>& host_params, int B, int T,
                 const GPT2Options& opts = GPT2Options());

// Bytes of the activation arena gpt2_create would allocate, without allocating; with `parts`,
// also the buffers grouped by name (unsorted).
size_t gpt2_activation_bytes(const Context& ctx, const GPT2Config& cfg, int B, int T,
                             const GPT2Options& opts,
                             std::vector<std::pair<std::string, size_t>>* parts = nullptr);
// Rows per classifier chunk at batches of (B, T).
int gpt2_classifier_chunk_rows(const GPT2Options& opts, int B, int T);

// Forward of `batch` (which must fit the arena, see the top of this file), chunk by chunk
// through the classifier: per-position losses in acts.losses, and what `args` asks for.
void gpt2_forward(const Context& ctx, GPT2* model, const GPT2Batch& batch,
                  const GPT2ForwardArgs& args);

// Backward of the last gpt2_forward (run on `batch`, of the arena's shape, with
// backward_classifier), from the dlnf it left. accumulate: gradients accumulate (+=), as in the
// later micro-steps of gradient accumulation; false: every gradient is written, its old
// contents unread, as in a step's first micro-step (the forward took accumulate_grads = false
// too), so no zeroing pass is needed. The elements no backward writes (wpe's rows >= T) keep the
// zeros of gpt2_create. `zeroed`: the branch mark after which dresidual is zero (the training
// step's zeroing on the branch); null: the backward zeroes it on ctx.stream. `hook`, when given,
// hears of each finished gradient group.
void gpt2_backward(const Context& ctx, GPT2* model, const GPT2Batch& batch, bool accumulate,
                   cudaEvent_t zeroed, GradReadyHook* hook);

// Copies parameters (as fp32, model-file layout) back to the host.
void gpt2_download_params(const Context& ctx, const GPT2& model, std::vector<float>* out);
// Copies gradients (as fp32, model-file layout) back to the host.
void gpt2_download_grads(const Context& ctx, const GPT2& model, std::vector<float>* out);

// Training FLOPs per token, forward + backward: 6 * params + 12 * L * C * T (attention).
double gpt2_flops_per_token(const GPT2Config& cfg, int T);

}  // namespace llmc
