// flash_attention_sm90_backward.cu: causal flash attention backward for Hopper (sm_90a) on wgmma
// with TMA loads and warp specialization; the same outputs as flash_attention_backward (the
// mma.sync kernels of flash_attention.cu), HS = 64.
//
// With P = exp(S - lse) recomputed from q, k and the forward's lse, dP = dO V^T, D_t = dO_t . O_t,
// dS = P (dP - D): dV = P^T dO, dK = scale dS^T Q, dQ = scale dS K. Two kernels, as on the
// mma.sync path (a deterministic dQ without atomics: S and dP are computed twice):
//   dq kernel (first): a CTA owns 128 query rows (64 per consumer warpgroup), Q and dO of them in
//     shared memory, and walks key tiles of 64 (K and V in a ring of STAGES stages) from the
//     diagonal down to 0: S = Q K^T and dP = dO V^T by wgmma (shared-memory operands), P and dS
//     in fp32 registers, dQ += dS K by wgmma (dS as the register A operand, K transposed). It
//     also computes D for its rows and writes, for the dk/dv kernel, lse * log2(e) and D per
//     (b, h) row padded to T_pad = T rounded up to 64 (+inf and 0 past T), so that every 64-row
//     tile of them is one aligned 256-byte bulk copy.
//   dk/dv kernel: a CTA owns 128 keys (64 per consumer warpgroup), K and V of them in shared
//     memory, and walks query tiles of 64 (Q, dO, lse and D in a ring) from the diagonal to T:
//     S^T = K Q^T and dP^T = V dO^T by wgmma, P^T and dS^T in registers (keys on the fragment
//     rows: they are the A operands as they stand), dV += P^T dO and dK += dS^T Q by wgmma with
//     dO and Q transposed.
// The producer warpgroup's one thread issues every TMA load; consumers release ring stages by an
// mbarrier arrival per warp. A consumer warpgroup either runs each inner tile's GEMM groups one
// after the other (S and dP, then the gradient GEMMs), or, pipelined, issues S and dP of the next
// inner tile together with the gradient GEMMs of this one and computes the next P and dS while
// those run (FlashAttention-3's intra-warpgroup overlap; the ring then holds two tiles in use).
// Rows past T are zero-filled by TMA and add nothing (dq: lse = +inf for them, so P = 0; dk/dv:
// their lse is +inf and D 0 in the padded rows). The qkv bias
// gradient (dbias != null): each CTA sums its dq (or dk and dv) by column over its 128 rows in a
// fixed order into one row of float partials, and qkv_bias_reduce_kernel (flash_attention.cu)
// adds the rows in order. Deterministic: no atomics, every sum in a fixed order.
// Block order: as the forward's (flash_attention_sm90.cuh: pairs or one tile per CTA, longest
// first; a dk/dv tile is longer the lower its keys).
// FLOPs (causal, useful): 2.5 x the forward's 4 * B*NH*T*T*HS / 2.
#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "check.h"
#include "flash_attention_sm90.cuh"
#include "nvtx.h"
#include "sm90.cuh"

namespace llmc {

namespace {

typedef __nv_bfloat16 bf16;

constexpr int kRows = 128;     // query rows of a dq CTA, keys of a dk/dv CTA (64 per warpgroup)
constexpr int kInner = 64;     // rows of the inner tiles (keys in dq, queries in dk/dv)
constexpr int kStatsPad = 64;  // lse2 and D rows padded to a multiple of this
constexpr int kThreads = 384;
constexpr float kLog2e = 1.4426950408889634f;
constexpr size_t kScratchAlign = 256;

size_t aligned_bytes(size_t bytes) {
    return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}
__host__ __device__ inline int padded_t(int T) {
    return (T + kStatsPad - 1) / kStatsPad * kStatsPad;
}

// Scratch: lse2 and D (B*NH*T_pad floats each), then the bias partials of dq (B * ceil(T/128)
// rows of C floats) and of dk/dv (as many rows of 2C).
struct Scratch {
    float *lse2, *d, *part_q, *part_kv;
};
size_t stats_bytes(int B, int T, int NH) {
    return aligned_bytes((size_t)B * NH * padded_t(T) * sizeof(float));
}
size_t part_rows(int B, int T) { return (size_t)B * ((T + kRows - 1) / kRows); }
Scratch split_scratch(void* scratch, int B, int T, int NH, int HS) {
    unsigned char* p = static_cast<unsigned char*>(scratch);
    const size_t stats = stats_bytes(B, T, NH);
    Scratch s;
    s.lse2 = reinterpret_cast<float*>(p);
    s.d = reinterpret_cast<float*>(p + stats);
    s.part_q = reinterpret_cast<float*>(p + 2 * stats);
    s.part_kv = reinterpret_cast<float*>(p + 2 * stats +
                                         aligned_bytes(part_rows(B, T) * NH * HS * sizeof(float)));
    return s;
}

// Shared memory of both kernels, offsets from the 1024-aligned base: the outer tiles (Q and dO,
// or K and V: kRows rows each), the ring (per stage the two inner tiles of kInner rows, then,
// in dk/dv, kInner floats of lse2 and kInner of D), the D of the dq rows (kRows floats), the
// bias column partials (2 buffers x 8 warps x HS floats), the mbarriers.
template <int HS, int STAGES>
struct BwdSmem {
    static constexpr uint32_t kOuterBytes = kRows * HS * 2;
    static constexpr uint32_t kInnerBytes = kInner * HS * 2;
    static constexpr uint32_t kStatsBytes = 2 * kInner * 4;
    static constexpr uint32_t kStageBytes = 2 * kInnerBytes + 1024;  // stats, 1024-aligned
    static constexpr uint32_t kRing = 2 * kOuterBytes;
    static constexpr uint32_t kRowD = kRing + STAGES * kStageBytes;
    static constexpr uint32_t kPart = kRowD + kRows * 4;
    static constexpr uint32_t kBars = kPart + 2 * 8 * HS * 4;
    static constexpr int kNumBars = 2 + 2 * STAGES;
    static constexpr size_t kDynamicBytes = kBars + kNumBars * 8 + 1024;
    static_assert(kOuterBytes % 1024 == 0 && kInnerBytes % 1024 == 0, "1024-aligned tiles");
    static_assert(kStatsBytes <= 1024, "lse2 and D fit the stage's last 1024 bytes");

    uint32_t base;
    unsigned char* generic;  // the same address as base, generic
    __device__ uint32_t outer(int i) const { return base + i * kOuterBytes; }
    __device__ uint32_t inner(int s, int i) const {
        return base + kRing + s * kStageBytes + i * kInnerBytes;
    }
    __device__ uint32_t stats(int s) const {
        return base + kRing + s * kStageBytes + 2 * kInnerBytes;
    }
    __device__ const float* stats_ptr(int s) const {
        return reinterpret_cast<const float*>(generic + kRing + s * kStageBytes + 2 * kInnerBytes);
    }
    __device__ float* row_d() const { return reinterpret_cast<float*>(generic + kRowD); }
    __device__ float* part(int buffer) const {
        return reinterpret_cast<float*>(generic + kPart) + buffer * 8 * HS;
    }
    __device__ uint32_t bar(int i) const { return base + kBars + 8 * i; }
    __device__ uint32_t outer_full() const { return bar(0); }
    __device__ uint32_t outer_empty() const { return bar(1); }
    __device__ uint32_t full(int s) const { return bar(2 + s); }
    __device__ uint32_t empty(int s) const { return bar(2 + STAGES + s); }
};

#ifdef LLMC_SM90A_DEVICE
using namespace sm90;

constexpr int kConsumerWarps = 8;
// Named barriers (0 is __syncthreads'): the 256 consumer threads; each consumer warpgroup's 128.
constexpr int kConsumersBarrier = 1;
constexpr int kWarpgroupBarrier = 2;  // + consumer warpgroup index

template <int HS, int STAGES>
__device__ BwdSmem<HS, STAGES> bwd_smem(unsigned char* smem_raw) {
    const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
    return BwdSmem<HS, STAGES>{base, smem_raw + (base - raw)};
}

template <int HS, int STAGES>
__device__ void init_barriers(const BwdSmem<HS, STAGES>& sm) {
    if (threadIdx.x == 0) {
        mbar_init(sm.outer_full(), 1);
        mbar_init(sm.outer_empty(), kConsumerWarps);
        for (int s = 0; s < STAGES; s++) {
            mbar_init(sm.full(s), 1);
            mbar_init(sm.empty(s), kConsumerWarps);
        }
        fence_barrier_init();
    }
    __syncthreads();
}

// bytes (a multiple of 16, 16-byte aligned addresses) global -> shared, completing on bar.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}

// dst[c] (c < HS) = column sums, over the CTA's 128 rows, of the two warpgroups' 64 x HS
// accumulators times mul, in a fixed order: each thread's 2 rows, the 8 lanes of a column in a
// warp (shuffles), then the 8 warps in order through part (8 x HS floats). Every consumer thread
// calls it; consecutive calls must alternate between two part buffers (a call's writes come
// after the previous call's barrier, which every reader of the call before that has passed).
template <int HS>
__device__ void column_sums(float* dst, const float (&acc)[HS / 2], float mul, float* part,
                            int warp8, int lane) {
#pragma unroll
    for (int j = 0; j < HS / 8; j++) {
#pragma unroll
        for (int c = 0; c < 2; c++) {
            float v = (acc[4 * j + c] + acc[4 * j + 2 + c]) * mul;
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 16);
            if (lane < 4) part[warp8 * HS + 8 * j + 2 * lane + c] = v;
        }
    }
    named_barrier_sync(kConsumersBarrier, 256);
    const int t = threadIdx.x - 128;
    if (t < HS) {
        float total = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; w++) total += part[w * HS + t];
        dst[t] = total;
    }
}

// Rows row and row + 8 of a 64 x HS accumulator, times mul, as bf16 into g (row stride ld);
// rows >= T skipped.
template <int HS>
__device__ __forceinline__ void store_rows(bf16* g, long long ld, const float (&acc)[HS / 2],
                                           float mul, int row, int T, int lane) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = row + 8 * i;
        if (r >= T) continue;
        bf16* dst = g + (long long)r * ld + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < HS / 8; j++) {
            *reinterpret_cast<uint32_t*>(dst + 8 * j) =
                pack_bf16(acc[4 * j + 2 * i] * mul, acc[4 * j + 2 * i + 1] * mul);
        }
    }
}

// ---- dq -----------------------------------------------------------------------------------------

__device__ __forceinline__ int dq_key_tiles(int T, int q0) {
    return (min(T, q0 + kRows) + kInner - 1) / kInner;
}

// The producer's thread: per tile Q and dO (kRows rows), then K and V of the key tiles under the
// tile's rows, from the last down to 0.
template <int HS, int STAGES>
__device__ void dq_producer(const CUtensorMap* qkv_rows, const CUtensorMap* dout_rows,
                            const CUtensorMap* qkv_inner, const BwdSmem<HS, STAGES>& sm, int T,
                            int NH, const TileSchedule& sched) {
    int kv = 0, tiles = 0;
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        const int b = t.bh / NH, h = t.bh % NH, q0 = (sched.n - 1 - t.rank) * kRows;
        mbar_wait(sm.outer_empty(), (tiles & 1) ^ 1);
        mbar_arrive_expect_tx(sm.outer_full(), 2 * BwdSmem<HS, STAGES>::kOuterBytes);
        tma_load_tile<HS, kRows>(sm.outer(0), qkv_rows, sm.outer_full(), h, q0, b);
        tma_load_tile<HS, kRows>(sm.outer(1), dout_rows, sm.outer_full(), h, q0, b);
        for (int kb = dq_key_tiles(T, q0) - 1; kb >= 0; kb--, kv++) {
            const int s = kv % STAGES;
            mbar_wait(sm.empty(s), ((kv / STAGES) & 1) ^ 1);
            mbar_arrive_expect_tx(sm.full(s), 2 * BwdSmem<HS, STAGES>::kInnerBytes);
            tma_load_tile<HS, kInner>(sm.inner(s, 0), qkv_inner, sm.full(s), NH + h, kb * kInner,
                                      b);
            tma_load_tile<HS, kInner>(sm.inner(s, 1), qkv_inner, sm.full(s), 2 * NH + h,
                                      kb * kInner, b);
        }
        tiles++;
    }
}

// D = dO . O of the warpgroup's 64 rows from row0 (two threads a row, HS / 2 channels each, from
// global memory), written with lse * log2(e) into the padded rows of the dk/dv kernel (rows
// row0 .. < T_pad; +inf and 0 past T); returns lse2 and D of this thread's fragment rows.
template <int HS>
__device__ void dq_row_stats(float (&row_d)[2], float (&row_lse2)[2], const bf16* dout,
                             const bf16* out, const float* lse, float* lse2, float* D,
                             float* row_d_smem, long long bh, int b, int h, int NH, int T, int row0,
                             int row_frag, int cw) {
    const int wt = threadIdx.x % 128, C = NH * HS, T_pad = padded_t(T);
    const int r = row0 + wt / 2, c0 = (wt % 2) * (HS / 2);
    float sum = 0.0f;
    if (r < T) {
        const long long at = ((long long)b * T + r) * C + h * HS + c0;
#pragma unroll
        for (int c = 0; c < HS / 2; c += 8) {
            const uint4 x = *reinterpret_cast<const uint4*>(dout + at + c);
            const uint4 y = *reinterpret_cast<const uint4*>(out + at + c);
            const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
            const __nv_bfloat162* y2 = reinterpret_cast<const __nv_bfloat162*>(&y);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 xf = __bfloat1622float2(x2[k]), yf = __bfloat1622float2(y2[k]);
                sum += xf.x * yf.x + xf.y * yf.y;
            }
        }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    float* rows = row_d_smem + 64 * cw;
    if (wt % 2 == 0) {
        rows[wt / 2] = sum;
        if (r < T_pad) {
            D[bh * T_pad + r] = sum;  // 0 past T
            lse2[bh * T_pad + r] = r < T ? lse[bh * T + r] * kLog2e : INFINITY;
        }
    }
    named_barrier_sync(kWarpgroupBarrier + cw, 128);  // rows written
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int rr = row_frag + 8 * i;
        row_d[i] = rows[rr];
        row_lse2[i] = row0 + rr < T ? lse[bh * T + row0 + rr] * kLog2e : INFINITY;
    }
    named_barrier_sync(kWarpgroupBarrier + cw, 128);  // rows read before the next tile's writes
}

// dS = P (dP - D) of one 64 x 64 tile of a dq warpgroup, in place in dp (fp32), with P =
// exp2(S * scale_log2 - lse2); keys after a row are masked on the diagonal.
__device__ __forceinline__ void dq_softmax_grad(float (&s)[32], float (&dp)[32], int k0, int row0,
                                                int row_frag, const float (&row_d)[2],
                                                const float (&row_lse2)[2], float scale_log2) {
    const int wt = threadIdx.x % 128;
    const bool diagonal = k0 + kInner - 1 > row0;
#pragma unroll
    for (int e = 0; e < 32; e++) {
        const int i = (e / 2) % 2;
        float p = fast_exp2(fmaf(s[e], scale_log2, -row_lse2[i]));
        if (diagonal && k0 + frag_col(wt, e) > row0 + row_frag + 8 * i) p = 0.0f;
        dp[e] = p * (dp[e] - row_d[i]);
    }
}

// One key tile of a dq warpgroup, one GEMM group at a time: S = Q K^T and dP = dO V^T (64 x 64),
// dS = P (dP - D) -> dq.
template <int HS, int STAGES>
__device__ __forceinline__ void dq_step(float (&dq)[HS / 2], float (&s)[32], float (&dp)[32],
                                        uint32_t (&ds)[16], const BwdSmem<HS, STAGES>& sm, int st,
                                        int cw, int k0, int row0, int row_frag,
                                        const float (&row_d)[2], const float (&row_lse2)[2],
                                        float scale_log2, bool accumulate, bool last, int lane) {
    fence_operands(s);
    fence_operands(dp);
    wgmma_fence();
    gemm_ss_kmajor<kInner, HS / 16>(s, sm.outer(0), kRows, 64 * cw, sm.inner(st, 0), kInner, false);
    gemm_ss_kmajor<kInner, HS / 16>(dp, sm.outer(1), kRows, 64 * cw, sm.inner(st, 1), kInner,
                                    false);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(s);
    fence_operands(dp);
    if (last) release(sm.outer_empty(), lane);  // Q and dO: read for the last time
    dq_softmax_grad(s, dp, k0, row0, row_frag, row_d, row_lse2, scale_log2);
    accumulator_to_a(ds, dp);
    fence_operands(dq);
    fence_operands(ds);
    wgmma_fence();
    gemm_rs_mnmajor<HS, kInner / 16>(dq, ds, sm.inner(st, 0), kInner, accumulate);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(dq);
}

// One key tile of a pipelined dq warpgroup: S and dP of stage st issued with (PENDING) dq += dS K
// of the previous tile (its dS in ds, its K in stage pst), the dS of this tile computed while
// that runs; pst is released once it completes. dS of this tile is left in ds for the next step.
template <int HS, int STAGES, bool PENDING>
__device__ __forceinline__ void dq_step_overlapped(float (&dq)[HS / 2], float (&s)[32],
                                                   float (&dp)[32], uint32_t (&ds)[16],
                                                   const BwdSmem<HS, STAGES>& sm, int st, int pst,
                                                   int cw, int k0, int row0, int row_frag,
                                                   const float (&row_d)[2],
                                                   const float (&row_lse2)[2], float scale_log2,
                                                   bool accumulate, bool last, int lane) {
    fence_operands(s);
    fence_operands(dp);
    fence_operands(dq);
    fence_operands(ds);
    wgmma_fence();
    gemm_ss_kmajor<kInner, HS / 16>(s, sm.outer(0), kRows, 64 * cw, sm.inner(st, 0), kInner, false);
    gemm_ss_kmajor<kInner, HS / 16>(dp, sm.outer(1), kRows, 64 * cw, sm.inner(st, 1), kInner,
                                    false);
    wgmma_commit();
    if constexpr (PENDING) {
        gemm_rs_mnmajor<HS, kInner / 16>(dq, ds, sm.inner(pst, 0), kInner, accumulate);
        wgmma_commit();
        wgmma_wait<1>();  // S and dP done, dq += dS K may still run
    } else {
        wgmma_wait<0>();
    }
    fence_operands(s);
    fence_operands(dp);
    if (last) release(sm.outer_empty(), lane);  // Q and dO: read for the last time
    dq_softmax_grad(s, dp, k0, row0, row_frag, row_d, row_lse2, scale_log2);
    if constexpr (PENDING) {
        wgmma_wait<0>();
        fence_operands(dq);
        fence_operands(ds);
        release(sm.empty(pst), lane);
    }
    accumulator_to_a(ds, dp);
}

// The last dq += dS K of a pipelined dq warpgroup (K in stage pst, released after).
template <int HS, int STAGES>
__device__ __forceinline__ void dq_drain(float (&dq)[HS / 2], uint32_t (&ds)[16],
                                         const BwdSmem<HS, STAGES>& sm, int pst, bool accumulate,
                                         int lane) {
    fence_operands(dq);
    fence_operands(ds);
    wgmma_fence();
    gemm_rs_mnmajor<HS, kInner / 16>(dq, ds, sm.inner(pst, 0), kInner, accumulate);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(dq);
    release(sm.empty(pst), lane);
}

// PIPELINED: S and dP of each key tile issued with dq += dS K of the one before
// (dq_step_overlapped), else one GEMM group at a time (dq_step).
template <int HS, int STAGES, bool PIPELINED>
__device__ void dq_consumer(const BwdSmem<HS, STAGES>& sm, bf16* __restrict__ dqkv,
                            const bf16* dout, const bf16* out, const float* lse, float* lse2,
                            float* D, float* bias_part, int T, int NH, float scale,
                            float scale_log2, const TileSchedule& sched) {
    const int cw = threadIdx.x / 128 - 1, wt = threadIdx.x % 128;
    const int warp = wt / 32, lane = wt % 32;
    const int row_frag = 16 * warp + lane / 4;  // this thread's first row of the warpgroup's 64
    float s[32] = {}, dp[32] = {}, dq[HS / 2] = {};
    uint32_t ds[16] = {};
    int kv = 0, tiles = 0;
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        const int b = t.bh / NH, h = t.bh % NH, qb = sched.n - 1 - t.rank;
        const int q0 = qb * kRows, row0 = q0 + 64 * cw, n_kb = dq_key_tiles(T, q0);
        float row_d[2], row_lse2[2];
        dq_row_stats<HS>(row_d, row_lse2, dout, out, lse, lse2, D, sm.row_d(), t.bh, b, h, NH, T,
                         row0, row_frag, cw);
        mbar_wait_warp(sm.outer_full(), tiles & 1);
        bool first = true;  // no dq GEMM issued yet
        int pending = -1;   // PIPELINED: the stage whose dq GEMM is still to issue
#pragma unroll 1
        for (int it = 0; it < n_kb; it++) {
            const int kb = n_kb - 1 - it, j = kv + it, st = j % STAGES;
            mbar_wait_warp(sm.full(st), (j / STAGES) & 1);
            // Key tiles after every row of this warpgroup add 0 (never the last: key tile 0).
            if (kb * kInner > row0 + 63) {
                release(sm.empty(st), lane);
            } else if (!PIPELINED) {
                dq_step<HS, STAGES>(dq, s, dp, ds, sm, st, cw, kb * kInner, row0, row_frag, row_d,
                                    row_lse2, scale_log2, !first, it == n_kb - 1, lane);
                first = false;
                release(sm.empty(st), lane);
            } else if (pending >= 0) {
                dq_step_overlapped<HS, STAGES, true>(dq, s, dp, ds, sm, st, pending, cw,
                                                     kb * kInner, row0, row_frag, row_d, row_lse2,
                                                     scale_log2, !first, it == n_kb - 1, lane);
                first = false;
                pending = st;
            } else {
                dq_step_overlapped<HS, STAGES, false>(dq, s, dp, ds, sm, st, 0, cw, kb * kInner,
                                                      row0, row_frag, row_d, row_lse2, scale_log2,
                                                      false, it == n_kb - 1, lane);
                pending = st;
            }
        }
        if (PIPELINED) dq_drain<HS, STAGES>(dq, ds, sm, pending, !first, lane);
        bf16* dq_g = dqkv + (long long)b * T * 3 * NH * HS + h * HS;
        store_rows<HS>(dq_g, 3LL * NH * HS, dq, scale, row0 + row_frag, T, lane);
        if (bias_part != nullptr) {
            float* dst = bias_part + ((long long)b * sched.n + qb) * NH * HS + h * HS;
            column_sums<HS>(dst, dq, scale, sm.part(tiles & 1), 4 * cw + warp, lane);
        }
        kv += n_kb;
        tiles++;
    }
}

// ---- dk / dv ------------------------------------------------------------------------------------

// The producer's thread: per tile K and V (kRows keys), then Q, dO, lse2 and D of the query
// tiles from the diagonal to T.
template <int HS, int STAGES>
__device__ void dkdv_producer(const CUtensorMap* qkv_rows, const CUtensorMap* qkv_inner,
                              const CUtensorMap* dout_inner, const float* lse2, const float* D,
                              const BwdSmem<HS, STAGES>& sm, int T, int NH,
                              const TileSchedule& sched) {
    const int n_qt = padded_t(T) / kInner, T_pad = padded_t(T);
    int qs = 0, tiles = 0;
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        const int b = t.bh / NH, h = t.bh % NH, k0 = t.rank * kRows;
        mbar_wait(sm.outer_empty(), (tiles & 1) ^ 1);
        mbar_arrive_expect_tx(sm.outer_full(), 2 * BwdSmem<HS, STAGES>::kOuterBytes);
        tma_load_tile<HS, kRows>(sm.outer(0), qkv_rows, sm.outer_full(), NH + h, k0, b);
        tma_load_tile<HS, kRows>(sm.outer(1), qkv_rows, sm.outer_full(), 2 * NH + h, k0, b);
        for (int qt = k0 / kInner; qt < n_qt; qt++, qs++) {
            const int s = qs % STAGES;
            mbar_wait(sm.empty(s), ((qs / STAGES) & 1) ^ 1);
            mbar_arrive_expect_tx(sm.full(s), 2 * BwdSmem<HS, STAGES>::kInnerBytes +
                                                  BwdSmem<HS, STAGES>::kStatsBytes);
            tma_load_tile<HS, kInner>(sm.inner(s, 0), qkv_inner, sm.full(s), h, qt * kInner, b);
            tma_load_tile<HS, kInner>(sm.inner(s, 1), dout_inner, sm.full(s), h, qt * kInner, b);
            const long long at = (long long)t.bh * T_pad + qt * kInner;
            bulk_load(sm.stats(s), lse2 + at, kInner * 4, sm.full(s));
            bulk_load(sm.stats(s) + kInner * 4, D + at, kInner * 4, sm.full(s));
        }
        tiles++;
    }
}

// P^T and dS^T = P^T (dP^T - D) of one 64 keys x 64 queries tile of a dk/dv warpgroup, in place
// (fp32), from S^T and dP^T, with lse2 and D of the queries from stage s; queries before a key
// are masked on the diagonal.
template <int HS, int STAGES>
__device__ __forceinline__ void dkdv_softmax_grad(float (&st)[32], float (&dpt)[32],
                                                  const BwdSmem<HS, STAGES>& sm, int s, int q0,
                                                  int key0, float scale_log2) {
    const int wt = threadIdx.x % 128;
    const float* lse2 = sm.stats_ptr(s);
    const float* d = lse2 + kInner;
    const bool diagonal = q0 < key0 + 63;  // some query before some key
#pragma unroll
    for (int e = 0; e < 32; e++) {
        const int q = frag_col(wt, e);  // query in the tile; the key is row frag_row(wt, e)
        float p = fast_exp2(fmaf(st[e], scale_log2, -lse2[q]));
        if (diagonal && key0 + frag_row(wt, e) > q0 + q) p = 0.0f;
        st[e] = p;
        dpt[e] = p * (dpt[e] - d[q]);
    }
}

// One query tile of a dk/dv warpgroup, one GEMM group at a time: S^T = K Q^T and dP^T = V dO^T
// (64 keys x 64 queries), P^T and dS^T -> dv += P^T dO, dk += dS^T Q.
template <int HS, int STAGES>
__device__ __forceinline__ void dkdv_step(float (&dk)[HS / 2], float (&dv)[HS / 2], float (&st)[32],
                                          float (&dpt)[32], uint32_t (&pa)[16], uint32_t (&dsa)[16],
                                          const BwdSmem<HS, STAGES>& sm, int s, int cw, int q0,
                                          int key0, float scale_log2, bool accumulate) {
    fence_operands(st);
    fence_operands(dpt);
    wgmma_fence();
    gemm_ss_kmajor<kInner, HS / 16>(st, sm.outer(0), kRows, 64 * cw, sm.inner(s, 0), kInner, false);
    gemm_ss_kmajor<kInner, HS / 16>(dpt, sm.outer(1), kRows, 64 * cw, sm.inner(s, 1), kInner,
                                    false);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(st);
    fence_operands(dpt);
    dkdv_softmax_grad(st, dpt, sm, s, q0, key0, scale_log2);
    accumulator_to_a(pa, st);
    accumulator_to_a(dsa, dpt);
    fence_operands(dk);
    fence_operands(dv);
    fence_operands(pa);
    fence_operands(dsa);
    wgmma_fence();
    gemm_rs_mnmajor<HS, kInner / 16>(dv, pa, sm.inner(s, 1), kInner, accumulate);
    gemm_rs_mnmajor<HS, kInner / 16>(dk, dsa, sm.inner(s, 0), kInner, accumulate);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(dk);
    fence_operands(dv);
}

// One query tile of a pipelined dk/dv warpgroup: S^T and dP^T of stage s issued with
// (PENDING) dv += P^T dO and dk += dS^T Q of the previous tile (P^T and dS^T in pa and dsa, its
// Q and dO in stage ps), P^T and dS^T of this tile computed while those run; ps is released
// once they complete. P^T and dS^T of this tile are left in pa and dsa for the next step.
template <int HS, int STAGES, bool PENDING>
__device__ __forceinline__ void dkdv_step_overlapped(float (&dk)[HS / 2], float (&dv)[HS / 2],
                                                     float (&st)[32], float (&dpt)[32],
                                                     uint32_t (&pa)[16], uint32_t (&dsa)[16],
                                                     const BwdSmem<HS, STAGES>& sm, int s, int ps,
                                                     int cw, int q0, int key0, float scale_log2,
                                                     bool accumulate, int lane) {
    fence_operands(st);
    fence_operands(dpt);
    fence_operands(dk);
    fence_operands(dv);
    fence_operands(pa);
    fence_operands(dsa);
    wgmma_fence();
    gemm_ss_kmajor<kInner, HS / 16>(st, sm.outer(0), kRows, 64 * cw, sm.inner(s, 0), kInner, false);
    gemm_ss_kmajor<kInner, HS / 16>(dpt, sm.outer(1), kRows, 64 * cw, sm.inner(s, 1), kInner,
                                    false);
    wgmma_commit();
    if constexpr (PENDING) {
        gemm_rs_mnmajor<HS, kInner / 16>(dv, pa, sm.inner(ps, 1), kInner, accumulate);
        gemm_rs_mnmajor<HS, kInner / 16>(dk, dsa, sm.inner(ps, 0), kInner, accumulate);
        wgmma_commit();
        wgmma_wait<1>();  // S^T and dP^T done, dv and dk may still run
    } else {
        wgmma_wait<0>();
    }
    fence_operands(st);
    fence_operands(dpt);
    dkdv_softmax_grad(st, dpt, sm, s, q0, key0, scale_log2);
    if constexpr (PENDING) {
        wgmma_wait<0>();
        fence_operands(dk);
        fence_operands(dv);
        fence_operands(pa);
        fence_operands(dsa);
        release(sm.empty(ps), lane);
    }
    accumulator_to_a(pa, st);
    accumulator_to_a(dsa, dpt);
}

// The last dv += P^T dO and dk += dS^T Q of a pipelined dk/dv warpgroup (stage ps, released).
template <int HS, int STAGES>
__device__ __forceinline__ void dkdv_drain(float (&dk)[HS / 2], float (&dv)[HS / 2],
                                           uint32_t (&pa)[16], uint32_t (&dsa)[16],
                                           const BwdSmem<HS, STAGES>& sm, int ps, bool accumulate,
                                           int lane) {
    fence_operands(dk);
    fence_operands(dv);
    fence_operands(pa);
    fence_operands(dsa);
    wgmma_fence();
    gemm_rs_mnmajor<HS, kInner / 16>(dv, pa, sm.inner(ps, 1), kInner, accumulate);
    gemm_rs_mnmajor<HS, kInner / 16>(dk, dsa, sm.inner(ps, 0), kInner, accumulate);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(dk);
    fence_operands(dv);
    release(sm.empty(ps), lane);
}

// PIPELINED: S^T and dP^T of each query tile issued with dv and dk of the one before
// (dkdv_step_overlapped), else one GEMM group at a time (dkdv_step).
template <int HS, int STAGES, bool PIPELINED>
__device__ void dkdv_consumer(const BwdSmem<HS, STAGES>& sm, bf16* __restrict__ dqkv,
                              float* bias_part, int T, int NH, float scale, float scale_log2,
                              const TileSchedule& sched) {
    const int cw = threadIdx.x / 128 - 1, wt = threadIdx.x % 128;
    const int warp = wt / 32, lane = wt % 32;
    const int row_frag = 16 * warp + lane / 4;
    const int n_qt = padded_t(T) / kInner;
    float st[32] = {}, dpt[32] = {}, dk[HS / 2] = {}, dv[HS / 2] = {};
    uint32_t pa[16] = {}, dsa[16] = {};
    int qs = 0, tiles = 0;
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        const int b = t.bh / NH, h = t.bh % NH, kb = t.rank;
        const int k0 = kb * kRows, key0 = k0 + 64 * cw;  // this warpgroup's first key
        mbar_wait_warp(sm.outer_full(), tiles & 1);
        bool first = true;  // no dk/dv GEMM issued yet
        int pending = -1;   // PIPELINED: the stage whose dk/dv GEMMs are still to issue
#pragma unroll 1
        for (int qt = k0 / kInner; qt < n_qt; qt++, qs++) {
            const int s = qs % STAGES;
            mbar_wait_warp(sm.full(s), (qs / STAGES) & 1);
            // Query tiles before every key of this warpgroup add 0.
            if (qt * kInner + 63 < key0) {
                release(sm.empty(s), lane);
            } else if (!PIPELINED) {
                dkdv_step<HS, STAGES>(dk, dv, st, dpt, pa, dsa, sm, s, cw, qt * kInner, key0,
                                      scale_log2, !first);
                first = false;
                release(sm.empty(s), lane);
            } else if (pending >= 0) {
                dkdv_step_overlapped<HS, STAGES, true>(dk, dv, st, dpt, pa, dsa, sm, s, pending, cw,
                                                       qt * kInner, key0, scale_log2, !first, lane);
                first = false;
                pending = s;
            } else {
                dkdv_step_overlapped<HS, STAGES, false>(dk, dv, st, dpt, pa, dsa, sm, s, 0, cw,
                                                        qt * kInner, key0, scale_log2, false, lane);
                pending = s;
            }
        }
        release(sm.outer_empty(), lane);  // K and V: read for the last time
        if (PIPELINED && pending >= 0) {
            dkdv_drain<HS, STAGES>(dk, dv, pa, dsa, sm, pending, !first, lane);
            first = false;
        }
        if (first) {  // every key of this warpgroup >= T: no query tile reached them
#pragma unroll
            for (int e = 0; e < HS / 2; e++) dk[e] = dv[e] = 0.0f;
        }
        const long long C = (long long)NH * HS;
        bf16* dk_g = dqkv + (long long)b * T * 3 * C + C + h * HS;
        store_rows<HS>(dk_g, 3 * C, dk, scale, key0 + row_frag, T, lane);
        store_rows<HS>(dk_g + C, 3 * C, dv, 1.0f, key0 + row_frag, T, lane);
        if (bias_part != nullptr) {
            float* dst = bias_part + ((long long)b * sched.n + kb) * 2 * C + h * HS;
            column_sums<HS>(dst, dk, scale, sm.part(0), 4 * cw + warp, lane);
            column_sums<HS>(dst + C, dv, 1.0f, sm.part(1), 4 * cw + warp, lane);
        }
        tiles++;
    }
}
#endif  // LLMC_SM90A_DEVICE

// Grid: TileSchedule over (B*NH heads, ceil(T / 128) query tiles); 384 threads.
template <int HS, int STAGES, bool PIPELINED>
__global__ void __launch_bounds__(LLMC_SM90_LAUNCH_BOUND, 1)
    flash_attention_sm90_dq_kernel(const __grid_constant__ CUtensorMap qkv_rows,
                                   const __grid_constant__ CUtensorMap dout_rows,
                                   const __grid_constant__ CUtensorMap qkv_inner,
                                   bf16* __restrict__ dqkv,        // (B, T, 3C), dq part
                                   const bf16* __restrict__ dout,  // (B, T, C)
                                   const bf16* __restrict__ out,   // (B, T, C)
                                   const float* __restrict__ lse,  // (B, NH, T)
                                   float* __restrict__ lse2,       // (B, NH, T_pad)
                                   float* __restrict__ D,          // (B, NH, T_pad)
                                   float* __restrict__ bias_part,  // (B * tiles, C) or null
                                   int T, int NH, float scale, float scale_log2,
                                   TileSchedule sched) {
#ifdef LLMC_SM90A_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const BwdSmem<HS, STAGES> sm = bwd_smem<HS, STAGES>(smem_raw);
    init_barriers(sm);
    if (threadIdx.x < 128) {
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            prefetch_tensor_map(&qkv_inner);
            dq_producer<HS, STAGES>(&qkv_rows, &dout_rows, &qkv_inner, sm, T, NH, sched);
        }
        return;
    }
    setmaxnreg_inc<232>();
    dq_consumer<HS, STAGES, PIPELINED>(sm, dqkv, dout, out, lse, lse2, D, bias_part, T, NH, scale,
                                       scale_log2, sched);
#endif
}

// Grid: TileSchedule over (B*NH heads, ceil(T / 128) key tiles); 384 threads.
template <int HS, int STAGES, bool PIPELINED>
__global__ void __launch_bounds__(LLMC_SM90_LAUNCH_BOUND, 1)
    flash_attention_sm90_dkdv_kernel(const __grid_constant__ CUtensorMap qkv_rows,
                                     const __grid_constant__ CUtensorMap qkv_inner,
                                     const __grid_constant__ CUtensorMap dout_inner,
                                     bf16* __restrict__ dqkv,         // (B, T, 3C), dk, dv parts
                                     const float* __restrict__ lse2,  // (B, NH, T_pad)
                                     const float* __restrict__ D,     // (B, NH, T_pad)
                                     float* __restrict__ bias_part,   // (B * tiles, 2C) or null
                                     int T, int NH, float scale, float scale_log2,
                                     TileSchedule sched) {
#ifdef LLMC_SM90A_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const BwdSmem<HS, STAGES> sm = bwd_smem<HS, STAGES>(smem_raw);
    init_barriers(sm);
    if (threadIdx.x < 128) {
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            prefetch_tensor_map(&qkv_inner);
            dkdv_producer<HS, STAGES>(&qkv_rows, &qkv_inner, &dout_inner, lse2, D, sm, T, NH,
                                      sched);
        }
        return;
    }
    setmaxnreg_inc<232>();
    dkdv_consumer<HS, STAGES, PIPELINED>(sm, dqkv, bias_part, T, NH, scale, scale_log2, sched);
#endif
}

// ---- Host ---------------------------------------------------------------------------------------

// Variants of each kernel (the dq and the dk/dv kernel take theirs independently): stages of the
// inner-tile ring, pipelined or one GEMM group at a time, block order (-1: pairs where they
// balance, else one tile per CTA). Variant 0, the default, is the fastest measured; every variant
// gives the same bits, and the others stay compiled for
// dev/bench_attention --variants and are checked by dev/test_flash_attention (the "always pairs"
// one runs several tiles per CTA on the test's small grids too).
struct BackwardVariant {
    int stages;
    bool pipelined;
    int mode;
    const char* name;
};
constexpr int kBackwardVariants = 4;
constexpr BackwardVariant kBwdVariants[kBackwardVariants] = {
    {4, true, -1,
     "128 rows x 64-row inner tiles, 4 stages, next inner tile's S and dP issued with this one's "
     "gradient GEMMs"},
    {4, false, -1, "as 0, one GEMM group at a time"},
    {2, false, -1, "as 1 with 2 stages"},
    {4, true, kPairs, "as 0, always pairs"},
};

template <typename Kernel>
bool set_smem(Kernel kernel, size_t bytes) {
    LLMC_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return true;
}

bool image_has_backward_kernels() {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, flash_attention_sm90_dkdv_kernel<64, 2, false>) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return attr.maxThreadsPerBlock >= kThreads;
}

// The tensor maps, scales and scratch of one backward call.
struct BackwardArgs {
    CUtensorMap qkv_rows, qkv_inner, dout_rows, dout_inner;
    bf16* dqkv;
    const bf16 *dout, *out;
    const float* lse;
    Scratch sc;
    BiasPartials parts;
    int B, T, NH;
    float scale, scale_log2;
};

template <int HS, int V>
void dq_launch(const Context& ctx, const BackwardArgs& a) {
    constexpr BackwardVariant v = kBwdVariants[V];
    constexpr size_t smem = BwdSmem<HS, v.stages>::kDynamicBytes;
    auto* const kernel = flash_attention_sm90_dq_kernel<HS, v.stages, v.pipelined>;
    static const bool smem_set = set_smem(kernel, smem);  // once: no attribute calls in capture
    (void)smem_set;
    const TileSchedule sched = make_schedule(ctx, v.mode, a.B * a.NH, (a.T + kRows - 1) / kRows);
    kernel<<<(unsigned)schedule_grid(ctx, sched), kThreads, smem, ctx.stream>>>(
        a.qkv_rows, a.dout_rows, a.qkv_inner, a.dqkv, a.dout, a.out, a.lse, a.sc.lse2, a.sc.d,
        a.parts.q, a.T, a.NH, a.scale, a.scale_log2, sched);
    LLMC_CUDA_CHECK_LAST();
}

template <int HS, int V>
void dkdv_launch(const Context& ctx, const BackwardArgs& a) {
    constexpr BackwardVariant v = kBwdVariants[V];
    constexpr size_t smem = BwdSmem<HS, v.stages>::kDynamicBytes;
    auto* const kernel = flash_attention_sm90_dkdv_kernel<HS, v.stages, v.pipelined>;
    static const bool smem_set = set_smem(kernel, smem);
    (void)smem_set;
    const TileSchedule sched = make_schedule(ctx, v.mode, a.B * a.NH, (a.T + kRows - 1) / kRows);
    kernel<<<(unsigned)schedule_grid(ctx, sched), kThreads, smem, ctx.stream>>>(
        a.qkv_rows, a.qkv_inner, a.dout_inner, a.dqkv, a.sc.lse2, a.sc.d, a.parts.kv, a.T, a.NH,
        a.scale, a.scale_log2, sched);
    LLMC_CUDA_CHECK_LAST();
}

// The launch of the run-time variant.
template <int HS, int V = 0>
void backward_launch(const Context& ctx, const BackwardArgs& a, bool dq, int variant) {
    if (variant == V) {
        if (dq) {
            dq_launch<HS, V>(ctx, a);
        } else {
            dkdv_launch<HS, V>(ctx, a);
        }
    } else if constexpr (V + 1 < kBackwardVariants) {
        backward_launch<HS, V + 1>(ctx, a, dq, variant);
    }
}

template <int HS>
BiasPartials backward_hs(const Context& ctx, bf16* dqkv, void* scratch, const bf16* dout,
                         const bf16* qkv, const bf16* out, const float* lse, int B, int T, int NH,
                         bool bias, int dq_variant, int dkdv_variant, unsigned kernels) {
    BackwardArgs a;
    a.qkv_rows = make_row_tensor_map(qkv, B, T, 3 * NH, HS, kRows);
    a.qkv_inner = make_row_tensor_map(qkv, B, T, 3 * NH, HS, kInner);
    a.dout_rows = make_row_tensor_map(dout, B, T, NH, HS, kRows);
    a.dout_inner = make_row_tensor_map(dout, B, T, NH, HS, kInner);
    a.dqkv = dqkv;
    a.dout = dout;
    a.out = out;
    a.lse = lse;
    a.sc = split_scratch(scratch, B, T, NH, HS);
    const int rows = B * ((T + kRows - 1) / kRows);
    a.parts = BiasPartials{bias ? a.sc.part_q : nullptr, rows, bias ? a.sc.part_kv : nullptr, rows};
    a.B = B;
    a.T = T;
    a.NH = NH;
    a.scale = 1.0f / sqrtf((float)HS);
    a.scale_log2 = kLog2e * a.scale;
    // dq first: it writes lse2 and D, which dk/dv reads.
    if (kernels & kBackwardDq) backward_launch<HS>(ctx, a, true, dq_variant);
    if (kernels & kBackwardDkdv) backward_launch<HS>(ctx, a, false, dkdv_variant);
    return a.parts;
}

}  // namespace

bool flash_attention_sm90_backward_available(const Context& ctx, int HS) {
    static const bool enabled = [] {  // LLMC_FLASH_SM90=fwd keeps the Hopper forward alone
        const char* v = std::getenv("LLMC_FLASH_SM90");
        return v == nullptr || std::strcmp(v, "fwd") != 0;
    }();
    if (!enabled || HS != 64 || !flash_attention_sm90_available(ctx, HS)) return false;
    static const bool image = image_has_backward_kernels();
    return image;
}

size_t flash_attention_sm90_scratch_bytes(int B, int T, int NH, int HS) {
    return 2 * stats_bytes(B, T, NH) + aligned_bytes(part_rows(B, T) * NH * HS * sizeof(float)) +
           aligned_bytes(part_rows(B, T) * 2 * NH * HS * sizeof(float));
}

int flash_attention_sm90_backward_variants() { return kBackwardVariants; }

const char* flash_attention_sm90_backward_variant_name(int variant) {
    LLMC_CHECK(variant >= 0 && variant < kBackwardVariants,
               "flash_attention_sm90_backward_variant_name: no variant %d.", variant);
    return kBwdVariants[variant].name;
}

BiasPartials flash_attention_sm90_backward(const Context& ctx, bf16* dqkv, void* scratch,
                                           const bf16* dout, const bf16* qkv, const bf16* out,
                                           const float* lse, int B, int T, int NH, int HS,
                                           bool bias, int dq_variant, int dkdv_variant,
                                           unsigned kernels) {
    NvtxRange range("flash_attention_sm90_backward");
    LLMC_CHECK(flash_attention_sm90_backward_available(ctx, HS),
               "flash_attention_sm90_backward: the Hopper backward cannot run here (HS=%d; it "
               "needs HS 64, a compute capability 9.0 GPU, a build for sm_90a, and "
               "LLMC_FLASH_SM90 unset or 1).",
               HS);
    LLMC_CHECK(dq_variant >= 0 && dq_variant < kBackwardVariants && dkdv_variant >= 0 &&
                   dkdv_variant < kBackwardVariants,
               "flash_attention_sm90_backward: no variant %d / %d.", dq_variant, dkdv_variant);
    return backward_hs<64>(ctx, dqkv, scratch, dout, qkv, out, lse, B, T, NH, bias, dq_variant,
                           dkdv_variant, kernels);
}

}  // namespace llmc
