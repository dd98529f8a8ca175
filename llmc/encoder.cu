// encoder.cu: token + position embedding, forward and deterministic backward.
//
// Shapes: inp (B, T) int token ids in [0, V), wte (V, C), wpe (maxT, C), out and dout (B, T, C),
// N = B*T.
//   forward : out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]                   (overwrites out)
//             bytes = sizeof(floatX) * 3*N*C + 4*N
//   backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]  (accumulates)
//     1. the positions 0..N-1 are sorted by token id with CUB's stable radix sort (only the
//        ceil(log2 V) low bits of the ids), so equal ids form runs whose positions are in
//        increasing order;
//     2. the sorted order is cut into segments of 32 entries (8 when N < 16384, for more
//        blocks), one block column each. A block loads its segment's ids and positions into
//        shared memory, then reads the dout rows kInFlight at a time (independent loads, so a
//        long run is not a chain of dependent trips to memory) and sums each run in float, in
//        position order. A run that begins and ends in the segment is added into its dwte row
//        at once; a piece of a run that crosses a segment boundary goes to scratch: the run's
//        head (its first segment's part) to head[segment], any later part to tail[segment];
//     3. the block of a segment that holds a crossing run's head adds head + the tails of the
//        run's later segments (those whose first id is the run's), in segment order, into the
//        token's dwte row. Every sum has a fixed order and every dwte row exactly one writer,
//        so no atomics are needed and the result does not depend on the launch. Real text is
//        skewed (a newline is ~12% of tiny Shakespeare's tokens, so ~7,500 rows of one id in a
//        B=64 T=1024 batch): no single thread walks a whole run;
//     4. dwpe[t,:] += sum over b = 0..B-1 of dout[b,t,:], in that order, kInFlight rows at a
//        time (= without accumulate_dwpe: rows t < T written unread, rows >= T left alone).
//        dwte always adds: the tied head's gradient is already there (and rows of absent tokens
//        are not written).
//     bytes ~= sizeof(floatX) * (2*N*C + 2*U*C + 2*T*C) + sort + crossing pieces, U = number
//     of distinct tokens
// Scratch (encoder_backward_scratch_bytes): positions, sorted ids, sorted positions (N ints
// each), the head and tail pieces (one float row of C per segment each) and CUB's temporary
// storage, each region 256-byte aligned.
// Preconditions: 0 <= inp < V (not checked here: the ids live on the device; the sort reads
// only their low bits). 16-byte vector loads when C is a multiple of 16 / sizeof(floatX) and
// the tensors are 16-byte aligned, otherwise one element per thread.
#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "device_utils.cuh"
#include "encoder.cuh"
#include "launch.cuh"
#include "nvtx.h"

namespace llmc {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxSegRows = 32;      // sorted entries per segment of the dwte sums (N >= 16384)
constexpr int kSmallSegRows = 8;     // the same for smaller N, so that more blocks share the work
constexpr int kMaxSegThreads = 256;  // threads per segment block (one channel pack each)
constexpr int kInFlight = 8;         // dout rows a thread loads before summing them
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
__device__ __forceinline__ void store_piece(float* piece, const float* acc) {
    Vec<float, kVec> w;
#pragma unroll
    for (int k = 0; k < kVec; k++) w.v[k] = acc[k];
    store_vec<kVec>(piece, w);
}

// One thread per pack of kVec channels of one (b, t) row.
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

// Block (x, y): the sorted entries [x * seg_rows, (x + 1) * seg_rows) (segment x), channel packs
// [y * blockDim.x, (y + 1) * blockDim.x). Sums each run of equal ids within the segment in
// position order; a run that lies wholly in the segment goes into dwte, a crossing run's piece
// into head[x] (the run begins here) or tail[x] (it began in an earlier segment).
template <int kVec>
__global__ void __launch_bounds__(kMaxSegThreads, 1)
    encoder_backward_segments_kernel(floatX* __restrict__ dwte,                 // (V, C)
                                     float* __restrict__ head,                  // (segments, C)
                                     float* __restrict__ tail,                  // (segments, C)
                                     const floatX* __restrict__ dout,           // (N, C)
                                     const int* __restrict__ sorted_tokens,     // (N)
                                     const int* __restrict__ sorted_positions,  // (N)
                                     int N, int C, int seg_rows) {
    __shared__ int tok[kMaxSegRows];
    __shared__ int pos[kMaxSegRows];
    pdl_wait();
    pdl_launch_dependents();
    const int seg = blockIdx.x;
    const int begin = seg * seg_rows;
    const int n = min(seg_rows, N - begin);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        tok[i] = sorted_tokens[begin + i];
        pos[i] = sorted_positions[begin + i];
    }
    const int before = begin > 0 ? sorted_tokens[begin - 1] : -1;
    const int after = begin + n < N ? sorted_tokens[begin + n] : -1;
    __syncthreads();
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * kVec;
    if (c >= C) {
        return;
    }
    float acc[kVec];
#pragma unroll
    for (int k = 0; k < kVec; k++) acc[k] = 0.0f;
    bool began_before = tok[0] == before;  // the run being summed began in an earlier segment
    for (int g = 0; g < n; g += kInFlight) {
        Vec<floatX, kVec> d[kInFlight];
#pragma unroll
        for (int j = 0; j < kInFlight; j++) {
            if (g + j < n) d[j] = load_vec<kVec>(dout + (size_t)pos[g + j] * C + c);
        }
#pragma unroll
        for (int j = 0; j < kInFlight; j++) {
            const int i = g + j;
            if (i < n) {
#pragma unroll
                for (int k = 0; k < kVec; k++) acc[k] += to_float(d[j].v[k]);
                if (i + 1 < n && tok[i + 1] != tok[i]) {  // a run ends inside the segment
                    if (began_before) {
                        store_piece<kVec>(tail + (size_t)seg * C + c, acc);
                    } else {
                        add_to_row<kVec>(dwte + (size_t)tok[i] * C + c, acc);
                    }
#pragma unroll
                    for (int k = 0; k < kVec; k++) acc[k] = 0.0f;
                    began_before = false;
                }
            }
        }
    }
    // The segment's last run: a later piece of a crossing run, the head of one, or a whole run.
    if (began_before) {
        store_piece<kVec>(tail + (size_t)seg * C + c, acc);
    } else if (tok[n - 1] == after) {
        store_piece<kVec>(head + (size_t)seg * C + c, acc);
    } else {
        add_to_row<kVec>(dwte + (size_t)tok[n - 1] * C + c, acc);
    }
}

// Block (x, y): if segment x holds the head of a run that continues into later segments, adds
// head[x] + tail[x + 1] + ... + tail[last segment of the run], in that order, into the run's
// dwte row (channel packs as in the segments kernel). Other blocks exit at once.
template <int kVec>
__global__ void encoder_backward_crossing_runs_kernel(floatX* __restrict__ dwte,  // (V, C)
                                                      const float* __restrict__ head,
                                                      const float* __restrict__ tail,
                                                      const int* __restrict__ sorted_tokens, int N,
                                                      int C, int seg_rows) {
    pdl_wait();
    pdl_launch_dependents();
    const int seg = blockIdx.x;
    const int begin = seg * seg_rows;
    const int end = begin + seg_rows;
    if (end >= N) {
        return;
    }
    const int token = sorted_tokens[end - 1];
    if (sorted_tokens[end] != token || (begin > 0 && sorted_tokens[begin - 1] == token)) {
        return;  // the last run ends in this segment, or began in an earlier one
    }
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * kVec;
    if (c >= C) {
        return;
    }
    floatX* row = dwte + (size_t)token * C + c;
    const Vec<floatX, kVec> w = load_vec<kVec>(row);
    float acc[kVec];
    const Vec<float, kVec> h = load_vec<kVec>(head + (size_t)seg * C + c);
#pragma unroll
    for (int k = 0; k < kVec; k++) acc[k] = h.v[k];
    // The run goes on through each following segment whose first id is still `token`. The next
    // kInFlight segments' first ids and tails are loaded together, before it is known how many
    // of them belong to the run (a frequent id's run spans ~100 segments; most runs 1 or 2);
    // the tails of segments past the run are read but not used.
    const int segments = (N + seg_rows - 1) / seg_rows;
    bool in_run = true;
    for (int s0 = seg + 1; in_run; s0 += kInFlight) {
        int first[kInFlight];
        Vec<float, kVec> p[kInFlight];
#pragma unroll
        for (int j = 0; j < kInFlight; j++) {
            first[j] = -1;
            if (s0 + j < segments) {
                first[j] = sorted_tokens[(s0 + j) * seg_rows];
                p[j] = load_vec<kVec>(tail + (size_t)(s0 + j) * C + c);
            }
        }
#pragma unroll
        for (int j = 0; j < kInFlight; j++) {
            in_run = in_run && first[j] == token;
            if (in_run) {
#pragma unroll
                for (int k = 0; k < kVec; k++) acc[k] += p[j].v[k];
            }
        }
    }
    Vec<floatX, kVec> out;
#pragma unroll
    for (int k = 0; k < kVec; k++) out.v[k] = from_float<floatX>(to_float(w.v[k]) + acc[k]);
    store_vec<kVec>(row, out);
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
    for (int b0 = 0; b0 < B; b0 += kInFlight) {
        Vec<floatX, kVec> d[kInFlight];
#pragma unroll
        for (int j = 0; j < kInFlight; j++) {
            if (b0 + j < B) d[j] = load_vec<kVec>(dout + ((size_t)(b0 + j) * T + t) * C + c);
        }
#pragma unroll
        for (int j = 0; j < kInFlight; j++) {
            if (b0 + j < B) {
#pragma unroll
                for (int k = 0; k < kVec; k++) acc[k] += to_float(d[j].v[k]);
            }
        }
    }
    add_to_row<kVec>(dwpe + (size_t)t * C + c, acc, accumulate);
}

struct EncoderScratch {
    int* positions;         // (N) 0..N-1
    int* sorted_tokens;     // (N)
    int* sorted_positions;  // (N)
    float* head;            // (segments, C) crossing runs' first pieces
    float* tail;            // (segments, C) crossing runs' later pieces
    void* sort_temp;
    size_t sort_temp_bytes;
    size_t total_bytes;
};

// Entries per segment: a function of N alone, so the sums' grouping (and so their bits) is the
// same on every GPU.
int segment_rows(int N) { return N >= 16384 ? kMaxSegRows : kSmallSegRows; }
int num_segments(int N) { return (N + segment_rows(N) - 1) / segment_rows(N); }

// The regions of the scratch for N positions of C channels; base may be null to learn the size
// only.
EncoderScratch encoder_scratch_layout(void* base, int N, int C) {
    EncoderScratch s{};
    // With a null temp pointer CUB only reports the storage it needs; no work is launched.
    LLMC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, s.sort_temp_bytes, (const int*)nullptr,
                                                    (int*)nullptr, (const int*)nullptr,
                                                    (int*)nullptr, N));
    const size_t ints = round_up((size_t)N * sizeof(int), kScratchAlign);
    const size_t pieces = round_up((size_t)num_segments(N) * C * sizeof(float), kScratchAlign);
    s.total_bytes = 3 * ints + 2 * pieces + round_up(s.sort_temp_bytes, kScratchAlign);
    if (base != nullptr) {
        char* p = static_cast<char*>(base);
        s.positions = reinterpret_cast<int*>(p);
        s.sorted_tokens = reinterpret_cast<int*>(p + ints);
        s.sorted_positions = reinterpret_cast<int*>(p + 2 * ints);
        s.head = reinterpret_cast<float*>(p + 3 * ints);
        s.tail = reinterpret_cast<float*>(p + 3 * ints + pieces);
        s.sort_temp = p + 3 * ints + 2 * pieces;
    }
    return s;
}

template <int kVec>
void launch_encoder_backward_sums(const Context& ctx, floatX* dwte, floatX* dwpe,
                                  const EncoderScratch& s, const floatX* dout, int B, int T, int C,
                                  bool accumulate_dwpe) {
    const int N = B * T;
    const int packs_per_row = C / kVec;
    const int threads =
        std::min(kMaxSegThreads, (packs_per_row + kWarpSize - 1) / kWarpSize * kWarpSize);
    const dim3 seg_grid(num_segments(N), (packs_per_row + threads - 1) / threads);
    launch_kernel(ctx, ctx.stream, encoder_backward_segments_kernel<kVec>, seg_grid, threads, 0,
                  dwte, s.head, s.tail, dout, s.sorted_tokens, s.sorted_positions, N, C,
                  segment_rows(N));
    launch_kernel(ctx, ctx.stream, encoder_backward_crossing_runs_kernel<kVec>, seg_grid, threads,
                  0, dwte, (const float*)s.head, (const float*)s.tail, s.sorted_tokens, N, C,
                  segment_rows(N));
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

size_t encoder_backward_scratch_bytes(int B, int T, int C) {
    return encoder_scratch_layout(nullptr, B * T, C).total_bytes;
}

void encoder_backward(const Context& ctx, floatX* dwte, floatX* dwpe, void* scratch,
                      const floatX* dout, const int* inp, int B, int T, int C, int V,
                      bool accumulate_dwpe) {
    NvtxRange range("encoder_backward");
    LLMC_CHECK(B > 0 && T > 0 && C > 0 && V > 0, "encoder_backward: bad shape B=%d T=%d C=%d V=%d",
               B, T, C, V);
    LLMC_CHECK(scratch != nullptr && reinterpret_cast<uintptr_t>(scratch) % kScratchAlign == 0,
               "encoder_backward: scratch must be a %zu-byte aligned buffer of "
               "encoder_backward_scratch_bytes(B, T, C) bytes",
               kScratchAlign);
    const int N = B * T;
    EncoderScratch s = encoder_scratch_layout(scratch, N, C);
    // The ids are in [0, V): only their low bits need sorting (16 of them for GPT-2's 50257).
    int id_bits = 1;
    while (id_bits < 31 && (V - 1) >> id_bits != 0) id_bits++;

    launch_kernel(ctx, ctx.stream, iota_kernel, (N + kThreads - 1) / kThreads, kThreads, 0,
                  s.positions, N);
    // LSD radix sort is stable: equal ids keep their positions in increasing order.
    LLMC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.sort_temp, s.sort_temp_bytes, inp,
                                                    s.sorted_tokens, s.positions,
                                                    s.sorted_positions, N, 0, id_bits, ctx.stream));
    LLMC_CUDA_CHECK_LAST();

    const bool vec = C % kVecX == 0 && aligned16(dwte) && aligned16(dwpe) && aligned16(dout);
    if (vec) {
        launch_encoder_backward_sums<kVecX>(ctx, dwte, dwpe, s, dout, B, T, C, accumulate_dwpe);
    } else {
        launch_encoder_backward_sums<1>(ctx, dwte, dwpe, s, dout, B, T, C, accumulate_dwpe);
    }
}

}  // namespace llmc
