// flash_attention_sm90.cu: causal flash attention forward for Hopper (sm_90a) on wgmma with TMA
// loads and warp specialization (the design of FlashAttention-3, written from its paper and the
// PTX ISA; building blocks in sm90.cuh).
//
// Computes what flash_attention_forward does (flash_attention.cuh): out (B, T, C) bf16 =
// softmax(q k^T * scale) v and lse (B, NH, T) float = log sum_s exp(score_ts), overwritten;
// qkv (B, T, 3C) read in place through one TMA descriptor of (HS, 3NH, T, B), HS 64 or 128.
// A CTA of 3 warpgroups owns query tiles of kBM = 128 rows of one head (one tile, or a pair):
//   producer warpgroup (one issuing thread, 40 registers): Q of the tile, then K and V tiles of
//     kBN = 128 keys from the diagonal tile down to key 0, by TMA into a ring of STAGES stages;
//     each K and V stage has a "full" mbarrier (TMA transaction bytes) and an "empty" one (one
//     arrival per consumer warp once its wgmmas have read the stage), Q one of each.
//   two consumer warpgroups (232 registers), 64 query rows each: S = Q K^T by wgmma from shared
//     memory, online softmax in fp32 registers (exp2 with log2(e) folded into the scale, the
//     causal mask on the first tile only: it is the diagonal one), P rounded to bf16 in
//     registers, O += P V by wgmma with P as the register A operand and V transposed from shared
//     memory. A warpgroup issues S of key tile j together with P V of tile j - 1 and computes the
//     softmax of S while P V runs; with PINGPONG the two warpgroups take turns issuing (named
//     barriers), so that the softmax of one overlaps the GEMMs of the other.
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
// hardware balances the CTAs. FLOPs (causal, useful): 4 * B*NH*T*T*HS / 2; a diagonal tile computes
// all of its 128 x 128 scores (12.5% more than useful at T = 1024). Bytes: qkv read about once from
// DRAM, out written.
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
constexpr float kLog2e = 1.4426950408889634f;

// ---- Shared memory ------------------------------------------------------------------------------

// Offsets from the 1024-byte aligned base: Q, the K ring, the V ring, then the mbarriers.
template <int HS, int STAGES>
struct ForwardSmem {
    static constexpr uint32_t kQBytes = kBM * HS * 2;
    static constexpr uint32_t kKvBytes = kBN * HS * 2;
    static constexpr uint32_t kQ = 0;
    static constexpr uint32_t kK = kQ + kQBytes;
    static constexpr uint32_t kV = kK + STAGES * kKvBytes;
    static constexpr uint32_t kBars = kV + STAGES * kKvBytes;
    static constexpr int kNumBars = 2 + 4 * STAGES;
    // + 1024: the dynamic shared memory base is only guaranteed 16-byte alignment.
    static constexpr size_t kDynamicBytes = kBars + kNumBars * 8 + 1024;
    static_assert(kQBytes % 1024 == 0 && kKvBytes % 1024 == 0, "tiles keep 1024-byte alignment");

    uint32_t base;
    __device__ uint32_t q() const { return base + kQ; }
    __device__ uint32_t k(int s) const { return base + kK + s * kKvBytes; }
    __device__ uint32_t v(int s) const { return base + kV + s * kKvBytes; }
    __device__ uint32_t bar(int i) const { return base + kBars + 8 * i; }
    __device__ uint32_t q_full() const { return bar(0); }
    __device__ uint32_t q_empty() const { return bar(1); }
    __device__ uint32_t k_full(int s) const { return bar(2 + s); }
    __device__ uint32_t k_empty(int s) const { return bar(2 + STAGES + s); }
    __device__ uint32_t v_full(int s) const { return bar(2 + 2 * STAGES + s); }
    __device__ uint32_t v_empty(int s) const { return bar(2 + 3 * STAGES + s); }
};

#ifdef LLMC_SM90A_DEVICE
using namespace sm90;

constexpr float kLn2 = 0.6931471805599453f;
constexpr int kConsumerThreads = 256;
constexpr int kConsumerWarps = 8;
// Named barriers of the consumers' turns (0 is __syncthreads').
constexpr int kTurnBarrier = 1;

// 2^x for x <= 0 on the FMA and integer pipes instead of the SFU (whose 16 results per clock and
// SM match the tensor cores' rate at HS = 64, so moving some of the exponentials off it can pay):
// x = n + f with n = round(x) (the 1.5 * 2^23 trick), 2^f by a degree-4 polynomial on [-0.5, 0.5]
// (relative error 2.7e-6, fitted for this: far below the bf16 rounding of P), and n added to the
// exponent bits. x is clamped at -125 (2^-125 for anything smaller, where ex2.approx.ftz gives
// 0 below -126; such a p is negligible against l >= 1).
__device__ __forceinline__ float exp2_poly(float x) {
    constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
    x = fmaxf(x, -125.0f);
    const float t = x + kRound;  // n in the low mantissa bits of t
    const float f = x - (t - kRound);
    float p = 0.009560510516166687f;
    p = fmaf(p, f, 0.05591703951358795f);
    p = fmaf(p, f, 0.24024981260299683f);
    p = fmaf(p, f, 0.6931219696998596f);
    p = fmaf(p, f, 0.9999991655349731f);
    // t's mantissa holds 2^22 + n: shifted left by 23 only n << 23 remains (mod 2^32).
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

// The producer's one thread: for each tile of this CTA, Q, then K and V of key tiles qb .. 0.
template <int HS, int STAGES>
__device__ void forward_producer(const CUtensorMap* map, const ForwardSmem<HS, STAGES>& sm, int NH,
                                 const TileSchedule& sched) {
    using Smem = ForwardSmem<HS, STAGES>;
    prefetch_tensor_map(map);
    int kv = 0, tiles = 0;  // K/V tiles and query tiles loaded so far (ring position and phase)
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        const int b = t.bh / NH, h = t.bh % NH, qb = sched.n - 1 - t.rank;
        mbar_wait(sm.q_empty(), (tiles & 1) ^ 1);
        mbar_arrive_expect_tx(sm.q_full(), Smem::kQBytes);
        tma_load_tile<HS, kBM>(sm.q(), map, sm.q_full(), h, qb * kBM, b);
        for (int kb = qb; kb >= 0; kb--, kv++) {
            const int s = kv % STAGES;
            const uint32_t phase = ((kv / STAGES) & 1) ^ 1;
            mbar_wait(sm.k_empty(s), phase);
            mbar_arrive_expect_tx(sm.k_full(s), Smem::kKvBytes);
            tma_load_tile<HS, kBN>(sm.k(s), map, sm.k_full(s), NH + h, kb * kBN, b);
            mbar_wait(sm.v_empty(s), phase);
            mbar_arrive_expect_tx(sm.v_full(s), Smem::kKvBytes);
            tma_load_tile<HS, kBN>(sm.v(s), map, sm.v_full(s), 2 * NH + h, kb * kBN, b);
        }
        tiles++;
    }
}

// Online softmax of one score tile: this thread's 2 rows (i = 0, 1: fragment rows r and r + 8)
// x 32 keys. s -> p = exp2(s * scale_log2 - m_new) in place, m the running max (scaled, log2
// units), l the running partial row sums (this thread's columns), alpha = exp2(m_old - m_new).
// With MASK, keys after the row (local key index > row_local[i]) are masked. The first tile
// is the diagonal one and every row has key k0 <= row there, so m is finite from then on (and
// alpha = exp2(-inf) = 0 on the first tile, where O and l are still empty). With POLY > 0, the
// exponentials of every POLY-th 8-key chunk use exp2_poly (not with MASK: masked keys need 0).
template <bool MASK, int POLY>
__device__ __forceinline__ void softmax_tile(float (&s)[64], float (&m)[2], float (&l)[2],
                                             float (&alpha)[2], float scale_log2, int row_local,
                                             int lane) {
    if constexpr (MASK) {
#pragma unroll
        for (int e = 0; e < 64; e++) {
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
        for (int j = 0; j < 16; j++) {
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
        for (int j = 0; j < 16; j++) {
#pragma unroll
            for (int c = 0; c < 2; c++) {
                float& x = s[4 * j + 2 * i + c];
                const float arg = fmaf(x, scale_log2, -m_new);
                x = POLY > 0 && j % (POLY > 0 ? POLY : 1) == POLY - 1 ? exp2_poly(arg)
                                                                      : fast_exp2(arg);
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

// The turns of the two consumer warpgroups (PINGPONG): warpgroup cw waits for its barrier
// before issuing and then releases the other's.
template <bool PINGPONG>
__device__ __forceinline__ void turn_begin(int cw) {
    if constexpr (PINGPONG) named_barrier_sync(kTurnBarrier + cw, kConsumerThreads);
}
template <bool PINGPONG>
__device__ __forceinline__ void turn_end(int cw) {
    if constexpr (PINGPONG) named_barrier_arrive(kTurnBarrier + (1 - cw), kConsumerThreads);
}

// out rows and lse of this thread's 2 rows (row + 8 i), O / l rounded to bf16; rows >= T skipped.
template <int HS>
__device__ __forceinline__ void store_output(bf16* __restrict__ out, float* __restrict__ lse,
                                             const float (&o)[HS / 2], const float (&m)[2],
                                             float (&l)[2], int row, int T, int b, int h, int NH,
                                             int lane) {
    const int C = NH * HS;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
        const int r = row + 8 * i;
        if (r >= T) continue;
        const float inv = 1.0f / l[i];
        bf16* dst = out + ((long long)b * T + r) * C + h * HS + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < HS / 8; j++) {
            *reinterpret_cast<uint32_t*>(dst + 8 * j) =
                pack_bf16(o[4 * j + 2 * i] * inv, o[4 * j + 2 * i + 1] * inv);
        }
        if (lane % 4 == 0) lse[((long long)b * NH + h) * T + r] = (m[i] + log2f(l[i])) * kLn2;
    }
}

// One consumer warpgroup (cw = 0, 1: rows 64 cw .. 64 cw + 63 of each tile). Turns: S of the
// diagonal tile; then for it = 1 .. n - 1, S of key tile it with P V of tile it - 1; then P V of
// the last tile.
template <int HS, int STAGES, bool PINGPONG, int POLY>
__device__ void forward_consumer(const ForwardSmem<HS, STAGES>& sm, bf16* __restrict__ out,
                                 float* __restrict__ lse, int T, int NH, float scale_log2,
                                 const TileSchedule& sched) {
    const int cw = threadIdx.x / 128 - 1, wt = threadIdx.x % 128;
    const int warp = wt / 32, lane = wt % 32;
    const int row_local = 64 * cw + 16 * warp + lane / 4;  // this thread's first row in a tile
    if (PINGPONG && cw == 1) named_barrier_arrive(kTurnBarrier, kConsumerThreads);  // 0 first
    // Every register of s, o and p is written by a wgmma or a conversion before it is read; the
    // zeros only give the first wgmma (which ignores them: scale-d 0) defined inputs.
    float s[64] = {}, o[HS / 2] = {}, m[2], l[2], alpha[2];
    uint32_t p[32] = {};
    int kv = 0, tiles = 0;
    for (int i = 0;; i++) {
        const Tile t = schedule_tile(sched, i);
        if (t.done) break;
        if (!t.valid) continue;
        const int qb = sched.n - 1 - t.rank, n = qb + 1;  // key tiles qb (the diagonal) .. 0
        mbar_wait_warp(sm.q_full(), tiles & 1);
        {
            const int st = kv % STAGES;
            mbar_wait_warp(sm.k_full(st), (kv / STAGES) & 1);
            turn_begin<PINGPONG>(cw);
            fence_operands(s);
            wgmma_fence();
            gemm_ss_kmajor<kBN, HS / 16>(s, sm.q(), kBM, 64 * cw, sm.k(st), kBN, false);
            wgmma_commit();
            turn_end<PINGPONG>(cw);
            wgmma_wait<0>();
            fence_operands(s);
            release(sm.k_empty(st), lane);
            if (n == 1) release(sm.q_empty(), lane);
            m[0] = m[1] = -INFINITY;
            l[0] = l[1] = 0.0f;
            softmax_tile<true, 0>(s, m, l, alpha, scale_log2, row_local, lane);
            accumulator_to_a(p, s);
        }
        for (int it = 1; it < n; it++) {
            const int j = kv + it, st = j % STAGES, prev = (j - 1) % STAGES;
            // V of tile it - 1 was loaded before K of tile it: waiting for both first costs
            // nothing and keeps the issue below free of branches.
            mbar_wait_warp(sm.v_full(prev), ((j - 1) / STAGES) & 1);
            mbar_wait_warp(sm.k_full(st), (j / STAGES) & 1);
            turn_begin<PINGPONG>(cw);
            fence_operands(s);
            fence_operands(o);
            fence_operands(p);
            wgmma_fence();
            gemm_ss_kmajor<kBN, HS / 16>(s, sm.q(), kBM, 64 * cw, sm.k(st), kBN, false);
            wgmma_commit();
            gemm_rs_mnmajor<HS, kBN / 16>(o, p, sm.v(prev), kBN, it > 1);
            wgmma_commit();
            turn_end<PINGPONG>(cw);
            wgmma_wait<1>();  // S done, P V may still run
            fence_operands(s);
            release(sm.k_empty(st), lane);
            if (it == n - 1) release(sm.q_empty(), lane);
            softmax_tile<false, POLY>(s, m, l, alpha, scale_log2, row_local, lane);
            wgmma_wait<0>();
            fence_operands(o);
            fence_operands(p);
            release(sm.v_empty(prev), lane);
            rescale<HS>(o, alpha);
            accumulator_to_a(p, s);
        }
        {
            const int j = kv + n - 1, st = j % STAGES;
            mbar_wait_warp(sm.v_full(st), (j / STAGES) & 1);
            turn_begin<PINGPONG>(cw);
            fence_operands(o);
            fence_operands(p);
            wgmma_fence();
            gemm_rs_mnmajor<HS, kBN / 16>(o, p, sm.v(st), kBN, n > 1);
            wgmma_commit();
            turn_end<PINGPONG>(cw);
            wgmma_wait<0>();
            fence_operands(o);
            release(sm.v_empty(st), lane);
        }
        store_output<HS>(out, lse, o, m, l, qb * kBM + row_local, T, t.bh / NH, t.bh % NH, NH,
                         lane);
        kv += n;
        tiles++;
    }
    // Warpgroup 1 arrived once more than warpgroup 0 waited (its first arrival): take it, so no
    // barrier is left mid-count.
    if (PINGPONG && cw == 0) named_barrier_sync(kTurnBarrier, kConsumerThreads);
}
#endif  // LLMC_SM90A_DEVICE

// Grid: TileSchedule (one tile per CTA, or one CTA per SM over pairs); kThreads threads.
template <int HS, int STAGES, bool PINGPONG, int POLY>
__global__ void __launch_bounds__(LLMC_SM90_LAUNCH_BOUND, 1)
    flash_attention_sm90_forward_kernel(const __grid_constant__ CUtensorMap qkv_map,
                                        bf16* __restrict__ out,   // (B, T, C)
                                        float* __restrict__ lse,  // (B, NH, T)
                                        int T, int NH, float scale_log2, TileSchedule sched) {
#ifdef LLMC_SM90A_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const ForwardSmem<HS, STAGES> sm{(smem_u32(smem_raw) + 1023u) & ~1023u};
    if (threadIdx.x == 0) {
        mbar_init(sm.q_full(), 1);
        mbar_init(sm.q_empty(), kConsumerWarps);
        for (int s = 0; s < STAGES; s++) {
            mbar_init(sm.k_full(s), 1);
            mbar_init(sm.k_empty(s), kConsumerWarps);
            mbar_init(sm.v_full(s), 1);
            mbar_init(sm.v_empty(s), kConsumerWarps);
        }
        fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x < 128) {
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) forward_producer<HS, STAGES>(&qkv_map, sm, NH, sched);
        return;
    }
    setmaxnreg_inc<232>();
    forward_consumer<HS, STAGES, PINGPONG, POLY>(sm, out, lse, T, NH, scale_log2, sched);
#endif
}

// ---- Host ---------------------------------------------------------------------------------------

// Variants: stages of the K/V ring, consumer turns, block order (-1: pairs where they balance,
// else one tile per CTA; see "Block order"), exponentials on the FMA pipe (every poly-th chunk;
// 0: none). Variant 0 is the default; the others stay compiled for dev/bench/bench_attention
// --variants and are checked by dev/test/test_flash_attention.
struct ForwardVariant {
    int stages;
    bool pingpong;
    int mode;
    int poly;
    const char* name;
};
constexpr int kForwardVariants = 6;
constexpr ForwardVariant kVariants[kForwardVariants] = {
    {2, true, -1, 0, "128x128 tiles, 2 stages, ping-pong, pairs or tiles by balance"},
    {2, true, kOneTileAlong, 0, "128x128, 2 stages, ping-pong, one tile per CTA, heads apart"},
    {2, false, -1, 0, "128x128 tiles, 2 stages, no ping-pong, pairs or tiles by balance"},
    {3, true, -1, 0, "128x128 tiles, 3 stages, ping-pong, pairs or tiles by balance"},
    {2, true, kPairs, 0, "128x128 tiles, 2 stages, ping-pong, always pairs"},
    {2, true, -1, 4, "as 0, 1 in 4 exponentials on the FMA pipe"},
};

template <typename Kernel>
bool set_smem(Kernel kernel, size_t bytes) {
    LLMC_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return true;
}

template <int HS, int STAGES, bool PINGPONG, int POLY>
void forward_launch(const Context& ctx, bf16* out, float* lse, const bf16* qkv, int B, int T,
                    int NH, int mode) {
    constexpr size_t smem = ForwardSmem<HS, STAGES>::kDynamicBytes;
    auto* const kernel = flash_attention_sm90_forward_kernel<HS, STAGES, PINGPONG, POLY>;
    static const bool smem_set = set_smem(kernel, smem);  // once: no attribute calls in capture
    (void)smem_set;
    const CUtensorMap map = make_row_tensor_map(qkv, B, T, 3 * NH, HS, kBM);
    const TileSchedule sched = make_schedule(ctx, mode, B * NH, (T + kBM - 1) / kBM);
    const long long grid = schedule_grid(ctx, sched);
    const float scale_log2 = kLog2e / sqrtf((float)HS);
    kernel<<<(unsigned)grid, kThreads, smem, ctx.stream>>>(map, out, lse, T, NH, scale_log2, sched);
    LLMC_CUDA_CHECK_LAST();
}

// Whether the loaded image has the sm_90a kernels (see LLMC_SM90_LAUNCH_BOUND).
bool image_has_sm90a_kernels() {
    cudaFuncAttributes attr{};
    const cudaError_t err =
        cudaFuncGetAttributes(&attr, flash_attention_sm90_forward_kernel<64, 2, true, 0>);
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
    const ForwardVariant v = kVariants[variant];
    auto launch = [&](auto hs) {
        constexpr int kHS = decltype(hs)::value;
        if (v.stages == 3) {
            forward_launch<kHS, 3, true, 0>(ctx, out, lse, qkv, B, T, NH, v.mode);
        } else if (v.poly == 4) {
            forward_launch<kHS, 2, true, 4>(ctx, out, lse, qkv, B, T, NH, v.mode);
        } else if (v.pingpong) {
            forward_launch<kHS, 2, true, 0>(ctx, out, lse, qkv, B, T, NH, v.mode);
        } else {
            forward_launch<kHS, 2, false, 0>(ctx, out, lse, qkv, B, T, NH, v.mode);
        }
    };
    if (HS == 64) {
        launch(std::integral_constant<int, 64>{});
    } else {
        launch(std::integral_constant<int, 128>{});
    }
}

}  // namespace llmc
