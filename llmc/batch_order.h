// batch_order.h: the order in which the data loader (dataloader.h) serves batches, apart from
// reading them. Batches are named by shard index (in name order) and batch number within the
// shard; epoch e is a sequence of every batch once:
//   unshuffled  shards 0, 1, ... and each shard's batches 0, 1, ...
//   shuffled    the shards in a permutation drawn from (seed, e, stream 0), and the batches of
//               shard s, all together, in a permutation drawn from (seed, e, stream s + 1)
// Batch b of an epoch's sequence (b = 0, 1, ...) belongs to rank b % world_size.
// Permutations are Fisher-Yates driven by splitmix64: integer arithmetic only, so a seed gives
// the same order on every machine and compiler (std::shuffle and the std distributions don't).
// A cursor builds one epoch's shard order and one shard's batch order at a time, so memory is
// O(shards + batches per shard), never O(batches per epoch).
#pragma once
#include <cstdint>
#include <vector>

#include "rng.h"

namespace llmc {

// What the order depends on; fixed once the loader is initialized.
struct BatchOrder {
    std::vector<long long> shard_batches;  // batches in each shard, every one > 0
    long long total = 0;                   // their sum: batches per epoch, all ranks
    bool shuffle = false;
    uint64_t seed = 0;
    int rank = 0, world_size = 1;  // total >= world_size
};

// A place in the sequence: the next batch of this rank, and the built orders that locate it.
struct BatchCursor {
    long long epoch = 0;
    long long index = 0;  // of the batch in its epoch's sequence; index % world_size == rank
    int shard = 0;        // the batch: its shard and batch number in the shard
    long long batch = 0;
    // Built as the cursor reaches them:
    long long built_epoch = -1;
    std::vector<int> shard_order;       // the shards of built_epoch in visiting order ("slots")
    std::vector<long long> slot_start;  // index of each slot's first batch; back() = total
    int built_slot = -1;
    std::vector<long long> batch_order;  // batch numbers of built_slot's shard, in order
};

// Puts the cursor on this rank's first batch of `epoch`.
void cursor_start_epoch(const BatchOrder& order, BatchCursor* c, long long epoch);

// Moves the cursor to this rank's next batch, into the next epoch after its last.
void cursor_advance(const BatchOrder& order, BatchCursor* c);

// Puts the cursor on batch `batch` of shard `shard` in `epoch` (both must exist, epoch >= 0)
// whatever rank serves it; returns its index in the epoch's sequence (index % world_size is the
// rank that serves it).
long long cursor_find(const BatchOrder& order, BatchCursor* c, long long epoch, int shard,
                      long long batch);

}  // namespace llmc
