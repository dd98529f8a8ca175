// llmc_log.cpp: llm.c's main.log (see llmc_log.h).
#include "llmc_log.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.h"
#include "util.h"

namespace llmc {
namespace {

void make_dirs(const std::string& dir) {
    for (size_t pos = 1; pos <= dir.size(); pos++) {
        if (pos != dir.size() && dir[pos] != '/') continue;
        const std::string part = dir.substr(0, pos);
        LLMC_CHECK(mkdir(part.c_str(), 0755) == 0 || errno == EEXIST,
                   "--llmc-log: cannot create the directory '%s' (%s).", part.c_str(),
                   std::strerror(errno));
    }
}

// Whether a line of an earlier main.log stays when resuming after step resume_step.
bool keep_line(const std::string& line, long long resume_step) {
    if (line.compare(0, 2, "s:") != 0) return false;
    char* end = nullptr;
    const long long s = std::strtoll(line.c_str() + 2, &end, 10);
    if (end == line.c_str() + 2 || *end != ' ') return false;
    const bool training = std::strncmp(end, " trl:", 5) == 0;
    return training ? s < resume_step : s <= resume_step;
}

}  // namespace

std::string llmc_log_train_line(long long step, float loss, float lr, float norm) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "s:%lld trl:%.4f lr:%.6f norm:%.2f", step - 1, loss, lr, norm);
    return buf;
}

std::string llmc_log_val_line(long long step, float val_loss) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "s:%lld tel:%.4f", step, val_loss);
    return buf;
}

std::string llmc_log_eval_line(long long step, float accuracy) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "s:%lld eval:%.4f", step, accuracy);
    return buf;
}

void LlmcLog::open(const std::string& dir, long long resume_step) {
    make_dirs(dir);
    const std::string path = dir + "/main.log";
    // A resumed run keeps the lines up to its checkpoint; a fresh one starts the file empty.
    keep_lines(
        path,
        [&](const std::string& line) { return resume_step >= 0 && keep_line(line, resume_step); },
        "--llmc-log's file");
    path_ = path;
}

void LlmcLog::append(const char* line) const {
    if (path_.empty()) return;
    std::FILE* f = std::fopen(path_.c_str(), "a");
    LLMC_CHECK(f != nullptr, "--llmc-log: cannot append to '%s' (%s).", path_.c_str(),
               std::strerror(errno));
    std::fprintf(f, "%s\n", line);
    std::fclose(f);
}

void LlmcLog::train(long long step, float loss, float lr, float norm) const {
    append(llmc_log_train_line(step, loss, lr, norm).c_str());
}

void LlmcLog::val(long long step, float val_loss) const {
    append(llmc_log_val_line(step, val_loss).c_str());
}

void LlmcLog::eval(long long step, float accuracy) const {
    append(llmc_log_eval_line(step, accuracy).c_str());
}

}  // namespace llmc
