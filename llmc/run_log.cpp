// run_log.cpp: DIR/log.jsonl (see run_log.h).
#include "run_log.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "check.h"
#include "util.h"

namespace llmc {
namespace {

// The value of "step" in one of our log lines, or -1 for a line that is not one.
long long line_step(const std::string& line) {
    const char* key = "{\"step\": ";
    if (line.compare(0, std::strlen(key), key) != 0) return -1;
    char* end = nullptr;
    const long long v = std::strtoll(line.c_str() + std::strlen(key), &end, 10);
    return (end != nullptr && *end == ',') ? v : -1;
}

void put_float(std::FILE* f, const char* key, double v, const char* fmt) {
    std::fprintf(f, ", \"%s\": ", key);
    if (std::isfinite(v))
        std::fprintf(f, fmt, v);
    else
        std::fputs("null", f);
}

}  // namespace

RunLog::~RunLog() {
    if (file_ != nullptr) std::fclose(file_);
}

void RunLog::open(const std::string& path, long long resume_step) {
    path_ = path;
    if (resume_step >= 0) {  // keep the lines up to the checkpoint
        keep_lines(
            path,
            [&](const std::string& line) {
                const long long s = line_step(line);
                return s >= 0 && s <= resume_step;
            },
            "the log file");
    }
    file_ = std::fopen(path.c_str(), resume_step >= 0 ? "a" : "w");
    LLMC_CHECK(file_ != nullptr, "cannot open the log file '%s' (%s).", path.c_str(),
               std::strerror(errno));
}

void RunLog::write(const StepRecord& r) {
    if (file_ == nullptr) return;
    std::fprintf(file_, "{\"step\": %lld", r.step);
    put_float(file_, "loss", r.loss, "%.9g");
    if (r.has_val) put_float(file_, "val_loss", r.val_loss, "%.9g");
    put_float(file_, "lr", r.lr, "%.9g");
    put_float(file_, "norm", r.norm, "%.9g");
    put_float(file_, "ms", r.ms, "%.4f");
    put_float(file_, "period_ms", r.period_ms, "%.4f");
    put_float(file_, "tok_s", r.tok_s, "%.1f");
    put_float(file_, "mfu", r.mfu, "%.5f");
    if (!r.extra.empty()) std::fprintf(file_, ", %s", r.extra.c_str());
    std::fprintf(file_, ", \"skipped\": %s}\n", r.skipped ? "true" : "false");
    std::fflush(file_);
}

void RunLog::write_sample(long long step, const std::string& text, int tokens, float temperature,
                          int top_k, unsigned long long seed) {
    if (file_ == nullptr) return;
    std::fprintf(file_,
                 "{\"step\": %lld, \"sample\": %s, \"tokens\": %d, \"temperature\": %.9g, "
                 "\"top_k\": %d, \"seed\": %llu}\n",
                 step, json_string(text).c_str(), tokens, temperature, top_k, seed);
    std::fflush(file_);
}

}  // namespace llmc
