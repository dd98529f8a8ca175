// encoder.cu: token + position embedding, forward and deterministic backward.
//
// Shapes: inp (B, T) int token ids, wte (V, C), wpe (maxT, C), out and dout (B, T, C), N = B*T.
//   forward : out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]                   (overwrites out)
//             bytes = sizeof(floatX) * 3*N*C + 4*N
//   backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]  (accumulates)
//     1. the positions 0..N-1 are sorted by token id with CUB's stable radix sort, so equal ids
//        form runs whose positions are in increasing order;
//     2. one block column per run start sums the run's dout rows in that order, in float, and
//        adds the sum into the token's dwte row once. A token has exactly one run, so no two
//        blocks write the same row and no atomics are needed;
//     3. dwpe[t,:] += sum over b = 0..B-1 of dout[b,t,:], in that order (= without
//        accumulate_dwpe: rows t < T written unread, rows >= T left alone). dwte always adds:
//        the tied head's gradient is already there (and rows of absent tokens are not written).
//     bytes ~= sizeof(floatX) * (2*N*C + 2*U*C + 2*T*C) + sort, U = number of distinct tokens
// Scratch (encoder_backward_scratch_bytes): positions, sorted ids, sorted positions (N ints
// each) and CUB's temporary storage, each region 256-byte aligned.
// Preconditions: 0 <= inp < V (not checked here: the ids live on the device). 16-byte vector
// loads when C is a multiple of 16 / sizeof(floatX) and the tensors are 16-byte aligned,
// otherwise one element per thread.
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "device_utils.cuh"
#include "encoder.cuh"
#include "launch.cuh"
#include "nvtx.h"

namespace llmc {

namespace {

constexpr int kThreads = 256;
constexpr int kRunThreads = 128;  // threads per block of the per-run sum (one pack each)
constexpr size_t kScratchAlign = 256;

// One thread per pack of kVec channels of one (b, t) row.
// row[0..kVec) += acc (or = acc without accumulate, the row unread), as one aligned vector
// access: the one store of a gradient row pack in the encoder's backward (each pack has exactly
// one writer, so no atomics).
template <int kVec>
__device__ __forceinline__ void add_to_row(floatX* row, const float* acc, bool accumulate = true) {
    Vec<floatX, kVec> w;
    if (accumulate) w = load_vec<kVec>(row);
#pragma unroll
    for (int k = 0; k < kVec; k++) {
        w.v[k] = from_float<floatX>(accumulate ? to_float(w.v[k]) + acc[k] : acc[k]);
    }
    store_vec<kVec>(row, w);
}

template <int kVec>
__global__ void encoder_forward_gather_kernel(floatX* __restrict__ out,        // (N, C)
                                              const int* __restrict__ inp,     // (N)
                                              const floatX* __restrict__ wte,  // (V, C)
                                              const floatX* __restrict__ wpe,  // (maxT, C)
                                              int N, int T, int C) {
    pdl_wait();
    pdl_launch_dependents();
    const int packs_per_row = C / kVec;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)N * packs_per_row) {
        return;
    }
    const int row = (int)(i / packs_per_row);
    const int c = (int)(i % packs_per_row) * kVec;
    const int t = row % T;
    const Vec<floatX, kVec> te = load_vec<kVec>(wte + (size_t)inp[row] * C + c);
    const Vec<floatX, kVec> pe = load_vec<kVec>(wpe + (size_t)t * C + c);
    Vec<floatX, kVec> o;
#pragma unroll
    for (int k = 0; k < kVec; k++) {
        o.v[k] = from_float<floatX>(to_float(te.v[k]) + to_float(pe.v[k]));
    }
    store_vec<kVec>(out + (size_t)row * C + c, o);
}

// positions[i] = i: the values CUB sorts along with the token ids.
__global__ void iota_kernel(int* __restrict__ positions, int N) {  // (N)
    pdl_wait();
    pdl_launch_dependents();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        positions[i] = i;
    }
}

// Block (x, y): the run of equal ids that starts at sorted index x, channel packs
// [y * blockDim.x, (y + 1) * blockDim.x). Blocks whose x is not a run start exit at once, so the
// number of runs (known only on the device) needs no host round trip.
template <int kVec>
__global__ void encoder_backward_token_runs_kernel(floatX* __restrict__ dwte,              // (V, C)
                                                   const floatX* __restrict__ dout,        // (N, C)
                                                   const int* __restrict__ sorted_tokens,  // (N)
                                                   const int* __restrict__ sorted_positions,  // (N)
                                                   int N, int C) {
    pdl_wait();
    pdl_launch_dependents();
    const int start = blockIdx.x;
    const int token = sorted_tokens[start];
    if (start > 0 && sorted_tokens[start - 1] == token) {
        return;
    }
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * kVec;
    if (c >= C) {
        return;
    }
    float acc[kVec];
#pragma unroll
    for (int k = 0; k < kVec; k++) {
        acc[k] = 0.0f;
    }
    for (int i = start; i < N && sorted_tokens[i] == token; i++) {
        const Vec<floatX, kVec> d = load_vec<kVec>(dout + (size_t)sorted_positions[i] * C + c);
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            acc[k] += to_float(d.v[k]);
        }
    }
    add_to_row<kVec>(dwte + (size_t)token * C + c, acc);
}

// One thread per pack of kVec channels of position t: sums dout over b in order.
template <int kVec>
__global__ void encoder_backward_positions_kernel(floatX* __restrict__ dwpe,        // (maxT, C)
                                                  const floatX* __restrict__ dout,  // (B, T, C)
                                                  int B, int T, int C, bool accumulate) {
    pdl_wait();
    pdl_launch_dependents();
    const int packs_per_row = C / kVec;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * packs_per_row) {
        return;
    }
    const int t = i / packs_per_row;
    const int c = (i % packs_per_row) * kVec;
    float acc[kVec];
#pragma unroll
    for (int k = 0; k < kVec; k++) {
        acc[k] = 0.0f;
    }
    for (int b = 0; b < B; b++) {
        const Vec<floatX, kVec> d = load_vec<kVec>(dout + ((size_t)b * T + t) * C + c);
#pragma unroll
        for (int k = 0; k < kVec; k++) {
            acc[k] += to_float(d.v[k]);
        }
    }
    add_to_row<kVec>(dwpe + (size_t)t * C + c, acc, accumulate);
}

struct EncoderScratch {
    int* positions;         // (N) 0..N-1
    int* sorted_tokens;     // (N)
    int* sorted_positions;  // (N)
    void* sort_temp;
    size_t sort_temp_bytes;
    size_t total_bytes;
};

// The regions of the scratch for N positions; base may be null to learn the size only.
EncoderScratch encoder_scratch_layout(void* base, int N) {
    EncoderScratch s{};
    // With a null temp pointer CUB only reports the storage it needs; no work is launched.
    LLMC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, s.sort_temp_bytes, (const int*)nullptr,
                                                    (int*)nullptr, (const int*)nullptr,
                                                    (int*)nullptr, N));
    const size_t ints = round_up((size_t)N * sizeof(int), kScratchAlign);
    s.total_bytes = 3 * ints + round_up(s.sort_temp_bytes, kScratchAlign);
    if (base != nullptr) {
        char* p = static_cast<char*>(base);
        s.positions = reinterpret_cast<int*>(p);
        s.sorted_tokens = reinterpret_cast<int*>(p + ints);
        s.sorted_positions = reinterpret_cast<int*>(p + 2 * ints);
        s.sort_temp = p + 3 * ints;
    }
    return s;
}

template <int kVec>
void launch_encoder_backward_sums(const Context& ctx, floatX* dwte, floatX* dwpe,
                                  const EncoderScratch& s, const floatX* dout, int B, int T, int C,
                                  bool accumulate_dwpe) {
    const int N = B * T;
    const int packs_per_row = C / kVec;
    const dim3 run_grid(N, (packs_per_row + kRunThreads - 1) / kRunThreads);
    launch_kernel(ctx, ctx.stream, encoder_backward_token_runs_kernel<kVec>, run_grid, kRunThreads,
                  0, dwte, dout, s.sorted_tokens, s.sorted_positions, N, C);
    const int pos_blocks = (T * packs_per_row + kThreads - 1) / kThreads;
    launch_kernel(ctx, ctx.stream, encoder_backward_positions_kernel<kVec>, pos_blocks, kThreads, 0,
                  dwpe, dout, B, T, C, accumulate_dwpe);
}

}  // namespace

void encoder_forward(const Context& ctx, floatX* out, const int* inp, const floatX* wte,
                     const floatX* wpe, int B, int T, int C) {
    NvtxRange range("encoder_forward");
    LLMC_CHECK(B > 0 && T > 0 && C > 0, "encoder_forward: bad shape B=%d T=%d C=%d", B, T, C);
    const int N = B * T;
    const bool vec = C % kVecX == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe);
    if (vec) {
        const long long threads = (long long)N * (C / kVecX);
        launch_kernel(ctx, ctx.stream, encoder_forward_gather_kernel<kVecX>,
                      (unsigned)((threads + kThreads - 1) / kThreads), kThreads, 0, out, inp, wte,
                      wpe, N, T, C);
    } else {
        const long long threads = (long long)N * C;
        launch_kernel(ctx, ctx.stream, encoder_forward_gather_kernel<1>,
                      (unsigned)((threads + kThreads - 1) / kThreads), kThreads, 0, out, inp, wte,
                      wpe, N, T, C);
    }
}

size_t encoder_backward_scratch_bytes(int B, int T) {
    return encoder_scratch_layout(nullptr, B * T).total_bytes;
}

void encoder_backward(const Context& ctx, floatX* dwte, floatX* dwpe, void* scratch,
                      const floatX* dout, const int* inp, int B, int T, int C,
                      bool accumulate_dwpe) {
    NvtxRange range("encoder_backward");
    LLMC_CHECK(B > 0 && T > 0 && C > 0, "encoder_backward: bad shape B=%d T=%d C=%d", B, T, C);
    LLMC_CHECK(scratch != nullptr && reinterpret_cast<uintptr_t>(scratch) % kScratchAlign == 0,
               "encoder_backward: scratch must be a %zu-byte aligned buffer of "
               "encoder_backward_scratch_bytes(B, T) bytes",
               kScratchAlign);
    const int N = B * T;
    EncoderScratch s = encoder_scratch_layout(scratch, N);

    launch_kernel(ctx, ctx.stream, iota_kernel, (N + kThreads - 1) / kThreads, kThreads, 0,
                  s.positions, N);
    // LSD radix sort is stable: equal ids keep their positions in increasing order.
    LLMC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        s.sort_temp, s.sort_temp_bytes, inp, s.sorted_tokens, s.positions, s.sorted_positions, N, 0,
        (int)(sizeof(int) * 8), ctx.stream));
    LLMC_CUDA_CHECK_LAST();

    const bool vec = C % kVecX == 0 && aligned16(dwte) && aligned16(dwpe) && aligned16(dout);
    if (vec) {
        launch_encoder_backward_sums<kVecX>(ctx, dwte, dwpe, s, dout, B, T, C, accumulate_dwpe);
    } else {
        launch_encoder_backward_sums<1>(ctx, dwte, dwpe, s, dout, B, T, C, accumulate_dwpe);
    }
}

}  // namespace llmc
