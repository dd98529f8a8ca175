// run_log.h: the machine-readable training log, DIR/log.jsonl (host code).
//
// One JSON object per line and per optimizer step, written and flushed when the step ends:
//   {"step": 51, "loss": 3.14159274, "val_loss": 3.2, "lr": 0.0003, "norm": 1.5, "ms": 32.1,
//    "period_ms": 32.9, "tok_s": 127000, "mfu": 0.221, "skipped": false}
// loss and val_loss are printed with 9 significant digits, enough to tell every fp32 value
// apart, so two runs can be compared bit for bit from their logs; val_loss only on the steps
// that validate; a non-finite value is written as null (JSON has no NaN). Steps that evaluate
// HellaSwag add "hellaswag_acc", "hellaswag_acc_sum", "hellaswag_correct", "hellaswag_correct_sum",
// "hellaswag_examples", "hellaswag_s" (llmc/hellaswag.h); steps that sample the GPU (--gpu-log)
// add "gpu_sm_mhz", "gpu_mem_mhz", "gpu_power_w", "gpu_temp_c", "gpu_mem_used_mib",
// "gpu_throttle" (llmc/gpu_monitor.h). skipped: the step's loss or gradient norm was not finite,
// so the optimizer left the weights alone. ms is the GPU step (CUDA events around its launch);
// period_ms the wall clock since the previous record, so the host's work between steps too
// (data, launch, the wait, printing, logging; and validation, samples and checkpoints where they
// ran).
// scripts/run/plot.py draws these files.
#pragma once
#include <cstdio>
#include <string>

namespace llmc {

struct StepRecord {
    long long step = 0;
    float loss = 0, lr = 0, norm = 0;
    bool has_val = false;
    float val_loss = 0;
    double ms = 0, period_ms = 0, tok_s = 0, mfu = 0;
    bool skipped = false;
    // More "key": value pairs for this step, already formatted and comma-separated (HellaSwag
    // scores, GPU telemetry); written before "skipped".
    std::string extra;
};

class RunLog {
  public:
    RunLog() = default;
    RunLog(const RunLog&) = delete;
    RunLog& operator=(const RunLog&) = delete;
    ~RunLog();

    // Opens path for a new run (an old file is replaced) when resume_step < 0; otherwise keeps
    // the lines of steps <= resume_step (a crashed run may have logged steps past its last
    // checkpoint, which the resumed run will redo) and appends after them.
    void open(const std::string& path, long long resume_step);
    void write(const StepRecord& r);  // one line, flushed
    // A text sample drawn at `step` (train_gpt2cu --sample-every), one line, flushed:
    //   {"step": 50, "sample": "text", "tokens": 64, "temperature": 1, "top_k": 0, "seed": 7}
    // Written before that step's record, so readers that keep the last line of a step (plot.py)
    // keep the step's numbers.
    void write_sample(long long step, const std::string& text, int tokens, float temperature,
                      int top_k, unsigned long long seed);
    bool is_open() const { return file_ != nullptr; }

  private:
    std::FILE* file_ = nullptr;
    std::string path_;
};

}  // namespace llmc
