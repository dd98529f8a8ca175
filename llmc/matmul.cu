// matmul.cu: cuBLASLt matrix products with bias, GELU and bias-gradient epilogues.
//
// cuBLASLt is column-major; our tensors are row-major. A row-major (R x C) matrix with row
// stride ld is, read column-major, its (C x R) transpose with the same ld, so every product
// below is written as the column-major product of the transposes:
//   row-major  out(N,OC) = inp(N,IC) @ W(OC,IC)^T   <=>   col-major out^T = W^T(op T) * inp^T
// FLOPs of a linear layer: 2*N*IC*OC forward, twice that backward. At GPT-2 d12, B=4, T=1024
// these GEMMs are ~2.9 TFLOP per step; their floor is that over the measured TF32 rate.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "device_utils.cuh"
#include "launch.cuh"
#include "matmul.cuh"
#include "matmul_sm90.cuh"
#include "util.h"

namespace llmc {

namespace {

// Everything that selects a cuBLASLt plan: shape, layouts, batch, epilogue, and the pointer
// alignment the chosen algorithm may assume.
// accumulate (beta != 0) is part of the key: a plan autotuned with beta = 1 kept the candidates
// that round alike over random D values, which says nothing of their bits with beta = 0.
struct MatmulKey {
    int m, n, k, lda, ldb, ldc, ldaux, batch;
    long long stride_a, stride_b, stride_c;
    int transa, transb, epilogue, align, accumulate;
    bool operator<(const MatmulKey& o) const {
        return std::tie(m, n, k, lda, ldb, ldc, ldaux, batch, stride_a, stride_b, stride_c, transa,
                        transb, epilogue, align,
                        accumulate) < std::tie(o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.ldaux, o.batch,
                                               o.stride_a, o.stride_b, o.stride_c, o.transa,
                                               o.transb, o.epilogue, o.align, o.accumulate);
    }
};

struct MatmulPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
};

// The plans of one Context (Context::matmul_cache).
struct MatmulPlanCache final : ContextCache {
    std::map<MatmulKey, MatmulPlan*> plans;
    int autotune_skipped = 0;  // plans left untuned for want of memory
    ~MatmulPlanCache() override {
        for (auto& kv : plans) {
            MatmulPlan* p = kv.second;
            cublasLtMatrixLayoutDestroy(p->a);
            cublasLtMatrixLayoutDestroy(p->b);
            cublasLtMatrixLayoutDestroy(p->c);
            cublasLtMatmulDescDestroy(p->desc);
            delete p;
        }
    }
};

MatmulPlanCache& plan_cache(const Context& ctx) {
    if (ctx.matmul_cache == nullptr) ctx.matmul_cache = std::make_unique<MatmulPlanCache>();
    return static_cast<MatmulPlanCache&>(*ctx.matmul_cache);
}

// Largest power of two (up to 256) dividing the address and the batch stride in bytes: the
// alignment a plan may assume. Part of the plan key, so unaligned views get their own plan.
int alignment_of(const void* ptr, long long stride_bytes) {
    unsigned long long a = reinterpret_cast<unsigned long long>(ptr) | 256ull;
    if (stride_bytes != 0) a |= static_cast<unsigned long long>(stride_bytes);
    return static_cast<int>(a & (~a + 1));
}

cublasLtMatrixLayout_t make_layout(int rows, int cols, int ld, int batch, long long stride) {
    cublasLtMatrixLayout_t layout;
    LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, kCudaFloatX, rows, cols, ld));
    if (batch > 1) {
        LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
        LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
    return layout;
}

cublasComputeType_t compute_type(const Context& ctx) {
#if defined(ENABLE_BF16)
    (void)ctx;
    return CUBLAS_COMPUTE_32F;
#else
    return ctx.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
#endif
}

// The type BGRADB writes the bias gradient in; its sums run in float either way. The fp32
// build keeps the partial in float. cuBLASLt rejects a float bias gradient on bf16 products
// (CUBLAS_STATUS_INVALID_VALUE from the heuristic, seen on an H100 with CUDA 13.0), so the bf16
// build takes it as bf16 before adding it to the bf16 gradient.
#if defined(ENABLE_BF16)
typedef floatX BiasGradT;
constexpr cudaDataType_t kBiasGradType = kCudaFloatX;
#else
typedef float BiasGradT;
constexpr cudaDataType_t kBiasGradType = CUDA_R_32F;
#endif

// How many of cuBLASLt's heuristic candidates the autotuner times: kDefaultCandidates, or
// LLMC_AUTOTUNE_CANDIDATES (1 to kMaxCandidates). More candidates cost start-up time only: the
// bits stay --autotune 0's whatever the count (see the autotuner below).
constexpr int kDefaultCandidates = 8;
constexpr int kMaxCandidates = 64;

int candidates_wanted() {
    static const int wanted =
        env_int("LLMC_AUTOTUNE_CANDIDATES", 1, kMaxCandidates, kDefaultCandidates);
    return wanted;
}

MatmulPlan* build_plan(const Context& ctx, const MatmulKey& key,
                       cublasLtMatmulHeuristicResult_t* candidates, int* num_candidates) {
    MatmulPlan* p = new MatmulPlan();
    LLMC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute_type(ctx), CUDA_R_32F));
    cublasOperation_t ta = key.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = key.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = static_cast<cublasLtEpilogue_t>(key.epilogue);
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (epi == CUBLASLT_EPILOGUE_BGRADB) {
        cudaDataType_t bt = kBiasGradType;
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    if (key.ldaux > 0) {
        int64_t ld = key.ldaux;
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    p->a = key.transa ? make_layout(key.k, key.m, key.lda, key.batch, key.stride_a)
                      : make_layout(key.m, key.k, key.lda, key.batch, key.stride_a);
    p->b = key.transb ? make_layout(key.n, key.k, key.ldb, key.batch, key.stride_b)
                      : make_layout(key.k, key.n, key.ldb, key.batch, key.stride_b);
    p->c = make_layout(key.m, key.n, key.ldc, key.batch, key.stride_c);

    cublasLtMatmulPreference_t pref;
    LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.lt_workspace_bytes,
        sizeof(ctx.lt_workspace_bytes)));
    uint32_t align = static_cast<uint32_t>(key.align);
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
        LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
    }
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
        ctx.lt, p->desc, p->a, p->b, p->c, p->c, pref, candidates_wanted(), candidates, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    // Either failure names the product, so a rejected shape or epilogue can be found at once.
    LLMC_CHECK(st == CUBLAS_STATUS_SUCCESS && found >= 1,
               "cuBLASLt has no algorithm (%s) for m=%d n=%d k=%d lda=%d ldb=%d ldc=%d transa=%d "
               "transb=%d epilogue=%d ldaux=%d batch=%d alignment=%d",
               cublasGetStatusName(st), key.m, key.n, key.k, key.lda, key.ldb, key.ldc, key.transa,
               key.transb, key.epilogue, key.ldaux, key.batch, key.align);
    *num_candidates = found;
    p->algo = candidates[0].algo;
    return p;
}

// Column-major D(m,n) = alpha * op(A) op(B) + beta * D, batched with strides, with an epilogue.
// bias: the bias (BIAS epilogues) or the bias-gradient output (BGRADB); aux: the GELU input.
// on_branch: on ctx.branch_stream with the branch's workspace (context.cuh).
struct LtCall {
    int m, n, k;
    bool transa, transb;
    const floatX* A;
    int lda;
    long long stride_a;
    const floatX* B;
    int ldb;
    long long stride_b;
    floatX* D;
    int ldd;
    long long stride_d;
    // C of D = alpha * op(A) op(B) + beta * C, laid out as D; null: C is D itself (in place).
    const floatX* C = nullptr;
    int batch = 1;
    float alpha = 1.0f, beta = 0.0f;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    void* aux = nullptr;
    int ldaux = 0;
    bool on_branch = false;
};

void set_epilogue_pointers(MatmulPlan* p, const LtCall& c) {
    if (c.bias != nullptr) {
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &c.bias, sizeof(c.bias)));
    }
    if (c.aux != nullptr) {
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &c.aux, sizeof(c.aux)));
    }
}

cublasStatus_t run_algo(const Context& ctx, const MatmulPlan* p, const LtCall& c,
                        const cublasLtMatmulAlgo_t* algo) {
    void* workspace = c.on_branch ? ctx.branch_lt_workspace : ctx.lt_workspace;
    const floatX* C = c.C != nullptr ? c.C : c.D;
    return cublasLtMatmul(ctx.lt, p->desc, &c.alpha, c.A, p->a, c.B, p->b, &c.beta, C, p->c, c.D,
                          p->c, algo, workspace, ctx.lt_workspace_bytes,
                          stream_for(ctx, c.on_branch));
}

// ---- Autotuning that cannot change the bits ----------------------------------------------
// cuBLASLt's candidates for one plan need not round alike (another split of k, another order of
// the epilogue), so keeping the fastest by timing let timing noise pick the bits of every later
// result: two runs of one command could differ. Here the heuristic's first candidate, the one
// --autotune 0 runs, is the reference. Every candidate runs once on the same fresh random
// operands of the call's shape (A, B, the bias and the GELU input drawn uniformly from [-1, 1),
// never zeros, so every product and every epilogue term shows; with beta != 0 D prefilled at
// random, or a separate C random), and only those whose every output (D, the GELU aux output,
// the bias gradient) is bitwise the reference's compete on time (median of 5 runs; ties keep the
// earlier). Equal bits on millions of random outputs mean the same floating-point operations per
// element (another order of summation or another split would differ somewhere), so whichever
// candidate wins, the results are those of --autotune 0, on any data. Runs once per plan, in the
// eager warm-up step. Extra memory while it runs (tuning_bytes): one random buffer as large as the
// largest input (A and B alias it: both are read-only), and two copies of D when beta != 0; the
// call's own D (and aux, bias-gradient) outputs serve as the outputs, since the real call rewrites
// them. When that memory is not there, the plan keeps the first candidate: the same bits, maybe
// slower.

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__global__ void fill_uniform_kernel(floatX* __restrict__ out, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint64_t h = mix64(seed + (i + 1) * 0x9E3779B97F4A7C15ull);
        out[i] = from_float<floatX>((float)(h >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
}

// *out += sum over i of mix64(i << 16 | word_i) (mod 2^64) over the 16-bit words of a column-major
// layout (rows words per column, columns ld words apart, batch matrices stride words apart):
// a hash of the bytes that any change of any word alters (but for a 2^-64 chance), whose sum
// does not depend on the order of the atomics. Only the words the product writes are read (the
// padding between columns or matrices may never have been written).
__global__ void hash_words_kernel(const uint16_t* __restrict__ words, size_t rows, size_t cols,
                                  size_t ld, size_t batch, size_t stride, uint64_t salt,
                                  unsigned long long* out) {
    unsigned long long acc = 0;
    const size_t n = rows * cols * batch;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i % rows, col = (i / rows) % cols, mat = i / (rows * cols);
        acc += mix64(salt ^ ((uint64_t)i << 16 | words[mat * stride + col * ld + row]));
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
        acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (threadIdx.x % kWarpSize == 0) atomicAdd(out, acc);
}

// Elements a column-major (rows x cols) layout with leading dimension ld spans over `batch`
// matrices `stride` apart.
size_t layout_extent(int rows, int cols, long long ld, int batch, long long stride) {
    return (size_t)(batch - 1) * stride + (size_t)(cols - 1) * ld + rows;
}

struct TuneShape {
    size_t in, d, aux;  // elements: the random input, D, the GELU aux
    bool aux_in, aux_out, bias_in, bias_out;
};

TuneShape tune_shape(const LtCall& c) {
    TuneShape s{};
    s.aux_in = c.epilogue == CUBLASLT_EPILOGUE_DGELU;
    s.aux_out =
        c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX || c.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    s.bias_out = c.epilogue == CUBLASLT_EPILOGUE_BGRADB;
    s.bias_in = c.bias != nullptr && !s.bias_out;
    const size_t a = c.transa ? layout_extent(c.k, c.m, c.lda, c.batch, c.stride_a)
                              : layout_extent(c.m, c.k, c.lda, c.batch, c.stride_a);
    const size_t b = c.transb ? layout_extent(c.n, c.k, c.ldb, c.batch, c.stride_b)
                              : layout_extent(c.k, c.n, c.ldb, c.batch, c.stride_b);
    s.d = layout_extent(c.m, c.n, c.ldd, c.batch, c.stride_d);
    s.aux = c.aux != nullptr ? layout_extent(c.m, c.n, c.ldaux, 1, 0) : 0;
    s.in = std::max({a, b, s.aux_in ? s.aux : 0, s.bias_in ? (size_t)c.m : 0});
    return s;
}

// A hash of every output of one run of `c` (synchronizes).
uint64_t outputs_hash(const Context& ctx, const LtCall& c, const TuneShape& s,
                      unsigned long long* d_hash) {
    LLMC_CUDA_CHECK(cudaMemsetAsync(d_hash, 0, sizeof(*d_hash), ctx.stream));
    // add(p, rows, cols, ld, batch, stride, element bytes, salt): one output's layout, in words.
    auto add = [&](const void* p, size_t rows, size_t cols, size_t ld, size_t batch, size_t stride,
                   size_t bytes, uint64_t salt) {
        const size_t w = bytes / 2, n = rows * w * cols * batch;
        const int blocks = (int)std::min<size_t>((n + 255) / 256, 4 * (size_t)ctx_num_sms(ctx));
        hash_words_kernel<<<blocks, 256, 0, ctx.stream>>>(static_cast<const uint16_t*>(p), rows * w,
                                                          cols, ld * w, batch, stride * w, salt,
                                                          d_hash);
        LLMC_CUDA_CHECK_LAST();
    };
    add(c.D, c.m, c.n, c.ldd, c.batch, c.stride_d, sizeof(floatX), 1);
    if (s.aux_out) add(c.aux, c.m, c.n, c.ldaux, 1, 0, sizeof(floatX), 2);
    if (s.bias_out) add(c.bias, c.n, 1, c.n, 1, 0, sizeof(BiasGradT), 3);
    unsigned long long h = 0;
    LLMC_CUDA_CHECK(cudaMemcpyAsync(&h, d_hash, sizeof(h), cudaMemcpyDeviceToHost, ctx.stream));
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    return h;
}

// Median of 5 timed runs of one candidate, in ms.
float time_candidate(const Context& ctx, const MatmulPlan* p, const LtCall& c,
                     const cublasLtMatmulAlgo_t* algo, cudaEvent_t start, cudaEvent_t stop) {
    float times[5];
    for (float& t : times) {
        LLMC_CUDA_CHECK(cudaEventRecord(start, ctx.stream));
        LLMC_CUBLAS_CHECK(run_algo(ctx, p, c, algo));
        LLMC_CUDA_CHECK(cudaEventRecord(stop, ctx.stream));
        LLMC_CUDA_CHECK(cudaEventSynchronize(stop));
        LLMC_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    }
    std::sort(times, times + 5);
    return times[2];
}

// Stream-ordered allocation that reports failure instead of exiting (tuning is optional).
bool try_alloc(const Context& ctx, void** p, size_t bytes) {
    if (cudaMallocAsync(p, bytes, ctx.stream) == cudaSuccess) return true;
    cudaGetLastError();  // clear the (non-sticky) allocation error
    *p = nullptr;
    return false;
}

void autotune(const Context& ctx, MatmulPlan* p, const LtCall& c,
              const cublasLtMatmulHeuristicResult_t* candidates, int count) {
    const cudaStream_t stream = stream_for(ctx, c.on_branch);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    LLMC_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (count < 2 || capture != cudaStreamCaptureStatusNone) return;
    // Everything below runs on ctx.stream. A call bound for the branch stream first lets that
    // stream drain (its earlier work may write D), and the real call waits for the tuning's end.
    if (c.on_branch) LLMC_CUDA_CHECK(cudaDeviceSynchronize());
    const TuneShape s = tune_shape(c);
    const bool accumulate = c.beta != 0.0f;
    void *random = nullptr, *d_init = nullptr, *d_saved = nullptr, *d_hash = nullptr;
    bool ok = try_alloc(ctx, &random, s.in * sizeof(floatX)) &&
              try_alloc(ctx, &d_hash, sizeof(unsigned long long));
    if (ok && accumulate) {
        ok = try_alloc(ctx, &d_init, s.d * sizeof(floatX)) &&
             try_alloc(ctx, &d_saved, s.d * sizeof(floatX));
    }
    if (ok) {
        const int grid = 4 * ctx_num_sms(ctx);
        fill_uniform_kernel<<<grid, 256, 0, ctx.stream>>>(static_cast<floatX*>(random), s.in, 1);
        LLMC_CUDA_CHECK_LAST();
        if (accumulate) {
            fill_uniform_kernel<<<grid, 256, 0, ctx.stream>>>(static_cast<floatX*>(d_init), s.d, 2);
            LLMC_CUDA_CHECK_LAST();
            LLMC_CUDA_CHECK(cudaMemcpyAsync(d_saved, c.D, s.d * sizeof(floatX),
                                            cudaMemcpyDeviceToDevice, ctx.stream));
        }
        LtCall t = c;
        t.on_branch = false;
        t.A = t.B = static_cast<const floatX*>(random);
        if (t.C != nullptr) t.C = static_cast<const floatX*>(d_init);  // random, never written
        if (s.aux_in) t.aux = random;
        if (s.bias_in) t.bias = random;
        set_epilogue_pointers(p, t);
        auto run_once = [&](int i) {
            if (accumulate) {
                LLMC_CUDA_CHECK(cudaMemcpyAsync(t.D, d_init, s.d * sizeof(floatX),
                                                cudaMemcpyDeviceToDevice, ctx.stream));
            }
            return run_algo(ctx, p, t, &candidates[i].algo) == CUBLAS_STATUS_SUCCESS;
        };
        auto* hash = static_cast<unsigned long long*>(d_hash);
        int same = 0, best = 0;
        std::string times;  // for LLMC_AUTOTUNE_LOG: each candidate's median ms, "-" if not equal
        if (run_once(0)) {
            const uint64_t reference = outputs_hash(ctx, t, s, hash);
            cudaEvent_t start, stop;
            LLMC_CUDA_CHECK(cudaEventCreate(&start));
            LLMC_CUDA_CHECK(cudaEventCreate(&stop));
            float best_ms = time_candidate(ctx, p, t, &candidates[0].algo, start, stop);
            char buf[32];
            std::snprintf(buf, sizeof(buf), " %.4f", best_ms);
            times += buf;
            for (int i = 1; i < count; i++) {
                if (!run_once(i) || outputs_hash(ctx, t, s, hash) != reference) {
                    times += " -";
                    continue;
                }
                same++;
                const float ms = time_candidate(ctx, p, t, &candidates[i].algo, start, stop);
                std::snprintf(buf, sizeof(buf), " %.4f", ms);
                times += buf;
                if (ms < best_ms) best_ms = ms, best = i;
            }
            LLMC_CUDA_CHECK(cudaEventDestroy(start));
            LLMC_CUDA_CHECK(cudaEventDestroy(stop));
            p->algo = candidates[best].algo;
        }
        if (std::getenv("LLMC_AUTOTUNE_LOG") != nullptr) {
            std::fprintf(stderr,
                         "autotune: m=%d n=%d k=%d batch=%d epilogue=%d: %d of %d other candidates "
                         "bitwise equal to the first; running #%d; ms:%s\n",
                         c.m, c.n, c.k, c.batch, (int)c.epilogue, same, count - 1, best,
                         times.c_str());
        }
        if (accumulate) {
            LLMC_CUDA_CHECK(cudaMemcpyAsync(c.D, d_saved, s.d * sizeof(floatX),
                                            cudaMemcpyDeviceToDevice, ctx.stream));
        }
    } else if (plan_cache(ctx).autotune_skipped++ == 0) {
        std::fprintf(stderr,
                     "note: too little free device memory to autotune a %d x %d x %d product; it "
                     "keeps cuBLASLt's first candidate (the same results, maybe slower)\n",
                     c.m, c.n, c.k);
    }
    for (void* q : {random, d_init, d_saved, d_hash}) {
        if (q != nullptr) LLMC_CUDA_CHECK(cudaFreeAsync(q, ctx.stream));
    }
    if (c.on_branch) LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

void lt_matmul(const Context& ctx, const LtCall& c) {
    const long long es = sizeof(floatX);
    int align = alignment_of(c.A, c.stride_a * es);
    align = std::min(align, alignment_of(c.B, c.stride_b * es));
    align = std::min(align, alignment_of(c.D, c.stride_d * es));
    if (c.C != nullptr) align = std::min(align, alignment_of(c.C, c.stride_d * es));
    MatmulKey key{c.m,      c.n,        c.k,        c.lda,         c.ldb,      c.ldd,
                  c.ldaux,  c.batch,    c.stride_a, c.stride_b,    c.stride_d, c.transa,
                  c.transb, c.epilogue, align,      c.beta != 0.0f};
    std::map<MatmulKey, MatmulPlan*>& plans = plan_cache(ctx).plans;
    auto it = plans.find(key);
    MatmulPlan* p = nullptr;
    cublasLtMatmulHeuristicResult_t candidates[kMaxCandidates];
    int count = 0;  // > 0 only when the plan is new: the candidates to time
    if (it == plans.end()) {
        p = build_plan(ctx, key, candidates, &count);
        plans[key] = p;
    } else {
        p = it->second;
    }
    if (count > 0 && ctx.autotune) autotune(ctx, p, c, candidates, count);
    // Epilogue pointers change per call (per layer), the rest of the plan does not.
    set_epilogue_pointers(p, c);
    LLMC_CUBLAS_CHECK(run_algo(ctx, p, c, &p->algo));
}

// dbias[i] += partial[i]: the bias gradient of one micro-step added to the running sum (or
// written, without accumulate).
__global__ void bias_grad_accumulate_kernel(floatX* __restrict__ dbias,
                                            const BiasGradT* __restrict__ partial, int n,
                                            bool accumulate) {
    pdl_wait();
    pdl_launch_dependents();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) write_grad(dbias + i, to_float(partial[i]), accumulate);
}

// Bias gradient without cuBLASLt's BGRADB (which runs as a separate, slower reduction kernel;
// docs/perf-log.md): dbias (OC) += column sums of dout (N, OC), deterministic. Stage 1: block
// (strip, r) sums rows [r * rows, (r + 1) * rows) of a strip of 32 * kVecX columns; its warps take
// every kBiasWarps-th row, each lane kVecX adjacent columns (16-byte loads), then the warps' sums
// are added in warp order into partial row r. Stage 2 adds the kBiasRowBlocks partial rows in
// order. The partition does not depend on the device, so neither do the bits.
constexpr int kBiasRowBlocks = 64;
constexpr int kBiasWarps = 8;
constexpr int kBiasStrip = kWarpSize * kVecX;

__global__ void __launch_bounds__(kBiasWarps* kWarpSize)
    bias_backward_partial_kernel(float* __restrict__ partial,      // (kBiasRowBlocks, OC)
                                 const floatX* __restrict__ dout,  // (N, OC)
                                 int N, int OC) {
    __shared__ float warp_sums[kBiasWarps][kBiasStrip];
    pdl_wait();
    pdl_launch_dependents();
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const int col = blockIdx.x * kBiasStrip + lane * kVecX;
    const int rows = (N + kBiasRowBlocks - 1) / kBiasRowBlocks;
    const int row_end = min(N, (blockIdx.y + 1) * rows);
    float acc[kVecX];
#pragma unroll
    for (int k = 0; k < kVecX; k++) acc[k] = 0.0f;
    if (col < OC) {
#pragma unroll 4
        for (int row = blockIdx.y * rows + warp; row < row_end; row += kBiasWarps) {
            const Vec<floatX, kVecX> v = load_vec<kVecX>(dout + (size_t)row * OC + col);
#pragma unroll
            for (int k = 0; k < kVecX; k++) acc[k] += to_float(v.v[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < kVecX; k++) warp_sums[warp][lane * kVecX + k] = acc[k];
    __syncthreads();
    for (int j = threadIdx.x; j < kBiasStrip; j += blockDim.x) {
        const int c = blockIdx.x * kBiasStrip + j;
        if (c >= OC) continue;
        float total = 0.0f;
        for (int w = 0; w < kBiasWarps; w++) total += warp_sums[w][j];
        partial[(size_t)blockIdx.y * OC + c] = total;
    }
}

// dbias (OC) += the column sums of partial's `rows` rows (= without accumulate; also our DGELU
// kernel's partial rows, matmul_sm90.cuh), in column_sum_by_groups's order: a block of 32
// columns x kReduceGroups groups. One thread a column summing every row in turn was
// latency-bound (the DGELU kernel's 512 rows at d12 B=64: docs/perf-log.md, "Bias gradients").
constexpr int kReduceGroups = 32;
__global__ void __launch_bounds__(kWarpSize* kReduceGroups)
    bias_backward_reduce_kernel(floatX* __restrict__ dbias, const float* __restrict__ partial,
                                int rows, int OC, bool accumulate) {
    pdl_wait();
    pdl_launch_dependents();
    const int c = blockIdx.x * kWarpSize + threadIdx.x;
    const float total = column_sum_by_groups<kReduceGroups>(partial + c, rows, OC, c < OC);
    if (threadIdx.y == 0 && c < OC) write_grad(dbias + c, total, accumulate);
}

void bias_backward_reduce(const Context& ctx, cudaStream_t stream, floatX* dbias,
                          const float* partial, int rows, int OC, bool accumulate) {
    launch_kernel(ctx, stream, bias_backward_reduce_kernel, (OC + kWarpSize - 1) / kWarpSize,
                  dim3(kWarpSize, kReduceGroups), 0, dbias, partial, rows, OC, accumulate);
}

// The vector kernels need whole 16-byte rows; anything else goes through BGRADB.
bool bias_backward_vectorized(const floatX* dout, int OC) {
    return OC % kVecX == 0 && reinterpret_cast<uintptr_t>(dout) % 16 == 0;
}

void bias_backward(const Context& ctx, cudaStream_t stream, floatX* dbias, float* scratch,
                   const floatX* dout, int N, int OC, bool accumulate) {
    const dim3 grid((OC + kBiasStrip - 1) / kBiasStrip, kBiasRowBlocks);
    launch_kernel(ctx, stream, bias_backward_partial_kernel, grid, kBiasWarps * kWarpSize, 0,
                  scratch, dout, N, OC);
    bias_backward_reduce(ctx, stream, dbias, scratch, kBiasRowBlocks, OC, accumulate);
}

}  // namespace

size_t matmul_bias_scratch_floats(int OC) { return (size_t)kBiasRowBlocks * OC; }

size_t matmul_gelu_bias_scratch_floats(int N, int IC) {
    return (size_t)dgelu_bias_partial_rows(N) * IC;
}

void matmul_bias_backward(const Context& ctx, floatX* dbias, float* scratch, const floatX* dout,
                          int N, int OC, bool accumulate) {
    LLMC_CHECK(N > 0 && OC > 0 && bias_backward_vectorized(dout, OC),
               "matmul_bias_backward: needs N, OC > 0, OC a multiple of %d and 16-byte aligned "
               "dout (N=%d OC=%d)",
               kVecX, N, OC);
    bias_backward(ctx, ctx.stream, dbias, scratch, dout, N, OC, accumulate);
}

void matmul_forward(const Context& ctx, floatX* out, const floatX* inp, const floatX* weight,
                    const floatX* bias, int N, int IC, int OC, floatX* pre_gelu) {
    LLMC_CHECK(N > 0 && IC > 0 && OC > 0, "matmul_forward: bad shape N=%d IC=%d OC=%d", N, IC, OC);
    if (pre_gelu != nullptr && bias != nullptr &&
        gelu_gemm_forward_chosen(ctx, N, IC, OC, {out, pre_gelu, inp, weight, bias})) {
        gelu_gemm_forward(ctx, out, pre_gelu, inp, weight, bias, N, IC, OC);
        return;
    }
    if (pre_gelu == nullptr &&
        plain_gemm_chosen(ctx, bias != nullptr, false, N, IC, OC, {out, inp, weight, bias})) {
        plain_gemm_forward(ctx, out, inp, weight, bias, nullptr, N, IC, OC);
        return;
    }
    LtCall c{};
    c.m = OC, c.n = N, c.k = IC;
    c.transa = true, c.transb = false;
    c.A = weight, c.lda = IC, c.stride_a = 0;
    c.B = inp, c.ldb = IC, c.stride_b = 0;
    c.D = pre_gelu ? pre_gelu : out, c.ldd = OC, c.stride_d = 0;
    c.bias = bias;
    if (pre_gelu != nullptr) {
        // One GEMM writes both the GELU input (aux, kept for backward) and its output (D).
        c.D = out;
        c.aux = pre_gelu;
        c.ldaux = OC;
        c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    } else {
        c.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
    lt_matmul(ctx, c);
}

void matmul_forward_residual(const Context& ctx, floatX* out, const floatX* inp,
                             const floatX* weight, const floatX* bias, const floatX* residual,
                             int N, int IC, int OC) {
    LLMC_CHECK(N > 0 && IC > 0 && OC > 0, "matmul_forward_residual: bad shape N=%d IC=%d OC=%d", N,
               IC, OC);
    LLMC_CHECK(residual != nullptr && residual != out && residual != inp,
               "matmul_forward_residual: the residual must be its own buffer, not out or inp");
    if (plain_gemm_chosen(ctx, bias != nullptr, true, N, IC, OC,
                          {out, inp, weight, bias, residual})) {
        plain_gemm_forward(ctx, out, inp, weight, bias, residual, N, IC, OC);
        return;
    }
    LtCall c{};
    c.m = OC, c.n = N, c.k = IC;
    c.transa = true, c.transb = false;
    c.A = weight, c.lda = IC, c.stride_a = 0;
    c.B = inp, c.ldb = IC, c.stride_b = 0;
    c.D = out, c.ldd = OC, c.stride_d = 0;
    c.C = residual, c.beta = 1.0f;
    c.bias = bias;
    c.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    lt_matmul(ctx, c);
}

bool matmul_backward_input(const Context& ctx, floatX* dinp, const floatX* dout,
                           const floatX* weight, int N, int IC, int OC, const floatX* pre_gelu,
                           floatX* gelu_dbias, float* gelu_dbias_scratch, bool accumulate) {
    LLMC_CHECK(N > 0 && IC > 0 && OC > 0, "matmul_backward_input: bad shape N=%d IC=%d OC=%d", N,
               IC, OC);
    LLMC_CHECK(gelu_dbias == nullptr || (pre_gelu != nullptr && gelu_dbias_scratch != nullptr),
               "matmul_backward_input: gelu_dbias needs pre_gelu and gelu_dbias_scratch");
    if (pre_gelu != nullptr && gelu_dbias != nullptr &&
        gelu_gemm_applies(ctx, N, IC, OC, {dinp, dout, weight, pre_gelu, gelu_dbias_scratch})) {
        dgelu_gemm_backward(ctx, dinp, gelu_dbias_scratch, dout, weight, pre_gelu, N, IC, OC);
        bias_backward_reduce(ctx, ctx.stream, gelu_dbias, gelu_dbias_scratch,
                             dgelu_bias_partial_rows(N), IC, accumulate);
        return true;
    }
    // dinp^T (IC x N) = W^T (col-major view of W, IC x OC) * dout^T (OC x N)
    LtCall d{};
    d.m = IC, d.n = N, d.k = OC;
    d.transa = false, d.transb = false;
    d.A = weight, d.lda = IC, d.stride_a = 0;
    d.B = dout, d.ldb = OC, d.stride_b = 0;
    d.D = dinp, d.ldd = IC, d.stride_d = 0;
    if (pre_gelu != nullptr) {
        // DGELU_BGRAD (the fc bias gradient in the same call) was slower: docs/perf-log.md.
        d.epilogue = CUBLASLT_EPILOGUE_DGELU;
        d.aux = const_cast<floatX*>(pre_gelu);  // read-only for DGELU
        d.ldaux = IC;
    }
    lt_matmul(ctx, d);
    return false;
}

void matmul_backward_weight(const Context& ctx, floatX* dweight, floatX* dbias,
                            float* dbias_scratch, const floatX* dout, const floatX* inp, int N,
                            int IC, int OC, bool on_branch, bool accumulate) {
    LLMC_CHECK(N > 0 && IC > 0 && OC > 0, "matmul_backward_weight: bad shape N=%d IC=%d OC=%d", N,
               IC, OC);
    LLMC_CHECK(dbias == nullptr || dbias_scratch != nullptr,
               "matmul_backward: a bias gradient needs dbias_scratch");
    LLMC_CHECK(!on_branch || (ctx.branches & kBranchGemms) != 0,
               "matmul_backward_weight: on_branch needs kBranchGemms (the branch's workspace)");
    if (on_branch) branch_fork(ctx);
    const cudaStream_t stream = stream_for(ctx, on_branch);
    // dW^T (IC x OC) += inp^T (IC x N) * dout (N x OC) (beta 1; beta 0, D unread, without
    // accumulate); BGRADB sums op(B) = dout over N.
    LtCall w{};
    w.m = IC, w.n = OC, w.k = N;
    w.transa = false, w.transb = true;
    w.A = inp, w.lda = IC, w.stride_a = 0;
    w.B = dout, w.ldb = OC, w.stride_b = 0;
    w.D = dweight, w.ldd = IC, w.stride_d = 0;
    w.beta = accumulate ? 1.0f : 0.0f;
    w.on_branch = on_branch;
    const bool own_bias_kernel = dbias != nullptr && bias_backward_vectorized(dout, OC);
    if (dbias != nullptr && !own_bias_kernel) {
        w.epilogue = CUBLASLT_EPILOGUE_BGRADB;
        w.bias = dbias_scratch;
    }
    lt_matmul(ctx, w);
    if (own_bias_kernel) {
        bias_backward(ctx, stream, dbias, dbias_scratch, dout, N, OC, accumulate);
    } else if (dbias != nullptr) {
        launch_kernel(ctx, stream, bias_grad_accumulate_kernel, (OC + 255) / 256, 256, 0, dbias,
                      reinterpret_cast<const BiasGradT*>(dbias_scratch), OC, accumulate);
    }
}

void matmul_backward(const Context& ctx, floatX* dinp, floatX* dweight, floatX* dbias,
                     float* dbias_scratch, const floatX* dout, const floatX* inp,
                     const floatX* weight, int N, int IC, int OC, const floatX* pre_gelu,
                     bool accumulate) {
    matmul_backward_input(ctx, dinp, dout, weight, N, IC, OC, pre_gelu);
    matmul_backward_weight(ctx, dweight, dbias, dbias_scratch, dout, inp, N, IC, OC, false,
                           accumulate);
}

void matmul_strided_batched(const Context& ctx, floatX* C, const floatX* A, const floatX* B, int M,
                            int N, int K, bool trans_a, bool trans_b, int lda, int ldb, int ldc,
                            long long stride_a, long long stride_b, long long stride_c, int batch,
                            float alpha, float beta) {
    LLMC_CHECK(M > 0 && N > 0 && K > 0 && batch > 0,
               "matmul_strided_batched: bad shape M=%d N=%d K=%d batch=%d", M, N, K, batch);
    // Row-major C = op(A) op(B)  <=>  col-major C^T = op(B)^T op(A)^T, and a row-major matrix
    // read column-major is already its transpose: swap the operands, keep the flags.
    LtCall c{};
    c.m = N, c.n = M, c.k = K;
    c.transa = trans_b, c.transb = trans_a;
    c.A = B, c.lda = ldb, c.stride_a = stride_b;
    c.B = A, c.ldb = lda, c.stride_b = stride_a;
    c.D = C, c.ldd = ldc, c.stride_d = stride_c;
    c.batch = batch;
    c.alpha = alpha, c.beta = beta;
    lt_matmul(ctx, c);
}

}  // namespace llmc
