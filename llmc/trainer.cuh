// trainer.cuh: the training loop and what runs between its steps. Each step fills the step's
// pinned token buffer from the data loader, launches the step (a CUDA graph after the first),
// waits for it at the step boundary, decides its verdict (run_state.h), prints its line and logs
// it to DIR/log.jsonl (and llm.c's main.log); validation, HellaSwag, samples and GPU telemetry
// run on the steps their options name, through the trainer's own EvalIO; checkpoints are written
// every --checkpoint-every steps, at the end, and when SIGINT/SIGTERM asks the run to stop (after
// the current step). Multi-GPU: every rank runs the loop and the collective parts (validation,
// HellaSwag, checkpoints); rank 0 alone prints, logs, samples and writes files.
#pragma once
#include <chrono>
#include <vector>

#include "checkpoint.h"
#include "gpt2_eval.cuh"
#include "gpu_monitor.h"
#include "llmc_log.h"
#include "run_log.h"
#include "run_state.h"
#include "schedule.h"
#include "train_config.h"
#include "train_setup.cuh"
#include "train_step.cuh"

namespace llmc {

struct Trainer {
    // Given by main (trainer_init).
    const TrainConfig* tc = nullptr;
    const Context* ctx = nullptr;
    GPT2* model = nullptr;
    AdamW* opt = nullptr;
    TrainStep* step = nullptr;
    MultiGpu* dist = nullptr;
    TrainData* data = nullptr;
    int rank = 0, world = 1;
    bool resumed = false;
    CheckpointMeta run_meta;  // the header fields that describe this run (describe_run)
    RunState run;
    // Made by trainer_init.
    ScheduleConfig schedule;
    RunPolicy policy;
    EvalIO eval_io;  // validation, HellaSwag and samples
    RunLog log;
    LlmcLog llmc_log;
    GpuMonitor gpu_monitor;
    double peak_tflops = 0.0, flops_per_step = 0.0;
    // Filled by the loop.
    int first_step = 1;
    std::vector<double> step_ms, data_ms, wall_ms, period_ms;
    std::vector<float> losses;
    std::chrono::steady_clock::time_point record_time, timed_since;
    bool checkpointed = false;  // the previous step wrote a checkpoint
    bool stopped = false, checkpoint_ok = true;
};

// Sets up a trainer over what main built: prints the device and the model, opens the run's
// files (DIR/config.json, DIR/log.jsonl, --llmc-log, --gpu-log) and installs the stop signals.
void trainer_init(Trainer* tr, const TrainConfig& tc, const Context& ctx, GPT2* model, AdamW* opt,
                  TrainStep* step, MultiGpu* dist, TrainData* data, const CheckpointMeta& run_meta,
                  const RunState& run, bool resumed);

// The loop, from the step after run.step to -x or a stop. Returns 0, or 1 when the run gives up
// (too many skipped steps in a row) or a checkpoint cannot be written.
int trainer_run(Trainer* tr);

// The summary lines, DIR/model.bin after a finished run, --json-summary, and how to continue a
// stopped run.
void trainer_finish(Trainer* tr);

}  // namespace llmc
