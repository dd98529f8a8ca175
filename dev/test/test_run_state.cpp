// test_run_state.cpp: the training loop's decisions (llmc/run_state.h) on the host: each step's
// verdict (applied, not finite, outlier) and what it does to the step count, AdamW's t, the
// streaks, the totals and the outlier statistics; giving up after --max-bad-steps skipped steps
// in a row (of either kind); stopping (a signal, --stop-after); when a checkpoint is due and
// whether the state may be saved; and the state's round trip through a checkpoint header.
// Ends with "test_run_state: N passed, M failed"; exits 1 on any failure.
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "host_test.h"
#include "run_state.h"

using namespace llmc;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// -x 100, no --stop-after, checkpoints at the end only, --outlier-window 10.
RunPolicy policy(long long max_bad, double z) { return RunPolicy{100, 0, 0, max_bad, z, 10}; }

// The options from a command line, through the trainer's parser (-o: --checkpoint-every needs
// one; nothing is written).
void test_policy_of() {
    std::istringstream line(
        "train_gpt2cu -i x -o /nonexistent/run -x 77 --stop-after 40 --checkpoint-every 25 "
        "--max-bad-steps 3 --skip-outliers 2.5 --outlier-window 50");
    std::vector<std::string> words{std::istream_iterator<std::string>(line), {}};
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(&w[0]);
    TrainConfig tc;
    parse_train_args((int)argv.size(), argv.data(), &tc);
    const RunPolicy p = run_policy_of(tc);
    check(p.steps == 77 && p.stop_after == 40 && p.checkpoint_every == 25 && p.max_bad_steps == 3 &&
              p.skip_outliers == 2.5 && p.outlier_window == 50,
          "run_policy_of takes -x, --stop-after, --checkpoint-every, --max-bad-steps, "
          "--skip-outliers, --outlier-window");
}

void test_applied_and_not_finite() {
    const RunPolicy p = policy(3, 0.0);
    RunState run;
    StepOutcome o = run_record_step(&run, p, 1, 4.5f, 2.25f, kInf);
    check(o.verdict == StepVerdict::kApplied && o.norm == 1.5f && !o.give_up,
          "a finite step is applied, its norm the square root of the squared norm (%g)", o.norm);
    check(run.step == 1 && run.adam_t == 1 && run.bad_streak == 0 && run.outliers.count == 1 &&
              run.outliers.mean == 1.5,
          "an applied step counts: step 1, t 1, outlier statistics of one norm");
    const RunState before = run;
    for (float loss : {kNaN, kInf}) {
        RunState r = before;
        o = run_record_step(&r, p, 2, loss, 1.0f, kInf);
        check(o.verdict == StepVerdict::kNotFinite && r.adam_t == 1 && r.bad_streak == 1 &&
                  r.bad_total == 1 && r.outliers.count == 1 && r.step == 2,
              "a loss of %g: skipped, t stays 1, streak 1, statistics untouched", loss);
    }
    for (float sq : {kNaN, kInf}) {
        RunState r = before;
        o = run_record_step(&r, policy(3, 3.0), 2, 3.0f, sq, 1.0f);
        check(o.verdict == StepVerdict::kNotFinite && r.outlier_total == 0,
              "a squared norm of %g is not finite, never an outlier", sq);
    }
    // Three in a row give up at the third; a good step between resets the streak.
    RunState r = before;
    run_record_step(&r, p, 2, kNaN, 1.0f, kInf);
    o = run_record_step(&r, p, 3, kNaN, 1.0f, kInf);
    check(!o.give_up && r.bad_streak == 2, "two non-finite steps in a row: go on (streak 2)");
    run_record_step(&r, p, 4, 3.0f, 1.0f, kInf);
    check(r.bad_streak == 0 && r.bad_total == 2 && r.adam_t == 2,
          "an applied step resets the streak, keeps the total 2, t 2");
    run_record_step(&r, p, 5, kNaN, 1.0f, kInf);
    run_record_step(&r, p, 6, kNaN, 1.0f, kInf);
    o = run_record_step(&r, p, 7, kNaN, 1.0f, kInf);
    check(o.give_up && r.bad_streak == 3 && r.bad_total == 5,
          "the third non-finite step in a row gives up (--max-bad-steps 3)");
    RunState never = before;
    bool gave_up = false;
    for (int s = 2; s < 50; s++)
        gave_up = gave_up || run_record_step(&never, policy(0, 0.0), s, kNaN, 1.0f, kInf).give_up;
    check(!gave_up && never.bad_streak == 48, "--max-bad-steps 0 never gives up");
}

void test_outliers() {
    const RunPolicy p = policy(2, 3.0);
    RunState run;
    check(run_next_ceiling(run, p) == kInf, "no ceiling before any step");
    OutlierStats expect;
    for (int s = 1; s <= 19; s++) {
        const float norm = s % 2 ? 1.2f : 1.0f;
        run_record_step(&run, p, s, 3.0f, norm * norm, run_next_ceiling(run, p));
        outlier_update(&expect, std::sqrt(norm * norm), p.outlier_window);
    }
    check(run_next_ceiling(run, p) == kInf, "no ceiling after 19 applied steps (%lld needed)",
          kOutlierMinSteps);
    run_record_step(&run, p, 20, 3.0f, 1.0f, run_next_ceiling(run, p));
    outlier_update(&expect, 1.0, p.outlier_window);
    check(run.outliers.mean == expect.mean && run.outliers.sq == expect.sq &&
              run.outliers.count == 20,
          "the statistics are outlier_update's over the applied norms, bit for bit");
    const float ceiling = run_next_ceiling(run, p);
    check(std::isfinite(ceiling) && ceiling == outlier_max_norm_squared(run.outliers, 3.0),
          "after 20 steps the ceiling is finite: %g", ceiling);
    check(run_next_ceiling(run, policy(2, 0.0)) == kInf, "--skip-outliers 0: no ceiling");
    RunState r = run;
    StepOutcome o = run_record_step(&r, p, 21, 3.0f, ceiling, ceiling);
    check(o.verdict == StepVerdict::kApplied, "a squared norm equal to the ceiling is applied");
    r = run;
    o = run_record_step(&r, p, 21, 3.0f, 4.0f * ceiling, ceiling);
    check(o.verdict == StepVerdict::kOutlier && !o.give_up && r.adam_t == run.adam_t &&
              r.outliers.count == 20 && r.outlier_streak == 1 && r.outlier_total == 1 &&
              r.bad_streak == 0,
          "above the ceiling: an outlier, skipped, t and statistics untouched, streak 1");
    o = run_record_step(&r, p, 22, kNaN, 1.0f, ceiling);
    check(o.verdict == StepVerdict::kNotFinite && r.outlier_streak == 0 && r.bad_streak == 1 &&
              !o.give_up,
          "a non-finite step ends the outlier streak and starts its own");
    run_record_step(&r, p, 23, 3.0f, 4.0f * ceiling, ceiling);
    o = run_record_step(&r, p, 24, 3.0f, 4.0f * ceiling, ceiling);
    check(o.verdict == StepVerdict::kOutlier && o.give_up && r.outlier_streak == 2 &&
              r.outlier_total == 3,
          "the second outlier in a row gives up (--max-bad-steps 2)");
}

void test_stop_and_checkpoints() {
    RunPolicy p = policy(3, 0.0);
    p.steps = 100;
    p.stop_after = 0;
    check(!run_stops_after(p, 50, false) && run_stops_after(p, 50, true),
          "without --stop-after the run stops only when asked");
    p.stop_after = 60;
    check(run_stops_after(p, 60, false) && !run_stops_after(p, 59, false),
          "--stop-after 60 stops after step 60");
    p.checkpoint_every = 0;
    check(!run_checkpoint_due(p, 50, false) && run_checkpoint_due(p, 100, false) &&
              run_checkpoint_due(p, 37, true),
          "--checkpoint-every 0: at the last step and at a stop only");
    p.checkpoint_every = 25;
    check(run_checkpoint_due(p, 25, false) && run_checkpoint_due(p, 75, false) &&
              !run_checkpoint_due(p, 30, false),
          "--checkpoint-every 25: every 25th step");
    RunState run;
    check(run_checkpointable(run), "a fresh state may be saved");
    run_record_step(&run, p, 1, kNaN, 1.0f, kInf);
    check(!run_checkpointable(run), "not after a non-finite step");
    run_record_step(&run, p, 2, 3.0f, 1.0f, kInf);
    check(run_checkpointable(run), "again after an applied one");
}

void test_meta_round_trip() {
    const RunPolicy p = policy(0, 3.0);
    RunState run;
    for (int s = 1; s <= 30; s++)
        run_record_step(&run, p, s, s % 7 ? 3.0f : kNaN, 1.0f + 0.01f * s, kInf);
    run.outlier_total = 4;
    run.outlier_streak = 2;
    CheckpointMeta meta;
    meta.num_params = 1234;
    meta.loader.epoch = 3;
    run_state_to_meta(run, &meta);
    check(meta.step == 30 && meta.adam_t == run.adam_t && meta.bad_total == 4 &&
              meta.outlier_count == run.outliers.count && meta.outlier_mean == run.outliers.mean &&
              meta.outlier_sq == run.outliers.sq && meta.outlier_total == 4,
          "into the header: step 30, t %lld, 4 non-finite, the outlier statistics", run.adam_t);
    check(meta.num_params == 1234 && meta.loader.epoch == 3,
          "the header's other fields are left alone");
    const RunState back = run_state_from_meta(meta);
    check(back.step == run.step && back.adam_t == run.adam_t && back.bad_streak == run.bad_streak &&
              back.bad_total == run.bad_total && back.outliers.mean == run.outliers.mean &&
              back.outliers.sq == run.outliers.sq && back.outliers.count == run.outliers.count &&
              back.outlier_total == run.outlier_total && back.outlier_streak == 0,
          "and back: every saved field equal, the outlier streak restarting at 0");
}

}  // namespace

int main() {
    test_policy_of();
    test_applied_and_not_finite();
    test_outliers();
    test_stop_and_checkpoints();
    test_meta_round_trip();
    return host_test_summary("test_run_state");
}
