// flash_attention_sm90.cuh: the Hopper (sm_90a) path of flash attention (wgmma, TMA, warp
// specialization), private to flash_attention.cu, which dispatches to it at run time, and to the
// per-op test and benchmark, which run it beside the mma.sync path.
//
// Same contract as flash_attention_forward (flash_attention.cuh): qkv (B, T, 3C) bf16 read in
// place, out (B, T, C) bf16 and lse (B, NH, T) float overwritten, causal, scale 1/sqrt(HS).
// Preconditions beyond the mma.sync path's: HS 64 or 128, a device of compute capability 9.0
// and a build with sm_90a code (flash_attention_sm90_available).
#pragma once
#include <cuda_bf16.h>

#include "context.cuh"
#include "flash_attention.cuh"

// flash_attention_sm90_available (declared in flash_attention.cuh) is true when the sm_90a
// kernels can run this head size here: HS 64 or 128, the device is compute capability 9.0, the
// loaded image has the sm_90a kernels (a build for compute_90a), and LLMC_FLASH_SM90 is not 0
// in the environment (the switch that forces the mma.sync path).

// Forward variants (tile pipeline and block order), all computing the same values; variant 0 is
// the default. Names for the benchmark's legend.
int flash_attention_sm90_forward_variants();
const char* flash_attention_sm90_forward_variant_name(int variant);

// Checks flash_attention_sm90_available (fails with a message otherwise) and launches.
void flash_attention_sm90_forward(const Context& ctx, __nv_bfloat16* out, float* lse,
                                  const __nv_bfloat16* qkv, int B, int T, int NH, int HS,
                                  int variant);
