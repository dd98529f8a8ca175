// gpt2.cu: buffers of the GPT-2 model and its forward and backward passes.
// The training step and its CUDA graph are in gpt2_step.cu.
#include <algorithm>
#include <cstring>

#include "attention.cuh"
#include "classifier.cuh"
#include "encoder.cuh"
#include "global_norm.cuh"
#include "gpt2.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "nvtx.h"

using namespace llmc;

namespace {

// Hands out 256-byte aligned pieces of one allocation: first plan (base == nullptr) to learn
// the total, then carve the same sequence again from the real base.
class ArenaCarver {
  public:
    explicit ArenaCarver(char* base) : base_(base) {}
    template <typename T>
    T* take(size_t count) {
        size_t bytes = (count * sizeof(T) + 255) & ~size_t(255);
        T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
        used_ += bytes;
        return p;
    }
    void* take_bytes(size_t bytes) { return take<char>(bytes); }
    size_t used() const { return used_; }

  private:
    char* base_;
    size_t used_ = 0;
};

void carve_activations(const Context& ctx, const GPT2Config& cfg, int B, int T, ArenaCarver* a,
                       GPT2Activations* acts) {
    const size_t N = (size_t)B * T, C = cfg.channels, L = cfg.num_layers, NH = cfg.num_heads;
    acts->encoded = a->take<floatX>(N * C);
    acts->ln1 = a->take<floatX>(L * N * C);
    acts->ln1_mean = a->take<float>(L * N);
    acts->ln1_rstd = a->take<float>(L * N);
    acts->qkv = a->take<floatX>(L * N * 3 * C);
    acts->atty = a->take<floatX>(L * N * C);
    acts->att_lse = a->take<float>(L * NH * N);
    acts->residual2 = a->take<floatX>(L * N * C);
    acts->ln2 = a->take<floatX>(L * N * C);
    acts->ln2_mean = a->take<float>(L * N);
    acts->ln2_rstd = a->take<float>(L * N);
    acts->fch = a->take<floatX>(L * N * 4 * C);
    acts->fch_gelu = a->take<floatX>(L * N * 4 * C);
    acts->residual3 = a->take<floatX>(L * N * C);
    acts->lnf = a->take<floatX>(N * C);
    acts->lnf_mean = a->take<float>(N);
    acts->lnf_rstd = a->take<float>(N);
    acts->logits = a->take<floatX>(N * cfg.padded_vocab_size);
    acts->losses = a->take<float>(N);
    acts->proj_out = a->take<floatX>(N * C);
    acts->dresidual = a->take<floatX>(N * C);
    acts->dln = a->take<floatX>(N * C);
    acts->datty = a->take<floatX>(N * C);
    acts->dqkv = a->take<floatX>(N * 3 * C);
    acts->dfch = a->take<floatX>(N * 4 * C);
    acts->dbias_scratch = a->take<float>(std::max<size_t>(4 * C, cfg.padded_vocab_size));
    acts->att_scratch = a->take_bytes(attention_scratch_bytes(B, T, (int)C, (int)NH));
    acts->enc_scratch = a->take_bytes(encoder_backward_scratch_bytes(B, T));
    acts->ln_scratch = a->take_bytes(layernorm_backward_scratch_bytes(ctx, (int)N, (int)C));
    acts->norm_scratch = a->take_bytes(global_norm_scratch_bytes(ctx));
}

// The 16 tensors of a flat buffer (parameters or gradients), in model-file order.
void point_tensors(floatX* base, const ParamLayout& layout, floatX** out) {
    for (int i = 0; i < kNumParamTensors; i++) out[i] = base + layout.offsets[i];
}

// Element offset of layer l's slice of a per-layer tensor.
size_t layer_slice(const ParamLayout& layout, int index, int l, int L) {
    return layout.sizes[index] / L * l;
}

}  // namespace

GPT2::~GPT2() {
    if (graph) cudaGraphExecDestroy(graph);
    cudaFree(params);
    cudaFree(grads);
    cudaFree(opt_state);
    cudaFree(act_memory);
    cudaFree(d_tokens);
    cudaFree(d_step_values);
    cudaFree(d_results);
    cudaFreeHost(io.tokens);
    cudaFreeHost(io.step_values);
    cudaFreeHost(io.results);
}

void gpt2_create(const Context& ctx, GPT2* m, const GPT2Config& cfg,
                 const std::vector<float>& host_params, int B, int T, int grad_accum,
                 const AdamWHyper& hyper) {
    std::string why;
    LLMC_CHECK(validate_config(cfg, &why), "bad model config: %s", why.c_str());
    LLMC_CHECK(B >= 1 && T >= 1 && T <= cfg.max_seq_len,
               "batch shape B=%d T=%d does not fit the model (1 <= T <= maxT = %d)", B, T,
               cfg.max_seq_len);
    LLMC_CHECK(grad_accum >= 1, "gradient accumulation steps must be >= 1, got %d", grad_accum);
    m->cfg = cfg;
    m->layout = param_layout(cfg);
    LLMC_CHECK(host_params.size() == m->layout.total,
               "parameter count %zu does not match the config (%zu)", host_params.size(),
               m->layout.total);
    m->B = B, m->T = T, m->grad_accum = grad_accum, m->hyper = hyper;
    m->num_params = m->layout.total;
    const size_t n = m->num_params;

    CUDA_CHECK(cudaMalloc(&m->params, n * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&m->grads, n * sizeof(floatX)));
    point_tensors(m->params, m->layout, m->param);
    point_tensors(m->grads, m->layout, m->grad);
    const bool with_master = sizeof(floatX) != sizeof(float);
    CUDA_CHECK(cudaMalloc(&m->opt_state, (with_master ? 3 : 2) * n * sizeof(float)));
    m->adam_m = m->opt_state;
    m->adam_v = m->opt_state + n;
    m->master = with_master ? m->opt_state + 2 * n : nullptr;
    CUDA_CHECK(cudaMemsetAsync(m->opt_state, 0, 2 * n * sizeof(float), ctx.stream));
    CUDA_CHECK(cudaMemsetAsync(m->grads, 0, n * sizeof(floatX), ctx.stream));

    // Parameters: fp32 from the host; the bf16 build keeps them as master weights and rounds.
    std::vector<floatX> converted(n);
    for (size_t i = 0; i < n; i++) converted[i] = from_float<floatX>(host_params[i]);
    CUDA_CHECK(cudaMemcpy(m->params, converted.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    if (with_master) {
        CUDA_CHECK(
            cudaMemcpy(m->master, host_params.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    }

    ArenaCarver plan(nullptr);
    carve_activations(ctx, cfg, B, T, &plan, &m->acts);
    m->act_bytes = plan.used();
    CUDA_CHECK(cudaMalloc(&m->act_memory, m->act_bytes));
    ArenaCarver carve(static_cast<char*>(m->act_memory));
    carve_activations(ctx, cfg, B, T, &carve, &m->acts);

    const size_t tokens = (size_t)grad_accum * 2 * B * T;
    CUDA_CHECK(cudaMalloc(&m->d_tokens, tokens * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&m->d_step_values, sizeof(AdamWStepValues)));
    CUDA_CHECK(cudaMalloc(&m->d_results, 2 * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&m->io.tokens, tokens * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&m->io.step_values, sizeof(AdamWStepValues)));
    CUDA_CHECK(cudaMallocHost(&m->io.results, 2 * sizeof(float)));
    std::memset(m->io.tokens, 0, tokens * sizeof(int));
    m->io.step_values->lr = 0.0f;
    m->io.step_values->step = 1;

    m->tensors.count = kNumParamTensors;
    for (int i = 0; i < kNumParamTensors; i++) {
        m->tensors.offsets[i] = m->layout.offsets[i];
        m->tensors.decayed[i] = param_is_decayed(i) ? 1 : 0;
    }
    m->tensors.offsets[kNumParamTensors] = n;
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

void gpt2_forward(const Context& ctx, GPT2* m, const int* d_inputs, const int* d_targets,
                  float* d_loss, float loss_scale, bool write_dlogits) {
    NvtxRange range("forward");
    const GPT2Config& cfg = m->cfg;
    const int B = m->B, T = m->T, N = B * T, C = cfg.channels, L = cfg.num_layers;
    const int NH = cfg.num_heads, Vp = cfg.padded_vocab_size;
    GPT2Activations& a = m->acts;
    floatX* const* p = m->param;
    const ParamLayout& lay = m->layout;

    encoder_forward(ctx, a.encoded, d_inputs, p[kWte], p[kWpe], B, T, C);
    layernorm_forward(ctx, a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, p[kLn1w], p[kLn1b], N, C);
    for (int l = 0; l < L; l++) {
        NvtxRange layer_range("forward layer", l);
        const size_t nc = (size_t)l * N * C;
        const floatX* residual = l == 0 ? a.encoded : a.residual3 + nc - (size_t)N * C;
        floatX* qkv = a.qkv + nc * 3;
        matmul_forward(ctx, qkv, a.ln1 + nc, p[kQkvw] + layer_slice(lay, kQkvw, l, L),
                       p[kQkvb] + layer_slice(lay, kQkvb, l, L), N, C, 3 * C);
        attention_forward(ctx, a.atty + nc, a.att_lse + (size_t)l * NH * N, a.att_scratch, qkv, B,
                          T, C, NH);
        matmul_forward(ctx, a.proj_out, a.atty + nc,
                       p[kAttprojw] + layer_slice(lay, kAttprojw, l, L),
                       p[kAttprojb] + layer_slice(lay, kAttprojb, l, L), N, C, C);
        fused_residual_layernorm_forward(ctx, a.residual2 + nc, a.ln2 + nc,
                                         a.ln2_mean + (size_t)l * N, a.ln2_rstd + (size_t)l * N,
                                         residual, a.proj_out, p[kLn2w] + l * C, p[kLn2b] + l * C,
                                         N, C);
        matmul_forward(ctx, a.fch_gelu + nc * 4, a.ln2 + nc, p[kFcw] + layer_slice(lay, kFcw, l, L),
                       p[kFcb] + layer_slice(lay, kFcb, l, L), N, C, 4 * C, a.fch + nc * 4);
        matmul_forward(ctx, a.proj_out, a.fch_gelu + nc * 4,
                       p[kFcprojw] + layer_slice(lay, kFcprojw, l, L),
                       p[kFcprojb] + layer_slice(lay, kFcprojb, l, L), N, 4 * C, C);
        // The residual add is fused with the next layernorm: ln1 of the next layer, or lnf.
        const bool last = l == L - 1;
        floatX* ln_out = last ? a.lnf : a.ln1 + nc + (size_t)N * C;
        float* mean = last ? a.lnf_mean : a.ln1_mean + (size_t)(l + 1) * N;
        float* rstd = last ? a.lnf_rstd : a.ln1_rstd + (size_t)(l + 1) * N;
        const floatX* w = last ? p[kLnfw] : p[kLn1w] + (l + 1) * C;
        const floatX* b = last ? p[kLnfb] : p[kLn1b] + (l + 1) * C;
        fused_residual_layernorm_forward(ctx, a.residual3 + nc, ln_out, mean, rstd,
                                         a.residual2 + nc, a.proj_out, w, b, N, C);
    }
    matmul_forward(ctx, a.logits, a.lnf, p[kWte], nullptr, N, C, Vp);
    const float dloss = 1.0f / ((float)N * (float)m->grad_accum);
    fused_classifier(ctx, a.logits, a.losses, d_targets, dloss, N, cfg.vocab_size, Vp,
                     write_dlogits);
    if (d_loss != nullptr) loss_accumulate(ctx, d_loss, a.losses, N, loss_scale);
}

// Backward of the forward above; gradients accumulate into m->grads. Needs the activations of
// the forward pass just run with write_dlogits = true.
void gpt2_backward(const Context& ctx, GPT2* m, const int* d_inputs) {
    NvtxRange range("backward");
    const GPT2Config& cfg = m->cfg;
    const int B = m->B, T = m->T, N = B * T, C = cfg.channels, L = cfg.num_layers;
    const int NH = cfg.num_heads, Vp = cfg.padded_vocab_size;
    GPT2Activations& a = m->acts;
    floatX* const* p = m->param;
    floatX* const* g = m->grad;
    const ParamLayout& lay = m->layout;

    // Classifier: dlnf = dlogits @ wte, dwte += dlogits^T @ lnf.
    matmul_backward(ctx, a.dln, g[kWte], nullptr, nullptr, a.logits, a.lnf, p[kWte], N, C, Vp);
    CUDA_CHECK(cudaMemsetAsync(a.dresidual, 0, (size_t)N * C * sizeof(floatX), ctx.stream));
    layernorm_backward(ctx, a.dresidual, g[kLnfw], g[kLnfb], a.ln_scratch, a.dln,
                       a.residual3 + (size_t)(L - 1) * N * C, p[kLnfw], a.lnf_mean, a.lnf_rstd, N,
                       C);
    for (int l = L - 1; l >= 0; l--) {
        NvtxRange layer_range("backward layer", l);
        const size_t nc = (size_t)l * N * C;
        const floatX* residual = l == 0 ? a.encoded : a.residual3 + nc - (size_t)N * C;
        // MLP: dresidual is dL/d(residual3), the gradient of the fcproj output too.
        matmul_backward(ctx, a.dfch, g[kFcprojw] + layer_slice(lay, kFcprojw, l, L),
                        g[kFcprojb] + layer_slice(lay, kFcprojb, l, L), a.dbias_scratch,
                        a.dresidual, a.fch_gelu + nc * 4,
                        p[kFcprojw] + layer_slice(lay, kFcprojw, l, L), N, 4 * C, C,
                        a.fch + nc * 4);
        matmul_backward(ctx, a.dln, g[kFcw] + layer_slice(lay, kFcw, l, L),
                        g[kFcb] + layer_slice(lay, kFcb, l, L), a.dbias_scratch, a.dfch, a.ln2 + nc,
                        p[kFcw] + layer_slice(lay, kFcw, l, L), N, C, 4 * C);
        layernorm_backward(ctx, a.dresidual, g[kLn2w] + l * C, g[kLn2b] + l * C, a.ln_scratch,
                           a.dln, a.residual2 + nc, p[kLn2w] + l * C, a.ln2_mean + (size_t)l * N,
                           a.ln2_rstd + (size_t)l * N, N, C);
        // Attention: dresidual is now dL/d(residual2), the gradient of the attproj output.
        matmul_backward(ctx, a.datty, g[kAttprojw] + layer_slice(lay, kAttprojw, l, L),
                        g[kAttprojb] + layer_slice(lay, kAttprojb, l, L), a.dbias_scratch,
                        a.dresidual, a.atty + nc, p[kAttprojw] + layer_slice(lay, kAttprojw, l, L),
                        N, C, C);
        attention_backward(ctx, a.dqkv, a.att_scratch, a.datty, a.qkv + nc * 3, a.atty + nc,
                           a.att_lse + (size_t)l * NH * N, B, T, C, NH);
        matmul_backward(ctx, a.dln, g[kQkvw] + layer_slice(lay, kQkvw, l, L),
                        g[kQkvb] + layer_slice(lay, kQkvb, l, L), a.dbias_scratch, a.dqkv,
                        a.ln1 + nc, p[kQkvw] + layer_slice(lay, kQkvw, l, L), N, C, 3 * C);
        layernorm_backward(ctx, a.dresidual, g[kLn1w] + l * C, g[kLn1b] + l * C, a.ln_scratch,
                           a.dln, residual, p[kLn1w] + l * C, a.ln1_mean + (size_t)l * N,
                           a.ln1_rstd + (size_t)l * N, N, C);
    }
    encoder_backward(ctx, g[kWte], g[kWpe], a.enc_scratch, a.dresidual, d_inputs, B, T, C);
}

namespace {
void download_as_float(const Context& ctx, const floatX* src, size_t n, std::vector<float>* out) {
    std::vector<floatX> tmp(n);
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    CUDA_CHECK(cudaMemcpy(tmp.data(), src, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    out->resize(n);
    for (size_t i = 0; i < n; i++) (*out)[i] = to_float(tmp[i]);
}
}  // namespace

void gpt2_download_params(const Context& ctx, const GPT2& m, std::vector<float>* out) {
    download_as_float(ctx, m.params, m.num_params, out);
}

void gpt2_download_grads(const Context& ctx, const GPT2& m, std::vector<float>* out) {
    download_as_float(ctx, m.grads, m.num_params, out);
}

double gpt2_flops_per_token(const GPT2Config& cfg, int T) {
    const ParamLayout lay = param_layout(cfg);
    // 6 FLOPs per parameter per token (2 forward, 4 backward) plus the attention matrices:
    // QK^T and PV cost 2 * 2 * T * C per token per layer forward, three times that in total.
    return 6.0 * (double)lay.total + 12.0 * cfg.num_layers * (double)cfg.channels * T;
}
