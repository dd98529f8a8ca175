// test_adamw.cu: the fused AdamW update against the CPU reference (cpu::adamw per tensor).
//
// Layouts: GPT-2 124M's 16 tensors (the trainer's path: with a master copy in the bf16 build,
// without in fp32), and 5 small tensors of odd sizes whose boundaries split the 4-element packs,
// run with and without master and once from pointers one element off alignment (the
// one-element path). Steps change lr and t (read from device memory) and the clipping: active,
// inactive, and off (no norm pointer). Each step starts both sides from the GPU's previous
// state, so errors do not compound; m, v, master and params are all compared (with master in
// the bf16 build: every param is one of the two bf16 neighbours of its master value).
// Stochastic rounding (bf16 build): with lr = 0 master stays exactly as uploaded, so params is
// the rounding of known values: the fraction rounded up matches the gap fraction (5 sigma),
// exact values and NaN pass through, a rerun and the one-element path give the same bits,
// another step or seed other bits. Skipping: a non-finite norm leaves every array's bits.
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "adamw.cuh"
#include "context.cuh"
#include "ref/cpu_ops.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

constexpr AdamWHyper kHyper = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1234};

// m, v, master are float in both builds, from the same floatX grads. The GPU works in float,
// the CPU in double: m = b1 m + (1-b1) g with |m| <= 0.02 is off by a few ulp (~1e-9), v (a sum
// of positive terms) by a few ulp relative. p: an ulp of |p| <= 1 (6e-8) plus lr * |step <= 5|
// * ~1e-6 (powf in the bias corrections, expf-free float math), ~1e-7; 1e-6 leaves 10x. The
// smallest update, lr * wd * |p| ~ 1e-3 |p|, is far above that.
constexpr float kMomentAtol = 1e-8f;
constexpr float kSecondMomentAtol = 1e-12f;
constexpr float kStateRtol = 1e-5f;
constexpr float kParamAtol = 1e-6f;
constexpr float kParamRtol = 1e-6f;
#if defined(ENABLE_BF16)
// Without master the bf16 params are the float result rounded once: half an ulp
// (kBf16RoundingRel); 2x that.
constexpr float kLowParamRtol = 2 * kBf16RoundingRel;
#else
constexpr float kLowParamRtol = kParamRtol;
#endif

struct Layout {
    const char* name;
    std::vector<size_t> sizes;
    std::vector<int> decayed;
};

struct Step {
    float lr;
    int t;
    float grad_clip;     // 0: off, norm pointer null
    float norm_squared;  // what global_norm_squared would have written
};

struct State {
    std::vector<float> params, master, m, v;  // params hold floatX values
};

Layout gpt2_layout() {
    const size_t C = 768, L = 12, Vp = 50304, maxT = 1024;
    return {"gpt2 124M",
            {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C,
             L * C, L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C},
            {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0}};
}

AdamWTensors make_tensors(const Layout& lay) {
    AdamWTensors t{};
    t.count = (int)lay.sizes.size();
    t.offsets[0] = 0;
    for (int k = 0; k < t.count; k++) {
        t.offsets[k + 1] = t.offsets[k] + lay.sizes[k];
        t.decayed[k] = lay.decayed[k];
    }
    return t;
}

State make_state(size_t total, bool use_master, Rng& rng) {
    State s;
    s.params.resize(total);
    s.m.resize(total);
    s.v.resize(total);
    fill_uniform(s.params, rng, -1.0f, 1.0f);
    fill_uniform(s.m, rng, -0.01f, 0.01f);
    fill_uniform(s.v, rng, 1e-4f, 1e-3f);
    if (use_master) {
        s.master = s.params;
    }
    round_to_floatx(s.params);
    return s;
}

// The reference step on a copy of the state, tensor by tensor.
State reference_step(const State& s, const std::vector<float>& grads, const AdamWTensors& t,
                     const Step& st, bool use_master) {
    State r = s;
    float* p = use_master ? r.master.data() : r.params.data();
    const float scale = st.grad_clip > 0.0f
                            ? std::fmin(1.0f, st.grad_clip / (std::sqrt(st.norm_squared) + 1e-6f))
                            : 1.0f;
    for (int k = 0; k < t.count; k++) {
        const size_t off = t.offsets[k], n = t.offsets[k + 1] - off;
        cpu::adamw(p + off, r.m.data() + off, r.v.data() + off, grads.data() + off, n, st.lr,
                   kHyper.beta1, kHyper.beta2, kHyper.eps,
                   t.decayed[k] ? kHyper.weight_decay : 0.0f, st.t, scale);
    }
    return r;
}

struct Device {
    DeviceBuffer<floatX> params, grads;
    DeviceBuffer<float> master, m, v, norm;
    DeviceBuffer<AdamWStepValues> step_values;
    size_t offset;
    Device(size_t total, size_t offset)
        : params(total + offset),
          grads(total + offset),
          master(total + offset),
          m(total + offset),
          v(total + offset),
          norm(1),
          step_values(1),
          offset(offset) {}
};

// One step on the GPU from state s; returns the GPU's new state.
State gpu_step(const Context& ctx, Device& d, const State& s, const std::vector<float>& grads,
               const AdamWTensors& t, const Step& st, bool use_master) {
    const size_t o = d.offset, total = s.params.size();
    upload(d.params.get() + o, s.params);
    upload(d.grads.get() + o, grads);
    upload(d.m.get() + o, s.m);
    upload(d.v.get() + o, s.v);
    if (use_master) {
        upload(d.master.get() + o, s.master);
    }
    upload(d.norm.get(), std::vector<float>{st.norm_squared});
    const AdamWStepValues values = {st.lr, st.t};
    LLMC_CUDA_CHECK(
        cudaMemcpy(d.step_values.get(), &values, sizeof(values), cudaMemcpyHostToDevice));
    AdamWHyper hyper = kHyper;
    hyper.grad_clip = st.grad_clip;
    adamw_update(ctx, d.params.get() + o, use_master ? d.master.get() + o : nullptr, d.m.get() + o,
                 d.v.get() + o, d.grads.get() + o, t, hyper, d.step_values.get(),
                 st.grad_clip > 0.0f ? d.norm.get() : nullptr);
    State r;
    r.params = download(d.params.get() + o, total);
    r.m = download(d.m.get() + o, total);
    r.v = download(d.v.get() + o, total);
    if (use_master) {
        r.master = download(d.master.get() + o, total);
    }
    return r;
}

uint32_t bits_of(float x) {
    uint32_t b;
    std::memcpy(&b, &x, sizeof(b));
    return b;
}
float float_of(uint32_t b) {
    float x;
    std::memcpy(&x, &b, sizeof(x));
    return x;
}

// The two floatX neighbours of a finite x, toward zero and away from zero (equal when x is a
// floatX value). In the fp32 build both are x itself.
void floatx_neighbours(float x, float* toward_zero, float* away) {
    if (sizeof(floatX) == sizeof(float)) {
        *toward_zero = *away = x;
        return;
    }
    const uint32_t b = bits_of(x), t = b & 0xFFFF0000u;
    *toward_zero = float_of(t);
    *away = t == b ? float_of(t) : float_of(t + 0x10000u);
}

// Every param must be one of the two floatX neighbours of its master value.
void check_neighbours(const std::vector<float>& params, const std::vector<float>& master) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < params.size(); i++) {
        float lo, hi;
        floatx_neighbours(master[i], &lo, &hi);
        const bool ok = bits_of(params[i]) == bits_of(lo) || bits_of(params[i]) == bits_of(hi);
        if (!ok && bad++ == 0) first = i;
    }
    const bool ok = bad == 0 && !params.empty();
    std::printf("  %-44s n=%-10zu %s", "adamw params in {neighbours of master}", params.size(),
                ok ? "ok\n" : "FAIL");
    if (!ok && !params.empty()) {
        std::printf(" (%zu bad; first [%zu] param %.9g master %.9g)\n", bad, first, params[first],
                    master[first]);
    }
    record_result(ok);
}

void compare(const State& gpu, const State& ref, bool use_master) {
    check_close("adamw m", gpu.m, ref.m, kMomentAtol, kStateRtol);
    check_close("adamw v", gpu.v, ref.v, kSecondMomentAtol, kStateRtol);
    if (use_master) {
        check_close("adamw master", gpu.master, ref.master, kParamAtol, kParamRtol);
        check_neighbours(gpu.params, gpu.master);
    } else {
        check_close("adamw params", gpu.params, ref.params, kParamAtol, kLowParamRtol);
    }
}

void test_layout(const Context& ctx, const Layout& lay, bool use_master, size_t offset,
                 const std::vector<Step>& steps, uint64_t seed) {
    const AdamWTensors t = make_tensors(lay);
    const size_t total = t.offsets[t.count];
    std::printf("%s: %d tensors, %zu params, master=%d, offset=%zu\n", lay.name, t.count, total,
                (int)use_master, offset);
    Rng rng(seed);
    State state = make_state(total, use_master, rng);
    Device d(total, offset);
    std::vector<float> grads(total);
    for (const Step& st : steps) {
        std::printf(" step t=%d lr=%g grad_clip=%g norm^2=%g\n", st.t, st.lr, st.grad_clip,
                    st.norm_squared);
        fill_uniform(grads, rng, -0.1f, 0.1f);
        round_to_floatx(grads);
        const State ref = reference_step(state, grads, t, st, use_master);
        state = gpu_step(ctx, d, state, grads, t, st, use_master);
        compare(state, ref, use_master);
    }
}

// One update of the arrays already on the device (at offset d.offset), with an explicit norm
// pointer (null: no clipping and no skip check).
void run_update(const Context& ctx, Device& d, const AdamWTensors& t, const AdamWHyper& hyper,
                float lr, int step, bool use_master, const float* norm,
                float max_norm_squared = INFINITY) {
    const AdamWStepValues values = {lr, step, max_norm_squared};
    LLMC_CUDA_CHECK(
        cudaMemcpy(d.step_values.get(), &values, sizeof(values), cudaMemcpyHostToDevice));
    const size_t o = d.offset;
    adamw_update(ctx, d.params.get() + o, use_master ? d.master.get() + o : nullptr, d.m.get() + o,
                 d.v.get() + o, d.grads.get() + o, t, hyper, d.step_values.get(), norm);
    LLMC_CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<unsigned char> params_bytes(const Device& d, size_t total) {
    return download_bytes(d.params.get() + d.offset, total * sizeof(floatX));
}

// A non-finite squared norm (inf or NaN gradients) skips the step: params, master, m and v keep
// every bit. With clipping on and off (the skip check does not depend on clipping), then a
// finite norm, which must change the arrays (so the comparison can fail).
void test_skip_non_finite(const Context& ctx) {
    const Layout lay = {"skip", {13, 1, 777, 4099, 50}, {1, 0, 1, 0, 1}};
    const AdamWTensors t = make_tensors(lay);
    const size_t total = t.offsets[t.count];
    std::printf("non-finite norm skips the step: %zu params\n", total);
    Rng rng(7);
    const State s = make_state(total, true, rng);
    std::vector<float> grads(total);
    fill_uniform(grads, rng, -0.1f, 0.1f);
    Device d(total, 0);
    upload(d.params.get(), s.params);
    upload(d.master.get(), s.master);
    upload(d.m.get(), s.m);
    upload(d.v.get(), s.v);
    upload(d.grads.get(), grads);
    auto snapshot = [&]() {
        std::vector<unsigned char> all = params_bytes(d, total);
        for (const float* a : {d.master.get(), d.m.get(), d.v.get()}) {
            const std::vector<unsigned char> b = download_bytes(a, total * sizeof(float));
            all.insert(all.end(), b.begin(), b.end());
        }
        return all;
    };
    const std::vector<unsigned char> before = snapshot();
    const struct {
        const char* name;
        float norm_squared, grad_clip;
    } cases[] = {{"norm^2 = inf, clip 1", INFINITY, 1.0f},
                 {"norm^2 = NaN, clip 1", NAN, 1.0f},
                 {"norm^2 = -inf, clip off", -INFINITY, 0.0f},
                 {"norm^2 = NaN, clip off", NAN, 0.0f}};
    for (const auto& c : cases) {
        upload(d.norm.get(), std::vector<float>{c.norm_squared});
        AdamWHyper hyper = kHyper;
        hyper.grad_clip = c.grad_clip;
        run_update(ctx, d, t, hyper, 1e-2f, 1, true, d.norm.get());
        check_bitwise_equal(c.name, before, snapshot());
    }
    // An outlier: a finite norm^2 above the step's ceiling (--skip-outliers) skips as well; at
    // the ceiling exactly it does not (the device compares norm^2 > ceiling).
    upload(d.norm.get(), std::vector<float>{4.0f});
    run_update(ctx, d, t, kHyper, 1e-2f, 1, true, d.norm.get(), 3.99f);
    check_bitwise_equal("norm^2 = 4 above the ceiling 3.99", before, snapshot());
    run_update(ctx, d, t, kHyper, 1e-2f, 1, true, d.norm.get(), 4.0f);
    const bool changed = snapshot() != before;
    std::printf("  %-44s %s\n", "finite norm^2 = 4, ceiling 4: does update",
                changed ? "ok" : "FAIL");
    record_result(changed);
}

#if defined(ENABLE_BF16)
// Stochastic rounding of master -> bf16 params. lr = 0 and no decay keep master bit-exact
// (p - 0 * step == p for finite step), so params is the rounding of values we choose: bf16
// values plus a known fraction of the gap, low16 / 2^16 of the magnitude's ulp, both signs,
// magnitudes over many binades.
struct RoundingGroup {
    uint32_t low16;  // the low 16 bits of every fp32 pattern in the group
    size_t begin, end;
};

struct RoundingCase {
    std::vector<float> master;
    std::vector<RoundingGroup> groups;
    size_t special_begin;  // exact values, +-inf and NaN from here on
};

RoundingCase make_rounding_case() {
    constexpr size_t kPerGroup = 1 << 18;
    const uint32_t lows[] = {1, 0x4000, 0x8000, 0xB333, 0xFFFF};  // 2^-16, 1/4, 1/2, 0.7, ~1
    RoundingCase rc;
    Rng rng(11);
    for (uint32_t low : lows) {
        RoundingGroup g = {low, rc.master.size(), rc.master.size() + kPerGroup};
        for (size_t i = g.begin; i < g.end; i++) {
            // A random bf16 in +-[2^-20, 2^20): random sign, exponent and 7 mantissa bits.
            const uint32_t sign = (uint32_t)rng.randint(2) << 31;
            const uint32_t exponent = (uint32_t)(127 - 20 + rng.randint(40)) << 23;
            const uint32_t mantissa = (uint32_t)rng.randint(128) << 16;
            rc.master.push_back(float_of(sign | exponent | mantissa | low));
        }
        rc.groups.push_back(g);
    }
    rc.special_begin = rc.master.size();
    for (int i = 0; i < 1001; i++) {  // exact bf16 values: they must not move
        rc.master.push_back(to_float(from_float<floatX>(rng.uniform(-4.0f, 4.0f))));
    }
    // NaN must stay NaN. (An infinite master cannot reach the rounding: the update computes
    // wd * p = 0 * inf = NaN first; -0 is left out because -0 - (+-0) may give +0.) Above the
    // largest bf16 the neighbours are it and inf.
    for (float x : {NAN, 0.0f, float_of(0x7F7FC000u), float_of(0xFF7FC000u)}) {
        rc.master.push_back(x);
    }
    return rc;
}

// The fraction rounded up in magnitude (away from zero) in each group against its expectation:
// element i goes to its neighbour away from zero with probability p_i = low16 / 2^16, its
// fraction of the gap (for either sign: unbiased), independently, so the count is a sum of
// Bernoullis with mean sum p_i and variance sum p_i (1 - p_i). A correct rounding lands within
// 5 sigma (+1 for the discreteness) except with probability ~6e-7 per group; round to nearest
// (all or none of a group go up) is off by >= 1/4 of the 2^18 elements of the 1/4, 1/2 and 0.7
// groups (hundreds of sigma), and truncation is off in all but the first.
void check_rounding_statistics(const RoundingCase& rc, const std::vector<float>& params,
                               const char* label) {
    for (const RoundingGroup& g : rc.groups) {
        double mean = 0.0, var = 0.0;
        size_t up = 0, bad = 0;
        for (size_t i = g.begin; i < g.end; i++) {
            float tz, away;
            floatx_neighbours(rc.master[i], &tz, &away);
            const double p = ((double)rc.master[i] - tz) / ((double)away - tz);
            mean += p;
            var += p * (1.0 - p);
            if (bits_of(params[i]) == bits_of(away)) {
                up++;
            } else if (bits_of(params[i]) != bits_of(tz)) {
                bad++;
            }
        }
        const double n = (double)(g.end - g.begin);
        const double bound = 5.0 * std::sqrt(var) + 1.0;
        const bool ok = bad == 0 && std::fabs((double)up - mean) <= bound;
        std::printf(
            "  %s low16=0x%04x: rounded up %zu of %.0f, expected %.1f +- %.1f (5 sigma + 1), "
            "fraction %.5f vs %.5f, %zu not a neighbour %s\n",
            label, g.low16, up, n, mean, bound, up / n, mean / n, bad, ok ? "ok" : "FAIL");
        record_result(ok);
    }
}

void check_rounding_specials(const RoundingCase& rc, const std::vector<float>& params) {
    size_t bad = 0;
    for (size_t i = rc.special_begin; i < rc.master.size(); i++) {
        const float x = rc.master[i];
        float tz, away;
        floatx_neighbours(x, &tz, &away);
        const uint32_t b = bits_of(params[i]);
        const bool ok =
            std::isnan(x) ? std::isnan(params[i]) : b == bits_of(tz) || b == bits_of(away);
        if (!ok) {
            std::printf("  [%zu] master %g -> param %g\n", i, x, params[i]);
            bad++;
        }
    }
    std::printf("  %-44s n=%zu %s\n", "exact values, NaN, 0 kept; > max: max or inf",
                rc.master.size() - rc.special_begin, bad == 0 ? "ok" : "FAIL");
    record_result(bad == 0);
}

// How many params differ between two runs; a different (seed, t) re-draws every element's bits,
// so about sum 2 p_i (1 - p_i) of them should differ. Requiring half that catches a step or
// seed that is ignored (0 differ) with room to spare.
void check_redrawn(const RoundingCase& rc, const std::vector<float>& a, const std::vector<float>& b,
                   const char* what) {
    double expected = 0.0;
    size_t differ = 0;
    for (size_t i = 0; i < rc.special_begin; i++) {
        float tz, away;
        floatx_neighbours(rc.master[i], &tz, &away);
        const double p = ((double)rc.master[i] - tz) / ((double)away - tz);
        expected += 2.0 * p * (1.0 - p);
        differ += bits_of(a[i]) != bits_of(b[i]);
    }
    const bool ok = (double)differ >= 0.5 * expected;
    std::printf("  %-44s %zu params differ, ~%.0f expected %s\n", what, differ, expected,
                ok ? "ok" : "FAIL");
    record_result(ok);
}

void test_stochastic_rounding(const Context& ctx) {
    const RoundingCase rc = make_rounding_case();
    const size_t total = rc.master.size();
    const AdamWTensors t = make_tensors({"rounding", {total}, {0}});
    std::printf("stochastic rounding: %zu values at known gap fractions\n", total);
    Rng rng(12);
    std::vector<float> m(total), v(total), grads(total);
    fill_uniform(m, rng, -0.01f, 0.01f);
    fill_uniform(v, rng, 1e-4f, 1e-3f);
    fill_uniform(grads, rng, -0.1f, 0.1f);
    // One run: fresh arrays at offset 0 or 1 (the packed or the one-element path).
    auto run = [&](const AdamWHyper& hyper, int step, size_t offset) {
        Device d(total, offset);
        poison(d.params.get(), total + offset);
        upload(d.master.get() + offset, rc.master);
        upload(d.m.get() + offset, m);
        upload(d.v.get() + offset, v);
        upload(d.grads.get() + offset, grads);
        run_update(ctx, d, t, hyper, 0.0f, step, true, nullptr);
        const std::vector<float> master = download(d.master.get() + offset, total);
        size_t moved = 0;
        for (size_t i = 0; i < total; i++) {
            const bool same = std::isnan(rc.master[i])
                                  ? std::isnan(master[i])
                                  : bits_of(master[i]) == bits_of(rc.master[i]);
            moved += !same;
        }
        LLMC_CHECK(moved == 0,
                   "test_adamw: lr = 0 moved %zu master values; the test needs "
                   "master unchanged",
                   moved);
        return std::make_pair(download(d.params.get() + offset, total), params_bytes(d, total));
    };
    AdamWHyper hyper = kHyper;
    hyper.grad_clip = 0.0f;
    const auto first = run(hyper, 5, 0);
    check_rounding_statistics(rc, first.first, "t=5");
    check_rounding_specials(rc, first.first);
    check_bitwise_equal("rerun: same (seed, t) gives the same bits", first.second,
                        run(hyper, 5, 0).second);
    check_bitwise_equal("one-element path gives the same bits", first.second,
                        run(hyper, 5, 1).second);
    const auto next = run(hyper, 6, 0);
    check_rounding_statistics(rc, next.first, "t=6");
    check_redrawn(rc, first.first, next.first, "t=6 vs t=5");
    AdamWHyper other = hyper;
    other.seed = hyper.seed + 1;
    check_redrawn(rc, first.first, run(other, 5, 0).first, "seed+1 vs seed");
}
#endif

}  // namespace

int main() {
    skip_if_no_device();
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    std::printf("test_adamw (%s)\n", kPrecisionName);
#if defined(ENABLE_BF16)
    const bool trainer_master = true;
#else
    const bool trainer_master = false;
#endif
    // Clipping active (scale 1/2), then inactive (norm 0.5 < 1).
    test_layout(ctx, gpt2_layout(), trainer_master, 0,
                {{1e-2f, 1, 1.0f, 4.0f}, {5e-3f, 2, 1.0f, 0.25f}}, 1);
    const Layout small = {"small odd tensors", {13, 1, 777, 4099, 50}, {1, 0, 1, 0, 1}};
    // Inactive, off, active (scale 1/10).
    const std::vector<Step> steps = {
        {1e-2f, 1, 1.0f, 0.25f}, {5e-3f, 2, 0.0f, 0.0f}, {2e-3f, 3, 1.0f, 100.0f}};
    test_layout(ctx, small, false, 0, steps, 2);
    test_layout(ctx, small, true, 0, steps, 3);
    test_layout(ctx, small, !trainer_master, 1, steps, 4);
    test_skip_non_finite(ctx);
#if defined(ENABLE_BF16)
    test_stochastic_rounding(ctx);
#endif
    return test_summary("test_adamw");
}
