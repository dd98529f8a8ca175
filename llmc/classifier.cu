// classifier.cu: softmax + cross-entropy + its gradient, fused and in place, and the
// deterministic sum of the per-row losses.
//
// Shapes: logits (N, Vp) with the first V columns valid, targets (N) int, losses (N) float.
//   fused_classifier: one block per row.
//     pass 1: each thread keeps a running max m and sum s = sum exp(x - m) over its columns
//             (rescaled when m grows); the block takes the row max M, then sums the threads'
//             s exp(m - M), both in a fixed order.
//             losses[row] = log(s) + m - x[target]                          (overwritten)
//     pass 2 (write_dlogits): logits[v] <- (exp(x[v] - m) / s - [v == target]) * dloss for
//             v < V, and 0 for V <= v < Vp                                   (overwritten)
//     bytes = sizeof(floatX) * N * (V + 2*Vp) with dlogits, sizeof(floatX) * N * V without
//   classifier_chunked: per chunk of <= chunk_rows rows, the lm-head GEMM (cuBLASLt), the
//             kernel above, and with backward the two GEMMs of the lm-head's gradient; a
//             chunk of 8192 rows keeps every GEMM large (8192 x 50304 x 768 at GPT-2 d12).
//   loss_accumulate: *loss += scale * sum(losses), one block, fixed order    (accumulates)
// A target outside [0, V) makes that row's loss NaN, so a bad batch cannot go unnoticed.
// Preconditions: 0 < V <= Vp. 16-byte vector loads when Vp is a multiple of 16 / sizeof(floatX)
// and logits is 16-byte aligned, otherwise one element per thread.
// Variant 1 (ctx.classifier_variant, the default; LLMC_CLASSIFIER_VARIANT=0 for variant 0):
// fused_classifier_staged_row_kernel on the vector path where the device has Vp * sizeof(floatX)
// of shared memory per block: the same arithmetic, bitwise the same results, each row staged in
// shared memory between the two passes (its comment has the floor and the reasoning).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "classifier.cuh"
#include "device_utils.cuh"
#include "launch.cuh"
#include "matmul.cuh"
#include "nvtx.h"

namespace llmc {

namespace {

// Threads per row. 1024 leaves room for 2 blocks per SM: 264 rows of GPT-2's 100 KB (bf16) in
// flight on an H100, 26 MB, so pass 2's re-read of each row hits the 50 MB L2; with 512 threads,
// 4 blocks per SM keep 53 MB in flight and pass 2 goes back to DRAM (docs/perf-log.md).
constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kLossThreads = 1024;

// A softmax normalizer in progress: running max m and s = sum exp(x - m).
struct MaxSum {
    float m;
    float s;
};

// exp(d) for d = x - m <= 0, the softmax's per-element exponential: a multiply by log2(e) and
// the special-function unit's ex2.approx in its flush-to-zero form (2 instructions; __expf
// compiles to the same two plus a range test and two multiplies that make results below 2^-126
// denormal instead of 0, and expf to about 8; the kernels compute two exponentials per logit).
// For the same product d log2(e) ex2.approx.ftz and __expf give the same bits down to 2^-126.
// CUDA documents __expf's error as at most 2 + floor(1.173 |d|) ulp, so the absolute error of
// p = exp(d) <= 1 is at most p (2 + 1.173 |d|) 2^-23 <= 2.4e-7 + 1.4e-7 |d| e^d <= 3e-7
// (|d| e^d <= 1/e), plus < 2^-126 where the flush makes it 0: far under the tests' bound of 5e-6
// on p (dev/test/test_classifier.cu).
__device__ __forceinline__ float exp_nonpositive(float d) { return fast_exp2(d * kLog2e); }

// Adds the values x[0..n) to a: rescales s once if they raise the max, then one exp each.
template <int n>
__device__ __forceinline__ void add_values(MaxSum& a, const float (&x)[n]) {
    float block_max = x[0];
#pragma unroll
    for (int k = 1; k < n; k++) {
        block_max = fmaxf(block_max, x[k]);
    }
    if (block_max > a.m) {
        a.s *= exp_nonpositive(a.m - block_max);  // exp(-inf) = 0 while a is empty
        a.m = block_max;
    }
#pragma unroll
    for (int k = 0; k < n; k++) {
        a.s += exp_nonpositive(x[k] - a.m);
    }
}

// Pass 1 on one pack: its kVec logits added to a, in column order.
template <int kVec>
__device__ __forceinline__ void add_pack(MaxSum& a, const Vec<floatX, kVec>& x) {
    float f[kVec];
#pragma unroll
    for (int k = 0; k < kVec; k++) {
        f[k] = to_float(x.v[k]);
    }
    add_values(a, f);
}

// kVec floats rounded to floatX; bf16 pairs by one packed conversion (the same bits as two).
template <int kVec>
__device__ __forceinline__ Vec<floatX, kVec> round_pack(const float (&g)[kVec]) {
    Vec<floatX, kVec> d;
    if constexpr (std::is_same_v<floatX, __nv_bfloat16> && kVec % 2 == 0) {
#pragma unroll
        for (int k = 0; k < kVec; k += 2) {
            *reinterpret_cast<__nv_bfloat162*>(&d.v[k]) = __floats2bfloat162_rn(g[k], g[k + 1]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            d.v[k] = from_float<floatX>(g[k]);
        }
    }
    return d;
}

// Pass 2 on the pack of columns c0 .. c0 + kVec - 1: (p - [i == target]) * dloss with
// p = exp(x - m) / s for the valid columns i < V, 0 for the padding. A full pack without the
// target (all but one or two of a row's) skips the per-column tests: there p - 0 is p.
template <int kVec>
__device__ __forceinline__ Vec<floatX, kVec> dlogits_pack(const Vec<floatX, kVec>& x, int c0,
                                                          MaxSum total, float inv_s, float dloss,
                                                          int target, int V) {
    float g[kVec];
    if (c0 + kVec <= V && (target < c0 || target >= c0 + kVec)) {
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            g[k] = exp_nonpositive(to_float(x.v[k]) - total.m) * inv_s * dloss;
        }
    } else {
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            const int i = c0 + k;
            g[k] = 0.0f;
            if (i < V) {
                const float prob = exp_nonpositive(to_float(x.v[k]) - total.m) * inv_s;
                g[k] = (prob - (i == target ? 1.0f : 0.0f)) * dloss;
            }
        }
    }
    return round_pack(g);
}

// Pass 2 on pack q of a row staged in shared memory. Pass 1 staged only the packs holding valid
// columns: the padding packs beyond them are zeros, not read.
template <int kVec>
__device__ __forceinline__ Vec<floatX, kVec> staged_dlogits_pack(const floatX* staged, int q,
                                                                 MaxSum total, float inv_s,
                                                                 float dloss, int target, int V) {
    if (q * kVec >= V) {
        const float zeros[kVec] = {};
        return round_pack(zeros);
    }
    return dlogits_pack(load_vec<kVec>(staged + (size_t)q * kVec), q * kVec, total, inv_s, dloss,
                        target, V);
}

// The block's normalizer from each thread's, in two all-reduces: the row max M (a butterfly in
// each warp, then one over the warps' maxima, in every warp), then each thread's s rescaled to
// M once, s exp(m - M), and summed the same way. One exponential a thread, where merging the
// (m, s) pairs in a tree took two at each of its ten levels. Fixed order, and every thread
// returns the same bits (a butterfly's lanes add the same pairs; IEEE addition commutes). The
// barriers also order the staged-row kernel's shared-memory row between its passes.
__device__ __forceinline__ MaxSum block_merge(MaxSum acc, float* warp_maxes, float* warp_sums) {
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    float m = warp_max(acc.m);
    if (lane == 0) {
        warp_maxes[warp] = m;
    }
    __syncthreads();
    m = warp_max(lane < kWarps ? warp_maxes[lane] : -INFINITY);
    // A thread with no columns has m = -inf and s = 0 (exp(-inf - M) would be NaN for M = -inf).
    float s = warp_sum(acc.m == -INFINITY ? 0.0f : acc.s * exp_nonpositive(acc.m - m));
    if (lane == 0) {
        warp_sums[warp] = s;
    }
    __syncthreads();
    s = warp_sum(lane < kWarps ? warp_sums[lane] : 0.0f);
    return {m, s};
}

// One block per row; see the file comment. Pass 1 reads only the V valid columns (whole packs,
// then the < kVec leftover columns one by one); pass 2 walks all Vp columns in packs.
template <int kVec>
__global__ void __launch_bounds__(kThreads)
    fused_classifier_online_softmax_kernel(floatX* __restrict__ logits,      // (N, Vp)
                                           float* __restrict__ losses,       // (N)
                                           const int* __restrict__ targets,  // (N)
                                           float dloss, int V, int Vp, bool write_dlogits) {
    __shared__ float warp_maxes[kWarps], warp_sums[kWarps];
    pdl_wait();
    pdl_launch_dependents();
    const int row = blockIdx.x;
    floatX* x = logits + (size_t)row * Vp;
    const int target = targets[row];
    const bool target_ok = target >= 0 && target < V;
    // Read before the barrier below, so before any thread overwrites the row in pass 2.
    const float target_logit = threadIdx.x == 0 && target_ok ? to_float(x[target]) : 0.0f;

    MaxSum acc = {-INFINITY, 0.0f};
    const int full_packs = V / kVec;
    for (int p = threadIdx.x; p < full_packs; p += kThreads) {
        add_pack(acc, load_vec<kVec>(x + (size_t)p * kVec));
    }
    for (int i = full_packs * kVec + threadIdx.x; i < V; i += kThreads) {
        const float f[1] = {to_float(x[i])};
        add_values(acc, f);
    }
    const MaxSum total = block_merge(acc, warp_maxes, warp_sums);
    if (threadIdx.x == 0) {
        // m - x[target] first: both are logits, so the difference loses nothing to their size.
        losses[row] = target_ok ? logf(total.s) + (total.m - target_logit) : NAN;
    }
    if (!write_dlogits) {
        return;
    }

    const float inv_s = 1.0f / total.s;
    for (int p = threadIdx.x; p < Vp / kVec; p += kThreads) {
        store_vec<kVec>(x + (size_t)p * kVec,
                        dlogits_pack(load_vec<kVec>(x + (size_t)p * kVec), p * kVec, total, inv_s,
                                     dloss, target, V));
    }
}

// Blocks per SM the staged-row kernel is compiled for (its register budget): 2 in bf16. An fp32
// row of GPT-2's Vp takes 196 KiB of shared memory, so one block a SM is all that fits there, and
// the bound of 2 (32 registers a thread) would make the kernel spill.
constexpr int kStagedRowBlocks = sizeof(floatX) == 2 ? 2 : 1;

// Variant 1 (Context::classifier_variant): the same arithmetic in the same order (bitwise the
// same losses and dlogits), with the row staged in shared memory. The floor is one read of the
// V logits and one write of the Vp dlogits, sizeof(floatX) * (V + Vp) bytes a row. The kernel
// above reads each row twice from the memory system: pass 1 from DRAM, pass 2 again from L2
// (2 blocks of a ~100 KB row per SM keep 26 MB in flight, under the 50 MB L2), so pass 2 waits on
// L2 latency with only the 2 rows of the SM to work on, and L2 evictions send part of it back
// to DRAM. Here pass 1 also stores each pack into shared memory (Vp * sizeof(floatX) bytes per
// block: 2 blocks per SM at GPT-2's Vp in bf16), and pass 2 reads it from there: the second pass
// costs shared-memory latency only, DRAM sees exactly the floor, and pass 1 keeps two packs per
// thread in flight. Needs Vp * sizeof(floatX) of shared memory per block (the launcher falls
// back to the kernel above where the device has less).
template <int kVec>
__global__ void __launch_bounds__(kThreads, kStagedRowBlocks)
    fused_classifier_staged_row_kernel(floatX* __restrict__ logits,      // (N, Vp)
                                       float* __restrict__ losses,       // (N)
                                       const int* __restrict__ targets,  // (N)
                                       float dloss, int V, int Vp, bool write_dlogits) {
    extern __shared__ uint4 staged_storage[];  // (Vp) floatX, 16-byte aligned
    __shared__ float warp_maxes[kWarps], warp_sums[kWarps];
    pdl_wait();
    pdl_launch_dependents();
    floatX* staged = reinterpret_cast<floatX*>(staged_storage);
    const int row = blockIdx.x;
    floatX* x = logits + (size_t)row * Vp;
    const int target = targets[row];
    const bool target_ok = target >= 0 && target < V;
    const float target_logit = threadIdx.x == 0 && target_ok ? to_float(x[target]) : 0.0f;

    MaxSum acc = {-INFINITY, 0.0f};
    const int full_packs = V / kVec;
    int p = threadIdx.x;
    // Two packs per iteration, both loads issued before either is used; added in pack order.
    for (; p + kThreads < full_packs; p += 2 * kThreads) {
        const Vec<floatX, kVec> a = load_vec<kVec>(x + (size_t)p * kVec);
        const Vec<floatX, kVec> b = load_vec<kVec>(x + (size_t)(p + kThreads) * kVec);
        store_vec<kVec>(staged + (size_t)p * kVec, a);
        store_vec<kVec>(staged + (size_t)(p + kThreads) * kVec, b);
        add_pack(acc, a);
        add_pack(acc, b);
    }
    if (p < full_packs) {
        const Vec<floatX, kVec> a = load_vec<kVec>(x + (size_t)p * kVec);
        store_vec<kVec>(staged + (size_t)p * kVec, a);
        add_pack(acc, a);
    }
    for (int i = full_packs * kVec + threadIdx.x; i < V; i += kThreads) {
        const float f[1] = {to_float(x[i])};
        add_values(acc, f);
    }
    // The pack holding the leftover columns, whole (Vp is a multiple of kVec), for pass 2.
    if (write_dlogits && threadIdx.x == 0 && full_packs * kVec < V) {
        store_vec<kVec>(staged + (size_t)full_packs * kVec,
                        load_vec<kVec>(x + (size_t)full_packs * kVec));
    }
    const MaxSum total = block_merge(acc, warp_maxes, warp_sums);  // also orders `staged`
    if (threadIdx.x == 0) {
        losses[row] = target_ok ? logf(total.s) + (total.m - target_logit) : NAN;
    }
    if (!write_dlogits) {
        return;
    }

    const float inv_s = 1.0f / total.s;
    for (int q = threadIdx.x; q < Vp / kVec; q += kThreads) {
        store_vec<kVec>(x + (size_t)q * kVec,
                        staged_dlogits_pack<kVec>(staged, q, total, inv_s, dloss, target, V));
    }
}

// One block: each thread sums a strided slice of losses in order, then a fixed tree.
__global__ void __launch_bounds__(kLossThreads)
    loss_accumulate_block_sum_kernel(float* __restrict__ loss,          // (1)
                                     const float* __restrict__ losses,  // (N)
                                     int N, float scale) {
    __shared__ float warp_totals[kLossThreads / kWarpSize];
    pdl_wait();
    pdl_launch_dependents();
    float acc = 0.0f;
    for (int i = threadIdx.x; i < N; i += kLossThreads) {
        acc += losses[i];
    }
    acc = warp_sum(acc);
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (lane == 0) {
        warp_totals[warp] = acc;
    }
    __syncthreads();
    if (warp != 0) {
        return;
    }
    float total = lane < kLossThreads / kWarpSize ? warp_totals[lane] : 0.0f;
    total = warp_sum(total);
    if (lane == 0) {
        *loss += total * scale;
    }
}

// The most dynamic shared memory the staged-row kernel may take on this device. Above 48 KiB a
// kernel must opt in: done once (a static initializer), so launches inside CUDA graph capture
// make no attribute calls.
size_t staged_row_smem_limit(const Context& ctx) {
    static const size_t limit = [&] {
        cudaFuncAttributes attr{};
        LLMC_CUDA_CHECK(cudaFuncGetAttributes(&attr, fused_classifier_staged_row_kernel<kVecX>));
        const size_t bytes = ctx.props.sharedMemPerBlockOptin - attr.sharedSizeBytes;
        LLMC_CUDA_CHECK(cudaFuncSetAttribute(fused_classifier_staged_row_kernel<kVecX>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)bytes));
        return bytes;
    }();
    return limit;
}

}  // namespace

void fused_classifier(const Context& ctx, floatX* logits, float* losses, const int* targets,
                      float dloss, int N, int V, int Vp, bool write_dlogits) {
    NvtxRange range("fused_classifier");
    LLMC_CHECK(N > 0 && V > 0 && V <= Vp, "fused_classifier: bad shape N=%d V=%d Vp=%d", N, V, Vp);
    LLMC_CHECK(logits != nullptr && losses != nullptr && targets != nullptr,
               "fused_classifier: logits, losses and targets must all be given");
    LLMC_CHECK(ctx.classifier_variant == 0 || ctx.classifier_variant == 1,
               "fused_classifier: variant %d does not exist (0 or 1)", ctx.classifier_variant);
    const bool vec = Vp % kVecX == 0 && aligned16(logits);
    const size_t staged_bytes = (size_t)Vp * sizeof(floatX);
    if (vec && ctx.classifier_variant == 1 && staged_bytes <= staged_row_smem_limit(ctx)) {
        launch_kernel(ctx, ctx.stream, fused_classifier_staged_row_kernel<kVecX>, N, kThreads,
                      staged_bytes, logits, losses, targets, dloss, V, Vp, write_dlogits);
    } else if (vec) {
        launch_kernel(ctx, ctx.stream, fused_classifier_online_softmax_kernel<kVecX>, N, kThreads,
                      0, logits, losses, targets, dloss, V, Vp, write_dlogits);
    } else {
        launch_kernel(ctx, ctx.stream, fused_classifier_online_softmax_kernel<1>, N, kThreads, 0,
                      logits, losses, targets, dloss, V, Vp, write_dlogits);
    }
}

void classifier_chunked(const Context& ctx, floatX* logits, float* losses, floatX* dlnf,
                        floatX* dwte, const floatX* lnf, const floatX* wte, const int* targets,
                        float dloss, int N, int C, int V, int Vp, int chunk_rows,
                        floatX* logits_copy, bool accumulate_dwte) {
    NvtxRange range("classifier_chunked");
    LLMC_CHECK(N > 0 && C > 0 && chunk_rows > 0,
               "classifier_chunked: bad shape N=%d C=%d chunk_rows=%d", N, C, chunk_rows);
    LLMC_CHECK((dlnf == nullptr) == (dwte == nullptr),
               "classifier_chunked: the backward needs both dlnf and dwte (or neither)");
    const bool backward = dlnf != nullptr;
    LLMC_CHECK(!(backward && logits_copy != nullptr),
               "classifier_chunked: logits can be copied out only without the backward, which "
               "overwrites them with dlogits");
    for (int r0 = 0; r0 < N; r0 += chunk_rows) {
        const int rows = std::min(chunk_rows, N - r0);
        const floatX* x = lnf + (size_t)r0 * C;
        matmul_forward(ctx, logits, x, wte, nullptr, rows, C, Vp);
        if (logits_copy != nullptr) {
            LLMC_CUDA_CHECK(cudaMemcpyAsync(logits_copy + (size_t)r0 * Vp, logits,
                                            (size_t)rows * Vp * sizeof(floatX),
                                            cudaMemcpyDeviceToDevice, ctx.stream));
        }
        fused_classifier(ctx, logits, losses + r0, targets + r0, dloss, rows, V, Vp, backward);
        if (backward) {
            // The first chunk writes dwte without accumulate_dwte; the rest add to it.
            matmul_backward(ctx, dlnf + (size_t)r0 * C, dwte, nullptr, nullptr, logits, x, wte,
                            rows, C, Vp, nullptr, accumulate_dwte || r0 > 0);
        }
    }
}

void loss_accumulate(const Context& ctx, float* loss, const float* losses, int N, float scale) {
    NvtxRange range("loss_accumulate");
    LLMC_CHECK(N > 0 && loss != nullptr && losses != nullptr,
               "loss_accumulate: needs N > 0 (got %d) and both buffers", N);
    launch_kernel(ctx, ctx.stream, loss_accumulate_block_sum_kernel, 1, kLossThreads, 0, loss,
                  losses, N, scale);
}

}  // namespace llmc
