// schedule.cpp: the learning-rate schedules described in schedule.h.
#include "schedule.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace llmc {

bool parse_lr_schedule(const std::string& name, LrSchedule* kind) {
    if (name == "constant") {
        *kind = LrSchedule::kConstant;
    } else if (name == "linear") {
        *kind = LrSchedule::kLinear;
    } else if (name == "cosine") {
        *kind = LrSchedule::kCosine;
    } else if (name == "wsd") {
        *kind = LrSchedule::kWsd;
    } else {
        return false;
    }
    return true;
}

const char* lr_schedule_name(LrSchedule kind) {
    switch (kind) {
        case LrSchedule::kLinear:
            return "linear";
        case LrSchedule::kCosine:
            return "cosine";
        case LrSchedule::kWsd:
            return "wsd";
        case LrSchedule::kConstant:
            break;
    }
    return "constant";
}

namespace {
// Steps of the wsd decay: round(decay_frac * steps), at most the steps after the warmup.
int wsd_decay_steps(const ScheduleConfig& s) {
    const int d = (int)std::lround((double)s.decay_frac * s.steps);
    return std::max(0, std::min(d, s.steps - s.warmup));
}
}  // namespace

float lr_at_step(const ScheduleConfig& s, int step) {
    step = std::max(1, std::min(step, s.steps));
    // Computed in double and rounded once, so the values do not depend on the order of float ops.
    const double peak = s.peak_lr;
    if (s.warmup > 0 && step <= s.warmup) return (float)(peak * step / s.warmup);
    const double floor = peak * s.final_frac;
    const int decay_len = s.steps - s.warmup;
    if (decay_len <= 0) return (float)peak;
    const double p = (double)(step - s.warmup) / decay_len;
    switch (s.kind) {
        case LrSchedule::kLinear:
            return (float)(peak + (floor - peak) * p);
        case LrSchedule::kCosine:
            return (float)(floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * p)));
        case LrSchedule::kWsd: {
            const int d = wsd_decay_steps(s);
            const int start = s.steps - d;  // last step at the peak
            if (d == 0 || step <= start) return (float)peak;
            return (float)(peak + (floor - peak) * (double)(step - start) / d);
        }
        case LrSchedule::kConstant:
            break;
    }
    return (float)peak;
}

void print_schedule(const ScheduleConfig& s, FILE* out) {
    std::vector<int> points = {1, s.warmup, s.warmup + 1, (s.warmup + s.steps) / 2, s.steps};
    if (s.kind == LrSchedule::kWsd) points.push_back(s.steps - wsd_decay_steps(s));
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    std::fprintf(out, "lr schedule      %s, peak %g, warmup %d", lr_schedule_name(s.kind),
                 s.peak_lr, s.warmup);
    if (s.kind != LrSchedule::kConstant) std::fprintf(out, ", final %g x peak", s.final_frac);
    if (s.kind == LrSchedule::kWsd) std::fprintf(out, ", decay over the last %g", s.decay_frac);
    std::fprintf(out, ":");
    for (int p : points) {
        if (p >= 1 && p <= s.steps) std::fprintf(out, " step %d %.3e", p, lr_at_step(s, p));
    }
    std::fprintf(out, "\n");
}

}  // namespace llmc
