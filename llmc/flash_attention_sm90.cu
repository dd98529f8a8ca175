// flash_attention_sm90.cu: causal flash attention forward for Hopper (sm_90a) on wgmma with TMA
// loads and warp specialization (the design of FlashAttention-3, written from its paper and the
// PTX ISA; building blocks in sm90.cuh).
//
// Computes what flash_attention_forward does (flash_attention.cuh): out (B, T, C) bf16 =
// softmax(q k^T * scale) v and lse (B, NH, T) float = log sum_s exp(score_ts), overwritten;
// qkv (B, T, 3C) read in place through one TMA descriptor of (HS, 3NH, T, B), HS 64 or 128.
// A CTA of 3 warpgroups owns query tiles of kBM = 128 rows of one head (one tile, or a pair):
//   producer warpgroup (one issuing thread, 40 registers): Q of the tile (one buffer, or two so
//     that the next tile's Q loads during this one), then K and V tiles of kBN = 128 keys from
//     the diagonal tile down to key 0, by TMA into a ring of STAGES stages; each K and V stage
//     has a "full" mbarrier (TMA transaction bytes) and an "empty" one (one arrival per consumer
//     warp once its wgmmas have read the stage), each Q buffer one of each.
//   two consumer warpgroups (232 registers), 64 query rows each: S = Q K^T by wgmma from shared
//     memory, online softmax in fp32 registers (exp2 with log2(e) folded into the scale, the
//     causal mask on the first tile only: it is the diagonal one), P rounded to bf16 in
//     registers, O += P V by wgmma with P as the register A operand and V transposed from shared
//     memory. A warpgroup issues S of key tile j together with P V of tile j - 1 and computes the
//     softmax of S while P V runs (optionally also across query tiles: S of the next tile's
//     diagonal with P V of this tile's last key tile); with PINGPONG the two warpgroups take
//     turns issuing (named barriers), so that the softmax of one overlaps the GEMMs of the other.
//     Warpgroup 0's rows are the tile's first 64, so it may compute only the first 64 keys of
//     the diagonal tile (the others are above the diagonal for all of its rows).
//   out = O / l from the accumulator registers to global memory (rows >= T skipped), lse =
//     m + log l (natural log), as the mma.sync forward writes them.
// Rows >= T of a tile read as zeros (TMA fills them; the descriptor's T bound keeps a tile from
// reading the next batch's rows), keys >= T only appear in the diagonal tile, above the diagonal
// of every row < T. Deterministic: every value is computed in a fixed order, no atomics.
// Block order (TileSchedule): by default one CTA per SM, each taking pairs of query tiles (the
// i-th longest and the i-th shortest of a head: the same work for every pair) in head order, so
// that a head's tiles run at the same time and share its K and V in L2, and the producer loads
// the next tile while the consumers finish the last; when the pairs do not split evenly over the
// SMs (the last round under kPairsBalance full: flash_attention_sm90.cuh), one tile per CTA
// instead, every head's longest tile first (as the mma.sync kernels do for small grids), and the
// hardware balances the CTAs.
// The default at HS 64 (variant 0) takes, with pairs, the cross-tile issue (S of the next tile's
// diagonal with the last P V of this one); with one tile per CTA, a kernel of three consumer
// warpgroups on 192-row query tiles ("Three consumer warpgroups" below), which keeps more
// softmax chains in flight per scheduler where few CTAs share the GPU.
// FLOPs (causal, useful): 4 * B*NH*T*T*HS / 2; a diagonal tile computes all of its 128 x 128
// scores (12.5% more than useful at T = 1024), or 3/4 of them with the half diagonal. Bytes: qkv
// read about once from DRAM, out written.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "check.h"
#include "flash_attention_sm90.cuh"
#include "nvtx.h"
#include "sm90.cuh"

namespace llmc {

namespace {

typedef __nv_bfloat16 bf16;

constexpr int kBM = 128;  // query rows of a tile (64 per consumer warpgroup)
constexpr int kBN = 128;  // keys of a K / V tile; kBM == kBN puts the diagonal in one tile
constexpr int kThreads = 384;
constexpr int kBM3 = 192;  // query rows of a tile of the three-warpgroup kernel (below)
constexpr int kThreads3 = 512;

// ---- Shared memory ------------------------------------------------------------------------------

// Offsets from the 1024-byte aligned base: QBUF Q tiles of BM rows, the K ring, the V ring, the
// mbarriers. BM / 64 consumer warpgroups share a Q tile.
template <int HS, int STAGES, int QBUF, int BM = kBM>
struct ForwardSmem {
    static constexpr int kStages = STAGES, kQBuf = QBUF, kRows = BM, kGroups = BM / 64;
    static constexpr uint32_t kQBytes = BM * HS * 2;
    static constexpr uint32_t kKvBytes = kBN * HS * 2;
    static constexpr uint32_t kQ = 0;
    static constexpr uint32_t kK = kQ + QBUF * kQBytes;
    static constexpr uint32_t kV = kK + STAGES * kKvBytes;
    static constexpr uint32_t kBars = kV + STAGES * kKvBytes;
    static constexpr int kNumBars = 2 * QBUF + 4 * STAGES;
    // + 1024: the dynamic shared memory base is only guaranteed 16-byte alignment.
    static constexpr size_t kDynamicBytes = kBars + kNumBars * 8 + 1024;
    static_assert(kQBytes % 1024 == 0 && kKvBytes % 1024 == 0, "tiles keep 1024-byte alignment");
    static_assert(kDynamicBytes <= 227 * 1024, "fits a CTA's opt-in shared memory");
    static_assert(kStages >= 2 && kQBuf >= 1 && kGroups * 64 == kRows,
                  "a ring, a Q tile, whole warpgroups");

    uint32_t base;
    __device__ uint32_t q(int i) const { return base + kQ + i * kQBytes; }
    __device__ uint32_t k(int s) const { return base + kK + s * kKvBytes; }
    __device__ uint32_t v(int s) const { return base + kV + s * kKvBytes; }
    __device__ uint32_t bar(int i) const { return base + kBars + 8 * i; }
    __device__ uint32_t q_full(int i) const { return bar(i); }
    __device__ uint32_t q_empty(int i) const { return bar(QBUF + i); }
    __device__ uint32_t k_full(int s) const { return bar(2 * QBUF + s); }
    __device__ uint32_t k_empty(int s) const { return bar(2 * QBUF + STAGES + s); }
    __device__ uint32_t v_full(int s) const { return bar(2 * QBUF + 2 * STAGES + s); }
    __device__ uint32_t v_empty(int s) const { return bar(2 * QBUF + 3 * STAGES + s); }
};

#ifdef LLMC_SM90A_DEVICE
using namespace sm90;

constexpr float kLn2 = 0.6931471805599453f;
constexpr int kConsumerWarps = 8;
// Named barriers of the consumers' turns (0 is __syncthreads'), and the threads that meet at one:
// the warpgroup waiting for its turn and the one releasing it.
constexpr int kTurnBarrier = 1;
constexpr int kTurnThreads = 256;

// The mbarriers of a ForwardSmem, by thread 0 of the CTA: "full" ones await one arrival (the
// producer's, with its TMA bytes), "empty" ones one per consumer warp.
template <class Smem>
__device__ __forceinline__ void init_barriers(const Smem& sm, int consumer_warps) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < Smem::kQBuf; i++) {
            mbar_init(sm.q_full(i), 1);
            mbar_init(sm.q_empty(i), consumer_warps);
        }
        for (int s = 0; s < Smem::kStages; s++) {
            mbar_init(sm.k_full(s), 1);
            mbar_init(sm.k_empty(s), consumer_warps);
            mbar_init(sm.v_full(s), 1);
            mbar_init(sm.v_empty(s), consumer_warps);
        }
        fence_barrier_init();
    }
}

// K and V of key tiles kb_top .. 0 of head h of batch b into the ring from position kv on (the
// producer's thread; kv advances past them).
template <int HS, class Smem>
__device__ __forceinline__ void load_kv_tiles(const CUtensorMap* map, const Smem& sm, int& kv,
                                              int kb_top, int NH, int h, int b) {
    for (int kb = kb_top; kb >= 0; kb--, kv++) {
        const int s = kv % Smem::kStages;
        const uint32_t phase = ((kv / Smem::kStages) & 1) ^ 1;
        mbar_wait(sm.k_empty(s), phase);
        mbar_arrive_expect_tx(sm.k_full(s), Smem::kKvBytes);
        tma_load_tile<HS, kBN>(sm.k(s), map, sm.k_full(s), NH + h, kb * kBN, b);
        mbar_wait(sm.v_empty(s), phase);
        mbar_arrive_expect_tx(sm.v_full(s), Smem::kKvBytes);
        tma_load_tile<HS, kBN>(sm.v(s), map, sm.v_full(s), 2 * NH + h, kb * kBN, b);
    }
}

// The producer's one thread: for each tile of this CTA, Q (into buffer tiles % QBUF), then K and
// V of key tiles qb .. 0.
template <int HS, class Smem>
__device__ void forward_producer(const CUtensorMap* map, const Smem& sm, int NH,
                                 const TileSchedule& sched) {
    constexpr int QBUF = Smem::kQBuf;
    prefetch_tensor_map(map);
    int kv = 0, tiles = 0;  // K/V tiles and query tiles loaded so far (ring position and phase)
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        const int b = t.bh / NH, h = t.bh % NH, qb = sched.n - 1 - t.rank, qs = tiles % QBUF;
        mbar_wait(sm.q_empty(qs), ((tiles / QBUF) & 1) ^ 1);
        mbar_arrive_expect_tx(sm.q_full(qs), Smem::kQBytes);
        tma_load_tile<HS, kBM>(sm.q(qs), map, sm.q_full(qs), h, qb * kBM, b);
        load_kv_tiles<HS>(map, sm, kv, qb, NH, h, b);
        tiles++;
    }
}

// Online softmax of one score tile: this thread's 2 rows (i = 0, 1: fragment rows r and r + 8)
// x the first 2 * NE keys (NE = 64: the whole 128-key tile; 32: its first 64 keys). s -> p =
// exp2(s * scale_log2 - m_new) in place, m the running max (scaled, log2 units), l the running
// partial row sums (this thread's columns), alpha = exp2(m_old - m_new). With MASK, keys after
// the row (local key index > row_local[i]) are masked. The first tile is the diagonal one and
// every row has key k0 <= row there, so m is finite from then on (and alpha = exp2(-inf) = 0 on
// the first tile, where O and l are still empty).
template <bool MASK, int NE>
__device__ __forceinline__ void softmax_tile(float (&s)[64], float (&m)[2], float (&l)[2],
                                             float (&alpha)[2], float scale_log2, int row_local,
                                             int lane) {
    if constexpr (MASK) {
#pragma unroll
        for (int e = 0; e < NE; e++) {
            const int key = 8 * (e / 4) + 2 * (lane % 4) + e % 2;
            if (key > row_local + 8 * ((e / 2) % 2)) s[e] = -INFINITY;
        }
    }
    // Maxima and sums over 4 independent partial chains each (shorter dependency chains; the
    // order is fixed, so the result is deterministic).
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < NE / 4; j++) {
            mx[j % 4] = fmaxf(mx[j % 4], fmaxf(s[4 * j + 2 * i], s[4 * j + 2 * i + 1]));
        }
        float row_max = fmaxf(fmaxf(mx[0], mx[1]), fmaxf(mx[2], mx[3]));
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
        const float m_new = fmaxf(m[i], row_max * scale_log2);
        alpha[i] = fast_exp2(m[i] - m_new);
        m[i] = m_new;
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < NE / 4; j++) {
#pragma unroll
            for (int c = 0; c < 2; c++) {
                float& x = s[4 * j + 2 * i + c];
                x = fast_exp2(fmaf(x, scale_log2, -m_new));
                sum[j % 4] += x;
            }
        }
        l[i] = l[i] * alpha[i] + ((sum[0] + sum[1]) + (sum[2] + sum[3]));
    }
}

template <int HS>
__device__ __forceinline__ void rescale(float (&o)[HS / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int e = 0; e < HS / 2; e++) o[e] *= alpha[(e / 2) % 2];
}

// P of the first 2 * NE keys as bf16 A fragments (registers 0 .. NE / 2 - 1 of p).
template <int NE>
__device__ __forceinline__ void probabilities_to_a(uint32_t (&p)[32], const float (&s)[64]) {
#pragma unroll
    for (int r = 0; r < NE / 2; r++) p[r] = pack_bf16(s[2 * r], s[2 * r + 1]);
}

// S (64 rows of a Q tile of BM rows from q_row0 x the first 64 keys of a K tile with HALF, else
// all 128) = Q K^T.
template <int HS, bool HALF, int BM>
__device__ __forceinline__ void issue_s(float (&s)[64], uint32_t q_tile, int q_row0,
                                        uint32_t k_tile) {
    if constexpr (HALF) {
        gemm_ss_kmajor<kBN / 2, HS / 16>(reinterpret_cast<float(&)[32]>(s), q_tile, BM, q_row0,
                                         k_tile, kBN, false);
    } else {
        gemm_ss_kmajor<kBN, HS / 16>(s, q_tile, BM, q_row0, k_tile, kBN, false);
    }
}

// O (+)= P V over the first 64 keys of a V tile with HALF, else all 128.
template <int HS, bool HALF>
__device__ __forceinline__ void issue_pv(float (&o)[HS / 2], const uint32_t (&p)[32],
                                         uint32_t v_tile, bool accumulate) {
    if constexpr (HALF) {
        gemm_rs_mnmajor<HS, kBN / 32>(o, reinterpret_cast<const uint32_t(&)[16]>(p), v_tile, kBN,
                                      accumulate);
    } else {
        gemm_rs_mnmajor<HS, kBN / 16>(o, p, v_tile, kBN, accumulate);
    }
}

// The turns of the NWG consumer warpgroups (PINGPONG): warpgroup cw waits for its barrier
// before issuing and then releases the next one's (cw + 1 mod NWG), so that they issue in turn.
template <bool PINGPONG, int NWG>
__device__ __forceinline__ void turn_begin(int cw) {
    if constexpr (PINGPONG) named_barrier_sync(kTurnBarrier + cw, kTurnThreads);
}
template <bool PINGPONG, int NWG>
__device__ __forceinline__ void turn_end(int cw) {
    if constexpr (PINGPONG) {
        const int next = NWG == 2 ? 1 - cw : (cw + 1 == NWG ? 0 : cw + 1);
        named_barrier_arrive(kTurnBarrier + next, kTurnThreads);
    }
}

// lse of this thread's 2 rows (row + 8 i) of head bh = m + log l (natural log; rows >= T
// skipped), and 1 / l in inv (the output's scale).
__device__ __forceinline__ void finish_rows(float* __restrict__ lse, float (&inv)[2],
                                            const float (&m)[2], const float (&l)[2], int row,
                                            int T, int bh, int lane) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float sum = l[i] + __shfl_xor_sync(0xffffffffu, l[i], 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        inv[i] = 1.0f / sum;
        const int r = row + 8 * i;
        if (r < T && lane % 4 == 0) lse[(long long)bh * T + r] = (m[i] + log2f(sum)) * kLn2;
    }
}

// out rows of this thread's 2 rows (row + 8 i) of head bh: O * inv rounded to bf16; rows >= T
// skipped.
template <int HS>
__device__ __forceinline__ void store_rows(bf16* __restrict__ out, const float (&o)[HS / 2],
                                           const float (&inv)[2], int row, int T, int bh, int NH,
                                           int lane) {
    const int C = NH * HS;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = row + 8 * i;
        if (r >= T) continue;
        bf16* dst = out + ((long long)(bh / NH) * T + r) * C + (bh % NH) * HS + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < HS / 8; j++) {
            *reinterpret_cast<uint32_t*>(dst + 8 * j) =
                pack_bf16(o[4 * j + 2 * i] * inv[i], o[4 * j + 2 * i + 1] * inv[i]);
        }
    }
}

// The P V GEMM a consumer warpgroup has still to issue: key tile j of its ring sequence, of
// the query tile (bh, qb); first: the tile's diagonal one (O starts there), half: over the
// first 64 keys only (HALF_DIAGONAL).
struct PendingPv {
    int j, bh, qb;
    bool first, half;
};

// A consumer warpgroup's registers and where it stands.
template <int HS>
struct ConsumerState {
    float s[64], o[HS / 2], m[2], l[2], alpha[2];
    uint32_t p[32];
    PendingPv pv;
    int cw, lane, row_local;
};

// The steps of a consumer warpgroup below each issue their wgmmas in one turn and wait for all
// of them before returning (no wgmma is in flight across the branches that pick a step).

// S of key tile j (the diagonal one: masked, m and l start) alone; HALF_S: its first 64 keys.
template <int HS, class Smem, bool PINGPONG, bool HALF_S>
__device__ __forceinline__ void step_s(ConsumerState<HS>& c, const Smem& sm, int j, int qs,
                                       bool last_s, float scale_log2) {
    constexpr int STAGES = Smem::kStages;
    const int st = j % STAGES;
    mbar_wait_warp(sm.k_full(st), (j / STAGES) & 1);
    turn_begin<PINGPONG, Smem::kGroups>(c.cw);
    fence_operands(c.s);
    wgmma_fence();
    issue_s<HS, HALF_S, Smem::kRows>(c.s, sm.q(qs), 64 * c.cw, sm.k(st));
    wgmma_commit();
    turn_end<PINGPONG, Smem::kGroups>(c.cw);
    wgmma_wait<0>();
    fence_operands(c.s);
    release(sm.k_empty(st), c.lane);
    if (last_s) release(sm.q_empty(qs), c.lane);
    c.m[0] = c.m[1] = -INFINITY;
    c.l[0] = c.l[1] = 0.0f;
    softmax_tile<true, HALF_S ? 32 : 64>(c.s, c.m, c.l, c.alpha, scale_log2, c.row_local, c.lane);
    probabilities_to_a<HALF_S ? 32 : 64>(c.p, c.s);
}

// S of key tile j with the pending P V (HALF_PV: over 64 keys), the softmax of S while P V runs.
// FIRST: j is the diagonal tile of a new query tile (masked; m and l start, and O is not rescaled:
// the pending P V ends the previous query tile, whose m and l the caller keeps).
template <int HS, class Smem, bool PINGPONG, bool FIRST, bool HALF_S, bool HALF_PV>
__device__ __forceinline__ void step_s_pv(ConsumerState<HS>& c, const Smem& sm, int j, int qs,
                                          bool last_s, float scale_log2) {
    constexpr int STAGES = Smem::kStages;
    const int st = j % STAGES, pst = c.pv.j % STAGES;
    // V of the pending tile was loaded before K of this one: waiting for both first costs
    // nothing and keeps the issue below free of waits.
    mbar_wait_warp(sm.v_full(pst), (c.pv.j / STAGES) & 1);
    mbar_wait_warp(sm.k_full(st), (j / STAGES) & 1);
    turn_begin<PINGPONG, Smem::kGroups>(c.cw);
    fence_operands(c.s);
    fence_operands(c.o);
    fence_operands(c.p);
    wgmma_fence();
    issue_s<HS, HALF_S, Smem::kRows>(c.s, sm.q(qs), 64 * c.cw, sm.k(st));
    wgmma_commit();
    issue_pv<HS, HALF_PV>(c.o, c.p, sm.v(pst), !c.pv.first);
    wgmma_commit();
    turn_end<PINGPONG, Smem::kGroups>(c.cw);
    wgmma_wait<1>();  // S done, P V may still run
    fence_operands(c.s);
    release(sm.k_empty(st), c.lane);
    if (last_s) release(sm.q_empty(qs), c.lane);
    if constexpr (FIRST) {
        c.m[0] = c.m[1] = -INFINITY;
        c.l[0] = c.l[1] = 0.0f;
    }
    softmax_tile<FIRST, HALF_S ? 32 : 64>(c.s, c.m, c.l, c.alpha, scale_log2, c.row_local, c.lane);
    wgmma_wait<0>();
    fence_operands(c.o);
    fence_operands(c.p);
    release(sm.v_empty(pst), c.lane);
    if constexpr (!FIRST) rescale<HS>(c.o, c.alpha);
    probabilities_to_a<HALF_S ? 32 : 64>(c.p, c.s);
}

// The pending P V alone (HALF_PV: over 64 keys); O is then complete.
template <int HS, class Smem, bool PINGPONG, bool HALF_PV>
__device__ __forceinline__ void step_pv(ConsumerState<HS>& c, const Smem& sm) {
    constexpr int STAGES = Smem::kStages;
    const int pst = c.pv.j % STAGES;
    mbar_wait_warp(sm.v_full(pst), (c.pv.j / STAGES) & 1);
    turn_begin<PINGPONG, Smem::kGroups>(c.cw);
    fence_operands(c.o);
    fence_operands(c.p);
    wgmma_fence();
    issue_pv<HS, HALF_PV>(c.o, c.p, sm.v(pst), !c.pv.first);
    wgmma_commit();
    turn_end<PINGPONG, Smem::kGroups>(c.cw);
    wgmma_wait<0>();
    fence_operands(c.o);
    release(sm.v_empty(pst), c.lane);
}

// One consumer warpgroup (cw = 0, 1: rows 64 cw .. 64 cw + 63 of each tile). Within a query
// tile: S of the diagonal tile alone, S of key tile it with P V of tile it - 1 for it = 1 ..
// n - 1, then P V of the last tile alone and the output. With CROSS_TILE the last P V of a
// query tile is issued with S of the next tile's diagonal instead (Q has two buffers, so the
// next tile's Q is loaded during this one), and the output stored once it completes. With
// HALF_DIAGONAL, warpgroup 0 computes only the first 64 keys of the diagonal tile (its rows are
// 0 .. 63 of the tile: the other 64 keys are above the diagonal for all of them), half of its
// S, exponentials and P V there (HALF: this warpgroup does so).
template <int HS, int STAGES, int QBUF, bool PINGPONG, bool HALF_DIAGONAL, bool HALF,
          bool CROSS_TILE>
__device__ void forward_consumer(const ForwardSmem<HS, STAGES, QBUF>& sm, bf16* __restrict__ out,
                                 float* __restrict__ lse, int T, int NH, float scale_log2,
                                 const TileSchedule& sched) {
    using Smem = ForwardSmem<HS, STAGES, QBUF>;
    ConsumerState<HS> c;
    const int wt = threadIdx.x % 128;
    c.cw = threadIdx.x / 128 - 1;
    c.lane = wt % 32;
    c.row_local = 64 * c.cw + 16 * (wt / 32) + c.lane / 4;  // this thread's first row in a tile
    // Every register of s, o and p is written by a wgmma or a conversion before it is read; the
    // zeros only give the first wgmma (which ignores them: scale-d 0) defined inputs.
#pragma unroll
    for (int e = 0; e < 64; e++) c.s[e] = 0.0f;
#pragma unroll
    for (int e = 0; e < HS / 2; e++) c.o[e] = 0.0f;
#pragma unroll
    for (int e = 0; e < 32; e++) c.p[e] = 0u;
    c.m[0] = c.m[1] = c.l[0] = c.l[1] = 0.0f;
    c.pv = PendingPv{0, 0, 0, false, false};
    if (PINGPONG && c.cw == 1) named_barrier_arrive(kTurnBarrier, kTurnThreads);  // 0 first
    // lse of the pending P V's query tile now, its output once O is complete.
    auto finish = [&](float(&inv)[2]) {
        finish_rows(lse, inv, c.m, c.l, c.pv.qb * kBM + c.row_local, T, c.pv.bh, c.lane);
    };
    auto store = [&](const float(&inv)[2]) {
        store_rows<HS>(out, c.o, inv, c.pv.qb * kBM + c.row_local, T, c.pv.bh, NH, c.lane);
    };
    auto drain = [&]() {
        if (HALF && c.pv.half) {
            step_pv<HS, Smem, PINGPONG, HALF>(c, sm);
        } else {
            step_pv<HS, Smem, PINGPONG, false>(c, sm);
        }
        float inv[2];
        finish(inv);
        store(inv);
    };
    bool pending = false;  // a P V is still to issue (across query tiles: CROSS_TILE)
    int kv = 0, tiles = 0;
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        const int qb = sched.n - 1 - t.rank, n = qb + 1;  // key tiles qb (the diagonal) .. 0
        const int qs = tiles % QBUF;
        mbar_wait_warp(sm.q_full(qs), (tiles / QBUF) & 1);
        // Where the last query tile had one key tile, its P V is half in warpgroup 0: drained
        // rather than carried (by both warpgroups, so that they take the same number of turns).
        if (CROSS_TILE && pending && HALF_DIAGONAL && c.pv.first) {
            drain();
            pending = false;
        }
        if (CROSS_TILE && pending) {
            float inv[2];  // of the previous tile, whose m and l the step replaces
            finish(inv);
            step_s_pv<HS, Smem, PINGPONG, true, HALF, false>(c, sm, kv, qs, n == 1, scale_log2);
            store(inv);
        } else {
            step_s<HS, Smem, PINGPONG, HALF>(c, sm, kv, qs, n == 1, scale_log2);
        }
        c.pv = PendingPv{kv, t.bh, qb, true, HALF};
        pending = true;
#pragma unroll 1
        for (int it = 1; it < n; it++) {
            if (HALF && it == 1) {
                step_s_pv<HS, Smem, PINGPONG, false, false, HALF>(c, sm, kv + it, qs, it == n - 1,
                                                                  scale_log2);
            } else {
                step_s_pv<HS, Smem, PINGPONG, false, false, false>(c, sm, kv + it, qs, it == n - 1,
                                                                   scale_log2);
            }
            c.pv = PendingPv{kv + it, t.bh, qb, false, false};
        }
        if (!CROSS_TILE) {
            drain();
            pending = false;
        }
        kv += n;
        tiles++;
    }
    if (pending) drain();
    // Warpgroup 1 arrived once more than warpgroup 0 waited (its first arrival): take it, so no
    // barrier is left mid-count.
    if (PINGPONG && c.cw == 0) named_barrier_sync(kTurnBarrier, kTurnThreads);
}

// ---- Three consumer warpgroups: 192-row query tiles (HS 64) -------------------------------------
//
// The same pipeline with 3 consumer warpgroups of 64 query rows (three consumer warps a
// scheduler instead of two, to hide more of the softmax's dependency chains) and 512 threads:
// the producer at 32 registers, the consumers at 160 (HS 64 only: O takes 32 of them). Query
// tiles of 192 rows do not line up with the 128-key tiles, so the tiles are placed from the top:
// tile qb holds rows row0 + 192 qb .. + 191 with row0 = T64 - 192 n (T64: T rounded up to 64,
// n tiles), and rows below 0 (at most 128, in tile 0) belong to no one. The 64 rows of each
// warpgroup, 64 a .. 64 a + 63, then lie inside one key tile, a / 2: its diagonal tile, the only
// one it masks. The producer loads key tiles kmax .. 0 for the whole tile (kmax: the diagonal of
// the top warpgroup); a warpgroup whose diagonal is kmax - 1 skips tile kmax, one with no rows
// skips them all (each skipped stage waited for and released, each skip a turn without wgmmas,
// so that every warpgroup takes kmax + 2 turns a tile and the turn ring stays in step).

constexpr int kConsumerWarps3 = 12;

// The producer's one thread: Q of the tile (the 64-row boxes of rows >= 0) into the one Q
// buffer, then K and V of key tiles kmax .. 0.
template <int HS, class Smem>
__device__ void forward3_producer(const CUtensorMap* q_map, const CUtensorMap* kv_map,
                                  const Smem& sm, int NH, int row0, const TileSchedule& sched) {
    static_assert(Smem::kQBuf == 1, "one Q buffer");
    prefetch_tensor_map(q_map);
    prefetch_tensor_map(kv_map);
    int kv = 0, tiles = 0;
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        const int b = t.bh / NH, h = t.bh % NH, r0 = row0 + kBM3 * (sched.n - 1 - t.rank);
        const int w0 = r0 < 0 ? -r0 / 64 : 0;  // the first warpgroup with rows
        mbar_wait(sm.q_empty(0), (tiles & 1) ^ 1);
        mbar_arrive_expect_tx(sm.q_full(0), (3 - w0) * 64 * HS * 2);
        for (int w = w0; w < 3; w++) {
#pragma unroll
            for (int cb = 0; cb < HS / 64; cb++) {
                tma_load_4d(sm.q(0) + (cb * kBM3 + 64 * w) * kRowBytes, q_map, sm.q_full(0),
                            cb * 64, h, r0 + 64 * w, b);
            }
        }
        load_kv_tiles<HS>(kv_map, sm, kv, (r0 + kBM3 - 64) / kBN, NH, h, b);
        tiles++;
    }
}

// A key tile this warpgroup has no rows for: its K and V stages waited for and released, and
// its turn taken without wgmmas.
template <class Smem, bool PINGPONG>
__device__ __forceinline__ void step_skip(int cw, int lane, const Smem& sm, int j) {
    const int st = j % Smem::kStages;
    const uint32_t phase = (j / Smem::kStages) & 1;
    mbar_wait_warp(sm.k_full(st), phase);
    release(sm.k_empty(st), lane);
    mbar_wait_warp(sm.v_full(st), phase);
    release(sm.v_empty(st), lane);
    turn_begin<PINGPONG, Smem::kGroups>(cw);
    turn_end<PINGPONG, Smem::kGroups>(cw);
}

// One of the three consumer warpgroups (cw = 0, 1, 2: rows 64 cw .. 64 cw + 63 of each tile).
template <int HS, class Smem, bool PINGPONG>
__device__ void forward3_consumer(const Smem& sm, bf16* __restrict__ out, float* __restrict__ lse,
                                  int T, int NH, int row0, const TileSchedule& sched) {
    // The scale as an immediate (one register fewer than a parameter): log2(e) / sqrt(64).
    constexpr float scale_log2 = kLog2e * 0.125f;
    static_assert(HS == 64, "the three-warpgroup kernel is for HS 64");
    ConsumerState<HS> c;
    const int wt = threadIdx.x % 128;
    c.cw = threadIdx.x / 128 - 1;
    c.lane = wt % 32;
    // This thread's first row in its warpgroup's 64 (recomputed where used: registers are short).
    auto row_in_group = [] { return 16 * ((threadIdx.x % 128) / 32) + (threadIdx.x % 32) / 4; };
#pragma unroll
    for (int e = 0; e < 64; e++) c.s[e] = 0.0f;
#pragma unroll
    for (int e = 0; e < HS / 2; e++) c.o[e] = 0.0f;
#pragma unroll
    for (int e = 0; e < 32; e++) c.p[e] = 0u;
    c.m[0] = c.m[1] = c.l[0] = c.l[1] = 0.0f;
    c.pv = PendingPv{0, 0, 0, false, false};
    if (PINGPONG && c.cw == 2) named_barrier_arrive(kTurnBarrier, kTurnThreads);  // 0 first
    int kv = 0, tiles = 0;
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        const int qb = sched.n - 1 - t.rank, r0 = row0 + kBM3 * qb;
        const int kmax = (r0 + kBM3 - 64) / kBN;
        const int a = r0 / 64 + c.cw;          // this warpgroup's rows: 64 a .. 64 a + 63
        const int n = a >= 0 ? a / 2 + 1 : 0;  // its key tiles: a / 2 (the diagonal) .. 0
        const int skip = kmax + 1 - n;
        mbar_wait_warp(sm.q_full(0), tiles & 1);
        if (n == 0) release(sm.q_empty(0), c.lane);
#pragma unroll 1
        for (int k = 0; k < skip; k++) step_skip<Smem, PINGPONG>(c.cw, c.lane, sm, kv + k);
        if (n > 0) {
            c.row_local = 64 * (a % 2) + row_in_group();  // the row within its diagonal key tile
            const int j0 = kv + skip;
            step_s<HS, Smem, PINGPONG, false>(c, sm, j0, 0, n == 1, scale_log2);
            c.pv = PendingPv{j0, t.bh, qb, true, false};
#pragma unroll 1
            for (int it = 1; it < n; it++) {
                step_s_pv<HS, Smem, PINGPONG, false, false, false>(c, sm, j0 + it, 0, it == n - 1,
                                                                   scale_log2);
                c.pv = PendingPv{j0 + it, t.bh, qb, false, false};
            }
            step_pv<HS, Smem, PINGPONG, false>(c, sm);
            float inv[2];
            const int row = 64 * a + row_in_group();
            finish_rows(lse, inv, c.m, c.l, row, T, t.bh, c.lane);
            store_rows<HS>(out, c.o, inv, row, T, t.bh, NH, c.lane);
        } else {
            turn_begin<PINGPONG, 3>(c.cw);  // the turn of the P V drain
            turn_end<PINGPONG, 3>(c.cw);
        }
        kv += kmax + 1;
        tiles++;
    }
    // Warpgroup 2 arrived once more than warpgroup 0 waited (its first arrival): take it.
    if (PINGPONG && c.cw == 0) named_barrier_sync(kTurnBarrier, kTurnThreads);
}
#endif  // LLMC_SM90A_DEVICE

// Grid: TileSchedule (one tile per CTA, or one CTA per SM over pairs); kThreads threads.
template <int HS, int STAGES, bool PINGPONG, bool HALF_DIAGONAL, bool CROSS_TILE>
__global__ void __launch_bounds__(LLMC_SM90_LAUNCH_BOUND, 1)
    flash_attention_sm90_forward_kernel(const __grid_constant__ CUtensorMap qkv_map,
                                        bf16* __restrict__ out,   // (B, T, C)
                                        float* __restrict__ lse,  // (B, NH, T)
                                        int T, int NH, float scale_log2, TileSchedule sched) {
#ifdef LLMC_SM90A_DEVICE
    constexpr int kQBuf = CROSS_TILE ? 2 : 1;
    extern __shared__ unsigned char smem_raw[];
    const ForwardSmem<HS, STAGES, kQBuf> sm{(smem_u32(smem_raw) + 1023u) & ~1023u};
    init_barriers(sm, kConsumerWarps);
    __syncthreads();
    if (threadIdx.x < 128) {
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) forward_producer<HS>(&qkv_map, sm, NH, sched);
        return;
    }
    setmaxnreg_inc<232>();
    if (HALF_DIAGONAL && threadIdx.x < 256) {  // warpgroup 0 of the consumers
        forward_consumer<HS, STAGES, kQBuf, PINGPONG, HALF_DIAGONAL, HALF_DIAGONAL, CROSS_TILE>(
            sm, out, lse, T, NH, scale_log2, sched);
    } else {
        forward_consumer<HS, STAGES, kQBuf, PINGPONG, HALF_DIAGONAL, false, CROSS_TILE>(
            sm, out, lse, T, NH, scale_log2, sched);
    }
#endif
}

// The launch bound of the three-warpgroup kernel (LLMC_SM90_LAUNCH_BOUND's rule).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LLMC_SM90_LAUNCH_BOUND3 32
#else
#define LLMC_SM90_LAUNCH_BOUND3 512
#endif

// Grid: TileSchedule over 192-row query tiles; kThreads3 threads; HS 64.
template <int STAGES, bool PINGPONG>
__global__ void __launch_bounds__(LLMC_SM90_LAUNCH_BOUND3, 1)
    flash_attention_sm90_forward3_kernel(const __grid_constant__ CUtensorMap q_map,   // 64 rows
                                         const __grid_constant__ CUtensorMap kv_map,  // 128 rows
                                         bf16* __restrict__ out,                      // (B, T, C)
                                         float* __restrict__ lse,                     // (B, NH, T)
                                         int T, int NH, int row0, TileSchedule sched) {
#ifdef LLMC_SM90A_DEVICE
    using Smem = ForwardSmem<64, STAGES, 1, kBM3>;
    extern __shared__ unsigned char smem_raw[];
    const Smem sm{(smem_u32(smem_raw) + 1023u) & ~1023u};
    init_barriers(sm, kConsumerWarps3);
    __syncthreads();
    if (threadIdx.x < 128) {
        setmaxnreg_dec<32>();
        if (threadIdx.x == 0) forward3_producer<64>(&q_map, &kv_map, sm, NH, row0, sched);
        return;
    }
    setmaxnreg_inc<160>();
    forward3_consumer<64, Smem, PINGPONG>(sm, out, lse, T, NH, row0, sched);
#endif
}

// ---- Host ---------------------------------------------------------------------------------------

// Variants: stages of the K/V ring (0: kDefaultStages of the head size), consumer turns, the
// half diagonal tile of warpgroup 0, S of the next query tile with the last P V of this one, the
// block order (-1: pairs where they balance, else one tile per CTA; see "Block order") and the
// consumer warpgroups. Variant 0 is the default, a choice between two others by the block
// order; the others stay compiled for dev/bench_attention --variants and are checked by
// dev/test_flash_attention. The "always pairs" ones run every kernel with several tiles per CTA
// on the test's small grids too (at B=64 T=1024 NH=12, -1 takes pairs as well).
struct ForwardVariant {
    int stages;
    bool pingpong, half_diagonal, cross_tile;
    int mode;
    int groups;  // consumer warpgroups: 2 (128-row tiles), 3 (192-row tiles; HS 64 only), or 0:
                 // the default's choice (forward_launch)
    const char* name;
};
// Ring stages by head size: at HS = 64 a stage is half the bytes and a third stage lets TMA run
// further ahead of the short key-tile iterations; at HS = 128 three stages leave no room for a
// second Q buffer and were slower.
template <int HS>
constexpr int kDefaultStages = HS == 64 ? 3 : 2;
// Carrying P V across query tiles needs a few registers more than the HS = 128 consumers have
// (its O and S take 96 of them): at HS = 128 the cross_tile variants run without it. (With
// ping-pong and the half diagonal as well it spills at HS = 64 too: no such variant.)
template <int HS>
constexpr bool kCrossTileHeadSize = HS == 64;
constexpr int kForwardVariants = 13;
// The default's choices (variant 0): at HS 64, where the 128-row tiles go in pairs, the next
// tile's S beside the last P V (the consumers do not wait for a query tile's last P V); where
// they go one per CTA (small grids), the three-warpgroup kernel. At HS 128, the older default.
constexpr int kDefaultPairs = 11, kDefaultTiles = 9, kDefaultHs128 = 12;
constexpr ForwardVariant kVariants[kForwardVariants] = {
    {0, true, false, true, -1, 0,
     "the default: at HS 64, 11 where pairs balance, else 9; at HS 128, 12"},
    {2, true, false, false, -1, 2, "128x128 tiles, 2 stages, ping-pong, pairs or tiles by balance"},
    {2, false, false, false, -1, 2, "128x128 tiles, 2 stages, no ping-pong, pairs or tiles"},
    {3, false, false, false, -1, 2, "128x128 tiles, 3 stages, no ping-pong, pairs or tiles"},
    {0, true, false, false, kPairs, 2, "as 12, always pairs"},
    {0, true, true, false, kPairs, 2, "as 12, half diagonal tile in warpgroup 0, always pairs"},
    {0, true, false, true, kPairs, 2,
     "as 12, next tile's S with the last P V (HS 64), always pairs"},
    {0, false, true, true, kPairs, 2,
     "as 12 without ping-pong, half diagonal and next tile's S (HS 64), always pairs"},
    {4, true, false, false, -1, 3,
     "192x128 tiles, 3 consumer warpgroups in turns, 4 stages (HS 64; else as 12)"},
    {4, false, false, false, -1, 3,
     "192x128 tiles, 3 consumer warpgroups, no turns, 4 stages (HS 64; else as 12)"},
    {4, true, false, false, kPairs, 3,
     "192x128 tiles, 3 consumer warpgroups in turns, 4 stages (HS 64; else as 12), always pairs"},
    {0, true, false, true, -1, 2,
     "as 12, next tile's S with the last P V (HS 64), pairs or tiles by balance"},
    {0, true, false, false, -1, 2,
     "128x128 tiles, 3 stages at HS 64 (2 at 128), ping-pong, pairs or tiles by balance (the "
     "default before 0's choice)"},
};

template <typename Kernel>
bool set_smem(Kernel kernel, size_t bytes) {
    LLMC_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return true;
}

// The three-warpgroup kernel of variant V (HS 64).
template <int V>
void forward3_launch(const Context& ctx, bf16* out, float* lse, const bf16* qkv, int B, int T,
                     int NH) {
    constexpr ForwardVariant v = kVariants[V];
    constexpr size_t smem = ForwardSmem<64, v.stages, 1, kBM3>::kDynamicBytes;
    auto* const kernel = flash_attention_sm90_forward3_kernel<v.stages, v.pingpong>;
    static const bool smem_set = set_smem(kernel, smem);  // once: no attribute calls in capture
    (void)smem_set;
    const CUtensorMap q_map = make_row_tensor_map(qkv, B, T, 3 * NH, 64, 64);
    const CUtensorMap kv_map = make_row_tensor_map(qkv, B, T, 3 * NH, 64, kBN);
    // Tiles from the top (see "Three consumer warpgroups"): row0 in (-192, 0], a multiple of 64.
    const int T64 = (T + 63) / 64 * 64, n = (T64 + kBM3 - 1) / kBM3, row0 = T64 - kBM3 * n;
    const TileSchedule sched = make_schedule(ctx, v.mode, B * NH, n);
    const long long grid = schedule_grid(ctx, sched);
    kernel<<<(unsigned)grid, kThreads3, smem, ctx.stream>>>(q_map, kv_map, out, lse, T, NH, row0,
                                                            sched);
    LLMC_CUDA_CHECK_LAST();
}

// The two-warpgroup kernel of variant V (for a three-warpgroup variant at HS 128: variant 12
// with its turns).
template <int HS, int V>
void forward2_launch(const Context& ctx, bf16* out, float* lse, const bf16* qkv, int B, int T,
                     int NH) {
    constexpr ForwardVariant v = kVariants[V];
    constexpr int kStages = v.stages > 0 && v.groups == 2 ? v.stages : kDefaultStages<HS>;
    constexpr bool kCross = v.cross_tile && kCrossTileHeadSize<HS>;
    constexpr size_t smem = ForwardSmem < HS, kStages, kCross ? 2 : 1 > ::kDynamicBytes;
    auto* const kernel =
        flash_attention_sm90_forward_kernel<HS, kStages, v.pingpong, v.half_diagonal, kCross>;
    static const bool smem_set = set_smem(kernel, smem);  // once: no attribute calls in capture
    (void)smem_set;
    const CUtensorMap map = make_row_tensor_map(qkv, B, T, 3 * NH, HS, kBM);
    const TileSchedule sched = make_schedule(ctx, v.mode, B * NH, (T + kBM - 1) / kBM);
    const long long grid = schedule_grid(ctx, sched);
    const float scale_log2 = kLog2e / sqrtf((float)HS);
    kernel<<<(unsigned)grid, kThreads, smem, ctx.stream>>>(map, out, lse, T, NH, scale_log2, sched);
    LLMC_CUDA_CHECK_LAST();
}

template <int HS, int V>
void forward_launch(const Context& ctx, bf16* out, float* lse, const bf16* qkv, int B, int T,
                    int NH) {
    if constexpr (kVariants[V].groups == 0) {  // the default's choice
        if constexpr (HS != 64) {
            forward2_launch<HS, kDefaultHs128>(ctx, out, lse, qkv, B, T, NH);
        } else if (make_schedule(ctx, -1, B * NH, (T + kBM - 1) / kBM).mode == kPairs) {
            forward2_launch<HS, kDefaultPairs>(ctx, out, lse, qkv, B, T, NH);
        } else {
            forward3_launch<kDefaultTiles>(ctx, out, lse, qkv, B, T, NH);
        }
    } else if constexpr (kVariants[V].groups == 3 && HS == 64) {
        forward3_launch<V>(ctx, out, lse, qkv, B, T, NH);
    } else {
        forward2_launch<HS, V>(ctx, out, lse, qkv, B, T, NH);
    }
}

// forward_launch of the run-time variant.
template <int HS, int V = 0>
void forward_variant(const Context& ctx, int variant, bf16* out, float* lse, const bf16* qkv, int B,
                     int T, int NH) {
    if (variant == V) {
        forward_launch<HS, V>(ctx, out, lse, qkv, B, T, NH);
    } else if constexpr (V + 1 < kForwardVariants) {
        forward_variant<HS, V + 1>(ctx, variant, out, lse, qkv, B, T, NH);
    }
}

// Whether the loaded image has the sm_90a kernels (see LLMC_SM90_LAUNCH_BOUND).
bool image_has_sm90a_kernels() {
    cudaFuncAttributes attr{};
    const cudaError_t err = cudaFuncGetAttributes(
        &attr, flash_attention_sm90_forward_kernel<64, 2, true, false, false>);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();  // no image for this device: not an error of the caller's
        return false;
    }
    return attr.maxThreadsPerBlock >= kThreads;
}

}  // namespace

CUtensorMap make_row_tensor_map(const void* base, int B, int T, int heads, int cols, int box_rows) {
    LLMC_CHECK(cols % 64 == 0 && reinterpret_cast<uintptr_t>(base) % 16 == 0,
               "make_row_tensor_map: cols (%d) must be a multiple of 64 and the base 16-byte "
               "aligned.",
               cols);
    static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found{};
        LLMC_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                         cudaEnableDefault, &found));
        LLMC_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
                   "the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12.0 or "
                   "newer is needed for the Hopper kernels).");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }();
    const cuuint64_t dims[4] = {(cuuint64_t)cols, (cuuint64_t)heads, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[3] = {(cuuint64_t)cols * 2, (cuuint64_t)heads * cols * 2,
                                   (cuuint64_t)T * heads * cols * 2};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)box_rows, 1};
    const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
    CUtensorMap map;
    const CUresult r =
        encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides,
               box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    LLMC_CHECK(r == CUDA_SUCCESS,
               "cuTensorMapEncodeTiled failed (error %d) for B=%d T=%d heads=%d cols=%d rows=%d.",
               (int)r, B, T, heads, cols, box_rows);
    return map;
}

bool flash_attention_sm90_available(const Context& ctx, int HS) {
    static const bool enabled = [] {
        const char* v = std::getenv("LLMC_FLASH_SM90");
        return v == nullptr || v[0] != '0';
    }();
    if (!enabled || (HS != 64 && HS != 128)) return false;
    if (ctx.props.major != 9 || ctx.props.minor != 0) return false;
    static const bool image = image_has_sm90a_kernels();
    return image;
}

int flash_attention_sm90_forward_variants() { return kForwardVariants; }

const char* flash_attention_sm90_forward_variant_name(int variant) {
    LLMC_CHECK(variant >= 0 && variant < kForwardVariants,
               "flash_attention_sm90_forward_variant_name: no variant %d.", variant);
    return kVariants[variant].name;
}

void flash_attention_sm90_forward(const Context& ctx, bf16* out, float* lse, const bf16* qkv, int B,
                                  int T, int NH, int HS, int variant) {
    NvtxRange range("flash_attention_sm90_forward");
    LLMC_CHECK(flash_attention_sm90_available(ctx, HS),
               "flash_attention_sm90_forward: the Hopper kernels cannot run here (HS=%d; they need "
               "HS 64 or 128, a compute capability 9.0 GPU, a build for sm_90a, and "
               "LLMC_FLASH_SM90 unset or 1).",
               HS);
    LLMC_CHECK(variant >= 0 && variant < kForwardVariants,
               "flash_attention_sm90_forward: no variant %d.", variant);
    if (HS == 64) {
        forward_variant<64>(ctx, variant, out, lse, qkv, B, T, NH);
    } else {
        forward_variant<128>(ctx, variant, out, lse, qkv, B, T, NH);
    }
}

}  // namespace llmc
