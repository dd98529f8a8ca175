// gelu.cuh: GELU (tanh approximation, as GPT-2) as its own elementwise pass.
//   gelu_forward: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp, n elements,
//                 computed in float from the stored (floatX) input. out is overwritten.
// The forward takes GELU in the fc matmul's cuBLASLt epilogue (no extra pass over (N, 4C));
// this pass recomputes the output in the backward when it is not kept (--recompute >= 1). It
// works on the stored (rounded) input, the epilogue on the float accumulator, so the two can
// differ by one rounding of the output (test_gpt2cu bounds the effect). The backward's gelu'
// stays in cuBLASLt's DGELU epilogue.
#pragma once
#include <cstddef>

#include "context.cuh"
#include "precision.cuh"

namespace llmc {

void gelu_forward(const Context& ctx, floatX* out, const floatX* inp, size_t n);

}  // namespace llmc
