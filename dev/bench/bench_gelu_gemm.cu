// bench_gelu_gemm.cu: cuBLASLt's GELU products of the MLP, each layout and epilogue timed over
// every heuristic candidate, to find where their gap to a plain product comes from.
//
//   build/<prec>/dev/bench/bench_gelu_gemm [--rows N]... (default: 65536 and 4096, d12's B=64 and
//   B=4 at T=1024)
//
// The products (C = 768, 4C = 3072, N rows; cuBLASLt's column-major terms, m x n = 4C x N):
//   fc forward   out = inp W^T + b: A = W (4C x C row-major: op T), B = inp; epilogues BIAS
//                (plain), GELU_BIAS (no aux) and GELU_AUX_BIAS (what the trainer runs: the GELU
//                input kept for the backward);
//   fcproj dinp  dpre = (dout Wp) * gelu'(pre): A = Wp (C x 4C row-major: op N, "NN", what the
//                trainer runs) or its transpose stored (4C x C row-major: op T, "TN"); epilogues
//                DEFAULT (plain) and DGELU.
// Operands uniform random in [-1, 1) (never zeros). Each candidate of the heuristic (up to 16):
// 3 warm-up launches, then the median of 15 timed launches (events); the table prints the
// heuristic's first candidate and the fastest, with TFLOP/s = 2 m n k / time.
#include <cublasLt.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "context.cuh"
#include "precision.cuh"
#include "test/test_util.cuh"

using namespace llmc;

namespace {

constexpr int kC = 768, kMaxAlgos = 16, kWarmup = 3, kRuns = 15;

cublasLtMatrixLayout_t layout(int rows, int cols, int ld) {
    cublasLtMatrixLayout_t l;
    LLMC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, kCudaFloatX, rows, cols, ld));
    return l;
}

struct Product {
    const char* name;
    int m, n, k;
    bool ta;
    const floatX* A;
    int lda;
    const floatX* B;
    int ldb;
    floatX* D;
    int ldd;
    cublasLtEpilogue_t epi;
    const floatX* bias;
    floatX* aux;
    int ldaux;
};

// Every candidate timed; prints one row.
void time_product(const Context& ctx, const Product& p) {
    cublasLtMatmulDesc_t desc;
    LLMC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    LLMC_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epi, sizeof(p.epi)));
    if (p.bias != nullptr)
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &p.bias, sizeof(p.bias)));
    if (p.aux != nullptr) {
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof(p.aux)));
        const int64_t ld = p.ldaux;
        LLMC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                         &ld, sizeof(ld)));
    }
    cublasLtMatrixLayout_t a = p.ta ? layout(p.k, p.m, p.lda) : layout(p.m, p.k, p.lda);
    cublasLtMatrixLayout_t b = layout(p.k, p.n, p.ldb), d = layout(p.m, p.n, p.ldd);
    cublasLtMatmulPreference_t pref;
    LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    LLMC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.lt_workspace_bytes,
        sizeof(ctx.lt_workspace_bytes)));
    cublasLtMatmulHeuristicResult_t res[kMaxAlgos];
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(ctx.lt, desc, a, b, d, d, pref, kMaxAlgos, res, &found);
    const double flops = 2.0 * p.m * p.n * p.k;
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        std::printf("| %s | N=%d | no algorithm (%s) | | | |\n", p.name, p.n,
                    cublasGetStatusName(st));
    } else {
        cudaEvent_t e0, e1;
        LLMC_CUDA_CHECK(cudaEventCreate(&e0));
        LLMC_CUDA_CHECK(cudaEventCreate(&e1));
        const float alpha = 1.0f, beta = 0.0f;
        double first = 0.0, best = 1e30;
        int best_i = 0;
        for (int i = 0; i < found; i++) {
            std::vector<float> ms;
            bool ok = true;
            for (int r = 0; r < kWarmup + kRuns && ok; r++) {
                LLMC_CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
                ok = cublasLtMatmul(ctx.lt, desc, &alpha, p.A, a, p.B, b, &beta, p.D, d, p.D, d,
                                    &res[i].algo, ctx.lt_workspace, ctx.lt_workspace_bytes,
                                    ctx.stream) == CUBLAS_STATUS_SUCCESS;
                LLMC_CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
                LLMC_CUDA_CHECK(cudaEventSynchronize(e1));
                float t = 0.0f;
                LLMC_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
                if (r >= kWarmup) ms.push_back(t);
            }
            if (!ok) continue;
            std::sort(ms.begin(), ms.end());
            const double med = ms[ms.size() / 2];
            if (i == 0) first = med;
            if (med < best) best = med, best_i = i;
        }
        std::printf("| %s | N=%d | %d | %.1f us (%.0f TFLOP/s) | %.1f us (%.0f TFLOP/s) | %d |\n",
                    p.name, p.n, found, first * 1e3, flops / first / 1e9, best * 1e3,
                    flops / best / 1e9, best_i);
        LLMC_CUDA_CHECK(cudaEventDestroy(e0));
        LLMC_CUDA_CHECK(cudaEventDestroy(e1));
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
}

void run_rows(const Context& ctx, int N) {
    const int C = kC, H = 4 * kC;
    DeviceBuffer<floatX> w((size_t)H * C), wt((size_t)H * C), bias(H), inp((size_t)N * C);
    DeviceBuffer<floatX> out((size_t)N * H), pre((size_t)N * H), dout((size_t)N * C);
    Rng rng(N);
    for (auto* buf : {&w, &wt, &bias, &inp, &pre, &dout}) {
        std::vector<float> h(buf->size());
        fill_uniform(h, rng, -1.0f, 1.0f);
        upload(buf->get(), h);
    }
    // fc forward: out (N x 4C row-major) = col-major 4C x N; W (4C x C row-major) = col-major
    // C x 4C, op T; inp col-major C x N.
    const Product fwd[] = {
        {"fc fwd TN BIAS", H, N, C, true, w.get(), C, inp.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_BIAS, bias.get(), nullptr, 0},
        {"fc fwd TN GELU_BIAS", H, N, C, true, w.get(), C, inp.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_GELU_BIAS, bias.get(), nullptr, 0},
        {"fc fwd TN GELU_AUX_BIAS", H, N, C, true, w.get(), C, inp.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias.get(), pre.get(), H},
    };
    // fcproj dinp: dpre (N x 4C) = col-major 4C x N = Wp^T (4C x C) dout^T (C x N). Wp (C x 4C
    // row-major) = col-major 4C x C: op N, lda 4C. Its stored transpose (4C x C row-major) =
    // col-major C x 4C: op T, lda C.
    const Product bwd[] = {
        {"fcproj dinp NN plain", H, N, C, false, w.get(), H, dout.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0},
        {"fcproj dinp TN plain", H, N, C, true, wt.get(), C, dout.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0},
        {"fcproj dinp NN DGELU", H, N, C, false, w.get(), H, dout.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_DGELU, nullptr, pre.get(), H},
        {"fcproj dinp TN DGELU", H, N, C, true, wt.get(), C, dout.get(), C, out.get(), H,
         CUBLASLT_EPILOGUE_DGELU, nullptr, pre.get(), H},
    };
    for (const Product& p : fwd) time_product(ctx, p);
    for (const Product& p : bwd) time_product(ctx, p);
}

}  // namespace

int main(int argc, char** argv) {
    skip_if_no_device();
    std::vector<int> rows;
    for (int i = 1; i < argc; i++) {
        if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
            rows.push_back(std::atoi(argv[++i]));
        } else {
            std::fprintf(stderr, "usage: %s [--rows N]...\n", argv[0]);
            return 2;
        }
    }
    if (rows.empty()) rows = {65536, 4096};
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    std::printf("bench_gelu_gemm: %s, C=%d, %s\n\n", ctx.props.name, kC, kPrecisionName);
    std::printf("| product | rows | candidates | heuristic's first | fastest | index |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (int N : rows) run_rows(ctx, N);
    return 0;
}
