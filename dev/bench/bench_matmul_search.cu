// bench_matmul_search.cu: how much faster the trainer's cuBLASLt products could run with a
// configuration found by search rather than by cuBLASLt's heuristic, which returns at most 8
// candidates for these shapes (docs/perf-log.md, "GEMM candidates").
//
//   build/bf16/dev/bench/bench_matmul_search [--rows N] [--only NAME,...] [--runs R] [--seconds S]
//                                            [--max-configs C]
//
// For each product of the d12 step (N = B*T rows, 65536 by default; the lm-head's products take
// 8192-row chunks) it times, on random bf16 operands (never zeros):
//   heuristic: every candidate cuBLASLt's heuristic returns (BEST_FIT, up to 64 asked);
//   by id:     the heuristic limited to each algorithm id (CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
//              with CUDA 13.0 on an H200 it returned no candidates);
//   search:    around each heuristic candidate, every tile, cluster shape, CTA swizzle and custom
//              option that cublasLtMatmulAlgoCheck accepts (its id, stages and split kept).
// Each is run once and its output hashed; "same bits" means bitwise the heuristic's first
// candidate's output (the --autotune 0 reference the trainer's autotuner holds every candidate
// to). Times: median of R event-timed runs after one warm-up, in us, and TFLOP/s.
// The row printed per product: the heuristic's first, the fastest heuristic candidate with the
// same bits (what the trainer's autotuner runs), the fastest found by id and by search with the
// same bits, and the fastest of any bits, with its configuration.
// Times are of each product alone at the GPU's full clock. Inside a d12 B=64 step the GPU runs at
// its power limit, and configurations found here to be faster alone made the step slower
// (docs/perf-log.md, "cuBLASLt configurations by search"): confirm any choice in the step.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "test/test_device.h"

namespace {

enum Epilogue { kNone, kBias, kGeluAuxBias, kDgelu };

struct Product {
    const char* name;
    int m, n, k;  // column-major D(m, n) = op(A)(m, k) op(B)(k, n)
    bool transa, transb;
    Epilogue epilogue;
    bool beta1;
};

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__global__ void fill_kernel(__nv_bfloat16* out, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint64_t h = mix64(seed + (i + 1) * 0x9E3779B97F4A7C15ull);
        out[i] = __float2bfloat16((float)(h >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
}

__global__ void hash_kernel(const uint16_t* w, size_t n, unsigned long long* out) {
    unsigned long long acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        acc += mix64((uint64_t)i << 16 | w[i]);
    for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x % 32 == 0) atomicAdd(out, acc);
}

struct Found {
    float us = 1e30f;
    std::string what;
};

struct Bench {
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void* workspace;
    size_t workspace_bytes = 32u << 20;
    __nv_bfloat16 *A, *B, *C, *D, *bias, *aux;
    unsigned long long* d_hash;
    cudaEvent_t e0, e1;
    int runs = 9;
    long max_configs = 50000;  // configurations checked by the search, per product
    long max_runs = 3000;      // configurations run, per product
    double seconds = 30.0;     // wall-clock budget per product
    std::chrono::steady_clock::time_point start;
    bool out_of_time() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
               seconds;
    }

    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    float alpha = 1.0f, beta = 0.0f;
    const __nv_bfloat16* Cin;
    size_t d_elems;

    void setup(const Product& p) {
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = p.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasOperation_t tb = p.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
        LLMC_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
        LLMC_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
        const cublasLtEpilogue_t epis[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                           CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                           CUBLASLT_EPILOGUE_DGELU};
        cublasLtEpilogue_t epi = epis[p.epilogue];
        LLMC_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
        if (p.epilogue == kBias || p.epilogue == kGeluAuxBias) {
            LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        }
        if (p.epilogue == kGeluAuxBias || p.epilogue == kDgelu) {
            // The GELU input: written by GELU_AUX_BIAS, read by DGELU (C holds random values).
            void* aux_ptr = p.epilogue == kDgelu ? (void*)C : (void*)aux;
            const int64_t ld = p.m;
            LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr, sizeof(aux_ptr)));
            LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
        }
        const int lda = p.transa ? p.k : p.m, ldb = p.transb ? p.n : p.k;
        LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.transa ? p.k : p.m,
                                                     p.transa ? p.m : p.k, lda));
        LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.transb ? p.n : p.k,
                                                     p.transb ? p.k : p.n, ldb));
        LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, p.m, p.n, p.m));
        beta = p.beta1 ? 1.0f : 0.0f;
        Cin = p.beta1 ? C : D;
        d_elems = (size_t)p.m * p.n;
    }
    void teardown() {
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(desc);
    }
    cublasStatus_t run(const cublasLtMatmulAlgo_t& algo) {
        return cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, Cin, lc, D, lc, &algo,
                              workspace, workspace_bytes, stream);
    }
    uint64_t hash() {
        LLMC_CUDA_CHECK(cudaMemsetAsync(d_hash, 0, sizeof(*d_hash), stream));
        hash_kernel<<<528, 256, 0, stream>>>(reinterpret_cast<const uint16_t*>(D), d_elems, d_hash);
        LLMC_CUDA_CHECK_LAST();
        unsigned long long h = 0;
        LLMC_CUDA_CHECK(cudaMemcpyAsync(&h, d_hash, sizeof(h), cudaMemcpyDeviceToHost, stream));
        LLMC_CUDA_CHECK(cudaStreamSynchronize(stream));
        return h;
    }
    // Median of `runs` timed runs in us; < 0 if the algorithm fails to run.
    float time(const cublasLtMatmulAlgo_t& algo, int n) {
        if (run(algo) != CUBLAS_STATUS_SUCCESS) {
            cudaGetLastError();
            return -1.0f;
        }
        std::vector<float> t(n);
        for (float& x : t) {
            LLMC_CUDA_CHECK(cudaEventRecord(e0, stream));
            run(algo);
            LLMC_CUDA_CHECK(cudaEventRecord(e1, stream));
            LLMC_CUDA_CHECK(cudaEventSynchronize(e1));
            LLMC_CUDA_CHECK(cudaEventElapsedTime(&x, e0, e1));
        }
        std::sort(t.begin(), t.end());
        return t[n / 2] * 1000.0f;
    }
};

int config_attr(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t v = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &w);
    return (int)v;
}

std::string describe(const cublasLtMatmulAlgo_t& a) {
    char buf[160];
    std::snprintf(
        buf, sizeof(buf), "id %d tile %d stages %d cluster %d swizzle %d custom %d splitk %d",
        config_attr(a, CUBLASLT_ALGO_CONFIG_ID), config_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
        config_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
        config_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
        config_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
        config_attr(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
        config_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
    return buf;
}

template <typename T>
std::vector<T> cap_list(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
    size_t bytes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&a, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS ||
        bytes == 0)
        return {};
    std::vector<T> v(bytes / sizeof(T));
    cublasLtMatmulAlgoCapGetAttribute(&a, attr, v.data(), bytes, &bytes);
    return v;
}

void bench_product(Bench& b, const Product& p) {
    b.setup(p);
    b.start = std::chrono::steady_clock::now();
    const double flop = 2.0 * p.m * p.n * (double)p.k;
    auto tflops = [&](float us) { return us > 0 ? flop / (us * 1e-6) / 1e12 : 0.0; };
    cublasLtMatmulPreference_t pref;
    LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &b.workspace_bytes, sizeof(b.workspace_bytes)));
    std::vector<cublasLtMatmulHeuristicResult_t> heur(64);
    int found = 0;
    LLMC_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(b.lt, b.desc, b.la, b.lb, b.lc, b.lc, pref, 64,
                                                     heur.data(), &found));
    LLMC_CHECK(found > 0, "no heuristic candidate for %s", p.name);
    LLMC_CUBLAS_CHECK(b.run(heur[0].algo));
    const uint64_t reference = b.hash();
    const float first = b.time(heur[0].algo, b.runs);
    Found heur_same, id_same, search_same, any;
    long tried = 0, ran = 0, same = 0;
    auto consider = [&](const cublasLtMatmulAlgo_t& a, Found* same_best) {
        if (ran >= b.max_runs || b.out_of_time()) return;
        tried++;
        if (b.run(a) != CUBLAS_STATUS_SUCCESS) {
            cudaGetLastError();
            return;
        }
        const bool equal = b.hash() == reference;
        // A quick screen of 3 runs; the full count only for those near the best so far.
        float us = b.time(a, 3);
        if (us < 0) return;
        if (us < 1.05f * std::min(any.us, equal ? same_best->us : any.us)) us = b.time(a, b.runs);
        ran++;
        if (equal) same++;
        if (equal && us < same_best->us) *same_best = {us, describe(a)};
        if (us < any.us) any = {us, describe(a) + (equal ? " (same bits)" : " (other bits)")};
    };
    for (int i = 0; i < found; i++) consider(heur[i].algo, &heur_same);

    int ids[256], nids = 0;
    LLMC_CUBLAS_CHECK(cublasLtMatmulAlgoGetIds(b.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF,
                                               CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, 256, ids,
                                               &nids));
    // By id: the heuristic limited to one algorithm.
    uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
    LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE,
                                                           &mode, sizeof(mode)));
    for (int i = 0; i < nids; i++) {
        std::vector<cublasLtMatmulHeuristicResult_t> r(64);
        if (cublasLtMatmulAlgoInit(b.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                                   CUDA_R_16BF, CUDA_R_16BF, ids[i],
                                   &r[0].algo) != CUBLAS_STATUS_SUCCESS)
            continue;
        int n = 0;
        if (cublasLtMatmulAlgoGetHeuristic(b.lt, b.desc, b.la, b.lb, b.lc, b.lc, pref, 64, r.data(),
                                           &n) != CUBLAS_STATUS_SUCCESS)
            continue;
        for (int j = 0; j < n; j++) consider(r[j].algo, &id_same);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    const long by_id_tried = tried;

    // Search: the neighbourhood of each heuristic candidate, which keeps the candidate's id,
    // stages, inner shape and split, and takes every tile, cluster shape, CTA swizzle and custom
    // option AlgoCheck accepts. (Configurations built from cublasLtMatmulAlgoInit alone, over
    // every id, ran at half the heuristic's rate or failed AlgoCheck on Hopper: its
    // warp-specialized kernels need attributes Init leaves unset.)
    const int clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1,
                            CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                            CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                            CUBLASLT_CLUSTER_SHAPE_1x4x1};
    long checked = 0;
    for (int i = 0; i < found && !b.out_of_time(); i++) {
        const cublasLtMatmulAlgo_t& a = heur[i].algo;
        std::vector<uint32_t> tiles = cap_list<uint32_t>(a, CUBLASLT_ALGO_CAP_TILE_IDS);
        if (tiles.empty()) tiles.push_back((uint32_t)config_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID));
        int swizzle = 0, custom_max = 0;
        size_t w = 0;
        cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle,
                                          sizeof(swizzle), &w);
        cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max,
                                          sizeof(custom_max), &w);
        custom_max = std::min(custom_max, 15);
        for (uint32_t tile : tiles)
            for (int cluster : clusters)
                for (int sw = 0; sw <= (swizzle ? 1 : 0); sw++)
                    for (int custom = 0; custom <= custom_max; custom++) {
                        if (checked >= b.max_configs) continue;
                        cublasLtMatmulAlgo_t c = a;
                        cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                             &tile, sizeof(tile));
                        uint32_t cl = (uint32_t)cluster;
                        cublasLtMatmulAlgoConfigSetAttribute(
                            &c, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof(cl));
                        uint32_t s = (uint32_t)sw;
                        cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                                             &s, sizeof(s));
                        uint32_t co = (uint32_t)custom;
                        cublasLtMatmulAlgoConfigSetAttribute(&c, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                                             &co, sizeof(co));
                        cublasLtMatmulHeuristicResult_t r{};
                        checked++;
                        if (cublasLtMatmulAlgoCheck(b.lt, b.desc, b.la, b.lb, b.lc, b.lc, &c, &r) !=
                                CUBLAS_STATUS_SUCCESS ||
                            r.workspaceSize > b.workspace_bytes)
                            continue;
                        consider(c, &search_same);
                    }
    }
    auto cell = [&](const Found& f) {
        char buf[48];
        if (f.us > 1e29f) return std::string("       -      -");
        std::snprintf(buf, sizeof(buf), "%8.1f %6.0f", f.us, tflops(f.us));
        return std::string(buf);
    };
    std::printf(
        "%-12s m=%5d n=%5d k=%5d  first %8.1f us %5.0f TF | heur-same %s | id-same %s | "
        "search-same %s | any %s\n",
        p.name, p.m, p.n, p.k, first, tflops(first), cell(heur_same).c_str(), cell(id_same).c_str(),
        cell(search_same).c_str(), cell(any).c_str());
    std::printf(
        "    heuristic %d candidates, %ld by id, %ld configurations checked; %ld ran, %ld "
        "with the same bits%s\n",
        found, by_id_tried - found, checked, ran, same,
        b.out_of_time() ? " (stopped at the time budget)" : "");
    std::printf(
        "    heur-same:   %s\n    id-same:     %s\n    search-same: %s\n    any:         %s\n",
        heur_same.what.c_str(), id_same.what.c_str(), search_same.what.c_str(), any.what.c_str());
    std::fflush(stdout);
    b.teardown();
}

}  // namespace

int main(int argc, char** argv) {
    long rows = 65536;
    const char* only = nullptr;
    Bench b;
    for (int i = 1; i < argc; i++) {
        if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) {
            rows = std::atol(argv[++i]);
        } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
            b.runs = std::atoi(argv[++i]);
        } else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
            b.seconds = std::atof(argv[++i]);
        } else if (!std::strcmp(argv[i], "--max-configs") && i + 1 < argc) {
            b.max_configs = std::atol(argv[++i]);
        } else {
            const bool help = !std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h");
            if (!help)
                std::fprintf(stderr, "error: unknown option or missing value: %s\n", argv[i]);
            std::fprintf(help ? stdout : stderr,
                         "usage: %s [--rows N] [--only NAME,...] [--runs R] [--seconds S] "
                         "[--max-configs C]\n",
                         argv[0]);
            return help ? 0 : 2;
        }
    }
    LLMC_CHECK(
        rows >= 64 && rows <= (1 << 20) && b.runs >= 1 && b.seconds > 0 && b.max_configs >= 0,
        "--rows must be in [64, 2^20], --runs >= 1, --seconds > 0 and --max-configs >= 0");
    const int N = (int)rows, C = 768, V = 50304, chunk = std::min(N, 8192);
    // The trainer runs fc_gelu and fcproj_dgelu as its own kernels by default (matmul_sm90.cu);
    // they are here for cuBLASLt's best with those epilogues.
    const Product products[] = {
        {"qkv", 3 * C, N, C, true, false, kBias, false},
        {"attproj", C, N, C, true, false, kBias, true},
        {"fc", 4 * C, N, C, true, false, kBias, false},
        {"fc_gelu", 4 * C, N, C, true, false, kGeluAuxBias, false},
        {"fcproj", C, N, 4 * C, true, false, kBias, true},
        {"lm_logits", V, chunk, C, true, false, kNone, false},
        {"lm_dx", C, chunk, V, false, false, kNone, false},
        {"lm_dw", C, V, chunk, false, true, kNone, true},
        {"fcproj_dgelu", 4 * C, N, C, false, false, kDgelu, false},
        {"fc_dx", C, N, 4 * C, false, false, kNone, false},
        {"fc_dw", C, 4 * C, N, false, true, kNone, false},
        {"fcproj_dw", 4 * C, C, N, false, true, kNone, false},
        {"attproj_dx", C, N, C, false, false, kNone, false},
        {"attproj_dw", C, C, N, false, true, kNone, false},
        {"qkv_dx", C, N, 3 * C, false, false, kNone, false},
        {"qkv_dw", C, 3 * C, N, false, true, kNone, false},
    };
    size_t max_a = 0, max_b = 0, max_d = 0;
    for (const Product& p : products) {
        max_a = std::max(max_a, (size_t)p.m * p.k);
        max_b = std::max(max_b, (size_t)p.k * p.n);
        max_d = std::max(max_d, (size_t)p.m * p.n);
    }
    // --only: a comma-separated list of the names above, checked before the GPU is touched.
    auto chosen = [&](const Product& p) {
        const std::string list = std::string(",") + (only ? only : "") + ",";
        return only == nullptr || list.find(std::string(",") + p.name + ",") != std::string::npos;
    };
    if (std::none_of(std::begin(products), std::end(products), chosen)) {
        std::fprintf(stderr, "error: --only %s names no product; the names:", only);
        for (const Product& p : products) std::fprintf(stderr, " %s", p.name);
        std::fprintf(stderr, "\n");
        return 2;
    }
    skip_if_no_device();
    LLMC_CUBLAS_CHECK(cublasLtCreate(&b.lt));
    LLMC_CUDA_CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    LLMC_CUDA_CHECK(cudaMalloc(&b.workspace, b.workspace_bytes));
    LLMC_CUDA_CHECK(cudaMalloc(&b.A, max_a * 2));
    LLMC_CUDA_CHECK(cudaMalloc(&b.B, max_b * 2));
    LLMC_CUDA_CHECK(cudaMalloc(&b.C, max_d * 2));
    LLMC_CUDA_CHECK(cudaMalloc(&b.D, max_d * 2));
    LLMC_CUDA_CHECK(cudaMalloc(&b.aux, max_d * 2));
    LLMC_CUDA_CHECK(cudaMalloc(&b.bias, 4 * 50304 * 2));
    LLMC_CUDA_CHECK(cudaMalloc(&b.d_hash, sizeof(unsigned long long)));
    LLMC_CUDA_CHECK(cudaEventCreate(&b.e0));
    LLMC_CUDA_CHECK(cudaEventCreate(&b.e1));
    fill_kernel<<<1024, 256, 0, b.stream>>>(b.A, max_a, 1);
    fill_kernel<<<1024, 256, 0, b.stream>>>(b.B, max_b, 2);
    fill_kernel<<<1024, 256, 0, b.stream>>>(b.C, max_d, 3);
    fill_kernel<<<1024, 256, 0, b.stream>>>(b.bias, 4 * 50304, 4);
    LLMC_CUDA_CHECK_LAST();
    cudaDeviceProp prop;
    LLMC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("bench_matmul_search: %s, rows %d, %d runs a configuration\n", prop.name, N,
                b.runs);
    for (const Product& p : products) {
        if (chosen(p)) bench_product(b, p);
    }
    return 0;
}
