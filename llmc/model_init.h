// model_init.h: GPT-2's random initialisation on the host, from a seed.
//   Linear and embedding weights ~ N(0, 0.02); the two residual projections (attprojw, fcprojw)
//   ~ N(0, 0.02 / sqrt(2 L)); biases 0; layernorm weights 1, biases 0; wte's padding rows
//   (V..Vp-1) 0. Deterministic for a seed on any machine (own generator, no std::
//   distributions, whose output differs between standard libraries).
#pragma once
#include <cstdint>
#include <vector>

#include "model_file.h"

namespace llmc {
void gpt2_init_random(const GPT2Config& cfg, uint64_t seed, std::vector<float>* params);
}
