// run_state.h: what the training loop carries from step to step, and its decisions (host code):
// whether a step's update counted or was skipped (a non-finite loss or norm, or an outlier norm
// under --skip-outliers, llmc/outlier.h), whether the run gives up (too many skipped steps in a
// row, --max-bad-steps), whether it stops (--stop-after, or a signal), whether a checkpoint is
// due and may be written, and the state's round trip through a checkpoint's header.
#pragma once
#include "checkpoint.h"
#include "outlier.h"
#include "train_config.h"

namespace llmc {

// What the loop carries from step to step; a checkpoint saves all of it but outlier_streak
// (run_state_from_meta initializes it by position).
struct RunState {
    long long step = 0;        // optimizer steps done
    long long adam_t = 0;      // AdamW updates applied; a skipped step is not counted
    long long bad_streak = 0;  // non-finite steps in a row, ending at `step`
    long long bad_total = 0;
    OutlierStats outliers;         // --skip-outliers statistics of the applied steps
    long long outlier_total = 0;   // steps skipped as outliers
    long long outlier_streak = 0;  // ... in a row, ending at `step` (not saved)
};

// The options the decisions read (in this order: run_policy_of initializes it by position).
struct RunPolicy {
    long long steps = 0;             // -x: the last step
    long long stop_after = 0;        // --stop-after (0: none)
    long long checkpoint_every = 0;  // --checkpoint-every (0: at the end only)
    long long max_bad_steps = 0;     // --max-bad-steps (0: never give up)
    double skip_outliers = 0.0;      // --skip-outliers z (<= 0: off)
    int outlier_window = 100;        // --outlier-window
};
RunPolicy run_policy_of(const TrainConfig& cfg);

enum class StepVerdict {
    kApplied,    // the update was applied
    kNotFinite,  // the loss or the gradient norm was not finite: AdamW skipped the update
    kOutlier,    // the squared norm was above the ceiling the step ran with: skipped too
};

struct StepOutcome {
    StepVerdict verdict = StepVerdict::kApplied;
    float norm = 0.0f;     // sqrt of the squared norm, as logged
    bool give_up = false;  // this verdict came max_bad_steps times in a row: end the run now
};

// The ceiling the next step's squared gradient norm is compared with on the device
// (AdamWStepValues::max_norm_squared): +inf unless --skip-outliers has enough statistics.
float run_next_ceiling(const RunState& run, const RunPolicy& policy);

// Records step `step`, which ran with `ceiling` and left `loss` and `norm_squared` (as the
// device computed them): the step count, AdamW's t, the streaks and totals, and the outlier
// statistics of an applied step. A non-finite loss or norm is a skipped step (AdamW skipped it
// on the device, as it does a finite squared norm above the ceiling: the same float comparison).
StepOutcome run_record_step(RunState* run, const RunPolicy& policy, long long step, float loss,
                            float norm_squared, float ceiling);

// Whether the run stops after `step`: a stop was asked for (a signal), or --stop-after.
bool run_stops_after(const RunPolicy& policy, long long step, bool asked);

// Whether `step` ends with a checkpoint: the last step, a stop, or every checkpoint_every.
bool run_checkpoint_due(const RunPolicy& policy, long long step, bool stopping);

// Whether the state may be saved: not after a non-finite step (its weights are suspect; the
// newest good checkpoint stays the newest).
bool run_checkpointable(const RunState& run);

// The state into a checkpoint header (step, AdamW t, streaks, totals, outlier statistics),
// and back (outlier_streak restarts at 0).
void run_state_to_meta(const RunState& run, CheckpointMeta* meta);
RunState run_state_from_meta(const CheckpointMeta& meta);

}  // namespace llmc
