// flash_attention.cuh: fused causal attention on bf16 tensor cores, forward and backward.
//
// qkv (B, T, 3C) bf16: q in channels [0, C), k in [C, 2C), v in [2C, 3C); head h owns channels
// [h*HS, (h+1)*HS) of each, C = NH * HS, read in place (row stride 3C). Causal, scale 1/sqrt(HS).
//   flash_attention_forward : out (B, T, C) bf16 = softmax(q k^T * scale) v (overwritten);
//                             lse (B, NH, T) float = log sum_s exp(score_ts) (overwritten).
//   flash_attention_backward: dqkv (B, T, 3C) bf16 OVERWRITTEN with dq, dk, dv, from dout, qkv,
//                             out and lse; `scratch` holds D_t = dout_t . out_t per (b, h, t).
//                             With dbias (3C) != null also dbias += column sums of dqkv over
//                             the B*T rows (the qkv bias gradient), summed in float from the
//                             kernels' accumulators (before dqkv is rounded to bf16).
// No T x T matrix is ever stored. Deterministic: no atomics, every sum in a fixed order.
// Preconditions: HS a multiple of 16 up to 128, T >= 1, pointers 16-byte aligned, scratch of
// flash_attention_scratch_bytes(). Pointers are bf16 in both builds (the fp32 build compiles
// these kernels too, so the per-op test and benchmark run in either build).
#pragma once
#include <cuda_bf16.h>

#include <cstddef>

#include "context.cuh"

namespace llmc {

// Bytes of scratch the backward needs on either path: mma.sync, B*NH*T floats (D) and
// B*ceil(T/64)*3C floats (the bias partials), each rounded up to 256 bytes; Hopper, 2*B*NH*T_pad
// floats (lse and D, T rounded up to 64), B*ceil(T/128)*3C, and for the fused backward
// B*NH*T_pad*HS floats (its dq accumulator) and B*NH*T_pad/64 + 1 ints (its flags and ticket).
size_t flash_attention_scratch_bytes(int B, int T, int NH, int HS);

// Two sets of kernels: FlashAttention-2 style on mma.sync (any GPU the build targets, every
// head size above) and FlashAttention-3 style on Hopper's wgmma and TMA (flash_attention_sm90*.cu:
// compute capability 9.0, a build with sm_90a code; the forward for HS 64 and 128, the backward
// for HS 64). kAuto takes the Hopper kernels where flash_attention_sm90_available (forward) or
// flash_attention_sm90_backward_available says so; the others force one set (the test and the
// benchmark run both). LLMC_FLASH_SM90=0 in the environment switches the Hopper kernels off
// (kAuto then takes mma.sync; kSm90 fails), LLMC_FLASH_SM90=fwd the Hopper backward alone.
// kSm90Fused is kSm90 with the Hopper backward's fused kernel (one kernel for dq, dk and dv; dq
// summed in a fixed order of its own, so its bits differ from kSm90's two kernels'), which kAuto
// takes where flash_attention_fused_backward_chosen says so.
enum class FlashPath { kAuto, kMmaSync, kSm90, kSm90Fused };
// Whether kAuto's backward is the fused one: the Hopper backward applies, and
// Context::flash_fused_backward (LLMC_FLASH_FUSED_BACKWARD) is 2, or 1 and the grid is large
// enough (flash_attention.cu).
bool flash_attention_fused_backward_chosen(const Context& ctx, int B, int T, int NH, int HS);
bool flash_attention_sm90_available(const Context& ctx, int HS);
bool flash_attention_sm90_backward_available(const Context& ctx, int HS);

// Tile-shape variants of each pass of a path, kept compiled so that dev/bench_attention can time
// them in one run and dev/test_flash_attention can check each one; variant 0, the default, is
// the fastest measured. Every variant computes the same values (within rounding) for every
// shape. On the Hopper path the dq and dk/dv kernels have one list of variants.
enum class FlashPass { kForward, kDq, kDkdv };
int flash_attention_variants(FlashPass pass, FlashPath path = FlashPath::kMmaSync);
const char* flash_attention_variant_name(FlashPass pass, int variant,
                                         FlashPath path = FlashPath::kMmaSync);

// With path kAuto, variant must be 0 (each path's default).
void flash_attention_forward(const Context& ctx, __nv_bfloat16* out, float* lse,
                             const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                             int variant = 0, FlashPath path = FlashPath::kAuto);

// With path kAuto, both variants must be 0 (each path's default). dbias (3C, the qkv bias
// gradient, may be null) += the column sums of dqkv; written, unread, without accumulate_dbias.
void flash_attention_backward(const Context& ctx, __nv_bfloat16* dqkv, void* scratch,
                              const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, int B, int T, int NH,
                              int HS, int dq_variant = 0, int dkdv_variant = 0,
                              __nv_bfloat16* dbias = nullptr, FlashPath path = FlashPath::kAuto,
                              bool accumulate_dbias = true, bool row_stats_given = false);

// Whether flash_attention_backward (path kAuto) can take its row statistics as given
// (row_stats_given), written beforehand where *lse2 and *d point in scratch (lse * log2(e) and
// dout . out, each (B, NH, T) floats): the fused Hopper backward runs at this shape and T is a
// multiple of 64. Sets the pointers only where true.
bool flash_attention_backward_row_stats(const Context& ctx, void* scratch, int B, int T, int NH,
                                        int HS, float** lse2, float** d);

}  // namespace llmc
