// bench_gelu_gemm.cu: cuBLASLt's GELU products of the MLP, each layout and epilogue timed over
// every heuristic candidate, to find where their gap to a plain product comes from.
//
//   build/<prec>/dev/bench/bench_gelu_gemm [--rows N]... (default: 65536 and 4096, d12's B=64 and
//   B=4 at T=1024)
//
// The products (C = 768, 4C = 3072, N rows; cuBLASLt's column-major terms, m x n = 4C x N):
//   fc forward   out = inp W^T + b: A = W (4C x C row-major: op T), B = inp; epilogues BIAS
//                (plain), GELU_BIAS (no aux) and GELU_AUX_BIAS (what the trainer runs: the GELU
//                input kept for the backward);
//   fcproj dinp  dpre = (dout Wp) * gelu'(pre): A = Wp (C x 4C row-major: op N, "NN", what the
//                trainer runs) or its transpose stored (4C x C row-major: op T, "TN"); epilogues
//                DEFAULT (plain) and DGELU.
// Operands uniform random in [-1, 1) (never zeros). Each candidate of the heuristic (up to 16):
// 3 warm-up launches, then the median of 15 timed launches (events); the table prints the
// heuristic's first candidate and the fastest, with TFLOP/s = 2 m n k / time.
//
// Then two versions of a prototype of our own Hopper GEMM for the fc forward (sm_90a; not used
// by the trainer yet): out = gelu(pre), pre = inp W^T + b, both bf16, each checked against a
// float64 CPU reference on 64 sampled rows and against cuBLASLt's GELU_AUX_BIAS everywhere
// (counted pass / fail), and timed beside it (median of 20). Both: 128 x 128 tiles, K step 64,
// TMA loads into a ring from one producer thread, wgmma m64n128k16 from shared memory with one
// group in flight; the epilogue adds the bias, stages the bf16 pre tile in shared memory and
// writes pre and gelu(pre) in 16-byte chunks (GELU of the rounded pre, as the trainer's
// recomputation takes it). Version 1: one tile per CTA, two warpgroups of 64 rows, a 3-deep
// ring, two CTAs per SM (one's epilogue beside the other's main loop); also timed with its
// main loop alone and with the pre output alone. Version 2 ("ping-pong"): below. Need M, N
// multiples of 128 and K of 64.
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "context.cuh"
#include "precision.cuh"
#include "sm90.cuh"
#include "test/test_util.cuh"

using namespace llmc;

namespace {

constexpr int kC = 768, kMaxAlgos = 16, kWarmup = 3, kRuns = 15;

cublasLtMatrixLayout_t layout(int rows, int cols, int ld) {
    cublasLtMatrixLayout_t l;
    LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, kCudaFloatX, rows, cols, ld));
    return l;
}

struct Product {
    const char* name;
    int m, n, k;
    bool ta;
    const floatX* A;
    int lda;
    const floatX* B;
    int ldb;
    floatX* D;
    int ldd;
    cublasLtEpilogue_t epi;
    const floatX* bias;
    floatX* aux;
    int ldaux;
};

// Every candidate timed; prints one row.
void time_product(const Context& ctx, const Product& p) {
    cublasLtMatmulDesc_t desc;
    LLMC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epi, sizeof(p.epi)));
    if (p.bias != nullptr)
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &p.bias, sizeof(p.bias)));
    if (p.aux != nullptr) {
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof(p.aux)));
        const int64_t ld = p.ldaux;
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                         &ld, sizeof(ld)));
    }
    cublasLtMatrixLayout_t a = p.ta ? layout(p.k, p.m, p.lda) : layout(p.m, p.k, p.lda);
    cublasLtMatrixLayout_t b = layout(p.k, p.n, p.ldb), d = layout(p.m, p.n, p.ldd);
    cublasLtMatmulPreference_t pref;
    LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.lt_workspace_bytes,
        sizeof(ctx.lt_workspace_bytes)));
    cublasLtMatmulHeuristicResult_t res[kMaxAlgos];
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(ctx.lt, desc, a, b, d, d, pref, kMaxAlgos, res, &found);
    const double flops = 2.0 * p.m * p.n * p.k;
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        std::printf("| %s | N=%d | no algorithm (%s) | | | |\n", p.name, p.n,
                    cublasGetStatusName(st));
    } else {
        cudaEvent_t e0, e1;
        LLMC_CUDA_CHECK(cudaEventCreate(&e0));
        LLMC_CUDA_CHECK(cudaEventCreate(&e1));
        const float alpha = 1.0f, beta = 0.0f;
        double first = 0.0, best = 1e30;
        int best_i = 0;
        for (int i = 0; i < found; i++) {
            std::vector<float> ms;
            bool ok = true;
            for (int r = 0; r < kWarmup + kRuns && ok; r++) {
                LLMC_CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
                ok = cublasLtMatmul(ctx.lt, desc, &alpha, p.A, a, p.B, b, &beta, p.D, d, p.D, d,
                                    &res[i].algo, ctx.lt_workspace, ctx.lt_workspace_bytes,
                                    ctx.stream) == CUBLAS_STATUS_SUCCESS;
                LLMC_CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
                LLMC_CUDA_CHECK(cudaEventSynchronize(e1));
                float t = 0.0f;
                LLMC_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
                if (r >= kWarmup) ms.push_back(t);
            }
            if (!ok) continue;
            std::sort(ms.begin(), ms.end());
            const double med = ms[ms.size() / 2];
            if (i == 0) first = med;
            if (med < best) best = med, best_i = i;
        }
        std::printf("| %s | N=%d | %d | %.1f us (%.0f TFLOP/s) | %.1f us (%.0f TFLOP/s) | %d |\n",
                    p.name, p.n, found, first * 1e3, flops / first / 1e9, best * 1e3,
                    flops / best / 1e9, best_i);
        LLMC_CUDA_CHECK(cudaEventDestroy(e0));
        LLMC_CUDA_CHECK(cudaEventDestroy(e1));
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
}

void run_rows(const Context& ctx, int N) {
    const int C = kC, H = 4 * kC;
    DeviceBuffer<floatX> w((size_t)H * C), wt((size_t)H * C), bias(H), inp((size_t)N * C);
    DeviceBuffer<floatX> out((size_t)N * H), pre((size_t)N * H), dout((size_t)N * C);
    Rng rng(N);
    for (auto* buf : {&w, &wt, &bias, &inp, &pre, &dout}) {
        std::vector<float> h(buf->size());
        fill_uniform(h, rng, -1.0f, 1.0f);
        upload(buf->get(), h);
    }
    // fc forward: out (N x 4C row-major) = col-major 4C x N; W (4C x C row-major) = col-major
    // C x 4C, op T; inp col-major C x N.
    const Product fwd[] = {
        {"fc fwd TN BIAS", H, N, C, true, w.get(), C, inp.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_BIAS, bias.get(), nullptr, 0},
        {"fc fwd TN GELU_BIAS", H, N, C, true, w.get(), C, inp.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_GELU_BIAS, bias.get(), nullptr, 0},
        {"fc fwd TN GELU_AUX_BIAS", H, N, C, true, w.get(), C, inp.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias.get(), pre.get(), H},
    };
    // fcproj dinp: dpre (N x 4C) = col-major 4C x N = Wp^T (4C x C) dout^T (C x N). Wp (C x 4C
    // row-major) = col-major 4C x C: op N, lda 4C. Its stored transpose (4C x C row-major) =
    // col-major C x 4C: op T, lda C.
    const Product bwd[] = {
        {"fcproj dinp NN plain", H, N, C, false, w.get(), H, dout.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0},
        {"fcproj dinp TN plain", H, N, C, true, wt.get(), C, dout.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0},
        {"fcproj dinp NN DGELU", H, N, C, false, w.get(), H, dout.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_DGELU, nullptr, pre.get(), H},
        {"fcproj dinp TN DGELU", H, N, C, true, wt.get(), C, dout.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_DGELU, nullptr, pre.get(), H},
    };
    for (const Product& p : fwd) time_product(ctx, p);
    for (const Product& p : bwd) time_product(ctx, p);
}

typedef __nv_bfloat16 bf16;
constexpr int kBM = 128, kBN = 128, kBK = 64, kStages = 3, kThreads = 288;
constexpr uint32_t kTileBytes = 128 * kBK * 2;  // one A or W stage: 128 rows x 64 bf16
constexpr size_t kSmem = 2 * kStages * kTileBytes + 2 * kStages * 8 + 1024;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PROTO_SM90 1
#endif

#ifdef PROTO_SM90
__device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    float t;
    const float u = k * (x + 0.044715f * x * x * x);
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
    return 0.5f * x * (1.0f + t);
}

// One 16-byte chunk of the pre tile (8 bf16 values) to global memory, and (with_gelu) its GELU.
__device__ __forceinline__ void write_chunk(bf16* pre, bf16* out, size_t at, uint4 v,
                                            bool with_gelu) {
    *reinterpret_cast<uint4*>(pre + at) = v;
    if (!with_gelu) return;
    uint4 g;
    const uint32_t* in = reinterpret_cast<const uint32_t*>(&v);
    uint32_t* o = reinterpret_cast<uint32_t*>(&g);
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&in[q]));
        o[q] = sm90::pack_bf16(gelu_tanh(f.x), gelu_tanh(f.y));
    }
    *reinterpret_cast<uint4*>(out + at) = g;
}
#endif

// MODE 0: the epilogue below; 1: pre only (no GELU output); 2: no stores unless a value is
// exactly 12345 (the main loop alone, for timing).
template <int MODE>
__global__ void __launch_bounds__(kThreads, 2)
    gelu_gemm_kernel(const __grid_constant__ CUtensorMap a_map,
                     const __grid_constant__ CUtensorMap w_map, const bf16* __restrict__ bias,
                     bf16* __restrict__ out, bf16* __restrict__ pre, int N, int K) {
#ifdef PROTO_SM90
    using namespace sm90;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    auto a_tile = [&](int s) { return base + s * kTileBytes; };
    auto w_tile = [&](int s) { return base + (kStages + s) * kTileBytes; };
    auto full = [&](int s) { return base + 2 * kStages * kTileBytes + 8 * s; };
    auto empty = [&](int s) { return base + 2 * kStages * kTileBytes + 8 * (kStages + s); };
    const int n0 = blockIdx.x * kBN, m0 = blockIdx.y * kBM, kblocks = K / kBK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; s++) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 8);  // one arrival per consumer warp
        }
        fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x >= 256) {  // the producer warp: one thread issues every load
        if (threadIdx.x == 256) {
            prefetch_tensor_map(&a_map);
            prefetch_tensor_map(&w_map);
            for (int kb = 0; kb < kblocks; kb++) {
                const int s = kb % kStages;
                mbar_wait(empty(s), ((kb / kStages) & 1) ^ 1);
                mbar_arrive_expect_tx(full(s), 2 * kTileBytes);
                tma_load_4d(a_tile(s), &a_map, full(s), kb * kBK, 0, m0, 0);
                tma_load_4d(w_tile(s), &w_map, full(s), kb * kBK, 0, n0, 0);
            }
        }
        return;
    }
    const int cw = threadIdx.x / 128, wt = threadIdx.x % 128, lane = wt % 32;
    float acc[64];
#pragma unroll
    for (int e = 0; e < 64; e++) acc[e] = 0.0f;
    // One group of wgmmas in flight: block kb's stage is released once block kb + 1's is issued.
    for (int kb = 0; kb < kblocks; kb++) {
        const int s = kb % kStages;
        mbar_wait_warp(full(s), (kb / kStages) & 1);
        fence_operands(acc);
        wgmma_fence();
        gemm_ss_kmajor<128, 4>(acc, a_tile(s), kBM, 64 * cw, w_tile(s), kBN, kb > 0);
        wgmma_commit();
        wgmma_wait<1>();
        if (kb > 0 && lane == 0) mbar_arrive(empty((kb - 1) % kStages));
    }
    wgmma_wait<0>();
    fence_operands(acc);
    // Epilogue: accumulator element e of thread wt is row 16 (wt / 32) + 8 ((e / 2) % 2) +
    // lane / 4 of this warpgroup's 64, column 8 (e / 4) + 2 (lane % 4) + e % 2. The bf16 pre
    // tile goes through the ring's shared memory (free once both warpgroups are done: every
    // load was consumed), rows kPitch bytes apart (16 bytes of padding: a warp's 4-byte writes
    // hit 32 banks), then out in full 16-byte chunks, whole rows per 16 threads.
    if (MODE == 2) {
#pragma unroll
        for (int e = 0; e < 64; e++)
            if (acc[e] == 12345.0f) pre[e] = __float2bfloat16(acc[e]);
        return;
    }
    constexpr int kPitch = kBN * 2 + 16;
    unsigned char* const s_pre = smem_raw + (base - smem_u32(smem_raw));
    named_barrier_sync(1, 256);  // both warpgroups' wgmmas have read the ring
    const int row_base = 64 * cw + 16 * (wt / 32) + lane / 4;
#pragma unroll
    for (int e = 0; e < 64; e += 2) {
        const int row = row_base + 8 * ((e / 2) % 2);
        const int col = 8 * (e / 4) + 2 * (lane % 4);
        const __nv_bfloat162 b2 = *reinterpret_cast<const __nv_bfloat162*>(bias + n0 + col);
        const float x = acc[e] + __bfloat162float(b2.x), y = acc[e + 1] + __bfloat162float(b2.y);
        *reinterpret_cast<uint32_t*>(s_pre + row * kPitch + col * 2) = pack_bf16(x, y);
    }
    named_barrier_sync(1, 256);
    // GELU of the rounded pre (as the trainer's recomputation takes it), 8 values a chunk.
    const int t = threadIdx.x;
#pragma unroll 4
    for (int i = 0; i < kBM * kBN * 2 / 16 / 256; i++) {
        const int idx = i * 256 + t, row = idx / 16, chunk = idx % 16;
        const size_t at = (size_t)(m0 + row) * N + n0 + chunk * 8;
        write_chunk(pre, out, at,
                    *reinterpret_cast<const uint4*>(s_pre + row * kPitch + chunk * 16), MODE == 0);
    }
#endif
}

template <int MODE>
void launch_ours(const Context& ctx, const CUtensorMap& a_map, const CUtensorMap& w_map,
                 const bf16* bias, bf16* out, bf16* pre, int M, int N, int K) {
    static bool set = false;
    if (!set) {
        LLMC_CUDA_CHECK(cudaFuncSetAttribute(
            gelu_gemm_kernel<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmem));
        set = true;
    }
    gelu_gemm_kernel<MODE><<<dim3(N / kBN, M / kBM), kThreads, kSmem, ctx.stream>>>(
        a_map, w_map, bias, out, pre, N, K);
    LLMC_CUDA_CHECK_LAST();
}

// Version 2, "ping-pong": persistent CTAs (one per SM) of a producer warpgroup and two consumer
// warpgroups, each consumer owning whole 128 x 128 tiles (two m64 accumulators, 128 registers),
// taking this CTA's tiles in turn; their main loops run one after the other (named barriers), so
// one's epilogue (through its own staging buffer) runs beside the other's main loop. The ring
// holds the k-blocks of the CTA's tiles in order.
constexpr int kPpStages = 4, kPpThreads = 384;
constexpr int kPitch = kBN * 2 + 16;  // staging row: 16 bytes of padding
constexpr uint32_t kStageBytes = kBM * kPitch;
constexpr size_t kPpSmem = 2 * kPpStages * kTileBytes + 2 * kStageBytes + 2 * kPpStages * 8 + 1024;

__global__ void __launch_bounds__(kPpThreads, 1)
    gelu_gemm_pingpong_kernel(const __grid_constant__ CUtensorMap a_map,
                              const __grid_constant__ CUtensorMap w_map,
                              const bf16* __restrict__ bias, bf16* __restrict__ out,
                              bf16* __restrict__ pre, int M, int N, int K) {
#ifdef PROTO_SM90
    using namespace sm90;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    auto a_tile = [&](int s) { return base + s * kTileBytes; };
    auto w_tile = [&](int s) { return base + (kPpStages + s) * kTileBytes; };
    const uint32_t stage_base = base + 2 * kPpStages * kTileBytes;
    const uint32_t bars = stage_base + 2 * kStageBytes;
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (kPpStages + s); };
    const int n_tiles = N / kBN, tiles = (M / kBM) * n_tiles, kblocks = K / kBK;
    // This CTA's j-th tile: blockIdx.x + j * gridDim.x (the n tiles of one m tile adjacent).
    const int my_tiles = (tiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kPpStages; s++) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 4);  // the four warps of the consumer that reads the stage
        }
        fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x < 128) {
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            prefetch_tensor_map(&a_map);
            prefetch_tensor_map(&w_map);
            for (int j = 0; j < my_tiles; j++) {
                const int t = blockIdx.x + j * gridDim.x;
                const int m0 = (t / n_tiles) * kBM, n0 = (t % n_tiles) * kBN;
                for (int kb = 0; kb < kblocks; kb++) {
                    const int g = j * kblocks + kb, s = g % kPpStages;
                    mbar_wait(empty(s), ((g / kPpStages) & 1) ^ 1);
                    mbar_arrive_expect_tx(full(s), 2 * kTileBytes);
                    tma_load_4d(a_tile(s), &a_map, full(s), kb * kBK, 0, m0, 0);
                    tma_load_4d(w_tile(s), &w_map, full(s), kb * kBK, 0, n0, 0);
                }
            }
        }
        return;
    }
    setmaxnreg_inc<232>();
    const int cw = threadIdx.x / 128 - 1, wt = threadIdx.x % 128, lane = wt % 32;
    // Barriers: 2 + c, "consumer c may start its main loop" (the other arrives, c syncs);
    // 4 + c, consumer c's own 128 threads around its staging buffer.
    unsigned char* const staging =
        smem_raw + (stage_base - smem_u32(smem_raw)) + (size_t)cw * kStageBytes;
    for (int j = cw; j < my_tiles; j += 2) {
        const int t = blockIdx.x + j * gridDim.x;
        const int m0 = (t / n_tiles) * kBM, n0 = (t % n_tiles) * kBN;
        if (j > 0) named_barrier_sync(2 + cw, 256);  // the other's main loop of tile j - 1 done
        float acc0[64], acc1[64];                    // rows 0-63 and 64-127 of the tile
#pragma unroll
        for (int e = 0; e < 64; e++) acc0[e] = acc1[e] = 0.0f;
        for (int kb = 0; kb < kblocks; kb++) {
            const int g = j * kblocks + kb, s = g % kPpStages;
            mbar_wait_warp(full(s), (g / kPpStages) & 1);
            fence_operands(acc0);
            fence_operands(acc1);
            wgmma_fence();
            gemm_ss_kmajor<128, 4>(acc0, a_tile(s), kBM, 0, w_tile(s), kBN, kb > 0);
            gemm_ss_kmajor<128, 4>(acc1, a_tile(s), kBM, 64, w_tile(s), kBN, kb > 0);
            wgmma_commit();
            wgmma_wait<1>();
            if (kb > 0 && lane == 0) mbar_arrive(empty((g - 1) % kPpStages));
        }
        wgmma_wait<0>();
        fence_operands(acc0);
        fence_operands(acc1);
        if (lane == 0) mbar_arrive(empty((j * kblocks + kblocks - 1) % kPpStages));
        if (j + 1 < my_tiles) named_barrier_arrive(2 + (1 - cw), 256);  // the other may start
        // Epilogue into this consumer's staging buffer, then out in 16-byte chunks.
        named_barrier_sync(4 + cw, 128);  // the last tile's read-out is done
        const int row_base = 16 * (wt / 32) + lane / 4;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float* acc = h == 0 ? acc0 : acc1;
#pragma unroll
            for (int e = 0; e < 64; e += 2) {
                const int row = 64 * h + row_base + 8 * ((e / 2) % 2);
                const int col = 8 * (e / 4) + 2 * (lane % 4);
                const __nv_bfloat162 b2 = *reinterpret_cast<const __nv_bfloat162*>(bias + n0 + col);
                const float x = acc[e] + __bfloat162float(b2.x);
                const float y = acc[e + 1] + __bfloat162float(b2.y);
                *reinterpret_cast<uint32_t*>(staging + row * kPitch + col * 2) = pack_bf16(x, y);
            }
        }
        named_barrier_sync(4 + cw, 128);
#pragma unroll 4
        for (int i = 0; i < kBM * kBN * 2 / 16 / 128; i++) {
            const int idx = i * 128 + wt, row = idx / 16, chunk = idx % 16;
            const size_t at = (size_t)(m0 + row) * N + n0 + chunk * 8;
            write_chunk(pre, out, at,
                        *reinterpret_cast<const uint4*>(staging + row * kPitch + chunk * 16), true);
        }
    }
#endif
}

void launch_pingpong(const Context& ctx, const CUtensorMap& a_map, const CUtensorMap& w_map,
                     const bf16* bias, bf16* out, bf16* pre, int M, int N, int K) {
    static bool set = false;
    if (!set) {
        LLMC_CUDA_CHECK(cudaFuncSetAttribute(
            gelu_gemm_pingpong_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kPpSmem));
        set = true;
    }
    const int tiles = (M / kBM) * (N / kBN);
    const int grid = std::min(tiles, ctx_num_sms(ctx));
    gelu_gemm_pingpong_kernel<<<grid, kPpThreads, kPpSmem, ctx.stream>>>(a_map, w_map, bias, out,
                                                                         pre, M, N, K);
    LLMC_CUDA_CHECK_LAST();
}

// cuBLASLt's GELU_AUX_BIAS, the trainer's call (matmul_forward's layout), the heuristic's first.
struct Lt {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};
Lt make_lt(const Context& ctx, const bf16* bias, bf16* pre, int M, int N, int K) {
    Lt l;
    LLMC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&l.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof(bias)));
    LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        l.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof(pre)));
    const int64_t ld = N;
    LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                     &ld, sizeof(ld)));
    LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.a, CUDA_R_16BF, K, N, K));
    LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.b, CUDA_R_16BF, K, M, K));
    LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.d, CUDA_R_16BF, N, M, N));
    cublasLtMatmulPreference_t pref;
    LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.lt_workspace_bytes,
        sizeof(ctx.lt_workspace_bytes)));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulAlgoGetHeuristic(ctx.lt, l.desc, l.a, l.b, l.d, l.d, pref, 1, &res, &found));
    LLMC_CHECK(found == 1, "no cuBLASLt algorithm");
    l.algo = res.algo;
    cublasLtMatmulPreferenceDestroy(pref);
    return l;
}

float median_ms(const Context& ctx, const std::function<void()>& f) {
    cudaEvent_t e0, e1;
    LLMC_CUDA_CHECK(cudaEventCreate(&e0));
    LLMC_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < 25; r++) {
        LLMC_CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
        f();
        LLMC_CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
        LLMC_CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0.0f;
        LLMC_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (r >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

void run_ours(const Context& ctx, int M) {
    const int K = 768, N = 3072;
    std::vector<float> ha((size_t)M * K), hw((size_t)N * K), hb(N);
    Rng rng(M);
    fill_uniform(ha, rng, -1.0f, 1.0f);
    fill_uniform(hw, rng, -0.1f, 0.1f);
    fill_uniform(hb, rng, -0.5f, 0.5f);
    for (auto* v : {&ha, &hw, &hb})  // the device holds bf16 in either build
        for (float& x : *v) x = __bfloat162float(__float2bfloat16(x));
    DeviceBuffer<bf16> a((size_t)M * K), w((size_t)N * K), bias(N);
    DeviceBuffer<bf16> out((size_t)M * N), pre((size_t)M * N), lout((size_t)M * N),
        lpre((size_t)M * N);
    upload(a.get(), ha), upload(w.get(), hw), upload(bias.get(), hb);
    poison(out.get(), (size_t)M * N), poison(pre.get(), (size_t)M * N);
    const CUtensorMap a_map = make_row_tensor_map(a.get(), 1, M, 1, K, kBM);
    const CUtensorMap w_map = make_row_tensor_map(w.get(), 1, N, 1, K, kBN);
    auto ours = [&]() {
        launch_ours<0>(ctx, a_map, w_map, bias.get(), out.get(), pre.get(), M, N, K);
    };
    auto ours_pre = [&]() {
        launch_ours<1>(ctx, a_map, w_map, bias.get(), out.get(), pre.get(), M, N, K);
    };
    auto ours_loop = [&]() {
        launch_ours<2>(ctx, a_map, w_map, bias.get(), out.get(), pre.get(), M, N, K);
    };
    Lt lt = make_lt(ctx, bias.get(), lpre.get(), M, N, K);
    const float alpha = 1.0f, beta = 0.0f;
    auto theirs = [&]() {
        LLMC_CUBLAS_CHECK(cublasLtMatmul(ctx.lt, lt.desc, &alpha, w.get(), lt.a, a.get(), lt.b,
                                         &beta, lout.get(), lt.d, lout.get(), lt.d, &lt.algo,
                                         ctx.lt_workspace, ctx.lt_workspace_bytes, ctx.stream));
    };
    auto ours_pp = [&]() {
        launch_pingpong(ctx, a_map, w_map, bias.get(), out.get(), pre.get(), M, N, K);
    };
    theirs();
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    const std::vector<float> lt_pre = download(lpre.get(), (size_t)M * N);
    const std::vector<float> lt_out = download(lout.get(), (size_t)M * N);
    for (int version = 1; version <= 2; version++) {
        poison(out.get(), (size_t)M * N), poison(pre.get(), (size_t)M * N);
        if (version == 1)
            ours();
        else
            ours_pp();
        LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        std::printf("  version %d:\n", version);
        const std::vector<float> got_pre = download(pre.get(), (size_t)M * N);
        const std::vector<float> got_out = download(out.get(), (size_t)M * N);
        // float64 reference on 64 sampled rows (every column), and cuBLASLt everywhere.
        std::vector<float> ref_pre, ref_out, s_pre, s_out;
        for (int i = 0; i < 64; i++) {
            const int r = (int)((uint64_t)i * 2654435761u % (uint64_t)M);
            for (int c = 0; c < N; c++) {
                double acc = hb[c];
                for (int k = 0; k < K; k++)
                    acc += (double)ha[(size_t)r * K + k] * hw[(size_t)c * K + k];
                const double g =
                    0.5 * acc *
                    (1.0 + std::tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
                ref_pre.push_back((float)acc), ref_out.push_back((float)g);
                s_pre.push_back(got_pre[(size_t)r * N + c]),
                    s_out.push_back(got_out[(size_t)r * N + c]);
            }
        }
        // bf16 output: one rounding (2^-9 relative) plus the approximate tanh (~1e-3 absolute).
        check_close("ours pre vs float64 (64 rows)", s_pre.data(), ref_pre.data(), s_pre.size(),
                    2e-3f, 8e-3f);
        check_close("ours gelu vs float64 (64 rows)", s_out.data(), ref_out.data(), s_out.size(),
                    4e-3f, 8e-3f);
        check_close("ours pre vs cuBLASLt (all)", got_pre.data(), lt_pre.data(), got_pre.size(),
                    2e-3f, 1.6e-2f);
        check_close("ours gelu vs cuBLASLt (all)", got_out.data(), lt_out.data(), got_out.size(),
                    4e-3f, 1.6e-2f);
    }
    const double flops = 2.0 * M * N * K;
    const float t_ours = median_ms(ctx, ours), t_lt = median_ms(ctx, theirs);
    const float t_pp = median_ms(ctx, ours_pp);
    std::printf("| %d | ours, version 2 (ping-pong) %.1f us (%.0f TFLOP/s) | %.3f of cuBLASLt |\n",
                M, t_pp * 1e3, flops / t_pp / 1e9, t_pp / t_lt);
    const float t_pre = median_ms(ctx, ours_pre), t_loop = median_ms(ctx, ours_loop);
    std::printf("| %d | ours pre only %.1f us, main loop only %.1f us (%.0f TFLOP/s) |\n", M,
                t_pre * 1e3, t_loop * 1e3, flops / t_loop / 1e9);
    std::printf(
        "| %d | ours %.1f us (%.0f TFLOP/s) | cuBLASLt GELU_AUX_BIAS %.1f us (%.0f TFLOP/s) | %.3f "
        "|\n",
        M, t_ours * 1e3, flops / t_ours / 1e9, t_lt * 1e3, flops / t_lt / 1e9, t_ours / t_lt);
}

}  // namespace

int main(int argc, char** argv) {
    skip_if_no_device();
    std::vector<int> rows;
    for (int i = 1; i < argc; i++) {
        if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
            rows.push_back(std::atoi(argv[++i]));
        } else {
            std::fprintf(stderr, "usage: %s [--rows N]...\n", argv[0]);
            return 2;
        }
    }
    if (rows.empty()) rows = {65536, 4096};
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    std::printf("bench_gelu_gemm: %s, C=%d, %s\n\n", ctx.props.name, kC, kPrecisionName);
    std::printf("| product | rows | candidates | heuristic's first | fastest | index |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (int N : rows) run_rows(ctx, N);
    if (ctx.props.major != 9) {
        std::printf("\nour prototype: SKIP (not a compute capability 9.0 device)\n");
        return 0;
    }
    std::printf("\nour prototype (fc forward, bias + GELU):\n");
    for (int N : rows) run_ours(ctx, N);
    return test_summary("bench_gelu_gemm");
}
