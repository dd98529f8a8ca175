// matmul_sm90_plain.cu: the plain forward products of matmul_sm90.cuh (out = inp @ weight^T
// (+ bias) (+ residual)), and the fc forward with GELU as an option, on wgmma with TMA loads and
// stores, in 128 x 256 output tiles that two consumer warpgroups share (building blocks in
// sm90.cuh; written from the PTX ISA).
//
// Why a second kernel beside the GELU GEMMs' (matmul_sm90.cu): that one's 128 x 128 tiles, a
// whole tile per consumer warpgroup, read 12 KiB of shared memory a k-slice per warpgroup (two
// m64n128k16 with the same B) and take 32 KiB of TMA writes per 1 M multiply-adds; here each
// warpgroup's m64n256k16 reads 10 KiB and a 128 x 256 tile takes 24 KiB per 1 M (docs/perf-log.md).
// The price: the two consumers finish a tile together, so only what comes after their pass from
// the accumulators into shared memory can run beside the next tile's main loop. That is what
// the epilogue warps do: the TMA stores, and for the fc forward the GELU.
//
// A CTA (one per SM, persistent) takes tiles blockIdx.x, blockIdx.x + gridDim.x, ... (tile t:
// m tile t / n_tiles, n tile t % n_tiles, so the CTAs in flight share the weight through L2).
// Its 384 threads:
//   warpgroup 0 (56 registers): warp 0's first thread is the producer: for each tile, the
//     k-blocks of 64 of the A operand (128 rows of inp, K-major) and of the weight (256 rows,
//     K-major) into a ring of kStages stages, each with a "full" mbarrier (TMA bytes) and an
//     "empty" one (the eight consumer warps); with a residual, after a tile's k-blocks, each
//     consumer's 64 x 256 block of the residual into that consumer's staging buffer, once the
//     buffer has drained. Warps 1-3 are the epilogue warps: for each tile and consumer in turn,
//     once its block is staged, one thread stores the buffer by TMA (four 64 x 64 boxes; rows
//     past M are not written), waits until the stores have read it and marks it drained. For the
//     fc forward the block is pre: one thread stores it by TMA while the 96 threads take
//     gelu_tanh of it by 16-byte chunks and write those to out in global memory directly, and
//     the buffer drains once both have read it. (For the fc forward this is still slower than
//     the GELU kernel's 128 x 128 tiles; docs/perf-log.md.)
//   two consumer warpgroups (224 registers), consumer c taking rows 64 c .. 64 c + 63 of every
//     tile: the main loop (one m64n256k16 accumulator, 128 registers); then, once the buffer has
//     drained (or the residual is in it), acc (+ bias) (+ the residual) rounded to bf16 into it
//     (32 KiB, four 64-column blocks of 64 rows in the 128-byte swizzle of sm90.cuh,
//     conflict-free in the accumulator layout), and on to the next tile.
// Each output element is one fp32 sum over k in a fixed order (the k-blocks in order, each by
// wgmma) plus the bias and the residual, rounded once: the bits depend on the shape only.
#include <algorithm>
#include <cstdint>

#include "gelu.cuh"
#include "launch.cuh"
#include "matmul_sm90.cuh"
#include "sm90.cuh"
#include "util.h"

namespace llmc {

namespace {

typedef __nv_bfloat16 bf16;

// What the epilogue writes: out = acc (+ bias); out = acc (+ bias) + residual; or pre = acc +
// bias and out = gelu_tanh(pre) (the fc forward; the GELU taken from the rounded pre).
enum Mode { kPlain = 0, kResidual = 1, kGelu = 2 };

constexpr int kConsumers = 2;
// Warpgroup 0: the producer (warp 0) and the epilogue warps (1-3); 1 and 2: the consumers. (Not
// a fourth warpgroup of epilogue warps: at 512 threads a thread gets 128 registers at launch,
// and ptxas cannot compile a m64n256k16 wgmma, which needs 154, within them.)
constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 3, kThreads = 128 * (1 + kConsumers);
constexpr int kRowsPerConsumer = kBM / kConsumers;  // 64: one m64 wgmma a k-slice
constexpr int kEpilogueThreads = 96;
static_assert(kEpilogueThreads == 128 - 32, "the epilogue warps are warpgroup 0's warps 1-3");
// The launch gives every thread 168 registers (65536 / 384, in steps of 8); setmaxnreg moves
// them between warpgroups, and an increase that the decreases do not cover waits forever.
constexpr int kProducerRegs = 56, kConsumerRegs = 224, kLaunchRegs = 168;
static_assert(kProducerRegs + kConsumers * kConsumerRegs <= (1 + kConsumers) * kLaunchRegs,
              "setmaxnreg budget over the registers the launch gives");
constexpr uint32_t kABytes = kBM * kBK * 2;                     // one A stage (16 KiB)
constexpr uint32_t kWBytes = kBN * kBK * 2;                     // one weight stage (32 KiB)
constexpr uint32_t kStagingBytes = kRowsPerConsumer * kBN * 2;  // a consumer's 64 x 256 (32 KiB)
constexpr int kConsumerWarps = 4 * kConsumers;
static_assert(32 * kConsumerWarps + 128 == kThreads, "the consumer warps are all but warpgroup 0");
constexpr size_t kSmem = kStages * (kABytes + kWBytes) + kConsumers * kStagingBytes +
                         (2 * kStages + 3 * kConsumers) * 8 + 1024;
static_assert(kSmem <= 227 * 1024, "over sm_90's shared memory per block");

template <int MODE>
__global__ void __launch_bounds__(kThreads, 1)
    plain_gemm_kernel(const __grid_constant__ CUtensorMap a_map,
                      const __grid_constant__ CUtensorMap w_map,
                      const __grid_constant__ CUtensorMap out_map,
                      const __grid_constant__ CUtensorMap aux_map, const bf16* __restrict__ bias,
                      bf16* __restrict__ out, int M, int N, int K) {
#ifdef LLMC_SM90A_DEVICE
    using namespace sm90;
    constexpr int kEpilogueBar = 1;  // the epilogue warps' named barrier (0 is __syncthreads')
    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    auto a_tile = [&](int s) { return base + s * kABytes; };
    auto w_tile = [&](int s) { return base + kStages * kABytes + s * kWBytes; };
    const uint32_t staging0 = base + kStages * (kABytes + kWBytes);
    const uint32_t bars = staging0 + kConsumers * kStagingBytes;
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (kStages + s); };
    // Per consumer c, one phase a tile: staged(c), its 128 threads have written the block into
    // the buffer; drained(c), the stores have read it (the buffer is free); res_full(c), the
    // residual block is in it (TMA bytes).
    auto staged = [&](int c) { return bars + 8 * (2 * kStages + c); };
    auto drained = [&](int c) { return bars + 8 * (2 * kStages + kConsumers + c); };
    auto res_full = [&](int c) { return bars + 8 * (2 * kStages + 2 * kConsumers + c); };
    auto staging = [&](int c) { return staging0 + c * kStagingBytes; };
    const int n_tiles = N / kBN, tiles = ((M + kBM - 1) / kBM) * n_tiles;
    const int kblocks = K / kBK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; s++) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), kConsumerWarps);
        }
        for (int c = 0; c < kConsumers; c++) {
            mbar_init(staged(c), 128);
            mbar_init(drained(c), 1);
            mbar_init(res_full(c), 1);
        }
        fence_barrier_init();
    }
    __syncthreads();
    pdl_wait();
    if (threadIdx.x < 128) {
        setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x == 0) {  // the producer
            prefetch_tensor_map(&a_map);
            prefetch_tensor_map(&w_map);
            if (MODE == kResidual) prefetch_tensor_map(&aux_map);
            int g = 0;  // k-blocks issued so far (stage g % kStages, phase (g / kStages) & 1)
            for (int t = blockIdx.x, u = 0; t < tiles; t += gridDim.x, u++) {
                const int m0 = (t / n_tiles) * kBM, n0 = (t % n_tiles) * kBN;
                for (int kb = 0; kb < kblocks; kb++, g++) {
                    const int s = g % kStages;
                    mbar_wait(empty(s), ((g / kStages) & 1) ^ 1);
                    mbar_arrive_expect_tx(full(s), kABytes + kWBytes);
                    tma_load_4d(a_tile(s), &a_map, full(s), kb * kBK, 0, m0, 0);
                    tma_load_4d(w_tile(s), &w_map, full(s), kb * kBK, 0, n0, 0);
                }
                if (MODE == kResidual) {  // once the previous tile's stores have read the buffer
                    for (int c = 0; c < kConsumers; c++) {
                        mbar_wait(drained(c), (u & 1) ^ 1);
                        mbar_arrive_expect_tx(res_full(c), kStagingBytes);
#pragma unroll
                        for (int cb = 0; cb < kBN / 64; cb++) {
                            tma_load_4d(staging(c) + cb * kRowsPerConsumer * kRowBytes, &aux_map,
                                        res_full(c), n0 + 64 * cb, 0, m0 + kRowsPerConsumer * c, 0);
                        }
                    }
                }
            }
        } else if (threadIdx.x >= 32) {  // the epilogue warps
            const int et = threadIdx.x - 32;
            if (et == 0) prefetch_tensor_map(MODE == kGelu ? &aux_map : &out_map);
            // The block's four 64 x 64 boxes from consumer c's buffer to `map`, and (with
            // `wait`) the wait until the stores have read it (one thread).
            auto store = [&](const CUtensorMap* map, int c, int m0, int n0, bool wait) {
#pragma unroll
                for (int cb = 0; cb < kBN / 64; cb++) {
                    tma_store_4d(map, staging(c) + cb * kRowsPerConsumer * kRowBytes, n0 + 64 * cb,
                                 0, m0 + kRowsPerConsumer * c, 0);
                }
                bulk_commit();
                if (wait) bulk_wait_read_all();
            };
            for (int t = blockIdx.x, u = 0; t < tiles; t += gridDim.x, u++) {
                const int m0 = (t / n_tiles) * kBM, n0 = (t % n_tiles) * kBN;
                for (int c = 0; c < kConsumers; c++) {
                    if (MODE != kGelu) {
                        if (et == 0) {
                            mbar_wait(staged(c), u & 1);
                            store(&out_map, c, m0, n0, /*wait=*/true);
                            mbar_arrive(drained(c));
                        }
                        continue;
                    }
                    // pre out by TMA; while those stores read the buffer, gelu_tanh(pre) from it
                    // by 16-byte chunks straight to out in global memory (no second store from
                    // shared memory to wait for); the buffer drains once both have read it.
                    mbar_wait(staged(c), u & 1);
                    if (et == 0) store(&aux_map, c, m0, n0, /*wait=*/false);
                    const unsigned char* const buf = smem_raw + (staging(c) - raw);
                    const int row0 = m0 + kRowsPerConsumer * c;
#pragma unroll 2
                    for (int q = et; q < (int)(kStagingBytes / 16); q += kEpilogueThreads) {
                        // Chunk q: column block q / (64 rows * 8), row (q / 8) % 64, and
                        // 8-column group (q % 8) ^ (row % 8) in the 128-byte swizzle.
                        const int r = (q / 8) % kRowsPerConsumer;
                        const int col = (q / (kRowsPerConsumer * 8)) * 64 + ((q % 8) ^ (r % 8)) * 8;
                        const uint4 v = *reinterpret_cast<const uint4*>(buf + 16 * q);
                        if (row0 + r < M) {
                            *reinterpret_cast<uint4*>(out + (size_t)(row0 + r) * N + n0 + col) =
                                gelu_chunk_bf16(v);
                        }
                    }
                    named_barrier_sync(kEpilogueBar, kEpilogueThreads);  // all have read it
                    if (et == 0) {
                        bulk_wait_read_all();  // and so have pre's stores
                        mbar_arrive(drained(c));
                    }
                }
            }
            if (et == 0) bulk_wait_all();  // the last stores complete before the CTA's memory goes
        }
        return;
    }
    setmaxnreg_inc<kConsumerRegs>();
    // The consumer index through a shuffle: warp-uniform, so the bookkeeping stays uniform.
    const int cw = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0) - 1;
    const int wt = threadIdx.x % 128, lane = wt % 32;
    unsigned char* const staging_ptr = smem_raw + (staging(cw) - raw);
    const uint64_t a_desc = kmajor_desc(a_tile(0), kBM, kRowsPerConsumer * cw, 0);
    const uint64_t w_desc = kmajor_desc(w_tile(0), kBN, 0, 0);
    constexpr uint32_t kAStep = kABytes / 16, kWStep = kWBytes / 16;
    uint32_t s = 0, phase = 0;
    for (int t = blockIdx.x, u = 0; t < tiles; t += gridDim.x, u++) {
        const int n0 = (t % n_tiles) * kBN;
        float acc[128];
#pragma unroll
        for (int e = 0; e < 128; e++) acc[e] = 0.0f;
        uint32_t prev = 0;
        for (int kb = 0; kb < kblocks; kb++) {
            mbar_wait_warp(full(s), phase);
            fence_operands(acc);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < kBK / 16; ks++) {
                wgmma_m64n256k16_ss<0, 0>(acc, a_desc + s * kAStep + 2 * ks,
                                          w_desc + s * kWStep + 2 * ks, kb > 0 || ks > 0);
            }
            wgmma_commit();
            wgmma_wait<1>();
            if (kb > 0 && lane == 0) mbar_arrive(empty(prev));
            prev = s;
            if (++s == kStages) s = 0, phase ^= 1;
        }
        wgmma_wait<0>();
        fence_operands(acc);
        if (lane == 0) mbar_arrive(empty(prev));
        if (MODE == kResidual) {
            mbar_wait(res_full(cw), u & 1);
        } else {
            mbar_wait(drained(cw), (u & 1) ^ 1);  // the previous tile's stores have read it
        }
        // Element e of acc is (row, col) of this consumer's 64 x 256 block (sm90.cuh).
#pragma unroll
        for (int e = 0; e < 128; e += 2) {
            const int row = frag_row(wt, e), col = frag_col(wt, e);
            uint32_t* at = reinterpret_cast<uint32_t*>(staging_ptr +
                                                       swizzled_offset(kRowsPerConsumer, row, col));
            float x = acc[e], y = acc[e + 1];
            if (bias != nullptr) {
                const float2 b =
                    __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + n0 + col));
                x += b.x, y += b.y;
            }
            if (MODE == kResidual) {
                const float2 r = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(at));
                x += r.x, y += r.y;
            }
            *at = pack_bf16(x, y);
        }
        fence_proxy_async_shared();
        mbar_arrive(staged(cw));
    }
#endif
}

bool kernel_applies(const Context& ctx, int N, int OC, int IC,
                    std::initializer_list<const void*> pointers) {
#if defined(ENABLE_BF16)
    if (ctx.props.major != 9 || ctx.props.minor != 0) return false;
    if (N <= 0 || OC % kBN != 0 || IC % kBK != 0 || IC <= 0) return false;
    for (const void* p : pointers) {
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
    }
    static const bool image = has_sm90a_image(plain_gemm_kernel<kPlain>);
    return image;
#else
    (void)ctx, (void)N, (void)OC, (void)IC, (void)pointers;
    return false;  // the kernel is bf16's
#endif
}

template <int MODE>
void launch(const Context& ctx, const CUtensorMap& a_map, const CUtensorMap& w_map,
            const CUtensorMap& out_map, const CUtensorMap& aux_map, const floatX* bias, floatX* out,
            int M, int N, int K) {
    static const bool set = [] {
        LLMC_CUDA_CHECK(cudaFuncSetAttribute(
            plain_gemm_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmem));
        return true;
    }();
    (void)set;
    const int tiles = ((M + kBM - 1) / kBM) * (N / kBN);
    const int grid = std::min(tiles, ctx_num_sms(ctx));
    plain_gemm_kernel<MODE><<<grid, kThreads, kSmem, ctx.stream>>>(
        a_map, w_map, out_map, aux_map, reinterpret_cast<const bf16*>(bias),
        reinterpret_cast<bf16*>(out), M, N, K);
    LLMC_CUDA_CHECK_LAST();
}

}  // namespace

bool plain_gemm_chosen(const Context& ctx, bool bias, bool residual, int N, int IC, int OC,
                       std::initializer_list<const void*> pointers) {
    const unsigned product = residual
                                 ? (IC <= OC ? kPlainGemmResidualShort : kPlainGemmResidualLong)
                             : bias ? kPlainGemmBias
                                    : 0u;
    return (ctx.plain_gemm & product) != 0 && kernel_applies(ctx, N, OC, IC, pointers);
}

void plain_gemm_forward(const Context& ctx, floatX* out, const floatX* inp, const floatX* weight,
                        const floatX* bias, const floatX* residual, int N, int IC, int OC) {
    LLMC_CHECK(kernel_applies(ctx, N, OC, IC, {out, inp, weight, bias, residual}),
               "plain_gemm_forward: not for this device, build or shape (N=%d IC=%d OC=%d)", N, IC,
               OC);
    const CUtensorMap a_map = make_row_tensor_map(inp, 1, N, 1, IC, kBM);
    const CUtensorMap w_map = make_row_tensor_map(weight, 1, OC, 1, IC, kBN);
    const CUtensorMap out_map = make_row_tensor_map(out, 1, N, 1, OC, kRowsPerConsumer);
    if (residual != nullptr) {
        const CUtensorMap res_map = make_row_tensor_map(residual, 1, N, 1, OC, kRowsPerConsumer);
        launch<kResidual>(ctx, a_map, w_map, out_map, res_map, bias, out, N, OC, IC);
    } else {
        launch<kPlain>(ctx, a_map, w_map, out_map, out_map, bias, out, N, OC, IC);
    }
}

bool gelu_gemm_wide_applies(const Context& ctx, int N, int IC, int OC,
                            std::initializer_list<const void*> pointers) {
    return kernel_applies(ctx, N, OC, IC, pointers);
}

void gelu_gemm_forward_wide(const Context& ctx, floatX* out, floatX* pre, const floatX* inp,
                            const floatX* weight, const floatX* bias, int N, int IC, int OC) {
    LLMC_CHECK(bias != nullptr && kernel_applies(ctx, N, OC, IC, {out, pre, inp, weight, bias}),
               "gelu_gemm_forward_wide: not for this device, build or shape (N=%d IC=%d OC=%d)", N,
               IC, OC);
    const CUtensorMap a_map = make_row_tensor_map(inp, 1, N, 1, IC, kBM);
    const CUtensorMap w_map = make_row_tensor_map(weight, 1, OC, 1, IC, kBN);
    // out is written by the epilogue threads' own stores, pre by TMA (the aux map; the out map
    // is the plain modes').
    const CUtensorMap pre_map = make_row_tensor_map(pre, 1, N, 1, OC, kRowsPerConsumer);
    launch<kGelu>(ctx, a_map, w_map, pre_map, pre_map, bias, out, N, OC, IC);
}

}  // namespace llmc
