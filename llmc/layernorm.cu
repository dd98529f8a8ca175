// layernorm.cu: layernorm forward, and layernorm backward with deterministic weight and bias
// gradients. (The residual add before a layernorm is in the projection GEMM's epilogue:
// matmul_forward_residual.)
//
// Shapes: inp, out, dout, dinp (N, C); weight, bias (C); mean, rstd (N) float.
//   forward : mean = sum(x) / C;  rstd = 1 / sqrt(sum((x - mean)^2) / C + 1e-5)  (two passes,
//             so a large mean does not cancel the variance);  out = (x - mean) * rstd * w + b.
//             out, mean, rstd overwritten.  bytes = sizeof(floatX) * (2*N*C + 2*C) + 8*N
//   backward: with xhat = (x - mean) * rstd and dn = dout * w,
//             dinp += rstd * (dn - mean_c(dn) - xhat * mean_c(dn * xhat))
//             dweight += sum_rows(dout * xhat);  dbias += sum_rows(dout)       (all accumulate;
//             the parameter gradients are written instead with accumulate_param_grads false)
//             bytes = sizeof(floatX) * (4*N*C + 5*C) + 8*N + 16*G*C  (G blocks of partials)
// One warp per row; the statistics and every sum are in float. The backward's weight and bias
// gradients are deterministic: each warp sums its rows (in row order) into its own slice of
// shared memory, each block sums its warps in order into a partial row of `scratch`, and a
// second kernel sums the G partial rows in a fixed order and adds them in.
// Preconditions: C <= kMaxC (so one warp's gradient slice fits in shared memory). 16-byte
// vector loads when C is a multiple of 16 / sizeof(floatX) and the tensors are 16-byte aligned,
// otherwise one element per lane. With vector loads and C <= 7 * 32 * kVecX (1792 in bf16, so
// every GPT-2 width) the row-in-registers kernels run: each row is read from memory once and
// the backward keeps each lane's weight/bias gradient sums in registers; they compute the same
// sums in the same order as the generic kernels, so results are bit-identical between the two.
// The backward's register-held kernels take rows up to kMaxBackwardRegisterIters * 32 * kVecX
// (1280 in bf16); wider rows with vector loads take the column-slice kernels (a pass for each
// row's two means, then slices of columns with their sums in registers), whose dinp is the
// warp-per-row kernel's but whose partial rows sum other rows per block (every variant takes
// them, so the variants still agree bit for bit).
// Backward variant 1 (ctx.layernorm_backward_variant, LLMC_LAYERNORM_BACKWARD_VARIANT=1):
// layernorm_backward_rows_in_flight_kernel where the register-held kernel would run, at most 32
// values per lane (C <= 1024 in bf16): the same sums in the same order with fewer dependent trips
// to memory (its comment has the floor and the reasoning); elsewhere the kernels above. Variant 2
// (LLMC_LAYERNORM_BACKWARD_VARIANT=2): layernorm_backward_staged_rows_kernel on the same rows,
// where each warp's next row waits in shared memory (cp.async) while it computes the current one;
// elsewhere (wider rows, C not a multiple of kVecX, or a block's rows past the device's shared
// memory: fp32 at C = 768 takes 152 KB, over sm_86/sm_89's 99 KB) the kernels above. All three
// variants give the same bits.
// Every kernel and the reduction start with pdl_wait() (launch.cuh).
// Measured bandwidth: docs/results.md.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "arch.cuh"
#include "device_utils.cuh"
#include "launch.cuh"
#include "layernorm.cuh"
#include "nvtx.h"

namespace llmc {

namespace {

constexpr int kForwardWarps = 8;  // rows per block in the forward
// The row-in-registers forward's bound. Given no minimum of blocks per SM, ptxas aims this kernel
// at the most blocks its registers allow and spills a few bytes for some row widths (fp32 on
// sm_80, sm_86 and sm_89; bf16 C = 1600 on sm_100); a minimum of one block lets it keep the row
// in registers. sm_90's code, the measured one, keeps the bound without a minimum.
#if LLMC_CUDA_ARCH == 90
#define LLMC_ROW_IN_REGISTERS_FORWARD_BOUNDS __launch_bounds__(kForwardWarps* kWarpSize)
#else
#define LLMC_ROW_IN_REGISTERS_FORWARD_BOUNDS __launch_bounds__(kForwardWarps* kWarpSize, 1)
#endif
constexpr float kEps = 1e-5f;
// Backward: up to 8 warps per block, each with a (2, C) float slice; 48 KiB is the shared
// memory a kernel gets without opting in, so C <= 6144 leaves room for at least one warp.
constexpr int kBackwardMaxWarps = 8;
constexpr size_t kBackwardSmemBytes = 48 * 1024;
// The backward's partial sums per column: dweight, dbias and the new dinp (dres_bias).
constexpr int kSums = 3;
constexpr int kMaxC = (int)(kBackwardSmemBytes / (kSums * sizeof(float)));
constexpr int kBackwardBlocksPerSm = 2;  // what fits: 2 x 256 threads x 128 registers
// Rows of up to kMaxRegisterIters * 32 * kVecX elements take the register-held kernels.
// 7 covers GPT-2's widest row in bf16 (C = 1600); 8 spills in the backward.
constexpr int kMaxRegisterIters = 7;
// The backward keeps three sums per column in registers (kSums): past 40 values per lane (5
// iterations in bf16) it spills, so wider rows (GPT-2 XL's C = 1600 in bf16) take the
// column-slice kernels. Up to 24 values per lane (GPT-2 small's C = 768) it fits in 128
// registers: 2 blocks per SM.
constexpr int kMaxBackwardRegisterIters =
    40 / kVecX < kMaxRegisterIters ? 40 / kVecX : kMaxRegisterIters;
constexpr int kBackwardTwoBlocksValues = 24;
// Partial-sum reduction: 32 columns per block, 8 groups of partial rows per column.
constexpr int kReduceCols = 32;
constexpr int kReduceGroups = 8;

// The kVec input values at x[c..c+kVec) of one row, as float.
template <int kVec>
__device__ __forceinline__ void load_input(float (&x)[kVec], const floatX* __restrict__ inp,
                                           size_t offset) {
    const Vec<floatX, kVec> a = load_vec<kVec>(inp + offset);
#pragma unroll
    for (int k = 0; k < kVec; k++) {
        x[k] = to_float(a.v[k]);
    }
}

// One warp per row, three passes over the row (sum; squared deviations; output). The passes
// after the first hit L1.
template <int kVec>
__global__ void __launch_bounds__(kForwardWarps* kWarpSize)
    layernorm_forward_warp_per_row_kernel(floatX* __restrict__ out,           // (N, C)
                                          float* __restrict__ mean,           // (N)
                                          float* __restrict__ rstd,           // (N)
                                          const floatX* __restrict__ inp,     // (N, C)
                                          const floatX* __restrict__ weight,  // (C)
                                          const floatX* __restrict__ bias,    // (C)
                                          int N, int C) {
    pdl_wait();
    pdl_launch_dependents();
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * kForwardWarps + threadIdx.x / kWarpSize;
    if (row >= N) {
        return;
    }
    const size_t base = (size_t)row * C;

    float sum = 0.0f;
    for (int c = lane * kVec; c < C; c += kWarpSize * kVec) {
        float x[kVec];
        load_input<kVec>(x, inp, base + c);
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            sum += x[k];
        }
    }
    const float m = warp_sum(sum) / (float)C;

    float sq = 0.0f;
    for (int c = lane * kVec; c < C; c += kWarpSize * kVec) {
        float x[kVec];
        load_input<kVec>(x, inp, base + c);
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            sq += (x[k] - m) * (x[k] - m);
        }
    }
    const float s = 1.0f / sqrtf(warp_sum(sq) / (float)C + kEps);

    for (int c = lane * kVec; c < C; c += kWarpSize * kVec) {
        float x[kVec];
        load_input<kVec>(x, inp, base + c);
        const Vec<floatX, kVec> w = load_vec<kVec>(weight + c);
        const Vec<floatX, kVec> b = load_vec<kVec>(bias + c);
        Vec<floatX, kVec> o;
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            o.v[k] = from_float<floatX>((x[k] - m) * s * to_float(w.v[k]) + to_float(b.v[k]));
        }
        store_vec<kVec>(out + base + c, o);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// The same forward with the row held in registers: lane `lane` owns the kVec-wide columns
// (i * 32 + lane) * kVec for i < kIters, so the row is read from memory once. Same sums in the
// same order as the kernel above, so the results are bit-identical. C <= kIters * 32 * kVec.
template <int kVec, int kIters>
__global__ void LLMC_ROW_IN_REGISTERS_FORWARD_BOUNDS
layernorm_forward_row_in_registers_kernel(floatX* __restrict__ out,           // (N, C)
                                          float* __restrict__ mean,           // (N)
                                          float* __restrict__ rstd,           // (N)
                                          const floatX* __restrict__ inp,     // (N, C)
                                          const floatX* __restrict__ weight,  // (C)
                                          const floatX* __restrict__ bias,    // (C)
                                          int N, int C) {
    pdl_wait();
    pdl_launch_dependents();
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * kForwardWarps + threadIdx.x / kWarpSize;
    if (row >= N) {
        return;
    }
    const size_t base = (size_t)row * C;
    float x[kIters][kVec];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kIters; i++) {
        const int c = (i * kWarpSize + lane) * kVec;
        if (c < C) {
            load_input<kVec>(x[i], inp, base + c);
#pragma unroll
            for (int k = 0; k < kVec; k++) {
                sum += x[i][k];
            }
        }
    }
    const float m = warp_sum(sum) / (float)C;
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < kIters; i++) {
        if ((i * kWarpSize + lane) * kVec < C) {
#pragma unroll
            for (int k = 0; k < kVec; k++) {
                sq += (x[i][k] - m) * (x[i][k] - m);
            }
        }
    }
    const float s = 1.0f / sqrtf(warp_sum(sq) / (float)C + kEps);
#pragma unroll
    for (int i = 0; i < kIters; i++) {
        const int c = (i * kWarpSize + lane) * kVec;
        if (c < C) {
            const Vec<floatX, kVec> w = load_vec<kVec>(weight + c);
            const Vec<floatX, kVec> b = load_vec<kVec>(bias + c);
            Vec<floatX, kVec> o;
#pragma unroll
            for (int k = 0; k < kVec; k++) {
                o.v[k] =
                    from_float<floatX>((x[i][k] - m) * s * to_float(w.v[k]) + to_float(b.v[k]));
            }
            store_vec<kVec>(out + base + c, o);
        }
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// A row's two means by one warp, lane l taking the packs of kVec columns from l * kVec, kWarpSize
// * kVec apart, then the warp's butterfly: (mean of dn, mean of dn * xhat) with dn = dout * weight
// and xhat = (inp - m) * s. The warp-per-row and the row-means kernels share it, so that their
// sums are the same, bit for bit.
template <int kVec>
__device__ __forceinline__ float2 warp_row_means(const floatX* dout, const floatX* inp,
                                                 const floatX* weight, size_t base, int C, float m,
                                                 float s, int lane) {
    float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
    for (int c = lane * kVec; c < C; c += kWarpSize * kVec) {
        const Vec<floatX, kVec> g = load_vec<kVec>(dout + base + c);
        const Vec<floatX, kVec> x = load_vec<kVec>(inp + base + c);
        const Vec<floatX, kVec> w = load_vec<kVec>(weight + c);
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            const float dn = to_float(g.v[k]) * to_float(w.v[k]);
            sum_dn += dn;
            sum_dn_xhat += dn * (to_float(x.v[k]) - m) * s;
        }
    }
    const float mean_dn = warp_sum(sum_dn) / (float)C;
    const float mean_dn_xhat = warp_sum(sum_dn_xhat) / (float)C;
    return make_float2(mean_dn, mean_dn_xhat);
}

// One warp per row (rows strided over the grid). Writes dinp and this block's partial row
// partials[blockIdx.x] = (sum of dout * xhat, sum of dout, sum of the new dinp) over the block's
// rows (the last: the bias gradient of the projection whose output dinp is the gradient of).
// Dynamic shared memory: warps * kSums * C floats.
template <int kVec>
__global__ void layernorm_backward_warp_per_row_kernel(floatX* __restrict__ dinp,     // (N, C)
                                                       float* __restrict__ partials,  // (G, 3, C)
                                                       const floatX* __restrict__ dout,    // (N, C)
                                                       const floatX* __restrict__ inp,     // (N, C)
                                                       const floatX* __restrict__ weight,  // (C)
                                                       const float* __restrict__ mean,     // (N)
                                                       const float* __restrict__ rstd,     // (N)
                                                       int N, int C) {
    extern __shared__ float warp_sums[];  // (warps, kSums, C)
    pdl_wait();
    pdl_launch_dependents();
    const int warps = blockDim.x / kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    float* dw_acc = warp_sums + (size_t)warp * kSums * C;
    float* db_acc = dw_acc + C;
    float* dr_acc = db_acc + C;
    for (int c = lane; c < kSums * C; c += kWarpSize) {
        dw_acc[c] = 0.0f;
    }
    __syncwarp();

    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        const size_t base = (size_t)row * C;
        const float m = mean[row];
        const float s = rstd[row];
        const float2 means = warp_row_means<kVec>(dout, inp, weight, base, C, m, s, lane);
        const float mean_dn = means.x, mean_dn_xhat = means.y;

        for (int c = lane * kVec; c < C; c += kWarpSize * kVec) {
            const Vec<floatX, kVec> g = load_vec<kVec>(dout + base + c);
            const Vec<floatX, kVec> x = load_vec<kVec>(inp + base + c);
            const Vec<floatX, kVec> w = load_vec<kVec>(weight + c);
            Vec<floatX, kVec> d = load_vec<kVec>(dinp + base + c);
#pragma unroll
            for (int k = 0; k < kVec; k++) {
                const float gk = to_float(g.v[k]);
                const float xhat = (to_float(x.v[k]) - m) * s;
                const float dn = gk * to_float(w.v[k]);
                d.v[k] =
                    from_float<floatX>(to_float(d.v[k]) + s * (dn - mean_dn - xhat * mean_dn_xhat));
                dw_acc[c + k] += gk * xhat;
                db_acc[c + k] += gk;
                dr_acc[c + k] += to_float(d.v[k]);
            }
            store_vec<kVec>(dinp + base + c, d);
        }
    }
    __syncthreads();
    // This block's partial row: its warps' slices summed in warp order.
    for (int c = threadIdx.x; c < kSums * C; c += blockDim.x) {
        float total = 0.0f;
        for (int w = 0; w < warps; w++) {
            total += warp_sums[(size_t)w * kSums * C + c];
        }
        partials[(size_t)blockIdx.x * kSums * C + c] = total;
    }
}

// dst[k] = (first ? 0 : dst[k]) + acc[k] for k < kVec (a multiple of 4; dst 16-byte aligned), by
// 16-byte shared-memory accesses. 0 + acc as in the warp-per-row kernel's sums, so the two kernels
// stay bit-identical.
template <int kVec>
__device__ __forceinline__ void add_in_order(float* dst, const float (&acc)[kVec], bool first) {
    static_assert(kVec % 4 == 0, "add_in_order: kVec must be a multiple of 4");
#pragma unroll
    for (int k = 0; k < kVec; k += 4) {
        float4 v =
            first ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : *reinterpret_cast<const float4*>(dst + k);
        v.x += acc[k];
        v.y += acc[k + 1];
        v.z += acc[k + 2];
        v.w += acc[k + 3];
        *reinterpret_cast<float4*>(dst + k) = v;
    }
}

// The end of the register-held backward kernels: warp w adds its lanes' column sums after warps
// 0..w-1 (the block's partial row in warp order, as the warp-per-row kernel sums it), then the
// block writes its row of partials. 16-byte shared-memory accesses: a lane's kVec columns are
// contiguous, and scalar accesses at that stride were 8-way bank conflicts that kept the other
// warps waiting at the barrier (ncu, B=4: barrier stalls 46% of the kernel's stall cycles).
template <int kVec, int kIters>
__device__ __forceinline__ void write_block_partials(float* __restrict__ partials,
                                                     float* __restrict__ block_sums,
                                                     const float (&dw)[kIters][kVec],
                                                     const float (&db)[kIters][kVec],
                                                     const float (&dr)[kIters][kVec], int C) {
    const int warps = blockDim.x / kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    for (int w = 0; w < warps; w++) {
        if (warp == w) {
#pragma unroll
            for (int i = 0; i < kIters; i++) {
                const int c = (i * kWarpSize + lane) * kVec;
                if (c < C) {
                    add_in_order<kVec>(block_sums + c, dw[i], w == 0);
                    add_in_order<kVec>(block_sums + C + c, db[i], w == 0);
                    add_in_order<kVec>(block_sums + 2 * C + c, dr[i], w == 0);
                }
            }
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < kSums * C; c += blockDim.x) {
        partials[(size_t)blockIdx.x * kSums * C + c] = block_sums[c];
    }
}

// The same backward with each row's dout read once into registers (inp is read again in the
// second pass, mostly from L1/L2) and each lane's column sums kept in registers (a lane owns the
// same columns in every row, as in the forward above), so the inner loop does no shared-memory
// read-modify-write. At the end the block adds its warps' sums in warp order in shared memory
// (kSums * C floats): the same order as the kernel above, so dinp and the partial rows are
// bit-identical to it. C <= kIters * 32 * kVec.
template <int kVec, int kIters>
__global__ void __launch_bounds__(kBackwardMaxWarps* kWarpSize,
                                  kIters* kVec <= kBackwardTwoBlocksValues ? 2 : 1)
    layernorm_backward_row_in_registers_kernel(floatX* __restrict__ dinp,          // (N, C)
                                               float* __restrict__ partials,       // (G, 3, C)
                                               const floatX* __restrict__ dout,    // (N, C)
                                               const floatX* __restrict__ inp,     // (N, C)
                                               const floatX* __restrict__ weight,  // (C)
                                               const float* __restrict__ mean,     // (N)
                                               const float* __restrict__ rstd,     // (N)
                                               int N, int C) {
    extern __shared__ float block_sums[];  // (kSums, C)
    pdl_wait();
    pdl_launch_dependents();
    const int warps = blockDim.x / kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    float dw[kIters][kVec], db[kIters][kVec], dr[kIters][kVec];
#pragma unroll
    for (int i = 0; i < kIters; i++) {
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            dw[i][k] = 0.0f;
            db[i][k] = 0.0f;
            dr[i][k] = 0.0f;
        }
    }
    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        const size_t base = (size_t)row * C;
        const float m = mean[row];
        const float s = rstd[row];
        // dout stays in registers; inp is read again in the second pass (from L1/L2: this warp
        // just read the row), which keeps the kernel at 2 blocks per SM with the third sum.
        Vec<floatX, kVec> g[kIters];
        float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
#pragma unroll
        for (int i = 0; i < kIters; i++) {
            const int c = (i * kWarpSize + lane) * kVec;
            if (c < C) {
                g[i] = load_vec<kVec>(dout + base + c);
                const Vec<floatX, kVec> x = load_vec<kVec>(inp + base + c);
                const Vec<floatX, kVec> w = load_vec<kVec>(weight + c);
#pragma unroll
                for (int k = 0; k < kVec; k++) {
                    const float dn = to_float(g[i].v[k]) * to_float(w.v[k]);
                    sum_dn += dn;
                    sum_dn_xhat += dn * (to_float(x.v[k]) - m) * s;
                }
            }
        }
        const float mean_dn = warp_sum(sum_dn) / (float)C;
        const float mean_dn_xhat = warp_sum(sum_dn_xhat) / (float)C;
#pragma unroll
        for (int i = 0; i < kIters; i++) {
            const int c = (i * kWarpSize + lane) * kVec;
            if (c < C) {
                const Vec<floatX, kVec> w = load_vec<kVec>(weight + c);
                const Vec<floatX, kVec> x = load_vec<kVec>(inp + base + c);
                Vec<floatX, kVec> d = load_vec<kVec>(dinp + base + c);
#pragma unroll
                for (int k = 0; k < kVec; k++) {
                    const float gk = to_float(g[i].v[k]);
                    const float xhat = (to_float(x.v[k]) - m) * s;
                    const float dn = gk * to_float(w.v[k]);
                    d.v[k] = from_float<floatX>(to_float(d.v[k]) +
                                                s * (dn - mean_dn - xhat * mean_dn_xhat));
                    dw[i][k] += gk * xhat;
                    db[i][k] += gk;
                    dr[i][k] += to_float(d.v[k]);
                }
                store_vec<kVec>(dinp + base + c, d);
            }
        }
    }
    write_block_partials<kVec, kIters>(partials, block_sums, dw, db, dr, C);
}

// Rows too wide for the register-held kernels (C > kMaxBackwardRegisterIters * 32 * kVec: GPT-2
// XL's C = 1600 in bf16, every GPT-2 width past 1280 in fp32) with vector loads: two kernels
// instead of the warp-per-row one, whose (kSums, C) float slice per warp left it 2 warps a block
// at C = 1600. The first writes each row's two means (mean_dn, mean_dn_xhat: the same sums in the
// same order as the other kernels' first pass); the second takes slices of kSliceIters column
// groups (blockIdx.y) of the rows of its warps (blockIdx.x), so that each lane keeps its slice's
// column sums in registers, 8 warps a block: dinp as the other kernels compute it, and the
// block's partial row for its columns, its warps' sums added in warp order.
constexpr int kSliceIters = 3;

template <int kVec>
__global__ void __launch_bounds__(kBackwardMaxWarps* kWarpSize)
    layernorm_backward_row_means_kernel(float2* __restrict__ row_means,     // (N)
                                        const floatX* __restrict__ dout,    // (N, C)
                                        const floatX* __restrict__ inp,     // (N, C)
                                        const floatX* __restrict__ weight,  // (C)
                                        const float* __restrict__ mean,     // (N)
                                        const float* __restrict__ rstd,     // (N)
                                        int N, int C) {
    pdl_wait();
    pdl_launch_dependents();
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= N) return;
    const size_t base = (size_t)row * C;
    const float2 means =
        warp_row_means<kVec>(dout, inp, weight, base, C, mean[row], rstd[row], lane);
    if (lane == 0) row_means[row] = means;
}

// Dynamic shared memory: (kSums, kSliceIters * 32 * kVec) floats.
template <int kVec>
__global__ void __launch_bounds__(kBackwardMaxWarps* kWarpSize, 2)
    layernorm_backward_column_slices_kernel(floatX* __restrict__ dinp,             // (N, C)
                                            float* __restrict__ partials,          // (G, 3, C)
                                            const float2* __restrict__ row_means,  // (N)
                                            const floatX* __restrict__ dout,       // (N, C)
                                            const floatX* __restrict__ inp,        // (N, C)
                                            const floatX* __restrict__ weight,     // (C)
                                            const float* __restrict__ mean,        // (N)
                                            const float* __restrict__ rstd,        // (N)
                                            int N, int C) {
    constexpr int kCols = kSliceIters * kWarpSize * kVec;  // columns of a slice
    extern __shared__ float block_sums[];                  // (kSums, kCols)
    pdl_wait();
    pdl_launch_dependents();
    const int warps = blockDim.x / kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    const int c0 = blockIdx.y * kCols;
    float dw[kSliceIters][kVec], db[kSliceIters][kVec], dr[kSliceIters][kVec];
#pragma unroll
    for (int i = 0; i < kSliceIters; i++) {
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            dw[i][k] = 0.0f;
            db[i][k] = 0.0f;
            dr[i][k] = 0.0f;
        }
    }
    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        const size_t base = (size_t)row * C;
        const float m = mean[row];
        const float s = rstd[row];
        const float2 means = row_means[row];
#pragma unroll
        for (int i = 0; i < kSliceIters; i++) {
            const int c = c0 + (i * kWarpSize + lane) * kVec;
            if (c < C) {
                const Vec<floatX, kVec> g = load_vec<kVec>(dout + base + c);
                const Vec<floatX, kVec> x = load_vec<kVec>(inp + base + c);
                const Vec<floatX, kVec> w = load_vec<kVec>(weight + c);
                Vec<floatX, kVec> d = load_vec<kVec>(dinp + base + c);
#pragma unroll
                for (int k = 0; k < kVec; k++) {
                    const float gk = to_float(g.v[k]);
                    const float xhat = (to_float(x.v[k]) - m) * s;
                    const float dn = gk * to_float(w.v[k]);
                    d.v[k] =
                        from_float<floatX>(to_float(d.v[k]) + s * (dn - means.x - xhat * means.y));
                    dw[i][k] += gk * xhat;
                    db[i][k] += gk;
                    dr[i][k] += to_float(d.v[k]);
                }
                store_vec<kVec>(dinp + base + c, d);
            }
        }
    }
    // The block's partial row for this slice: warp w adds after warps 0..w-1.
    for (int w = 0; w < warps; w++) {
        if (warp == w) {
#pragma unroll
            for (int i = 0; i < kSliceIters; i++) {
                const int c = (i * kWarpSize + lane) * kVec;
                if (c0 + c < C) {
                    add_in_order<kVec>(block_sums + c, dw[i], w == 0);
                    add_in_order<kVec>(block_sums + kCols + c, db[i], w == 0);
                    add_in_order<kVec>(block_sums + 2 * kCols + c, dr[i], w == 0);
                }
            }
        }
        __syncthreads();
    }
    for (int j = threadIdx.x; j < kSums * kCols; j += blockDim.x) {
        const int sum = j / kCols, c = c0 + j % kCols;
        if (c < C) partials[(size_t)blockIdx.x * kSums * C + (size_t)sum * C + c] = block_sums[j];
    }
}

// Variant 1 of the backward (Context::layernorm_backward_variant): the register-held kernel's
// arithmetic in its order, so dinp and the partial rows are bitwise the same, with the loads
// arranged for bandwidth. The floor is one read of dout, inp and dinp and one write of dinp,
// 4 * N * C * sizeof(floatX) bytes. The register-held kernel makes two dependent trips to memory
// per row (dout and inp; then, after the row's two warp reductions, dinp), with 16 warps per SM
// and one row per warp: about 3 KB then 1.5 KB in flight per warp at GPT-2 small's width, and
// two full memory latencies per row. Here each warp takes kRows rows at once (rows r, r + S, ...
// with S the grid's warp count: the same rows in the same order as there) and requests dout, inp
// and dinp of all of them together, before the reductions: one trip per kRows rows, 4.5 KB in
// flight per row. The column sums (3 * C / 32 floats per lane) and the kRows rows' dout and dinp
// held between the two passes need more than the 128 registers of two blocks per SM, so it runs
// one block of 8 warps per SM over the same grid (two waves): 8 warps x 2 rows x 4.5 KB, twice
// the register-held kernel's bytes in flight. inp is read again in the second pass (L1).
template <int kVec, int kIters, int kRows>
__global__ void __launch_bounds__(kBackwardMaxWarps* kWarpSize, 1)
    layernorm_backward_rows_in_flight_kernel(floatX* __restrict__ dinp,          // (N, C)
                                             float* __restrict__ partials,       // (G, 3, C)
                                             const floatX* __restrict__ dout,    // (N, C)
                                             const floatX* __restrict__ inp,     // (N, C)
                                             const floatX* __restrict__ weight,  // (C)
                                             const float* __restrict__ mean,     // (N)
                                             const float* __restrict__ rstd,     // (N)
                                             int N, int C) {
    extern __shared__ float block_sums[];  // (kSums, C)
    pdl_wait();
    pdl_launch_dependents();
    const int warps = blockDim.x / kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    const int stride = gridDim.x * warps;
    float dw[kIters][kVec], db[kIters][kVec], dr[kIters][kVec];
#pragma unroll
    for (int i = 0; i < kIters; i++) {
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            dw[i][k] = 0.0f;
            db[i][k] = 0.0f;
            dr[i][k] = 0.0f;
        }
    }
    for (int row0 = blockIdx.x * warps + warp; row0 < N; row0 += kRows * stride) {
        Vec<floatX, kVec> g[kRows][kIters], d[kRows][kIters];
        float m[kRows], s[kRows], mean_dn[kRows], mean_dn_xhat[kRows];
        {
            Vec<floatX, kVec> x[kRows][kIters];
#pragma unroll
            for (int j = 0; j < kRows; j++) {
                const int row = row0 + j * stride;
                if (row >= N) continue;
                const size_t base = (size_t)row * C;
#pragma unroll
                for (int i = 0; i < kIters; i++) {
                    const int c = (i * kWarpSize + lane) * kVec;
                    if (c < C) {
                        g[j][i] = load_vec<kVec>(dout + base + c);
                        x[j][i] = load_vec<kVec>(inp + base + c);
                        d[j][i] = load_vec<kVec>(dinp + base + c);
                    }
                }
                m[j] = mean[row];
                s[j] = rstd[row];
            }
#pragma unroll
            for (int j = 0; j < kRows; j++) {
                float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
                if (row0 + j * stride < N) {
#pragma unroll
                    for (int i = 0; i < kIters; i++) {
                        const int c = (i * kWarpSize + lane) * kVec;
                        if (c < C) {
                            const Vec<floatX, kVec> w = load_vec<kVec>(weight + c);
#pragma unroll
                            for (int k = 0; k < kVec; k++) {
                                const float dn = to_float(g[j][i].v[k]) * to_float(w.v[k]);
                                sum_dn += dn;
                                sum_dn_xhat += dn * (to_float(x[j][i].v[k]) - m[j]) * s[j];
                            }
                        }
                    }
                }
                mean_dn[j] = warp_sum(sum_dn) / (float)C;
                mean_dn_xhat[j] = warp_sum(sum_dn_xhat) / (float)C;
            }
        }
        // Rows in order, so each column sum adds the rows in the register-held kernel's order.
#pragma unroll
        for (int j = 0; j < kRows; j++) {
            const int row = row0 + j * stride;
            if (row >= N) continue;
            const size_t base = (size_t)row * C;
#pragma unroll
            for (int i = 0; i < kIters; i++) {
                const int c = (i * kWarpSize + lane) * kVec;
                if (c < C) {
                    const Vec<floatX, kVec> w = load_vec<kVec>(weight + c);
                    const Vec<floatX, kVec> x = load_vec<kVec>(inp + base + c);
#pragma unroll
                    for (int k = 0; k < kVec; k++) {
                        const float gk = to_float(g[j][i].v[k]);
                        const float xhat = (to_float(x.v[k]) - m[j]) * s[j];
                        const float dn = gk * to_float(w.v[k]);
                        d[j][i].v[k] =
                            from_float<floatX>(to_float(d[j][i].v[k]) +
                                               s[j] * (dn - mean_dn[j] - xhat * mean_dn_xhat[j]));
                        dw[i][k] += gk * xhat;
                        db[i][k] += gk;
                        dr[i][k] += to_float(d[j][i].v[k]);
                    }
                    store_vec<kVec>(dinp + base + c, d[j][i]);
                }
            }
        }
    }
    write_block_partials<kVec, kIters>(partials, block_sums, dw, db, dr, C);
}

// Rows per warp at once in the variant above: 2 where they fit in registers without spilling
// (up to 24 values per lane: GPT-2 small's C = 768 in bf16), else 1. Past 32 values per lane
// (C > 1024 in bf16) even one row spills, and the register-held kernel runs instead.
template <int kIters>
constexpr int kRowsInFlight = kIters* kVecX <= 24 ? 2 : 1;
constexpr int kRowsInFlightMaxValues = 32;

// Variant 2 of the backward: layernorm_backward_staged_rows_kernel, where variant 1 applies (at
// most kRowsInFlightMaxValues values per lane: C <= 1024 in bf16, C <= 896 in fp32).
//
// The register-held kernel holds three column sums per lane in registers (3 * kIters * kVec
// floats, 72 at C = 768 in bf16) and is capped at 128 registers for 16 warps per SM, which leaves
// no room to hold a second row's data: each row costs two dependent trips to memory (dout and inp,
// 3 KB at C = 768 in bf16; then dinp, 1.5 KB). Variant 1 requests whole rows up front
// but its registers allow only 8 warps per SM, which then spend the compute of their rows with
// nothing in flight. Here the rows wait in shared memory instead of registers: each warp keeps a
// ring of kStagedRowStages row buffers (dout, inp and dinp of one row, and the row's mean and
// rstd) filled by cp.async, and issues the copies of its next row before it computes the current
// one. cp.async holds no register while in flight, so the register budget is the column sums,
// the lane's weight values and one 16-byte chunk at a time: up to 24 values per lane (C = 768 in
// bf16) that is the register-held kernel's 128 registers and 16 warps per SM (2 blocks of 8,
// 76 KB of shared memory each at C = 768), now with one to two full rows (3 * C * sizeof(floatX)
// bytes each, 4.5 KB at C = 768 in bf16) requested per warp at every moment and a single trip to
// memory per row. Wider rows (C = 1024 in bf16, or fp32 at C = 768) run 8 warps per SM.
// Floor: sizeof(floatX) * (4 * N * C + 7 * C) + 8 * N bytes (dout, inp, dinp read, dinp written,
// weight read, dweight, dbias, dres_bias read and written, mean and rstd read), plus 12 * G * C
// bytes of partials written and read back (G = the grid, at most 2 blocks per SM).
// A lane copies and reads back only its own columns (and its own copy of mean and rstd), so
// cp.async.wait_group is the only synchronization the ring needs; the weight stays in registers.
// Same rows per warp, same launch shape and same sums in the same order as the register-held
// kernel: dinp and the partial rows are bitwise the same. Shared memory per block: warps *
// kStagedRowStages * staged_row_bytes(C), reused at the end for the warps' (kSums, C) slices,
// which the block sums in warp order with one barrier.
constexpr int kStagedRowStages = 2;

// One stage of the staged-rows kernel: dout, inp and dinp of a row (floatX), then the row's mean
// and rstd once per lane (2 floats a lane). A multiple of 16 bytes when C % kVecX == 0.
__host__ __device__ constexpr size_t staged_row_bytes(int C) {
    return 3 * (size_t)C * sizeof(floatX) + 2 * kWarpSize * sizeof(float);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
// 16 (or 4) bytes global -> shared, asynchronously. The "memory" clobbers keep the compiler from
// moving shared-memory accesses across the copies and the wait.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Rows r, r + S, r + 2S, ... of warp r (S = the grid's warp count), as in the register-held
// kernel. Dynamic shared memory: staged_rows_smem_bytes(warps, C).
template <int kVec, int kIters>
__global__ void __launch_bounds__(kBackwardMaxWarps* kWarpSize,
                                  kIters* kVec <= kBackwardTwoBlocksValues ? 2 : 1)
    layernorm_backward_staged_rows_kernel(floatX* __restrict__ dinp,          // (N, C)
                                          float* __restrict__ partials,       // (G, 3, C)
                                          const floatX* __restrict__ dout,    // (N, C)
                                          const floatX* __restrict__ inp,     // (N, C)
                                          const floatX* __restrict__ weight,  // (C)
                                          const float* __restrict__ mean,     // (N)
                                          const float* __restrict__ rstd,     // (N)
                                          int N, int C) {
    extern __shared__ float4 staged[];  // (warps, stages) rows; at the end (warps, kSums, C)
    pdl_wait();
    pdl_launch_dependents();
    const int warps = blockDim.x / kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    const int stride = gridDim.x * warps;
    const size_t stage_bytes = staged_row_bytes(C);
    unsigned char* ring =
        reinterpret_cast<unsigned char*>(staged) + (size_t)warp * kStagedRowStages * stage_bytes;

    // Row `row`'s copies into stage `stage` (none past N), as one commit group either way, so
    // that the group count, and with it the wait below, is the same for every lane and row.
    auto request = [&](int row, int stage) {
        if (row < N) {
            floatX* s_dout = reinterpret_cast<floatX*>(ring + stage * stage_bytes);
            float* s_stats = reinterpret_cast<float*>(s_dout + 3 * C) + 2 * lane;
            const size_t base = (size_t)row * C;
#pragma unroll
            for (int i = 0; i < kIters; i++) {
                const int c = (i * kWarpSize + lane) * kVec;
                if (c < C) {
                    cp_async16(s_dout + c, dout + base + c);
                    cp_async16(s_dout + C + c, inp + base + c);
                    cp_async16(s_dout + 2 * C + c, dinp + base + c);
                }
            }
            cp_async4(s_stats, mean + row);
            cp_async4(s_stats + 1, rstd + row);
        }
        cp_async_commit();
    };

    const int row0 = blockIdx.x * warps + warp;
#pragma unroll
    for (int j = 0; j < kStagedRowStages - 1; j++) {
        request(row0 + j * stride, j);
    }
    Vec<floatX, kVec> w[kIters];
    float dw[kIters][kVec], db[kIters][kVec], dr[kIters][kVec];
#pragma unroll
    for (int i = 0; i < kIters; i++) {
        const int c = (i * kWarpSize + lane) * kVec;
        if (c < C) {
            w[i] = load_vec<kVec>(weight + c);
        }
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            dw[i][k] = 0.0f;
            db[i][k] = 0.0f;
            dr[i][k] = 0.0f;
        }
    }

    int stage = 0;
    for (int row = row0; row < N; row += stride) {
        // The stage being refilled held the previous row, which this lane has finished reading.
        request(row + (kStagedRowStages - 1) * stride,
                stage == 0 ? kStagedRowStages - 1 : stage - 1);
        cp_async_wait<kStagedRowStages - 1>();  // this row's group has landed
        const floatX* s_dout = reinterpret_cast<const floatX*>(ring + stage * stage_bytes);
        const floatX* s_inp = s_dout + C;
        const floatX* s_dinp = s_inp + C;
        const float2 stats = reinterpret_cast<const float2*>(s_dinp + C)[lane];  // mean, rstd
        const float m = stats.x;
        const float s = stats.y;
        float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
#pragma unroll
        for (int i = 0; i < kIters; i++) {
            const int c = (i * kWarpSize + lane) * kVec;
            if (c < C) {
                const Vec<floatX, kVec> g = load_vec<kVec>(s_dout + c);
                const Vec<floatX, kVec> x = load_vec<kVec>(s_inp + c);
#pragma unroll
                for (int k = 0; k < kVec; k++) {
                    const float dn = to_float(g.v[k]) * to_float(w[i].v[k]);
                    sum_dn += dn;
                    sum_dn_xhat += dn * (to_float(x.v[k]) - m) * s;
                }
            }
        }
        const float mean_dn = warp_sum(sum_dn) / (float)C;
        const float mean_dn_xhat = warp_sum(sum_dn_xhat) / (float)C;
        const size_t base = (size_t)row * C;
#pragma unroll
        for (int i = 0; i < kIters; i++) {
            const int c = (i * kWarpSize + lane) * kVec;
            if (c < C) {
                const Vec<floatX, kVec> g = load_vec<kVec>(s_dout + c);
                const Vec<floatX, kVec> x = load_vec<kVec>(s_inp + c);
                Vec<floatX, kVec> d = load_vec<kVec>(s_dinp + c);
#pragma unroll
                for (int k = 0; k < kVec; k++) {
                    const float gk = to_float(g.v[k]);
                    const float xhat = (to_float(x.v[k]) - m) * s;
                    const float dn = gk * to_float(w[i].v[k]);
                    d.v[k] = from_float<floatX>(to_float(d.v[k]) +
                                                s * (dn - mean_dn - xhat * mean_dn_xhat));
                    dw[i][k] += gk * xhat;
                    db[i][k] += gk;
                    dr[i][k] += to_float(d.v[k]);
                }
                store_vec<kVec>(dinp + base + c, d);
            }
        }
        stage = stage + 1 == kStagedRowStages ? 0 : stage + 1;
    }

    // The block's partial row: every warp stores its sums in its own slice (the rings are free
    // once every warp is past its loop), then each column adds the slices in warp order, the
    // order of the register-held kernel's write_block_partials.
    cp_async_wait<0>();
    __syncthreads();
    float* slices = reinterpret_cast<float*>(staged);  // (warps, kSums, C)
    float* mine = slices + (size_t)warp * kSums * C;
#pragma unroll
    for (int i = 0; i < kIters; i++) {
        const int c = (i * kWarpSize + lane) * kVec;
        if (c < C) {
#pragma unroll
            for (int k = 0; k < kVec; k += 4) {
                *reinterpret_cast<float4*>(mine + c + k) =
                    make_float4(dw[i][k], dw[i][k + 1], dw[i][k + 2], dw[i][k + 3]);
                *reinterpret_cast<float4*>(mine + C + c + k) =
                    make_float4(db[i][k], db[i][k + 1], db[i][k + 2], db[i][k + 3]);
                *reinterpret_cast<float4*>(mine + 2 * C + c + k) =
                    make_float4(dr[i][k], dr[i][k + 1], dr[i][k + 2], dr[i][k + 3]);
            }
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < kSums * C; c += blockDim.x) {
        float total = 0.0f;
        for (int from = 0; from < warps; from++) {
            total += slices[(size_t)from * kSums * C + c];
        }
        partials[(size_t)blockIdx.x * kSums * C + c] = total;
    }
}

// Column sums of partials (G, 3C) in a fixed order, added into dweight | dbias | dres_bias (the
// last only when given: sums = 3, else 2), or written over them without accumulate. Block: 32
// columns x kReduceGroups groups; group y sums partial rows y, y + groups, ... in order, then group
// 0 sums the groups in order.
__global__ void layernorm_param_grads_reduce_kernel(floatX* __restrict__ dweight,        // (C)
                                                    floatX* __restrict__ dbias,          // (C)
                                                    floatX* __restrict__ dres_bias,      // (C)
                                                    const float* __restrict__ partials,  // (G, 3C)
                                                    int G, int C, int sums, bool accumulate) {
    static_assert(kReduceCols == kWarpSize, "column_sum_by_groups takes a warp's columns");
    pdl_wait();
    pdl_launch_dependents();
    const int col = blockIdx.x * kReduceCols + threadIdx.x;
    const float total =
        column_sum_by_groups<kReduceGroups>(partials + col, G, (size_t)kSums * C, col < sums * C);
    if (threadIdx.y != 0 || col >= sums * C) {
        return;
    }
    floatX* dst = col < C       ? dweight + col
                  : col < 2 * C ? dbias + (col - C)
                                : dres_bias + (col - 2 * C);
    write_grad(dst, total, accumulate);
}

// The backward's launch shape, a function of the device, (N, C) and the kernel only, so the
// scratch size and the launch agree. The warp-per-row kernel keeps kSums * C floats of shared
// memory per warp, which limits its warps per block; the register-held kernel keeps them once per
// block and always runs kBackwardMaxWarps warps (the other kernel's smaller count, 5 warps per
// block and 10 per SM at C = 768 with three sums, left it short of occupancy).
struct BackwardShape {
    int warps;   // per block
    int blocks;  // G, partial rows in scratch
};
BackwardShape backward_shape(const Context& ctx, int N, int C, bool register_kernel) {
    BackwardShape b;
    b.warps = (int)(kBackwardSmemBytes / (kSums * sizeof(float) * (size_t)C));
    if (b.warps > kBackwardMaxWarps || register_kernel) {
        b.warps = kBackwardMaxWarps;
    }
    const int wanted = (N + b.warps - 1) / b.warps;
    const int cap = kBackwardBlocksPerSm * ctx_num_sms(ctx);
    b.blocks = wanted < cap ? wanted : cap;
    return b;
}

// kIters of the register-held kernels for C (vector path), or 0 when C needs the generic one.
int register_iters(int C) {
    const int iters = (C + kWarpSize * kVecX - 1) / (kWarpSize * kVecX);
    return iters <= kMaxRegisterIters ? iters : 0;
}

// Whether the backward of rows of C takes the column-slice kernels (given vector loads).
bool column_slices(int C) {
    const int iters = register_iters(C);
    return C % kVecX == 0 && (iters == 0 || iters > kMaxBackwardRegisterIters);
}

// Dynamic shared memory of the staged-rows kernel: the warps' rings, or their (kSums, C) float
// slices at the end, whichever is larger.
size_t staged_rows_smem_bytes(int warps, int C) {
    return (size_t)warps *
           std::max(kStagedRowStages * staged_row_bytes(C), kSums * (size_t)C * sizeof(float));
}

// The most dynamic shared memory the staged-rows kernel may take on this device. Above 48 KiB a
// kernel must opt in: done once per instantiation (a static initializer), so launches inside CUDA
// graph capture make no attribute calls. All shared memory, no L1 preference: the kernel's rows
// go to shared memory past L1 (cp.async.cg) and the weight is read once.
template <int kIters>
size_t staged_rows_smem_limit(const Context& ctx) {
    static const size_t limit = [&] {
        auto kernel = layernorm_backward_staged_rows_kernel<kVecX, kIters>;
        cudaFuncAttributes attr{};
        LLMC_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
        const size_t bytes = ctx.props.sharedMemPerBlockOptin - attr.sharedSizeBytes;
        LLMC_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        LLMC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                             (int)cudaSharedmemCarveoutMaxShared));
        return bytes;
    }();
    return limit;
}

// Calls f(std::integral_constant<int, I>{}) for I = iters in 1..kMax (kMax <= 7; larger iters
// take kMax). Only I <= kMax are instantiated.
template <int kMax, typename F>
void with_iters(int iters, F f) {
    static_assert(kMax >= 1 && kMax <= 7, "with_iters: kMax must be in 1..7");
    if (iters <= 1) return f(std::integral_constant<int, 1>{});
    if constexpr (kMax >= 2)
        if (iters == 2) return f(std::integral_constant<int, 2>{});
    if constexpr (kMax >= 3)
        if (iters == 3) return f(std::integral_constant<int, 3>{});
    if constexpr (kMax >= 4)
        if (iters == 4) return f(std::integral_constant<int, 4>{});
    if constexpr (kMax >= 5)
        if (iters == 5) return f(std::integral_constant<int, 5>{});
    if constexpr (kMax >= 6)
        if (iters == 6) return f(std::integral_constant<int, 6>{});
    return f(std::integral_constant<int, kMax>{});
}

// kVec == kVecX: the row-in-registers kernel when C allows it; kVec == 1: the generic one.
template <int kVec>
void launch_layernorm_forward(const Context& ctx, floatX* out, float* mean, float* rstd,
                              const floatX* inp, const floatX* weight, const floatX* bias, int N,
                              int C) {
    const int blocks = (N + kForwardWarps - 1) / kForwardWarps;
    const int iters = kVec == kVecX ? register_iters(C) : 0;
    if (iters > 0) {
        with_iters<kMaxRegisterIters>(iters, [&](auto it) {
            launch_kernel(ctx, ctx.stream,
                          layernorm_forward_row_in_registers_kernel<kVecX, decltype(it)::value>,
                          blocks, kForwardWarps * kWarpSize, 0, out, mean, rstd, inp, weight, bias,
                          N, C);
        });
    } else {
        launch_kernel(ctx, ctx.stream, layernorm_forward_warp_per_row_kernel<kVec>, blocks,
                      kForwardWarps * kWarpSize, 0, out, mean, rstd, inp, weight, bias, N, C);
    }
}

void check_forward_args(const char* op, const floatX* out, const float* mean, const float* rstd,
                        const floatX* weight, const floatX* bias, int N, int C) {
    LLMC_CHECK(N > 0 && C > 0, "%s: bad shape N=%d C=%d", op, N, C);
    LLMC_CHECK(out != nullptr && mean != nullptr && rstd != nullptr && weight != nullptr &&
                   bias != nullptr,
               "%s: out, mean, rstd, weight and bias must all be given", op);
}

}  // namespace

void layernorm_forward(const Context& ctx, floatX* out, float* mean, float* rstd, const floatX* inp,
                       const floatX* weight, const floatX* bias, int N, int C) {
    NvtxRange range("layernorm_forward");
    check_forward_args("layernorm_forward", out, mean, rstd, weight, bias, N, C);
    LLMC_CHECK(out != inp, "layernorm_forward: out must not alias inp");
    const bool vec =
        C % kVecX == 0 && aligned16(out) && aligned16(inp) && aligned16(weight) && aligned16(bias);
    if (vec) {
        launch_layernorm_forward<kVecX>(ctx, out, mean, rstd, inp, weight, bias, N, C);
    } else {
        launch_layernorm_forward<1>(ctx, out, mean, rstd, inp, weight, bias, N, C);
    }
}

int layernorm_max_channels() { return kMaxC; }

size_t layernorm_backward_scratch_bytes(const Context& ctx, int N, int C) {
    LLMC_CHECK(N > 0 && C > 0 && C <= kMaxC, "layernorm backward: bad shape N=%d C=%d (C <= %d)", N,
               C, kMaxC);
    const int blocks =
        std::max(backward_shape(ctx, N, C, true).blocks, backward_shape(ctx, N, C, false).blocks);
    // The partial rows, then (column-slice kernels) the rows' two means.
    return (size_t)blocks * kSums * C * sizeof(float) +
           (column_slices(C) ? (size_t)N * sizeof(float2) : 0);
}

void layernorm_backward(const Context& ctx, floatX* dinp, floatX* dweight, floatX* dbias,
                        void* scratch, const floatX* dout, const floatX* inp, const floatX* weight,
                        const float* mean, const float* rstd, int N, int C, floatX* dres_bias,
                        bool reduce_on_branch, bool accumulate_param_grads) {
    NvtxRange range("layernorm_backward");
    LLMC_CHECK(N > 0 && C > 0 && C <= kMaxC,
               "layernorm_backward: bad shape N=%d C=%d (C must be at most %d)", N, C, kMaxC);
    LLMC_CHECK(scratch != nullptr && reinterpret_cast<uintptr_t>(scratch) % 16 == 0,
               "layernorm_backward: scratch must be a 16-byte aligned buffer of "
               "layernorm_backward_scratch_bytes(ctx, N, C) bytes");
    LLMC_CHECK(dinp != dout, "layernorm_backward: dinp must not alias dout");
    LLMC_CHECK(ctx.layernorm_backward_variant >= 0 && ctx.layernorm_backward_variant <= 2,
               "layernorm_backward: variant %d does not exist (0, 1 or 2)",
               ctx.layernorm_backward_variant);
    float* partials = static_cast<float*>(scratch);
    const bool vec =
        C % kVecX == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight);
    const int iters = vec ? register_iters(C) : 0;
    const bool registers = iters > 0 && iters <= kMaxBackwardRegisterIters;
    const BackwardShape shape = backward_shape(ctx, N, C, registers);
    int shape_blocks = shape.blocks;  // partial rows written
    const size_t smem = (size_t)shape.warps * kSums * C * sizeof(float);
    if (registers) {
        // Only the block's (kSums, C) sums live in shared memory here.
        const size_t block_smem = kSums * C * sizeof(float);
        with_iters<kMaxBackwardRegisterIters>(iters, [&](auto it) {
            constexpr int kIters = decltype(it)::value;
            if constexpr (kIters * kVecX <= kRowsInFlightMaxValues) {
                if (ctx.layernorm_backward_variant == 1) {
                    launch_kernel(ctx, ctx.stream,
                                  layernorm_backward_rows_in_flight_kernel<kVecX, kIters,
                                                                           kRowsInFlight<kIters>>,
                                  shape.blocks, shape.warps * kWarpSize, block_smem, dinp, partials,
                                  dout, inp, weight, mean, rstd, N, C);
                    return;
                }
                const size_t staged_smem = staged_rows_smem_bytes(shape.warps, C);
                if (ctx.layernorm_backward_variant == 2 &&
                    staged_smem <= staged_rows_smem_limit<kIters>(ctx)) {
                    launch_kernel(ctx, ctx.stream,
                                  layernorm_backward_staged_rows_kernel<kVecX, kIters>,
                                  shape.blocks, shape.warps * kWarpSize, staged_smem, dinp,
                                  partials, dout, inp, weight, mean, rstd, N, C);
                    return;
                }
            }
            launch_kernel(ctx, ctx.stream,
                          layernorm_backward_row_in_registers_kernel<kVecX, kIters>, shape.blocks,
                          shape.warps * kWarpSize, block_smem, dinp, partials, dout, inp, weight,
                          mean, rstd, N, C);
        });
    } else if (vec && column_slices(C)) {
        // The rows' means after the partial rows in scratch (layernorm_backward_scratch_bytes),
        // which are as many as the larger of the two shapes; the slices take the register
        // kernels' shape (8 warps a block).
        const BackwardShape slices_shape = backward_shape(ctx, N, C, true);
        const int blocks = std::max(slices_shape.blocks, backward_shape(ctx, N, C, false).blocks);
        float2* row_means = reinterpret_cast<float2*>(partials + (size_t)blocks * kSums * C);
        launch_kernel(ctx, ctx.stream, layernorm_backward_row_means_kernel<kVecX>,
                      (N + kBackwardMaxWarps - 1) / kBackwardMaxWarps,
                      kBackwardMaxWarps * kWarpSize, 0, row_means, dout, inp, weight, mean, rstd, N,
                      C);
        constexpr int kCols = kSliceIters * kWarpSize * kVecX;
        launch_kernel(ctx, ctx.stream, layernorm_backward_column_slices_kernel<kVecX>,
                      dim3(slices_shape.blocks, (C + kCols - 1) / kCols),
                      slices_shape.warps * kWarpSize, kSums * kCols * sizeof(float), dinp, partials,
                      row_means, dout, inp, weight, mean, rstd, N, C);
        shape_blocks = slices_shape.blocks;
    } else if (vec) {
        launch_kernel(ctx, ctx.stream, layernorm_backward_warp_per_row_kernel<kVecX>, shape.blocks,
                      shape.warps * kWarpSize, smem, dinp, partials, dout, inp, weight, mean, rstd,
                      N, C);
    } else {
        launch_kernel(ctx, ctx.stream, layernorm_backward_warp_per_row_kernel<1>, shape.blocks,
                      shape.warps * kWarpSize, smem, dinp, partials, dout, inp, weight, mean, rstd,
                      N, C);
    }
    const int sums = dres_bias != nullptr ? 3 : 2;
    const int reduce_blocks = (sums * C + kReduceCols - 1) / kReduceCols;
    LLMC_CHECK(!reduce_on_branch || ctx.branches != 0,
               "layernorm_backward: reduce_on_branch needs the branch (ctx.branches)");
    if (reduce_on_branch) branch_fork(ctx);
    launch_kernel(ctx, stream_for(ctx, reduce_on_branch), layernorm_param_grads_reduce_kernel,
                  reduce_blocks, dim3(kReduceCols, kReduceGroups), 0, dweight, dbias, dres_bias,
                  partials, shape_blocks, C, sums, accumulate_param_grads);
}

}  // namespace llmc
