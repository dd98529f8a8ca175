// gelu.cuh: GELU (tanh approximation, as GPT-2) as its own elementwise pass.
//   gelu_forward: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp, n elements,
//                 computed in float from the stored (floatX) input. out is overwritten.
// The model runs the fc matmul with a bias epilogue only and then this pass, in the forward and
// again in the backward when the GELU output is not kept (--recompute >= 1): one kernel on the
// same stored input, so the recomputed values are bit-identical to the forward's. (A GELU fused
// into cuBLASLt's epilogue works on the float accumulator before rounding, which no later pass
// over the rounded input can reproduce in bf16.) The backward's gelu' stays in cuBLASLt's DGELU
// epilogue.
#pragma once
#include <cstddef>

#include "context.cuh"
#include "precision.cuh"

void gelu_forward(const Context& ctx, floatX* out, const floatX* inp, size_t n);
