// test_matmul.cu: every product of llmc/matmul.cuh against the CPU reference (cpu::matmul_forward
// and _backward, cpu::gelu_forward and _backward), through every cuBLASLt epilogue the model uses:
//   matmul_forward         DEFAULT (no bias), BIAS, GELU_AUX (no bias), GELU_AUX_BIAS: out and
//                          the GELU input pre_gelu (overwritten; poisoned first)
//   matmul_forward_residual DEFAULT and BIAS with C = a random residual (beta 1): out against
//                          the CPU's product plus the residual; the residual left unchanged
//   matmul_backward_input  DEFAULT and DGELU (dinp overwritten; poisoned first)
//   matmul_backward_weight dweight += (beta = 1, onto random values), and dbias += through our
//                          column-sum kernels or, where dout's rows are not whole 16-byte vectors
//                          (here: dout one element off its alignment), BGRADB and the add kernel
//   matmul_bias_backward   the column sums alone
//   matmul_strided_batched alpha, beta = 0 and beta = 1 (accumulating), both transposes, batches
// Shapes: GPT-2 d12's linear layers at N = B*T = 1024 (qkv 768 -> 2304 with bias, attproj 768 ->
// 768, fc 768 -> 3072 with GELU, fcproj 3072 -> 768 with DGELU) and its lm-head (768 -> 50304,
// no bias, N = 32); awkward ones: N odd or 1, widths that are multiples of what the layer needs
// (C a multiple of 16 in bf16 for flash attention, of 4 in fp32) but not of 8 or 16 beyond
// that, and for the bias-free products (the lm-head's, cuBLASLt's only constraint being the
// element size) every dimension odd: N=33 IC=13 OC=1003, N=5 IC=7 OC=9.
// On sm_90 (bf16), with LLMC_GELU_GEMM=2 (the first of the bf16 build's two runs; the second
// has cuBLASLt's epilogues, 0), the GELU products run on our own kernels where they apply
// (matmul_sm90.cuh: output width a multiple of 128, reduction width of 64; N free): the fc forward
// (its GELU taken from the rounded pre_gelu, checked bitwise against gelu_forward of the pre_gelu
// it wrote) and the DGELU product, which also adds the GELU layer's bias gradient (gelu_dbias, the
// column sums of the dinp it wrote, checked against those sums in double). Cases "GPT-2 fc", "GPT-2
// fcproj", "GELU and DGELU without bias" (DGELU only) and the "GELU GEMM" ones reach them; the test
// says which ran. Each linear case also runs matmul_backward (both halves in one call), the weight
// half on the branch stream (kBranchGemms), and the whole backward again: all bitwise the same as
// the split run, since the plan and the order of every sum are the same. The run with gelu gemm
// 2 also sets every bit of ctx.plain_gemm, so that the plain forward products whose shapes apply
// (output width a multiple of 256: the qkv and attproj cases, fcproj's forward, the "plain GEMM"
// ones with a bias; with the residual, those and the bias-free one) run on our plain kernel,
// against the same bounds as cuBLASLt's. The fp32 build runs everything twice: TF32 off (the bounds
// below), then TF32 on in a second Context (its own plans) with the bounds widened for TF32's
// rounding of the inputs. The gelu gemm 2 run also checks row_stats_gemm_backward (the attention
// projection's input gradient with the flash backward's row statistics, test_row_stats) at d12's
// attproj shape and two awkward ones. Without a GPU it exits 77 with "SKIP <reason>"
// (test_device.h).
#include <cmath>
#include <cstring>
#include <vector>

#include "context.cuh"
#include "gelu.cuh"
#include "matmul.cuh"
#include "matmul_sm90.cuh"
#include "ref/cpu_ops.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

// Bounds, per element, with s = sum_k |a_k b_k| the magnitude a result is summed from (the same
// product on the inputs' absolute values) and K the length of the sum.
// Accumulation: cuBLASLt sums the K products in fp32 (tensor cores, split-K partials, all fp32).
// Each addition errs by at most one ulp of the running sum (2^-23 of it: truncation as well as
// rounding to nearest is allowed). Our inputs are of random sign, so a running sum after k terms
// is ~sqrt(k) terms large, and the K errors add to at most about (2/3) sqrt(K) 2^-23 s even when
// they all lean one way; 4 sqrt(K) 2^-23 s leaves 6x (a float64 emulation of truncating
// sequential sums of these inputs stayed below 1/70 of it at K = 768 ... 50304). A wrong index
// or a missing term moves a result by a whole term, ~s / K, which is above this bound while
// K^1.5 < 2^21 (K < ~16000: every linear layer's sums); at the lm-head's K = 50304 the bound is
// ~5 terms, still 1/40 of a result's typical ~sqrt(K) terms, so a wrong row or block shows.
constexpr double kAccumUlps = 4.0;
constexpr double kUlp32 = 1.0 / 8388608.0;  // 2^-23
#if defined(ENABLE_BF16)
// Every floatX output is rounded once to bf16, half an ulp: 2^-8 of its value
// (kBf16RoundingRel). A plain bf16 implementation errs by that; we allow 2x its error.
constexpr double kOutRounding = 2.0 * kBf16RoundingRel;
#else
constexpr double kOutRounding = 0.0;  // fp32 outputs: the accumulation bound covers the sums
#endif
// GELU in cuBLASLt's epilogue (and its derivative in DGELU) is evaluated in fp32 with its own
// tanh: test_gpt2's recompute check measured 1.0e-6 to 2.0e-6 relative against ours; 1e-5. The
// GELU output also carries its input's error times |gelu'| <= 1.13.
constexpr double kGeluRel = 1e-5;
constexpr double kGeluSlope = 1.13;
// Its tanh errs by a small absolute amount d, and gelu = x/2 (1 + tanh(u)) carries x/2 d: an error
// in proportion to the input, large against the output where 1 + tanh(u) is small (x < 0). On an
// H100 (cuBLASLt 13) d reached 4.6e-5 (|err| <= 2.3e-5 |x|, at x = -0.24); we allow d = 2.5e-4.
constexpr double kGeluTanhAbs = 2.5e-4;
// TF32 (fp32 build, ctx.tf32): each input is rounded to 10 mantissa bits (2^-11 relative, 2^-10
// if truncated), so each product errs by up to 2^-9 of itself. The part of sign with the product
// is at most 2^-9 of the result's own size; the rest, of random sign, adds to ~2^-9 s / sqrt(K),
// bounded here by 4x that.
constexpr double kTf32Rel = 1.0 / 512.0;
constexpr double kTf32Spread = 4.0 / 512.0;

double accum_bound(double s, int K, bool tf32) {
    const double bound = kAccumUlps * std::sqrt((double)K) * kUlp32 * s;
    return tf32 ? bound + kTf32Spread * s / std::sqrt((double)K) : bound;
}
double rel_bound(bool tf32) { return kOutRounding + (tf32 ? kTf32Rel : 0.0); }

std::vector<float> absolute(const std::vector<float>& v) {
    std::vector<float> a(v.size());
    for (size_t i = 0; i < v.size(); i++) a[i] = std::fabs(v[i]);
    return a;
}

// |got - ref| <= accum_bound(scale) + rel * |ref| + extra_rel * |ref| per element.
bool check_sum(const char* what, const char* name, const std::vector<float>& got,
               const std::vector<float>& ref, const std::vector<float>& scale, int K, bool tf32,
               double scale_factor = 1.0, double extra_rel = 0.0) {
    std::vector<double> bound(ref.size());
    for (size_t i = 0; i < ref.size(); i++) {
        bound[i] = scale_factor * accum_bound(scale[i], K, tf32) +
                   (rel_bound(tf32) + extra_rel) * std::fabs((double)ref[i]);
    }
    char label[96];
    std::snprintf(label, sizeof(label), "%s %s", what, name);
    return check_within(label, got, ref, bound);
}

struct LinearCase {
    const char* name;
    int N, IC, OC;
    bool bias;
    bool gelu;        // forward: GELU in the epilogue (pre_gelu kept)
    bool dgelu;       // backward: this layer's input came out of a GELU (DGELU epilogue)
    bool misaligned;  // dout one element off its 16-byte alignment: BGRADB for the bias gradient
};

// The inputs of one case, rounded to floatX (the CPU sees what the GPU holds).
struct LinearData {
    std::vector<float> inp, w, bias, dout, pre_in, dw0, dbias0, gelu_dbias0, res;
};

LinearData make_linear_data(const LinearCase& c, uint64_t seed) {
    Rng rng(seed);
    LinearData d;
    d.inp.resize((size_t)c.N * c.IC);
    d.w.resize((size_t)c.OC * c.IC);
    d.bias.resize(c.OC);
    d.dout.resize((size_t)c.N * c.OC);
    d.pre_in.resize((size_t)c.N * c.IC);
    d.dw0.resize(d.w.size());
    d.dbias0.resize(c.OC);
    d.gelu_dbias0.resize(c.IC);
    d.res.resize((size_t)c.N * c.OC);
    fill_uniform(d.inp, rng, -1.0f, 1.0f);
    // Weights of GPT-2's size (1/sqrt(IC)), so the GELU input spreads over its curved part.
    const float wscale = 1.7f / std::sqrt((float)c.IC);
    fill_uniform(d.w, rng, -wscale, wscale);
    fill_uniform(d.bias, rng, -0.5f, 0.5f);
    fill_uniform(d.dout, rng, -1.0f, 1.0f);
    fill_normal(d.pre_in, rng, 0.0f, 1.5f);
    fill_uniform(d.dw0, rng, -1.0f, 1.0f);
    fill_uniform(d.dbias0, rng, -1.0f, 1.0f);
    fill_uniform(d.gelu_dbias0, rng, -1.0f, 1.0f);
    // A residual stream larger than the product, as GPT-2's grows through the layers.
    fill_uniform(d.res, rng, -4.0f, 4.0f);
    for (std::vector<float>* v :
         {&d.inp, &d.w, &d.bias, &d.dout, &d.pre_in, &d.dw0, &d.dbias0, &d.gelu_dbias0, &d.res})
        round_to_floatx(*v);
    return d;
}

struct LinearDevice {
    DeviceBuffer<floatX> inp, w, bias, dout, pre_in, out, pre, dinp, dw, dbias, gelu_dbias, res;
    DeviceBuffer<float> scratch, gelu_scratch;
    explicit LinearDevice(const LinearCase& c)
        : inp((size_t)c.N * c.IC),
          w((size_t)c.OC * c.IC),
          bias(c.OC),
          dout((size_t)c.N * c.OC + 1),
          pre_in((size_t)c.N * c.IC),
          out((size_t)c.N * c.OC),
          pre((size_t)c.N * c.OC),
          dinp((size_t)c.N * c.IC),
          dw((size_t)c.OC * c.IC),
          dbias(c.OC),
          gelu_dbias(c.IC),
          res((size_t)c.N * c.OC),
          scratch(matmul_bias_scratch_floats(c.OC)),
          gelu_scratch(matmul_gelu_bias_scratch_floats(c.N, c.IC)) {}
    floatX* dout_ptr(const LinearCase& c) const { return dout.get() + (c.misaligned ? 1 : 0); }
};

// The CPU results of one case: the forward's pre-activation and output, the raw backward sums
// (dinp = dout @ w, dw = dout^T @ inp, dbias = column sums), and the same products of the
// absolute values (the magnitudes the bounds scale with).
struct LinearRef {
    std::vector<float> pre, out, dinp, dw, dbias;
    std::vector<float> pre_scale, dinp_scale, dw_scale, dbias_scale;
};

LinearRef linear_reference(const LinearCase& c, const LinearData& d) {
    LinearRef r;
    const size_t NO = (size_t)c.N * c.OC, NI = (size_t)c.N * c.IC, W = (size_t)c.OC * c.IC;
    r.pre.resize(NO);
    r.pre_scale.resize(NO);
    cpu::matmul_forward(r.pre.data(), d.inp.data(), d.w.data(), c.bias ? d.bias.data() : nullptr,
                        c.N, c.IC, c.OC);
    const std::vector<float> ainp = absolute(d.inp), aw = absolute(d.w), adout = absolute(d.dout);
    cpu::matmul_forward(r.pre_scale.data(), ainp.data(), aw.data(), nullptr, c.N, c.IC, c.OC);
    r.out = r.pre;
    if (c.gelu) cpu::gelu_forward(r.out.data(), r.pre.data(), NO);
    r.dinp.assign(NI, 0.0f), r.dw.assign(W, 0.0f), r.dbias.assign(c.OC, 0.0f);
    cpu::matmul_backward(r.dinp.data(), r.dw.data(), r.dbias.data(), d.dout.data(), d.inp.data(),
                         d.w.data(), c.N, c.IC, c.OC);
    r.dinp_scale.assign(NI, 0.0f), r.dw_scale.assign(W, 0.0f), r.dbias_scale.assign(c.OC, 0.0f);
    cpu::matmul_backward(r.dinp_scale.data(), r.dw_scale.data(), r.dbias_scale.data(), adout.data(),
                         ainp.data(), aw.data(), c.N, c.IC, c.OC);
    if (c.dgelu) {  // dinp = gelu'(pre_in) * (dout @ w)
        std::vector<float> g(NI, 0.0f);
        cpu::gelu_backward(g.data(), d.pre_in.data(), r.dinp.data(), NI);
        r.dinp = g;
    }
    return r;
}

void upload_linear(const LinearCase& c, const LinearData& d, LinearDevice* g) {
    upload(g->inp.get(), d.inp);
    upload(g->w.get(), d.w);
    upload(g->bias.get(), d.bias);
    upload(g->dout_ptr(c), d.dout);
    upload(g->pre_in.get(), d.pre_in);
    upload(g->res.get(), d.res);
}

// matmul_forward_residual: out = the product (+ bias) + the residual, rounded once; the
// residual (cuBLASLt's C) is read, never written.
void test_forward_residual(const Context& ctx, const LinearCase& c, LinearDevice* g,
                           const LinearData& d, const LinearRef& r, bool tf32) {
    const size_t NO = (size_t)c.N * c.OC;
    poison(g->out.get(), NO);
    const std::vector<unsigned char> res_before = download_bytes(g->res.get(), NO * sizeof(floatX));
    matmul_forward_residual(ctx, g->out.get(), g->inp.get(), g->w.get(),
                            c.bias ? g->bias.get() : nullptr, g->res.get(), c.N, c.IC, c.OC);
    std::vector<float> ref(NO), scale(NO);
    for (size_t i = 0; i < NO; i++) {
        ref[i] = (float)((double)r.pre[i] + (double)d.res[i]);
        scale[i] = r.pre_scale[i] + std::fabs(d.res[i]);
    }
    const bool ours = plain_gemm_chosen(ctx, c.bias, true, c.N, c.IC, c.OC,
                                        {g->out.get(), g->inp.get(), g->w.get(), g->res.get()});
    check_sum("forward",
              ours     ? "out + residual (our sm90 kernel)"
              : c.bias ? "out + residual (BIAS, C)"
                       : "out + residual (DEFAULT, C)",
              download(g->out.get(), NO), ref, scale, c.IC, tf32);
    check_bitwise_equal("forward with residual: the residual unchanged", res_before,
                        download_bytes(g->res.get(), NO * sizeof(floatX)));
}

// Forward: out (and pre_gelu) against the CPU.
void test_forward(const Context& ctx, const LinearCase& c, LinearDevice* g, const LinearData& d,
                  const LinearRef& r, bool tf32) {
    const size_t NO = (size_t)c.N * c.OC;
    poison(g->out.get(), NO);
    poison(g->pre.get(), NO);
    matmul_forward(ctx, g->out.get(), g->inp.get(), g->w.get(), c.bias ? g->bias.get() : nullptr,
                   c.N, c.IC, c.OC, c.gelu ? g->pre.get() : nullptr);
    const std::vector<float> out = download(g->out.get(), NO);
    if (!c.gelu) {
        const bool ours = plain_gemm_chosen(ctx, c.bias, false, c.N, c.IC, c.OC,
                                            {g->out.get(), g->inp.get(), g->w.get()});
        check_sum("forward",
                  ours     ? (c.bias ? "out (our sm90 kernel, bias)" : "out (our sm90 kernel)")
                  : c.bias ? "out (BIAS)"
                           : "out (DEFAULT)",
                  out, r.pre, r.pre_scale, c.IC, tf32);
        test_forward_residual(ctx, c, g, d, r, tf32);
        return;
    }
    const bool ours = c.bias && gelu_gemm_forward_chosen(ctx, c.N, c.IC, c.OC,
                                                         {g->out.get(), g->pre.get(), g->inp.get(),
                                                          g->w.get(), g->bias.get()});
    check_sum("forward",
              !c.bias ? "pre_gelu (GELU_AUX)"
              : ours  ? "pre_gelu (our sm90 kernel)"
                      : "pre_gelu (GELU_AUX_BIAS)",
              download(g->pre.get(), NO), r.pre, r.pre_scale, c.IC, tf32);
    std::vector<double> bound(NO);
    for (size_t i = 0; i < NO; i++) {
        bound[i] = kGeluSlope * accum_bound(r.pre_scale[i], c.IC, tf32) +
                   (rel_bound(tf32) + kGeluRel) * std::fabs((double)r.out[i]) +
                   0.5 * kGeluTanhAbs * std::fabs((double)r.pre[i]);
        // Our kernel takes the GELU of the rounded pre_gelu: its rounding (half a bf16 ulp,
        // 2^-9 |pre|) carried through |gelu'| <= kGeluSlope.
        if (ours) bound[i] += kGeluSlope * 0.5 * kBf16RoundingRel * std::fabs((double)r.pre[i]);
    }
    check_within(ours ? "forward gelu out (our sm90 kernel)" : "forward gelu out", out, r.out,
                 bound);
    if (ours) {  // the same bits as the elementwise pass on the pre_gelu it wrote
        DeviceBuffer<floatX> again(NO);
        gelu_forward(ctx, again.get(), g->pre.get(), NO);
        check_bitwise_equal("forward gelu out (our sm90 kernel) = gelu_forward(pre_gelu)",
                            download_bytes(again.get(), NO * sizeof(floatX)),
                            download_bytes(g->out.get(), NO * sizeof(floatX)));
    }
}

// How the gradient outputs start in run_backward: the random values of LinearData (added to),
// zeros (added to), or NaN with accumulate = false (written over, never read; a bias buffer the
// case does not write, dbias without c.bias, starts at zero instead).
enum class GradInit { kRandom, kZeros, kPoisonWrite };

// The backward's two halves apart: dinp (overwritten) and dw, dbias (accumulated onto random
// values, or as `init` says). Returns the bytes of dinp, dw and dbias for the bitwise
// comparisons. With c.dgelu and gelu_bias, gelu_dbias (onto random values) goes to
// matmul_backward_input too; *fused says whether our DGELU kernel added to it (matmul_backward,
// how 1, takes none: it runs the DGELU epilogue without the bias sums, as matmul_backward_input
// does without gelu_dbias).
std::vector<unsigned char> run_backward(const Context& ctx, const LinearCase& c, LinearDevice* g,
                                        const LinearData& d, int how, bool* fused = nullptr,
                                        bool gelu_bias = true, GradInit init = GradInit::kRandom) {
    const size_t NI = (size_t)c.N * c.IC;
    poison(g->dinp.get(), NI);
    poison(g->scratch.get(), g->scratch.size());
    const bool accumulate = init != GradInit::kPoisonWrite;
    if (init == GradInit::kRandom) {
        upload(g->dw.get(), d.dw0);
        upload(g->dbias.get(), d.dbias0);
        upload(g->gelu_dbias.get(), d.gelu_dbias0);
    } else if (init == GradInit::kZeros) {
        upload(g->dw.get(), std::vector<float>(g->dw.size(), 0.0f));
        upload(g->dbias.get(), std::vector<float>(g->dbias.size(), 0.0f));
        upload(g->gelu_dbias.get(), std::vector<float>(g->gelu_dbias.size(), 0.0f));
    } else {
        poison(g->dw.get(), g->dw.size());
        if (c.bias) {
            poison(g->dbias.get(), g->dbias.size());
        } else {
            upload(g->dbias.get(), std::vector<float>(g->dbias.size(), 0.0f));
        }
        poison(g->gelu_dbias.get(), g->gelu_dbias.size());
    }
    floatX* dbias = c.bias ? g->dbias.get() : nullptr;
    const floatX* pre = c.dgelu ? g->pre_in.get() : nullptr;
    floatX* gelu_dbias = c.dgelu && gelu_bias ? g->gelu_dbias.get() : nullptr;
    bool did = false;
    if (how == 0) {  // the halves apart, on ctx.stream
        did = matmul_backward_input(ctx, g->dinp.get(), g->dout_ptr(c), g->w.get(), c.N, c.IC, c.OC,
                                    pre, gelu_dbias, g->gelu_scratch.get(), accumulate);
        matmul_backward_weight(ctx, g->dw.get(), dbias, g->scratch.get(), g->dout_ptr(c),
                               g->inp.get(), c.N, c.IC, c.OC, false, accumulate);
    } else if (how == 1) {  // matmul_backward: both in one call
        matmul_backward(ctx, g->dinp.get(), g->dw.get(), dbias, g->scratch.get(), g->dout_ptr(c),
                        g->inp.get(), g->w.get(), c.N, c.IC, c.OC, pre, accumulate);
    } else {  // the weight half on the branch stream, joined before reading
        matmul_backward_weight(ctx, g->dw.get(), dbias, g->scratch.get(), g->dout_ptr(c),
                               g->inp.get(), c.N, c.IC, c.OC, /*on_branch=*/true, accumulate);
        did = matmul_backward_input(ctx, g->dinp.get(), g->dout_ptr(c), g->w.get(), c.N, c.IC, c.OC,
                                    pre, gelu_dbias, g->gelu_scratch.get(), accumulate);
        branch_join(ctx);
    }
    if (fused != nullptr) *fused = did;
    std::vector<unsigned char> bytes = download_bytes(g->dinp.get(), NI * sizeof(floatX));
    for (const std::vector<unsigned char>& more :
         {download_bytes(g->dw.get(), g->dw.size() * sizeof(floatX)),
          download_bytes(g->dbias.get(), c.OC * sizeof(floatX)),
          did ? download_bytes(g->gelu_dbias.get(), c.IC * sizeof(floatX))
              : std::vector<unsigned char>()}) {
        bytes.insert(bytes.end(), more.begin(), more.end());
    }
    return bytes;
}

void test_backward(Context* ctx, const LinearCase& c, LinearDevice* g, const LinearData& d,
                   const LinearRef& r, bool tf32) {
    bool fused = false;
    const std::vector<unsigned char> first = run_backward(*ctx, c, g, d, 0, &fused);
    const char* dinp_name = !c.dgelu ? "dinp (DEFAULT)"
                            : fused  ? "dinp (our sm90 DGELU kernel)"
                                     : "dinp (DGELU)";
    // DGELU scales the sum by gelu'(pre_in), |gelu'| <= kGeluSlope, evaluated in fp32.
    const std::vector<float> dinp = download(g->dinp.get(), g->dinp.size());
    check_sum("backward", dinp_name, dinp, r.dinp, r.dinp_scale, c.OC, tf32,
              c.dgelu ? kGeluSlope : 1.0, c.dgelu ? kGeluRel : 0.0);
    if (fused) {
        // gelu_dbias += the column sums of the dinp written (fp32 sums of the rounded values,
        // in a fixed order), then rounded to floatX with the old value.
        std::vector<float> ref(c.IC);
        std::vector<double> bound(c.IC);
        for (int j = 0; j < c.IC; j++) {
            double sum = 0.0, mag = 0.0;
            for (int i = 0; i < c.N; i++) {
                sum += dinp[(size_t)i * c.IC + j];
                mag += std::fabs(dinp[(size_t)i * c.IC + j]);
            }
            ref[j] = (float)(d.gelu_dbias0[j] + sum);
            bound[j] = accum_bound(mag, c.N, false) + rel_bound(false) * std::fabs(ref[j]);
        }
        check_within("backward gelu_dbias += (our sm90 DGELU kernel's column sums)",
                     download(g->gelu_dbias.get(), c.IC), ref, bound);
    }
    // dweight += : cuBLASLt may round the product to floatX before it adds the old values (a bf16
    // run on an H100 erred by 5 bf16 ulps of a small result, 0.012, where an old value and the
    // product of opposite sign cancelled), so the product's own rounding is allowed besides the
    // result's.
    std::vector<float> dw_ref(r.dw.size());
    std::vector<double> dw_bound(r.dw.size());
    for (size_t i = 0; i < dw_ref.size(); i++) {
        dw_ref[i] = d.dw0[i] + r.dw[i];
        dw_bound[i] = accum_bound(r.dw_scale[i], c.N, tf32) +
                      rel_bound(tf32) * std::fabs((double)dw_ref[i]) +
                      kOutRounding * std::fabs((double)r.dw[i]);
    }
    check_within("backward dweight += (beta = 1)", download(g->dw.get(), g->dw.size()), dw_ref,
                 dw_bound);
    if (c.bias) {
        // Our column sums are fp32 in a fixed order (no products: TF32 plays no part); BGRADB is
        // part of the TF32 GEMM (its inputs may be rounded like the GEMM's), and writes its sum
        // rounded to floatX before the add kernel adds it: one more rounding, of a value of at
        // most |ref| + |dbias0|.
        const bool bgradb_tf32 = c.misaligned && tf32;
        std::vector<float> db_ref(c.OC);
        std::vector<double> bound(c.OC);
        for (int i = 0; i < c.OC; i++) {
            db_ref[i] = d.dbias0[i] + r.dbias[i];
            bound[i] = accum_bound(r.dbias_scale[i], c.N, bgradb_tf32) +
                       rel_bound(bgradb_tf32) * std::fabs(db_ref[i]);
            if (c.misaligned)
                bound[i] += kOutRounding * (std::fabs(db_ref[i]) + std::fabs(d.dbias0[i]));
        }
        check_within(
            c.misaligned ? "backward dbias += (BGRADB)" : "backward dbias += (column sums)",
            download(g->dbias.get(), c.OC), db_ref, bound);
    }
    char name[96];
    // matmul_backward passes no gelu_dbias: where our kernel took it, compare with the halves
    // run without it too.
    std::snprintf(name, sizeof(name), "backward %s: matmul_backward = halves", c.name);
    check_bitwise_equal(name, run_backward(*ctx, c, g, d, 1),
                        fused ? run_backward(*ctx, c, g, d, 0, nullptr, false) : first);
    const unsigned branches = ctx->branches;
    const bool pdl = ctx->pdl;
    context_set_overlap(ctx, branches | kBranchGemms, pdl);
    std::snprintf(name, sizeof(name), "backward %s: weight half on the branch", c.name);
    check_bitwise_equal(name, run_backward(*ctx, c, g, d, 2), first);
    context_set_overlap(ctx, branches, pdl);
    std::snprintf(name, sizeof(name), "backward %s: run again", c.name);
    check_bitwise_equal(name, run_backward(*ctx, c, g, d, 0), first);
    // Written without accumulate (the first micro-step's way, over NaN that must not be read) =
    // added onto zeros, in each arrangement.
    for (int how = 0; how < 3; how++) {
        if (how == 2) context_set_overlap(ctx, branches | kBranchGemms, pdl);
        const std::vector<unsigned char> onto_zeros =
            run_backward(*ctx, c, g, d, how, nullptr, true, GradInit::kZeros);
        std::snprintf(name, sizeof(name), "backward %s (how %d): written = added onto zeros",
                      c.name, how);
        check_bitwise_equal(name,
                            run_backward(*ctx, c, g, d, how, nullptr, true, GradInit::kPoisonWrite),
                            onto_zeros);
        if (how == 2) context_set_overlap(ctx, branches, pdl);
    }
    if (c.bias && !c.misaligned) {  // the column sums alone: the same kernels, the same bits
        upload(g->dbias.get(), d.dbias0);
        matmul_bias_backward(*ctx, g->dbias.get(), g->scratch.get(), g->dout_ptr(c), c.N, c.OC);
        // dbias's bytes in `first`: before gelu_dbias's where the DGELU kernel wrote those.
        const size_t end = first.size() - (fused ? c.IC * sizeof(floatX) : 0);
        const size_t at = end - c.OC * sizeof(floatX);
        std::snprintf(name, sizeof(name), "matmul_bias_backward %s", c.name);
        check_bitwise_equal(name, download_bytes(g->dbias.get(), c.OC * sizeof(floatX)),
                            std::vector<unsigned char>(first.begin() + at, first.begin() + end));
        // Written over NaN = added onto zeros.
        upload(g->dbias.get(), std::vector<float>(c.OC, 0.0f));
        matmul_bias_backward(*ctx, g->dbias.get(), g->scratch.get(), g->dout_ptr(c), c.N, c.OC);
        const std::vector<unsigned char> onto_zeros =
            download_bytes(g->dbias.get(), c.OC * sizeof(floatX));
        poison(g->dbias.get(), c.OC);
        matmul_bias_backward(*ctx, g->dbias.get(), g->scratch.get(), g->dout_ptr(c), c.N, c.OC,
                             false);
        std::snprintf(name, sizeof(name), "matmul_bias_backward %s: written = added onto zeros",
                      c.name);
        check_bitwise_equal(name, download_bytes(g->dbias.get(), c.OC * sizeof(floatX)),
                            onto_zeros);
    }
}

void test_linear(Context* ctx, const LinearCase& c, uint64_t seed, bool tf32) {
    std::printf("%s: N=%d IC=%d OC=%d%s%s%s%s\n", c.name, c.N, c.IC, c.OC, c.bias ? " bias" : "",
                c.gelu ? " gelu" : "", c.dgelu ? " dgelu" : "",
                c.misaligned ? " dout misaligned" : "");
    const LinearData d = make_linear_data(c, seed);
    const LinearRef r = linear_reference(c, d);
    LinearDevice g(c);
    upload_linear(c, d, &g);
    test_forward(*ctx, c, &g, d, r, tf32);
    test_backward(ctx, c, &g, d, r, tf32);
}

// matmul_strided_batched: C_i (M, N) = alpha op(A_i) op(B_i) + beta C_i, A_i (M, K) or (K, M)
// when trans_a, B_i (K, N) or (N, K) when trans_b, row-major, packed, batch strides of a whole
// matrix plus `pad` elements.
struct BatchedCase {
    const char* name;
    int M, N, K, batch;
    bool trans_a, trans_b;
    float alpha, beta;
    int pad;
};

void test_batched(const Context& ctx, const BatchedCase& c, uint64_t seed, bool tf32) {
    const int lda = c.trans_a ? c.M : c.K, ldb = c.trans_b ? c.K : c.N, ldc = c.N;
    const long long sa = (long long)c.M * c.K + c.pad, sb = (long long)c.K * c.N + c.pad,
                    sc = (long long)c.M * c.N + c.pad;
    Rng rng(seed);
    std::vector<float> A(sa * c.batch), B(sb * c.batch), C0(sc * c.batch);
    fill_uniform(A, rng, -1.0f, 1.0f);
    fill_uniform(B, rng, -1.0f, 1.0f);
    fill_uniform(C0, rng, -1.0f, 1.0f);
    for (std::vector<float>* v : {&A, &B, &C0}) round_to_floatx(*v);
    // The reference in double; the scale is the same sum of absolute values (beta's part too).
    std::vector<float> ref = C0, scale(C0.size(), 0.0f);
    for (int b = 0; b < c.batch; b++) {
        for (int i = 0; i < c.M; i++) {
            for (int j = 0; j < c.N; j++) {
                double acc = 0.0, mag = 0.0;
                for (int k = 0; k < c.K; k++) {
                    const double a =
                        A[b * sa + (c.trans_a ? (size_t)k * lda + i : (size_t)i * lda + k)];
                    const double x =
                        B[b * sb + (c.trans_b ? (size_t)j * ldb + k : (size_t)k * ldb + j)];
                    acc += a * x;
                    mag += std::fabs(a * x);
                }
                const size_t o = b * sc + (size_t)i * ldc + j;
                ref[o] = (float)(c.alpha * acc + c.beta * C0[o]);
                scale[o] = (float)(std::fabs(c.alpha) * mag + std::fabs(c.beta * C0[o]));
            }
        }
    }
    DeviceBuffer<floatX> dA(A.size()), dB(B.size()), dC(C0.size());
    upload(dA.get(), A);
    upload(dB.get(), B);
    upload(dC.get(), C0);
    matmul_strided_batched(ctx, dC.get(), dA.get(), dB.get(), c.M, c.N, c.K, c.trans_a, c.trans_b,
                           lda, ldb, ldc, sa, sb, sc, c.batch, c.alpha, c.beta);
    std::vector<float> got = download(dC.get(), C0.size());
    // The pad between matrices must be left alone (C0's values); compare the matrices only.
    std::vector<float> g2, r2, s2, pad_got, pad_ref;
    for (size_t o = 0; o < got.size(); o++) {
        const bool in_matrix = (long long)(o % sc) < (long long)c.M * c.N;
        (in_matrix ? g2 : pad_got).push_back(got[o]);
        (in_matrix ? r2 : pad_ref).push_back(in_matrix ? ref[o] : C0[o]);
        if (in_matrix) s2.push_back(scale[o]);
    }
    char name[96];
    std::snprintf(name, sizeof(name), "%s: M=%d N=%d K=%d x%d", c.name, c.M, c.N, c.K, c.batch);
    check_sum("strided batched", name, g2, r2, s2, c.K, tf32);
    if (!pad_got.empty()) {
        std::snprintf(name, sizeof(name), "strided batched %s: pads untouched", c.name);
        check_close(name, pad_got, pad_ref, 0.0f, 0.0f);
    }
}

// row_stats_gemm_backward (matmul_sm90.cuh): dinp = dout @ w against the CPU's product (the
// DEFAULT bounds), D per (b, head, t) against the sums in double of the dinp it wrote times out
// (fp32 sums of 64 exact products: the accumulation bound at K = 64), lse2 = lse * log2(e) bit
// for bit (one fp32 multiply on either side), every output over poison, and a second run's
// bits. Where the kernel does not apply (not an sm_90 device, the fp32 build) it says so.
void test_row_stats(const Context& ctx, const char* name, int B, int T, int NH, int OC,
                    uint64_t seed) {
    const int C = NH * 64, N = B * T;
    const size_t NC = (size_t)N * C, stats = (size_t)B * NH * T;
    Rng rng(seed);
    std::vector<float> dout((size_t)N * OC), w((size_t)OC * C), out(NC), lse(stats);
    fill_uniform(dout, rng, -1.0f, 1.0f);
    const float wscale = 1.7f / std::sqrt((float)OC);
    fill_uniform(w, rng, -wscale, wscale);
    fill_uniform(out, rng, -1.0f, 1.0f);
    fill_uniform(lse, rng, -2.0f, 9.0f);
    for (std::vector<float>* v : {&dout, &w, &out}) round_to_floatx(*v);
    DeviceBuffer<floatX> g_dout(dout.size()), g_w(w.size()), g_out(NC), g_dinp(NC);
    DeviceBuffer<float> g_lse(stats), g_d(stats), g_lse2(stats);
    if (!row_stats_gemm_applies(ctx, N, C, OC, T, NH,
                                {g_dinp.get(), g_dout.get(), g_w.get(), g_out.get(), g_d.get(),
                                 g_lse2.get(), g_lse.get()})) {
        std::printf("  row stats %-34s not run: the kernel does not apply here\n", name);
        return;
    }
    upload(g_dout.get(), dout);
    upload(g_w.get(), w);
    upload(g_out.get(), out);
    upload(g_lse.get(), lse);
    RowStatsTarget target;
    target.d = g_d.get(), target.lse2 = g_lse2.get(), target.lse = g_lse.get();
    target.T = T, target.NH = NH;
    auto run = [&] {
        poison(g_dinp.get(), NC);
        poison(g_d.get(), stats);
        poison(g_lse2.get(), stats);
        row_stats_gemm_backward(ctx, g_dinp.get(), target, g_dout.get(), g_w.get(), g_out.get(), N,
                                C, OC);
        std::vector<unsigned char> bytes = download_bytes(g_dinp.get(), NC * sizeof(floatX));
        for (const std::vector<unsigned char>& more :
             {download_bytes(g_d.get(), stats * 4), download_bytes(g_lse2.get(), stats * 4)}) {
            bytes.insert(bytes.end(), more.begin(), more.end());
        }
        return bytes;
    };
    const std::vector<unsigned char> first = run();
    // dinp (N, C) = dout (N, OC) @ w (OC, C): the CPU's forward product with w transposed.
    std::vector<float> wt(w.size()), awt(w.size());
    for (int k = 0; k < OC; k++) {
        for (int c = 0; c < C; c++) {
            wt[(size_t)c * OC + k] = w[(size_t)k * C + c];
            awt[(size_t)c * OC + k] = std::fabs(w[(size_t)k * C + c]);
        }
    }
    std::vector<float> ref(NC), scale(NC);
    cpu::matmul_forward(ref.data(), dout.data(), wt.data(), nullptr, N, OC, C);
    cpu::matmul_forward(scale.data(), absolute(dout).data(), awt.data(), nullptr, N, OC, C);
    const std::vector<float> dinp = download(g_dinp.get(), NC);
    char label[96];
    std::snprintf(label, sizeof(label), "%s: dinp", name);
    check_sum("row stats", label, dinp, ref, scale, OC, false);
    std::vector<float> d_ref(stats), lse2_ref(stats);
    std::vector<double> d_bound(stats);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const size_t i = ((size_t)b * NH + h) * T + t, row = (size_t)b * T + t;
                double sum = 0.0, mag = 0.0;
                for (int c = 64 * h; c < 64 * h + 64; c++) {
                    const double x = (double)dinp[row * C + c] * out[row * C + c];
                    sum += x, mag += std::fabs(x);
                }
                d_ref[i] = (float)sum;
                d_bound[i] = accum_bound(mag, 64, false);
                lse2_ref[i] = lse[i] * kLog2e;
            }
        }
    }
    std::snprintf(label, sizeof(label), "row stats %s: D", name);
    check_within(label, download(g_d.get(), stats), d_ref, d_bound);
    std::snprintf(label, sizeof(label), "row stats %s: lse2", name);
    check_bitwise_equal(label, download_bytes(g_lse2.get(), stats * 4),
                        std::vector<unsigned char>(
                            reinterpret_cast<const unsigned char*>(lse2_ref.data()),
                            reinterpret_cast<const unsigned char*>(lse2_ref.data() + stats)));
    std::snprintf(label, sizeof(label), "row stats %s: run again", name);
    check_bitwise_equal(label, run(), first);
}

void run_all(Context* ctx, bool tf32) {
    // Widths the model can have: C a multiple of 16 in bf16 (flash attention's head sizes), of 4
    // in fp32 (16-byte bias slices); U is that unit. The GELU's width is 4C (the aux matrix's
    // leading dimension, pre_gelu's, is then a multiple of 16 elements in both builds).
    const int U = sizeof(floatX) == 2 ? 16 : 4;
    const LinearCase linear[] = {
        {"GPT-2 qkv", 1024, 768, 2304, true, false, false, false},
        {"GPT-2 attproj", 1024, 768, 768, true, false, false, false},
        {"GPT-2 fc", 1024, 768, 3072, true, true, false, false},
        {"GPT-2 fcproj", 1024, 3072, 768, true, false, true, false},
        {"GPT-2 lm-head", 32, 768, 50304, false, false, false, false},
        {"odd N, GELU", 77, 3 * U, 4 * 5 * U, true, true, false, false},
        {"one row", 1, U, 3 * U, true, false, false, false},
        {"GELU and DGELU without bias", 31, 4 * 2 * U, 4 * 3 * U, false, true, true, false},
        {"bias gradient through BGRADB", 45, 2 * U, 3 * U, true, false, false, true},
        {"all odd, no bias", 33, 13, 1003, false, false, false, false},
        {"tiny odd, no bias", 5, 7, 9, false, false, false, false},
        {"GELU GEMM, N not a multiple of 128", 333, 256, 384, true, true, true, false},
        {"GELU GEMM, GPT-2 1.5B fc", 130, 1600, 6400, true, true, false, false},
        {"GELU GEMM, GPT-2 1.5B fcproj", 130, 6400, 1600, true, false, true, false},
        {"plain GEMM, N not a multiple of 128", 333, 192, 256, true, false, false, false},
        {"plain GEMM without bias, rows under a tile", 77, 128, 512, false, false, false, false},
        {"plain GEMM, one k-block, tiles over the SMs", 9000, 64, 1024, true, false, false, false},
        {"GELU GEMM on 128 x 256 tiles, rows past a tile", 333, 128, 512, true, true, false, false},
    };
    uint64_t seed = 1000;
    for (const LinearCase& c : linear) test_linear(ctx, c, seed++, tf32);
    const BatchedCase batched[] = {
        {"Q K^T (trans_b)", 37, 37, 64, 3, false, true, 0.125f, 0.0f, 0},
        {"P V", 37, 64, 37, 3, false, false, 1.0f, 0.0f, 0},
        {"accumulate, trans_a, padded", 29, 21, 24, 2, true, false, 0.5f, 1.0f, 5},
        {"both transposed, odd", 13, 11, 9, 4, true, true, -1.0f, 1.0f, 3},
    };
    for (const BatchedCase& c : batched) test_batched(*ctx, c, seed++, tf32);
    if (ctx->gelu_gemm == 2) {  // once; the switches play no part
        test_row_stats(*ctx, "GPT-2 attproj, B=2 T=1024", 2, 1024, 12, 768, seed++);
        test_row_stats(*ctx, "rows past a tile, T=64 B=3 NH=10", 3, 64, 10, 320, seed++);
        test_row_stats(*ctx, "one k-block, T=192 NH=2", 1, 192, 2, 64, seed++);
    }
}

}  // namespace

int main() {
    skip_if_no_device();
    // LLMC_GELU_GEMM=3 (the fc forward on the 128 x 256 kernel where its shape applies), 2 (both
    // of our GELU kernels where they apply) with every plain product on our kernel too, then 0
    // with none (cuBLASLt's epilogues): the default GELU setting, 1, takes one of each. The fp32
    // build has cuBLASLt's only, and runs once.
    for (int gelu_gemm : {3, 2, 0}) {
        if (gelu_gemm != 2 && sizeof(floatX) == 4) continue;
        Context ctx;
        context_init(&ctx, 0, /*tf32=*/false);
        ctx.gelu_gemm = gelu_gemm;
        ctx.plain_gemm = gelu_gemm == 2 ? kPlainGemmAll : 0;
        std::printf("test_matmul: %s build%s, gelu gemm %d, plain gemm mask %u\n", kPrecisionName,
                    sizeof(floatX) == 4 ? ", TF32 off" : "", gelu_gemm, ctx.plain_gemm);
        run_all(&ctx, false);
    }
    if (sizeof(floatX) == 4) {
        Context ctx;
        context_init(&ctx, 0, /*tf32=*/true);
        std::printf("test_matmul: fp32 build, TF32 on\n");
        run_all(&ctx, true);
    }
    return test_summary("test_matmul");
}
