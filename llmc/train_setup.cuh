// train_setup.cuh: what the trainer (train_gpt2.cu) does before its loop, in the order main calls
// it: the ranks, the model's shape and weights, the data, a checkpoint to resume from (all of it
// checked before the GPU is touched, so a user's mistake shows on any machine as one sentence),
// then the device, the ranks' communicator, and the model, its optimizer and its step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "dataloader.h"
#include "dist_env.h"
#include "gpt2.cuh"
#include "hellaswag_eval.cuh"
#include "multi_gpu.cuh"
#include "optimizer.cuh"
#include "run_state.h"
#include "sampler.h"
#include "train_config.h"
#include "train_step.cuh"

namespace llmc {

// The launcher's ranks (dist_env.h); other ranks than 0 print only warnings and errors. Exits
// with one sentence when the launcher's variables do not make sense.
DistEnv discover_ranks();

// The model to train: its shape, and its weights (a preset's random ones come later, from
// make_preset_weights, once every cheap check has passed).
struct ModelSource {
    GPT2Config cfg;
    std::vector<float> params;
    bool preset = false;
};
// Reads -e's model file or takes its preset's shape, and checks that this build runs it at -b x
// -t and, under ZeRO-1, that its slices divide over the ranks. Exits with one sentence.
ModelSource load_model_source(const TrainConfig& tc, const DistEnv& env);

// Micro-steps per step: -d's tokens over the tokens all ranks take in one micro-step.
int grad_accum_of(const TrainConfig& tc);

// The data of a run: the train loader (shuffled per epoch from the seed, prefetching a step's
// micro-batches), the validation loader (name order, so every validation sees the same batches),
// the samples' decoder and the HellaSwag plan. With several ranks the loaders serve the global
// micro-batch (world_size * B rows) and each rank keeps its rows.
struct TrainData {
    DataLoader train, val;
    bool has_val = false;
    TokenTable decoder;
    bool has_decoder = false;  // else samples are printed as token ids
    HellaSwagEval hellaswag;
    bool has_hellaswag = false;
};
void open_train_data(const TrainConfig& tc, const GPT2Config& cfg, int grad_accum,
                     const DistEnv& env, TrainData* data);

// The state file to resume from, or "" for a new run. A new run refuses a directory that holds
// checkpoints already, so that a later --resume can never mix two runs.
std::string find_resume_state(const TrainConfig& tc);

// A checkpoint to continue: its header and optimizer arrays.
struct ResumePoint {
    CheckpointMeta saved;
    OptimizerState opt;
};
// Reads the checkpoint at state_path after checking that the run described by `now` (shape,
// batch, data, seed, precision) can continue it; prints what changed; its weights replace
// source->params. Exits 1 with a sentence on a mismatch.
void load_resume_point(const std::string& state_path, const CheckpointMeta& now,
                       const TrainConfig& tc, ModelSource* source, ResumePoint* point);

// The CUDA device of this rank: its local rank with several processes, else --device.
int pick_device(const DistEnv& env, const TrainConfig& tc);
// What every rank must agree on: the command line, the build and the world size.
uint64_t config_fingerprint(int argc, char** argv, int world_size);
// With several ranks: connects them (NCCL) on ctx's device and returns `state`; null on one.
MultiGpu* start_multi_gpu(const DistEnv& env, const TrainConfig& tc, const Context& ctx,
                          const GPT2Config& cfg, uint64_t fingerprint, MultiGpu* state);

// The options, the schedule, the data and, for a preset that is not resumed, its random weights
// (made now), printed in that order.
void print_run_start(const TrainConfig& tc, const TrainData& data, bool resumed,
                     ModelSource* source);

// The memory plan (printed, and refused with a sentence when it does not fit), then the model,
// its AdamW (sharded under ZeRO-1) and its step; a resume's state restored into them (its
// optimizer arrays released after) and its loader position into data->train.
void build_training(const Context& ctx, const TrainConfig& tc, const ModelSource& source,
                    int grad_accum, MultiGpu* dist, ResumePoint* resume, TrainData* data,
                    GPT2* model, AdamW* opt, TrainStep* step);

}  // namespace llmc
