// gpt2_cpu.h: GPT-2 on the CPU in fp32, assembled from the ops of cpu_ops.h. It is the oracle
// of the GPU model test and a source of realistic per-op inputs for the per-op GPU tests.
//
// Architecture (pre-LN GPT-2): x = wte[tok] + wpe[t]; per layer
//   x = x + attproj(attention(qkv(ln1(x))));  x = x + fcproj(gelu(fc(ln2(x))))
// then lnf, logits = lnf(x) @ wte^T over all Vp rows (the padded rows of wte are zero), and
// loss = mean cross-entropy over the first V columns.
//
// Usage: load(); forward(inputs, targets, B, T) -> loss; zero_grad(); backward(); update(...).
// Parameters, gradients and AdamW moments are single vectors in the model file's layout.
#pragma once
#include <string>
#include <vector>

#include "model_file.h"

// Activations saved by forward for backward, for one (B, T). Per-layer tensors hold all L
// layers back to back (layer l at offset l * its per-layer size). N = B*T.
struct GPT2CpuActivations {
    std::vector<float> encoded;    // (N, C) wte[tok] + wpe[t]
    std::vector<float> ln1;        // (L, N, C)
    std::vector<float> ln1_mean;   // (L, N)
    std::vector<float> ln1_rstd;   // (L, N)
    std::vector<float> qkv;        // (L, N, 3C)
    std::vector<float> atty;       // (L, N, C) attention output before attproj
    std::vector<float> att_lse;    // (L, B, NH, T) log-sum-exp of each attention row
    std::vector<float> attproj;    // (L, N, C)
    std::vector<float> residual2;  // (L, N, C) after the attention residual add
    std::vector<float> ln2;        // (L, N, C)
    std::vector<float> ln2_mean;   // (L, N)
    std::vector<float> ln2_rstd;   // (L, N)
    std::vector<float> fch;        // (L, N, 4C) fc output before gelu
    std::vector<float> fch_gelu;   // (L, N, 4C)
    std::vector<float> fcproj;     // (L, N, C)
    std::vector<float> residual3;  // (L, N, C) after the MLP residual add (layer output)
    std::vector<float> lnf;        // (N, C)
    std::vector<float> lnf_mean;   // (N)
    std::vector<float> lnf_rstd;   // (N)
    std::vector<float> logits;     // (N, Vp)
    std::vector<float> losses;     // (N) per-position loss, filled when targets are given
};

struct GPT2Cpu {
    llmc::GPT2Config cfg;
    llmc::ParamLayout layout;
    std::vector<float> params;  // layout.total, model file layout
    std::vector<float> grads;   // layout.total, accumulated by backward
    std::vector<float> adam_m;  // layout.total, AdamW first moment
    std::vector<float> adam_v;  // layout.total, AdamW second moment
    GPT2CpuActivations acts;
    int B = 0, T = 0;          // shape of the last forward
    std::vector<int> inputs;   // (B, T) of the last forward
    std::vector<int> targets;  // (B, T) of the last forward; empty when none were given
    float mean_loss = -1.0f;   // of the last forward with targets

    // Reads a model file (fp32 or bf16) and zeroes grads and moments.
    void load(const std::string& path);
    // Sets up from a config and parameters already in memory (layout.total floats).
    void init(const llmc::GPT2Config& config, const std::vector<float>& parameters);

    float* param(int index) { return params.data() + layout.offsets[index]; }
    float* grad(int index) { return grads.data() + layout.offsets[index]; }

    // Runs the model on inputs (B, T); with targets (may be null) returns the mean loss over
    // the B*T positions, else -1. Logits stay in acts.logits, (B*T, Vp).
    float forward(const int* inputs, const int* targets, int B, int T);
    void zero_grad();
    // Accumulates the gradient of the last forward's mean loss into grads (needs targets).
    void backward();
    // Clips the global gradient norm to grad_clip (scale = min(1, clip / (norm + 1e-6)) as
    // torch.nn.utils.clip_grad_norm_; grad_clip <= 0 disables), then one AdamW step (step >= 1)
    // with weight decay only on the 2-D tensors. Returns the norm before clipping.
    float update(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_clip,
                 int step);
};
