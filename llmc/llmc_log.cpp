// llmc_log.cpp: llm.c's main.log (see llmc_log.h).
#include "llmc_log.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"

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
    std::vector<std::string> kept;
    if (resume_step >= 0) {
        if (std::FILE* in = std::fopen(path.c_str(), "r")) {
            std::string line;
            int c;
            while ((c = std::fgetc(in)) != EOF) {
                if (c != '\n') {
                    line += (char)c;
                    continue;
                }
                if (keep_line(line, resume_step)) kept.push_back(line);
                line.clear();
            }
            std::fclose(in);
        }
    }
    // Rewritten under a temporary name and renamed, so a crash here leaves the old log whole.
    const std::string tmp = path + ".tmp";
    std::FILE* out = std::fopen(tmp.c_str(), "w");
    LLMC_CHECK(out != nullptr, "--llmc-log: cannot write '%s' (%s).", tmp.c_str(),
               std::strerror(errno));
    for (const std::string& l : kept) std::fprintf(out, "%s\n", l.c_str());
    LLMC_CHECK(std::fclose(out) == 0 && std::rename(tmp.c_str(), path.c_str()) == 0,
               "--llmc-log: cannot write '%s' (%s).", path.c_str(), std::strerror(errno));
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
