// attention.cu: causal multi-head self-attention. The bf16 build runs the fused flash kernels
// of flash_attention.cu; the fp32 build (the tight-parity reference against PyTorch fp32) runs
// the batched cuBLASLt path below, which both builds compile (as attention_*_cublas) so the
// benchmark can compare the two.
//
// Shapes: qkv (B, T, 3C), out (B, T, C), lse (B, NH, T) float, HS = C / NH, scale = 1/sqrt(HS).
//
// bf16 build (flash): no T x T buffer; scratch is D_t = dO_t . O_t, B*NH*T floats, and the qkv
// bias gradient's partial column sums (flash_attention_scratch_bytes); HS must be a multiple of
// 16 up to 128. See flash_attention.cu for the math, tiling
// and figures.
//
// cuBLAS path: the GEMMs read q, k, v straight out of qkv (row stride 3C) and write out / dqkv
// in place, so no head-major copies are made. S, P, dP, dS are (B*NH, T, T) with rows padded
// to ldS = round_up(T, 8) elements.
//   forward : S = scale Q K^T;  lse_t = log sum_{s<=t} exp(S_ts);  P_ts = exp(S_ts - lse_t) for
//             s <= t, 0 above the diagonal;  O = P V;  out = O in (B, T, C).  out and lse are
//             overwritten.
//   backward: S = scale Q K^T and dP = dO V^T;  P = exp(S - lse) (masked);  D_t = dO_t . O_t
//             (from out and dout);  dS = P * (dP - D);  dV = P^T dO;  dK = scale dS^T Q;
//             dQ = scale dS K;  dqkv (B, T, 3C) is overwritten.
// Sums (softmax statistics, D) are in float; the GEMMs accumulate in float. With floatX = bf16,
// S, P, dP and dS are stored in bf16 between the GEMMs.
//
// Scratch (attention_cublas_scratch_bytes): 2 score areas of B*NH*T*ldS floatX, S|P and dP|dS
// (the forward uses only the first), each on a 256-byte boundary: for B=4, T=1024, NH=12 in
// fp32, 2 * 201 MB. Each GEMM is issued as min(B, NH) strided-batched calls (AttentionBatch).
// Preconditions: C % NH == 0, scratch 256-byte aligned (cudaMalloc gives that).
// The GEMMs compute the full T x T products (half of it masked); the elementwise kernels skip
// the s > t half except for writing its zeros. Measured against flash attention: docs/results.md.
#include <cmath>
#include <cstdint>

#include "attention.cuh"
#include "device_utils.cuh"
#include "flash_attention.cuh"
#include "matmul.cuh"
#include "nvtx.h"

namespace llmc {

namespace {

constexpr int kRowsPerBlock = 8;       // one warp per score row, 8 warps per block
constexpr size_t kScratchAlign = 256;  // the base alignment cuBLASLt's heuristics assume

struct ScratchLayout {
    int ldS;           // padded row stride of the score areas, in elements
    size_t att_elems;  // elements of one score area, B*NH*T*ldS
    size_t att_offset[2];
    size_t total_bytes;
};

ScratchLayout scratch_layout(int B, int T, int C, int NH) {
    ScratchLayout L;
    // Rows of 8 elements keep every score row 16-byte aligned in fp32 and bf16 alike, so
    // cuBLASLt can pick its vectorized kernels even for awkward T.
    L.ldS = (int)round_up((size_t)T, 8);
    L.att_elems = (size_t)B * NH * T * L.ldS;
    size_t offset = 0;
    for (int i = 0; i < 2; i++) {
        L.att_offset[i] = offset;
        offset += round_up(L.att_elems * sizeof(floatX), kScratchAlign);
    }
    L.total_bytes = offset;
    return L;
}

// The (b, h) pairs are covered by `outer` GEMM calls of `batch` matrices each: a strided batch
// can walk only one of b and h, so the loop takes the smaller of the two and the batch the
// other. Offsets in elements: qkv-like tensors (row stride 3C), out-like (row stride C), and
// the score areas.
struct AttentionBatch {
    int outer, batch;
    long long qkv_outer, qkv_batch;  // step of (b or h) in a (B, T, 3C) tensor
    long long out_outer, out_batch;  // step in a (B, T, C) tensor
    long long att_outer, att_batch;  // step in a (B*NH, T, ldS) score area
};

AttentionBatch attention_batch(int B, int T, int C, int NH, int ldS) {
    const int HS = C / NH;
    const long long att_head = (long long)T * ldS;
    AttentionBatch ab;
    if (B <= NH) {  // loop over b, batch over heads
        ab = {B, NH, (long long)T * 3 * C, HS, (long long)T * C, HS, NH * att_head, att_head};
    } else {  // loop over h, batch over b
        ab = {NH, B, HS, (long long)T * 3 * C, HS, (long long)T * C, att_head, NH * att_head};
    }
    return ab;
}

floatX* region(void* scratch, size_t offset) {
    return reinterpret_cast<floatX*>(static_cast<char*>(scratch) + offset);
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

// S = scale * Q K^T for every (b, h), into the first score area. K rows are (T, HS) with row
// stride 3C, so op(B) = K^T via trans_b. The forward and the backward's recomputation both
// call this, so the backward's S is bit-identical to the one the saved lse was taken over.
void scores_gemm(const Context& ctx, floatX* att, const floatX* qkv, const AttentionBatch& ab,
                 int T, int C, int NH, int ldS) {
    const int HS = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    for (int o = 0; o < ab.outer; o++) {
        const floatX* q = qkv + o * ab.qkv_outer;
        matmul_strided_batched(ctx, att + o * ab.att_outer, q, q + C, T, T, HS, false, true, C3, C3,
                               ldS, ab.qkv_batch, ab.qkv_batch, ab.att_batch, ab.batch, scale,
                               0.0f);
    }
}

}  // namespace

size_t attention_cublas_scratch_bytes(int B, int T, int C, int NH) {
    return scratch_layout(B, T, C, NH).total_bytes;
}

void attention_forward_cublas(const Context& ctx, floatX* out, float* lse, void* scratch,
                              const floatX* qkv, int B, int T, int C, int NH) {
    NvtxRange range("attention_forward_cublas");
    check_sizes("attention_forward", scratch, B, T, C, NH);
    const int HS = C / NH, C3 = 3 * C;
    const ScratchLayout L = scratch_layout(B, T, C, NH);
    const AttentionBatch ab = attention_batch(B, T, C, NH, L.ldS);
    floatX* att = region(scratch, L.att_offset[0]);
    scores_gemm(ctx, att, qkv, ab, T, C, NH, L.ldS);
    const int rows = B * NH * T;
    causal_softmax_forward_kernel<<<grid_for(rows, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0,
                                    ctx.stream>>>(att, lse, rows, T, L.ldS);
    LLMC_CUDA_CHECK_LAST();
    for (int o = 0; o < ab.outer; o++) {
        // O = P V, written straight into out (row stride C).
        matmul_strided_batched(ctx, out + o * ab.out_outer, att + o * ab.att_outer,
                               qkv + o * ab.qkv_outer + 2 * C, T, HS, T, false, false, L.ldS, C3, C,
                               ab.att_batch, ab.qkv_batch, ab.out_batch, ab.batch, 1.0f, 0.0f);
    }
}

void attention_backward_cublas(const Context& ctx, floatX* dqkv, void* scratch, const floatX* dout,
                               const floatX* qkv, const floatX* out, const float* lse, int B, int T,
                               int C, int NH) {
    NvtxRange range("attention_backward_cublas");
    check_sizes("attention_backward", scratch, B, T, C, NH);
    const int HS = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)HS);
    const ScratchLayout L = scratch_layout(B, T, C, NH);
    const AttentionBatch ab = attention_batch(B, T, C, NH, L.ldS);
    floatX* att = region(scratch, L.att_offset[0]);
    floatX* datt = region(scratch, L.att_offset[1]);
    scores_gemm(ctx, att, qkv, ab, T, C, NH, L.ldS);
    for (int o = 0; o < ab.outer; o++) {
        // dP = dO V^T
        matmul_strided_batched(ctx, datt + o * ab.att_outer, dout + o * ab.out_outer,
                               qkv + o * ab.qkv_outer + 2 * C, T, T, HS, false, true, C, C3, L.ldS,
                               ab.out_batch, ab.qkv_batch, ab.att_batch, ab.batch, 1.0f, 0.0f);
    }
    const int rows = B * NH * T;
    causal_softmax_backward_kernel<<<grid_for(rows, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0,
                                     ctx.stream>>>(att, datt, lse, dout, out, rows, T, NH, HS,
                                                   L.ldS);
    LLMC_CUDA_CHECK_LAST();
    for (int o = 0; o < ab.outer; o++) {
        const floatX* q = qkv + o * ab.qkv_outer;
        const floatX* d_o = dout + o * ab.out_outer;
        floatX* dq = dqkv + o * ab.qkv_outer;
        const floatX* p = att + o * ab.att_outer;
        const floatX* ds = datt + o * ab.att_outer;
        // dV = P^T dO: P is stored (t, s), op(A) = P^T via trans_a.
        matmul_strided_batched(ctx, dq + 2 * C, p, d_o, T, HS, T, true, false, L.ldS, C, C3,
                               ab.att_batch, ab.out_batch, ab.qkv_batch, ab.batch, 1.0f, 0.0f);
        // dK = scale * dS^T Q
        matmul_strided_batched(ctx, dq + C, ds, q, T, HS, T, true, false, L.ldS, C3, C3,
                               ab.att_batch, ab.qkv_batch, ab.qkv_batch, ab.batch, scale, 0.0f);
        // dQ = scale * dS K
        matmul_strided_batched(ctx, dq, ds, q + C, T, HS, T, false, false, L.ldS, C3, C3,
                               ab.att_batch, ab.qkv_batch, ab.qkv_batch, ab.batch, scale, 0.0f);
    }
}

#if defined(ENABLE_BF16)

size_t attention_scratch_bytes(int B, int T, int C, int NH) {
    return flash_attention_scratch_bytes(B, T, NH, C / NH);
}

bool attention_supports_head_size(int C, int NH, const char** why) {
    const int HS = C / NH;
    *why =
        "the bf16 build's flash attention needs a head size C/NH that is a multiple of 16 up "
        "to 128";
    return C % NH == 0 && HS % 16 == 0 && HS <= 128;
}

void attention_forward(const Context& ctx, floatX* out, float* lse, void* scratch,
                       const floatX* qkv, int B, int T, int C, int NH) {
    NvtxRange range("attention_forward");
    check_sizes("attention_forward", scratch, B, T, C, NH);
    flash_attention_forward(ctx, out, lse, qkv, B, T, NH, C / NH);
}

bool attention_backward(const Context& ctx, floatX* dqkv, void* scratch, const floatX* dout,
                        const floatX* qkv, const floatX* out, const float* lse, int B, int T, int C,
                        int NH, floatX* dbias, bool accumulate_dbias, bool row_stats_given) {
    NvtxRange range("attention_backward");
    check_sizes("attention_backward", scratch, B, T, C, NH);
    flash_attention_backward(ctx, dqkv, scratch, dout, qkv, out, lse, B, T, NH, C / NH, 0, 0, dbias,
                             FlashPath::kAuto, accumulate_dbias, row_stats_given);
    return dbias != nullptr;
}

bool attention_backward_row_stats(const Context& ctx, void* scratch, int B, int T, int C, int NH,
                                  float** lse2, float** d) {
    return C % NH == 0 &&
           flash_attention_backward_row_stats(ctx, scratch, B, T, NH, C / NH, lse2, d);
}

#else

size_t attention_scratch_bytes(int B, int T, int C, int NH) {
    return attention_cublas_scratch_bytes(B, T, C, NH);
}

bool attention_supports_head_size(int C, int NH, const char** why) {
    *why = "NH must divide C";
    return C % NH == 0;
}

void attention_forward(const Context& ctx, floatX* out, float* lse, void* scratch,
                       const floatX* qkv, int B, int T, int C, int NH) {
    NvtxRange range("attention_forward");
    attention_forward_cublas(ctx, out, lse, scratch, qkv, B, T, C, NH);
}

bool attention_backward(const Context& ctx, floatX* dqkv, void* scratch, const floatX* dout,
                        const floatX* qkv, const floatX* out, const float* lse, int B, int T, int C,
                        int NH, floatX* /*dbias: left to the caller*/, bool /*accumulate_dbias*/,
                        bool row_stats_given) {
    NvtxRange range("attention_backward");
    LLMC_CHECK(!row_stats_given, "attention_backward: the fp32 build takes no row statistics");
    attention_backward_cublas(ctx, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH);
    return false;
}

bool attention_backward_row_stats(const Context&, void*, int, int, int, int, float**, float**) {
    return false;  // the cuBLASLt path has no row statistics
}

#endif

}  // namespace llmc
