// hellaswag_eval.cu: HellaSwag-style evaluation with the GPU model (see hellaswag_eval.cuh).
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "hellaswag_eval.cuh"
#include "nvtx.h"

namespace llmc {

void hellaswag_eval_init(const std::string& path, const GPT2Config& cfg, int B, int T, int rank,
                         int world, HellaSwagEval* ev) {
    ev->path = path;
    ev->B = B;
    ev->T = T;
    read_eval_file(path, &ev->examples);
    eval_rank_range((int)ev->examples.size(), rank, world, &ev->begin, &ev->end);
    // The attention kernels put the (row, head) pairs in a grid dimension of at most 65535.
    const int max_rows = 65535 / cfg.num_heads;
    std::string why;
    LLMC_CHECK(plan_eval_batches(ev->examples, ev->begin, ev->end, B, T, cfg.vocab_size, max_rows,
                                 &ev->batches, &why),
               "--hellaswag %s: %s.", path.c_str(), why.c_str());
    ev->positions = 0;
    for (const EvalBatch& b : ev->batches)
        for (const EvalRow& r : b.rows) ev->positions += r.length;
}

namespace {

// LLMC_HELLASWAG_LOSSES=PREFIX: each evaluation writes PREFIX_SSSSSSSS.txt
// (PREFIX_SSSSSSSS.rankR.txt with several ranks), a line per example in the format of
// scripts/ref/hellaswag_ref.py --losses: index, label, the mean-loss and summed-loss predictions,
// the K mean losses, the K summed losses.
void write_losses(const HellaSwagEval& ev, const EvalLosses& losses,
                  const std::vector<int>& predicted, int step, int rank) {
    const char* prefix = std::getenv("LLMC_HELLASWAG_LOSSES");
    if (prefix == nullptr || *prefix == '\0') return;
    char path[1024];
    if (rank < 0)
        std::snprintf(path, sizeof(path), "%s_%08d.txt", prefix, step);
    else
        std::snprintf(path, sizeof(path), "%s_%08d.rank%d.txt", prefix, step, rank);
    FILE* f = std::fopen(path, "w");
    LLMC_CHECK(f != nullptr, "LLMC_HELLASWAG_LOSSES: cannot write '%s'.", path);
    for (int i = ev.begin; i < ev.end; i++) {
        const size_t k = ev.examples[i].endings.size();
        const size_t base = (size_t)i * losses.max_endings;
        int best_sum = 0;
        for (size_t j = 1; j < k; j++)
            if (losses.sum[base + j] < losses.sum[base + best_sum]) best_sum = (int)j;
        std::fprintf(f, "%d %d %d %d", i, ev.examples[i].label, predicted[i - ev.begin], best_sum);
        for (size_t j = 0; j < k; j++)
            std::fprintf(f, " %.9g", losses.sum[base + j] / losses.count[base + j]);
        for (size_t j = 0; j < k; j++) std::fprintf(f, " %.9g", losses.sum[base + j]);
        std::fprintf(f, "\n");
    }
    std::fclose(f);
}

}  // namespace

HellaSwagResult hellaswag_evaluate(const Context& ctx, GPT2* m, EvalIO* io, const HellaSwagEval& ev,
                                   int step, MultiGpu* dist) {
    NvtxRange range("hellaswag");
    const auto t0 = std::chrono::steady_clock::now();
    LLMC_CHECK(io->B == ev.B && io->T == ev.T,
               "hellaswag_evaluate: the buffer is %d x %d, the plan's batches %d x %d", io->B,
               io->T, ev.B, ev.T);
    const size_t N = (size_t)io->B * io->T;
    EvalLosses losses;
    eval_losses_init(ev.examples, &losses);
    std::vector<float> position_losses(N);
    for (const EvalBatch& batch : ev.batches) {
        fill_eval_batch(ev.examples, batch, io->B, io->T, io->inputs(), io->targets());
        const int rows = (int)(N / batch.row_len);
        gpt2_position_losses(ctx, m, io, rows, batch.row_len, position_losses.data());
        eval_losses_add(ev.examples, batch, position_losses.data(), &losses);
    }
    HellaSwagResult r;
    std::vector<int> predicted;
    r.score = eval_score(ev.examples, losses, ev.begin, ev.end, &predicted);
    write_losses(ev, losses, predicted, step, dist != nullptr ? dist->env.rank : -1);
    if (dist != nullptr) {
        // Counts up to 65535 are exact in float.
        r.score.examples = (int)multi_gpu_host_reduce(ctx, dist, (float)r.score.examples, kNcclSum);
        r.score.correct = (int)multi_gpu_host_reduce(ctx, dist, (float)r.score.correct, kNcclSum);
        r.score.correct_sum =
            (int)multi_gpu_host_reduce(ctx, dist, (float)r.score.correct_sum, kNcclSum);
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace llmc
