// precision.cuh: the one compile-time precision switch.
//
// floatX is the type of parameters, activations and gradients on the device:
//   make PRECISION=FP32  -> float          (matches the PyTorch fp32 reference tightly)
//   make PRECISION=BF16  -> __nv_bfloat16  (mixed precision; reductions stay in float)
// Every kernel loads through to_float() and stores through from_float(), so switching the
// type is the only change a kernel needs.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <library_types.h>

namespace llmc {

#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
constexpr cudaDataType_t kCudaFloatX = CUDA_R_16BF;
constexpr const char* kPrecisionName = "bf16";
#else
typedef float floatX;
constexpr cudaDataType_t kCudaFloatX = CUDA_R_32F;
constexpr const char* kPrecisionName = "fp32";
#endif

__host__ __device__ __forceinline__ float to_float(float x) { return x; }
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__host__ __device__ __forceinline__ T from_float(float x);
template <>
__host__ __device__ __forceinline__ float from_float<float>(float x) {
    return x;
}
template <>
__host__ __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

}  // namespace llmc
