// device_utils.cuh: small device helpers shared by the kernel files: 16-byte vector access,
// warp reductions (xor butterfly, so every lane ends with the same, order-fixed result),
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

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
inline size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

}  // namespace llmc
