// adamw.cu: one fused AdamW step over all parameter tensors (PyTorch semantics).
//
// Over the flat arrays params, grads (floatX) and m, v, master (float), total = offsets[count]:
//   scale = grad_clip > 0 ? min(1, grad_clip / (sqrt(*norm_squared) + 1e-6)) : 1
//   g = grad * scale;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p = p - lr * ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd_i * p)
// with wd_i = weight_decay for elements of tensors marked decayed, 0 otherwise; lr and t are
// read from device memory. m, v overwritten. With master: p is read from and written to
// master, params receives p rounded to floatX stochastically (bf16; see below). Without: p is
// params (rounded to nearest when floatX is bf16). When norm_squared is given and *norm_squared
// is not finite, every thread returns before touching memory (the step is skipped).
//   bytes per parameter = 2*sizeof(floatX) + 16 (+ 8 with master)
//
// Stochastic rounding to bf16: bf16 is the top 16 bits of the fp32 pattern, so adding a uniform
// 16-bit r to the pattern and truncating the low 16 bits rounds the magnitude up exactly when
// r >= 2^16 - low16, i.e. with probability low16 / 2^16, the value's fraction of the gap (exact
// values, low16 = 0, never move; carries into the exponent are the correct next neighbour).
// r = the top 16 bits of lowbias32(lowbias32(i_lo ^ k0) ^ i_hi ^ k1), with (k0, k1) from
// splitmix64 of (seed, t): a function of (seed, t, i) only.
//
// Elementwise, so deterministic. Grid-stride over packs of 4 elements (float4 loads of m, v,
// master) when every array is 16-byte aligned, otherwise one element per thread; the last
// total % 4 elements are done one by one. Measured bandwidth: docs/results.md.
#include <cstdint>
#include <type_traits>

#include "adamw.cuh"
#include "device_utils.cuh"
#include "launch.cuh"
#include "nvtx.h"

namespace llmc {

namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 4;
constexpr int kPack = 4;

// Per-step constants, the same for every element.
struct StepConstants {
    float lr, grad_scale, bias1, bias2;
    uint32_t key0, key1;  // the stochastic rounding's hash key for (seed, t)
};

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A 32-bit integer hash with full avalanche (Chris Wellons' lowbias32 constants).
__device__ __forceinline__ uint32_t lowbias32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

// 16 uniform random bits for element i of this step.
__device__ __forceinline__ uint32_t rounding_bits(const StepConstants& c, size_t i) {
    const uint32_t h = lowbias32(lowbias32((uint32_t)i ^ c.key0) ^ (uint32_t)(i >> 32) ^ c.key1);
    return h >> 16;
}

// The master value as params stores it: unchanged in the fp32 build; in bf16 rounded
// stochastically with the 16 random bits r (inf and NaN take round-to-nearest, which keeps them).
template <typename T>
__device__ __forceinline__ T round_from_master(float x, uint32_t r) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const uint32_t bits = __float_as_uint(x);
        if ((bits & 0x7F800000u) == 0x7F800000u) {
            return __float2bfloat16_rn(x);
        }
        return __ushort_as_bfloat16((unsigned short)((bits + r) >> 16));
    } else {
        return from_float<T>(x);
    }
}

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
    const uint64_t key = splitmix64(h.seed ^ splitmix64((uint64_t)(uint32_t)step_values->step));
    c.key0 = (uint32_t)key;
    c.key1 = (uint32_t)(key >> 32);
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

// One element's update; p, m, v in and out. Every operation is an explicit round-to-nearest
// intrinsic, so the compiler cannot contract them into FMAs differently in the whole-buffer and
// the ZeRO-1 kernel: both give the same bits (dev/test/test_adamw_sharded found a 1-ulp difference
// in the master weights on an H200 when this was plain arithmetic).
__device__ __forceinline__ void adamw_element(float& p, float& m, float& v, float grad, float wd,
                                              const AdamWHyper& h, const StepConstants& c) {
    const float g = __fmul_rn(grad, c.grad_scale);
    m = __fmaf_rn(h.beta1, m, __fmul_rn(__fsub_rn(1.0f, h.beta1), g));
    v = __fmaf_rn(h.beta2, v, __fmul_rn(__fmul_rn(__fsub_rn(1.0f, h.beta2), g), g));
    const float step =
        __fdiv_rn(__fdiv_rn(m, c.bias1), __fadd_rn(__fsqrt_rn(__fdiv_rn(v, c.bias2)), h.eps));
    p = __fsub_rn(p, __fmul_rn(c.lr, __fmaf_rn(wd, p, step)));
}

// kVec elements (kVec = kPack on the aligned path, 1 otherwise): params and grads at the global
// offset gi, m, v (and master) at the local offset li, element k decayed by wd[k]. gi == li in
// the whole-buffer kernel; in ZeRO-1 li is the offset in this rank's shard. The one update both
// kernels run, so they give the same bits (stochastic rounding draws from the global index).
template <int kVec, bool kMaster>
__device__ __forceinline__ void adamw_pack(floatX* __restrict__ params, float* __restrict__ master,
                                           float* __restrict__ m, float* __restrict__ v,
                                           const floatX* __restrict__ grads,
                                           const float (&wd)[kVec], const AdamWHyper& h,
                                           const StepConstants& c, size_t gi, size_t li) {
    const Vec<floatX, kVec> g = load_vec<kVec>(grads + gi);
    Vec<float, kVec> mv = load_vec<kVec>(m + li);
    Vec<float, kVec> vv = load_vec<kVec>(v + li);
    Vec<float, kVec> p;
    if constexpr (kMaster) {
        p = load_vec<kVec>(master + li);
    } else {
        const Vec<floatX, kVec> px = load_vec<kVec>(params + gi);
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            p.v[k] = to_float(px.v[k]);
        }
    }
    Vec<floatX, kVec> out;
#pragma unroll
    for (int k = 0; k < kVec; k++) {
        adamw_element(p.v[k], mv.v[k], vv.v[k], to_float(g.v[k]), wd[k], h, c);
        if constexpr (kMaster) {
            out.v[k] = round_from_master<floatX>(p.v[k], rounding_bits(c, gi + k));
        } else {
            out.v[k] = from_float<floatX>(p.v[k]);
        }
    }
    store_vec<kVec>(m + li, mv);
    store_vec<kVec>(v + li, vv);
    if constexpr (kMaster) {
        store_vec<kVec>(master + li, p);
    }
    store_vec<kVec>(params + gi, out);
}

// The whole buffer: element i's decay is its tensor's (a pack may span two tensors).
template <int kVec, bool kMaster>
__device__ __forceinline__ void adamw_whole_pack(floatX* __restrict__ params,
                                                 float* __restrict__ master, float* __restrict__ m,
                                                 float* __restrict__ v,
                                                 const floatX* __restrict__ grads,
                                                 const AdamWTensors& tensors, const AdamWHyper& h,
                                                 const StepConstants& c, size_t i) {
    float wd[kVec];
#pragma unroll
    for (int k = 0; k < kVec; k++) wd[k] = weight_decay_of(tensors, h.weight_decay, i + k);
    adamw_pack<kVec, kMaster>(params, master, m, v, grads, wd, h, c, i, i);
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
                       const float* __restrict__ norm_squared,           // (1) or null
                       size_t total) {
    pdl_wait();
    pdl_launch_dependents();
    if (norm_squared != nullptr &&
        (!isfinite(*norm_squared) || *norm_squared > step_values->max_norm_squared)) {
        return;  // a non-finite or outlier gradient: skip the step, leave every array as it is
    }
    const StepConstants c = step_constants(hyper, step_values, norm_squared);
    const size_t stride = (size_t)gridDim.x * kThreads;
    const size_t tid = (size_t)blockIdx.x * kThreads + threadIdx.x;
    const size_t packs = total / kVec;
    // The tensor of this thread's pack, advanced as the packs go up (one comparison per pack
    // instead of weight_decay_of's scan of every tensor per element, which made the kernel
    // issue-bound). A pack that ends in a later tensor takes the scan.
    int k = 0;
    for (size_t p = tid; p < packs; p += stride) {
        const size_t i = p * kVec;
        while (k + 1 < tensors.count && i >= tensors.offsets[k + 1]) k++;
        if (i + kVec <= tensors.offsets[k + 1]) {
            float wd[kVec];
            const float d = tensors.decayed[k] ? hyper.weight_decay : 0.0f;
#pragma unroll
            for (int q = 0; q < kVec; q++) wd[q] = d;
            adamw_pack<kVec, kMaster>(params, master, m, v, grads, wd, hyper, c, i, i);
        } else {
            adamw_whole_pack<kVec, kMaster>(params, master, m, v, grads, tensors, hyper, c, i);
        }
    }
    for (size_t i = packs * kVec + tid; i < total; i += stride) {
        adamw_whole_pack<1, kMaster>(params, master, m, v, grads, tensors, hyper, c, i);
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
    launch_kernel(ctx, ctx.stream, adamw_fused_kernel<kVec, kMaster>, blocks, kThreads, 0, params,
                  master, m, v, grads, tensors, hyper, step_values, norm_squared, total);
}

// ZeRO-1: local element j of the shard is global element map.global_index(k, j). A pack of kVec
// never crosses a chunk (the launcher checks every chunk and offset is a multiple of kVec), so
// its kVec elements are contiguous in both numberings and share one tensor.
template <int kVec, bool kMaster>
__global__ void __launch_bounds__(kThreads)
    adamw_sharded_kernel(floatX* __restrict__ params,       // (whole buffer)
                         float* __restrict__ master,        // (local), kMaster
                         float* __restrict__ m,             // (local)
                         float* __restrict__ v,             // (local)
                         const floatX* __restrict__ grads,  // (whole buffer)
                         llmc::ChunkMap map, AdamWHyper hyper,
                         const AdamWStepValues* __restrict__ step_values,  // (1)
                         const float* __restrict__ norm_squared) {         // (1) or null
    pdl_wait();
    pdl_launch_dependents();
    if (norm_squared != nullptr &&
        (!isfinite(*norm_squared) || *norm_squared > step_values->max_norm_squared)) {
        return;  // a non-finite or outlier gradient: skip the step, leave every array as it is
    }
    const StepConstants c = step_constants(hyper, step_values, norm_squared);
    const size_t stride = (size_t)gridDim.x * kThreads;
    const size_t packs = map.local_total() / kVec;
    for (size_t p = (size_t)blockIdx.x * kThreads + threadIdx.x; p < packs; p += stride) {
        const size_t j = p * kVec;
        const int k = map.tensor_of(j);
        float wd[kVec];
#pragma unroll
        for (int q = 0; q < kVec; q++) wd[q] = map.decayed[k] ? hyper.weight_decay : 0.0f;
        adamw_pack<kVec, kMaster>(params, master, m, v, grads, wd, hyper, c, map.global_index(k, j),
                                  j);
    }
}

template <int kVec, bool kMaster>
void launch_adamw_sharded(const Context& ctx, floatX* params, float* master, float* m, float* v,
                          const floatX* grads, const llmc::ChunkMap& map, const AdamWHyper& hyper,
                          const AdamWStepValues* step_values, const float* norm_squared) {
    const size_t wanted = (map.local_total() / kVec + kThreads - 1) / kThreads;
    const size_t cap = (size_t)kBlocksPerSm * ctx_num_sms(ctx);
    const int blocks = (int)(wanted < cap ? (wanted > 0 ? wanted : 1) : cap);
    launch_kernel(ctx, ctx.stream, adamw_sharded_kernel<kVec, kMaster>, blocks, kThreads, 0, params,
                  master, m, v, grads, map, hyper, step_values, norm_squared);
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

void adamw_update_sharded(const Context& ctx, floatX* params, float* master, float* m, float* v,
                          const floatX* grads, const llmc::ChunkMap& map, const AdamWHyper& hyper,
                          const AdamWStepValues* step_values, const float* norm_squared) {
    NvtxRange range("adamw_update_sharded");
    LLMC_CHECK(map.count >= 1 && map.count <= llmc::kChunkMaxTensors,
               "adamw_update_sharded: tensor count %d is outside [1, %d]", map.count,
               llmc::kChunkMaxTensors);
    LLMC_CHECK(params != nullptr && m != nullptr && v != nullptr && grads != nullptr &&
                   step_values != nullptr,
               "adamw_update_sharded: params, m, v, grads and step_values must all be given");
    LLMC_CHECK(hyper.grad_clip <= 0.0f || norm_squared != nullptr,
               "adamw_update_sharded: grad_clip = %g needs norm_squared", hyper.grad_clip);
    if (map.local_total() == 0) {
        return;
    }
    bool vec = aligned16(params) && aligned16(m) && aligned16(v) && aligned16(grads) &&
               (master == nullptr || aligned16(master));
    for (int k = 0; k < map.count; k++) {
        vec = vec && map.chunk[k] % kPack == 0 && map.offset[k] % kPack == 0 &&
              map.slice[k] % kPack == 0;
    }
    if (master != nullptr) {
        if (vec) {
            launch_adamw_sharded<kPack, true>(ctx, params, master, m, v, grads, map, hyper,
                                              step_values, norm_squared);
        } else {
            launch_adamw_sharded<1, true>(ctx, params, master, m, v, grads, map, hyper, step_values,
                                          norm_squared);
        }
    } else {
        if (vec) {
            launch_adamw_sharded<kPack, false>(ctx, params, nullptr, m, v, grads, map, hyper,
                                               step_values, norm_squared);
        } else {
            launch_adamw_sharded<1, false>(ctx, params, nullptr, m, v, grads, map, hyper,
                                           step_values, norm_squared);
        }
    }
}

}  // namespace llmc
