// profile_gpt2.cu: a few training steps of GPT-2 on random tokens, for profilers. No data files.
//
//   ./profile_gpt2cu [-e d12] [-b 4] [-t 1024] [--steps 3] [--graph 0|1]   (--help lists them)
//
// Nsight Systems (timeline with the NVTX ranges step / forward / backward / optimizer / layer):
//   nsys profile -t cuda,nvtx -o gpt2_d12 ./profile_gpt2cu --graph 0
// Nsight Compute (every kernel of one step; leave the clocks alone on shared machines):
//   ncu --clock-control none --set full --nvtx --nvtx-include "step/" -o gpt2_d12
//       ./profile_gpt2cu --steps 2 --graph 0          (one command line)
// --graph 0 keeps each kernel a separate launch, which both tools show most clearly.
#include <string>
#include <vector>

#include "cli.h"
#include "gpt2.cuh"
#include "model_init.h"

using namespace llmc;

namespace {

struct ProfileOptions {
    std::string preset = "d12";  // -e
    int B = 4, T = 1024;         // -b, -t
    int steps = 3;               // --steps
    int graph = 0;               // --graph
};

ProfileOptions parse_args(int argc, char** argv) {
    ProfileOptions o;
    cli::Program p;
    p.usage = "profile_gpt2cu [options]";
    p.about =
        "A few training steps of GPT-2 on random tokens, for profilers (the header of "
        "profile_gpt2.cu has nsys and ncu command lines).";
    p.options = {
        cli::option("-e, --model", "PRESET", "model", &o.preset, "preset d12|d24|d36|d48"),
        cli::option("-b, --batch-size", "B", "B", &o.B, 1, 1 << 16, "micro-batch size"),
        cli::option("-t, --seq-len", "T", "T", &o.T, 1, 1 << 20, "sequence length"),
        cli::option("--steps", "N", "steps", &o.steps, 1, 1 << 20, "training steps"),
        cli::option("--graph", "0|1", "graph", &o.graph, 0, 1,
                    "run each step as a CUDA graph (0 keeps every kernel a launch of its own, "
                    "which both tools show most clearly)"),
    };
    cli::parse_or_exit(p, argc, argv);
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const ProfileOptions o = parse_args(argc, argv);
    const int B = o.B, T = o.T;
    GPT2Config cfg;
    LLMC_CHECK(config_from_preset(o.preset, &cfg), "unknown preset '%s' (d12, d24, d36 or d48)",
               o.preset.c_str());
    LLMC_CHECK(T <= cfg.max_seq_len, "-t %d is longer than the model's maximum %d", T,
               cfg.max_seq_len);
    std::vector<float> params;
    gpt2_init_random(cfg, 1337, &params);
    Context ctx;
    context_init(&ctx, 0, true);
    GPT2 model;
    gpt2_create(ctx, &model, cfg, params, B, T, 1,
                AdamWHyper{0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1337});
    // Random tokens: a fixed linear congruential sequence, so runs are comparable.
    uint32_t x = 12345;
    for (size_t i = 0; i < (size_t)2 * B * T; i++) {
        x = x * 1664525u + 1013904223u;
        model.io.tokens[i] = (int)((x >> 8) % (uint32_t)cfg.vocab_size);
    }
    for (int s = 1; s <= o.steps; s++) {
        model.io.step_values->lr = 1e-4f;
        model.io.step_values->step = s;
        gpt2_step(ctx, &model, o.graph != 0);
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        std::printf("step %d loss %.6f\n", s, model.io.results[0]);
    }
    return 0;
}
