// global_norm.cuh: squared L2 norm of all gradients, deterministically.
//   global_norm_squared: *out = sum(values^2) over n values (overwrites), in float, reduced in a
//   fixed order through `scratch` (per-block partials, then one block sums them).
#pragma once
#include "chunk_map.h"
#include "context.cuh"
#include "precision.cuh"

namespace llmc {

size_t global_norm_scratch_bytes(const Context& ctx);
void global_norm_squared(const Context& ctx, float* out, void* scratch, const floatX* values,
                         size_t n);
// *out = the sum of squares over the chunks of `map` (global indices into values, the whole
// gradient buffer); ZeRO-1: a rank's chunks, and the caller all-reduces it over the ranks.
void global_norm_squared_sharded(const Context& ctx, float* out, void* scratch,
                                 const floatX* values, const llmc::ChunkMap& map);

}  // namespace llmc
