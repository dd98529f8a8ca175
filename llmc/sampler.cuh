// sampler.cuh: text generation with the GPU model: one forward per new token, each giving the
// logits of the last position (gpt2_forward_logits_row), then the host sampler (sampler.h).
//
// The tokens go into sequence 0 of an EvalIO of the caller's; positions after the last token
// hold copies of it and are ignored, since attention is causal. When the text outgrows the
// buffer's T the window slides: the newest T tokens are the context. Cost: one forward of one
// sequence of T tokens per new token, whatever the text's length.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpt2_eval.cuh"
#include "sampler.h"

namespace llmc {

// Appends n_new tokens to *ids (which must hold at least one token, every id below V), drawn
// with `opts` from the RNG state *rng (advanced), each from a forward through `io`. on_token,
// when set, sees each new id as it is drawn. Returns false with one sentence in *why when the
// sampler refuses (bad options, or logits that are not finite: diverged weights), having
// appended the tokens drawn so far.
bool gpt2_generate(const Context& ctx, GPT2* model, EvalIO* io, std::vector<int>* ids, int n_new,
                   const SamplerOptions& opts, uint64_t* rng, std::string* why,
                   const std::function<void(int)>& on_token = nullptr);

}  // namespace llmc
