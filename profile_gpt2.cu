// profile_gpt2.cu: training steps of GPT-2 on random tokens (no data files), for profilers and
// for its own step timeline.
//
//   ./profile_gpt2cu [-e d12] [-b 4] [-t 1024] [--steps 3] [--graph 0|1]   (--help lists them)
//   ./profile_gpt2cu --trace N [--graph 1] [--csv PATH] [--peak-tflops X] [--label NAME] ...
//
// --trace N: where the step's time goes, without nsys (scripts/bench/step_profile.sh runs it).
// After warm-up, N steps are timed as the trainer times them (CUDA events around the launch) with
// nothing traced; then CUPTI (step_trace.cuh) records every kernel, memcpy and memset of N more
// steps (the graph captured again with tracing on), and for each step the report gives the wall
// time, the busy time (union of the records), the idle time (wall - busy), the largest gaps with
// the kernels on each side, and a per-family table (step_timeline.h). Then a large square GEMM
// through the project's matmul measures cuBLASLt's peak on this GPU, against which the step's
// model FLOPs (gpt2_flops_per_token) give the GEMM-bound limit of the step and the share of it
// the untraced step reaches. --csv PATH writes every record of the traced steps. The last line
// ("result | ...") is the one-line summary scripts/bench/step_profile.sh collects.
//
// Nsight Systems (timeline with the NVTX ranges step / forward / backward / optimizer / layer):
//   nsys profile -t cuda,nvtx -o gpt2_d12 ./profile_gpt2cu --graph 0
// Nsight Compute (every kernel of one step; leave the clocks alone on shared machines):
//   ncu --clock-control none --set full --nvtx --nvtx-include "step/" -o gpt2_d12
//       ./profile_gpt2cu --steps 2 --graph 0          (one command line)
// --graph 0 keeps each kernel a separate launch, which both tools show most clearly.
#include <algorithm>
#include <string>
#include <vector>

#include "cli.h"
#include "gpt2.cuh"
#include "matmul.cuh"
#include "model_init.h"
#include "optimizer.cuh"
#include "step_trace.cuh"
#include "train_step.cuh"

using namespace llmc;

namespace {

struct ProfileOptions {
    std::string preset = "d12";  // -e
    int B = 4, T = 1024;         // -b, -t
    int steps = 3;               // --steps
    int graph = 0;               // --graph
    int trace = 0;               // --trace: steps to trace (0: the plain profiling run)
    int warmup = 3;              // --warmup: untimed graph replays before the timed ones
    std::string csv;             // --csv: every traced record, when given
    float peak_tflops = 0;       // --peak-tflops: cuBLASLt's peak; 0: measure it
    std::string label = "-";     // --label: the configuration's name in the result line
};

ProfileOptions parse(int argc, char** argv) {
    ProfileOptions o;
    cli::Program p;
    p.usage = "profile_gpt2cu [options]";
    p.about =
        "Training steps of GPT-2 on random tokens, for profilers (the header of profile_gpt2.cu "
        "has nsys and ncu command lines) and, with --trace N, for its own step timeline.";
    p.options = {
        cli::option("-e, --model", "PRESET", "model", &o.preset, "preset d12|d24|d36|d48"),
        cli::option("-b, --batch-size", "B", "B", &o.B, 1, 1 << 16, "micro-batch size"),
        cli::option("-t, --seq-len", "T", "T", &o.T, 1, 1 << 20, "sequence length"),
        cli::option("--steps", "N", "steps", &o.steps, 1, 1 << 20, "training steps"),
        cli::option("--graph", "0|1", "graph", &o.graph, 0, 1,
                    "run each step as a CUDA graph (0 keeps every kernel a launch of its own, "
                    "which both tools show most clearly)"),
        cli::option("--trace", "N", "trace", &o.trace, 0, 1 << 20,
                    "time N steps, then record N more with CUPTI and print where the time goes "
                    "(0: the plain profiling run)"),
        cli::option("--warmup", "N", "warmup", &o.warmup, 0, 1 << 20,
                    "untimed steps before the timed ones (--trace)"),
        cli::option("--csv", "PATH", "csv", &o.csv, "write every traced record to PATH")
            .with_default("none"),
        cli::option("--peak-tflops", "X", "peak_tflops", &o.peak_tflops, 0.0, 1e6,
                    "cuBLASLt's peak for the GEMM-bound limit (0: measure it)"),
        cli::option("--label", "NAME", "label", &o.label,
                    "the configuration's name in the result line"),
    };
    cli::parse_or_exit(p, argc, argv);
    return o;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// One step as the trainer runs it: the step values, the launch between two events, the wait.
// Returns the events' milliseconds.
double timed_step(const Context& ctx, TrainStep* s, bool graph, int step, cudaEvent_t start,
                  cudaEvent_t stop) {
    s->io.step_values->lr = 1e-4f;
    s->io.step_values->step = step;
    LLMC_CUDA_CHECK(cudaEventRecord(start, ctx.stream));
    train_step_run(ctx, s, graph);
    LLMC_CUDA_CHECK(cudaEventRecord(stop, ctx.stream));
    LLMC_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    LLMC_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
}

__global__ void fill_hash_kernel(floatX* __restrict__ out, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned z = (unsigned)i * 2654435761u ^ seed;
        z = (z ^ (z >> 15)) * 2246822519u;
        out[i] = from_float<floatX>((float)(z >> 8) * (1.0f / 16777216.0f) - 0.5f);
    }
}

// cuBLASLt's rate on this GPU for this build's matmul precision: the median of 10 timed square
// products (S x S x S, S = 8192 and 16384, random inputs), the better size. 2*S^3 FLOPs each.
double measure_gemm_peak(const Context& ctx) {
    double best = 0.0;
    for (int S : {8192, 16384}) {
        const size_t n = (size_t)S * S;
        floatX *a = nullptr, *b = nullptr, *c = nullptr;
        LLMC_CUDA_CHECK(cudaMalloc(&a, n * sizeof(floatX)));
        LLMC_CUDA_CHECK(cudaMalloc(&b, n * sizeof(floatX)));
        LLMC_CUDA_CHECK(cudaMalloc(&c, n * sizeof(floatX)));
        fill_hash_kernel<<<1024, 256, 0, ctx.stream>>>(a, n, 1u);
        fill_hash_kernel<<<1024, 256, 0, ctx.stream>>>(b, n, 2u);
        LLMC_CUDA_CHECK_LAST();
        auto gemm = [&] {
            matmul_strided_batched(ctx, c, a, b, S, S, S, false, false, S, S, S, 0, 0, 0, 1, 1.0f,
                                   0.0f);
        };
        for (int i = 0; i < 3; i++) gemm();  // the plan, the autotuning, warm clocks
        cudaEvent_t start, stop;
        LLMC_CUDA_CHECK(cudaEventCreate(&start));
        LLMC_CUDA_CHECK(cudaEventCreate(&stop));
        std::vector<double> tflops;
        for (int i = 0; i < 10; i++) {
            LLMC_CUDA_CHECK(cudaEventRecord(start, ctx.stream));
            gemm();
            LLMC_CUDA_CHECK(cudaEventRecord(stop, ctx.stream));
            LLMC_CUDA_CHECK(cudaEventSynchronize(stop));
            float ms = 0.0f;
            LLMC_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
            tflops.push_back(2.0 * S * (double)S * S / (ms * 1e-3) / 1e12);
        }
        const double med = median(tflops);
        std::printf("cuBLASLt %dx%dx%d: median %.1f TFLOP/s over 10 runs\n", S, S, S, med);
        best = std::max(best, med);
        LLMC_CUDA_CHECK(cudaEventDestroy(start));
        LLMC_CUDA_CHECK(cudaEventDestroy(stop));
        LLMC_CUDA_CHECK(cudaFree(a));
        LLMC_CUDA_CHECK(cudaFree(b));
        LLMC_CUDA_CHECK(cudaFree(c));
    }
    return best;
}

// FLOPs of the model's matrix products per token (what cuBLASLt runs): 2 per weight per token
// forward and 4 backward, over the four matrices of each layer and the lm-head.
double matmul_flops_per_token(const GPT2Config& cfg) {
    const double C = cfg.channels;
    return 6.0 * (cfg.num_layers * 12.0 * C * C + C * cfg.padded_vocab_size);
}

// The traced run: see the file comment.
void trace_steps(const Context& ctx, TrainStep* s, const ProfileOptions& o) {
    const bool graph = o.graph != 0;
    cudaEvent_t start, stop;
    LLMC_CUDA_CHECK(cudaEventCreate(&start));
    LLMC_CUDA_CHECK(cudaEventCreate(&stop));
    int step = 1;
    // The eager step (plans, autotuning), the capture, the warm-up replays.
    for (int i = 0; i < 2 + o.warmup; i++) timed_step(ctx, s, graph, step++, start, stop);
    std::vector<double> untraced;
    for (int i = 0; i < o.trace; i++) {
        untraced.push_back(timed_step(ctx, s, graph, step++, start, stop));
    }

    StepTracer tracer;
    std::string why;
    LLMC_CHECK(tracer.start(&why), "%s.", why.c_str());
    // The graph captured and instantiated again with tracing on, then replayed once.
    train_step_reset_graph(s);
    for (int i = 0; i < 2; i++) timed_step(ctx, s, graph, step++, start, stop);
    std::vector<uint64_t> begin, end;
    std::vector<double> walls;
    for (int i = 0; i < o.trace; i++) {
        begin.push_back(tracer.timestamp());
        walls.push_back(timed_step(ctx, s, graph, step++, start, stop));
        end.push_back(tracer.timestamp());
    }
    LLMC_CUDA_CHECK(cudaDeviceSynchronize());
    size_t dropped = 0;
    const std::vector<TraceRecord> all = tracer.stop(&dropped);
    std::vector<std::vector<TraceRecord>> steps;
    std::vector<StepAnalysis> analyses;
    for (int i = 0; i < o.trace; i++) {
        steps.push_back(records_between(all, begin[i], end[i]));
        analyses.push_back(analyze_step(steps.back(), walls[i], 10));
    }
    if (dropped > 0) std::printf("warning: CUPTI dropped %zu records\n", dropped);
    std::printf(
        "\nuntraced steps (events around the launch, as the trainer times them): median "
        "%.3f ms over %d\n",
        median(untraced), o.trace);
    std::printf("traced steps: median %.3f ms over %d (tracing costs %+.2f%%)\n\n", median(walls),
                o.trace, 100.0 * (median(walls) / median(untraced) - 1.0));
    print_step_report(steps, analyses, stdout);
    if (!o.csv.empty()) {
        LLMC_CHECK(write_trace_csv(o.csv, steps), "cannot write the trace CSV %s", o.csv.c_str());
        std::printf("\nwrote every record of the %d traced steps to %s\n", o.trace, o.csv.c_str());
    }

    // The GEMM-bound limit: the step's model FLOPs at cuBLASLt's measured peak.
    const double peak = o.peak_tflops > 0 ? o.peak_tflops : measure_gemm_peak(ctx);
    const double tokens = (double)s->B * s->T;
    const double flops = gpt2_flops_per_token(s->model->cfg, s->T) * tokens;
    const double limit_ms = flops / (peak * 1e12) * 1e3;
    const double step_ms = median(untraced);
    std::printf(
        "\nGEMM-bound limit: %.3f GFLOP/token x %.0f tokens = %.2f TFLOP a step; at %.1f "
        "TFLOP/s (cuBLASLt, %s) that is %.2f ms a step (%.0f tok/s). The untraced step, "
        "%.2f ms (%.0f tok/s), is %.1f%% of that limit.\n",
        flops / tokens / 1e9, tokens, flops / 1e12, peak, o.peak_tflops > 0 ? "given" : "measured",
        limit_ms, tokens / (limit_ms * 1e-3), step_ms, tokens / (step_ms * 1e-3),
        100.0 * limit_ms / step_ms);
    double gemm_ms = 0.0, busy = 0.0, idle = 0.0, records = 0.0;
    for (const StepAnalysis& a : analyses) {
        gemm_ms += a.families[kFamGemm].ms / analyses.size();
        busy += a.busy_ms / analyses.size();
        idle += a.idle_ms / analyses.size();
        records += (double)a.records / analyses.size();
    }
    const double mm_tflop = matmul_flops_per_token(s->model->cfg) * tokens / 1e12;
    std::printf(
        "GEMM kernels: %.2f ms a step for the model's %.2f TFLOP of matrix products: %.1f "
        "TFLOP/s, %.1f%% of that peak.\n",
        gemm_ms, mm_tflop, mm_tflop / (gemm_ms * 1e-3), 100.0 * mm_tflop / (gemm_ms * 1e-3) / peak);
    const double traced = median(walls);
    std::printf(
        "\nresult | %s | %s B=%d T=%d | %.3f | %.3f | %.3f | %.3f | %.2f | %.0f | %.1f | "
        "%.1f |\n",
        o.label.c_str(), o.preset.c_str(), s->B, s->T, step_ms, traced, busy, idle,
        100.0 * idle / traced, records, peak, 100.0 * limit_ms / step_ms);
    LLMC_CUDA_CHECK(cudaEventDestroy(start));
    LLMC_CUDA_CHECK(cudaEventDestroy(stop));
}

}  // namespace

int main(int argc, char** argv) {
    const ProfileOptions o = parse(argc, argv);
    GPT2Config cfg;
    LLMC_CHECK(config_from_preset(o.preset, &cfg), "unknown preset '%s' (d12, d24, d36 or d48)",
               o.preset.c_str());
    LLMC_CHECK(o.T <= cfg.max_seq_len, "-t %d is longer than the model's maximum %d", o.T,
               cfg.max_seq_len);
    std::vector<float> params;
    gpt2_init_random(cfg, 1337, &params);
    Context ctx;
    context_init(&ctx, 0, true);
    train_check_memory(ctx, cfg, o.B, o.T, 1, GPT2Options(), 1);
    GPT2 model;
    gpt2_create(ctx, &model, cfg, params, o.B, o.T);
    AdamW opt;
    optimizer_create(ctx, &opt, model.layout, params,
                     AdamWHyper{0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1337});
    TrainStep step;
    train_step_create(&step, &model, &opt, 1);
    std::printf("profile_gpt2cu: %s, %s B=%d T=%d, %s build, graph %d\nswitches: %s\n",
                ctx.props.name, o.preset.c_str(), o.B, o.T, kPrecisionName, o.graph,
                context_overlap_summary(ctx).c_str());
    // Random tokens: a fixed linear congruential sequence, so runs are comparable.
    uint32_t x = 12345;
    for (size_t i = 0; i < (size_t)2 * o.B * o.T; i++) {
        x = x * 1664525u + 1013904223u;
        step.io.tokens[i] = (int)((x >> 8) % (uint32_t)cfg.vocab_size);
    }
    if (o.trace > 0) {
        trace_steps(ctx, &step, o);
        return 0;
    }
    for (int s = 1; s <= o.steps; s++) {
        step.io.step_values->lr = 1e-4f;
        step.io.step_values->step = s;
        train_step_run(ctx, &step, o.graph != 0);
        LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        std::printf("step %d loss %.6f\n", s, step.io.results[0]);
    }
    return 0;
}
