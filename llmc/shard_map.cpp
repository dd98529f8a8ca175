// shard_map.cpp: building the ZeRO-1 shard map and the gradient groups (see shard_map.h).
#include "shard_map.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace llmc {

namespace {
// Slices per tensor: L for the per-layer tensors, 1 for wte, wpe, lnfw, lnfb.
int layers_of(const GPT2Config& cfg, int k) {
    return (k == kWte || k == kWpe || k == kLnfw || k == kLnfb) ? 1 : cfg.num_layers;
}
}  // namespace

bool shard_map_build(const GPT2Config& cfg, int world_size, int rank, ShardMap* map,
                     std::string* why) {
    const ParamLayout lay = param_layout(cfg);
    ShardMap m;
    m.count = kNumParamTensors;
    m.world_size = world_size;
    m.part = rank;
    m.local_offset[0] = 0;
    for (int k = 0; k < kNumParamTensors; k++) {
        m.layers[k] = layers_of(cfg, k);
        m.offset[k] = lay.offsets[k];
        m.slice[k] = lay.sizes[k] / m.layers[k];
        if (m.slice[k] % world_size != 0) {
            char buf[320];
            std::snprintf(buf, sizeof(buf),
                          "--zero 1 on %d GPUs splits every parameter slice in %d, but %s has "
                          "slices of %zu elements (C=%d): use a number of GPUs that divides C, "
                          "or --zero 0",
                          world_size, world_size, kParamNames[k], m.slice[k], cfg.channels);
            *why = buf;
            return false;
        }
        m.chunk[k] = m.slice[k] / world_size;
        m.decayed[k] = param_is_decayed(k) ? 1 : 0;
        m.local_offset[k + 1] = m.local_offset[k] + m.chunk[k] * m.layers[k];
    }
    *map = m;
    return true;
}

void shard_for_each_chunk(const ShardMap& map,
                          const std::function<void(size_t, size_t, size_t)>& fn) {
    for (int k = 0; k < map.count; k++)
        for (int l = 0; l < map.layers[k]; l++)
            fn(map.local_offset[k] + (size_t)l * map.chunk[k],
               map.offset[k] + (size_t)l * map.slice[k] + (size_t)map.part * map.chunk[k],
               map.chunk[k]);
}

void shard_local_to_global(const ShardMap& map, const float* local, size_t begin, size_t count,
                           float* global) {
    const size_t end = begin + count;
    shard_for_each_chunk(map, [&](size_t lo, size_t go, size_t n) {
        const size_t a = std::max(lo, begin), b = std::min(lo + n, end);
        if (a < b)
            std::memcpy(global + go + (a - lo), local + (a - begin), (b - a) * sizeof(float));
    });
}

void shard_global_to_local(const ShardMap& map, const float* global, float* local) {
    shard_for_each_chunk(map, [&](size_t lo, size_t go, size_t n) {
        std::memcpy(local + lo, global + go, n * sizeof(float));
    });
}

std::vector<GradSlice> grad_group_slices(const GPT2Config& cfg, int group) {
    const ParamLayout lay = param_layout(cfg);
    const int L = cfg.num_layers;
    std::vector<GradSlice> out;
    if (group == L) {
        out.push_back({lay.offsets[kLnfw], lay.sizes[kLnfw]});
        out.push_back({lay.offsets[kLnfb], lay.sizes[kLnfb]});
    } else if (group == L + 1) {
        out.push_back({lay.offsets[kWte], lay.sizes[kWte]});
        out.push_back({lay.offsets[kWpe], lay.sizes[kWpe]});
    } else {
        for (int k = kLn1w; k <= kFcprojb; k++) {
            const size_t slice = lay.sizes[k] / L;
            out.push_back({lay.offsets[k] + (size_t)group * slice, slice});
        }
    }
    return out;
}

}  // namespace llmc
