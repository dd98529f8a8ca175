// model_init.cpp: GPT-2 random initialisation (see model_init.h).
#include "model_init.h"

#include <cmath>

#include "rng.h"

namespace llmc {
namespace {

struct SplitMix64 {
    uint64_t state;
    uint64_t next() { return splitmix64_next(&state); }
    double uniform() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0,1)
};

// Fills n values with N(0, std) by the Box-Muller transform.
void fill_normal(SplitMix64* rng, float* out, size_t n, float std) {
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < n; i += 2) {
        double r = std::sqrt(-2.0 * std::log(rng->uniform()));
        double theta = two_pi * rng->uniform();
        out[i] = static_cast<float>(r * std::cos(theta) * std);
        if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(theta) * std);
    }
}

}  // namespace

void gpt2_init_random(const GPT2Config& cfg, uint64_t seed, std::vector<float>* params) {
    const ParamLayout lay = param_layout(cfg);
    params->assign(lay.total, 0.0f);
    SplitMix64 rng{seed};
    const float std_base = 0.02f;
    // Residual projections are scaled so the residual stream's variance does not grow with L.
    const float std_proj = std_base / std::sqrt(2.0f * cfg.num_layers);
    float* p = params->data();
    const size_t C = cfg.channels;
    fill_normal(&rng, p + lay.offsets[kWte], (size_t)cfg.vocab_size * C, std_base);
    fill_normal(&rng, p + lay.offsets[kWpe], lay.sizes[kWpe], std_base);
    fill_normal(&rng, p + lay.offsets[kQkvw], lay.sizes[kQkvw], std_base);
    fill_normal(&rng, p + lay.offsets[kAttprojw], lay.sizes[kAttprojw], std_proj);
    fill_normal(&rng, p + lay.offsets[kFcw], lay.sizes[kFcw], std_base);
    fill_normal(&rng, p + lay.offsets[kFcprojw], lay.sizes[kFcprojw], std_proj);
    for (int idx : {kLn1w, kLn2w, kLnfw}) {
        for (size_t i = 0; i < lay.sizes[idx]; i++) p[lay.offsets[idx] + i] = 1.0f;
    }
}

}  // namespace llmc
