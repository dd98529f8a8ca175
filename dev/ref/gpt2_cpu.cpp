// gpt2_cpu.cpp: the CPU GPT-2 of gpt2_cpu.h: forward, backward and the AdamW update, each a
// flat sequence of cpu_ops calls so the op order can be read against the GPU model.
#include "gpt2_cpu.h"

#include <algorithm>
#include <cmath>

#include "check.h"
#include "cpu_ops.h"

namespace {

// Pointers to one layer's slice of each per-layer tensor of a parameter-shaped buffer (params
// or grads), so forward and backward read the same way.
struct LayerTensors {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

LayerTensors layer_tensors(float* base, const llmc::ParamLayout& lay, int l, size_t C) {
    auto at = [&](int index, size_t per_layer) {
        return base + lay.offsets[index] + (size_t)l * per_layer;
    };
    LayerTensors t;
    t.ln1w = at(llmc::kLn1w, C);
    t.ln1b = at(llmc::kLn1b, C);
    t.qkvw = at(llmc::kQkvw, 3 * C * C);
    t.qkvb = at(llmc::kQkvb, 3 * C);
    t.attprojw = at(llmc::kAttprojw, C * C);
    t.attprojb = at(llmc::kAttprojb, C);
    t.ln2w = at(llmc::kLn2w, C);
    t.ln2b = at(llmc::kLn2b, C);
    t.fcw = at(llmc::kFcw, 4 * C * C);
    t.fcb = at(llmc::kFcb, 4 * C);
    t.fcprojw = at(llmc::kFcprojw, 4 * C * C);
    t.fcprojb = at(llmc::kFcprojb, C);
    return t;
}

void resize_activations(GPT2CpuActivations* a, const llmc::GPT2Config& cfg, int B, int T) {
    const size_t N = (size_t)B * T, C = cfg.channels, L = cfg.num_layers;
    a->encoded.resize(N * C);
    for (std::vector<float>* v :
         {&a->ln1, &a->atty, &a->attproj, &a->residual2, &a->ln2, &a->fcproj, &a->residual3}) {
        v->resize(L * N * C);
    }
    for (std::vector<float>* v : {&a->ln1_mean, &a->ln1_rstd, &a->ln2_mean, &a->ln2_rstd}) {
        v->resize(L * N);
    }
    a->qkv.resize(L * N * 3 * C);
    a->att_lse.resize(L * N * cfg.num_heads);
    a->fch.resize(L * N * 4 * C);
    a->fch_gelu.resize(L * N * 4 * C);
    a->lnf.resize(N * C);
    a->lnf_mean.resize(N);
    a->lnf_rstd.resize(N);
    a->logits.resize(N * cfg.padded_vocab_size);
    a->losses.resize(N);
}

}  // namespace

void GPT2Cpu::load(const std::string& path) {
    llmc::GPT2Config config;
    std::vector<float> parameters;
    llmc::read_model_file(path, &config, &parameters, nullptr);
    init(config, parameters);
}

void GPT2Cpu::init(const llmc::GPT2Config& config, const std::vector<float>& parameters) {
    std::string why;
    LLMC_CHECK(llmc::validate_config(config, &why), "bad GPT-2 config: %s.", why.c_str());
    cfg = config;
    layout = llmc::param_layout(cfg);
    LLMC_CHECK(parameters.size() == layout.total, "expected %zu parameters, got %zu.", layout.total,
               parameters.size());
    params = parameters;
    grads.assign(layout.total, 0.0f);
    adam_m.assign(layout.total, 0.0f);
    adam_v.assign(layout.total, 0.0f);
    B = T = 0;
}

float GPT2Cpu::forward(const int* in, const int* tgt, int b_size, int t_size) {
    LLMC_CHECK(b_size >= 1 && t_size >= 1 && t_size <= cfg.max_seq_len,
               "forward needs B >= 1 and 1 <= T <= maxT (%d); got B = %d, T = %d.", cfg.max_seq_len,
               b_size, t_size);
    B = b_size;
    T = t_size;
    const int N = B * T, C = cfg.channels, NH = cfg.num_heads, L = cfg.num_layers;
    const int V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    inputs.assign(in, in + N);
    if (tgt != nullptr) {
        targets.assign(tgt, tgt + N);
    } else {
        targets.clear();
    }
    for (int i = 0; i < N; i++) {
        LLMC_CHECK(in[i] >= 0 && in[i] < V, "input token %d at %d is outside [0, %d).", in[i], i,
                   V);
        LLMC_CHECK(tgt == nullptr || (tgt[i] >= 0 && tgt[i] < V),
                   "target token %d at %d is outside [0, %d).", tgt[i], i, V);
    }
    GPT2CpuActivations& a = acts;
    resize_activations(&a, cfg, B, T);
    cpu::encoder_forward(a.encoded.data(), in, param(llmc::kWte), param(llmc::kWpe), B, T, C);

    const size_t NC = (size_t)N * C;
    for (int l = 0; l < L; l++) {
        const LayerTensors p = layer_tensors(params.data(), layout, l, C);
        const float* residual = l == 0 ? a.encoded.data() : &a.residual3[(l - 1) * NC];
        float* ln1 = &a.ln1[l * NC];
        float* qkv = &a.qkv[l * 3 * NC];
        float* atty = &a.atty[l * NC];
        float* attproj = &a.attproj[l * NC];
        float* residual2 = &a.residual2[l * NC];
        float* ln2 = &a.ln2[l * NC];
        float* fch = &a.fch[l * 4 * NC];
        float* fch_gelu = &a.fch_gelu[l * 4 * NC];
        float* fcproj = &a.fcproj[l * NC];
        cpu::layernorm_forward(ln1, &a.ln1_mean[l * N], &a.ln1_rstd[l * N], residual, p.ln1w,
                               p.ln1b, N, C);
        cpu::matmul_forward(qkv, ln1, p.qkvw, p.qkvb, N, C, 3 * C);
        cpu::attention_forward(atty, &a.att_lse[(size_t)l * N * NH], qkv, B, T, C, NH);
        cpu::matmul_forward(attproj, atty, p.attprojw, p.attprojb, N, C, C);
        cpu::residual_forward(residual2, residual, attproj, NC);
        cpu::layernorm_forward(ln2, &a.ln2_mean[l * N], &a.ln2_rstd[l * N], residual2, p.ln2w,
                               p.ln2b, N, C);
        cpu::matmul_forward(fch, ln2, p.fcw, p.fcb, N, C, 4 * C);
        cpu::gelu_forward(fch_gelu, fch, 4 * NC);
        cpu::matmul_forward(fcproj, fch_gelu, p.fcprojw, p.fcprojb, N, 4 * C, C);
        cpu::residual_forward(&a.residual3[l * NC], residual2, fcproj, NC);
    }
    cpu::layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(),
                           &a.residual3[(L - 1) * NC], param(llmc::kLnfw), param(llmc::kLnfb), N,
                           C);
    cpu::matmul_forward(a.logits.data(), a.lnf.data(), param(llmc::kWte), nullptr, N, C, Vp);
    if (tgt == nullptr) {
        mean_loss = -1.0f;
        return mean_loss;
    }
    mean_loss = cpu::crossentropy_forward_backward(nullptr, a.losses.data(), a.logits.data(), tgt,
                                                   N, V, Vp, 0.0f);
    return mean_loss;
}

void GPT2Cpu::zero_grad() { std::fill(grads.begin(), grads.end(), 0.0f); }

void GPT2Cpu::backward() {
    LLMC_CHECK(B > 0 && !targets.empty(), "backward needs a forward with targets first.");
    const int N = B * T, C = cfg.channels, NH = cfg.num_heads, L = cfg.num_layers;
    const int V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    const size_t NC = (size_t)N * C;
    GPT2CpuActivations& a = acts;

    // The loss is a mean over N positions, so each position's loss enters with weight 1/N.
    std::vector<float> dlogits((size_t)N * Vp), scratch_losses(N);
    cpu::crossentropy_forward_backward(dlogits.data(), scratch_losses.data(), a.logits.data(),
                                       targets.data(), N, V, Vp, 1.0f / N);
    std::vector<float> dlnf(NC, 0.0f), dresidual(NC, 0.0f);
    cpu::matmul_backward(dlnf.data(), grad(llmc::kWte), nullptr, dlogits.data(), a.lnf.data(),
                         param(llmc::kWte), N, C, Vp);
    cpu::layernorm_backward(dresidual.data(), grad(llmc::kLnfw), grad(llmc::kLnfb), dlnf.data(),
                            &a.residual3[(L - 1) * NC], param(llmc::kLnfw), a.lnf_mean.data(),
                            a.lnf_rstd.data(), N, C);

    // dresidual carries the gradient of the residual stream: a residual add passes it through
    // unchanged to both branches, so each block adds its branch's input gradient into it.
    std::vector<float> dfch_gelu(4 * NC), dfch(4 * NC), dln(NC), datty(NC), dqkv(3 * NC);
    for (int l = L - 1; l >= 0; l--) {
        const LayerTensors p = layer_tensors(params.data(), layout, l, C);
        const LayerTensors g = layer_tensors(grads.data(), layout, l, C);
        const float* residual = l == 0 ? a.encoded.data() : &a.residual3[(l - 1) * NC];

        std::fill(dfch_gelu.begin(), dfch_gelu.end(), 0.0f);
        cpu::matmul_backward(dfch_gelu.data(), g.fcprojw, g.fcprojb, dresidual.data(),
                             &a.fch_gelu[l * 4 * NC], p.fcprojw, N, 4 * C, C);
        std::fill(dfch.begin(), dfch.end(), 0.0f);
        cpu::gelu_backward(dfch.data(), &a.fch[l * 4 * NC], dfch_gelu.data(), 4 * NC);
        std::fill(dln.begin(), dln.end(), 0.0f);
        cpu::matmul_backward(dln.data(), g.fcw, g.fcb, dfch.data(), &a.ln2[l * NC], p.fcw, N, C,
                             4 * C);
        cpu::layernorm_backward(dresidual.data(), g.ln2w, g.ln2b, dln.data(), &a.residual2[l * NC],
                                p.ln2w, &a.ln2_mean[l * N], &a.ln2_rstd[l * N], N, C);

        std::fill(datty.begin(), datty.end(), 0.0f);
        cpu::matmul_backward(datty.data(), g.attprojw, g.attprojb, dresidual.data(),
                             &a.atty[l * NC], p.attprojw, N, C, C);
        cpu::attention_backward(dqkv.data(), datty.data(), &a.qkv[l * 3 * NC], &a.atty[l * NC],
                                &a.att_lse[(size_t)l * N * NH], B, T, C, NH);
        std::fill(dln.begin(), dln.end(), 0.0f);
        cpu::matmul_backward(dln.data(), g.qkvw, g.qkvb, dqkv.data(), &a.ln1[l * NC], p.qkvw, N, C,
                             3 * C);
        cpu::layernorm_backward(dresidual.data(), g.ln1w, g.ln1b, dln.data(), residual, p.ln1w,
                                &a.ln1_mean[l * N], &a.ln1_rstd[l * N], N, C);
    }
    cpu::encoder_backward(grad(llmc::kWte), grad(llmc::kWpe), dresidual.data(), inputs.data(), B, T,
                          C);
}

float GPT2Cpu::update(float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_clip, int step) {
    LLMC_CHECK(step >= 1, "AdamW step must be >= 1, got %d.", step);
    const double norm = std::sqrt(cpu::sum_of_squares(grads.data(), grads.size()));
    double scale = 1.0;
    if (grad_clip > 0.0f) scale = std::min(1.0, grad_clip / (norm + 1e-6));
    for (int i = 0; i < llmc::kNumParamTensors; i++) {
        const size_t off = layout.offsets[i];
        const float wd = llmc::param_is_decayed(i) ? weight_decay : 0.0f;
        cpu::adamw(params.data() + off, adam_m.data() + off, adam_v.data() + off,
                   grads.data() + off, layout.sizes[i], lr, beta1, beta2, eps, wd, step,
                   (float)scale);
    }
    return (float)norm;
}
