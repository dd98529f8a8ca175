// attention.cu: causal multi-head self-attention through batched cuBLASLt GEMMs.
//
// Shapes: qkv (B, T, 3C), out (B, T, C), lse (B, NH, T) float, HS = C / NH, scale = 1/sqrt(HS).
// Head-major copies Q, K, V, O, dO are (B*NH, T, HS); S, P, dP, dS are (B*NH, T, T) with rows
// padded to ldS = round_up(T, 8) elements.
//   forward : S = scale Q K^T;  lse_t = log sum_{s<=t} exp(S_ts);  P_ts = exp(S_ts - lse_t) for
//             s <= t, 0 above the diagonal;  O = P V;  out = O in (B, T, C).  out and lse are
//             overwritten.
//   backward: S = scale Q K^T and dP = dO V^T;  P = exp(S - lse) (masked);  D_t = dO_t . O_t
//             (from out and dout);  dS = P * (dP - D);  dV = P^T dO;  dK = scale dS^T Q;
//             dQ = scale dS K;  dqkv (B, T, 3C) is overwritten.
// Sums (softmax statistics, D) are in float; the GEMMs accumulate in float. In the bf16 build S,
// P, dP and dS are stored in bf16 between the GEMMs.
//
// Scratch (attention_scratch_bytes), each region starting on a 256-byte boundary:
//   4 head-major buffers of B*T*C floatX    Q|dQ, K, V|dV, O|dO (backward reuses slots in place)
//   2 score areas of B*NH*T*ldS floatX      S|P and dP|dS (forward uses only the first)
//   bytes ~= sizeof(floatX) * (4*B*T*C + 2*B*NH*T*round_up(T, 8))
// For B=4, T=1024, C=768, NH=12 in fp32: 4*12.6 MB + 2*201 MB = 453 MB.
// Preconditions: C % NH == 0, scratch 256-byte aligned (cudaMalloc gives that).
// The GEMMs compute the full T x T products (half of it masked); the elementwise kernels skip
// the s > t half except for writing its zeros.
// Last measured: not yet measured on a GPU.
#include <cmath>
#include <cstdint>

#include "attention.cuh"
#include "matmul.cuh"
#include "nvtx.h"

namespace {

constexpr int kWarpSize = 32;
constexpr int kRowsPerBlock = 8;  // one warp per score row, 8 warps per block
constexpr int kElementwiseThreads = 256;
constexpr size_t kScratchAlign = 256;  // the base alignment cuBLASLt's heuristics assume

// Up to three head-major buffers; part p of a (B, T, parts*C) tensor maps to ptr[p].
struct HeadMajorParts {
    floatX* ptr[3];
};

struct ScratchLayout {
    int ldS;            // padded row stride of the score areas, in elements
    size_t head_elems;  // elements of one head-major buffer, B*T*C
    size_t att_elems;   // elements of one score area, B*NH*T*ldS
    size_t head_offset[4];
    size_t att_offset[2];
    size_t total_bytes;
};

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

ScratchLayout scratch_layout(int B, int T, int C, int NH) {
    ScratchLayout L;
    // Rows of 8 elements keep every score row 16-byte aligned in fp32 and bf16 alike, so
    // cuBLASLt can pick its vectorized kernels even for awkward T.
    L.ldS = (int)round_up((size_t)T, 8);
    L.head_elems = (size_t)B * T * C;
    L.att_elems = (size_t)B * NH * T * L.ldS;
    size_t offset = 0;
    for (int i = 0; i < 4; i++) {
        L.head_offset[i] = offset;
        offset += round_up(L.head_elems * sizeof(floatX), kScratchAlign);
    }
    for (int i = 0; i < 2; i++) {
        L.att_offset[i] = offset;
        offset += round_up(L.att_elems * sizeof(floatX), kScratchAlign);
    }
    L.total_bytes = offset;
    return L;
}

floatX* region(void* scratch, size_t offset) {
    return reinterpret_cast<floatX*>(static_cast<char*>(scratch) + offset);
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

// dst.ptr[p][b, h, t, d] = src[b, t, p*C + h*HS + d] for p < parts. One thread per element of
// the destination; consecutive threads walk d, so reads and writes are coalesced within a head.
__global__ void split_heads_kernel(HeadMajorParts dst,              // parts x (B, NH, T, HS)
                                   const floatX* __restrict__ src,  // (B, T, parts*C)
                                   int parts, int B, int T, int NH, int HS) {
    const long long per_part = (long long)B * NH * T * HS;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= parts * per_part) {
        return;
    }
    const int p = (int)(i / per_part);
    const long long j = i % per_part;
    const int d = (int)(j % HS);
    const int t = (int)((j / HS) % T);
    const int h = (int)((j / ((long long)HS * T)) % NH);
    const int b = (int)(j / ((long long)HS * T * NH));
    const int C = NH * HS;
    dst.ptr[p][j] = src[((long long)b * T + t) * parts * C + (long long)p * C + h * HS + d];
}

// dst[b, t, p*C + h*HS + d] = src.ptr[p][b, h, t, d]. One thread per element of the destination.
__global__ void merge_heads_kernel(floatX* __restrict__ dst,  // (B, T, parts*C)
                                   HeadMajorParts src,        // parts x (B, NH, T, HS)
                                   int parts, int B, int T, int NH, int HS) {
    const int C = NH * HS;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)B * T * parts * C) {
        return;
    }
    const int channel = (int)(i % (parts * C));
    const long long bt = i / (parts * C);
    const int p = channel / C;
    const int h = (channel % C) / HS;
    const int d = channel % HS;
    const int t = (int)(bt % T);
    const int b = (int)(bt / T);
    dst[i] = src.ptr[p][(((long long)b * NH + h) * T + t) * HS + d];
}

// Row softmax over the causal part of S, in place: one warp per row (bh, t). Each lane keeps a
// running max and a sum rescaled to it (one exp per element), then the lanes merge in a fixed
// shuffle order, so the result is deterministic. Writes P (zeros for s > t) and lse.
__global__ void causal_softmax_forward_kernel(floatX* __restrict__ att,  // (B*NH, T, ldS), S in
                                              float* __restrict__ lse,   // (B*NH, T)
                                              int rows, int T, int ldS) {
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= rows) {
        return;
    }
    const int t = row % T;
    floatX* p = att + (long long)row * ldS;

    float m = -INFINITY;
    float l = 0.0f;
    for (int s = lane; s <= t; s += kWarpSize) {
        const float x = to_float(p[s]);
        if (x > m) {
            l = l * expf(m - x) + 1.0f;  // expf(-inf) = 0 on a lane's first element
            m = x;
        } else {
            l += expf(x - m);
        }
    }
    const float row_max = warp_max(m);
    // Lanes that saw no element hold m = -inf and l = 0: they contribute exactly 0.
    const float row_sum = warp_sum(l == 0.0f ? 0.0f : l * expf(m - row_max));
    const float row_lse = row_max + logf(row_sum);

    for (int s = lane; s < T; s += kWarpSize) {
        p[s] = from_float<floatX>(s <= t ? expf(to_float(p[s]) - row_lse) : 0.0f);
    }
    if (lane == 0) {
        lse[row] = row_lse;
    }
}

// Backward elementwise pass, one warp per row (bh, t): P = exp(S - lse) into `att` and
// dS = P * (dP - D) into `datt`, both in place; zeros for s > t. D_t = dO_t . O_t is summed over
// the head's HS channels straight from dout and out.
__global__ void causal_softmax_backward_kernel(floatX* __restrict__ att,   // (B*NH, T, ldS) S->P
                                               floatX* __restrict__ datt,  // (B*NH, T, ldS) dP->dS
                                               const float* __restrict__ lse,    // (B*NH, T)
                                               const floatX* __restrict__ dout,  // (B, T, C)
                                               const floatX* __restrict__ out,   // (B, T, C)
                                               int rows, int T, int NH, int HS, int ldS) {
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= rows) {
        return;
    }
    const int t = row % T;
    const int bh = row / T;
    const int b = bh / NH;
    const int h = bh % NH;
    const int C = NH * HS;

    const long long channel0 = ((long long)b * T + t) * C + (long long)h * HS;
    float d_partial = 0.0f;
    for (int j = lane; j < HS; j += kWarpSize) {
        d_partial += to_float(dout[channel0 + j]) * to_float(out[channel0 + j]);
    }
    const float D = warp_sum(d_partial);
    const float row_lse = lse[row];

    floatX* p = att + (long long)row * ldS;
    floatX* dp = datt + (long long)row * ldS;
    for (int s = lane; s < T; s += kWarpSize) {
        float prob = 0.0f;
        float dscore = 0.0f;
        if (s <= t) {
            prob = expf(to_float(p[s]) - row_lse);
            dscore = prob * (to_float(dp[s]) - D);
        }
        p[s] = from_float<floatX>(prob);
        dp[s] = from_float<floatX>(dscore);
    }
}

void check_sizes(const char* op, const void* scratch, int B, int T, int C, int NH) {
    LLMC_CHECK(B > 0 && T > 0 && C > 0 && NH > 0, "%s: B, T, C, NH must be positive (%d %d %d %d).",
               op, B, T, C, NH);
    LLMC_CHECK(C % NH == 0, "%s: C (%d) must be a multiple of NH (%d).", op, C, NH);
    LLMC_CHECK(scratch != nullptr && (uintptr_t)scratch % kScratchAlign == 0,
               "%s: scratch must be a %zu-byte aligned buffer of attention_scratch_bytes().", op,
               kScratchAlign);
    LLMC_CHECK((long long)B * NH * T < (1LL << 31), "%s: B*NH*T must fit in an int.", op);
}

int grid_for(long long n, int threads) { return (int)((n + threads - 1) / threads); }

void launch_split_heads(const Context& ctx, HeadMajorParts dst, const floatX* src, int parts, int B,
                        int T, int NH, int HS) {
    const long long n = (long long)parts * B * T * NH * HS;
    split_heads_kernel<<<grid_for(n, kElementwiseThreads), kElementwiseThreads, 0, ctx.stream>>>(
        dst, src, parts, B, T, NH, HS);
    CUDA_CHECK_LAST();
}

void launch_merge_heads(const Context& ctx, floatX* dst, HeadMajorParts src, int parts, int B,
                        int T, int NH, int HS) {
    const long long n = (long long)parts * B * T * NH * HS;
    merge_heads_kernel<<<grid_for(n, kElementwiseThreads), kElementwiseThreads, 0, ctx.stream>>>(
        dst, src, parts, B, T, NH, HS);
    CUDA_CHECK_LAST();
}

}  // namespace

size_t attention_scratch_bytes(int B, int T, int C, int NH) {
    return scratch_layout(B, T, C, NH).total_bytes;
}

void attention_forward(const Context& ctx, floatX* out, float* lse, void* scratch,
                       const floatX* qkv, int B, int T, int C, int NH) {
    NvtxRange range("attention_forward");
    check_sizes("attention_forward", scratch, B, T, C, NH);
    const int HS = C / NH;
    const int BNH = B * NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const ScratchLayout L = scratch_layout(B, T, C, NH);
    floatX* q = region(scratch, L.head_offset[0]);
    floatX* k = region(scratch, L.head_offset[1]);
    floatX* v = region(scratch, L.head_offset[2]);
    floatX* o = region(scratch, L.head_offset[3]);
    floatX* att = region(scratch, L.att_offset[0]);
    const long long head_stride = (long long)T * HS;
    const long long att_stride = (long long)T * L.ldS;

    launch_split_heads(ctx, HeadMajorParts{{q, k, v}}, qkv, 3, B, T, NH, HS);
    // S = scale * Q K^T: K is stored (T, HS), i.e. op(B) = K^T via trans_b.
    matmul_strided_batched(ctx, att, q, k, T, T, HS, false, true, HS, HS, L.ldS, head_stride,
                           head_stride, att_stride, BNH, scale, 0.0f);
    const int rows = BNH * T;
    causal_softmax_forward_kernel<<<grid_for(rows, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0,
                                    ctx.stream>>>(att, lse, rows, T, L.ldS);
    CUDA_CHECK_LAST();
    // O = P V
    matmul_strided_batched(ctx, o, att, v, T, HS, T, false, false, L.ldS, HS, HS, att_stride,
                           head_stride, head_stride, BNH, 1.0f, 0.0f);
    launch_merge_heads(ctx, out, HeadMajorParts{{o, nullptr, nullptr}}, 1, B, T, NH, HS);
}

void attention_backward(const Context& ctx, floatX* dqkv, void* scratch, const floatX* dout,
                        const floatX* qkv, const floatX* out, const float* lse, int B, int T, int C,
                        int NH) {
    NvtxRange range("attention_backward");
    check_sizes("attention_backward", scratch, B, T, C, NH);
    const int HS = C / NH;
    const int BNH = B * NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const ScratchLayout L = scratch_layout(B, T, C, NH);
    // Slots are reused once their input is dead: dV overwrites V (last read by dP), dK
    // overwrites dO (last read by dV), dQ overwrites Q (last read by dK).
    floatX* q_dq = region(scratch, L.head_offset[0]);
    floatX* k = region(scratch, L.head_offset[1]);
    floatX* v_dv = region(scratch, L.head_offset[2]);
    floatX* do_dk = region(scratch, L.head_offset[3]);
    floatX* att = region(scratch, L.att_offset[0]);
    floatX* datt = region(scratch, L.att_offset[1]);
    const long long head_stride = (long long)T * HS;
    const long long att_stride = (long long)T * L.ldS;

    launch_split_heads(ctx, HeadMajorParts{{q_dq, k, v_dv}}, qkv, 3, B, T, NH, HS);
    launch_split_heads(ctx, HeadMajorParts{{do_dk, nullptr, nullptr}}, dout, 1, B, T, NH, HS);
    // S = scale * Q K^T (recomputed with the forward's exact GEMM) and dP = dO V^T.
    matmul_strided_batched(ctx, att, q_dq, k, T, T, HS, false, true, HS, HS, L.ldS, head_stride,
                           head_stride, att_stride, BNH, scale, 0.0f);
    matmul_strided_batched(ctx, datt, do_dk, v_dv, T, T, HS, false, true, HS, HS, L.ldS,
                           head_stride, head_stride, att_stride, BNH, 1.0f, 0.0f);
    const int rows = BNH * T;
    causal_softmax_backward_kernel<<<grid_for(rows, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0,
                                     ctx.stream>>>(att, datt, lse, dout, out, rows, T, NH, HS,
                                                   L.ldS);
    CUDA_CHECK_LAST();
    // dV = P^T dO: P is stored (t, s), op(A) = P^T via trans_a.
    matmul_strided_batched(ctx, v_dv, att, do_dk, T, HS, T, true, false, L.ldS, HS, HS, att_stride,
                           head_stride, head_stride, BNH, 1.0f, 0.0f);
    // dK = scale * dS^T Q
    matmul_strided_batched(ctx, do_dk, datt, q_dq, T, HS, T, true, false, L.ldS, HS, HS, att_stride,
                           head_stride, head_stride, BNH, scale, 0.0f);
    // dQ = scale * dS K
    matmul_strided_batched(ctx, q_dq, datt, k, T, HS, T, false, false, L.ldS, HS, HS, att_stride,
                           head_stride, head_stride, BNH, scale, 0.0f);
    launch_merge_heads(ctx, dqkv, HeadMajorParts{{q_dq, do_dk, v_dv}}, 3, B, T, NH, HS);
}
