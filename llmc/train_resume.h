// train_resume.h: what a checkpoint records about the run that wrote it, and whether another run
// may continue it (host code). The options come from the trainer's option table
// (llmc/train_config.h): a resume must keep those it marks cli::Resume::kMustMatch and may
// change those it marks kMayChange (each change is reported); each is stored in the header slot
// the table names (llmc/checkpoint.h). Adding an option to a checkpoint is one mark in the table
// (and a slot in the header).
#pragma once
#include <string>
#include <vector>

#include "checkpoint.h"
#include "dataloader.h"
#include "train_config.h"

namespace llmc {

// The checkpoint header fields that describe this run (everything but the step's state): the
// model's shape, the build (precision name, bytes per device parameter), what the train glob
// matched, and the options the table marks.
CheckpointMeta describe_run(const TrainConfig& cfg, const GPT2Config& model,
                            const DataLoader& train, const char* precision, int param_bytes);

// Why a run described by `now` cannot continue the checkpoint `saved`, as one sentence ("" when
// it can): another precision or model shape, an option a resume must keep (train glob, seed,
// shuffle, batch shape), or other training data behind the same glob.
std::string resume_mismatch(const CheckpointMeta& saved, const CheckpointMeta& now);

// The options a resume may change that changed (total batch, schedule, lr, steps, AdamW
// constants): one line for each, since from there the run differs from an uninterrupted one.
std::vector<std::string> resume_changes(const CheckpointMeta& saved, const CheckpointMeta& now);

// Sets the options a checkpoint records to the values in `saved`; -b becomes the recorded
// global micro-batch divided by cfg->world_size (set it first).
void restore_resume_options(const CheckpointMeta& saved, TrainConfig* cfg);

}  // namespace llmc
