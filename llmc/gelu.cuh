// gelu.cuh: GELU (tanh approximation, as GPT-2) as its own elementwise pass.
//   gelu_forward: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp, n elements,
//                 computed in float from the stored (floatX) input. out is overwritten.
// The forward takes GELU in the fc matmul's cuBLASLt epilogue (no extra pass over (N, 4C));
// this pass recomputes the output in the backward when it is not kept (--recompute >= 1). It
// works on the stored (rounded) input, the epilogue on the float accumulator, so the two can
// differ by one rounding of the output (test_gpt2cu bounds the effect; with our own forward
// kernel, LLMC_GELU_GEMM=2, they are the same bits). The backward's gelu' is in the DGELU
// epilogue of the fcproj input gradient: our own kernel on sm_90 (matmul_sm90.cuh, with
// gelu_tanh_grad below), cuBLASLt's elsewhere.
#pragma once
#include <cstddef>

#include "context.cuh"
#include "precision.cuh"

namespace llmc {

void gelu_forward(const Context& ctx, floatX* out, const floatX* inp, size_t n);

#ifdef __CUDACC__
// GELU and its derivative in float, shared by this pass and our own GELU GEMMs
// (matmul_sm90.cuh), so that their outputs are the same bits. tanh(u) = 1 - 2 / (e^2u + 1) with
// the hardware exp2 and reciprocal (two instructions where tanhf takes ~20: the GEMM epilogues
// evaluate 16K of these per tile): within ~2e-7 absolute of tanh, saturating to +-1 cleanly
// (e^2u = inf gives 1, e^2u -> 0 gives -1).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

__device__ __forceinline__ float gelu_tanh_of(float u) {
    return 1.0f - __fdividef(2.0f, __expf(2.0f * u) + 1.0f);
}
__device__ __forceinline__ float gelu_tanh(float x) {
    const float cube = kGeluCube * x * x * x;
    return 0.5f * x * (1.0f + gelu_tanh_of(kGeluScale * (x + cube)));
}
// d/dx of gelu_tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
__device__ __forceinline__ float gelu_tanh_grad(float x) {
    const float x2 = x * x;
    const float t = gelu_tanh_of(kGeluScale * (x + kGeluCube * x2 * x));
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x2);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
#endif

}  // namespace llmc
