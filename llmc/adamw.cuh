// adamw.cuh: one fused AdamW kernel over all parameters (PyTorch semantics).
//   scale = grad_clip > 0 ? min(1, grad_clip / (sqrt(*norm_squared) + 1e-6)) : 1
//   g = grad * scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p = p - lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd_i * p )
// where wd_i is weight_decay for tensors marked decayed and 0 for the rest.
// lr and t are read from device memory (AdamWStepValues), so a captured CUDA graph replays
// with the current values. master (fp32 copy of the params) is used when non-null: the update
// runs on master and params receives the rounded value; in the fp32 build master is null.
//
// Rounding master -> bf16 params is stochastic: the result is one of the two bf16 neighbours of
// the fp32 value, the one away from zero with probability equal to the value's fraction of the
// gap, so the rounding is unbiased and updates smaller than half a bf16 ulp still move params on
// average. The 16 random bits of element i come from a hash of (hyper.seed, t, i) alone: the
// same for any grid, device or run, so a resumed run reproduces the params bit for bit. bf16
// values stay exact, inf and NaN pass through. Without master (or in the fp32 build) params get
// the plain float result (rounded to nearest in a bf16 build).
//
// Non-finite steps are skipped: when norm_squared is given and *norm_squared is not finite
// (inf or NaN gradients), the kernel writes nothing, so params, master, m and v keep their
// values. The check reads device memory, so it holds inside a captured CUDA graph; the host
// sees the skipped step as the non-finite norm it gets back. norm_squared may be null only
// when grad_clip <= 0, and then no step is skipped.
#pragma once
#include <cmath>

#include "chunk_map.h"
#include "context.cuh"
#include "precision.cuh"

namespace llmc {

constexpr int kAdamWMaxTensors = 16;

struct AdamWStepValues {  // lives in device memory, written by the host before each step
    float lr;
    int step;  // t, 1-based
    // The update is skipped (every array left alone) when the squared gradient norm exceeds this:
    // the outlier ceiling of --skip-outliers (llmc/outlier.h); +inf: never.
    float max_norm_squared = INFINITY;
};

struct AdamWTensors {  // passed by value: tensor boundaries and which ones decay
    int count;
    size_t offsets[kAdamWMaxTensors + 1];  // offsets[count] == total
    int decayed[kAdamWMaxTensors];
};

struct AdamWHyper {
    float beta1, beta2, eps, weight_decay, grad_clip;
    // Seed of the stochastic rounding of master -> params (the trainer's -s seed): with t and the
    // element index it fixes every random bit, so equal seeds give bit-identical runs.
    unsigned long long seed;
};

void adamw_update(const Context& ctx, floatX* params, float* master, float* m, float* v,
                  const floatX* grads, const AdamWTensors& tensors, const AdamWHyper& hyper,
                  const AdamWStepValues* step_values, const float* norm_squared);

// The same update on some of the parameters (llmc::ChunkMap; ZeRO-1: the chunks one rank owns).
// master, m, v hold map.local_total() elements, the chunks concatenated; params and grads are
// the whole buffers, read and written at the chunks' global indices only. Weight decay per
// tensor from map.decayed. The stochastic rounding draws its bits from the GLOBAL index, so every
// element gets the value adamw_update would give it, whatever the chunks.
void adamw_update_sharded(const Context& ctx, floatX* params, float* master, float* m, float* v,
                          const floatX* grads, const llmc::ChunkMap& map, const AdamWHyper& hyper,
                          const AdamWStepValues* step_values, const float* norm_squared);

}  // namespace llmc
