// util.h: small host helpers more than one part needs (host code).
//   json_string(s)         s as a JSON string literal: the run log, the config files, the CLI
//   fnv1a64(data, n, h)    FNV-1a 64 of bytes, chained from h: the multi-GPU config fingerprint
//   keep_lines(path, keep, what)  a text file cut to the lines keep() accepts: the logs on resume
//   env_int(name, lo, hi, fallback)  a whole number from the environment: the LLMC_* switches
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace llmc {

// s as a JSON string literal (quotes included, control characters and " \ escaped).
std::string json_string(const std::string& s);

// FNV-1a 64 of bytes, chained from h (start with kFnvOffset).
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = kFnvOffset);

// Rewrites the text file at path with only its complete lines (those ending in a newline) that
// keep accepts, in order; a missing file becomes an empty one. Written to path + ".tmp" and
// renamed, so a crash leaves the old file whole. Exits with "cannot write WHAT 'path'" on an
// error.
void keep_lines(const std::string& path, const std::function<bool(const std::string&)>& keep,
                const char* what);

// The whole number in the environment variable `name`: fallback when it is unset or empty.
// Exits with "NAME=V: use a whole number from LO to HI." when it is not one in [lo, hi].
int env_int(const char* name, int lo, int hi, int fallback);

}  // namespace llmc
