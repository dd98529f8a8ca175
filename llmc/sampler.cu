// sampler.cu: gpt2_generate (see sampler.cuh). Host loop around the model's forward; no kernels.
#include <algorithm>
#include <string>

#include "check.h"
#include "sampler.cuh"

namespace llmc {

bool gpt2_generate(const Context& ctx, GPT2* m, EvalIO* io, std::vector<int>* ids, int n_new,
                   const SamplerOptions& opts, uint64_t* rng, std::string* why,
                   const std::function<void(int)>& on_token) {
    const int V = m->cfg.vocab_size, T = io->T;
    LLMC_CHECK(!ids->empty(), "generation needs a prompt of at least one token");
    for (int id : *ids)
        LLMC_CHECK(id >= 0 && id < V, "prompt token %d is outside the model's vocabulary (V = %d)",
                   id, V);
    *why = sampler_options_error(opts);
    if (!why->empty()) return false;
    int* inputs = io->inputs();
    std::vector<float> logits(V);
    for (int i = 0; i < n_new; i++) {
        const int len = std::min<int>((int)ids->size(), T);
        const int* window = ids->data() + ids->size() - len;
        std::copy(window, window + len, inputs);
        std::fill(inputs + len, inputs + T, window[len - 1]);
        // The targets only give losses, which sampling does not read; valid ids all the same.
        std::copy(inputs, inputs + T, io->targets());
        gpt2_forward_logits_row(ctx, m, io, len - 1, logits.data());
        const int next = sample_token(logits.data(), V, opts, rng, why);
        if (next < 0) return false;
        ids->push_back(next);
        if (on_token) on_token(next);
    }
    return true;
}

}  // namespace llmc
