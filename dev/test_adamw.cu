// test_adamw.cu: the fused AdamW update against the CPU reference (cpu::adamw per tensor).
//
// Layouts: GPT-2 124M's 16 tensors (the trainer's path: with a master copy in the bf16 build,
// without in fp32), and 5 small tensors of odd sizes whose boundaries split the 4-element packs,
// run with and without master and once from pointers one element off alignment (the
// one-element path). Steps change lr and t (read from device memory) and the clipping: active,
// inactive, and off (no norm pointer). Each step starts both sides from the GPU's previous
// state, so errors do not compound; m, v, master and params are all compared.
#include <cmath>
#include <vector>

#include "adamw.cuh"
#include "context.cuh"
#include "cpu_ops.h"
#include "test_util.cuh"

namespace {

constexpr AdamWHyper kHyper = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};

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
    CUDA_CHECK(cudaMemcpy(d.step_values.get(), &values, sizeof(values), cudaMemcpyHostToDevice));
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

void compare(const State& gpu, const State& ref, bool use_master) {
    check_close("adamw m", gpu.m, ref.m, kMomentAtol, kStateRtol);
    check_close("adamw v", gpu.v, ref.v, kSecondMomentAtol, kStateRtol);
    if (use_master) {
        check_close("adamw master", gpu.master, ref.master, kParamAtol, kParamRtol);
        std::vector<float> rounded = gpu.master;
        round_to_floatx(rounded);
        check_close("adamw params == round(master)", gpu.params, rounded, 0.0f, 0.0f);
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
    return test_summary("test_adamw");
}
