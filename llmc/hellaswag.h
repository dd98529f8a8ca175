// hellaswag.h: multiple-choice evaluation files (llm.c's format, e.g. hellaswag_val.bin) and the
// host bookkeeping of scoring them with a language model (host-only C++).
//
// Eval file (llm.c's write_evalfile): 256 x int32 header
//   [0] magic 20240522  [1] version 1  [2] number of examples  [3] longest example in bytes
// then each example as a stream of uint16:
//   65535 (start of example), its size in bytes (these fields included), its index (0, 1, ...
//   in file order), the label (index of the correct ending), the number of endings K,
//   the context length and its tokens, then K times an ending's length and its tokens.
// Token ids are below 65535; an example is under 65536 bytes; at most 65535 examples.
//
// Scoring (the completion form of HellaSwag, as llm.c's hellaswag.py and its trainer do): each
// ending is appended to the context and its tokens' losses under the model, given everything
// before them, are averaged; the ending with the lowest mean loss is the prediction ("acc", as
// llm.c's trainer logs it; its hellaswag.py calls it acc_norm). The ending with the lowest summed
// loss gives the second count ("acc_sum"). Ties go to the lower ending index.
//
// Batching: every (example, ending) is one row of inputs/targets: the context then the ending,
// shifted by one for the targets, so a row of a context of c tokens and an ending of e tokens is
// c + e - 1 positions long, and the ending's losses sit at positions c - 1 .. c + e - 2. Rows
// longer than T lose context tokens from the left (the ending stays whole; an ending of more
// than T tokens is refused). Rows are sorted by length, longest first, and packed into forwards
// of B*T tokens viewed as (B*T / Lb) rows of Lb tokens, Lb the smallest divisor of B*T that holds
// the batch's longest row: every forward has the shape of the model's (the same matmul plans)
// and short rows do not pay for T. Padding positions read token 0 and are ignored.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

constexpr int kEvalMagic = 20240522;
constexpr int kEvalVersion = 1;
constexpr int kEvalExampleStart = 65535;

struct EvalExample {
    int label = 0;
    std::vector<int> context;
    std::vector<std::vector<int>> endings;
};

// The bytes of an eval file holding `examples`; false with one sentence in *why when one does
// not fit the format (a token id >= 65535, an empty context or ending, a label out of range,
// an example of 65536 bytes or more, more than 65535 examples).
bool encode_eval_file(const std::vector<EvalExample>& examples, std::vector<uint8_t>* bytes,
                      std::string* why);

// Parses an eval file's bytes; false with one sentence in *why (without the file's name).
bool decode_eval_file(const uint8_t* data, size_t size, std::vector<EvalExample>* examples,
                      std::string* why);

// Reads an eval file; any problem ends the program with one sentence naming the file.
void read_eval_file(const std::string& path, std::vector<EvalExample>* examples);

// Writes the file under a temporary name and renames it, so a failure leaves no partial file;
// any problem ends the program with one sentence naming the file.
void write_eval_file(const std::string& path, const std::vector<EvalExample>& examples);

// One (example, ending) row of a batch.
struct EvalRow {
    int example = 0;  // index into the examples given to plan_eval_batches
    int ending = 0;
    int skip = 0;    // context tokens dropped from the left (the row was longer than T)
    int length = 0;  // positions: context - skip + ending - 1
};

// One forward: `rows` (B*T / row_len of them, the last ones possibly unused) of row_len tokens.
struct EvalBatch {
    int row_len = 0;
    std::vector<EvalRow> rows;
};

// Plans the forwards for examples[begin, end) at micro-batch B x T, with at most max_rows rows
// per forward (0: no limit; the GPU's attention grid bounds B*NH). False with one sentence in
// *why when an example cannot be scored at this T (an ending of more than T tokens) or has a
// token id >= vocab_size.
bool plan_eval_batches(const std::vector<EvalExample>& examples, int begin, int end, int B, int T,
                       int vocab_size, int max_rows, std::vector<EvalBatch>* batches,
                       std::string* why);

// Fills inputs and targets (B*T each) for a batch: row r occupies [r * row_len, (r+1) * row_len).
void fill_eval_batch(const std::vector<EvalExample>& examples, const EvalBatch& batch, int B, int T,
                     int* inputs, int* targets);

// Per (example, ending): the summed loss of the ending's tokens, and how many there are.
struct EvalLosses {
    std::vector<double> sum;  // [example * max_endings + ending]
    std::vector<int> count;
    int max_endings = 0;
};
void eval_losses_init(const std::vector<EvalExample>& examples, EvalLosses* losses);
// Adds the losses of one batch's forward (B*T per-position losses, laid out as in fill).
void eval_losses_add(const std::vector<EvalExample>& examples, const EvalBatch& batch,
                     const float* position_losses, EvalLosses* losses);

struct EvalScore {
    int examples = 0;     // scored
    int correct = 0;      // lowest mean loss is the label
    int correct_sum = 0;  // lowest summed loss is the label
};
// Scores examples[begin, end) from their losses; *predicted (optional) receives the
// mean-loss prediction of each.
EvalScore eval_score(const std::vector<EvalExample>& examples, const EvalLosses& losses, int begin,
                     int end, std::vector<int>* predicted = nullptr);

// The score as JSON pairs for log.jsonl (StepRecord::extra): "hellaswag_acc": correct/examples,
// "hellaswag_acc_sum", "hellaswag_correct", "hellaswag_correct_sum", "hellaswag_examples",
// "hellaswag_s" (the evaluation's wall time).
std::string eval_score_json(const EvalScore& s, double seconds);

// The examples of rank `rank` of `world`: contiguous ranges of ceil(n / world), as llm.c.
void eval_rank_range(int n, int rank, int world, int* begin, int* end);

}  // namespace llmc
