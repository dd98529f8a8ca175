// gelu.cuh: GELU (tanh approximation, as GPT-2) as its own elementwise pass.
//   gelu_forward: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp, n elements,
//                 computed in float from the stored (floatX) input. out is overwritten.
// The forward takes GELU in the fc matmul's epilogue (ours on sm_90, cuBLASLt's elsewhere: no
// extra pass over (N, 4C)); this pass recomputes the output in the backward when it is not kept
// (--recompute >= 1). It works on the stored (rounded) input, cuBLASLt's epilogue on the float
// accumulator, so the two can differ by one rounding of the output (test_gpt2cu bounds the
// effect; with our own forward kernel, the default on sm_90, they are the same bits). The
// backward's gelu' is in the DGELU epilogue of the fcproj input gradient: our own kernel on
// sm_90 (matmul_sm90.cuh, with gelu_tanh_grad below), cuBLASLt's elsewhere.
#pragma once
#include <cstddef>

#include "context.cuh"
#include "device_utils.cuh"
#include "precision.cuh"

namespace llmc {

void gelu_forward(const Context& ctx, floatX* out, const floatX* inp, size_t n);

#ifdef __CUDACC__
// GELU and its derivative in float, shared by this pass and our own GELU GEMMs
// (matmul_sm90.cuh), so that their outputs are the same bits. With u = sqrt(2/pi) (x + 0.044715
// x^3), 0.5 (1 + tanh u) is the logistic s = 1 / (1 + e^-2u), so gelu = x s: one exp2 and one
// reciprocal on the special-function unit and five other instructions (the GEMM epilogues
// evaluate 16K of these per tile, and their instruction count is what the epilogue costs).
// Flush-to-zero forms: the exponent's tails need no denormal fix-ups (e^-2u -> 0 gives s = 1,
// e^-2u = inf gives s = 0). Within ~1e-6 relative of the exact GELU where |gelu| > 1e-3 (float
// arithmetic against double, plus the two approximations' few ulp): far below bf16's rounding.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;
// -2 sqrt(2/pi) log2(e): e^-2u = 2^(x (kGeluExp + kGeluExp * 0.044715 x^2)).
constexpr float kGeluExp = -2.0f * kGeluScale * 1.4426950408889634f;

// s = 0.5 (1 + tanh u) for x, given x^2.
__device__ __forceinline__ float gelu_logistic(float x, float x2) {
    const float v = x * fmaf(x2, kGeluExp * kGeluCube, kGeluExp);
    return fast_rcp(1.0f + fast_exp2(v));
}
__device__ __forceinline__ float gelu_tanh(float x) { return x * gelu_logistic(x, x * x); }
// d/dx of gelu_tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) u' with t = tanh u = 2 s - 1, i.e.
// s (1 + 2 x (1 - s) u'), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
__device__ __forceinline__ float gelu_tanh_grad(float x) {
    const float x2 = x * x;
    const float s = gelu_logistic(x, x2);
    const float du2 = fmaf(x2, 2.0f * kGeluScale * 3.0f * kGeluCube, 2.0f * kGeluScale);
    return s * fmaf(x * du2, 1.0f - s, 1.0f);
}
// gelu_tanh of the 8 bf16 values of a 16-byte chunk, each rounded to bf16 (our GELU GEMMs'
// epilogues, matmul_sm90.cu and matmul_sm90_plain.cu).
__device__ __forceinline__ uint4 gelu_chunk_bf16(uint4 v) {
    uint4 g;
    const __nv_bfloat162* in = reinterpret_cast<const __nv_bfloat162*>(&v);
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&g);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float2 f = __bfloat1622float2(in[q]);
        o[q] = __floats2bfloat162_rn(gelu_tanh(f.x), gelu_tanh(f.y));
    }
    return g;
}
#endif

}  // namespace llmc
