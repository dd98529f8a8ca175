// rng.h: splitmix64 (Steele, Lea, Flood 2014), the project's one small generator: initial
// weights, shuffles, validation splits and synthetic test corpora all draw from it, so every
// machine and standard library produces the same numbers for the same seed.
#pragma once
#include <cstdint>

namespace llmc {

// Advances *state and returns the next output.
inline uint64_t splitmix64_next(uint64_t* state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The output for state x: a stateless 64-bit mix (a hash of x).
inline uint64_t splitmix64(uint64_t x) { return splitmix64_next(&x); }

}  // namespace llmc
