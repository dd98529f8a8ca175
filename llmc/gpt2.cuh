// gpt2.cuh: the GPT-2 model on the GPU: buffers, forward, backward, and the training step.
//
// Memory: one allocation for all parameters, one for all gradients, one for the optimizer state
// (AdamW moments, and fp32 master weights in the bf16 build), one for all activations and
// scratch, each sized from the config and the micro-batch shape (B, T) at creation.
//
// One training step (gpt2_step) = copy the step's tokens and per-step values in, zero the
// gradients and the loss, forward + backward for each of grad_accum micro-batches (gradients
// summed), global gradient norm, AdamW (with clipping), and an async copy of loss and norm to
// pinned host memory. It runs on ctx.stream with no host synchronisation; after one eager
// warm-up step it is captured into a CUDA graph and replayed (use_graph).
#pragma once
#include <vector>

#include "adamw.cuh"
#include "context.cuh"
#include "model_file.h"
#include "precision.cuh"

struct GPT2Activations {
    floatX* encoded;    // (N, C)     residual stream entering layer 0
    floatX* ln1;        // (L, N, C)
    float* ln1_mean;    // (L, N)
    float* ln1_rstd;    // (L, N)
    floatX* qkv;        // (L, N, 3C)
    floatX* atty;       // (L, N, C)
    float* att_lse;     // (L, B, NH, T)
    floatX* residual2;  // (L, N, C)  after attention
    floatX* ln2;        // (L, N, C)
    float* ln2_mean;    // (L, N)
    float* ln2_rstd;    // (L, N)
    floatX* fch;        // (L, N, 4C) GELU input
    floatX* fch_gelu;   // (L, N, 4C)
    floatX* residual3;  // (L, N, C)  after the MLP
    floatX* lnf;        // (N, C)
    float* lnf_mean;    // (N)
    float* lnf_rstd;    // (N)
    floatX* logits;     // (N, Vp)    dlogits after the classifier's backward pass
    float* losses;      // (N)
    floatX* proj_out;   // (N, C)     output of a projection before its residual add
    // backward scratch, reused by every layer
    floatX* dresidual;     // (N, C)
    floatX* dln;           // (N, C)
    floatX* datty;         // (N, C)
    floatX* dqkv;          // (N, 3C)
    floatX* dfch;          // (N, 4C)
    float* dbias_scratch;  // (max(4C, Vp))
    void* att_scratch;
    void* enc_scratch;
    void* ln_scratch;
    void* norm_scratch;
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
    size_t num_params = 0;
    floatX* params = nullptr;    // one allocation
    floatX* grads = nullptr;     // one allocation
    float* opt_state = nullptr;  // m, v (and master in bf16): one allocation
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

    GPT2() = default;
    GPT2(const GPT2&) = delete;
    GPT2& operator=(const GPT2&) = delete;
    ~GPT2();
};

// Allocates everything for micro-batches of (B, T) with grad_accum micro-steps per step and
// uploads `host_params` (fp32, model-file layout).
void gpt2_create(const Context& ctx, GPT2* model, const llmc::GPT2Config& cfg,
                 const std::vector<float>& host_params, int B, int T, int grad_accum,
                 const AdamWHyper& hyper);

// Forward only on inputs/targets already in device memory (B*T each); losses per position in
// acts.losses and logits in acts.logits; *d_loss (device) += mean loss * loss_scale.
void gpt2_forward(const Context& ctx, GPT2* model, const int* d_inputs, const int* d_targets,
                  float* d_loss, float loss_scale, bool write_dlogits);

// Backward of the last gpt2_forward (run with write_dlogits); gradients accumulate (+=).
void gpt2_backward(const Context& ctx, GPT2* model, const int* d_inputs);

// Enqueues one whole training step on ctx.stream using io.tokens and io.step_values, which
// the caller fills before the call. With use_graph the step runs from a CUDA graph (captured on
// the first call after one eager warm-up step). Returns without synchronising; the results
// land in io.results once the stream reaches the end of the step.
void gpt2_step(const Context& ctx, GPT2* model, bool use_graph);

// Forward-only evaluation of one batch held in io.tokens (micro-batch 0); synchronises and
// returns the mean loss.
float gpt2_eval_loss(const Context& ctx, GPT2* model);

// Copies parameters (as fp32, model-file layout) back to the host.
void gpt2_download_params(const Context& ctx, const GPT2& model, std::vector<float>* out);
// Copies gradients (as fp32, model-file layout) back to the host.
void gpt2_download_grads(const Context& ctx, const GPT2& model, std::vector<float>* out);

// Training FLOPs per token, forward + backward: 6 * params + 12 * L * C * T (attention).
double gpt2_flops_per_token(const llmc::GPT2Config& cfg, int T);
