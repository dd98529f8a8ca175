// attention.cuh: causal multi-head self-attention, forward and backward.
//
// qkv (B, T, 3C): q in channels [0, C), k in [C, 2C), v in [2C, 3C); head h owns channels
// [h*HS, (h+1)*HS) of each, HS = C / NH. Scores s_ts = q_t . k_s / sqrt(HS) for s <= t.
//   attention_forward : out (B, T, C) = softmax(s) @ v   (overwrites); lse (B, NH, T) float =
//                       log sum_s exp(s_ts) (overwrites), the only per-row value kept for
//                       backward.
//   attention_backward: dqkv (B, T, 3C) OVERWRITTEN with dL/dqkv, from dout, qkv, out and lse.
//                       Given dbias (3C), the bf16 build also adds the qkv bias gradient (column
//                       sums of dqkv) into it (writes it, unread, without accumulate_dbias)
//                       and returns true; the fp32 build returns false and leaves it to the
//                       caller (matmul_backward).
// `scratch` is a buffer shared by all layers (attention_scratch_bytes). The bf16 build runs the
// fused flash kernels (flash_attention.cuh): scratch is D = dout . out (B*NH*T floats) and the
// bias partials, and
// HS must be a multiple of 16 up to 128. The fp32 build runs the cuBLASLt path: the T x T
// scores live in scratch during the call, and backward recomputes them from q, k and lse.
#pragma once
#include "context.cuh"
#include "precision.cuh"

namespace llmc {

size_t attention_scratch_bytes(int B, int T, int C, int NH);

// Whether this build's attention takes heads of HS = C / NH channels (bf16: a multiple of 16 up
// to 128, flash attention's tiles; fp32: any). False, with the rule, in *why otherwise.
bool attention_supports_head_size(int C, int NH, const char** why);

void attention_forward(const Context& ctx, floatX* out, float* lse, void* scratch,
                       const floatX* qkv, int B, int T, int C, int NH);

bool attention_backward(const Context& ctx, floatX* dqkv, void* scratch, const floatX* dout,
                        const floatX* qkv, const floatX* out, const float* lse, int B, int T, int C,
                        int NH, floatX* dbias = nullptr, bool accumulate_dbias = true,
                        bool row_stats_given = false);

// Whether attention_backward can take the fused backward's row statistics as given
// (row_stats_given), written beforehand into scratch where *lse2 and *d point: lse * log2(e) and
// dout . out per (b, head, t), each (B, NH, T) floats (row_stats_gemm_backward, matmul_sm90.cuh,
// writes them with dout). The bf16 build's fused Hopper backward at this shape, T a multiple of
// 64; false otherwise (the pointers then unset).
bool attention_backward_row_stats(const Context& ctx, void* scratch, int B, int T, int C, int NH,
                                  float** lse2, float** d);

// The cuBLASLt path in either build (the fp32 build's attention_*; the benchmark compares it
// with flash in the bf16 build). Its scratch holds two T x T score areas per (b, h).
size_t attention_cublas_scratch_bytes(int B, int T, int C, int NH);

void attention_forward_cublas(const Context& ctx, floatX* out, float* lse, void* scratch,
                              const floatX* qkv, int B, int T, int C, int NH);

void attention_backward_cublas(const Context& ctx, floatX* dqkv, void* scratch, const floatX* dout,
                               const floatX* qkv, const floatX* out, const float* lse, int B, int T,
                               int C, int NH);

}  // namespace llmc
