// adamw.cuh: one fused AdamW kernel over all parameters (PyTorch semantics).
//   scale = grad_clip > 0 ? min(1, grad_clip / (sqrt(*norm_squared) + 1e-6)) : 1
//   g = grad * scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p = p - lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd_i * p )
// where wd_i is weight_decay for tensors marked decayed and 0 for the rest.
// lr and t are read from device memory (AdamWStepValues), so a captured CUDA graph replays
// with the current values. master (fp32 copy of the params) is used when non-null: the update
// runs on master and params receives the rounded value; in the fp32 build master is null.
#pragma once
#include "context.cuh"
#include "precision.cuh"

constexpr int kAdamWMaxTensors = 16;

struct AdamWStepValues {  // lives in device memory, written by the host before each step
    float lr;
    int step;  // t, 1-based
};

struct AdamWTensors {  // passed by value: tensor boundaries and which ones decay
    int count;
    size_t offsets[kAdamWMaxTensors + 1];  // offsets[count] == total
    int decayed[kAdamWMaxTensors];
};

struct AdamWHyper {
    float beta1, beta2, eps, weight_decay, grad_clip;
};

void adamw_update(const Context& ctx, floatX* params, float* master, float* m, float* v,
                  const floatX* grads, const AdamWTensors& tensors, const AdamWHyper& hyper,
                  const AdamWStepValues* step_values, const float* norm_squared);
