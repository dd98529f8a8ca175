// profile_gpt2.cu: a few training steps of GPT-2 on random tokens, for profilers. No data files.
//
//   ./profile_gpt2cu [-e d12] [-b 4] [-t 1024] [--steps 3] [--graph 0|1]
//
// Nsight Systems (timeline with the NVTX ranges step / forward / backward / optimizer / layer):
//   nsys profile -t cuda,nvtx -o gpt2_d12 ./profile_gpt2cu --graph 0
// Nsight Compute (every kernel of one step; leave the clocks alone on shared machines):
//   ncu --clock-control none --set full --nvtx --nvtx-include "step/" -o gpt2_d12
//       ./profile_gpt2cu --steps 2 --graph 0          (one command line)
// --graph 0 keeps each kernel a separate launch, which both tools show most clearly.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpt2.cuh"
#include "model_init.h"

using namespace llmc;

int main(int argc, char** argv) {
    std::string preset = "d12";
    int B = 4, T = 1024, steps = 3, graph = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string f = argv[i];
        int v = std::atoi(argv[i + 1]);
        if (f == "-e")
            preset = argv[i + 1];
        else if (f == "-b" && v > 0)
            B = v;
        else if (f == "-t" && v > 0)
            T = v;
        else if (f == "--steps" && v > 0)
            steps = v;
        else if (f == "--graph")
            graph = v != 0;
        else
            LLMC_FAIL("unknown option or bad value: %s %s (see the header of profile_gpt2.cu)",
                      argv[i], argv[i + 1]);
    }
    GPT2Config cfg;
    LLMC_CHECK(config_from_preset(preset, &cfg), "unknown preset '%s' (d12, d24, d36 or d48)",
               preset.c_str());
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
    for (int s = 1; s <= steps; s++) {
        model.io.step_values->lr = 1e-4f;
        model.io.step_values->step = s;
        gpt2_step(ctx, &model, graph != 0);
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        std::printf("step %d loss %.6f\n", s, model.io.results[0]);
    }
    return 0;
}
