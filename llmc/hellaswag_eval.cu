// hellaswag_eval.cu: HellaSwag-style evaluation with the GPU model (see hellaswag_eval.cuh).
#include <chrono>

#include "hellaswag_eval.cuh"
#include "multi_gpu.cuh"
#include "nvtx.h"

using namespace llmc;

void hellaswag_eval_init(const std::string& path, const GPT2Config& cfg, int B, int T, int rank,
                         int world, HellaSwagEval* ev) {
    ev->path = path;
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

HellaSwagResult hellaswag_evaluate(const Context& ctx, GPT2* m, const HellaSwagEval& ev) {
    NvtxRange range("hellaswag");
    const auto t0 = std::chrono::steady_clock::now();
    const size_t N = (size_t)m->B * m->T;
    const std::vector<int> train_batch(m->io.tokens, m->io.tokens + 2 * N);
    EvalLosses losses;
    eval_losses_init(ev.examples, &losses);
    std::vector<float> position_losses(N);
    for (const EvalBatch& batch : ev.batches) {
        fill_eval_batch(ev.examples, batch, m->B, m->T, m->io.tokens, m->io.tokens + N);
        const int rows = (int)(N / batch.row_len);
        gpt2_position_losses(ctx, m, rows, batch.row_len, position_losses.data());
        eval_losses_add(ev.examples, batch, position_losses.data(), &losses);
    }
    std::copy(train_batch.begin(), train_batch.end(), m->io.tokens);
    HellaSwagResult r;
    r.score = eval_score(ev.examples, losses, ev.begin, ev.end);
    if (m->dist != nullptr) {
        // Counts up to 65535 are exact in float.
        r.score.examples =
            (int)multi_gpu_host_reduce(ctx, m->dist, (float)r.score.examples, kNcclSum);
        r.score.correct =
            (int)multi_gpu_host_reduce(ctx, m->dist, (float)r.score.correct, kNcclSum);
        r.score.correct_sum =
            (int)multi_gpu_host_reduce(ctx, m->dist, (float)r.score.correct_sum, kNcclSum);
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}
