// test_attention.cu: attention_forward / attention_backward against cpu::attention_*.
//
// For each shape: out and lse from the forward, and dq, dk, dv (the three parts of dqkv) from
// the backward are compared with the CPU reference. The backward is fed the reference out and
// lse, so its check does not inherit the forward's rounding. The first run starts from a
// NaN-filled scratch and NaN-filled outputs (a read of an unwritten scratch element or an
// unwritten output shows up as NaN); a second run, starting from the first run's leftovers in
// scratch, must reproduce every output bit for bit (determinism, and no dependence on what
// scratch held). The fp32 build (cuBLASLt path) runs every shape with TF32 off and on; the bf16
// build (flash attention) once.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "attention.cuh"
#include "context.cuh"
#include "ref/cpu_ops.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

struct Shape {
    int B, T, C, NH;
};

// Allowed error as a fraction of the reference tensor's largest |value| (rtol is 0). GEMM
// rounding scales with the size of the products summed, not with each output: rows of dq and
// dk cancel (at T=1 they are exactly 0), so an elementwise relative bound means nothing there.
// dq, dk and dv share the scale of the whole dqkv. The figures quoted below come from a CPU
// emulation of this exact pipeline (same GEMMs and kernels, sequential float sums) against
// cpu::attention_*, on these shapes with these inputs.
struct Tolerance {
    const char* name;
    float out, lse, grad;
};
#if !defined(ENABLE_BF16)
// Plain fp32 GEMMs and expf: the emulation stays below 1.7e-6 of the max up to T=1024 (cuBLAS's
// blocked sums err less than sequential ones). 1e-5 leaves a 6x margin and is still ~100x
// below the error of one dropped or misplaced term of a softmax row at T=1024.
constexpr Tolerance kFp32Tolerance = {"fp32", 1e-5f, 1e-5f, 1e-5f};
// TF32 keeps 10 mantissa bits: inputs of each product are off by up to 2^-11 (rounded) or 2^-10
// (truncated). Emulated with truncation: 3.7e-3 of the max for dq and dk (two GEMMs deep),
// 1.5e-3 for out, 5.9e-4 for lse; the bounds leave ~3x.
constexpr Tolerance kTf32Tolerance = {"tf32", 1e-2f, 2e-3f, 1e-2f};
#else
// The bf16 build runs flash attention (flash_attention.cu; dev/test/test_flash_attention checks it
// against an emulated plain bf16 pipeline shape by shape). These bounds were set for the
// unfused bf16 pipeline, which stores S, P, dP and dS in bf16 between the float-accumulated
// GEMMs (each store rounds by up to kBf16RoundingRel / 2): its emulation reaches 1.1e-2 of the
// max for the gradients, 6.9e-3 for out and 2.4e-3 for lse; the bounds leave ~3x. Flash rounds
// only P and dS (and keeps S in fp32), so it errs less: on an H100 3.1e-3 of the
// max for the gradients, 3.9e-3 for out (one bf16 ulp) and 2e-7 for lse.
constexpr Tolerance kBf16Tolerance = {"bf16", 8 * kBf16RoundingRel, 2 * kBf16RoundingRel,
                                      8 * kBf16RoundingRel};
#endif

// Host inputs (rounded to floatX, as the GPU sees them) and the CPU reference outputs.
struct Reference {
    Shape s;
    std::vector<float> qkv, dout, out, lse, dqkv;
};

Reference make_reference(const Shape& s, uint64_t seed) {
    const size_t BT = (size_t)s.B * s.T;
    Reference r{s,
                std::vector<float>(BT * 3 * s.C),
                std::vector<float>(BT * s.C),
                std::vector<float>(BT * s.C),
                std::vector<float>((size_t)s.B * s.NH * s.T),
                std::vector<float>(BT * 3 * s.C)};
    Rng rng(seed);
    // q, k in [-2, 2] give scores with a standard deviation of ~1.3: softmax rows that are
    // neither flat nor one-hot.
    fill_uniform(r.qkv, rng, -2.0f, 2.0f);
    fill_uniform(r.dout, rng, -1.0f, 1.0f);
    round_to_floatx(r.qkv);
    round_to_floatx(r.dout);
    cpu::attention_forward(r.out.data(), r.lse.data(), r.qkv.data(), s.B, s.T, s.C, s.NH);
    round_to_floatx(r.out);  // the backward below reads out as floatX
    cpu::attention_backward(r.dqkv.data(), r.dout.data(), r.qkv.data(), r.out.data(), r.lse.data(),
                            s.B, s.T, s.C, s.NH);
    return r;
}

struct DeviceTensors {
    DeviceBuffer<floatX> qkv, dout, ref_out, out, dqkv;
    DeviceBuffer<float> ref_lse, lse;
    DeviceBuffer<unsigned char> scratch;
    explicit DeviceTensors(const Shape& s)
        : qkv((size_t)s.B * s.T * 3 * s.C),
          dout((size_t)s.B * s.T * s.C),
          ref_out((size_t)s.B * s.T * s.C),
          out((size_t)s.B * s.T * s.C),
          dqkv((size_t)s.B * s.T * 3 * s.C),
          ref_lse((size_t)s.B * s.NH * s.T),
          lse((size_t)s.B * s.NH * s.T),
          scratch(attention_scratch_bytes(s.B, s.T, s.C, s.NH)) {}
};

// Outputs of one run as raw bytes, for the bitwise comparison.
struct RunBytes {
    std::vector<unsigned char> out, lse, dqkv;
};

// Poisons the outputs (and scratch if asked), runs forward then backward, returns the bytes.
RunBytes run_attention(const Context& ctx, DeviceTensors& d, const Shape& s, bool poison_scratch) {
    poison(d.out.get(), d.out.size());
    poison(d.lse.get(), d.lse.size());
    poison(d.dqkv.get(), d.dqkv.size());
    if (poison_scratch) {
        poison(d.scratch.get(), d.scratch.size());
    }
    // poison() runs on the legacy stream, which ctx.stream (non-blocking) does not wait for.
    LLMC_CUDA_CHECK(cudaDeviceSynchronize());
    attention_forward(ctx, d.out.get(), d.lse.get(), d.scratch.get(), d.qkv.get(), s.B, s.T, s.C,
                      s.NH);
    attention_backward(ctx, d.dqkv.get(), d.scratch.get(), d.dout.get(), d.qkv.get(),
                       d.ref_out.get(), d.ref_lse.get(), s.B, s.T, s.C, s.NH);
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    return RunBytes{download_bytes(d.out.get(), d.out.size() * sizeof(floatX)),
                    download_bytes(d.lse.get(), d.lse.size() * sizeof(float)),
                    download_bytes(d.dqkv.get(), d.dqkv.size() * sizeof(floatX))};
}

// Part p (0 = q, 1 = k, 2 = v) of a (B, T, 3C) tensor, as (B, T, C).
std::vector<float> qkv_part(const std::vector<float>& x, size_t BT, int C, int p) {
    std::vector<float> part(BT * C);
    for (size_t bt = 0; bt < BT; bt++) {
        for (int c = 0; c < C; c++) part[bt * C + c] = x[bt * 3 * C + (size_t)p * C + c];
    }
    return part;
}

void check_against_reference(const char* label, const Reference& r, const DeviceTensors& d,
                             const Tolerance& tol) {
    const Shape& s = r.s;
    const size_t BT = (size_t)s.B * s.T;
    const std::vector<float> out = download(d.out.get(), d.out.size());
    const std::vector<float> lse = download(d.lse.get(), d.lse.size());
    const std::vector<float> dqkv = download(d.dqkv.get(), d.dqkv.size());
    char name[128];
    std::snprintf(name, sizeof(name), "%s out", label);
    check_close(name, out, r.out, tol.out * max_abs(r.out), 0.0f);
    std::snprintf(name, sizeof(name), "%s lse", label);
    check_close(name, lse, r.lse, tol.lse * max_abs(r.lse), 0.0f);
    const float grad_atol = tol.grad * max_abs(r.dqkv);
    const char* part_names[3] = {"dq", "dk", "dv"};
    for (int p = 0; p < 3; p++) {
        std::snprintf(name, sizeof(name), "%s %s", label, part_names[p]);
        check_close(name, qkv_part(dqkv, BT, s.C, p), qkv_part(r.dqkv, BT, s.C, p), grad_atol,
                    0.0f);
    }
}

void check_runs_equal(const char* label, const RunBytes& a, const RunBytes& b) {
    char name[128];
    std::snprintf(name, sizeof(name), "%s out rerun", label);
    check_bitwise_equal(name, a.out, b.out);
    std::snprintf(name, sizeof(name), "%s lse rerun", label);
    check_bitwise_equal(name, a.lse, b.lse);
    std::snprintf(name, sizeof(name), "%s dqkv rerun", label);
    check_bitwise_equal(name, a.dqkv, b.dqkv);
}

void test_shape(const Context& ctx, const Reference& r, DeviceTensors& d, const Tolerance& tol) {
    const Shape& s = r.s;
    char label[96];
    std::snprintf(label, sizeof(label), "B=%d T=%d C=%d NH=%d %s", s.B, s.T, s.C, s.NH, tol.name);
    const RunBytes first = run_attention(ctx, d, s, /*poison_scratch=*/true);
    check_against_reference(label, r, d, tol);
    const RunBytes second = run_attention(ctx, d, s, /*poison_scratch=*/false);
    check_runs_equal(label, first, second);
}

}  // namespace

int main() {
    skip_if_no_device();
    const Shape shapes[] = {
        {2, 64, 128, 4},     // small, T a multiple of the warp
        {3, 77, 128, 4},     // awkward T (rows padded to 80 in scratch)
        {1, 1, 64, 2},       // T=1: one-element softmax, dq = dk = 0
        {4, 1024, 768, 12},  // GPT-2 d12
    };
    Context strict;
    context_init(&strict, 0, /*tf32=*/false);
#if !defined(ENABLE_BF16)
    Context tf32;
    context_init(&tf32, 0, /*tf32=*/true);
#endif
    uint64_t seed = 1234;
    for (const Shape& s : shapes) {
        const Reference r = make_reference(s, seed++);
        DeviceTensors d(s);
        upload(d.qkv.get(), r.qkv);
        upload(d.dout.get(), r.dout);
        upload(d.ref_out.get(), r.out);
        upload(d.ref_lse.get(), r.lse);
#if defined(ENABLE_BF16)
        test_shape(strict, r, d, kBf16Tolerance);
#else
        test_shape(strict, r, d, kFp32Tolerance);
        test_shape(tf32, r, d, kTf32Tolerance);
#endif
    }
    return test_summary("test_attention");
}
