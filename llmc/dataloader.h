// dataloader.h: reads token shards (the llm.c format) and serves (inputs, targets) batches.
// Host-only C++: no CUDA calls and no pinned memory. The caller owns the output buffers (in the
// trainer they are pinned host memory it copies to the GPU itself).
//
// Shard file: 256 x int32 little-endian header
//   [0] magic 20240520  [1] version 1  [2] n (token count)
// then n uint16 token ids, and nothing after them.
//
// Batches: the batch at token offset o of a shard reads tokens[o .. o + B*T] (B*T + 1 tokens);
// inputs are the first B*T of them and targets the last B*T (inputs shifted by one). Offsets
// are multiples of B*T, so a shard of n tokens holds (n - 1) / (B*T) batches and its tail is
// never read.
//
// Epoch order: every batch of every shard once. Unshuffled (the default), shards in name order
// and each shard's batches by offset. Shuffled, epoch e visits the shards in a permutation drawn
// from (seed, e) and each shard's batches in a permutation drawn from (seed, e, shard): only one
// shard is in memory at a time, so batches are mixed within a shard, not across shards. The
// permutations come from our own splitmix64 + Fisher-Yates, so a seed gives the same order on
// every machine and compiler. After the last batch of epoch e comes the first of epoch e + 1.
//
// Processes: with world_size W, batch b of the epoch's order (b = 0, 1, ...) goes to rank b % W,
// so W loaders with the same files and options serve every batch exactly once per epoch between
// them. Ranks get (total - rank + W - 1) / W batches each: they differ by one when W does not
// divide the total, in which case the ranks' epoch boundaries fall on different calls.
//
// Prefetch: with prefetch = K > 0 a background thread fills a ring of K batches ahead, so reading
// and shuffling overlap the caller's work; dataloader_next_batch copies the oldest ready batch
// out. The batches, positions and errors are exactly those of the synchronous loader (K = 0).
// A seek or reset that moves the loader restarts the thread from the new place; a new init and
// the destructor stop and join it. Memory: K slots of 2*B*T ints, plus one shard's tokens.
//
// Every shard's header and size are checked at init, so a bad file is refused before training
// starts; token ids are checked against vocab_size when a shard is loaded (the first shard at
// init). Any problem exits with one sentence naming the file (LLMC_FAIL); a problem found by the
// prefetch thread is reported the same way by the main thread, when it asks for that batch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmc {

constexpr int kShardMagic = 20240520;
constexpr int kShardVersion = 1;
constexpr int kShardHeaderInts = 256;

// The next batch: the epoch it belongs to, and its shard index (in name order) and token offset.
// dataloader_position always names a batch this loader serves next, so it can be saved in a
// checkpoint and handed to dataloader_seek of a loader built with the same files and options.
struct DataLoaderPosition {
    long long epoch = 0;
    int shard = 0;
    long long offset = 0;
};

struct DataLoaderOptions {
    bool shuffle = false;  // permute shards and batches per epoch (see above); off: name order
    uint64_t seed = 0;     // seed of the permutations (ignored without shuffle)
    int prefetch = 0;      // batches a background thread fills ahead; 0 = synchronous
};

struct DataLoaderState;  // cursor, loaded shard and prefetch thread (dataloader.cpp)

// Fields are set by dataloader_init; read them, don't write. Not copyable or movable: the
// prefetch thread refers to the loader.
struct DataLoader {
    int B = 0, T = 0;
    int vocab_size = 0;
    int rank = 0, world_size = 1;  // this process and the number sharing each epoch
    DataLoaderOptions options;
    std::string pattern;                  // the glob the shards came from, for messages
    std::vector<std::string> files;       // shard paths, sorted by name
    std::vector<long long> shard_tokens;  // token count of each shard, from its checked header
    std::unique_ptr<DataLoaderState> state;

    DataLoader();
    ~DataLoader();  // stops and joins the prefetch thread
    DataLoader(const DataLoader&) = delete;
    DataLoader& operator=(const DataLoader&) = delete;
};

// pattern: a glob such as "data/brown/*_train_*.bin"; it may match many files, which are
// sorted by name. B, T: batch shape. vocab_size: every token id must be below it. rank of
// world_size: which share of each epoch this process serves (0 <= rank < world_size); refused
// when an epoch has fewer batches than world_size. Loads the shard of this rank's first batch of
// epoch 0, positions the loader there and, with options.prefetch > 0, starts the thread.
// Calling it again on a used loader stops its thread and starts over.
void dataloader_init(DataLoader* dl, const std::string& pattern, int B, int T, int vocab_size,
                     int rank = 0, int world_size = 1,
                     const DataLoaderOptions& options = DataLoaderOptions{});

// Writes the next batch into inputs[B*T] and targets[B*T] and advances by one batch.
void dataloader_next_batch(DataLoader* dl, int* inputs, int* targets);

// Back to this rank's first batch of epoch 0, so an unshuffled loader (validation) serves the
// same batches after every reset. Costs nothing when the loader is there already.
void dataloader_reset(DataLoader* dl);

// Batches this rank serves in one epoch (the whole epoch when world_size is 1).
size_t dataloader_num_batches(const DataLoader& dl);

DataLoaderPosition dataloader_position(const DataLoader& dl);

// Makes `pos` the next batch: the batches that follow are exactly those an uninterrupted loader
// would serve after reaching `pos`. Refuses a negative epoch, a shard index out of range, an
// offset that is not the start of a batch of this B*T (a checkpoint resumed with another batch
// shape), and a batch that another rank serves in that epoch (another world size or seed).
void dataloader_seek(DataLoader* dl, DataLoaderPosition pos);

// Writes n tokens as a shard at `path` (for tests and data tools); exits with a sentence on error.
void write_shard(const std::string& path, const uint16_t* tokens, size_t n);

}  // namespace llmc
