// schedule.h: the learning-rate schedule, a pure function of the step (host code, no state), so a
// resumed run gets exactly the learning rates of an uninterrupted one.
//
// Steps count from 1 to `steps`. Every schedule first warms up linearly over `warmup` steps:
//   lr(s) = peak * s / warmup                       for s <= warmup
// then, with p = (s - warmup) / (steps - warmup) in (0, 1] and floor = peak * final_frac:
//   constant  lr = peak
//   linear    lr = peak + (floor - peak) * p
//   cosine    lr = floor + (peak - floor) * (1 + cos(pi * p)) / 2
//   wsd       warmup, stable at peak, then a linear decay to floor over the last
//             D = round(decay_frac * steps) steps (at most steps - warmup):
//             lr = peak for s <= steps - D, else peak + (floor - peak) * (s - (steps - D)) / D
// so the last step (s = steps) runs at floor for linear, cosine and wsd. When warmup >= steps
// there is no decay phase: the schedule is the warmup ramp alone.
#pragma once
#include <cstdio>
#include <string>

namespace llmc {

enum class LrSchedule { kConstant, kLinear, kCosine, kWsd };

struct ScheduleConfig {
    LrSchedule kind = LrSchedule::kConstant;
    float peak_lr = 3e-4f;    // lr at the end of the warmup
    int warmup = 0;           // linear warmup steps
    int steps = 1;            // total optimizer steps of the run (the schedule's length)
    float final_frac = 0.0f;  // floor = peak_lr * final_frac (linear, cosine, wsd)
    float decay_frac = 0.2f;  // wsd: fraction of `steps` spent decaying at the end
};

// "constant" | "linear" | "cosine" | "wsd" -> kind; false for anything else.
bool parse_lr_schedule(const std::string& name, LrSchedule* kind);
const char* lr_schedule_name(LrSchedule kind);

// The learning rate of 1-based step `step` (steps past the end keep the last value).
float lr_at_step(const ScheduleConfig& s, int step);

// One line naming the schedule and a few sample points (first step, end of warmup, the start of
// the decay, the middle, the last step), for the start of a run.
void print_schedule(const ScheduleConfig& s, FILE* out);

}  // namespace llmc
