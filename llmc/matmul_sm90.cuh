// matmul_sm90.cuh: our own Hopper (sm_90a) GEMMs, first for the two products around GELU, where
// cuBLASLt's epilogues cost a third of the product (docs/perf-log.md, "GELU products"):
//   gelu_gemm_forward : pre (N, OC) = inp (N, IC) @ weight^T + bias, out = gelu_tanh(pre), both
//                       bf16; the GELU is taken from the rounded pre, as gelu_forward
//                       recomputes it (gelu.cuh), so a recomputed output is the same bits.
//   dgelu_gemm_backward: dinp (N, IC) = (dout (N, OC) @ weight (OC, IC)) * gelu'(pre) (pre is
//                       (N, IC)), rounded once to bf16, overwritten; and bias_partial
//                       (ceil(N / 128), IC) floats: row r holds the column sums of the rounded
//                       dinp over rows [128 r, 128 r + 128), the fc bias gradient before its
//                       last, ordered reduction (matmul_backward_input's).
//   row_stats_gemm_backward: the attention projection's input gradient, with the fused attention
//                       backward's row statistics in its epilogue (below).
// And, where ctx.plain_gemm asks for it, the plain forward products (matmul_forward without
// GELU, matmul_forward_residual):
//   plain_gemm_forward : out (N, OC) = inp (N, IC) @ weight^T (+ bias) (+ residual), the sum in
//                       fp32 rounded once to bf16.
// Where they apply (gelu_gemm_applies, plain_gemm_chosen): a compute capability 9.0 device running
// this binary's sm_90a image, the bf16 build, the product's output width (OC forward, IC backward)
// a multiple of 128 (256 for the plain products), its reduction width a multiple of 64, every
// pointer 16-byte aligned. N is free (rows past N read as zeros and are not written).
// Deterministic: a tile's sums run in a fixed order that depends on the shape only, not on the
// number of SMs. Design: persistent CTAs, one per SM, of a TMA producer warpgroup and consumer
// warpgroups: for the GELU products (matmul_sm90.cu) three that take 128 x 128 output tiles in
// turn, one's epilogue beside the others' main loops; for the plain products
// (matmul_sm90_plain.cu) two that share each 128 x 256 tile, 64 rows each.
#pragma once
#include <initializer_list>

#include "context.cuh"
#include "precision.cuh"

namespace llmc {

// Context::gelu_gemm (LLMC_GELU_GEMM): 0 cuBLASLt's GELU_AUX_BIAS / DGELU epilogues; 1 our
// DGELU kernel wherever it applies, the forward through cuBLASLt; 2 (the default) both of ours
// wherever they apply (ours is the faster forward since the epilogue's GELU went from ~20
// instructions an element to 7, docs/perf-log.md "GELU products"); 3 as 2, the forward on the
// 128 x 256 kernel of the plain products where it applies.
// gelu_gemm_applies: whether they can run here (ctx.gelu_gemm != 0, device, build, shape);
// gelu_gemm_forward_chosen: whether matmul_forward takes ours (ctx.gelu_gemm == 2).
bool gelu_gemm_applies(const Context& ctx, int N, int out_cols, int reduce_cols,
                       std::initializer_list<const void*> pointers);
bool gelu_gemm_forward_chosen(const Context& ctx, int N, int IC, int OC,
                              std::initializer_list<const void*> pointers);

void gelu_gemm_forward(const Context& ctx, floatX* out, floatX* pre, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int IC, int OC);

// Context::plain_gemm (LLMC_PLAIN_GEMM): a mask of the plain products that take our kernel
// where it applies, cuBLASLt's elsewhere. (The lm-head's logits, a product without bias or
// residual, stay on cuBLASLt: ours took 2.3x its time there.)
constexpr unsigned kPlainGemmBias = 1;           // with a bias, no residual (the qkv product)
constexpr unsigned kPlainGemmResidualShort = 2;  // the residual, IC <= OC (attention projection)
constexpr unsigned kPlainGemmResidualLong = 4;   // the residual, IC > OC (the fcproj product)
constexpr unsigned kPlainGemmAll = 7;
// Whether the product (bias and residual null or not) takes our kernel.
bool plain_gemm_chosen(const Context& ctx, bool bias, bool residual, int N, int IC, int OC,
                       std::initializer_list<const void*> pointers);
// residual and bias may be null.
void plain_gemm_forward(const Context& ctx, floatX* out, const floatX* inp, const floatX* weight,
                        const floatX* bias, const floatX* residual, int N, int IC, int OC);

// The fc forward on the plain products' 128 x 256 kernel (ctx.gelu_gemm 3, where the output width
// is a multiple of 256; gelu_gemm_forward takes it): the same outputs as gelu_gemm_forward's.
bool gelu_gemm_wide_applies(const Context& ctx, int N, int IC, int OC,
                            std::initializer_list<const void*> pointers);
void gelu_gemm_forward_wide(const Context& ctx, floatX* out, floatX* pre, const floatX* inp,
                            const floatX* weight, const floatX* bias, int N, int IC, int OC);

// The attention projection's input gradient with the flash backward's row statistics
// (flash_attention_sm90_backward.cu) in its epilogue: dinp (N, IC) = dout (N, OC) @ weight
// (OC, IC) rounded to bf16 (overwritten), and for row n = b T + t of dinp and head h (channels
// [64 h, 64 h + 64) of it, IC = NH * 64): d[(b NH + h) T + t] = that head's slice of the rounded
// dinp . out's (out (N, IC): the attention output), summed in fp32 in a fixed order, and
// lse2[same] = lse[same] * log2(e). Where row_stats_gemm_applies: gelu_gemm_applies' rules for
// the product, N a multiple of T, 64-channel heads.
struct RowStatsTarget {
    float* d = nullptr;
    float* lse2 = nullptr;
    const float* lse = nullptr;
    int T = 0, NH = 0;
};
bool row_stats_gemm_applies(const Context& ctx, int N, int IC, int OC, int T, int NH,
                            std::initializer_list<const void*> pointers);
void row_stats_gemm_backward(const Context& ctx, floatX* dinp, const RowStatsTarget& stats,
                             const floatX* dout, const floatX* weight, const floatX* out, int N,
                             int IC, int OC);

// Rows of bias_partial for N rows of dinp (each of IC floats).
int dgelu_bias_partial_rows(int N);
void dgelu_gemm_backward(const Context& ctx, floatX* dinp, float* bias_partial, const floatX* dout,
                         const floatX* weight, const floatX* pre, int N, int IC, int OC);

}  // namespace llmc
