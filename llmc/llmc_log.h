// llmc_log.h: DIR/main.log in llm.c's format (its llmc/logger.h), so that llm.c's notebooks and
// plotting scripts (dev/vislog.ipynb) read runs of this trainer. One line per event:
//   s:%d trl:%.4f lr:%.6f norm:%.2f    training loss, learning rate and gradient norm
//   s:%d tel:%.4f                      validation loss
//   s:%d eval:%.4f                     HellaSwag accuracy (mean-loss form)
// Steps count as llm.c counts them: a training line carries the 0-based index of the step it
// took (our step S is s:S-1), a validation or eval line the number of steps taken before it
// (our evaluation after step S is s:S), so both trainers' files of the same run line up.
#pragma once
#include <string>

namespace llmc {

class LlmcLog {
  public:
    LlmcLog() = default;
    LlmcLog(const LlmcLog&) = delete;
    LlmcLog& operator=(const LlmcLog&) = delete;

    // Creates DIR (and its parents) and DIR/main.log. A new run (resume_step < 0) starts an
    // empty file; a resumed one keeps the lines up to its checkpoint (training lines of steps up
    // to resume_step, evaluations at s <= resume_step) and appends after them. Ends the program
    // with one sentence when the file cannot be written.
    void open(const std::string& dir, long long resume_step);
    bool is_open() const { return !path_.empty(); }
    const std::string& path() const { return path_; }

    // Our step numbers (1-based, the step just taken); each appends one line and closes the
    // file, as llm.c does, so a crash never leaves a partial line buffered.
    void train(long long step, float loss, float lr, float norm) const;
    void val(long long step, float val_loss) const;
    void eval(long long step, float accuracy) const;

  private:
    void append(const char* line) const;
    std::string path_;
};

// The line for each kind (no newline), as written; for tests.
std::string llmc_log_train_line(long long step, float loss, float lr, float norm);
std::string llmc_log_val_line(long long step, float val_loss);
std::string llmc_log_eval_line(long long step, float accuracy);

}  // namespace llmc
