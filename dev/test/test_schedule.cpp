// test_schedule.cpp: host test of llmc/schedule: every schedule's learning rate at its
// boundaries (first step, end of warmup, first decay step, middle, last step, past the end),
// against values worked out by hand from the formulas in schedule.h, plus the shape between
// (monotone decay) and the degenerate settings (no warmup, warmup >= steps, wsd with no decay
// or all-decay).
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <limits>
#include <string>

#include "host_test.h"
#include "outlier.h"
#include "schedule.h"

namespace {

// lr_at_step computes in double and rounds once to float, so it must equal the double formula
// rounded to float; 1e-6 relative leaves room for libm's cos differing in the last double bit.
void expect_lr(const llmc::ScheduleConfig& s, int step, double want, const char* what) {
    const float got = llmc::lr_at_step(s, step);
    const bool ok = std::fabs((double)got - want) <= 1e-6 * std::fabs(want) + 1e-30;
    check(ok, "%s %s step %d: lr %.9g (want %.9g)", llmc::lr_schedule_name(s.kind), what, step, got,
          want);
}

llmc::ScheduleConfig make(llmc::LrSchedule kind, int warmup, int steps, float final_frac = 0.1f,
                          float decay_frac = 0.2f) {
    llmc::ScheduleConfig s;
    s.kind = kind;
    s.peak_lr = 1e-3f;
    s.warmup = warmup;
    s.steps = steps;
    s.final_frac = final_frac;
    s.decay_frac = decay_frac;
    return s;
}

void test_names() {
    const char* names[] = {"constant", "linear", "cosine", "wsd"};
    for (const char* n : names) {
        llmc::LrSchedule k;
        const bool parsed = llmc::parse_lr_schedule(n, &k);
        check(parsed && std::string(llmc::lr_schedule_name(k)) == n, "schedule name %s round trips",
              n);
    }
    llmc::LrSchedule k;
    check(!llmc::parse_lr_schedule("Cosine", &k) && !llmc::parse_lr_schedule("", &k) &&
              !llmc::parse_lr_schedule("exp", &k),
          "unknown schedule names are rejected");
}

// Warmup is the same ramp for every schedule: peak * step / warmup.
void test_warmup() {
    for (llmc::LrSchedule k : {llmc::LrSchedule::kConstant, llmc::LrSchedule::kLinear,
                               llmc::LrSchedule::kCosine, llmc::LrSchedule::kWsd}) {
        const llmc::ScheduleConfig s = make(k, 10, 100);
        const double peak = (double)s.peak_lr;
        expect_lr(s, 1, peak / 10, "warmup start");
        expect_lr(s, 5, peak / 2, "warmup middle");
        expect_lr(s, 10, peak, "warmup end");
    }
}

void test_constant() {
    const llmc::ScheduleConfig s = make(llmc::LrSchedule::kConstant, 10, 100);
    const double peak = (double)s.peak_lr;
    expect_lr(s, 11, peak, "after warmup");
    expect_lr(s, 100, peak, "last step");
    expect_lr(s, 1000, peak, "past the end");
    expect_lr(make(llmc::LrSchedule::kConstant, 0, 7), 1, peak, "no warmup, first step");
}

void test_linear() {
    const llmc::ScheduleConfig s = make(llmc::LrSchedule::kLinear, 10, 100);
    const double peak = (double)s.peak_lr, floor = peak * (double)s.final_frac;
    // p = (step - 10) / 90
    expect_lr(s, 11, peak + (floor - peak) / 90, "first decay step");
    expect_lr(s, 55, (peak + floor) / 2, "middle");
    expect_lr(s, 100, floor, "last step");
    expect_lr(s, 101, floor, "past the end");
    const llmc::ScheduleConfig z = make(llmc::LrSchedule::kLinear, 0, 4, 0.0f);
    expect_lr(z, 1, peak * 0.75, "no warmup, to 0, step 1 of 4");
    expect_lr(z, 4, 0.0, "no warmup, to 0, last step");
}

void test_cosine() {
    const llmc::ScheduleConfig s = make(llmc::LrSchedule::kCosine, 10, 100);
    const double peak = (double)s.peak_lr, floor = peak * (double)s.final_frac;
    expect_lr(s, 11, floor + (peak - floor) * 0.5 * (1 + std::cos(M_PI / 90)), "first decay step");
    expect_lr(s, 55, (peak + floor) / 2, "middle");
    expect_lr(s, 40, floor + (peak - floor) * 0.5 * (1 + std::cos(M_PI / 3)), "a third in");
    expect_lr(s, 100, floor, "last step");
    bool monotone = true;
    for (int i = 11; i <= 100; i++)
        monotone = monotone && llmc::lr_at_step(s, i) <= llmc::lr_at_step(s, i - 1);
    check(monotone, "cosine never rises after the warmup");
    const llmc::ScheduleConfig z = make(llmc::LrSchedule::kCosine, 0, 2, 0.0f);
    expect_lr(z, 1, peak * 0.5, "no warmup, to 0, step 1 of 2");
    expect_lr(z, 2, 0.0, "no warmup, to 0, last step");
}

void test_wsd() {
    // 100 steps, decay_frac 0.2: steady at the peak through step 80, then 20 linear steps.
    const llmc::ScheduleConfig s = make(llmc::LrSchedule::kWsd, 10, 100, 0.1f, 0.2f);
    const double peak = (double)s.peak_lr, floor = peak * (double)s.final_frac;
    expect_lr(s, 11, peak, "stable start");
    expect_lr(s, 80, peak, "last stable step");
    expect_lr(s, 81, peak + (floor - peak) / 20, "first decay step");
    expect_lr(s, 90, (peak + floor) / 2, "decay middle");
    expect_lr(s, 100, floor, "last step");
    // 0.25 * 10 = 2.5 rounds to 3 decay steps (lround rounds halves away from zero).
    const llmc::ScheduleConfig r = make(llmc::LrSchedule::kWsd, 0, 10, 0.0f, 0.25f);
    expect_lr(r, 7, peak, "rounded decay, last stable step");
    expect_lr(r, 8, peak * 2 / 3, "rounded decay, first decay step");
    // No decay phase: wsd is constant.
    const llmc::ScheduleConfig n = make(llmc::LrSchedule::kWsd, 10, 100, 0.1f, 0.0f);
    expect_lr(n, 100, peak, "decay_frac 0, last step");
    // All-decay: the decay is clipped to the steps after the warmup, which is the linear
    // schedule exactly.
    const llmc::ScheduleConfig all = make(llmc::LrSchedule::kWsd, 10, 100, 0.1f, 1.0f);
    const llmc::ScheduleConfig lin = make(llmc::LrSchedule::kLinear, 10, 100, 0.1f);
    bool same = true;
    for (int i = 1; i <= 100; i++)
        same = same && llmc::lr_at_step(all, i) == llmc::lr_at_step(lin, i);
    check(same, "wsd with decay_frac 1 equals linear at every step");
}

void test_warmup_covers_run() {
    // warmup >= steps: the run is all ramp and never reaches the peak or a decay.
    for (llmc::LrSchedule k :
         {llmc::LrSchedule::kLinear, llmc::LrSchedule::kCosine, llmc::LrSchedule::kWsd}) {
        const llmc::ScheduleConfig s = make(k, 10, 5);
        expect_lr(s, 5, (double)s.peak_lr / 2, "warmup longer than the run, last step");
        const llmc::ScheduleConfig e = make(k, 5, 5);
        expect_lr(e, 5, (double)e.peak_lr, "warmup == steps, last step");
    }
}

}  // namespace

// --skip-outliers (llmc/outlier.h): no ceiling while off or warming up; after steady norms a
// spike is above the ceiling and an ordinary norm below it; the averages follow their formula.
void test_outliers() {
    const float inf = std::numeric_limits<float>::infinity();
    llmc::OutlierStats s;
    check(llmc::outlier_max_norm_squared(s, 3.0) == inf, "outliers: no ceiling before any step");
    // Norms alternating 1.0 and 1.2: mean 1.1, standard deviation 0.1 in the long run.
    for (int i = 0; i < 19; i++) llmc::outlier_update(&s, i % 2 ? 1.2 : 1.0, 10);
    check(llmc::outlier_max_norm_squared(s, 3.0) == inf, "outliers: no ceiling after 19 steps");
    for (int i = 19; i < 400; i++) llmc::outlier_update(&s, i % 2 ? 1.2 : 1.0, 10);
    const float c = llmc::outlier_max_norm_squared(s, 3.0);
    check(c > 1.2f * 1.2f && c < 2.0f * 2.0f, "outliers: ceiling^2 %.4f between 1.2^2 and 2^2", c);
    check(std::sqrt(c) > 1.3 && std::sqrt(c) < 1.5,
          "outliers: ceiling %.4f near mean + 3 std = 1.4 (EMA of a two-valued sequence)",
          std::sqrt(c));
    check(25.0f > c && !(1.2f * 1.2f > c), "outliers: a norm of 5 is above, 1.2 is not");
    check(llmc::outlier_max_norm_squared(s, 0.0) == inf, "outliers: z = 0 turns it off");
    // The averages: the first value sets both, then x += (value - x) / W.
    llmc::OutlierStats t;
    llmc::outlier_update(&t, 2.0, 4);
    llmc::outlier_update(&t, 4.0, 4);
    check(t.count == 2 && t.mean == 2.5 && t.sq == 4.0 + (16.0 - 4.0) / 4,
          "outliers: EMA mean %.6g sq %.6g after 2 and 4 (W = 4)", t.mean, t.sq);
}

int main() {
    test_names();
    test_outliers();
    test_warmup();
    test_constant();
    test_linear();
    test_cosine();
    test_wsd();
    test_warmup_covers_run();
    llmc::print_schedule(make(llmc::LrSchedule::kWsd, 10, 100), stdout);
    std::printf("test_schedule: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
