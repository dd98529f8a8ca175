// run_state.cpp: the training loop's per-step decisions (see run_state.h).
#include "run_state.h"

#include <cmath>

namespace llmc {

RunPolicy run_policy_of(const TrainConfig& cfg) {
    return RunPolicy{cfg.steps,         cfg.stop_after,    cfg.checkpoint_every,
                     cfg.max_bad_steps, cfg.skip_outliers, cfg.outlier_window};
}

float run_next_ceiling(const RunState& run, const RunPolicy& policy) {
    return outlier_max_norm_squared(run.outliers, policy.skip_outliers);
}

StepOutcome run_record_step(RunState* run, const RunPolicy& policy, long long step, float loss,
                            float norm_squared, float ceiling) {
    StepOutcome out;
    out.norm = std::sqrt(norm_squared);
    const bool bad = !std::isfinite(loss) || !std::isfinite(out.norm);
    const bool outlier = !bad && norm_squared > ceiling;
    out.verdict =
        bad ? StepVerdict::kNotFinite : (outlier ? StepVerdict::kOutlier : StepVerdict::kApplied);
    run->step = step;
    run->bad_streak = bad ? run->bad_streak + 1 : 0;
    run->bad_total += bad ? 1 : 0;
    run->outlier_streak = outlier ? run->outlier_streak + 1 : 0;
    run->outlier_total += outlier ? 1 : 0;
    const bool applied = out.verdict == StepVerdict::kApplied;
    run->adam_t += applied ? 1 : 0;
    if (applied) outlier_update(&run->outliers, out.norm, policy.outlier_window);
    const long long streak = bad ? run->bad_streak : run->outlier_streak;
    out.give_up = !applied && policy.max_bad_steps > 0 && streak >= policy.max_bad_steps;
    return out;
}

bool run_stops_after(const RunPolicy& policy, long long step, bool asked) {
    return asked || step == policy.stop_after;
}

bool run_checkpoint_due(const RunPolicy& policy, long long step, bool stopping) {
    return step == policy.steps || stopping ||
           (policy.checkpoint_every > 0 && step % policy.checkpoint_every == 0);
}

bool run_checkpointable(const RunState& run) { return run.bad_streak == 0; }

void run_state_to_meta(const RunState& run, CheckpointMeta* meta) {
    meta->step = run.step;
    meta->adam_t = run.adam_t;
    meta->bad_streak = run.bad_streak;
    meta->bad_total = run.bad_total;
    meta->outlier_mean = run.outliers.mean;
    meta->outlier_sq = run.outliers.sq;
    meta->outlier_count = run.outliers.count;
    meta->outlier_total = run.outlier_total;
}

RunState run_state_from_meta(const CheckpointMeta& meta) {
    const OutlierStats outliers{meta.outlier_mean, meta.outlier_sq, meta.outlier_count};
    return RunState{meta.step, meta.adam_t,        meta.bad_streak,     meta.bad_total,
                    outliers,  meta.outlier_total, /*outlier_streak=*/0};
}

}  // namespace llmc
