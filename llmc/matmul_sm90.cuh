// matmul_sm90.cuh: our own Hopper (sm_90a) GEMMs for the two products around GELU, where
// cuBLASLt's epilogues cost a third of the product (docs/perf-log.md, "GELU products"):
//   gelu_gemm_forward : pre (N, OC) = inp (N, IC) @ weight^T + bias, out = gelu_tanh(pre), both
//                       bf16; the GELU is taken from the rounded pre, as gelu_forward
//                       recomputes it (gelu.cuh), so a recomputed output is the same bits.
//   dgelu_gemm_backward: dinp (N, IC) = (dout (N, OC) @ weight (OC, IC)) * gelu'(pre) (pre is
//                       (N, IC)), rounded once to bf16, overwritten; and bias_partial
//                       (ceil(N / 128), IC) floats: row r holds the column sums of the rounded
//                       dinp over rows [128 r, 128 r + 128), the fc bias gradient before its
//                       last, ordered reduction (matmul_backward_input's).
// Where they apply (gelu_gemm_applies): a compute capability 9.0 device running this binary's
// sm_90a image, the bf16 build, the product's output width (OC forward, IC backward) a multiple
// of 128, its reduction width a multiple of 64, every pointer 16-byte aligned. N is free (rows
// past N read as zeros and are not written). Deterministic: a tile's sums run in a fixed order
// that depends on the shape only, not on the number of SMs.
// Design (matmul_sm90.cu): persistent CTAs, one per SM, of a TMA producer warpgroup and two
// consumer warpgroups that take 128 x 128 output tiles in turn ("ping-pong"): one's epilogue
// runs beside the other's main loop.
#pragma once
#include <initializer_list>

#include "context.cuh"
#include "precision.cuh"

namespace llmc {

// Context::gelu_gemm (LLMC_GELU_GEMM): 0 cuBLASLt's GELU_AUX_BIAS / DGELU epilogues; 1 our
// DGELU kernel wherever it applies, the forward through cuBLASLt; 2 (the default) both of ours
// wherever they apply (ours is the faster forward since the epilogue's GELU went from ~20
// instructions an element to 7, docs/perf-log.md "GELU products").
// gelu_gemm_applies: whether they can run here (ctx.gelu_gemm != 0, device, build, shape);
// gelu_gemm_forward_chosen: whether matmul_forward takes ours (ctx.gelu_gemm == 2).
bool gelu_gemm_applies(const Context& ctx, int N, int out_cols, int reduce_cols,
                       std::initializer_list<const void*> pointers);
bool gelu_gemm_forward_chosen(const Context& ctx, int N, int IC, int OC,
                              std::initializer_list<const void*> pointers);

void gelu_gemm_forward(const Context& ctx, floatX* out, floatX* pre, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int IC, int OC);

// Rows of bias_partial for N rows of dinp (each of IC floats).
int dgelu_bias_partial_rows(int N);
void dgelu_gemm_backward(const Context& ctx, floatX* dinp, float* bias_partial, const floatX* dout,
                         const floatX* weight, const floatX* pre, int N, int IC, int OC);

}  // namespace llmc
