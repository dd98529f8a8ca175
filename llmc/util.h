// util.h: small host helpers more than one part needs (host code).
//   json_string(s)         s as a JSON string literal: the run log, the config files, the CLI
//   fnv1a64(data, n, h)    FNV-1a 64 of bytes, chained from h: the multi-GPU config fingerprint
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace llmc {

// s as a JSON string literal (quotes included, control characters and " \ escaped).
std::string json_string(const std::string& s);

// FNV-1a 64 of bytes, chained from h (start with kFnvOffset).
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = kFnvOffset);

}  // namespace llmc
