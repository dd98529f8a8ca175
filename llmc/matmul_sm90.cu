// matmul_sm90.cu: the GELU GEMMs of matmul_sm90.cuh on wgmma with TMA loads (building blocks in
// sm90.cuh; written from the PTX ISA and the CUDA programming guide).
//
// One kernel, three modes (forward, DGELU backward, and the attention projection's backward with
// the flash backward's row statistics: kForward, kDgelu, kRowStats). A CTA (one per SM, persistent)
// takes output tiles of kTile x kTile from a global counter (tile t: m tile t / n_tiles, n tile t %
// n_tiles, so the CTAs in flight share the weight through L2) until they run out: a CTA that starts
// late, behind a kernel on the graph branch that holds some SMs, takes fewer tiles instead of
// finishing last. The counter resets itself (the last CTA to run out zeroes it), one per mode: a
// mode's launches run one at a time (ctx.stream). Which CTA computes a tile changes nothing in its
// bits. Its 512 threads:
//   producer warpgroup (one issuing thread, 24 registers): takes the tiles (the next one's
//     index fetched while this one's loads go out) and hands their indices to the consumers
//     through a ring of kIdSlots shared slots (an mbarrier each); for each tile, the
//     k-blocks of 64 of the A operand (128 rows of inp or dout, K-major) and of the weight tile
//     (forward: 128 rows of weight, K-major; backward: 64 k-rows x 128 columns of weight,
//     MN-major, the wgmma transpose bit set) into a ring of kStages stages, each with a "full"
//     mbarrier (TMA bytes) and an "empty" one (the four warps of the consumer reading it);
//     backward, after a tile's k-blocks, that tile's 128 x 128 block of pre (kRowStats: of the
//     attention output) into its consumer's staging buffer (its own full / free pair), so that
//     it is there when the epilogue starts.
//   three consumer warpgroups (160 registers), consumer c taking the CTA's tiles c, c + 3, ...:
//     the main loop (two m64n128k16 accumulators, rows 0-63 and 64-127 of the tile, 128
//     registers), the consumers' main loops one after the other in tile order (a named barrier
//     each), so that a consumer's epilogue runs beside the next two tiles' main loops. Epilogue
//     through the consumer's staging buffer (32 KiB, the 128-byte swizzled layout of sm90.cuh:
//     conflict-free both in the accumulator layout and in 16-byte row chunks):
//       forward: pre = acc + bias rounded to bf16 into the buffer; then by 16-byte chunks, pre
//         and gelu_tanh(pre) to global memory.
//       backward: dinp = acc * gelu_tanh_grad(pre) rounded to bf16, in place over pre in the
//         buffer; then by 16-byte chunks to global memory, each thread summing its chunk's 8
//         columns over its 16 rows; those sums are added across the warpgroup in a fixed order
//         (through the staging buffer, once read) into the tile's row of bias_partial (matmul.cu
//         adds the rows up).
//       kRowStats: dinp = acc rounded to bf16, in place over the attention output in the buffer,
//         and D = dinp . out per row and head: in the accumulator pass each thread sums its
//         16 products of a (row, head) (column order), then the four threads of a row add theirs
//         by two shuffles (xor 1, then 2); lse2 = lse * log2(e) beside it. Then dinp by 16-byte
//         chunks to global memory.
#include <algorithm>
#include <cstdint>

#include "device_utils.cuh"
#include "gelu.cuh"
#include "launch.cuh"
#include "matmul_sm90.cuh"
#include "sm90.cuh"
#include "util.h"

namespace llmc {

// The tile counters (and the count of CTAs that ran out), one pair per mode; zero at load.
// Outside the anonymous namespace: builds without the sm_90a kernel never reference them.
__device__ int g_gelu_gemm_tile_next[3], g_gelu_gemm_tile_done[3];

namespace {

typedef __nv_bfloat16 bf16;

constexpr int kForward = 0, kDgelu = 1, kRowStats = 2;
// kRowStats: a 128-column tile holds whole heads of this many channels.
constexpr int kStatsHeadSize = 64;

// Three consumer warpgroups take the CTA's tiles in turn: at K = 768 a tile's epilogue (16K
// elements through one warpgroup) takes longer than its main loop, so with two consumers the
// tensor cores waited for it; with three it has two main loops to hide behind.
constexpr int kConsumers = 3;
constexpr int kTile = 128, kBK = 64, kStages = 4, kThreads = 128 * (1 + kConsumers);
// Registers a thread: the producer's warpgroup gives back what the consumers take (65536 an SM).
constexpr int kProducerRegs = 24, kConsumerRegs = 160;
static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536,
              "setmaxnreg budget over the register file");
constexpr uint32_t kOperandBytes = kTile * kBK * 2;    // one A or weight stage (16 KiB)
constexpr uint32_t kStagingBytes = kTile * kTile * 2;  // a 128 x 128 bf16 tile (32 KiB)
constexpr int kConsumerWarps = 4;
// Tile-index slots: the producer writes tile j's while it still holds stage loads of tile j - 1
// back, i.e. after tile j - 6's loads were consumed (4 stages, at least one k-block a tile), so
// the consumer of tile j - 8 has long read its slot. At the end it also writes those of j + 1
// and j + 2 (the slots of tiles j - 7 and j - 6, read before tile j - 6's main loop ran).
constexpr int kIdSlots = 8;
// The backward's column sums of a tile (kConsumerWarps x kTile floats) go into the consumer's
// staging buffer once its chunk pass has read it.
constexpr uint32_t kColSumBytes = kConsumerWarps * kTile * 4;
static_assert(kColSumBytes <= kStagingBytes, "column sums fit in the staging buffer");
constexpr size_t kSmem = 2 * kStages * kOperandBytes + kConsumers * kStagingBytes +
                         (2 * kStages + 2 * kConsumers + kIdSlots) * 8 + kIdSlots * 4 + 1024;
static_assert(kSmem <= 227 * 1024, "over sm_90's shared memory per block");

template <int MODE>
__global__ void __launch_bounds__(kThreads, 1)
    gelu_gemm_kernel(const __grid_constant__ CUtensorMap a_map,
                     const __grid_constant__ CUtensorMap w_map,
                     const __grid_constant__ CUtensorMap pre_map, const bf16* __restrict__ bias,
                     bf16* __restrict__ out, bf16* __restrict__ pre,
                     float* __restrict__ bias_partial, const RowStatsTarget stats, int M, int N,
                     int K) {
#ifdef LLMC_SM90A_DEVICE
    using namespace sm90;
    constexpr bool BACKWARD = MODE != kForward;
    // Named barriers: 1 + c orders consumer c's main loop after the previous tile's,
    // 1 + kConsumers + c is consumer c's own (0 is __syncthreads').
    constexpr int kOrderBar = 1, kOwnBar = 1 + kConsumers;
    static_assert(kOwnBar + kConsumers <= 16, "16 named barriers");
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    auto a_tile = [&](int s) { return base + s * kOperandBytes; };
    auto w_tile = [&](int s) { return base + (kStages + s) * kOperandBytes; };
    const uint32_t staging0 = base + 2 * kStages * kOperandBytes;
    const uint32_t bars = staging0 + kConsumers * kStagingBytes;
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (kStages + s); };
    auto pre_full = [&](int c) { return bars + 8 * (2 * kStages + c); };
    auto pre_free = [&](int c) { return bars + 8 * (2 * kStages + kConsumers + c); };
    auto id_full = [&](int j) { return bars + 8 * (2 * kStages + 2 * kConsumers + j % kIdSlots); };
    volatile int* const ids = reinterpret_cast<volatile int*>(
        smem_raw + (bars - raw) + 8 * (2 * kStages + 2 * kConsumers + kIdSlots));
    const int n_tiles = N / kTile, tiles = ((M + kTile - 1) / kTile) * n_tiles;
    const int kblocks = K / kBK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; s++) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), kConsumerWarps);
        }
        for (int c = 0; c < kConsumers; c++) {
            mbar_init(pre_full(c), 1);
            mbar_init(pre_free(c), 1);
        }
        for (int j = 0; j < kIdSlots; j++) mbar_init(id_full(j), 1);
        fence_barrier_init();
    }
    __syncthreads();
    // Launched without PDL (launch()); the wait only matters if that changes. No early trigger
    // of the next kernel either: its CTAs could not share an SM with ours anyway.
    pdl_wait();
    if (threadIdx.x < 128) {
        setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x == 0) {
            prefetch_tensor_map(&a_map);
            prefetch_tensor_map(&w_map);
            if (BACKWARD) prefetch_tensor_map(&pre_map);
            int next = atomicAdd(&g_gelu_gemm_tile_next[MODE], 1);
            for (int j = 0;; j++) {
                const int t = next;
                ids[j % kIdSlots] = t;
                mbar_arrive(id_full(j));  // release: the slot's write is seen after the wait
                if (t >= tiles) {         // ran out: the other consumers' ends too, then the reset
                    for (int c = 1; c < kConsumers; c++) {
                        ids[(j + c) % kIdSlots] = t;
                        mbar_arrive(id_full(j + c));
                    }
                    if (atomicAdd(&g_gelu_gemm_tile_done[MODE], 1) == (int)gridDim.x - 1) {
                        g_gelu_gemm_tile_next[MODE] = 0;  // every CTA has taken its last index
                        g_gelu_gemm_tile_done[MODE] = 0;
                    }
                    break;
                }
                next = atomicAdd(&g_gelu_gemm_tile_next[MODE], 1);
                const int m0 = (t / n_tiles) * kTile, n0 = (t % n_tiles) * kTile;
                for (int kb = 0; kb < kblocks; kb++) {
                    const int g = j * kblocks + kb, s = g % kStages;
                    mbar_wait(empty(s), ((g / kStages) & 1) ^ 1);
                    mbar_arrive_expect_tx(full(s), 2 * kOperandBytes);
                    tma_load_4d(a_tile(s), &a_map, full(s), kb * kBK, 0, m0, 0);
                    if (BACKWARD) {  // two 64-column blocks of k-rows [kb * 64, kb * 64 + 64)
                        tma_load_4d(w_tile(s), &w_map, full(s), n0, 0, kb * kBK, 0);
                        tma_load_4d(w_tile(s) + kBK * kRowBytes, &w_map, full(s), n0 + 64, 0,
                                    kb * kBK, 0);
                    } else {
                        tma_load_4d(w_tile(s), &w_map, full(s), kb * kBK, 0, n0, 0);
                    }
                }
                if (BACKWARD) {  // this tile's pre, into its consumer's staging buffer
                    const int c = j % kConsumers, use = j / kConsumers;
                    mbar_wait(pre_free(c), (use & 1) ^ 1);
                    mbar_arrive_expect_tx(pre_full(c), kStagingBytes);
                    const uint32_t dst = staging0 + c * kStagingBytes;
                    tma_load_4d(dst, &pre_map, pre_full(c), n0, 0, m0, 0);
                    tma_load_4d(dst + kTile * kRowBytes, &pre_map, pre_full(c), n0 + 64, 0, m0, 0);
                }
            }
        }
        return;
    }
    setmaxnreg_inc<kConsumerRegs>();
    // The consumer index through a shuffle, so that the compiler knows it is warp-uniform and
    // keeps the main loop's bookkeeping (tile, stage, descriptors) in uniform registers.
    const int cw = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0) - 1;
    const int wt = threadIdx.x % 128, lane = wt % 32, warp = wt / 32;
    const uint32_t staging = staging0 + cw * kStagingBytes;
    unsigned char* const staging_ptr = smem_raw + (staging - raw);
    float* const colsum = reinterpret_cast<float*>(staging_ptr);
    // Operand descriptors of stage 0, k-slice 0; stage s, k-slice ks adds its byte offset / 16
    // (the address field is linear: shared memory stays below its 256 KiB limit).
    const uint64_t a_desc0 = kmajor_desc(a_tile(0), kTile, 0, 0);
    const uint64_t a_desc1 = kmajor_desc(a_tile(0), kTile, 64, 0);
    const uint64_t w_desc =
        BACKWARD ? mnmajor_desc(w_tile(0), kBK, 0) : kmajor_desc(w_tile(0), kTile, 0, 0);
    constexpr uint32_t kStageStep = kOperandBytes / 16;
    constexpr uint32_t kWSliceStep = (BACKWARD ? 16 * kRowBytes : 32) / 16;  // one k-slice of W
    for (int j = cw;; j += kConsumers) {
        mbar_wait(id_full(j), (j / kIdSlots) & 1);
        const int t = ids[j % kIdSlots];
        if (t >= tiles) break;
        const int m0 = (t / n_tiles) * kTile, n0 = (t % n_tiles) * kTile;
        if (j > 0) named_barrier_sync(kOrderBar + cw, 256);  // tile j - 1's main loop done
        float acc0[64], acc1[64];
#pragma unroll
        for (int e = 0; e < 64; e++) acc0[e] = acc1[e] = 0.0f;
        // Stage and phase of this tile's first k-block (k-block g of the CTA: stage g % kStages,
        // phase (g / kStages) & 1), then stepped along.
        const uint32_t g0 = (uint32_t)j * (uint32_t)kblocks;
        uint32_t s = g0 % kStages, phase = (g0 / kStages) & 1, prev = 0;
        for (int kb = 0; kb < kblocks; kb++) {
            mbar_wait_warp(full(s), phase);
            fence_operands(acc0);
            fence_operands(acc1);
            wgmma_fence();
            const uint32_t at = s * kStageStep;
#pragma unroll
            for (int ks = 0; ks < kBK / 16; ks++) {
                const uint64_t b = w_desc + at + ks * kWSliceStep;
                wgmma_ss<128, 0, BACKWARD ? 1 : 0>(acc0, a_desc0 + at + 2 * ks, b,
                                                   kb > 0 || ks > 0);
                wgmma_ss<128, 0, BACKWARD ? 1 : 0>(acc1, a_desc1 + at + 2 * ks, b,
                                                   kb > 0 || ks > 0);
            }
            wgmma_commit();
            wgmma_wait<1>();
            if (kb > 0 && lane == 0) mbar_arrive(empty(prev));
            prev = s;
            if (++s == kStages) s = 0, phase ^= 1;
        }
        wgmma_wait<0>();
        fence_operands(acc0);
        fence_operands(acc1);
        if (lane == 0) mbar_arrive(empty(prev));
        // The next consumer may start its main loop of tile j + 1, if there is one.
        mbar_wait(id_full(j + 1), ((j + 1) / kIdSlots) & 1);
        if (ids[(j + 1) % kIdSlots] < tiles)
            named_barrier_arrive(kOrderBar + (cw + 1) % kConsumers, 256);
        // Accumulator pass: element e of accumulator h is (row, col) of the tile as below.
        if (BACKWARD) {
            mbar_wait(pre_full(cw), (j / kConsumers) & 1);
        } else {
            named_barrier_sync(kOwnBar + cw, 128);  // the previous tile's chunk pass is done
        }
        // kRowStats: this thread's partial D of (accumulator h, fragment row i, head of the tile).
        float dsum[2][2][kTile / kStatsHeadSize] = {};
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float* acc = h == 0 ? acc0 : acc1;
#pragma unroll
            for (int e = 0; e < 64; e += 2) {
                const int row = 64 * h + frag_row(wt, e), col = frag_col(wt, e);
                uint32_t* at =
                    reinterpret_cast<uint32_t*>(staging_ptr + swizzled_offset(kTile, row, col));
                float x, y;
                if (MODE == kRowStats) {
                    const uint32_t d = pack_bf16(acc[e], acc[e + 1]);
                    const float2 o = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(at));
                    const float2 df =
                        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&d));
                    dsum[h][(e / 2) % 2][col / kStatsHeadSize] += df.x * o.x + df.y * o.y;
                    *at = d;
                    continue;
                }
                if (BACKWARD) {
                    const float2 p = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(at));
                    x = acc[e] * gelu_tanh_grad(p.x), y = acc[e + 1] * gelu_tanh_grad(p.y);
                } else {
                    const float2 b = __bfloat1622float2(
                        *reinterpret_cast<const __nv_bfloat162*>(bias + n0 + col));
                    x = acc[e] + b.x, y = acc[e + 1] + b.y;
                }
                *at = pack_bf16(x, y);
            }
        }
        if (MODE == kRowStats) {
            // The four threads of a row (lanes 4 r .. 4 r + 3) add their sums; the first writes.
#pragma unroll
            for (int h = 0; h < 2; h++) {
#pragma unroll
                for (int i = 0; i < 2; i++) {
#pragma unroll
                    for (int hd = 0; hd < kTile / kStatsHeadSize; hd++) {
                        float& sum = dsum[h][i][hd];
                        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                        const int row = m0 + 64 * h + frag_row(wt, 2 * i);
                        if (lane % 4 == 0 && row < M) {
                            const int b = row / stats.T, t = row % stats.T;
                            const long long bh =
                                (long long)b * stats.NH + (n0 / kStatsHeadSize + hd);
                            stats.d[bh * stats.T + t] = sum;
                            stats.lse2[bh * stats.T + t] = stats.lse[bh * stats.T + t] * kLog2e;
                        }
                    }
                }
            }
        }
        named_barrier_sync(kOwnBar + cw, 128);  // the whole tile is in the buffer
        // Chunk pass: thread wt takes chunk wt % 16 (columns 8 (wt % 16) ..) of rows
        // 8 i + wt / 16; a warp's 8 consecutive threads read one row's 128 bytes.
        const int chunk = wt % 16;
        float sums[8];
#pragma unroll
        for (int k = 0; k < 8; k++) sums[k] = 0.0f;
#pragma unroll 4
        for (int i = 0; i < kTile / 8; i++) {
            const int row = 8 * i + wt / 16;
            const uint4 v = *reinterpret_cast<const uint4*>(staging_ptr +
                                                            swizzled_offset(kTile, row, 8 * chunk));
            if (m0 + row >= M) continue;
            const size_t at = (size_t)(m0 + row) * N + n0 + 8 * chunk;
            if (MODE == kRowStats) {
                *reinterpret_cast<uint4*>(out + at) = v;
            } else if (BACKWARD) {
                *reinterpret_cast<uint4*>(out + at) = v;
                const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const float2 f =
                        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[q]));
                    sums[2 * q] += f.x, sums[2 * q + 1] += f.y;
                }
            } else {
                *reinterpret_cast<uint4*>(pre + at) = v;
                *reinterpret_cast<uint4*>(out + at) = gelu_chunk_bf16(v);
            }
        }
        if (MODE == kRowStats) {
            named_barrier_sync(kOwnBar + cw, 128);  // the buffer is read: free for the next tile
            if (wt == 0) mbar_arrive(pre_free(cw));
        } else if (BACKWARD) {
            // Lane l and l + 16 hold the same columns (rows of wt / 16 even and odd): add, then
            // the four warps' sums in warp order.
#pragma unroll
            for (int k = 0; k < 8; k++) sums[k] += __shfl_xor_sync(0xffffffffu, sums[k], 16);
            named_barrier_sync(kOwnBar + cw, 128);  // the buffer is read: column sums into it
            if (lane < 16) {
#pragma unroll
                for (int k = 0; k < 8; k++) colsum[warp * kTile + 8 * chunk + k] = sums[k];
            }
            named_barrier_sync(kOwnBar + cw, 128);  // column sums written
            float total = 0.0f;
#pragma unroll
            for (int w = 0; w < kConsumerWarps; w++) total += colsum[w * kTile + wt];
            named_barrier_sync(kOwnBar + cw, 128);  // column sums read: the buffer is free
            if (wt == 0) mbar_arrive(pre_free(cw));
            bias_partial[(size_t)(m0 / kTile) * N + n0 + wt] = total;
        }
    }
#endif
}

template <int MODE>
void launch(const Context& ctx, const CUtensorMap& a_map, const CUtensorMap& w_map,
            const CUtensorMap& pre_map, const floatX* bias, floatX* out, floatX* pre,
            float* bias_partial, const RowStatsTarget& stats, int M, int N, int K) {
    static const bool set = [] {
        LLMC_CUDA_CHECK(cudaFuncSetAttribute(
            gelu_gemm_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmem));
        return true;
    }();
    (void)set;
    const int tiles = ((M + kTile - 1) / kTile) * (N / kTile);
    const int grid = std::min(tiles, ctx_num_sms(ctx));
    // Never a PDL launch (whatever ctx.pdl says): launched early behind its predecessor it ran
    // 10% slower at d12 B=64 (bench_gelu_gemm, H100: 659 against 600 us for the fc forward).
    gelu_gemm_kernel<MODE><<<grid, kThreads, kSmem, ctx.stream>>>(
        a_map, w_map, pre_map, reinterpret_cast<const bf16*>(bias), reinterpret_cast<bf16*>(out),
        reinterpret_cast<bf16*>(pre), bias_partial, stats, M, N, K);
    LLMC_CUDA_CHECK_LAST();
}

}  // namespace

namespace {

// Whether the kernel runs here (device, build, image) on this shape, whatever the switches say.
bool kernel_applies(const Context& ctx, int N, int out_cols, int reduce_cols,
                    std::initializer_list<const void*> pointers) {
#if defined(ENABLE_BF16)
    if (ctx.props.major != 9 || ctx.props.minor != 0) return false;
    if (N <= 0 || out_cols % kTile != 0 || reduce_cols % kBK != 0 || reduce_cols <= 0) return false;
    for (const void* p : pointers) {
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
    }
    static const bool image = has_sm90a_image(gelu_gemm_kernel<kDgelu>);
    return image;
#else
    (void)ctx, (void)N, (void)out_cols, (void)reduce_cols, (void)pointers;
    return false;  // the kernels are bf16's
#endif
}

}  // namespace

bool gelu_gemm_applies(const Context& ctx, int N, int out_cols, int reduce_cols,
                       std::initializer_list<const void*> pointers) {
    return ctx.gelu_gemm != 0 && kernel_applies(ctx, N, out_cols, reduce_cols, pointers);
}

bool gelu_gemm_forward_chosen(const Context& ctx, int N, int IC, int OC,
                              std::initializer_list<const void*> pointers) {
    return ctx.gelu_gemm >= 2 && gelu_gemm_applies(ctx, N, OC, IC, pointers);
}

void gelu_gemm_forward(const Context& ctx, floatX* out, floatX* pre, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int IC, int OC) {
    LLMC_CHECK(gelu_gemm_applies(ctx, N, OC, IC, {out, pre, inp, weight, bias}),
               "gelu_gemm_forward: not for this device, build or shape (N=%d IC=%d OC=%d)", N, IC,
               OC);
    if (ctx.gelu_gemm == 3 &&
        gelu_gemm_wide_applies(ctx, N, IC, OC, {out, pre, inp, weight, bias})) {
        gelu_gemm_forward_wide(ctx, out, pre, inp, weight, bias, N, IC, OC);
        return;
    }
    const CUtensorMap a_map = make_row_tensor_map(inp, 1, N, 1, IC, kTile);
    const CUtensorMap w_map = make_row_tensor_map(weight, 1, OC, 1, IC, kTile);
    launch<kForward>(ctx, a_map, w_map, w_map, bias, out, pre, nullptr, RowStatsTarget{}, N, OC,
                     IC);
}

int dgelu_bias_partial_rows(int N) { return (N + kTile - 1) / kTile; }

void dgelu_gemm_backward(const Context& ctx, floatX* dinp, float* bias_partial, const floatX* dout,
                         const floatX* weight, const floatX* pre, int N, int IC, int OC) {
    LLMC_CHECK(gelu_gemm_applies(ctx, N, IC, OC, {dinp, bias_partial, dout, weight, pre}),
               "dgelu_gemm_backward: not for this device, build or shape (N=%d IC=%d OC=%d)", N, IC,
               OC);
    const CUtensorMap a_map = make_row_tensor_map(dout, 1, N, 1, OC, kTile);
    const CUtensorMap w_map = make_row_tensor_map(weight, 1, OC, 1, IC, kBK);
    const CUtensorMap pre_map = make_row_tensor_map(pre, 1, N, 1, IC, kTile);
    launch<kDgelu>(ctx, a_map, w_map, pre_map, nullptr, dinp, nullptr, bias_partial,
                   RowStatsTarget{}, N, IC, OC);
}

bool row_stats_gemm_applies(const Context& ctx, int N, int IC, int OC, int T, int NH,
                            std::initializer_list<const void*> pointers) {
    return T > 0 && N % T == 0 && NH > 0 && IC == NH * kStatsHeadSize &&
           kernel_applies(ctx, N, IC, OC, pointers);
}

void row_stats_gemm_backward(const Context& ctx, floatX* dinp, const RowStatsTarget& stats,
                             const floatX* dout, const floatX* weight, const floatX* out, int N,
                             int IC, int OC) {
    LLMC_CHECK(row_stats_gemm_applies(ctx, N, IC, OC, stats.T, stats.NH,
                                      {dinp, dout, weight, out, stats.d, stats.lse2, stats.lse}),
               "row_stats_gemm_backward: not for this device, build or shape (N=%d IC=%d OC=%d "
               "T=%d NH=%d)",
               N, IC, OC, stats.T, stats.NH);
    const CUtensorMap a_map = make_row_tensor_map(dout, 1, N, 1, OC, kTile);
    const CUtensorMap w_map = make_row_tensor_map(weight, 1, OC, 1, IC, kBK);
    const CUtensorMap out_map = make_row_tensor_map(out, 1, N, 1, IC, kTile);
    launch<kRowStats>(ctx, a_map, w_map, out_map, nullptr, dinp, nullptr, nullptr, stats, N, IC,
                      OC);
}

}  // namespace llmc
