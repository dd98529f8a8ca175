// global_norm.cu: squared L2 norm of a flat array (all gradients), deterministically.
//
//   global_norm_squared: *out = sum_i values[i]^2 over n values, in float  (overwrites *out)
//     1. G = kBlocksPerSm * SMs blocks of kThreads stride over the array in packs of 16 bytes
//        (of one element where values is not 16-byte aligned); thread t of the grid adds the
//        squares of its packs t, t + S, t + 2S, ... (S = G * kThreads) in that order into one
//        float (one fused multiply-add per element), then its element of the last n % (pack
//        size); each block sums its threads in a fixed tree, partials[block] = block sum;
//     2. one block sums the G partials in a fixed tree into *out.
//     G depends only on the device, so the summation order, and with it every bit of the
//     result, is the same from run to run.
//     bytes = sizeof(floatX) * n + 8 * G
//   global_norm_squared_sharded: the same over the elements a ChunkMap picks (ZeRO-1: a rank's
//     chunks), thread t taking packs t, t + S, ... of the map's local numbering.
// Scratch (global_norm_scratch_bytes): G floats.
//
// Two kernels per pass 1 (ctx.global_norm_variant, LLMC_GLOBAL_NORM_VARIANT), adding the same
// squares in the same order, so their bits are equal:
//   0: one pack per trip of the stride loop: the sum of a pack waits for its load, so each thread
//      has one 16-byte load in flight, 16 KiB per SM at kBlocksPerSm * kThreads = 1024 threads:
//      too few to cover the memory latency at full bandwidth (Little's law: ~3 TB/s / 132 SMs x
//      ~1-2 us = ~25-45 KB per SM);
//   1 (default): kLoads packs per trip, all loaded before any is summed: kLoads * 16 KiB in
//      flight per SM. Its sharded kernel keeps its thread's tensor as the packs go up (one
//      comparison per pack) instead of comparing against every tensor's offset per pack.
// 16-byte vector loads when values is 16-byte aligned (and, sharded, every chunk, slice and
// offset a multiple of the vector width); otherwise one element per load.
#include <cstdint>

#include "device_utils.cuh"
#include "global_norm.cuh"
#include "launch.cuh"
#include "nvtx.h"

namespace llmc {

namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 2;
constexpr int kFinalThreads = 1024;
constexpr int kLoads = 4;  // variant 1: packs loaded per trip, per thread

// Sum of x over the block (kBlockThreads threads), in a fixed order; valid in thread 0.
template <int kBlockThreads>
__device__ __forceinline__ float block_sum(float x) {
    __shared__ float warp_totals[kBlockThreads / kWarpSize];
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    x = warp_sum(x);
    if (lane == 0) {
        warp_totals[warp] = x;
    }
    __syncthreads();
    float total = 0.0f;
    if (warp == 0) {
        total = lane < kBlockThreads / kWarpSize ? warp_totals[lane] : 0.0f;
        total = warp_sum(total);
    }
    return total;
}

// acc plus the squares of the pack's elements, in order: the one way every kernel here adds a
// pack.
template <int kVec>
__device__ __forceinline__ float add_squares(float acc, const Vec<floatX, kVec>& v) {
#pragma unroll
    for (int k = 0; k < kVec; k++) {
        const float x = to_float(v.v[k]);
        acc = __fmaf_rn(x, x, acc);
    }
    return acc;
}

// The last n % kVec values, one each for the first threads of the grid.
template <int kVec>
__device__ __forceinline__ float add_tail_squares(float acc, const floatX* __restrict__ values,
                                                  size_t n, size_t tid, size_t stride) {
    for (size_t i = n / kVec * kVec + tid; i < n; i += stride) {
        const float x = to_float(values[i]);
        acc = __fmaf_rn(x, x, acc);
    }
    return acc;
}

template <int kVec>
__global__ void __launch_bounds__(kThreads)
    sum_of_squares_block_partials_kernel(float* __restrict__ partials,       // (G)
                                         const floatX* __restrict__ values,  // (n)
                                         size_t n) {
    pdl_wait();
    pdl_launch_dependents();
    const size_t stride = (size_t)gridDim.x * kThreads;
    const size_t tid = (size_t)blockIdx.x * kThreads + threadIdx.x;
    const size_t packs = n / kVec;
    float acc = 0.0f;
    for (size_t p = tid; p < packs; p += stride) {
        acc = add_squares<kVec>(acc, load_vec<kVec>(values + p * kVec));
    }
    acc = add_tail_squares<kVec>(acc, values, n, tid, stride);
    const float total = block_sum<kThreads>(acc);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = total;
    }
}

// Variant 1: packs p + u * stride (u < kLoads) loaded in one trip; past the end, zeros (whose
// squares leave the sum's bits as they are).
template <int kVec>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    sum_of_squares_batched_partials_kernel(float* __restrict__ partials,       // (G)
                                           const floatX* __restrict__ values,  // (n)
                                           size_t n) {
    pdl_wait();
    pdl_launch_dependents();
    const size_t stride = (size_t)gridDim.x * kThreads;
    const size_t tid = (size_t)blockIdx.x * kThreads + threadIdx.x;
    const size_t packs = n / kVec;
    float acc = 0.0f;
    for (size_t p = tid; p < packs; p += kLoads * stride) {
        Vec<floatX, kVec> v[kLoads] = {};
#pragma unroll
        for (int u = 0; u < kLoads; u++) {
            const size_t q = p + u * stride;
            if (q < packs) v[u] = load_vec<kVec>(values + q * kVec);
        }
#pragma unroll
        for (int u = 0; u < kLoads; u++) {
            acc = add_squares<kVec>(acc, v[u]);
        }
    }
    acc = add_tail_squares<kVec>(acc, values, n, tid, stride);
    const float total = block_sum<kThreads>(acc);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = total;
    }
}

__global__ void __launch_bounds__(kFinalThreads)
    sum_partials_kernel(float* __restrict__ out,             // (1)
                        const float* __restrict__ partials,  // (G)
                        int G) {
    pdl_wait();
    pdl_launch_dependents();
    float acc = 0.0f;
    for (int i = threadIdx.x; i < G; i += kFinalThreads) {
        acc += partials[i];
    }
    const float total = block_sum<kFinalThreads>(acc);
    if (threadIdx.x == 0) {
        *out = total;
    }
}

// The sum of squares of the map's chunks: packs of kVec never cross a chunk (checked by the
// launcher), each is read at its global index.
template <int kVec>
__global__ void __launch_bounds__(kThreads)
    sum_of_squares_sharded_partials_kernel(float* __restrict__ partials,       // (G)
                                           const floatX* __restrict__ values,  // (whole buffer)
                                           llmc::ChunkMap map) {
    pdl_wait();
    pdl_launch_dependents();
    const size_t stride = (size_t)gridDim.x * kThreads;
    const size_t packs = map.local_total() / kVec;
    float acc = 0.0f;
    for (size_t p = (size_t)blockIdx.x * kThreads + threadIdx.x; p < packs; p += stride) {
        const size_t j = p * kVec;
        acc =
            add_squares<kVec>(acc, load_vec<kVec>(values + map.global_index(map.tensor_of(j), j)));
    }
    const float total = block_sum<kThreads>(acc);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = total;
    }
}

// Variant 1 of the sharded kernel: kLoads packs per trip, and the tensor of the thread's pack
// kept as its packs go up (one comparison per pack instead of one per tensor).
template <int kVec>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    sum_of_squares_sharded_batched_partials_kernel(
        float* __restrict__ partials,       // (G)
        const floatX* __restrict__ values,  // (whole buffer)
        llmc::ChunkMap map) {
    pdl_wait();
    pdl_launch_dependents();
    const size_t stride = (size_t)gridDim.x * kThreads;
    const size_t packs = map.local_total() / kVec;
    int k = 0;
    float acc = 0.0f;
    for (size_t p = (size_t)blockIdx.x * kThreads + threadIdx.x; p < packs; p += kLoads * stride) {
        Vec<floatX, kVec> v[kLoads] = {};
#pragma unroll
        for (int u = 0; u < kLoads; u++) {
            const size_t j = (p + u * stride) * kVec;
            if (j < packs * kVec) {
                while (k + 1 < map.count && j >= map.local_offset[k + 1]) k++;
                v[u] = load_vec<kVec>(values + map.global_index(k, j));
            }
        }
#pragma unroll
        for (int u = 0; u < kLoads; u++) {
            acc = add_squares<kVec>(acc, v[u]);
        }
    }
    const float total = block_sum<kThreads>(acc);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = total;
    }
}

int num_partials(const Context& ctx) { return kBlocksPerSm * ctx_num_sms(ctx); }

void check_variant(const Context& ctx, const char* op) {
    LLMC_CHECK(ctx.global_norm_variant == 0 || ctx.global_norm_variant == 1,
               "%s: variant %d does not exist (0 or 1)", op, ctx.global_norm_variant);
}

}  // namespace

size_t global_norm_scratch_bytes(const Context& ctx) {
    return (size_t)num_partials(ctx) * sizeof(float);
}

void global_norm_squared(const Context& ctx, float* out, void* scratch, const floatX* values,
                         size_t n) {
    NvtxRange range("global_norm_squared");
    LLMC_CHECK(out != nullptr && scratch != nullptr && (values != nullptr || n == 0),
               "global_norm_squared: out, scratch and values must be given");
    LLMC_CHECK(reinterpret_cast<uintptr_t>(scratch) % sizeof(float) == 0,
               "global_norm_squared: scratch must be float-aligned");
    check_variant(ctx, "global_norm_squared");
    const int G = num_partials(ctx);
    float* partials = static_cast<float*>(scratch);
    const bool batched = ctx.global_norm_variant == 1;
    if (aligned16(values)) {
        launch_kernel(ctx, ctx.stream,
                      batched ? sum_of_squares_batched_partials_kernel<kVecX>
                              : sum_of_squares_block_partials_kernel<kVecX>,
                      G, kThreads, 0, partials, values, n);
    } else {
        launch_kernel(ctx, ctx.stream,
                      batched ? sum_of_squares_batched_partials_kernel<1>
                              : sum_of_squares_block_partials_kernel<1>,
                      G, kThreads, 0, partials, values, n);
    }
    launch_kernel(ctx, ctx.stream, sum_partials_kernel, 1, kFinalThreads, 0, out, partials, G);
}

void global_norm_squared_sharded(const Context& ctx, float* out, void* scratch,
                                 const floatX* values, const llmc::ChunkMap& map) {
    NvtxRange range("global_norm_squared_sharded");
    LLMC_CHECK(out != nullptr && scratch != nullptr && values != nullptr,
               "global_norm_squared_sharded: out, scratch and values must be given");
    check_variant(ctx, "global_norm_squared_sharded");
    bool vec = aligned16(values);
    for (int k = 0; k < map.count; k++) {
        vec = vec && map.chunk[k] % kVecX == 0 && map.offset[k] % kVecX == 0 &&
              map.slice[k] % kVecX == 0;
    }
    const int G = num_partials(ctx);
    float* partials = static_cast<float*>(scratch);
    const bool batched = ctx.global_norm_variant == 1;
    if (vec) {
        launch_kernel(ctx, ctx.stream,
                      batched ? sum_of_squares_sharded_batched_partials_kernel<kVecX>
                              : sum_of_squares_sharded_partials_kernel<kVecX>,
                      G, kThreads, 0, partials, values, map);
    } else {
        launch_kernel(ctx, ctx.stream,
                      batched ? sum_of_squares_sharded_batched_partials_kernel<1>
                              : sum_of_squares_sharded_partials_kernel<1>,
                      G, kThreads, 0, partials, values, map);
    }
    launch_kernel(ctx, ctx.stream, sum_partials_kernel, 1, kFinalThreads, 0, out, partials, G);
}

}  // namespace llmc
