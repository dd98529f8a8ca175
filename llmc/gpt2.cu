// gpt2.cu: buffers of the GPT-2 model and its forward and backward passes (see gpt2.cuh).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "attention.cuh"
#include "classifier.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "global_norm.cuh"
#include "gpt2.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "matmul_sm90.cuh"
#include "nvtx.h"

namespace llmc {
namespace {

// Hands out 256-byte aligned pieces of one allocation: first plan (base == nullptr) to learn
// the total, then carve the same sequence again from the real base. With `parts` it also
// records each piece's bytes under its name (the memory report).
class ArenaCarver {
  public:
    ArenaCarver(char* base, std::vector<std::pair<std::string, size_t>>* parts = nullptr)
        : base_(base), parts_(parts) {}
    template <typename T>
    T* take(size_t count, const char* name) {
        size_t bytes = (count * sizeof(T) + 255) & ~size_t(255);
        T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
        used_ += bytes;
        if (parts_ != nullptr) record(name, bytes);
        return p;
    }
    void* take_bytes(size_t bytes, const char* name) { return take<char>(bytes, name); }
    // `layers` slices of `elems` T each, every slice 256-byte aligned (LayerSlices).
    template <typename T = floatX>
    LayerSlices<T> take_layers(size_t layers, size_t elems, const char* name) {
        LayerSlices<T> t;
        t.stride = ((elems * sizeof(T) + 255) & ~size_t(255)) / sizeof(T);
        t.base = take<T>(layers * t.stride, name);
        if (layers == 1) t.stride = 0;  // one buffer, shared by every layer
        return t;
    }
    size_t used() const { return used_; }

  private:
    void record(const char* name, size_t bytes) {
        for (auto& part : *parts_) {
            if (part.first == name) {
                part.second += bytes;
                return;
            }
        }
        parts_->emplace_back(name, bytes);
    }
    char* base_;
    std::vector<std::pair<std::string, size_t>>* parts_;
    size_t used_ = 0;
};

void carve_activations(const Context& ctx, const GPT2Config& cfg, int B, int T,
                       const GPT2Options& opts, ArenaCarver* a, GPT2Activations* acts) {
    const size_t N = (size_t)B * T, C = cfg.channels, L = cfg.num_layers, NH = cfg.num_heads;
    const size_t Vp = cfg.padded_vocab_size;
    // Layers that keep their own GELU output / layernorm outputs; 1 = one shared buffer.
    const size_t gelu_layers = opts.recompute >= 1 ? 1 : L;
    const bool share_ln = opts.recompute >= 2;
    acts->encoded = a->take<floatX>(N * C, "encoded");
    acts->ln1 = a->take_layers(share_ln ? 1 : L, N * C, share_ln ? "ln1+ln2 (shared)" : "ln1");
    acts->ln1_mean = a->take_layers<float>(L, N, "layernorm statistics");
    acts->ln1_rstd = a->take_layers<float>(L, N, "layernorm statistics");
    acts->qkv = a->take_layers(L, N * 3 * C, "qkv");
    acts->atty = a->take_layers(L, N * C, "atty");
    acts->att_lse = a->take_layers<float>(L, NH * N, "attention lse");
    acts->residual2 = a->take_layers(L, N * C, "residual2");
    acts->ln2 = share_ln ? acts->ln1 : a->take_layers(L, N * C, "ln2");
    acts->ln2_mean = a->take_layers<float>(L, N, "layernorm statistics");
    acts->ln2_rstd = a->take_layers<float>(L, N, "layernorm statistics");
    acts->fch = a->take_layers(L, N * 4 * C, "fch");
    acts->fch_gelu =
        a->take_layers(gelu_layers, N * 4 * C, gelu_layers == 1 ? "fch_gelu (shared)" : "fch_gelu");
    acts->residual3 = a->take_layers(L, N * C, "residual3");
    acts->lnf = a->take<floatX>(N * C, "lnf");
    acts->lnf_mean = a->take<float>(N, "layernorm statistics");
    acts->lnf_rstd = a->take<float>(N, "layernorm statistics");
    acts->logits =
        a->take<floatX>((size_t)gpt2_classifier_chunk_rows(opts, B, T) * Vp, "logits chunk");
    acts->losses = a->take<float>(N, "losses");
    acts->lnf_row = a->take<floatX>(C, "sampling row");
    acts->logits_row = a->take<floatX>(Vp, "sampling row");
    acts->dresidual = a->take<floatX>(N * C, "backward scratch");
    acts->dln = a->take<floatX>(N * C, "backward scratch");
    acts->datty = a->take<floatX>(N * C, "backward scratch");
    acts->dqkv = a->take<floatX>(N * 3 * C, "backward scratch");
    acts->dfch = a->take<floatX>(N * 4 * C, "backward scratch");
    acts->dbias_scratch = a->take<float>(matmul_bias_scratch_floats(4 * C), "backward scratch");
    acts->dgelu_bias_scratch =
        a->take<float>(matmul_gelu_bias_scratch_floats((int)N, 4 * C), "backward scratch");
    acts->recompute_mean = share_ln ? a->take<float>(N, "layernorm statistics") : nullptr;
    acts->recompute_rstd = share_ln ? a->take<float>(N, "layernorm statistics") : nullptr;
    acts->att_scratch =
        a->take_bytes(attention_scratch_bytes(B, T, (int)C, (int)NH), "attention scores");
    acts->enc_scratch =
        a->take_bytes(encoder_backward_scratch_bytes(B, T, (int)C), "other scratch");
    acts->ln_scratch =
        a->take_bytes(layernorm_backward_scratch_bytes(ctx, (int)N, (int)C), "other scratch");
    acts->norm_scratch = a->take_bytes(global_norm_scratch_bytes(ctx), "other scratch");
}

// The 16 tensors of a flat buffer (parameters or gradients), in model-file order.
void point_tensors(floatX* base, const ParamLayout& layout, floatX** out) {
    for (int i = 0; i < kNumParamTensors; i++) out[i] = base + layout.offsets[i];
}

// What a linear layer's input gradient does besides dinp (linear_backward): nothing by default;
// with pre_gelu, the GELU layer's derivative, and with gelu_dbias and gelu_done too, *gelu_done
// tells whether it also added the GELU layer's bias gradient to gelu_dbias
// (matmul_backward_input); with row_stats, the attention backward's row statistics
// (row_stats_gemm_backward; inp is then the attention output they are taken with).
struct InputEpilogue {
    const floatX* pre_gelu = nullptr;
    floatX* gelu_dbias = nullptr;
    float* gelu_dbias_scratch = nullptr;
    bool* gelu_done = nullptr;
    const RowStatsTarget* row_stats = nullptr;
};

// A linear layer's input gradient with its epilogue's options.
void linear_backward_input(const Context& ctx, bool accumulate, floatX* dinp, const floatX* dout,
                           const floatX* inp, const floatX* weight, int N, int IC, int OC,
                           const InputEpilogue& ep) {
    if (ep.row_stats != nullptr) {
        row_stats_gemm_backward(ctx, dinp, *ep.row_stats, dout, weight, inp, N, IC, OC);
    } else {
        const bool fused = matmul_backward_input(ctx, dinp, dout, weight, N, IC, OC, ep.pre_gelu,
                                                 ep.gelu_dbias, ep.gelu_dbias_scratch, accumulate);
        if (ep.gelu_done != nullptr) *ep.gelu_done = fused;
    }
}

// A linear layer's backward (matmul.cuh), split: with the weight gradient on the branch it is
// enqueued first, so that it runs beside the input gradient, and its mark is returned; otherwise
// the input gradient and then the weight gradient run on ctx.stream and the mark is null.
cudaEvent_t linear_backward(const Context& ctx, bool weight_on_branch, bool accumulate,
                            floatX* dinp, floatX* dweight, floatX* dbias, float* dbias_scratch,
                            const floatX* dout, const floatX* inp, const floatX* weight, int N,
                            int IC, int OC, const InputEpilogue& ep = InputEpilogue{}) {
    cudaEvent_t done = nullptr;
    if (weight_on_branch) {
        matmul_backward_weight(ctx, dweight, dbias, dbias_scratch, dout, inp, N, IC, OC, true,
                               accumulate);
        done = branch_mark(ctx);
    }
    linear_backward_input(ctx, accumulate, dinp, dout, inp, weight, N, IC, OC, ep);
    if (!weight_on_branch) {
        matmul_backward_weight(ctx, dweight, dbias, dbias_scratch, dout, inp, N, IC, OC, false,
                               accumulate);
    }
    return done;
}

// Element offset of layer l's slice of a per-layer tensor.
size_t layer_slice(const ParamLayout& layout, int index, int l, int L) {
    return layout.sizes[index] / L * l;
}

}  // namespace

bool gpt2_shape_supported(const GPT2Config& cfg, int B, int T, std::string* why) {
    if (!validate_config(cfg, why)) {
        *why = "bad model config: " + *why;
        return false;
    }
    const int C = cfg.channels, NH = cfg.num_heads;
    char buf[400];
    const char* rule = "";
    if (B < 1 || T < 1 || T > cfg.max_seq_len) {
        std::snprintf(buf, sizeof(buf),
                      "batch shape B=%d T=%d does not fit the model: use B >= 1 and 1 <= T <= "
                      "maxT = %d",
                      B, T, cfg.max_seq_len);
    } else if (!attention_supports_head_size(C, NH, &rule)) {
        std::snprintf(buf, sizeof(buf), "the model's head size C/NH = %d/%d is not supported: %s",
                      C, NH, rule);
    } else if (sizeof(floatX) == 4 && C % 4 != 0) {
        // Per-layer slices of the packed parameters start at multiples of C floats; cuBLASLt's
        // bias epilogues read the bias slices with vector loads that need 16 bytes.
        std::snprintf(buf, sizeof(buf),
                      "the fp32 build needs C (%d) to be a multiple of 4, so that every parameter "
                      "slice starts on a 16-byte boundary",
                      C);
    } else if (C > layernorm_max_channels()) {
        std::snprintf(buf, sizeof(buf),
                      "C = %d is wider than the layernorm backward takes (at most %d channels)", C,
                      layernorm_max_channels());
    } else if ((long long)B * T * 4 * C >= (1ll << 31)) {
        std::snprintf(buf, sizeof(buf), "B*T*4C = %lld does not fit in an int: lower B or T",
                      (long long)B * T * 4 * C);
    } else {
        return true;
    }
    *why = buf;
    return false;
}

size_t gpt2_activation_bytes(const Context& ctx, const GPT2Config& cfg, int B, int T,
                             const GPT2Options& opts,
                             std::vector<std::pair<std::string, size_t>>* parts) {
    ArenaCarver carver(nullptr, parts);
    GPT2Activations acts{};
    carve_activations(ctx, cfg, B, T, opts, &carver, &acts);
    return carver.used();
}

int gpt2_classifier_chunk_rows(const GPT2Options& opts, int B, int T) {
    return std::min(opts.classifier_chunk_rows, B * T);
}

GPT2::~GPT2() {
    cudaFree(params);
    cudaFree(grads);
    cudaFree(act_memory);
}

void gpt2_create(const Context& ctx, GPT2* m, const GPT2Config& cfg,
                 const std::vector<float>& host_params, int B, int T, const GPT2Options& opts) {
    std::string why;
    LLMC_CHECK(gpt2_shape_supported(cfg, B, T, &why), "%s", why.c_str());
    LLMC_CHECK(opts.recompute >= 0 && opts.recompute <= 2, "recompute must be 0, 1 or 2, got %d",
               opts.recompute);
    LLMC_CHECK(opts.classifier_chunk_rows >= 1, "classifier chunk rows must be >= 1, got %d",
               opts.classifier_chunk_rows);
    m->cfg = cfg;
    m->layout = param_layout(cfg);
    LLMC_CHECK(host_params.size() == m->layout.total,
               "parameter count %zu does not match the config (%zu)", host_params.size(),
               m->layout.total);
    m->B = B, m->T = T, m->opts = opts;
    m->chunk_rows = gpt2_classifier_chunk_rows(opts, B, T);
    m->num_params = m->layout.total;
    const size_t n = m->num_params;

    device_alloc(reinterpret_cast<void**>(&m->params), n * sizeof(floatX), "parameters");
    device_alloc(reinterpret_cast<void**>(&m->grads), n * sizeof(floatX), "gradients");
    point_tensors(m->params, m->layout, m->param);
    point_tensors(m->grads, m->layout, m->grad);
    LLMC_CUDA_CHECK(cudaMemsetAsync(m->grads, 0, n * sizeof(floatX), ctx.stream));
    std::vector<floatX> converted(n);
    for (size_t i = 0; i < n; i++) converted[i] = from_float<floatX>(host_params[i]);
    LLMC_CUDA_CHECK(
        cudaMemcpy(m->params, converted.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));

    m->act_bytes = gpt2_activation_bytes(ctx, cfg, B, T, opts);
    device_alloc(&m->act_memory, m->act_bytes, "activations");
    ArenaCarver carve(static_cast<char*>(m->act_memory));
    carve_activations(ctx, cfg, B, T, opts, &carve, &m->acts);
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

void gpt2_forward(const Context& ctx, GPT2* m, const GPT2Batch& batch,
                  const GPT2ForwardArgs& args) {
    NvtxRange range("forward");
    const GPT2Config& cfg = m->cfg;
    const int B = batch.B, T = batch.T, N = B * T, C = cfg.channels, L = cfg.num_layers;
    LLMC_CHECK(B >= 1 && T >= 1 && T <= m->T && (long long)N <= (long long)m->B * m->T,
               "gpt2_forward: a batch of %d x %d does not fit the model's arena of %d x %d", B, T,
               m->B, m->T);
    const int NH = cfg.num_heads;
    GPT2Activations& a = m->acts;
    floatX* const* p = m->param;
    const ParamLayout& lay = m->layout;

    encoder_forward(ctx, a.encoded, batch.inputs, p[kWte], p[kWpe], B, T, C);
    layernorm_forward(ctx, a.ln1.at(0), a.ln1_mean.at(0), a.ln1_rstd.at(0), a.encoded, p[kLn1w],
                      p[kLn1b], N, C);
    for (int l = 0; l < L; l++) {
        NvtxRange layer_range("forward layer", l);
        const floatX* residual = l == 0 ? a.encoded : a.residual3.at(l - 1);
        floatX* qkv = a.qkv.at(l);
        matmul_forward(ctx, qkv, a.ln1.at(l), p[kQkvw] + layer_slice(lay, kQkvw, l, L),
                       p[kQkvb] + layer_slice(lay, kQkvb, l, L), N, C, 3 * C);
        attention_forward(ctx, a.atty.at(l), a.att_lse.at(l), a.att_scratch, qkv, B, T, C, NH);
        // The projections that end a block add the residual stream in their GEMM's epilogue
        // (C, beta 1): the layernorm after them reads one tensor, not two.
        matmul_forward_residual(
            ctx, a.residual2.at(l), a.atty.at(l), p[kAttprojw] + layer_slice(lay, kAttprojw, l, L),
            p[kAttprojb] + layer_slice(lay, kAttprojb, l, L), residual, N, C, C);
        layernorm_forward(ctx, a.ln2.at(l), a.ln2_mean.at(l), a.ln2_rstd.at(l), a.residual2.at(l),
                          p[kLn2w] + l * C, p[kLn2b] + l * C, N, C);
        // One GEMM writes fch (the GELU input, kept for backward) and fch_gelu (bias and GELU in
        // cuBLASLt's epilogue): no separate pass over the (N, 4C) tensor.
        matmul_forward(ctx, a.fch_gelu.at(l), a.ln2.at(l), p[kFcw] + layer_slice(lay, kFcw, l, L),
                       p[kFcb] + layer_slice(lay, kFcb, l, L), N, C, 4 * C, a.fch.at(l));
        matmul_forward_residual(ctx, a.residual3.at(l), a.fch_gelu.at(l),
                                p[kFcprojw] + layer_slice(lay, kFcprojw, l, L),
                                p[kFcprojb] + layer_slice(lay, kFcprojb, l, L), a.residual2.at(l),
                                N, 4 * C, C);
        // The next layernorm: ln1 of the next layer, or lnf.
        const bool last = l == L - 1;
        floatX* ln_out = last ? a.lnf : a.ln1.at(l + 1);
        float* mean = last ? a.lnf_mean : a.ln1_mean.at(l + 1);
        float* rstd = last ? a.lnf_rstd : a.ln1_rstd.at(l + 1);
        const floatX* w = last ? p[kLnfw] : p[kLn1w] + (l + 1) * C;
        const floatX* b = last ? p[kLnfb] : p[kLn1b] + (l + 1) * C;
        layernorm_forward(ctx, ln_out, mean, rstd, a.residual3.at(l), w, b, N, C);
    }
    // When the step zeroes the loss on the branch (train_step.cu), that is done before the loss
    // sum adds to it.
    branch_wait(ctx, args.zeroed);
    const bool backward = args.backward_classifier;
    classifier_chunked(ctx, a.logits, a.losses, backward ? a.dln : nullptr,
                       backward ? m->grad[kWte] : nullptr, a.lnf, p[kWte], batch.targets,
                       args.loss_scale, N, C, cfg.vocab_size, cfg.padded_vocab_size, m->chunk_rows,
                       args.logits_copy, args.accumulate_grads);
    if (args.d_loss != nullptr) loss_accumulate(ctx, args.d_loss, a.losses, N, args.loss_scale);
}

// Backward of the forward above; gradients accumulate into m->grads, or are written (accumulate
// false: the first micro-step of a step, no zeroing pass before it). Needs the activations of
// the forward pass just run with backward_classifier = true (and the same accumulate_grads), and
// the dlnf it left in acts.dln. Every gradient element but wpe's rows >= T is written by some
// kernel of this backward or the classifier's: each writer takes `accumulate`, except the
// encoder's dwte, which adds to the classifier's.
//
// Graph branches (ctx.branches, context.cuh): with kBranchGemms each layer's four weight-gradient
// GEMMs (and the fc bias sums) run on the branch stream, beside the chain of input gradients,
// layernorm backwards and attention that each depends on the one before; with kBranchReduces
// the layernorm backwards' weight/bias reductions do too. The branch runs its work in the order
// given, and ctx.stream waits for it (branch_wait on a mark) only before it overwrites what the
// branch still reads: before each layernorm backward (dresidual, read by the weight gradient of
// the projection that produced it, and ln_scratch, read by the previous reduction), and with
// recompute 2 before each layernorm recomputation (ln1 and ln2 share one buffer). Those waits
// also cover dfch and dqkv: the next writer of each comes after a wait on a later mark. The
// kernels, their inputs and their order of sums are those of the single-stream backward.
// A side stream for the small reductions alone, joined before each layernorm backward, was
// slower at d12 B=4 and B=64 (the performance log in docs/ has the figures): here the weight
// GEMMs, half of the backward's work, may go beside the chain, and each switch can be measured
// alone (scripts/bench/step_profile.sh --ab).
void gpt2_backward(const Context& ctx, GPT2* m, const GPT2Batch& batch, bool accumulate,
                   cudaEvent_t zeroed, GradReadyHook* hook) {
    NvtxRange range("backward");
    const GPT2Config& cfg = m->cfg;
    LLMC_CHECK(batch.B == m->B && batch.T == m->T,
               "gpt2_backward: the batch is %d x %d, the arena's shape %d x %d", batch.B, batch.T,
               m->B, m->T);
    const int B = m->B, T = m->T, N = B * T, C = cfg.channels, L = cfg.num_layers;
    const int NH = cfg.num_heads, V = cfg.vocab_size;
    const int recompute = m->opts.recompute;
    GPT2Activations& a = m->acts;
    floatX* const* p = m->param;
    floatX* const* g = m->grad;
    const ParamLayout& lay = m->layout;
    const bool gemms_on_branch = (ctx.branches & kBranchGemms) != 0;
    const bool reduces_on_branch = (ctx.branches & kBranchReduces) != 0;
    const bool branched = gemms_on_branch || reduces_on_branch;
    // A mark of the branch's work, or null when that work ran on ctx.stream.
    auto mark_if = [&](bool on_branch) { return on_branch ? branch_mark(ctx) : nullptr; };
    auto at = [&](int index, int l) { return layer_slice(lay, index, l, L); };

    // Zeroed already on the branch when the step put its memsets there (train_step.cu).
    if (zeroed == nullptr) {
        LLMC_CUDA_CHECK(
            cudaMemsetAsync(a.dresidual, 0, (size_t)N * C * sizeof(floatX), ctx.stream));
    }
    // The projections that add to the residual stream (attproj, fcproj) take their bias
    // gradients from the layernorm backward that writes dresidual (layernorm.cuh).
    layernorm_backward(ctx, a.dresidual, g[kLnfw], g[kLnfb], a.ln_scratch, a.dln,
                       a.residual3.at(L - 1), p[kLnfw], a.lnf_mean, a.lnf_rstd, N, C,
                       g[kFcprojb] + at(kFcprojb, L - 1), reduces_on_branch, accumulate);
    cudaEvent_t ln_reduced = mark_if(reduces_on_branch);  // the last layernorm reduction
    cudaEvent_t qkv_weight_done = nullptr;                // the layer above's qkv weight gradient
    // The hook hears of each gradient group as soon as it is final (multi-GPU: its reduction
    // starts there). Layer l's fcproj bias gradient is final before layer l's group: it comes
    // from the layernorm backward above (l = L - 1) or from layer l + 1's ln1 backward.
    auto group_done = [&](int group) {
        if (hook == nullptr) return;
        if (branched) branch_join(ctx);
        hook->grads_ready(ctx, group);
    };
    group_done(L);
    for (int l = L - 1; l >= 0; l--) {
        NvtxRange layer_range("backward layer", l);
        const floatX* residual = l == 0 ? a.encoded : a.residual3.at(l - 1);
        // Recomputed activations from the forward's stored inputs. layernorm_forward is the
        // forward's own kernel, so ln1/ln2 come back bit for bit (it recomputes the statistics
        // too, identical to the stored ones, written aside). GELU is recomputed by gelu_forward
        // from the stored (rounded) fch, while the forward took it in the matmul epilogue from
        // the float accumulator: the two can differ by one rounding of fch_gelu, which only the
        // fcproj weight gradient below reads.
        if (recompute >= 1) gelu_forward(ctx, a.fch_gelu.at(l), a.fch.at(l), (size_t)N * 4 * C);
        // MLP: dresidual is dL/d(residual3), the gradient of the fcproj output too.
        // The fc bias gradient comes from the DGELU product where our kernel runs it.
        bool fc_bias_done = false;
        cudaEvent_t fcproj_weight_done = linear_backward(
            ctx, gemms_on_branch, accumulate, a.dfch, g[kFcprojw] + at(kFcprojw, l),
            /*dbias: from the layernorm backward*/ nullptr, a.dbias_scratch, a.dresidual,
            a.fch_gelu.at(l), p[kFcprojw] + at(kFcprojw, l), N, 4 * C, C,
            InputEpilogue{a.fch.at(l), g[kFcb] + at(kFcb, l), a.dgelu_bias_scratch, &fc_bias_done});
        if (recompute >= 2) {
            branch_wait(ctx, qkv_weight_done);  // it read ln1, which shares ln2's buffer
            layernorm_forward(ctx, a.ln2.at(l), a.recompute_mean, a.recompute_rstd,
                              a.residual2.at(l), p[kLn2w] + l * C, p[kLn2b] + l * C, N, C);
        }
        cudaEvent_t fc_weight_done =
            linear_backward(ctx, gemms_on_branch, accumulate, a.dln, g[kFcw] + at(kFcw, l),
                            fc_bias_done ? nullptr : g[kFcb] + at(kFcb, l), a.dbias_scratch, a.dfch,
                            a.ln2.at(l), p[kFcw] + at(kFcw, l), N, C, 4 * C);
        branch_wait(ctx, gemms_on_branch ? fcproj_weight_done : ln_reduced);
        layernorm_backward(ctx, a.dresidual, g[kLn2w] + l * C, g[kLn2b] + l * C, a.ln_scratch,
                           a.dln, a.residual2.at(l), p[kLn2w] + l * C, a.ln2_mean.at(l),
                           a.ln2_rstd.at(l), N, C, g[kAttprojb] + at(kAttprojb, l),
                           reduces_on_branch, accumulate);
        ln_reduced = mark_if(reduces_on_branch);
        // Attention: dresidual is now dL/d(residual2), the gradient of the attproj output. Its
        // input gradient (datty) may also write the attention backward's row statistics.
        RowStatsTarget stats{};
        stats.lse = a.att_lse.at(l), stats.T = T, stats.NH = NH;
        const bool stats_in_gemm =
            ctx.row_stats_gemm != 0 &&
            attention_backward_row_stats(ctx, a.att_scratch, B, T, C, NH, &stats.lse2, &stats.d) &&
            row_stats_gemm_applies(ctx, N, C, C, T, NH,
                                   {a.datty, a.dresidual, p[kAttprojw] + at(kAttprojw, l),
                                    a.atty.at(l), stats.d, stats.lse2, stats.lse});
        InputEpilogue attproj_ep;
        attproj_ep.row_stats = stats_in_gemm ? &stats : nullptr;
        cudaEvent_t attproj_weight_done = nullptr;
        // With attproj_weight_late, the weight gradient is forked to the branch once the
        // attention backward's main kernel is done, so that it runs beside the dq conversion,
        // not beside that kernel. It lives until run_after_attention_main below has run it.
        const auto fork_attproj_weight = [&] {
            matmul_backward_weight(ctx, g[kAttprojw] + at(kAttprojw, l), nullptr, a.dbias_scratch,
                                   a.dresidual, a.atty.at(l), N, C, C, true, accumulate);
            attproj_weight_done = branch_mark(ctx);
        };
        if (gemms_on_branch && ctx.attproj_weight_late != 0) {
            linear_backward_input(ctx, accumulate, a.datty, a.dresidual, a.atty.at(l),
                                  p[kAttprojw] + at(kAttprojw, l), N, C, C, attproj_ep);
            // One reference: std::function keeps it inline, no allocation a layer and step.
            ctx.after_attention_main = [&fork_attproj_weight] { fork_attproj_weight(); };
        } else {
            attproj_weight_done = linear_backward(
                ctx, gemms_on_branch, accumulate, a.datty, g[kAttprojw] + at(kAttprojw, l),
                /*dbias: from the layernorm backward*/ nullptr, a.dbias_scratch, a.dresidual,
                a.atty.at(l), p[kAttprojw] + at(kAttprojw, l), N, C, C, attproj_ep);
        }
        floatX* dqkvb = g[kQkvb] + at(kQkvb, l);
        const bool qkv_bias_done =
            attention_backward(ctx, a.dqkv, a.att_scratch, a.datty, a.qkv.at(l), a.atty.at(l),
                               a.att_lse.at(l), B, T, C, NH, dqkvb, accumulate, stats_in_gemm);
        run_after_attention_main(ctx);  // when no fused backward ran it
        if (recompute >= 2) {
            branch_wait(ctx, fc_weight_done);  // it read ln2, which shares ln1's buffer
            layernorm_forward(ctx, a.ln1.at(l), a.recompute_mean, a.recompute_rstd, residual,
                              p[kLn1w] + l * C, p[kLn1b] + l * C, N, C);
        }
        qkv_weight_done =
            linear_backward(ctx, gemms_on_branch, accumulate, a.dln, g[kQkvw] + at(kQkvw, l),
                            qkv_bias_done ? nullptr : dqkvb, a.dbias_scratch, a.dqkv, a.ln1.at(l),
                            p[kQkvw] + at(kQkvw, l), N, C, 3 * C);
        branch_wait(ctx, gemms_on_branch ? attproj_weight_done : ln_reduced);
        layernorm_backward(ctx, a.dresidual, g[kLn1w] + l * C, g[kLn1b] + l * C, a.ln_scratch,
                           a.dln, residual, p[kLn1w] + l * C, a.ln1_mean.at(l), a.ln1_rstd.at(l), N,
                           C, l > 0 ? g[kFcprojb] + at(kFcprojb, l - 1) : nullptr,
                           reduces_on_branch, accumulate);
        ln_reduced = mark_if(reduces_on_branch);
        group_done(l);
    }
    encoder_backward(ctx, g[kWte], g[kWpe], a.enc_scratch, a.dresidual, batch.inputs, B, T, C, V,
                     accumulate);
    // Every gradient is final, and the next step (or micro-step) may overwrite any input.
    if (branched) branch_join(ctx);
    if (hook != nullptr) hook->grads_ready(ctx, L + 1);
}

namespace {
void download_as_float(const Context& ctx, const floatX* src, size_t n, std::vector<float>* out) {
    std::vector<floatX> tmp(n);
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    LLMC_CUDA_CHECK(cudaMemcpy(tmp.data(), src, n * sizeof(floatX), cudaMemcpyDeviceToHost));
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

}  // namespace llmc
