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
// advance by B*T, so a shard of n tokens gives (n - 1) / (B*T) batches and its tail is skipped.
// Shards are visited in name order; after the last one the loader wraps to the first (an epoch).
//
// Every shard's header and size are checked at init, so a bad file is refused before training
// starts; token ids are checked against vocab_size when a shard is loaded. Only one shard's tokens
// are in memory at a time. Any problem exits with one sentence naming the file (LLMC_FAIL).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

constexpr int kShardMagic = 20240520;
constexpr int kShardVersion = 1;
constexpr int kShardHeaderInts = 256;

// Where the next batch starts: shard index (in name order) and token offset inside that shard.
// dataloader_position always returns the start of a batch that exists, so it can be saved in a
// checkpoint and handed back to dataloader_seek.
struct DataLoaderPosition {
    int shard = 0;
    long long offset = 0;
};

// Fields are set by dataloader_init and advanced by the functions below; read them, don't write.
struct DataLoader {
    int B = 0, T = 0;
    int vocab_size = 0;
    std::string pattern;                  // the glob the shards came from, for messages
    std::vector<std::string> files;       // shard paths, sorted by name
    std::vector<long long> shard_tokens;  // token count of each shard, from its checked header
    DataLoaderPosition next;              // start of the next batch
    int loaded_shard = -1;                // which shard `tokens` holds (-1: none)
    std::vector<uint16_t> tokens;         // the loaded shard's token ids
};

// pattern: a glob such as "data/tinyshakespeare/*_train.bin"; it may match many files, which are
// read in name order. B, T: batch shape. vocab_size: every token id must be below it.
// Loads the first shard and positions the loader at its first batch.
void dataloader_init(DataLoader* dl, const std::string& pattern, int B, int T, int vocab_size);

// Writes the next batch into inputs[B*T] and targets[B*T] and advances by one batch.
void dataloader_next_batch(DataLoader* dl, int* inputs, int* targets);

// Back to the first batch of the first shard.
void dataloader_reset(DataLoader* dl);

// Batches in one epoch, over all shards.
size_t dataloader_num_batches(const DataLoader& dl);

DataLoaderPosition dataloader_position(const DataLoader& dl);

// Makes `pos` the next batch. Refuses a shard index out of range or an offset that is not the
// start of a batch of this B*T (a checkpoint resumed with another batch shape).
void dataloader_seek(DataLoader* dl, DataLoaderPosition pos);

// Writes n tokens as a shard at `path` (for tests and data tools); exits with a sentence on error.
void write_shard(const std::string& path, const uint16_t* tokens, size_t n);

}  // namespace llmc
