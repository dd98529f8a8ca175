// sampler.h: the next token from one position's logits (host code, no CUDA).
//
// sample_token(logits[V], temperature, top_k, rng):
//   temperature == 0, or top_k == 1: argmax (the lowest id among equal maxima); no random draw.
//   otherwise: the candidates are the top_k largest logits (all V when top_k == 0 or >= V; ties
//   broken toward the lower id), p_i = exp((l_i - max) / temperature) / sum over candidates,
//   computed in double, and one draw u = splitmix64_next(rng) / 2^64 picks the first candidate
//   (in id order) whose cumulative probability exceeds u * sum.
// So a seed fixes the whole sequence of tokens, on every machine and standard library.
//
// A TokenTable decodes ids with llm.c's tokenizer file (tokenizer.h describes it; prepare_data
// writes one beside the shards, so samples during training need no other file) or with
// GPT-2's encoder.json + vocab.bpe.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

struct SamplerOptions {
    float temperature = 1.0f;  // 0 = greedy (argmax)
    int top_k = 0;             // 0 = every token
};

// "" when the options are usable, else one sentence saying what is wrong.
std::string sampler_options_error(const SamplerOptions& opts);

// The next token, as described above; -1 with one sentence in *why on bad options, V < 1 or a
// logit that is NaN or infinite.
int sample_token(const float* logits, int V, const SamplerOptions& opts, uint64_t* rng,
                 std::string* why);

// s with every ill-formed UTF-8 byte replaced by U+FFFD, so that a sample cut inside a
// character still prints and stays valid JSON text.
std::string valid_utf8(const std::string& s);

class TokenTable {
  public:
    // Reads an llm.c tokenizer file (version 1 or 2), or a directory holding GPT-2's
    // encoder.json and vocab.bpe (as Tokenizer::load); false with one sentence in *why.
    bool load(const std::string& path, std::string* why);
    int vocab_size() const { return (int)offsets_.size() - 1; }
    // The bytes of the tokens, concatenated; an id outside the table gives "<|id|>".
    std::string decode(const int* ids, size_t n) const;

  private:
    std::string bytes_;
    std::vector<uint32_t> offsets_{0};
};

}  // namespace llmc
