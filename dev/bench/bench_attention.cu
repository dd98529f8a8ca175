// bench_attention.cu: causal attention forward and backward, flash (bf16 tensor cores: the
// mma.sync kernels as "flash", the Hopper wgmma/TMA kernels as "flash-sm90" where they apply,
// with the fused Hopper backward as "flash-sm90-fused")
// against the cuBLASLt path (attention_*_cublas, in this build's floatX), one table.
//
//   build/bf16/dev/bench/bench_attention [--iters N] [--shape B,T,NH,HS] [--variants]
//   (--shape: flash alone; --variants: also every tile-shape variant of flash, named in a legend;
//   the Hopper kernels' variants are timed interleaved, kRounds rounds over all of them, so that
//   their rows compare like with like, and the Hopper backward also kernel by kernel)
//
// FLOPs (the FlashAttention papers' convention for causal attention): forward
// 4 * B*NH*T*T*HS / 2 (two GEMMs, half of them masked), backward 2.5x the forward. TFLOP/s are
// also given as a percentage of 800 TFLOP/s, the project's measured bf16 dense ceiling of an
// H100. Each pass is timed on its own with CUDA events on ctx.stream after 5 warm-up runs;
// median, min and p90 over the iterations. Inputs are seeded random values (never zeros), two
// sets used in turn; every working set here but B=4's (>= 75 MB of qkv) is larger than the
// H100's 50 MB L2, so no pass reads its inputs from L2 left by the previous one. At B=4 (19 MB of
// qkv a set) they may stay in L2, as they do in a training step, where the qkv GEMM has just
// written them.
// The last line gives 12 layers of forward + backward at GPT-2 d12's B=64 T=1024 with the
// kernels the trainer takes by default (the figure scripts/bench/bench_attention.py prints for
// PyTorch).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "attention.cuh"
#include "context.cuh"
#include "flash_attention.cuh"
#include "flash_attention_sm90.cuh"
#include "test/test_util.cuh"

using namespace llmc;

namespace {

constexpr double kCeilingTflops = 800.0;
constexpr int kWarmup = 5;
constexpr int kSets = 2;
constexpr int kRounds = 5;  // of the interleaved variant comparisons

struct Shape {
    int B, T, NH, HS;
};

struct Stats {
    double median, min, p90;
};

// Times fn(set) `iters` times on ctx.stream, rotating over the input sets; the sorted times.
std::vector<double> time_samples(const Context& ctx, int iters,
                                 const std::function<void(int)>& fn) {
    for (int i = 0; i < kWarmup; i++) fn(i % kSets);
    std::vector<cudaEvent_t> ev(2 * iters);
    for (cudaEvent_t& e : ev) LLMC_CUDA_CHECK(cudaEventCreate(&e));
    for (int i = 0; i < iters; i++) {
        LLMC_CUDA_CHECK(cudaEventRecord(ev[2 * i], ctx.stream));
        fn(i % kSets);
        LLMC_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], ctx.stream));
    }
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    std::vector<double> ms(iters);
    for (int i = 0; i < iters; i++) {
        float t = 0.0f;
        LLMC_CUDA_CHECK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
        ms[i] = t;
    }
    for (cudaEvent_t& e : ev) LLMC_CUDA_CHECK(cudaEventDestroy(e));
    std::sort(ms.begin(), ms.end());
    return ms;
}

Stats stats_of(const std::vector<double>& ms) {
    const int n = (int)ms.size();
    return Stats{ms[n / 2], ms[0], ms[std::min(n - 1, (int)(0.9 * n))]};
}

Stats time_ms(const Context& ctx, int iters, const std::function<void(int)>& fn) {
    return stats_of(time_samples(ctx, iters, fn));
}

void print_row(const char* impl, const char* pass, const Shape& s, double gflop, const Stats& st) {
    const double tflops = gflop / st.median;  // GFLOP / ms = TFLOP/s
    std::printf(
        "| %-12s | %-3s | %3d | %5d | %3d | %3d | %9.3f | %9.3f | %9.3f | %7.1f | %5.1f%% |\n",
        impl, pass, s.B, s.T, s.NH, s.HS, st.median, st.min, st.p90, tflops,
        100.0 * tflops / kCeilingTflops);
}

// One timed alternative of a comparison.
struct Candidate {
    std::string impl, pass;
    double gflop;
    std::function<void(int)> fn;
};

// Times the candidates in kRounds rounds, each round timing every candidate in turn, and prints
// one row per candidate over all its samples: alternatives compared this way share the GPU's
// clock and thermal drift instead of each taking whatever state its turn found.
void time_interleaved(const Context& ctx, const Shape& s, int iters,
                      const std::vector<Candidate>& cands) {
    std::vector<std::vector<double>> samples(cands.size());
    for (int r = 0; r < kRounds; r++) {
        for (size_t c = 0; c < cands.size(); c++) {
            const std::vector<double> ms = time_samples(ctx, iters, cands[c].fn);
            samples[c].insert(samples[c].end(), ms.begin(), ms.end());
        }
    }
    for (size_t c = 0; c < cands.size(); c++) {
        std::sort(samples[c].begin(), samples[c].end());
        print_row(cands[c].impl.c_str(), cands[c].pass.c_str(), s, cands[c].gflop,
                  stats_of(samples[c]));
    }
}

// Device tensors of one implementation: kSets input sets, one output set.
template <typename T>
struct Buffers {
    std::vector<DeviceBuffer<T>*> qkv, dout;
    DeviceBuffer<T> out, dqkv;
    DeviceBuffer<float> lse;
    DeviceBuffer<unsigned char> scratch;
    Buffers(const Shape& s, size_t scratch_bytes, uint64_t seed)
        : out((size_t)s.B * s.T * s.NH * s.HS),
          dqkv((size_t)s.B * s.T * 3 * s.NH * s.HS),
          lse((size_t)s.B * s.NH * s.T),
          scratch(scratch_bytes) {
        const size_t n = (size_t)s.B * s.T * s.NH * s.HS;
        Rng rng(seed);
        std::vector<float> h(3 * n);
        for (int i = 0; i < kSets; i++) {
            qkv.push_back(new DeviceBuffer<T>(3 * n));
            dout.push_back(new DeviceBuffer<T>(n));
            fill_uniform(h, rng, -2.0f, 2.0f);
            upload(qkv[i]->get(), h.data(), 3 * n);
            fill_uniform(h, rng, -1.0f, 1.0f);
            upload(dout[i]->get(), h.data(), n);
        }
    }
    ~Buffers() {
        for (auto* p : qkv) delete p;
        for (auto* p : dout) delete p;
    }
};

// The Hopper kernels' variants, interleaved (time_interleaved): every forward variant; where
// the Hopper backward applies, the backward with both kernels at variant v, then each kernel
// alone at each variant (dq: 3 of the backward's 5 GEMMs, 1.5x the forward's FLOPs; dk/dv: 4
// of them, 2x; dk/dv alone reads the lse and D of the last dq run).
void bench_sm90_variants(const Context& ctx, const Shape& s, int iters, Buffers<__nv_bfloat16>& d) {
    const double gflop = 4.0 * s.B * s.NH * (double)s.T * s.T * s.HS / 2 / 1e9;
    std::vector<Candidate> fwd;
    for (int v = 0; v < flash_attention_variants(FlashPass::kForward, FlashPath::kSm90); v++) {
        fwd.push_back({"sm90 fwd" + std::to_string(v), "fwd", gflop, [&, v](int i) {
                           flash_attention_forward(ctx, d.out.get(), d.lse.get(), d.qkv[i]->get(),
                                                   s.B, s.T, s.NH, s.HS, v, FlashPath::kSm90);
                       }});
    }
    time_interleaved(ctx, s, iters, fwd);
    if (!flash_attention_sm90_backward_available(ctx, s.HS)) return;
    flash_attention_forward(ctx, d.out.get(), d.lse.get(), d.qkv[0]->get(), s.B, s.T, s.NH, s.HS);
    struct Part {
        const char* name;
        unsigned kernels;
        double flop_share;
    };
    const Part parts[] = {{"bwd", kBackwardDq | kBackwardDkdv, 2.5},
                          {"dq", kBackwardDq, 1.5},
                          {"dkdv", kBackwardDkdv, 2.0}};
    std::vector<Candidate> bwd;
    for (const Part& part : parts) {
        for (int v = 0; v < flash_attention_variants(FlashPass::kDq, FlashPath::kSm90); v++) {
            const unsigned kernels = part.kernels;
            bwd.push_back({std::string("sm90 ") + part.name + std::to_string(v), "bwd",
                           part.flop_share * gflop, [&, v, kernels](int i) {
                               flash_attention_sm90_backward(ctx, d.dqkv.get(), d.scratch.get(),
                                                             d.dout[i]->get(), d.qkv[i]->get(),
                                                             d.out.get(), d.lse.get(), s.B, s.T,
                                                             s.NH, s.HS, false, v, v, kernels);
                           }});
        }
    }
    // The fused backward (one kernel for dq, dk and dv, and its row-statistics and dq
    // conversion kernels), interleaved with the two kernels' variants.
    for (int v = 0; v < flash_attention_variants(FlashPass::kDkdv, FlashPath::kSm90Fused); v++) {
        bwd.push_back({"sm90 fused" + std::to_string(v), "bwd", 2.5 * gflop, [&, v](int i) {
                           flash_attention_sm90_backward(ctx, d.dqkv.get(), d.scratch.get(),
                                                         d.dout[i]->get(), d.qkv[i]->get(),
                                                         d.out.get(), d.lse.get(), s.B, s.T, s.NH,
                                                         s.HS, false, 0, v, kBackwardFused);
                       }});
    }
    time_interleaved(ctx, s, iters, bwd);
}

// Returns the median forward + backward time of flash (default path and variants) in ms. With
// `variants`, also times every other tile-shape variant of each pass (the backward with one
// kernel's variant swapped, the other kernel at its default), of both paths.
double bench_flash(const Context& ctx, const Shape& s, int iters, bool variants) {
    Buffers<__nv_bfloat16> d(s, flash_attention_scratch_bytes(s.B, s.T, s.NH, s.HS), 1);
    const double gflop = 4.0 * s.B * s.NH * (double)s.T * s.T * s.HS / 2 / 1e9;
    const bool sm90 = flash_attention_sm90_available(ctx, s.HS);
    auto time_forward = [&](FlashPath path, int v) {
        return time_ms(ctx, iters, [&](int i) {
            flash_attention_forward(ctx, d.out.get(), d.lse.get(), d.qkv[i]->get(), s.B, s.T, s.NH,
                                    s.HS, v, path);
        });
    };
    const Stats mma_fwd = time_forward(FlashPath::kMmaSync, 0);
    print_row("flash", "fwd", s, gflop, mma_fwd);
    Stats fwd = mma_fwd;
    if (sm90) {
        fwd = time_forward(FlashPath::kSm90, 0);
        print_row("flash-sm90", "fwd", s, gflop, fwd);
    }
    // The backward reads the forward's out and lse of input set 0 for both sets: the timing
    // does not depend on the values.
    flash_attention_forward(ctx, d.out.get(), d.lse.get(), d.qkv[0]->get(), s.B, s.T, s.NH, s.HS);
    auto time_backward = [&](FlashPath path) {
        return time_ms(ctx, iters, [&](int i) {
            flash_attention_backward(ctx, d.dqkv.get(), d.scratch.get(), d.dout[i]->get(),
                                     d.qkv[i]->get(), d.out.get(), d.lse.get(), s.B, s.T, s.NH,
                                     s.HS, 0, 0, nullptr, path);
        });
    };
    Stats bwd = time_backward(FlashPath::kMmaSync);
    print_row("flash", "bwd", s, 2.5 * gflop, bwd);
    if (flash_attention_sm90_backward_available(ctx, s.HS)) {
        bwd = time_backward(FlashPath::kSm90);
        print_row("flash-sm90", "bwd", s, 2.5 * gflop, bwd);
        const Stats fused = time_backward(FlashPath::kSm90Fused);
        print_row("flash-sm90-fused", "bwd", s, 2.5 * gflop, fused);
        if (flash_attention_fused_backward_chosen(ctx, s.B, s.T, s.NH, s.HS)) bwd = fused;
    }
    if (variants) {
        char impl[32];
        for (int v = 1; v < flash_attention_variants(FlashPass::kForward); v++) {
            std::snprintf(impl, sizeof(impl), "flash fwd%d", v);
            print_row(impl, "fwd", s, gflop, time_forward(FlashPath::kMmaSync, v));
        }
        if (sm90) bench_sm90_variants(ctx, s, iters, d);
        flash_attention_forward(ctx, d.out.get(), d.lse.get(), d.qkv[0]->get(), s.B, s.T, s.NH,
                                s.HS);
        for (int pass = 0; pass < 2; pass++) {
            const FlashPass fp = pass == 0 ? FlashPass::kDq : FlashPass::kDkdv;
            for (int v = 1; v < flash_attention_variants(fp); v++) {
                const Stats st = time_ms(ctx, iters, [&](int i) {
                    flash_attention_backward(ctx, d.dqkv.get(), d.scratch.get(), d.dout[i]->get(),
                                             d.qkv[i]->get(), d.out.get(), d.lse.get(), s.B, s.T,
                                             s.NH, s.HS, pass == 0 ? v : 0, pass == 1 ? v : 0,
                                             nullptr, FlashPath::kMmaSync);
                });
                std::snprintf(impl, sizeof(impl), "flash %s%d", pass == 0 ? "dq" : "dkdv", v);
                print_row(impl, "bwd", s, 2.5 * gflop, st);
            }
        }
    }
    return fwd.median + bwd.median;
}

void bench_cublas(const Context& ctx, const Shape& s, int iters) {
    const int C = s.NH * s.HS;
    const size_t scratch = attention_cublas_scratch_bytes(s.B, s.T, C, s.NH);
    size_t free_bytes = 0, total = 0;
    LLMC_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    if (scratch + ((size_t)8 << 30) > free_bytes) {
        std::printf("| cublas-%-5s | skipped: needs %.1f GB of T x T scratch |\n", kPrecisionName,
                    scratch / 1e9);
        return;
    }
    Buffers<floatX> d(s, scratch, 2);
    char impl[32];
    std::snprintf(impl, sizeof(impl), "cublas-%s", kPrecisionName);
    const double gflop = 4.0 * s.B * s.NH * (double)s.T * s.T * s.HS / 2 / 1e9;
    const Stats fwd = time_ms(ctx, iters, [&](int i) {
        attention_forward_cublas(ctx, d.out.get(), d.lse.get(), d.scratch.get(), d.qkv[i]->get(),
                                 s.B, s.T, C, s.NH);
    });
    print_row(impl, "fwd", s, gflop, fwd);
    const Stats bwd = time_ms(ctx, iters, [&](int i) {
        attention_backward_cublas(ctx, d.dqkv.get(), d.scratch.get(), d.dout[i]->get(),
                                  d.qkv[i]->get(), d.out.get(), d.lse.get(), s.B, s.T, C, s.NH);
    });
    print_row(impl, "bwd", s, 2.5 * gflop, bwd);
}

}  // namespace

int main(int argc, char** argv) {
    skip_if_no_device();
    int iters = 30;
    Shape only{0, 0, 0, 0};  // --shape B,T,NH,HS: flash on this shape alone (for profilers)
    bool variants = false;
    for (int i = 1; i < argc; i++) {
        if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = std::atoi(argv[++i]);
        } else if (std::strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            LLMC_CHECK(
                std::sscanf(argv[++i], "%d,%d,%d,%d", &only.B, &only.T, &only.NH, &only.HS) == 4,
                "--shape takes B,T,NH,HS (e.g. 64,1024,12,64), not '%s'.", argv[i]);
        } else if (std::strcmp(argv[i], "--variants") == 0) {
            variants = true;
        } else {
            LLMC_FAIL(
                "unknown option '%s'; usage: bench_attention [--iters N] [--shape B,T,NH,HS] "
                "[--variants]",
                argv[i]);
        }
    }
    LLMC_CHECK(iters >= 20, "--iters must be at least 20 (got %d).", iters);
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/true);
    std::printf("device: %s, %d iterations, median/min/p90 in ms\n", ctx.props.name, iters);
    if (variants) {
        const FlashPass passes[] = {FlashPass::kForward, FlashPass::kDq, FlashPass::kDkdv};
        const char* pass_names[] = {"fwd", "dq", "dkdv"};
        for (int p = 0; p < 3; p++) {
            for (int v = 0; v < flash_attention_variants(passes[p]); v++) {
                std::printf("  %s%d: %s\n", pass_names[p], v,
                            flash_attention_variant_name(passes[p], v));
            }
        }
        for (int v = 0; v < flash_attention_variants(FlashPass::kForward, FlashPath::kSm90); v++) {
            std::printf("  sm90 fwd%d: %s\n", v,
                        flash_attention_variant_name(FlashPass::kForward, v, FlashPath::kSm90));
        }
        for (int v = 0; v < flash_attention_variants(FlashPass::kDq, FlashPath::kSm90); v++) {
            std::printf("  sm90 bwd%d, dq%d, dkdv%d (both kernels, one alone): %s\n", v, v, v,
                        flash_attention_variant_name(FlashPass::kDq, v, FlashPath::kSm90));
        }
    }
    std::printf(
        "| impl         | pass|   B |     T |  NH |  HS |    median |       min |       "
        "p90 | TFLOP/s | of 800 |\n");
    // GPT-2 d12 at B=64 and B=4 (a grid under two waves), longer T at the same B*T*T (x2 at
    // T=2048), HS=128.
    const Shape shapes[] = {{64, 1024, 12, 64},
                            {4, 1024, 12, 64},
                            {64, 2048, 12, 64},
                            {16, 4096, 12, 64},
                            {64, 1024, 12, 128}};
    if (only.B > 0) {
        bench_flash(ctx, only, iters, variants);
        return 0;
    }
    double d12_ms = 0.0;
    for (const Shape& s : shapes) {
        const double ms = bench_flash(ctx, s, iters, variants);
        if (s.B == 64 && s.T == 1024 && s.HS == 64) d12_ms = ms;
        bench_cublas(ctx, s, iters);
    }
    std::printf("flash, 12 layers fwd+bwd at B=64 T=1024 NH=12 HS=64: %.2f ms\n", 12 * d12_ms);
    return 0;
}
