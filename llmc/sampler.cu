// sampler.cu: gpt2_generate (see sampler.cuh). Host loop around the model's forward; no kernels.
#include <algorithm>
#include <string>

#include "check.h"
#include "sampler.cuh"

bool gpt2_generate(const Context& ctx, GPT2* m, std::vector<int>* ids, int n_new,
                   const llmc::SamplerOptions& opts, uint64_t* rng, std::string* why,
                   const std::function<void(int)>& on_token) {
    const int V = m->cfg.vocab_size, T = m->T;
    const size_t N = (size_t)m->B * m->T;
    LLMC_CHECK(!ids->empty(), "generation needs a prompt of at least one token");
    for (int id : *ids)
        LLMC_CHECK(id >= 0 && id < V, "prompt token %d is outside the model's vocabulary (V = %d)",
                   id, V);
    *why = llmc::sampler_options_error(opts);
    if (!why->empty()) return false;
    // Row 0's inputs are overwritten; its targets and the other rows stay, as valid ids.
    const std::vector<int> saved(m->io.tokens, m->io.tokens + 2 * N);
    std::vector<float> logits(V);
    bool ok = true;
    for (int i = 0; i < n_new && ok; i++) {
        const int len = std::min<int>((int)ids->size(), T);
        const int* window = ids->data() + ids->size() - len;
        std::copy(window, window + len, m->io.tokens);
        std::fill(m->io.tokens + len, m->io.tokens + T, window[len - 1]);
        gpt2_forward_logits_row(ctx, m, len - 1, logits.data());
        const int next = llmc::sample_token(logits.data(), V, opts, rng, why);
        ok = next >= 0;
        if (!ok) break;
        ids->push_back(next);
        if (on_token) on_token(next);
    }
    std::copy(saved.begin(), saved.end(), m->io.tokens);
    return ok;
}
