// optimizer.cuh: the owner of AdamW's state for one model: the hyper-parameters, the moments m
// and v and, in the bf16 build, the fp32 master weights (one allocation), and which parameters it
// updates: all of them, or under ZeRO-1 (multi_gpu.cuh) only this rank's shard (llmc::ShardMap),
// when m, v and master hold the shard's elements alone, in its local numbering. The arithmetic is
// adamw.cuh's and global_norm.cuh's; the step (train_step.cuh) reduces over the ranks.
#pragma once
#include <vector>

#include "adamw.cuh"
#include "context.cuh"
#include "model_file.h"
#include "precision.cuh"
#include "shard_map.h"

namespace llmc {

struct AdamW {
    AdamWHyper hyper{};
    AdamWTensors tensors{};  // the model's tensors and which of them decay (whole updates)
    bool sharded = false;    // ZeRO-1: the state covers `shard` only
    ShardMap shard;
    size_t elems = 0;        // elements of each of m, v, master: the model's, or the shard's
    float* state = nullptr;  // one allocation: m, v, master
    float *m = nullptr, *v = nullptr;
    float* master = nullptr;  // fp32 copy of the parameters (bf16 build), else null

    AdamW() = default;
    AdamW(const AdamW&) = delete;
    AdamW& operator=(const AdamW&) = delete;
    ~AdamW();
};

// Device bytes of the state of a model of num_params parameters divided over `shards` ranks.
size_t optimizer_state_bytes(size_t num_params, int shards);

// Allocates the state of a model of `layout` with zero moments; in the bf16 build the master
// weights are `host_params` (fp32, model-file layout), exactly. With `shard` (ZeRO-1) only that
// shard's elements. Synchronous.
void optimizer_create(const Context& ctx, AdamW* opt, const ParamLayout& layout,
                      const std::vector<float>& host_params, const AdamWHyper& hyper,
                      const ShardMap* shard = nullptr);

// *out = the squared norm of the gradients the state covers (overwrites): all of them, or the
// shard's chunks, whose sums over the ranks give the global one. scratch:
// global_norm_scratch_bytes.
void optimizer_grad_norm_squared(const Context& ctx, const AdamW& opt, float* out, void* scratch,
                                 const floatX* grads);

// One AdamW update of the parameters the state covers (adamw.cuh: lr and t from step_values,
// clipping by *norm_squared, skipped when it is not finite or above the outlier ceiling).
void optimizer_update(const Context& ctx, AdamW* opt, floatX* params, const floatX* grads,
                      const AdamWStepValues* step_values, const float* norm_squared);

// Replaces m and v with those of whole-model host arrays (num_params floats each; a sharded
// state keeps its own chunks), as a checkpoint restores them. Synchronous.
void optimizer_load_moments(const Context& ctx, AdamW* opt, const float* host_m,
                            const float* host_v);

}  // namespace llmc
