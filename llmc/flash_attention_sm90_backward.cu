// flash_attention_sm90_backward.cu: causal flash attention backward for Hopper (sm_90a) on wgmma
// with TMA loads and warp specialization; the same outputs as flash_attention_backward (the
// mma.sync kernels of flash_attention.cu), HS = 64.
//
// With P = exp(S - lse) recomputed from q, k and the forward's lse, dP = dO V^T, D_t = dO_t . O_t,
// dS = P (dP - D): dV = P^T dO, dK = scale dS^T Q, dQ = scale dS K. Either the fused kernel
// ("fused dq + dk/dv" below: S and dP once, dq partials added in a fixed order into a float
// accumulator) or two kernels, as on the mma.sync path (a deterministic dQ without atomics: S and
// dP are computed twice):
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
constexpr size_t kScratchAlign = 256;

size_t aligned_bytes(size_t bytes) {
    return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}
__host__ __device__ inline int padded_t(int T) {
    return (T + kStatsPad - 1) / kStatsPad * kStatsPad;
}

// Scratch: lse2 and D (B*NH*T_pad floats each), then the bias partials of dq (B * ceil(T/128)
// rows of C floats) and of dk/dv (as many rows of 2C); for the fused kernel also the float dq
// accumulator (B*NH*T_pad rows of HS floats, in 64-row tiles laid out as dq_tile_offset) and
// the flags: one per (b, h, 64-row query tile), then the tile ticket counter.
struct Scratch {
    float *lse2, *d, *part_q, *part_kv, *dq_acc;
    int* flags;
};
size_t stats_bytes(int B, int T, int NH) {
    return aligned_bytes((size_t)B * NH * padded_t(T) * sizeof(float));
}
size_t part_rows(int B, int T) { return (size_t)B * ((T + kRows - 1) / kRows); }
size_t flag_count(int B, int T, int NH) { return (size_t)B * NH * (padded_t(T) / kInner) + 1; }
size_t dq_acc_bytes(int B, int T, int NH, int HS) {
    return aligned_bytes((size_t)B * NH * padded_t(T) * HS * sizeof(float));
}
Scratch split_scratch(void* scratch, int B, int T, int NH, int HS) {
    unsigned char* p = static_cast<unsigned char*>(scratch);
    const size_t stats = stats_bytes(B, T, NH);
    const size_t part_q = aligned_bytes(part_rows(B, T) * NH * HS * sizeof(float));
    const size_t part_kv = aligned_bytes(part_rows(B, T) * 2 * NH * HS * sizeof(float));
    Scratch s;
    s.lse2 = reinterpret_cast<float*>(p);
    s.d = reinterpret_cast<float*>(p + stats);
    s.part_q = reinterpret_cast<float*>(p + 2 * stats);
    s.part_kv = reinterpret_cast<float*>(p + 2 * stats + part_q);
    s.dq_acc = reinterpret_cast<float*>(p + 2 * stats + part_q + part_kv);
    s.flags = reinterpret_cast<int*>(p + 2 * stats + part_q + part_kv + dq_acc_bytes(B, T, NH, HS));
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

// The fused kernel's shared memory: BwdSmem's (its outer tiles are K and V buffer 0), then
// (1024-aligned) K and V buffer 1, so that the producer loads the next tile's while the consumers
// finish this one; each consumer warpgroup's dS^T tile (FusedTiles); two dq tile buffers (kInner x
// HS floats, dq_tile_offset layout) with the metadata of the tile each holds; the two tile slots
// the producer hands the consumers (one per K and V buffer); the dq buffers' barriers and K and V
// buffer 1's.
struct DqMeta {
    long long offset;  // of the tile in the dq accumulator, in floats
    int flag;          // index of the tile's flag
    int order;         // this CTA's place among the tile's writers (0: stores); -1: no more tiles
};
template <int HS, int STAGES>
struct FusedSmem : BwdSmem<HS, STAGES> {
    using Base = BwdSmem<HS, STAGES>;
    static constexpr uint32_t kTileBytes = 64 * kInner * 2;  // one warpgroup's dS^T
    static constexpr uint32_t kDqBytes = kInner * HS * 4;
    static constexpr uint32_t kKv1 = (Base::kBars + Base::kNumBars * 8 + 1023) / 1024 * 1024;
    static constexpr uint32_t kTiles = kKv1 + 2 * Base::kOuterBytes;
    static constexpr uint32_t kDq = kTiles + 2 * kTileBytes;
    static constexpr uint32_t kMeta = kDq + 2 * kDqBytes;
    static constexpr uint32_t kSlots = kMeta + 2 * sizeof(DqMeta);
    static constexpr uint32_t kFusedBars = kSlots + 16;
    static constexpr size_t kDynamicBytes = kFusedBars + 6 * 8 + 1024;
    static_assert(sizeof(DqMeta) == 16, "DqMeta packs into 16 bytes");
    static_assert(kDynamicBytes <= 227 * 1024, "the fused kernel's shared memory fits an SM");

    // K and V buffer i (K, then V), and its barriers (buffer 0's are BwdSmem's outer ones).
    __device__ uint32_t kv(int i) const { return i == 0 ? this->outer(0) : this->base + kKv1; }
    __device__ uint32_t kv_full(int i) const {
        return i == 0 ? this->outer_full() : this->base + kFusedBars + 32;
    }
    __device__ uint32_t kv_empty(int i) const {
        return i == 0 ? this->outer_empty() : this->base + kFusedBars + 40;
    }
    __device__ uint32_t ds_tile(int cw) const { return this->base + kTiles + cw * kTileBytes; }
    __device__ uint32_t dq(int buffer) const { return this->base + kDq + buffer * kDqBytes; }
    __device__ DqMeta* meta(int buffer) const {
        return reinterpret_cast<DqMeta*>(this->generic + kMeta) + buffer;
    }
    __device__ volatile int* slot(int i) const {
        return reinterpret_cast<volatile int*>(this->generic + kSlots) + i;
    }
    __device__ uint32_t dq_full(int buffer) const { return this->base + kFusedBars + 8 * buffer; }
    __device__ uint32_t dq_empty(int buffer) const {
        return this->base + kFusedBars + 16 + 8 * buffer;
    }
};

#ifdef LLMC_SM90A_DEVICE
using namespace sm90;

constexpr int kConsumerWarps = 8;
// Named barriers (0 is __syncthreads'): the 256 consumer threads; each consumer warpgroup's 128.
constexpr int kConsumersBarrier = 1;
constexpr int kWarpgroupBarrier = 2;  // + consumer warpgroup index
constexpr int kDqPairBarrier = 4;     // + dq buffer index: warpgroup 0's dq partial written

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

// D_r = dO_r . O_r summed by a pair of adjacent lanes, each over HS / 2 channels from `at` (its
// half of the row), then across the pair; every lane of the warp calls it (valid false: the
// lane's half counts 0). The one order in which every D is summed, so that the dq kernel and
// the fused kernel's row statistics agree bit for bit.
template <int HS>
__device__ __forceinline__ float row_dot_pair(const bf16* dout, const bf16* out, long long at,
                                              bool valid) {
    float sum = 0.0f;
    if (valid) {
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
    return sum + __shfl_xor_sync(0xffffffffu, sum, 1);
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
    const float sum = row_dot_pair<HS>(dout, out, ((long long)b * T + r) * C + h * HS + c0, r < T);
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

// The loads of one dk/dv tile (head bh, keys from k0): K and V (kRows keys) into the outer tiles
// from kv, completing on kv_full (which the caller has waited to be free), then Q, dO, lse2 and
// D of the query tiles from the diagonal to T through the ring (qs: the ring position, advanced).
template <int HS, int STAGES>
__device__ __forceinline__ void dkdv_load_tile(const CUtensorMap* qkv_rows,
                                               const CUtensorMap* qkv_inner,
                                               const CUtensorMap* dout_inner, const float* lse2,
                                               const float* D, const BwdSmem<HS, STAGES>& sm,
                                               uint32_t kv, uint32_t kv_full, int T, int NH, int bh,
                                               int k0, int& qs) {
    constexpr uint32_t kV = BwdSmem<HS, STAGES>::kOuterBytes;
    const int n_qt = padded_t(T) / kInner, T_pad = padded_t(T), b = bh / NH, h = bh % NH;
    mbar_arrive_expect_tx(kv_full, 2 * kV);
    tma_load_tile<HS, kRows>(kv, qkv_rows, kv_full, NH + h, k0, b);
    tma_load_tile<HS, kRows>(kv + kV, qkv_rows, kv_full, 2 * NH + h, k0, b);
    for (int qt = k0 / kInner; qt < n_qt; qt++, qs++) {
        const int s = qs % STAGES;
        mbar_wait(sm.empty(s), ((qs / STAGES) & 1) ^ 1);
        mbar_arrive_expect_tx(
            sm.full(s), 2 * BwdSmem<HS, STAGES>::kInnerBytes + BwdSmem<HS, STAGES>::kStatsBytes);
        tma_load_tile<HS, kInner>(sm.inner(s, 0), qkv_inner, sm.full(s), h, qt * kInner, b);
        tma_load_tile<HS, kInner>(sm.inner(s, 1), dout_inner, sm.full(s), h, qt * kInner, b);
        const long long at = (long long)bh * T_pad + qt * kInner;
        bulk_load(sm.stats(s), lse2 + at, kInner * 4, sm.full(s));
        bulk_load(sm.stats(s) + kInner * 4, D + at, kInner * 4, sm.full(s));
    }
}

// The producer's thread: per tile of the schedule, its loads.
template <int HS, int STAGES>
__device__ void dkdv_producer(const CUtensorMap* qkv_rows, const CUtensorMap* qkv_inner,
                              const CUtensorMap* dout_inner, const float* lse2, const float* D,
                              const BwdSmem<HS, STAGES>& sm, int T, int NH,
                              const TileSchedule& sched) {
    int qs = 0, tiles = 0;
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        mbar_wait(sm.outer_empty(), (tiles & 1) ^ 1);
        dkdv_load_tile<HS, STAGES>(qkv_rows, qkv_inner, dout_inner, lse2, D, sm, sm.outer(0),
                                   sm.outer_full(), T, NH, t.bh, t.rank * kRows, qs);
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

// S^T = K Q^T and dP^T = V dO^T of stage s for this warpgroup's 64 keys, K and V the outer tiles
// from kv (the caller fences and commits).
template <int HS, int STAGES>
__device__ __forceinline__ void issue_scores(float (&st)[32], float (&dpt)[32], uint32_t kv,
                                             const BwdSmem<HS, STAGES>& sm, int s, int cw) {
    constexpr uint32_t kV = BwdSmem<HS, STAGES>::kOuterBytes;
    gemm_ss_kmajor<kInner, HS / 16>(st, kv, kRows, 64 * cw, sm.inner(s, 0), kInner, false);
    gemm_ss_kmajor<kInner, HS / 16>(dpt, kv + kV, kRows, 64 * cw, sm.inner(s, 1), kInner, false);
}

// S^T and dP^T of stage s, waited for, then P^T and dS^T in their place (dkdv_softmax_grad).
template <int HS, int STAGES>
__device__ __forceinline__ void dkdv_scores(float (&st)[32], float (&dpt)[32], uint32_t kv,
                                            const BwdSmem<HS, STAGES>& sm, int s, int cw, int q0,
                                            int key0, float scale_log2) {
    fence_operands(st);
    fence_operands(dpt);
    wgmma_fence();
    issue_scores<HS, STAGES>(st, dpt, kv, sm, s, cw);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(st);
    fence_operands(dpt);
    dkdv_softmax_grad(st, dpt, sm, s, q0, key0, scale_log2);
}

// dv += P^T dO and dk += dS^T Q of stage s, P^T and dS^T the register A operands pa and dsa
// (the caller fences and commits).
template <int HS, int STAGES>
__device__ __forceinline__ void issue_dv_dk(float (&dk)[HS / 2], float (&dv)[HS / 2],
                                            const uint32_t (&pa)[16], const uint32_t (&dsa)[16],
                                            const BwdSmem<HS, STAGES>& sm, int s, bool accumulate) {
    gemm_rs_mnmajor<HS, kInner / 16>(dv, pa, sm.inner(s, 1), kInner, accumulate);
    gemm_rs_mnmajor<HS, kInner / 16>(dk, dsa, sm.inner(s, 0), kInner, accumulate);
}

// One query tile of a dk/dv warpgroup, one GEMM group at a time: S^T = K Q^T and dP^T = V dO^T
// (64 keys x 64 queries), P^T and dS^T -> dv += P^T dO, dk += dS^T Q.
template <int HS, int STAGES>
__device__ __forceinline__ void dkdv_step(float (&dk)[HS / 2], float (&dv)[HS / 2], float (&st)[32],
                                          float (&dpt)[32], uint32_t (&pa)[16], uint32_t (&dsa)[16],
                                          const BwdSmem<HS, STAGES>& sm, int s, int cw, int q0,
                                          int key0, float scale_log2, bool accumulate) {
    dkdv_scores<HS, STAGES>(st, dpt, sm.outer(0), sm, s, cw, q0, key0, scale_log2);
    accumulator_to_a(pa, st);
    accumulator_to_a(dsa, dpt);
    fence_operands(dk);
    fence_operands(dv);
    fence_operands(pa);
    fence_operands(dsa);
    wgmma_fence();
    issue_dv_dk<HS, STAGES>(dk, dv, pa, dsa, sm, s, accumulate);
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
    issue_scores<HS, STAGES>(st, dpt, sm.outer(0), sm, s, cw);
    wgmma_commit();
    if constexpr (PENDING) {
        issue_dv_dk<HS, STAGES>(dk, dv, pa, dsa, sm, ps, accumulate);
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
    issue_dv_dk<HS, STAGES>(dk, dv, pa, dsa, sm, ps, accumulate);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(dk);
    fence_operands(dv);
    release(sm.empty(ps), lane);
}

// ---- The fused kernel's dk/dv steps
// ---------------------------------------------------------------
//
// P^T and dS^T are the register A operands of dv += P^T dO and dk += dS^T Q, as in the dk/dv
// kernel; dS^T also goes to a swizzled shared-memory tile, the MN-major A operand of the dq
// partial over the warpgroup's keys, dq = dS K (M = queries, N = HS, K = keys; B: its K rows,
// MN-major).
struct FusedTiles {
    uint32_t ds;      // this warpgroup's dS^T tile (64 keys x 64 queries bf16, 128-byte swizzled)
    uint32_t kv;      // the tile's K and V (outer tiles, kRows keys each)
    uint32_t k_rows;  // K rows of this warpgroup's keys
};

// The tile's dq partial over this warpgroup's keys, dq = dS K (overwritten).
template <int HS>
__device__ __forceinline__ void issue_dq_partial(float (&dq)[HS / 2], const FusedTiles& t) {
#pragma unroll
    for (int ks = 0; ks < 64 / 16; ks++) {
        wgmma_ss<HS, 1, 1>(dq, mnmajor_desc(t.ds, 64, ks), mnmajor_desc(t.k_rows, kRows, ks),
                           ks > 0);
    }
}

// v, which the compiler must treat as unknown: addresses derived from it are recomputed where
// they are used instead of being kept live in registers across the consumer's loops.
__device__ __forceinline__ uint32_t opaque(uint32_t v) {
    asm volatile("mov.b32 %0, %0;" : "+r"(v));
    return v;
}

// Element pair r (elements 2r, 2r + 1) of a thread's 64 x 64 accumulator lies in row
// r0 + 8 (r % 2) and columns 8 (r / 2) + 2 (wt % 4) + {0, 1}, r0 = 16 (wt / 32) + (wt % 32) / 4.
// In a 128-byte swizzled bf16 tile (swizzled_offset) that is byte
//   r0 * 128 + 4 (wt % 4) + 1024 (r % 2) + (16 (r / 2) ^ 16 (r0 % 8)),
// and in a dq tile (dq_tile_offset, floats) byte
//   r0 * 256 + 8 (wt % 4) + 2048 (r % 2) + (32 (r / 2) ^ 32 (r0 % 8)).
struct FragAddress {
    uint32_t base, x;  // the terms that do not depend on r, and 16 (r0 % 8) or 32 (r0 % 8)
    __device__ uint32_t at(int r, int row_step, int col_step) const {
        return base + row_step * (r % 2) + ((col_step * (r / 2)) ^ x);
    }
};
__device__ __forceinline__ FragAddress swizzled_frag(uint32_t tile) {
    const uint32_t wt = threadIdx.x % 128, r0 = 16 * (wt / 32) + (wt % 32) / 4;
    return FragAddress{tile + opaque(r0 * 128 + 4 * (wt % 4)), opaque(16 * (r0 % 8))};
}
__device__ __forceinline__ FragAddress dq_frag(uint32_t tile) {
    const uint32_t wt = threadIdx.x % 128, r0 = 16 * (wt / 32) + (wt % 32) / 4;
    return FragAddress{tile + opaque(r0 * 256 + 8 * (wt % 4)), opaque(32 * (r0 % 8))};
}

// A 64 x 64 tile's bf16 pairs (as accumulator_to_a makes them from an fp32 accumulator) into a
// swizzled tile, fenced for the async proxy (the warpgroup barrier that completes it is the
// caller's).
__device__ __forceinline__ void store_tile(const uint32_t (&x)[16], uint32_t tile) {
    const FragAddress a = swizzled_frag(tile);
#pragma unroll
    for (int r = 0; r < 16; r++) {
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(a.at(r, 1024, 16)), "r"(x[r]) : "memory");
    }
    fence_proxy_async_shared();
}

// One query tile of a fused warpgroup: S^T and dP^T of stage s, P^T and dS^T rounded in registers,
// dv += P^T dO and dk += dS^T Q issued from them, dS^T also stored into the warpgroup's tile for
// the tile's dq partial, issued once every thread's part is in; that partial handed over by
// publish() once complete; stage s released. (With P^T and dS^T read from shared-memory tiles by
// dv and dk, twice those products' shared-memory reads, the kernel was 8% slower.)
template <int HS, int STAGES, typename Publish>
__device__ __forceinline__ void fused_step(float (&dk)[HS / 2], float (&dv)[HS / 2],
                                           float (&dq)[HS / 2], float (&st)[32], float (&dpt)[32],
                                           const FusedTiles& t, const BwdSmem<HS, STAGES>& sm,
                                           int s, int cw, int q0, int key0, float scale_log2,
                                           bool accumulate, int lane, const Publish& publish) {
    dkdv_scores<HS, STAGES>(st, dpt, t.kv, sm, s, cw, q0, key0, scale_log2);
    uint32_t pa[16], dsa[16];
    accumulator_to_a(pa, st);
    accumulator_to_a(dsa, dpt);
    store_tile(dsa, t.ds);
    fence_operands(dk);
    fence_operands(dv);
    fence_operands(pa);
    fence_operands(dsa);
    wgmma_fence();
    issue_dv_dk<HS, STAGES>(dk, dv, pa, dsa, sm, s, accumulate);
    wgmma_commit();
    named_barrier_sync(kWarpgroupBarrier + cw, 128);  // the dS^T tile written by every thread
    fence_operands(dq);
    wgmma_fence();
    issue_dq_partial<HS>(dq, t);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(dk);
    fence_operands(dv);
    fence_operands(dq);
    release(sm.empty(s), lane);
    publish();
}

// The end of a dk/dv tile (keys from key0 of head h of batch b, key tile kb of n): dk (scaled)
// and dv rounded into dqkv (zeros where no query tile reached this warpgroup's keys: `first`),
// and with bias_part their column sums into the tile's partial row.
template <int HS, int STAGES>
__device__ __forceinline__ void dkdv_epilogue(float (&dk)[HS / 2], float (&dv)[HS / 2], bool first,
                                              bf16* __restrict__ dqkv, float* bias_part,
                                              const BwdSmem<HS, STAGES>& sm, int b, int h, int kb,
                                              int n, int NH, int T, int key0, float scale) {
    const int cw = threadIdx.x / 128 - 1, wt = threadIdx.x % 128;
    const int warp = wt / 32, lane = wt % 32, row_frag = 16 * warp + lane / 4;
    if (first) {  // every key of this warpgroup >= T: no query tile reached them
#pragma unroll
        for (int e = 0; e < HS / 2; e++) dk[e] = dv[e] = 0.0f;
    }
    const long long C = (long long)NH * HS;
    bf16* dk_g = dqkv + (long long)b * T * 3 * C + C + h * HS;
    store_rows<HS>(dk_g, 3 * C, dk, scale, key0 + row_frag, T, lane);
    store_rows<HS>(dk_g + C, 3 * C, dv, 1.0f, key0 + row_frag, T, lane);
    if (bias_part != nullptr) {
        float* dst = bias_part + ((long long)b * n + kb) * 2 * C + h * HS;
        column_sums<HS>(dst, dk, scale, sm.part(0), 4 * cw + warp, lane);
        column_sums<HS>(dst + C, dv, 1.0f, sm.part(1), 4 * cw + warp, lane);
    }
}

// PIPELINED: S^T and dP^T of each query tile issued with dv and dk of the one before
// (dkdv_step_overlapped), else one GEMM group at a time (dkdv_step).
template <int HS, int STAGES, bool PIPELINED>
__device__ void dkdv_consumer(const BwdSmem<HS, STAGES>& sm, bf16* __restrict__ dqkv,
                              float* bias_part, int T, int NH, float scale, float scale_log2,
                              const TileSchedule& sched) {
    const int cw = threadIdx.x / 128 - 1, lane = threadIdx.x % 32;
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
        dkdv_epilogue<HS, STAGES>(dk, dv, first, dqkv, bias_part, sm, b, h, kb, sched.n, NH, T,
                                  key0, scale);
        tiles++;
    }
}

// ---- fused dq + dk/dv
// -----------------------------------------------------------------------------
//
// The dk/dv kernel's tiles, each also computing the dq partial of every query tile it visits
// over its 128 keys (two warpgroup partials added in shared memory), which a writer warp adds
// into a float dq accumulator in global memory. Deterministic: a query tile's partials are added
// in one fixed order, the key tiles from the diagonal down (the first stores, the others add),
// each writer waiting on the tile's flag (the number of partials added so far) before its bulk
// add. Tiles are handed out by a ticket counter in that order (per head, key tiles from the last
// down), so a tile waits only on tiles handed out before it, which are running or done: no
// deadlock, whatever order the hardware starts CTAs in. dq_convert_kernel then scales and rounds
// the accumulator into dqkv.

// The producer's thread: takes tickets until they run out, hands each tile to the consumers in
// the slot of its K and V buffer (read after kv_full), and loads it; -1 in the slot ends the
// consumers' loop. Tile i goes to K and V buffer i % 2: the next tile's ticket is taken, and its
// K and V loaded, as soon as this tile's last query tile is in the ring.
template <int HS, int STAGES>
__device__ void fused_producer(const CUtensorMap* qkv_rows, const CUtensorMap* qkv_inner,
                               const CUtensorMap* dout_inner, const float* lse2, const float* D,
                               const FusedSmem<HS, STAGES>& sm, int T, int NH, int n_kb, int total,
                               int* ticket_counter) {
    int qs = 0;
    for (int tiles = 0;; tiles++) {
        const int ticket = atomicAdd(ticket_counter, 1), i = tiles & 1;
        mbar_wait(sm.kv_empty(i), ((tiles >> 1) & 1) ^ 1);
        if (ticket >= total) {
            *sm.slot(i) = -1;
            mbar_arrive(sm.kv_full(i));
            return;
        }
        *sm.slot(i) = ticket;
        const int bh = ticket / n_kb, kb = n_kb - 1 - ticket % n_kb;
        dkdv_load_tile<HS, STAGES>(qkv_rows, qkv_inner, dout_inner, lse2, D, sm, sm.kv(i),
                                   sm.kv_full(i), T, NH, bh, kb * kRows, qs);
    }
}

// Element (r, c) of a 64 x HS dq tile, in floats from the tile's start: each row's column pairs
// permuted by r % 8 so that a warp's float2 stores of an accumulator hit every bank pair once
// per 16 lanes (dq_convert_kernel reads the same layout).
template <int HS>
__host__ __device__ constexpr int dq_tile_offset(int r, int c) {
    static_assert(HS == 64, "dq tiles: 32 column pairs a row, permuted within the row");
    return r * HS + 2 * ((c / 2) ^ (4 * (r % 8))) + c % 2;
}

// Hands query tile `meta` of this CTA to the writer (m: this CTA's count of tiles handed so far):
// warpgroup 0 stores its partial into dq buffer m % 2, warpgroup 1 adds its own (or, zero, adds
// nothing: no key of its was before the tile's queries) and signals the writer.
template <int HS, int STAGES>
__device__ __forceinline__ void publish_dq(const FusedSmem<HS, STAGES>& sm,
                                           const float (&acc)[HS / 2], bool zero, int m, int cw,
                                           int lane, const DqMeta& meta) {
    static_assert(HS == 64, "dq_frag addresses a 64 x 64 dq tile");
    const int buffer = m & 1;
    mbar_wait_warp(sm.dq_empty(buffer), ((m >> 1) & 1) ^ 1);
    const FragAddress a = dq_frag(sm.dq(buffer));
    if (cw == 0) {
#pragma unroll
        for (int r = 0; r < HS / 4; r++) {
            const float x = zero ? 0.0f : acc[2 * r], y = zero ? 0.0f : acc[2 * r + 1];
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a.at(r, 2048, 32)), "f"(x), "f"(y)
                         : "memory");
        }
        named_barrier_arrive(kDqPairBarrier + buffer, 256);
        return;
    }
    named_barrier_sync(kDqPairBarrier + buffer, 256);
    if (!zero) {
#pragma unroll
        for (int r = 0; r < HS / 4; r++) {
            float x, y;
            asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                         : "=f"(x), "=f"(y)
                         : "r"(a.at(r, 2048, 32))
                         : "memory");
            x += acc[2 * r];
            y += acc[2 * r + 1];
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a.at(r, 2048, 32)), "f"(x), "f"(y)
                         : "memory");
        }
    }
    const int wt = threadIdx.x % 128;
    if (wt == 0) *sm.meta(buffer) = meta;
    fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0) mbar_arrive(sm.dq_full(buffer));
}

// Warpgroup 1 after its last tile: a buffer whose metadata ends the writer's loop.
template <int HS, int STAGES>
__device__ __forceinline__ void publish_end(const FusedSmem<HS, STAGES>& sm, int m, int lane) {
    const int buffer = m & 1;
    mbar_wait_warp(sm.dq_empty(buffer), ((m >> 1) & 1) ^ 1);
    if (threadIdx.x % 128 == 0) *sm.meta(buffer) = DqMeta{0, 0, -1};
    __syncwarp();
    if (lane == 0) mbar_arrive(sm.dq_full(buffer));
}

// The writer's thread: each dq tile handed over, stored (first in its order) or added into the
// accumulator once the tile's flag says every earlier partial is in, then the flag advanced.
template <int HS, int STAGES>
__device__ void fused_dq_writer(const FusedSmem<HS, STAGES>& sm, float* dq_acc, int* flags) {
    for (int m = 0;; m++) {
        const int buffer = m & 1;
        mbar_wait(sm.dq_full(buffer), (m >> 1) & 1);
        const DqMeta meta = *sm.meta(buffer);
        if (meta.order < 0) return;
        float* dst = dq_acc + meta.offset;
        if (meta.order == 0) {
            bulk_store(dst, sm.dq(buffer), FusedSmem<HS, STAGES>::kDqBytes);
        } else {
            flag_wait_equal(flags + meta.flag, meta.order);
            fence_proxy_async_global();
            bulk_reduce_add_f32(dst, sm.dq(buffer), FusedSmem<HS, STAGES>::kDqBytes);
        }
        bulk_commit();
        bulk_wait_read_all();
        mbar_arrive(sm.dq_empty(buffer));
        bulk_wait_all();
        flag_release_increment(flags + meta.flag);
    }
}

// The dk/dv consumer with the dq partials, each query tile's handed to the writer as it
// completes (a zero one where this warpgroup skips the tile, in the same order as the other
// warpgroup's).
template <int HS, int STAGES>
__device__ __forceinline__ void fused_consumer(const FusedSmem<HS, STAGES>& sm,
                                               bf16* __restrict__ dqkv, float* bias_part, int T,
                                               int NH, int n_kb, float scale, float scale_log2) {
    const int cw = threadIdx.x / 128 - 1, lane = threadIdx.x % 32;
    const int n_qt = padded_t(T) / kInner;
    float st[32] = {}, dpt[32] = {}, dk[HS / 2] = {}, dv[HS / 2] = {}, dq[HS / 2] = {};
    int qs = 0, m = 0;
    for (int tile = 0;; tile++) {
        const int i = tile & 1;  // K and V buffer
        mbar_wait_warp(sm.kv_full(i), (tile >> 1) & 1);
        const int ticket = *sm.slot(i);
        if (ticket < 0) break;
        const int bh = ticket / n_kb, kb = n_kb - 1 - ticket % n_kb;
        const int b = bh / NH, h = bh % NH, k0 = kb * kRows, key0 = k0 + 64 * cw;
        const FusedTiles tiles{sm.ds_tile(cw), sm.kv(i), sm.kv(i) + 64 * cw * kRowBytes};
        // Query tile qt of this head: where its dq lies, its flag, this CTA's place in its order.
        auto meta = [&](int qt) {
            return DqMeta{((long long)bh * n_qt + qt) * kInner * HS, bh * n_qt + qt,
                          qt * kInner / kRows - kb};
        };
        bool first = true;
#pragma unroll 1
        for (int qt = k0 / kInner; qt < n_qt; qt++, qs++) {
            const int s = qs % STAGES;
            mbar_wait_warp(sm.full(s), (qs / STAGES) & 1);
            if (qt * kInner + 63 < key0) {  // before every key of this warpgroup: adds 0
                release(sm.empty(s), lane);
                publish_dq(sm, dq, true, m++, cw, lane, meta(qt));
                continue;
            }
            fused_step<HS, STAGES>(dk, dv, dq, st, dpt, tiles, sm, s, cw, qt * kInner, key0,
                                   scale_log2, !first, lane,
                                   [&] { publish_dq(sm, dq, false, m++, cw, lane, meta(qt)); });
            first = false;
        }
        release(sm.kv_empty(i), lane);  // K (read by the dq GEMMs) and V: done
        dkdv_epilogue<HS, STAGES>(dk, dv, first, dqkv, bias_part, sm, b, h, kb, n_kb, NH, T, key0,
                                  scale);
    }
    if (cw == 1) publish_end(sm, m, lane);
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

// Grid: up to one CTA per SM, each taking tiles (B*NH heads x ceil(T / 128) key tiles) by
// ticket; 384 threads: the producer's thread, the dq writer's (warp 1), two consumer warpgroups.
// flags and the ticket counter are zero at launch.
template <int HS, int STAGES>
__global__ void __launch_bounds__(LLMC_SM90_LAUNCH_BOUND, 1)
    flash_attention_sm90_fused_kernel(const __grid_constant__ CUtensorMap qkv_rows,
                                      const __grid_constant__ CUtensorMap qkv_inner,
                                      const __grid_constant__ CUtensorMap dout_inner,
                                      bf16* __restrict__ dqkv,         // (B, T, 3C), dk, dv parts
                                      const float* __restrict__ lse2,  // (B, NH, T_pad)
                                      const float* __restrict__ D,     // (B, NH, T_pad)
                                      float* __restrict__ bias_part,   // (B * tiles, 2C) or null
                                      float* __restrict__ dq_acc,      // (B, NH, T_pad, HS) tiles
                                      int* __restrict__ flags,         // (B, NH, T_pad / 64)
                                      int* __restrict__ ticket, int T, int NH, int n_kb, int total,
                                      float scale, float scale_log2) {
#ifdef LLMC_SM90A_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const FusedSmem<HS, STAGES> sm{bwd_smem<HS, STAGES>(smem_raw)};
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; i++) {
            mbar_init(sm.dq_full(i), 4);  // warpgroup 1's warps
            mbar_init(sm.dq_empty(i), 1);
        }
        mbar_init(sm.kv_full(1), 1);
        mbar_init(sm.kv_empty(1), kConsumerWarps);
    }
    init_barriers(sm);  // fences the initializations and syncs
    // One branch per role (the register budgets of setmaxnreg apply to each branch).
    if (threadIdx.x < 128) {
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            prefetch_tensor_map(&qkv_inner);
            fused_producer<HS, STAGES>(&qkv_rows, &qkv_inner, &dout_inner, lse2, D, sm, T, NH, n_kb,
                                       total, ticket);
        } else if (threadIdx.x == 32) {
            fused_dq_writer<HS, STAGES>(sm, dq_acc, flags);
        }
    } else {
        setmaxnreg_inc<232>();
        fused_consumer<HS, STAGES>(sm, dqkv, bias_part, T, NH, n_kb, scale, scale_log2);
    }
#endif
}

// lse2 = lse * log2(e) and D = dO . O for the fused kernel, as the dq kernel writes them for the
// dk/dv kernel (rows t < T_pad of each (b, h); +inf and 0 past T), with the same sums. Two
// threads a row, rows in (b, t, h) order, so a warp reads 16 consecutive rows of dO and O.
template <int HS>
__global__ void __launch_bounds__(128)
    backward_row_stats_kernel(float* __restrict__ lse2, float* __restrict__ D,
                              const bf16* __restrict__ dout, const bf16* __restrict__ out,
                              const float* __restrict__ lse, int T, int NH) {
#ifdef LLMC_SM90A_DEVICE
    const int T_pad = padded_t(T);
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 2;
    const int h = (int)(row % NH), t = (int)(row / NH % T_pad);
    const long long b = row / NH / T_pad, bh = b * NH + h;
    const int c0 = (threadIdx.x % 2) * (HS / 2);
    const float sum = row_dot_pair<HS>(dout, out, ((b * T + t) * NH + h) * HS + c0, t < T);
    if (threadIdx.x % 2 == 0) {
        D[bh * T_pad + t] = sum;  // 0 past T
        lse2[bh * T_pad + t] = t < T ? lse[bh * T + t] * kLog2e : INFINITY;
    }
#endif
}

// dq = scale * the fused kernel's accumulator, rounded to bf16 into dqkv, and (bias_part != null)
// the dq part of the qkv bias partials as the dq kernel writes them: per (b, 128-row query
// tile) one row of C column sums. Block (b*NH + h, 128-row tile): 8 groups of 32 threads, a
// thread's two columns over every 8th row, then the groups in order.
template <int HS>
__global__ void __launch_bounds__(HS / 2 * 8)
    dq_convert_kernel(bf16* __restrict__ dqkv, float* __restrict__ bias_part,
                      const float* __restrict__ dq_acc, int T, int NH, float scale) {
#ifdef LLMC_SM90A_DEVICE
    constexpr int kPairs = HS / 2, kGroups = 8;
    __shared__ float2 part[kGroups][kPairs];
    const int bh = blockIdx.x, qb = blockIdx.y, b = bh / NH, h = bh % NH;
    const int pair = threadIdx.x % kPairs, group = threadIdx.x / kPairs;
    const int n_qt = padded_t(T) / kInner;
    const long long C = (long long)NH * HS;
    // All of a thread's loads first, then the rows in order (the same sums): with one 8-byte
    // load in flight a thread, too few bytes were in flight an SM for the copy bandwidth.
    constexpr int kPerThread = kRows / kGroups;
    float2 v[kPerThread];
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
        const int t = qb * kRows + group + i * kGroups;
        v[i] = t < T ? *reinterpret_cast<const float2*>(
                           dq_acc + ((long long)bh * n_qt + t / kInner) * kInner * HS +
                           dq_tile_offset<HS>(t % kInner, 2 * pair))
                     : make_float2(0.0f, 0.0f);
    }
    float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
        const int t = qb * kRows + group + i * kGroups;
        if (t >= T) break;
        const float x = v[i].x * scale, y = v[i].y * scale;
        *reinterpret_cast<uint32_t*>(dqkv + ((long long)b * T + t) * 3 * C + h * HS + 2 * pair) =
            pack_bf16(x, y);
        sum.x += x;
        sum.y += y;
    }
    if (bias_part == nullptr) return;
    part[group][pair] = sum;
    __syncthreads();
    if (group == 0) {
        float2 total = part[0][pair];
        for (int g = 1; g < kGroups; g++) {
            total.x += part[g][pair].x;
            total.y += part[g][pair].y;
        }
        const int n_q = (T + kRows - 1) / kRows;
        *reinterpret_cast<float2*>(bias_part + ((long long)b * n_q + qb) * C + h * HS + 2 * pair) =
            total;
    }
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
    bool stats_given = false;  // the fused backward: lse2 and D already in scratch
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

// The fused backward: zeroed flags and ticket, the row statistics, the fused kernel (dk, dv and
// the dq accumulator), the dq conversion.
template <int HS>
void fused_launch(const Context& ctx, const BackwardArgs& a) {
    constexpr int kStages = 4;
    constexpr size_t smem = FusedSmem<HS, kStages>::kDynamicBytes;
    auto* const kernel = flash_attention_sm90_fused_kernel<HS, kStages>;
    static const bool smem_set = set_smem(kernel, smem);
    (void)smem_set;
    const int T_pad = padded_t(a.T), n_kb = (a.T + kRows - 1) / kRows;
    const long long heads = (long long)a.B * a.NH, total = heads * n_kb;
    LLMC_CHECK(total < (1LL << 31) && heads * T_pad * 2 / 128 < (1LL << 31),
               "flash_attention_sm90_backward: B*NH*T = %lld is too large for the fused kernel.",
               heads * a.T);
    LLMC_CUDA_CHECK(
        cudaMemsetAsync(a.sc.flags, 0, flag_count(a.B, a.T, a.NH) * sizeof(int), ctx.stream));
    // Two threads a row: a multiple of 128 threads, since T_pad is a multiple of 64.
    if (!a.stats_given) {
        backward_row_stats_kernel<HS><<<(unsigned)(heads * T_pad * 2 / 128), 128, 0, ctx.stream>>>(
            a.sc.lse2, a.sc.d, a.dout, a.out, a.lse, a.T, a.NH);
        LLMC_CUDA_CHECK_LAST();
    }
    const int grid = (int)std::min<long long>(total, ctx_num_sms(ctx));
    int* const ticket = a.sc.flags + (flag_count(a.B, a.T, a.NH) - 1);
    kernel<<<grid, kThreads, smem, ctx.stream>>>(
        a.qkv_rows, a.qkv_inner, a.dout_inner, a.dqkv, a.sc.lse2, a.sc.d, a.parts.kv, a.sc.dq_acc,
        a.sc.flags, ticket, a.T, a.NH, n_kb, (int)total, a.scale, a.scale_log2);
    LLMC_CUDA_CHECK_LAST();
    run_after_attention_main(ctx);  // e.g. a weight gradient forked to the branch here
    dq_convert_kernel<HS><<<dim3((unsigned)heads, (unsigned)n_kb), HS / 2 * 8, 0, ctx.stream>>>(
        a.dqkv, a.parts.q, a.sc.dq_acc, a.T, a.NH, a.scale);
    LLMC_CUDA_CHECK_LAST();
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
    if (kernels & kBackwardFused) {  // one variant
        a.stats_given = (kernels & kBackwardStatsGiven) != 0;
        fused_launch<HS>(ctx, a);
        return a.parts;
    }
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
           aligned_bytes(part_rows(B, T) * 2 * NH * HS * sizeof(float)) +
           dq_acc_bytes(B, T, NH, HS) + aligned_bytes(flag_count(B, T, NH) * sizeof(int));
}

int flash_attention_sm90_backward_variants() { return kBackwardVariants; }

const char* flash_attention_sm90_backward_variant_name(int variant) {
    LLMC_CHECK(variant >= 0 && variant < kBackwardVariants,
               "flash_attention_sm90_backward_variant_name: no variant %d.", variant);
    return kBwdVariants[variant].name;
}

void flash_attention_sm90_row_stats(void* scratch, int B, int T, int NH, int HS, float** lse2,
                                    float** d) {
    LLMC_CHECK(T > 0 && T % kStatsPad == 0,
               "flash_attention_sm90_row_stats: T=%d is not a multiple of %d", T, kStatsPad);
    const Scratch s = split_scratch(scratch, B, T, NH, HS);
    *lse2 = s.lse2;
    *d = s.d;
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
    LLMC_CHECK(
        !(kernels & kBackwardStatsGiven) || ((kernels & kBackwardFused) && T % kStatsPad == 0),
        "flash_attention_sm90_backward: given row statistics need the fused backward and T "
        "a multiple of %d (T=%d)",
        kStatsPad, T);
    return backward_hs<64>(ctx, dqkv, scratch, dout, qkv, out, lse, B, T, NH, bias, dq_variant,
                           dkdv_variant, kernels);
}

}  // namespace llmc
