// bench_gelu_gemm.cu: cuBLASLt's GELU products of the MLP, each layout and epilogue timed over
// every heuristic candidate, to find where their gap to a plain product comes from.
//
//   build/<prec>/dev/bench/bench_gelu_gemm [--rows N]... [--plain] (rows by default 65536 and 4096,
//   d12's B=64 and B=4 at T=1024; --plain: the plain products' table alone)
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
//
// Then our own kernels for the two products (matmul_sm90.cuh) against cuBLASLt's epilogues,
// and our kernel's plain mode against cuBLASLt on the other forward products, through the
// trainer's calls (below).
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "context.cuh"
#include "matmul.cuh"
#include "matmul_sm90.cuh"
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

// Our kernels (matmul_sm90.cuh) against cuBLASLt's epilogues, through the trainer's own calls
// with ctx.gelu_gemm switched: the fc forward (matmul_forward with pre_gelu and bias) and the
// fcproj input gradient with the fc bias gradient (matmul_backward_input with pre_gelu and
// gelu_dbias; with cuBLASLt the bias gradient is the separate column-sum pass,
// matmul_bias_backward, so both sides produce the same tensors). Each output is compared between
// the two (counted pass / fail; test_matmul checks both against the CPU).
float median_ms(const Context& ctx, const std::function<void()>& f) {
    cudaEvent_t e0, e1;
    LLMC_CUDA_CHECK(cudaEventCreate(&e0));
    LLMC_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int r = 0; r < 25; r++) {
        LLMC_CUDA_CHECK(cudaEventRecord(e0, ctx.stream));
        f();
        LLMC_CUDA_CHECK(cudaEventRecord(e1, ctx.stream));
        LLMC_CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0.0f;
        LLMC_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (r >= 5) ms.push_back(t);
    }
    LLMC_CUDA_CHECK(cudaEventDestroy(e0));
    LLMC_CUDA_CHECK(cudaEventDestroy(e1));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

void run_ours(Context* ctx, int N) {
    const int C = kC, H = 4 * kC;
    Rng rng(N + 1);
    auto random = [&](size_t n, float scale) {
        std::vector<float> h(n);
        fill_uniform(h, rng, -scale, scale);
        round_to_floatx(h);
        return h;
    };
    const std::vector<float> h_inp = random((size_t)N * C, 1.0f),
                             h_w = random((size_t)H * C, 0.06f), h_b = random(H, 0.5f),
                             h_dout = random((size_t)N * C, 1.0f),
                             h_wp = random((size_t)C * H, 0.03f);
    DeviceBuffer<floatX> inp((size_t)N * C), w((size_t)H * C), bias(H), dout((size_t)N * C),
        wp((size_t)C * H), dbias(H);
    upload(inp.get(), h_inp), upload(w.get(), h_w), upload(bias.get(), h_b);
    upload(dout.get(), h_dout), upload(wp.get(), h_wp);
    DeviceBuffer<floatX> out[2] = {DeviceBuffer<floatX>((size_t)N * H),
                                   DeviceBuffer<floatX>((size_t)N * H)};
    DeviceBuffer<floatX> pre[2] = {DeviceBuffer<floatX>((size_t)N * H),
                                   DeviceBuffer<floatX>((size_t)N * H)};
    DeviceBuffer<floatX> dinp[2] = {DeviceBuffer<floatX>((size_t)N * H),
                                    DeviceBuffer<floatX>((size_t)N * H)};
    DeviceBuffer<float> scratch(
        std::max(matmul_bias_scratch_floats(H), matmul_gelu_bias_scratch_floats(N, H)));
    std::vector<float> got_dbias[2];
    float t_fwd[2], t_bwd[2];
    for (int ours = 0; ours < 2; ours++) {
        ctx->gelu_gemm = ours ? 2 : 0;  // ours wherever it applies, whatever the size
        auto fwd = [&]() {
            matmul_forward(*ctx, out[ours].get(), inp.get(), w.get(), bias.get(), N, C, H,
                           pre[ours].get());
        };
        // The backward reads the forward's pre (cuBLASLt's for both, the same input).
        auto bwd = [&]() {
            if (!matmul_backward_input(*ctx, dinp[ours].get(), dout.get(), wp.get(), N, H, C,
                                       pre[0].get(), dbias.get(), scratch.get())) {
                matmul_bias_backward(*ctx, dbias.get(), scratch.get(), dinp[ours].get(), N, H);
            }
        };
        poison(out[ours].get(), (size_t)N * H), poison(pre[ours].get(), (size_t)N * H);
        fwd();
        LLMC_CUDA_CHECK(cudaMemsetAsync(dbias.get(), 0, H * sizeof(floatX), ctx->stream));
        poison(dinp[ours].get(), (size_t)N * H);
        bwd();
        got_dbias[ours] = download(dbias.get(), H);
        t_fwd[ours] = median_ms(*ctx, fwd);
        t_bwd[ours] = median_ms(*ctx, bwd);
    }
    ctx->gelu_gemm = 2;
    const bool applies = gelu_gemm_applies(*ctx, N, H, C, {out[1].get()});
    // pre: the same sums in fp32 (either may order them differently); the GELU output from the
    // rounded pre against cuBLASLt's from the fp32 value: a bf16 ulp, plus the GELU's tanh;
    // dinp one bf16 rounding apart; the bias sums over N rows of those values.
    char name[128];
    std::snprintf(name, sizeof(name), "N=%d pre_gelu: ours vs cuBLASLt", N);
    check_close(name, download(pre[1].get(), (size_t)N * H), download(pre[0].get(), (size_t)N * H),
                2e-3f, 1.6e-2f);
    std::snprintf(name, sizeof(name), "N=%d gelu out: ours vs cuBLASLt", N);
    check_close(name, download(out[1].get(), (size_t)N * H), download(out[0].get(), (size_t)N * H),
                4e-3f, 1.6e-2f);
    std::snprintf(name, sizeof(name), "N=%d dinp (DGELU): ours vs cuBLASLt", N);
    check_close(name, download(dinp[1].get(), (size_t)N * H),
                download(dinp[0].get(), (size_t)N * H), 4e-3f, 1.6e-2f);
    std::snprintf(name, sizeof(name), "N=%d fc bias gradient: ours vs column-sum pass", N);
    check_close(name, got_dbias[1], got_dbias[0], 1e-2f, 1.6e-2f);
    const double flops = 2.0 * N * H * C;
    std::printf("| %d | fc forward | %.1f us (%.0f TFLOP/s) | %.1f us (%.0f TFLOP/s) | %.3f |\n", N,
                t_fwd[0] * 1e3, flops / t_fwd[0] / 1e9, t_fwd[1] * 1e3, flops / t_fwd[1] / 1e9,
                t_fwd[1] / t_fwd[0]);
    std::printf(
        "| %d | fcproj dinp + fc bias gradient | %.1f us (%.0f TFLOP/s) | %.1f us (%.0f "
        "TFLOP/s) | %.3f |\n",
        N, t_bwd[0] * 1e3, flops / t_bwd[0] / 1e9, t_bwd[1] * 1e3, flops / t_bwd[1] / 1e9,
        t_bwd[1] / t_bwd[0]);
    if (!applies) std::printf("(our kernels do not apply here: both columns are cuBLASLt)\n");
}

// The plain forward products (matmul_forward without GELU, matmul_forward_residual) through the
// trainer's calls, cuBLASLt's (ctx.plain_gemm 0) against ours (every bit), in three interleaved
// rounds; the outputs compared between the two (test_matmul checks both against the CPU). The
// last row is the fc forward with GELU, our 128 x 128 kernel (ctx.gelu_gemm 2) in the first
// column against the 128 x 256 one (3).
void run_plain(Context* ctx, int N) {
    enum Kind { kBias, kRes, kGeluFc };
    struct Plain {
        const char* name;
        int IC, OC;
        Kind kind;
    };
    const Plain products[] = {
        {"qkv + bias", kC, 3 * kC, kBias},
        {"attention projection + bias + residual", kC, kC, kRes},
        {"fcproj + bias + residual", 4 * kC, kC, kRes},
        {"fc's shape + bias (no GELU)", kC, 4 * kC, kBias},
        {"fc forward + bias + GELU, pre kept (first column: our 128 x 128 kernel)", kC, 4 * kC,
         kGeluFc},
    };
    const unsigned saved = ctx->plain_gemm;
    const int saved_gelu = ctx->gelu_gemm;
    for (const Plain& p : products) {
        Rng rng(N + p.OC);
        const float ws = 1.7f / std::sqrt((float)p.IC);
        DeviceBuffer<floatX> inp((size_t)N * p.IC), w((size_t)p.OC * p.IC), bias(p.OC),
            res((size_t)N * p.OC);
        auto random = [&](floatX* d, size_t n, float lo, float hi) {
            std::vector<float> h(n);
            fill_uniform(h, rng, lo, hi);
            round_to_floatx(h);
            upload(d, h);
        };
        random(inp.get(), (size_t)N * p.IC, -1.0f, 1.0f);
        random(w.get(), (size_t)p.OC * p.IC, -ws, ws);
        random(bias.get(), p.OC, -0.5f, 0.5f);
        random(res.get(), (size_t)N * p.OC, -4.0f, 4.0f);
        DeviceBuffer<floatX> out[2] = {DeviceBuffer<floatX>((size_t)N * p.OC),
                                       DeviceBuffer<floatX>((size_t)N * p.OC)};
        DeviceBuffer<floatX> pre[2] = {DeviceBuffer<floatX>((size_t)N * p.OC),
                                       DeviceBuffer<floatX>((size_t)N * p.OC)};
        auto call = [&](int ours) {
            ctx->plain_gemm = ours ? kPlainGemmAll : 0;
            if (p.kind == kGeluFc) {
                ctx->gelu_gemm = ours ? 3 : 2;
                matmul_forward(*ctx, out[ours].get(), inp.get(), w.get(), bias.get(), N, p.IC, p.OC,
                               pre[ours].get());
            } else if (p.kind == kRes) {
                matmul_forward_residual(*ctx, out[ours].get(), inp.get(), w.get(), bias.get(),
                                        res.get(), N, p.IC, p.OC);
            } else {
                matmul_forward(*ctx, out[ours].get(), inp.get(), w.get(), bias.get(), N, p.IC,
                               p.OC);
            }
        };
        std::vector<float> t[2];
        for (int round = 0; round < 3; round++) {
            for (int ours = 0; ours < 2; ours++) {
                poison(out[ours].get(), (size_t)N * p.OC);
                t[ours].push_back(median_ms(*ctx, [&]() { call(ours); }));
            }
        }
        ctx->plain_gemm = kPlainGemmAll;
        const bool applies =
            p.kind == kGeluFc
                ? gelu_gemm_wide_applies(*ctx, N, p.IC, p.OC, {out[1].get()})
                : plain_gemm_chosen(*ctx, true, p.kind == kRes, N, p.IC, p.OC, {out[1].get()});
        char name[160];
        std::snprintf(name, sizeof(name), "N=%d %s: the two columns", N, p.name);
        // The same fp32 sums in another order, each rounded once to bf16.
        const std::vector<float> o1 = download(out[1].get(), (size_t)N * p.OC),
                                 o0 = download(out[0].get(), (size_t)N * p.OC);
        check_close(name, o1, o0, 4e-3f, 1.6e-2f);
        const bool same_bits =
            o1 == o0 && (p.kind != kGeluFc || download(pre[1].get(), (size_t)N * p.OC) ==
                                                  download(pre[0].get(), (size_t)N * p.OC));
        const double flops = 2.0 * N * p.IC * p.OC;
        // The middle of the three rounds, and their range.
        auto fmt = [&](std::vector<float> v) {
            std::sort(v.begin(), v.end());
            char b[96];
            std::snprintf(b, sizeof(b), "%.1f us (%.0f TFLOP/s; %.1f-%.1f)", v[1] * 1e3,
                          flops / v[1] / 1e9, v[0] * 1e3, v[2] * 1e3);
            return std::string(b);
        };
        std::sort(t[0].begin(), t[0].end());
        std::sort(t[1].begin(), t[1].end());
        std::printf("| %d | %s | %s | %s | %.3f |%s%s\n", N, p.name, fmt(t[0]).c_str(),
                    fmt(t[1]).c_str(), t[1][1] / t[0][1], same_bits ? " same bits" : "",
                    applies ? "" : " (ours does not apply)");
    }
    ctx->plain_gemm = saved;
    ctx->gelu_gemm = saved_gelu;
}

}  // namespace

int main(int argc, char** argv) {
    skip_if_no_device();
    std::vector<int> rows;
    bool plain_only = false;
    for (int i = 1; i < argc; i++) {
        if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
            rows.push_back(std::atoi(argv[++i]));
        } else if (std::strcmp(argv[i], "--plain") == 0) {
            plain_only = true;
        } else {
            std::fprintf(stderr, "usage: %s [--rows N]... [--plain]\n", argv[0]);
            return 2;
        }
    }
    if (rows.empty()) rows = {65536, 4096};
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    const int gelu_gemm = ctx.gelu_gemm;
    std::printf("bench_gelu_gemm: %s, C=%d, %s\n\n", ctx.props.name, kC, kPrecisionName);
    if (!plain_only) {
        std::printf("| product | rows | candidates | heuristic's first | fastest | index |\n");
        std::printf("|---|---|---|---|---|---|\n");
        for (int N : rows) run_rows(ctx, N);
        std::printf("\nthe trainer's calls (matmul_sm90.cuh), median of 20:\n\n");
        std::printf(
            "| rows | product | cuBLASLt | ours | ours / cuBLASLt |\n|---|---|---|---|---|\n");
        for (int N : rows) run_ours(&ctx, N);
    }
    std::printf(
        "\nthe plain products (matmul_sm90.cuh, LLMC_PLAIN_GEMM), median of 20, the middle "
        "of 3 interleaved rounds (their range):\n\n");
    std::printf("| rows | product | cuBLASLt | ours | ours / cuBLASLt |\n|---|---|---|---|---|\n");
    for (int N : rows) run_plain(&ctx, N);
    ctx.gelu_gemm = gelu_gemm;
    return test_summary("bench_gelu_gemm");
}
