// device_utils.cuh: small device helpers shared by the kernel files: 16-byte vector access,
// warp reductions (xor butterfly, so every lane ends with the same, order-fixed result), column
// sums of partial rows in a fixed order,
// exp2 and reciprocal on the special-function unit, alignment and rounding helpers, and the
// write of a gradient element (added to, or overwriting, what the buffer holds).
#pragma once
#include <cstddef>
#include <cstdint>

#include "precision.cuh"

namespace llmc {

constexpr int kWarpSize = 32;
// floatX elements in one 16-byte access: 4 in fp32, 8 in bf16.
constexpr int kVecX = 16 / sizeof(floatX);

// kVec elements of T moved as one aligned access (16 bytes when kVec * sizeof(T) == 16).
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
    T v[kVec];
};
template <int kVec, typename T>
__device__ __forceinline__ Vec<T, kVec> load_vec(const T* p) {
    return *reinterpret_cast<const Vec<T, kVec>*>(p);
}
template <int kVec, typename T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, kVec>& x) {
    *reinterpret_cast<Vec<T, kVec>*>(p) = x;
}

// A gradient element's new value from this micro-step's `sum`: added to the value it holds
// (accumulate), or written over it unread (the first micro-step of a step writes every gradient,
// so the step needs no zeroing pass over the gradients; gpt2.cuh).
template <typename T>
__device__ __forceinline__ void write_grad(T* dst, float sum, bool accumulate) {
    *dst = from_float<T>(accumulate ? to_float(*dst) + sum : sum);
}

// log2(e): exp(x) = 2^(x log2(e)).
constexpr float kLog2e = 1.4426950408889634f;

// 2^x and 1/x on the special-function unit, flush-to-zero forms: without .ftz the compiler
// adds a range check and two multiplies per call to produce denormal results, which no caller
// needs (probabilities and GELU terms below 2^-126 round away anyway).
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float fast_rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
        x += __shfl_xor_sync(0xffffffffu, x, offset);
    }
    return x;
}

__device__ __forceinline__ float warp_max(float x) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    }
    return x;
}

// One column's sum of `rows` rows of p (its leading dimension ld, in floats), by a block of
// (kWarpSize, GROUPS) threads, a column per threadIdx.x: group y adds rows y, y + GROUPS, ... in
// row order (unrolled, so that several loads are in flight), then the groups' sums are added in
// group order. The order depends on rows and GROUPS only, never on the device. Every thread of
// the block calls it (it holds a barrier); one with valid false reads nothing. Group 0's threads
// get the total, the others their group's sum.
template <int GROUPS>
__device__ __forceinline__ float column_sum_by_groups(const float* p, int rows, size_t ld,
                                                      bool valid) {
    __shared__ float group_sums[GROUPS][kWarpSize];
    float acc = 0.0f;
    if (valid) {
#pragma unroll 8
        for (int r = threadIdx.y; r < rows; r += GROUPS) acc += p[(size_t)r * ld];
    }
    group_sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0) return acc;
    float total = 0.0f;
#pragma unroll
    for (int g = 0; g < GROUPS; g++) total += group_sums[g][threadIdx.x];
    return total;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
inline size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

}  // namespace llmc
