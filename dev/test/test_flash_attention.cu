// test_flash_attention.cu: flash_attention_forward / _backward against cpu::attention_*.
//
// Inputs are seeded random values rounded to bf16 (what the kernels read); the reference is the
// CPU fp32/double implementation on those inputs. The backward is fed the reference out (rounded
// to bf16) and lse, so its check does not inherit the forward's rounding.
//
// Tolerance (every element of out, lse, dq, dk, dv): a plain bf16 implementation is emulated on
// the CPU (the reference with P rounded to bf16 before O = P V and dV = P^T dO, dS rounded to
// bf16 before dQ = dS K and dK = dS^T Q, D = dout . out, outputs rounded to bf16), and its
// largest error against the reference, err_plain, is measured per tensor. The kernel may err by
// at most 2 * err_plain (flash keeps P and dS in the same bf16 as the plain pipeline, plus fp32
// online-softmax rescaling, so about the same error is expected; 2x is the project's rule)
// plus one bf16 ulp of the tensor's largest value (two correct implementations can round an
// output element to neighbouring bf16 values).
// The qkv bias gradient the backward can add (dbias += column sums of dqkv) is checked the same
// way against the column sums of the reference and of the plain pipeline (see test_variants).
// The first run starts from NaN-filled outputs and scratch; a second run, without the bias
// gradient, must reproduce every output bit for bit (determinism, and dqkv does not depend on
// whether the bias is asked for), and a third the bias gradient. Every shape runs the default
// tile-shape variants, then each other variant of one pass with the others at default
// (flash_attention_variants).
// Both sets of kernels run (flash_attention.cuh, FlashPath): mma.sync on every shape, and the
// Hopper (sm_90a) kernels where flash_attention_sm90_available (else one SKIP line says why):
// every forward variant on HS 64 and 128, each followed by the Hopper backward on HS 64 (the
// mma.sync one on 128), then every variant of the Hopper backward's dq and dk/dv kernels, and
// the fused Hopper backward (its dk and dv bitwise the two kernels'); the default path must
// equal its kernels' variant 0 (or the fused backward, per LLMC_FLASH_FUSED_BACKWARD) bit for bit.
// `--small` runs only the small shapes (for compute-sanitizer); `--shape B,T,NH,HS` one shape.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "context.cuh"
#include "flash_attention.cuh"
#include "ref/cpu_ops.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

typedef __nv_bfloat16 bf16;

// ramp: keys scaled up toward key 0 (make_reference), so that a row's largest score grows by
// about 15 (log2 units) across the key tiles, which the Hopper forward takes from the diagonal
// down: every tile moves the running max and rescales O by a factor far from 1 (with the plain
// random inputs a row's max seldom grows much after the first tile).
struct Shape {
    int B, T, NH, HS;
    bool ramp = false;
    int C() const { return NH * HS; }
    const char* kind() const { return ramp ? " ramp" : ""; }
};

float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
void round_bf16(std::vector<float>& v) {
    for (float& x : v) x = round_bf16(x);
}

// Runs body(i) for i in [0, n) on every core.
template <typename Body>
void parallel_for(int n, const Body& body) {
    const int threads = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    for (int w = 0; w < threads; w++) {
        pool.emplace_back([&, w] {
            for (int i = w; i < n; i += threads) body(i);
        });
    }
    for (std::thread& t : pool) t.join();
}

double dot(const float* a, const float* b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

// The plain bf16 pipeline (see the file comment): out (B, T, C) and dqkv (B, T, 3C), given the
// reference lse and the bf16 reference out for the backward.
void plain_bf16_attention(std::vector<float>& out, std::vector<float>& dqkv, const Shape& s,
                          const std::vector<float>& qkv, const std::vector<float>& dout,
                          const std::vector<float>& ref_out, const std::vector<float>& lse) {
    const int T = s.T, HS = s.HS, C = s.C(), C3 = 3 * C;
    const double scale = 1.0 / std::sqrt((double)HS);
    parallel_for(s.B * s.NH, [&](int bh) {
        const int b = bh / s.NH, h = bh % s.NH;
        const float* base = qkv.data() + (size_t)b * T * C3 + h * HS;
        std::vector<double> o(HS), dq((size_t)T * HS, 0.0), dk((size_t)T * HS, 0.0),
            dv((size_t)T * HS, 0.0);
        for (int t = 0; t < T; t++) {
            const float* q = base + (size_t)t * C3;
            const size_t row = ((size_t)b * T + t) * C + h * HS;
            const double l = lse[(size_t)bh * T + t];
            const double d = dot(dout.data() + row, ref_out.data() + row, HS);
            std::fill(o.begin(), o.end(), 0.0);
            for (int k = 0; k <= t; k++) {
                const float* kv = base + (size_t)k * C3;
                const double p = std::exp(dot(q, kv + C, HS) * scale - l);
                const double pb = round_bf16((float)p);
                const double dp = dot(dout.data() + row, kv + 2 * C, HS);
                const double ds = round_bf16((float)(p * (dp - d)));
                for (int i = 0; i < HS; i++) {
                    o[i] += pb * kv[2 * C + i];
                    dv[(size_t)k * HS + i] += pb * dout[row + i];
                    dq[(size_t)t * HS + i] += ds * kv[C + i] * scale;
                    dk[(size_t)k * HS + i] += ds * q[i] * scale;
                }
            }
            for (int i = 0; i < HS; i++) out[row + i] = round_bf16((float)o[i]);
        }
        for (int t = 0; t < T; t++) {
            float* r = dqkv.data() + ((size_t)b * T + t) * C3 + h * HS;
            for (int i = 0; i < HS; i++) {
                r[i] = round_bf16((float)dq[(size_t)t * HS + i]);
                r[C + i] = round_bf16((float)dk[(size_t)t * HS + i]);
                r[2 * C + i] = round_bf16((float)dv[(size_t)t * HS + i]);
            }
        }
    });
}

struct Reference {
    Shape s;
    std::vector<float> qkv, dout, out, lse, dqkv;  // inputs (bf16 values) and reference outputs
    std::vector<float> plain_out, plain_dqkv;      // the plain bf16 pipeline
    // The qkv bias gradient: a random starting value (bf16), plus the column sums of dqkv over
    // the B*T rows, from the reference and from the plain pipeline.
    std::vector<float> bias_init, bias_ref, bias_plain;
};

// init[c] + sum over rows of x (rows, cols), in double.
std::vector<float> add_column_sums(const std::vector<float>& init, const std::vector<float>& x,
                                   size_t rows, int cols) {
    std::vector<double> acc(init.begin(), init.end());
    for (size_t r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) acc[c] += x[r * cols + c];
    }
    return std::vector<float>(acc.begin(), acc.end());
}

Reference make_reference(const Shape& s, uint64_t seed) {
    const size_t BT = (size_t)s.B * s.T;
    const int C = s.C();
    Reference r;
    r.s = s;
    r.qkv.resize(BT * 3 * C);
    r.dout.resize(BT * C);
    r.out.resize(BT * C);
    r.lse.resize((size_t)s.B * s.NH * s.T);
    r.dqkv.resize(BT * 3 * C);
    r.plain_out.resize(BT * C);
    r.plain_dqkv.resize(BT * 3 * C);
    Rng rng(seed);
    // q, k in [-2, 2] give scores with a standard deviation of ~1.3 for every HS: softmax rows
    // that are neither flat nor one-hot.
    fill_uniform(r.qkv, rng, -2.0f, 2.0f);
    fill_uniform(r.dout, rng, -1.0f, 1.0f);
    if (s.ramp) {  // k of position t times 1 + 4 (T - 1 - t) / (T - 1): up to 5 at key 0
        for (size_t bt = 0; bt < BT; bt++) {
            const int t = (int)(bt % s.T);
            const float f = 1.0f + 4.0f * (float)(s.T - 1 - t) / (float)std::max(s.T - 1, 1);
            for (int c = 0; c < C; c++) r.qkv[bt * 3 * C + C + c] *= f;
        }
    }
    round_bf16(r.qkv);
    round_bf16(r.dout);
    cpu::attention_forward(r.out.data(), r.lse.data(), r.qkv.data(), s.B, s.T, C, s.NH);
    round_bf16(r.out);  // the backward reads out as bf16
    cpu::attention_backward(r.dqkv.data(), r.dout.data(), r.qkv.data(), r.out.data(), r.lse.data(),
                            s.B, s.T, C, s.NH);
    plain_bf16_attention(r.plain_out, r.plain_dqkv, s, r.qkv, r.dout, r.out, r.lse);
    r.bias_init.resize(3 * C);
    fill_uniform(r.bias_init, rng, -1.0f, 1.0f);
    round_bf16(r.bias_init);
    r.bias_ref = add_column_sums(r.bias_init, r.dqkv, BT, 3 * C);
    r.bias_plain = add_column_sums(r.bias_init, r.plain_dqkv, BT, 3 * C);
    return r;
}

struct DeviceTensors {
    DeviceBuffer<bf16> qkv, dout, ref_out, out, dqkv, dbias;
    DeviceBuffer<float> ref_lse, lse;
    DeviceBuffer<unsigned char> scratch;
    explicit DeviceTensors(const Shape& s)
        : qkv((size_t)s.B * s.T * 3 * s.C()),
          dout((size_t)s.B * s.T * s.C()),
          ref_out((size_t)s.B * s.T * s.C()),
          out((size_t)s.B * s.T * s.C()),
          dqkv((size_t)s.B * s.T * 3 * s.C()),
          dbias((size_t)3 * s.C()),
          ref_lse((size_t)s.B * s.NH * s.T),
          lse((size_t)s.B * s.NH * s.T),
          scratch(flash_attention_scratch_bytes(s.B, s.T, s.NH, s.HS)) {}
};

struct RunBytes {
    std::vector<unsigned char> out, lse, dqkv, dbias;
};

// Tile-shape variants of the three passes (forward, dQ, dK/dV) for one run, and the kernels of
// the forward and the backward (kAuto: whichever the launchers pick by default).
struct Variants {
    int fwd, dq, dkdv;
    FlashPath fwd_path = FlashPath::kMmaSync;
    FlashPath bwd_path = FlashPath::kMmaSync;
};

// With bias_init, the backward also adds the qkv bias gradient into dbias (set to bias_init);
// with write_dbias instead, it writes dbias over NaN (accumulate_dbias false: never read).
RunBytes run_flash(const Context& ctx, DeviceTensors& d, const Shape& s, const Variants& v,
                   bool poison_all, const std::vector<float>* bias_init, bool write_dbias = false) {
    if (bias_init != nullptr) upload(d.dbias.get(), *bias_init);
    if (write_dbias) poison(d.dbias.get(), d.dbias.size());
    if (poison_all) {
        poison(d.out.get(), d.out.size());
        poison(d.lse.get(), d.lse.size());
        poison(d.dqkv.get(), d.dqkv.size());
        poison(d.scratch.get(), d.scratch.size());
    }
    flash_attention_forward(ctx, d.out.get(), d.lse.get(), d.qkv.get(), s.B, s.T, s.NH, s.HS, v.fwd,
                            v.fwd_path);
    flash_attention_backward(ctx, d.dqkv.get(), d.scratch.get(), d.dout.get(), d.qkv.get(),
                             d.ref_out.get(), d.ref_lse.get(), s.B, s.T, s.NH, s.HS, v.dq, v.dkdv,
                             bias_init != nullptr || write_dbias ? d.dbias.get() : nullptr,
                             v.bwd_path, /*accumulate_dbias=*/!write_dbias);
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    return RunBytes{download_bytes(d.out.get(), d.out.size() * sizeof(bf16)),
                    download_bytes(d.lse.get(), d.lse.size() * sizeof(float)),
                    download_bytes(d.dqkv.get(), d.dqkv.size() * sizeof(bf16)),
                    download_bytes(d.dbias.get(), d.dbias.size() * sizeof(bf16))};
}

// The dk and dv columns of dqkv's bytes (B*T rows of 3C bf16).
std::vector<unsigned char> dkdv_bytes(const std::vector<unsigned char>& dqkv, const Shape& s) {
    const size_t row = 3 * (size_t)s.C() * sizeof(bf16), q = (size_t)s.C() * sizeof(bf16);
    std::vector<unsigned char> out;
    for (size_t at = 0; at + row <= dqkv.size(); at += row) {
        out.insert(out.end(), dqkv.begin() + at + q, dqkv.begin() + at + row);
    }
    return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    float m = 0.0f;
    for (size_t i = 0; i < a.size(); i++) m = std::fmax(m, std::fabs(a[i] - b[i]));
    return m;
}

std::vector<float> qkv_part(const std::vector<float>& x, size_t BT, int C, int p) {
    std::vector<float> part(BT * C);
    for (size_t bt = 0; bt < BT; bt++) {
        for (int c = 0; c < C; c++) part[bt * C + c] = x[bt * 3 * C + (size_t)p * C + c];
    }
    return part;
}

// got vs ref with atol = 2 * (plain pipeline's max error) + one bf16 ulp of max |ref| +
// kFp32SumRel * sum_scale. The last term: the kernels sum dP_ts = dO_t . v_s and D_t = dO_t . O_t
// in fp32 (the emulation in double), and dS = P (dP - D) cancels them, so dq and dk carry an
// absolute error of a few fp32 ulps of these sums (|dP| <= HS * max|dO| * max|v| ~ HS) even
// where dq and dk themselves vanish (T = 1: dq = dk = 0 exactly); sum_scale is max |dqkv| for
// the gradients (their common scale), 0 for out (no cancellation).
constexpr float kFp32SumRel = 1.0f / 65536.0f;
void check_vs_plain(const char* label, const char* what, const std::vector<float>& got,
                    const std::vector<float>& ref, const std::vector<float>& plain,
                    float sum_scale) {
    const float err_plain = max_abs_diff(plain, ref);
    const float atol = 2.0f * err_plain + kBf16RoundingRel * max_abs(ref) + kFp32SumRel * sum_scale;
    char name[128];
    std::snprintf(name, sizeof(name), "%s %s (plain bf16 err %.2e)", label, what, err_plain);
    check_close(name, got, ref, atol, 0.0f);
}

// Returns the outputs of the first run.
RunBytes test_variants(const Context& ctx, const Reference& r, DeviceTensors& d,
                       const Variants& v) {
    const Shape& s = r.s;
    auto path = [](FlashPath p) {
        return p == FlashPath::kSm90        ? "sm90 "
               : p == FlashPath::kSm90Fused ? "sm90 fused "
               : p == FlashPath::kAuto      ? "auto "
                                            : "";
    };
    char label[96];
    std::snprintf(label, sizeof(label), "B=%d T=%d NH=%d HS=%d%s (%sfwd%d %sdq%d dkdv%d)", s.B, s.T,
                  s.NH, s.HS, s.kind(), path(v.fwd_path), v.fwd, path(v.bwd_path), v.dq, v.dkdv);

    const RunBytes first = run_flash(ctx, d, s, v, /*poison_all=*/true, &r.bias_init);
    const size_t BT = (size_t)s.B * s.T;
    const std::vector<float> out = download(d.out.get(), d.out.size());
    const std::vector<float> lse = download(d.lse.get(), d.lse.size());
    const std::vector<float> dqkv = download(d.dqkv.get(), d.dqkv.size());
    check_vs_plain(label, "out", out, r.out, r.plain_out, 0.0f);
    // lse: fp32 sums of at most T exp2 terms (relative error < T * 2^-24 ~ 6e-5 at T=1000, as
    // absolute error after the log) plus the rounding of fp32 scores; the plain pipeline has
    // no error of its own here, so the bound is absolute.
    char name[192];
    std::snprintf(name, sizeof(name), "%s lse", label);
    check_close(name, lse, r.lse, 1e-4f, 0.0f);
    const char* parts[3] = {"dq", "dk", "dv"};
    for (int p = 0; p < 3; p++) {
        check_vs_plain(label, parts[p], qkv_part(dqkv, BT, s.C(), p),
                       qkv_part(r.dqkv, BT, s.C(), p), qkv_part(r.plain_dqkv, BT, s.C(), p),
                       max_abs(r.dqkv));
    }
    // The bias gradient: the plain pipeline's error in these sums twice, the bf16 rounding of
    // the result, and the fp32 cancellation error of each dq/dk element (as above) once per row.
    {
        const std::vector<float> dbias = download(d.dbias.get(), d.dbias.size());
        const float err_plain = max_abs_diff(r.bias_plain, r.bias_ref);
        const float atol = 2.0f * err_plain + kBf16RoundingRel * max_abs(r.bias_ref) +
                           kFp32SumRel * max_abs(r.dqkv) * (float)BT;
        std::snprintf(name, sizeof(name), "%s dbias += column sums (plain bf16 err %.2e)", label,
                      err_plain);
        check_close(name, dbias, r.bias_ref, atol, 0.0f);
    }

    // Without the bias gradient: the same dqkv, bit for bit (and a rerun of everything else).
    const RunBytes second = run_flash(ctx, d, s, v, /*poison_all=*/false, nullptr);
    std::snprintf(name, sizeof(name), "%s out rerun", label);
    check_bitwise_equal(name, first.out, second.out);
    std::snprintf(name, sizeof(name), "%s lse rerun", label);
    check_bitwise_equal(name, first.lse, second.lse);
    std::snprintf(name, sizeof(name), "%s dqkv rerun without dbias", label);
    check_bitwise_equal(name, first.dqkv, second.dqkv);
    const RunBytes third = run_flash(ctx, d, s, v, /*poison_all=*/false, &r.bias_init);
    std::snprintf(name, sizeof(name), "%s dbias rerun", label);
    check_bitwise_equal(name, first.dbias, third.dbias);
    if (v.dq == 0 && v.dkdv == 0) {  // the bias reduction is the same for every variant
        // The first micro-step's way: dbias written over NaN = added onto zeros.
        const std::vector<float> zeros(d.dbias.size(), 0.0f);
        const RunBytes onto_zeros = run_flash(ctx, d, s, v, /*poison_all=*/false, &zeros);
        const RunBytes written = run_flash(ctx, d, s, v, /*poison_all=*/false, nullptr, true);
        std::snprintf(name, sizeof(name), "%s dbias written = added onto zeros", label);
        check_bitwise_equal(name, written.dbias, onto_zeros.dbias);
    }
    return first;
}

// The default variants, then each other variant of one pass with the other passes at default;
// where the Hopper kernels apply, every variant of their forward; then the default path
// (kAuto), which must reproduce its path's variant 0 bit for bit.
void test_shape(const Context& ctx, const Shape& s, uint64_t seed) {
    const Reference r = make_reference(s, seed);
    DeviceTensors d(s);
    upload(d.qkv.get(), r.qkv);
    upload(d.dout.get(), r.dout);
    upload(d.ref_out.get(), r.out);
    upload(d.ref_lse.get(), r.lse);
    const RunBytes mma = test_variants(ctx, r, d, Variants{0, 0, 0});
    for (int v = 1; v < flash_attention_variants(FlashPass::kForward); v++) {
        test_variants(ctx, r, d, Variants{v, 0, 0});
    }
    // The Hopper forward's variants, each with the Hopper backward where it applies.
    const bool sm90_fwd = flash_attention_sm90_available(ctx, s.HS);
    const FlashPath bwd =
        flash_attention_sm90_backward_available(ctx, s.HS) ? FlashPath::kSm90 : FlashPath::kMmaSync;
    RunBytes sm90;
    for (int v = 0; sm90_fwd && v < flash_attention_variants(FlashPass::kForward, FlashPath::kSm90);
         v++) {
        const RunBytes run = test_variants(ctx, r, d, Variants{v, 0, 0, FlashPath::kSm90, bwd});
        if (v == 0) sm90 = run;
    }
    char name[128];
    // The fused Hopper backward: checked against the reference like every path, run to run bit
    // for bit (in test_variants), and its dk and dv (the dk/dv kernel's GEMMs and sums, with P^T
    // and dS^T read from shared memory instead of registers) bitwise the two kernels'.
    // Its variants add the same partials in the same order: the same bits as its variant 0.
    RunBytes fused;
    for (int v = 0; bwd == FlashPath::kSm90 &&
                    v < flash_attention_variants(FlashPass::kDkdv, FlashPath::kSm90Fused);
         v++) {
        const RunBytes run = test_variants(
            ctx, r, d, Variants{0, 0, v, FlashPath::kSm90Fused, FlashPath::kSm90Fused});
        std::snprintf(name, sizeof(name), "B=%d T=%d NH=%d HS=%d%s sm90 fused%d = sm90 dk, dv", s.B,
                      s.T, s.NH, s.HS, s.kind(), v);
        check_bitwise_equal(name, dkdv_bytes(sm90.dqkv, s), dkdv_bytes(run.dqkv, s));
        if (v == 0) {
            fused = run;
        } else {
            std::snprintf(name, sizeof(name), "B=%d T=%d NH=%d HS=%d%s sm90 fused%d = fused0 dqkv",
                          s.B, s.T, s.NH, s.HS, s.kind(), v);
            check_bitwise_equal(name, fused.dqkv, run.dqkv);
        }
    }
    const RunBytes autom =
        test_variants(ctx, r, d, Variants{0, 0, 0, FlashPath::kAuto, FlashPath::kAuto});
    const RunBytes& expected_fwd = sm90_fwd ? sm90 : mma;
    const bool auto_fused = flash_attention_fused_backward_chosen(ctx, s.B, s.T, s.NH, s.HS);
    const RunBytes& expected_bwd = auto_fused ? fused : sm90_fwd ? sm90 : mma;
    std::snprintf(name, sizeof(name), "B=%d T=%d NH=%d HS=%d%s auto = %s out", s.B, s.T, s.NH, s.HS,
                  s.kind(), sm90_fwd ? "sm90" : "mma.sync");
    check_bitwise_equal(name, expected_fwd.out, autom.out);
    std::snprintf(name, sizeof(name), "B=%d T=%d NH=%d HS=%d%s auto = %s dqkv, dbias", s.B, s.T,
                  s.NH, s.HS, s.kind(),
                  auto_fused                ? "sm90 fused"
                  : bwd == FlashPath::kSm90 ? "sm90"
                                            : "mma.sync");
    check_bitwise_equal(name, expected_bwd.dqkv, autom.dqkv);
    check_bitwise_equal(name, expected_bwd.dbias, autom.dbias);
    for (int v = 1; v < flash_attention_variants(FlashPass::kDq); v++) {
        test_variants(ctx, r, d, Variants{0, v, 0});
    }
    for (int v = 1; v < flash_attention_variants(FlashPass::kDkdv); v++) {
        test_variants(ctx, r, d, Variants{0, 0, v});
    }
    // The Hopper backward's variants, each kernel's with the other at its default. They issue
    // the same GEMMs and sums in the same order as variant 0 (only their overlap and ring
    // differ), so they must reproduce its bits.
    if (bwd == FlashPath::kSm90) {
        for (int pass = 0; pass < 2; pass++) {
            const FlashPass fp = pass == 0 ? FlashPass::kDq : FlashPass::kDkdv;
            for (int v = 1; v < flash_attention_variants(fp, FlashPath::kSm90); v++) {
                const Variants vs{0, pass == 0 ? v : 0, pass == 1 ? v : 0, FlashPath::kSm90,
                                  FlashPath::kSm90};
                const RunBytes run = test_variants(ctx, r, d, vs);
                std::snprintf(name, sizeof(name),
                              "B=%d T=%d NH=%d HS=%d%s sm90 %s%d = %s0 dqkv, dbias", s.B, s.T, s.NH,
                              s.HS, s.kind(), pass == 0 ? "dq" : "dkdv", v,
                              pass == 0 ? "dq" : "dkdv");
                check_bitwise_equal(name, sm90.dqkv, run.dqkv);
                check_bitwise_equal(name, sm90.dbias, run.dbias);
            }
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    skip_if_no_device();
    const bool small_only = argc > 1 && std::strcmp(argv[1], "--small") == 0;
    // --shape B,T,NH,HS: that shape alone (to rerun one, say a failing one, many times).
    Shape one{0, 0, 0, 0};
    if (argc > 1 && std::strcmp(argv[1], "--shape") == 0) {
        LLMC_CHECK(argc > 2 &&
                       std::sscanf(argv[2], "%d,%d,%d,%d", &one.B, &one.T, &one.NH, &one.HS) == 4 &&
                       one.B > 0 && one.T > 0 && one.NH > 0 && one.HS > 0 && one.HS % 16 == 0,
                   "test_flash_attention: --shape takes B,T,NH,HS (positive, HS a multiple of "
                   "16), not '%s'.",
                   argc > 2 ? argv[2] : "");
    }
    // Every head size the dispatch covers, T = 1, odd T below, at and above tile multiples.
    const Shape small_shapes[] = {
        {1, 1, 1, 64},
        {2, 17, 3, 16},
        {1, 77, 2, 48},
        {2, 129, 1, 80},
        {1, 64, 2, 32},
        {1, 33, 1, 112},
        {2, 65, 2, 96},
        {1, 100, 1, 128},
        // Three key tiles of scores growing toward key 0 (Shape::ramp).
        {1, 300, 2, 64, true},
    };
    const Shape large_shapes[] = {
        {4, 1024, 12, 64},  // GPT-2 d12
        {2, 512, 4, 128},   // HS=128
        {1, 1000, 2, 80},   // long awkward T
        {3, 129, 1, 112},   // NH=1
        {1, 777, 3, 16},
        // Over kAcrossWaves (flash_attention.cu, "Block order") waves of blocks on a GPU of up to
        // ~200 SMs, so the kernels take the head from the grid's y; every shape above, the head
        // from its x.
        {24, 257, 12, 64},
        {2, 1024, 3, 64, true},  // scores growing toward key 0 (Shape::ramp)
        {3, 777, 1, 128, true},
        {1, 2048, 2, 64, true},
    };
    // The Hopper kernels' head sizes at every T that matters to their tiles (128 rows, or 192
    // placed from the top at a multiple of 64): 1, odd, around 64 and 128, partial last tiles,
    // multiples, several tiles, the top tile's first row at 0, -64 and -128; B*NH odd.
    const int sm90_ts[] = {1, 17, 63, 64, 65, 77, 129, 193, 333, 777, 1000, 1024, 2048};
    std::vector<Shape> sm90_small, sm90_large;
    for (int hs : {64, 128}) {
        for (size_t i = 0; i < sizeof(sm90_ts) / sizeof(sm90_ts[0]); i++) {
            const int T = sm90_ts[i];
            const Shape s = (i + hs / 64) % 2 == 0 ? Shape{1, T, 3, hs} : Shape{3, T, 1, hs};
            (T <= 129 ? sm90_small : sm90_large).push_back(s);
        }
    }
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    if (!flash_attention_sm90_available(ctx, 64)) {
        std::printf(
            "SKIP sm90 path: needs a compute capability 9.0 GPU (this is %d.%d), a build for "
            "sm_90a and LLMC_FLASH_SM90 unset or 1; the mma.sync path runs alone\n",
            ctx.props.major, ctx.props.minor);
    }
    uint64_t seed = 4242;
    if (one.B > 0) {
        test_shape(ctx, one, seed);
        return test_summary("test_flash_attention");
    }
    for (const Shape& s : small_shapes) test_shape(ctx, s, seed++);
    for (const Shape& s : sm90_small) test_shape(ctx, s, seed++);
    if (!small_only) {
        for (const Shape& s : large_shapes) test_shape(ctx, s, seed++);
        for (const Shape& s : sm90_large) test_shape(ctx, s, seed++);
    }
    return test_summary("test_flash_attention");
}
