// encoder.cuh: token + position embedding.
//   forward : out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]                    (overwrites out)
//   backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]  (accumulates)
//             With accumulate_dwpe false, dwpe[t,:] = that sum for t < T (the old rows unread;
//             rows >= T untouched). dwte always accumulates: it holds the tied lm head's
//             gradient, and only the rows of tokens present are written.
// The backward is deterministic (no floating-point atomics): positions are sorted by token id
// (stable radix sort) and each token's rows are summed in position order, in fixed segments of
// the sorted order whose pieces are then added in segment order (encoder.cu). ids in [0, V).
#pragma once
#include "context.cuh"
#include "precision.cuh"

namespace llmc {

void encoder_forward(const Context& ctx, floatX* out, const int* inp, const floatX* wte,
                     const floatX* wpe, int B, int T, int C);

// Bytes of device scratch encoder_backward needs for B*T positions of C channels.
size_t encoder_backward_scratch_bytes(int B, int T, int C);
void encoder_backward(const Context& ctx, floatX* dwte, floatX* dwpe, void* scratch,
                      const floatX* dout, const int* inp, int B, int T, int C, int V,
                      bool accumulate_dwpe = true);

}  // namespace llmc
