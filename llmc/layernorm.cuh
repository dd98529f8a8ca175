// layernorm.cuh: layernorm forward and backward. (GPT-2's residual adds happen in the
// projection GEMMs before each layernorm: matmul_forward_residual, matmul.cuh.)
//   layernorm_forward: out = (inp - mean) * rstd * w + b per row of C; mean, rstd (float, N each)
//                      are saved for backward. rstd = 1 / sqrt(biased var + 1e-5).
//   layernorm_backward: ACCUMULATES into dinp, dweight, dbias. Deterministic: the weight and
//                       bias gradients are reduced in a fixed order through `scratch`. With
//                       dres_bias, also dres_bias += the column sums of the updated dinp: in
//                       GPT-2 dinp is the gradient of the residual stream, which is the output
//                       gradient of the projection that added to it, so this is that
//                       projection's bias gradient, summed here while dinp is in registers
//                       instead of read again by the matmul backward. With reduce_on_branch
//                       the second kernel (the fixed-order reduction of the weight, bias and
//                       dres_bias partials in `scratch`) runs on the branch stream
//                       (context.cuh: branch_fork first): the caller waits for it (branch_mark /
//                       branch_wait) before reading those gradients or reusing `scratch`; dinp
//                       is final on ctx.stream either way. With accumulate_param_grads false,
//                       dweight, dbias and dres_bias are written, not added to (unread: no
//                       zeroing needed); dinp always accumulates. ctx.layernorm_backward_variant
//                       picks the first kernel where GPT-2's widths take the row-in-registers path
//                       (layernorm.cu); every variant gives the same bits.
// Statistics and sums are in float whatever floatX is.
#pragma once
#include "context.cuh"
#include "precision.cuh"

namespace llmc {

void layernorm_forward(const Context& ctx, floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int C);

// The widest row the backward takes (its per-warp sums of a row live in shared memory).
int layernorm_max_channels();

// Bytes of device scratch layernorm_backward needs for (N, C).
size_t layernorm_backward_scratch_bytes(const Context& ctx, int N, int C);
void layernorm_backward(const Context& ctx, floatX* dinp, floatX* dweight, floatX* dbias,
                        void* scratch, const floatX* dout, const floatX* inp, const floatX* weight,
                        const float* mean, const float* rstd, int N, int C,
                        floatX* dres_bias = nullptr, bool reduce_on_branch = false,
                        bool accumulate_param_grads = true);

}  // namespace llmc
