// shard_map.h: which parameters a rank's optimizer state holds under ZeRO stage 1.
//
// The parameter and gradient buffers are tensor-major (model-file order) and every tensor is a
// run of `layers` equal slices (L for the per-layer tensors, 1 for wte, wpe, lnfw, lnfb). Each
// slice of S elements is cut into W equal chunks of S / W (so S % W == 0 is required; for GPT-2
// every slice is a multiple of C, so C % W == 0 suffices); rank r owns chunk r of every slice:
// a ChunkMap (chunk_map.h) with part = r, whose local numbering is the rank's optimizer state
// (master, m, v). The chunk of each slice is exactly what an in-place ncclReduceScatter of that
// slice leaves on rank r (recvbuff = sendbuff + r * chunk) and what an in-place ncclAllGather
// reads.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "chunk_map.h"
#include "model_file.h"

namespace llmc {

static_assert(kNumParamTensors <= kChunkMaxTensors, "a shard map holds every parameter tensor");

// Rank `part` of world_size's chunks (ChunkMap), and what built them.
struct ShardMap : ChunkMap {
    int world_size = 1;
    int layers[kChunkMaxTensors];  // slices per tensor
};

// The map of `rank` of `world_size` for a model's layout. Returns false with one sentence in
// *why when a slice is not divisible by world_size.
bool shard_map_build(const GPT2Config& cfg, int world_size, int rank, ShardMap* map,
                     std::string* why);

// Calls fn(local_offset, global_offset, count) for each of the map's chunks, in local order.
void shard_for_each_chunk(const ShardMap& map,
                          const std::function<void(size_t, size_t, size_t)>& fn);

// Copies local[begin, begin + count) (this map's local numbering) to its global places in
// `global`, and the reverse for the whole local range: how rank 0 places a gathered shard and
// how a rank takes its chunks out of full host arrays.
void shard_local_to_global(const ShardMap& map, const float* local, size_t begin, size_t count,
                           float* global);
void shard_global_to_local(const ShardMap& map, const float* global, float* local);

// The contiguous slices of one tensor-layer group of the buffers: what the backward hands to
// the communication as soon as it is final. Group l < L: layer l's 12 slices; group L: lnfw,
// lnfb; group L + 1: wte, wpe. Each entry: (global offset, count).
struct GradSlice {
    size_t offset, count;
};
std::vector<GradSlice> grad_group_slices(const GPT2Config& cfg, int group);
inline int grad_group_count(const GPT2Config& cfg) { return cfg.num_layers + 2; }

}  // namespace llmc
