// adamw.cu: one fused AdamW step over all parameter tensors (PyTorch semantics).
//
// Over the flat arrays params, grads (floatX) and m, v, master (float), total = offsets[count]:
//   scale = grad_clip > 0 ? min(1, grad_clip / (sqrt(*norm_squared) + 1e-6)) : 1
//   g = grad * scale;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p = p - lr * ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd_i * p)
// with wd_i = weight_decay for elements of tensors marked decayed, 0 otherwise; lr and t are
// read from device memory. m, v overwritten. With master: p is read from and written to
// master, params receives p rounded to floatX (round to nearest). Without: p is params.
//   bytes per parameter = 2*sizeof(floatX) + 16 (+ 8 with master)
// Elementwise, so deterministic. Grid-stride over packs of 4 elements (float4 loads of m, v,
// master) when every array is 16-byte aligned, otherwise one element per thread; the last
// total % 4 elements are done one by one.
// Last measured: not yet measured on a GPU.
#include <cstdint>

#include "adamw.cuh"
#include "device_utils.cuh"
#include "nvtx.h"

namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 4;
constexpr int kPack = 4;

// Per-step constants, the same for every element.
struct StepConstants {
    float lr, grad_scale, bias1, bias2;
};

__device__ __forceinline__ StepConstants step_constants(const AdamWHyper& h,
                                                        const AdamWStepValues* step_values,
                                                        const float* norm_squared) {
    StepConstants c;
    c.lr = step_values->lr;
    const float t = (float)step_values->step;
    c.bias1 = 1.0f - powf(h.beta1, t);
    c.bias2 = 1.0f - powf(h.beta2, t);
    c.grad_scale = 1.0f;
    if (h.grad_clip > 0.0f) {
        c.grad_scale = fminf(1.0f, h.grad_clip / (sqrtf(*norm_squared) + 1e-6f));
    }
    return c;
}

// The weight decay of element i: tensors are contiguous and in order, so it is the decay of
// the last tensor whose offset is <= i. Unrolled with constant indices, so the offsets stay
// in the kernel's parameter bank.
__device__ __forceinline__ float weight_decay_of(const AdamWTensors& t, float weight_decay,
                                                 size_t i) {
    int decayed = 0;
#pragma unroll
    for (int k = 0; k < kAdamWMaxTensors; k++) {
        if (k < t.count && i >= t.offsets[k]) {
            decayed = t.decayed[k];
        }
    }
    return decayed ? weight_decay : 0.0f;
}

// One element's update; p, m, v in and out.
__device__ __forceinline__ void adamw_element(float& p, float& m, float& v, float grad, float wd,
                                              const AdamWHyper& h, const StepConstants& c) {
    const float g = grad * c.grad_scale;
    m = h.beta1 * m + (1.0f - h.beta1) * g;
    v = h.beta2 * v + (1.0f - h.beta2) * g * g;
    const float step = (m / c.bias1) / (sqrtf(v / c.bias2) + h.eps);
    p = p - c.lr * (step + wd * p);
}

// kVec elements at offset i (kVec = kPack on the aligned path, 1 otherwise).
template <int kVec, bool kMaster>
__device__ __forceinline__ void adamw_pack(floatX* __restrict__ params, float* __restrict__ master,
                                           float* __restrict__ m, float* __restrict__ v,
                                           const floatX* __restrict__ grads,
                                           const AdamWTensors& tensors, const AdamWHyper& h,
                                           const StepConstants& c, size_t i) {
    const Vec<floatX, kVec> g = load_vec<kVec>(grads + i);
    Vec<float, kVec> mv = load_vec<kVec>(m + i);
    Vec<float, kVec> vv = load_vec<kVec>(v + i);
    Vec<float, kVec> p;
    if constexpr (kMaster) {
        p = load_vec<kVec>(master + i);
    } else {
        const Vec<floatX, kVec> px = load_vec<kVec>(params + i);
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            p.v[k] = to_float(px.v[k]);
        }
    }
    Vec<floatX, kVec> out;
#pragma unroll
    for (int k = 0; k < kVec; k++) {
        const float wd = weight_decay_of(tensors, h.weight_decay, i + k);
        adamw_element(p.v[k], mv.v[k], vv.v[k], to_float(g.v[k]), wd, h, c);
        out.v[k] = from_float<floatX>(p.v[k]);
    }
    store_vec<kVec>(m + i, mv);
    store_vec<kVec>(v + i, vv);
    if constexpr (kMaster) {
        store_vec<kVec>(master + i, p);
    }
    store_vec<kVec>(params + i, out);
}

template <int kVec, bool kMaster>
__global__ void __launch_bounds__(kThreads)
    adamw_fused_kernel(floatX* __restrict__ params,       // (total)
                       float* __restrict__ master,        // (total), kMaster
                       float* __restrict__ m,             // (total)
                       float* __restrict__ v,             // (total)
                       const floatX* __restrict__ grads,  // (total)
                       AdamWTensors tensors, AdamWHyper hyper,
                       const AdamWStepValues* __restrict__ step_values,  // (1)
                       const float* __restrict__ norm_squared,           // (1), grad_clip > 0
                       size_t total) {
    const StepConstants c = step_constants(hyper, step_values, norm_squared);
    const size_t stride = (size_t)gridDim.x * kThreads;
    const size_t tid = (size_t)blockIdx.x * kThreads + threadIdx.x;
    const size_t packs = total / kVec;
    for (size_t p = tid; p < packs; p += stride) {
        adamw_pack<kVec, kMaster>(params, master, m, v, grads, tensors, hyper, c, p * kVec);
    }
    for (size_t i = packs * kVec + tid; i < total; i += stride) {
        adamw_pack<1, kMaster>(params, master, m, v, grads, tensors, hyper, c, i);
    }
}

template <int kVec, bool kMaster>
void launch_adamw(const Context& ctx, floatX* params, float* master, float* m, float* v,
                  const floatX* grads, const AdamWTensors& tensors, const AdamWHyper& hyper,
                  const AdamWStepValues* step_values, const float* norm_squared) {
    const size_t total = tensors.offsets[tensors.count];
    const size_t wanted = (total / kVec + kThreads - 1) / kThreads;
    const size_t cap = (size_t)kBlocksPerSm * ctx_num_sms(ctx);
    const int blocks = (int)(wanted < cap ? (wanted > 0 ? wanted : 1) : cap);
    adamw_fused_kernel<kVec, kMaster><<<blocks, kThreads, 0, ctx.stream>>>(
        params, master, m, v, grads, tensors, hyper, step_values, norm_squared, total);
    CUDA_CHECK_LAST();
}

void check_tensors(const AdamWTensors& t) {
    LLMC_CHECK(t.count >= 1 && t.count <= kAdamWMaxTensors,
               "adamw_update: tensor count %d is outside [1, %d]", t.count, kAdamWMaxTensors);
    LLMC_CHECK(t.offsets[0] == 0, "adamw_update: offsets[0] must be 0 (got %zu)", t.offsets[0]);
    for (int k = 0; k < t.count; k++) {
        LLMC_CHECK(t.offsets[k] <= t.offsets[k + 1],
                   "adamw_update: tensor offsets must be nondecreasing (offsets[%d] = %zu > "
                   "offsets[%d] = %zu)",
                   k, t.offsets[k], k + 1, t.offsets[k + 1]);
    }
}

}  // namespace

void adamw_update(const Context& ctx, floatX* params, float* master, float* m, float* v,
                  const floatX* grads, const AdamWTensors& tensors, const AdamWHyper& hyper,
                  const AdamWStepValues* step_values, const float* norm_squared) {
    NvtxRange range("adamw_update");
    check_tensors(tensors);
    LLMC_CHECK(params != nullptr && m != nullptr && v != nullptr && grads != nullptr &&
                   step_values != nullptr,
               "adamw_update: params, m, v, grads and step_values must all be given");
    LLMC_CHECK(hyper.grad_clip <= 0.0f || norm_squared != nullptr,
               "adamw_update: grad_clip = %g needs norm_squared", hyper.grad_clip);
    if (tensors.offsets[tensors.count] == 0) {
        return;
    }
    const bool vec = aligned16(params) && aligned16(m) && aligned16(v) && aligned16(grads) &&
                     (master == nullptr || aligned16(master));
    if (master != nullptr) {
        if (vec) {
            launch_adamw<kPack, true>(ctx, params, master, m, v, grads, tensors, hyper, step_values,
                                      norm_squared);
        } else {
            launch_adamw<1, true>(ctx, params, master, m, v, grads, tensors, hyper, step_values,
                                  norm_squared);
        }
    } else {
        if (vec) {
            launch_adamw<kPack, false>(ctx, params, nullptr, m, v, grads, tensors, hyper,
                                       step_values, norm_squared);
        } else {
            launch_adamw<1, false>(ctx, params, nullptr, m, v, grads, tensors, hyper, step_values,
                                   norm_squared);
        }
    }
}
