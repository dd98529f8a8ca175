// hellaswag_eval.cuh: multiple-choice evaluation (HellaSwag in llm.c's eval-file format) with the
// GPU model during training: the rows planned by llmc/hellaswag.h run as forwards of B*T tokens
// (gpt2_position_losses, through the caller's EvalIO), and each ending's mean loss picks the
// prediction.
// With several ranks each rank scores a contiguous share of the examples and the counts are
// summed over the ranks, so every rank returns the whole file's score.
#pragma once
#include <string>
#include <vector>

#include "gpt2_eval.cuh"
#include "hellaswag.h"
#include "multi_gpu.cuh"

namespace llmc {

struct HellaSwagEval {
    std::string path;
    int B = 0, T = 0;  // the batch shape the forwards were planned for
    std::vector<EvalExample> examples;
    int begin = 0, end = 0;  // this rank's examples
    std::vector<EvalBatch> batches;
    long long positions = 0;  // positions scored per evaluation, padding excluded
};

// Reads the eval file and plans this rank's forwards at micro-batch B x T, before the GPU is
// touched: a bad file or an example that cannot fit T ends the program with one sentence.
void hellaswag_eval_init(const std::string& path, const GPT2Config& cfg, int B, int T, int rank,
                         int world, HellaSwagEval* ev);

struct HellaSwagResult {
    EvalScore score;     // over all ranks
    double seconds = 0;  // wall time of this rank's share, reductions included
};

// Evaluates the whole file with the model as it is after `step` steps, its forwards through `io`
// (of ev's B x T); synchronises. With `dist`, each rank scores its share and the counts are
// summed over the ranks. With
// LLMC_HELLASWAG_LOSSES=PREFIX set, each rank also writes its examples' ending losses to
// PREFIX_SSSSSSSS.txt (scripts/ref/hellaswag_ref.py --losses's format; .rankR before .txt with
// several ranks), for comparing with the PyTorch reference (scripts/test/test_hellaswag.sh).
HellaSwagResult hellaswag_evaluate(const Context& ctx, GPT2* model, EvalIO* io,
                                   const HellaSwagEval& ev, int step, MultiGpu* dist);

}  // namespace llmc
