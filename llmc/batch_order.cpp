// batch_order.cpp: per-epoch shard and batch permutations and the rank's walk through them (see
// batch_order.h).
#include "batch_order.h"

#include <algorithm>
#include <numeric>

namespace llmc {

namespace {

// Uniform in [0, n): the lowest 2^64 mod n draws are rejected so every residue is equally likely.
uint64_t uniform_below(uint64_t* state, uint64_t n) {
    const uint64_t reject_below = (0 - n) % n;
    uint64_t r = splitmix64_next(state);
    while (r < reject_below) r = splitmix64_next(state);
    return r % n;
}

// The generator state of one permutation. Hashing each input in turn keeps the streams of nearby
// seeds, epochs and shards unrelated.
uint64_t stream_state(uint64_t seed, long long epoch, uint64_t stream) {
    uint64_t s = seed;
    s = splitmix64_next(&s) ^ (uint64_t)epoch;
    s = splitmix64_next(&s) ^ stream;
    return splitmix64_next(&s);
}

template <typename V>
void fisher_yates(std::vector<V>* v, uint64_t state) {
    for (size_t i = v->size(); i > 1; --i) {
        std::swap((*v)[i - 1], (*v)[(size_t)uniform_below(&state, i)]);
    }
}

void build_epoch(const BatchOrder& order, BatchCursor* c) {
    if (c->built_epoch == c->epoch) return;
    c->shard_order.resize(order.shard_batches.size());
    std::iota(c->shard_order.begin(), c->shard_order.end(), 0);
    if (order.shuffle) fisher_yates(&c->shard_order, stream_state(order.seed, c->epoch, 0));
    c->slot_start.assign(1, 0);
    for (int shard : c->shard_order) {
        c->slot_start.push_back(c->slot_start.back() + order.shard_batches[shard]);
    }
    c->built_epoch = c->epoch;
    c->built_slot = -1;
}

void build_slot(const BatchOrder& order, BatchCursor* c, int slot) {
    if (c->built_slot == slot) return;
    const int shard = c->shard_order[slot];
    c->batch_order.resize((size_t)order.shard_batches[shard]);
    std::iota(c->batch_order.begin(), c->batch_order.end(), 0);
    if (order.shuffle) {
        fisher_yates(&c->batch_order, stream_state(order.seed, c->epoch, (uint64_t)shard + 1));
    }
    c->built_slot = slot;
}

// Sets c->shard and c->batch from c->epoch and c->index.
void settle(const BatchOrder& order, BatchCursor* c) {
    build_epoch(order, c);
    const auto it = std::upper_bound(c->slot_start.begin(), c->slot_start.end(), c->index);
    const int slot = (int)(it - c->slot_start.begin()) - 1;
    build_slot(order, c, slot);
    c->shard = c->shard_order[slot];
    c->batch = c->batch_order[(size_t)(c->index - c->slot_start[slot])];
}

}  // namespace

void cursor_start_epoch(const BatchOrder& order, BatchCursor* c, long long epoch) {
    c->epoch = epoch;
    c->index = order.rank;
    settle(order, c);
}

void cursor_advance(const BatchOrder& order, BatchCursor* c) {
    c->index += order.world_size;
    if (c->index >= order.total) {
        cursor_start_epoch(order, c, c->epoch + 1);
    } else {
        settle(order, c);
    }
}

long long cursor_find(const BatchOrder& order, BatchCursor* c, long long epoch, int shard,
                      long long batch) {
    c->epoch = epoch;
    build_epoch(order, c);
    const auto slot_it = std::find(c->shard_order.begin(), c->shard_order.end(), shard);
    const int slot = (int)(slot_it - c->shard_order.begin());
    build_slot(order, c, slot);
    const auto it = std::find(c->batch_order.begin(), c->batch_order.end(), batch);
    c->index = c->slot_start[slot] + (long long)(it - c->batch_order.begin());
    c->shard = shard;
    c->batch = batch;
    return c->index;
}

}  // namespace llmc
