// global_norm.cu: squared L2 norm of a flat array (all gradients), deterministically.
//
//   global_norm_squared: *out = sum_i values[i]^2 over n values, in float  (overwrites *out)
//     1. G = kBlocksPerSm * SMs blocks stride over the array; each thread sums its squares in
//        order, each block sums its threads in a fixed tree, partials[block] = block sum;
//     2. one block sums the G partials in a fixed tree into *out.
//     G depends only on the device, so the summation order, and with it every bit of the
//     result, is the same from run to run.
//     bytes = sizeof(floatX) * n + 8 * G
// Scratch (global_norm_scratch_bytes): G floats.
// 16-byte vector loads when values is 16-byte aligned (n need not be a multiple of the vector
// width: the last n % (16 / sizeof(floatX)) values are read one by one).
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
        const Vec<floatX, kVec> v = load_vec<kVec>(values + p * kVec);
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            const float x = to_float(v.v[k]);
            acc += x * x;
        }
    }
    for (size_t i = packs * kVec + tid; i < n; i += stride) {
        const float x = to_float(values[i]);
        acc += x * x;
    }
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
        const Vec<floatX, kVec> v = load_vec<kVec>(values + map.global_index(map.tensor_of(j), j));
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            const float x = to_float(v.v[k]);
            acc += x * x;
        }
    }
    const float total = block_sum<kThreads>(acc);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = total;
    }
}

int num_partials(const Context& ctx) { return kBlocksPerSm * ctx_num_sms(ctx); }

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
    const int G = num_partials(ctx);
    float* partials = static_cast<float*>(scratch);
    if (reinterpret_cast<uintptr_t>(values) % 16 == 0) {
        launch_kernel(ctx, ctx.stream, sum_of_squares_block_partials_kernel<kVecX>, G, kThreads, 0,
                      partials, values, n);
    } else {
        launch_kernel(ctx, ctx.stream, sum_of_squares_block_partials_kernel<1>, G, kThreads, 0,
                      partials, values, n);
    }
    launch_kernel(ctx, ctx.stream, sum_partials_kernel, 1, kFinalThreads, 0, out, partials, G);
}

void global_norm_squared_sharded(const Context& ctx, float* out, void* scratch,
                                 const floatX* values, const llmc::ChunkMap& map) {
    NvtxRange range("global_norm_squared_sharded");
    LLMC_CHECK(out != nullptr && scratch != nullptr && values != nullptr,
               "global_norm_squared_sharded: out, scratch and values must be given");
    bool vec = reinterpret_cast<uintptr_t>(values) % 16 == 0;
    for (int k = 0; k < map.count; k++) {
        vec = vec && map.chunk[k] % kVecX == 0 && map.offset[k] % kVecX == 0 &&
              map.slice[k] % kVecX == 0;
    }
    const int G = num_partials(ctx);
    float* partials = static_cast<float*>(scratch);
    if (vec) {
        launch_kernel(ctx, ctx.stream, sum_of_squares_sharded_partials_kernel<kVecX>, G, kThreads,
                      0, partials, values, map);
    } else {
        launch_kernel(ctx, ctx.stream, sum_of_squares_sharded_partials_kernel<1>, G, kThreads, 0,
                      partials, values, map);
    }
    launch_kernel(ctx, ctx.stream, sum_partials_kernel, 1, kFinalThreads, 0, out, partials, G);
}

}  // namespace llmc
