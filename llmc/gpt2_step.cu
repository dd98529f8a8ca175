// gpt2_step.cu: one training step of the GPT-2 model, and its CUDA graph.
//
// The step is a fixed sequence of work on ctx.stream whose per-step inputs (tokens, learning
// rate, step count) are read from pinned host memory by copies that are part of the sequence
// itself, so one captured graph serves every step: the host writes io.tokens and
// io.step_values, launches, and later reads io.results.
#include "adamw.cuh"
#include "global_norm.cuh"
#include "gpt2.cuh"
#include "multi_gpu.cuh"
#include "nvtx.h"

namespace {

// Zeroes the gradients and the loss (first micro-step) and copies the step's values in, and
// zeroes dresidual for this micro-step's backward, on ctx.stream or, with kBranchZeroing, on the
// branch beside the forward, which does not touch them before the classifier (gpt2_forward
// waits for m->zeroed there; gpt2_backward skips its own memset of dresidual).
void enqueue_zeroing(const Context& ctx, GPT2* m, int micro) {
    const size_t N = (size_t)m->B * m->T;
    const bool on_branch = (ctx.branches & kBranchZeroing) != 0;
    const cudaStream_t s = stream_for(ctx, on_branch);
    if (on_branch) branch_fork(ctx);
    if (micro == 0) {
        CUDA_CHECK(cudaMemcpyAsync(m->d_step_values, m->io.step_values, sizeof(AdamWStepValues),
                                   cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaMemsetAsync(m->grads, 0, m->num_params * sizeof(floatX), s));
        CUDA_CHECK(cudaMemsetAsync(m->d_results, 0, 2 * sizeof(float), s));
    }
    if (on_branch) {
        CUDA_CHECK(cudaMemsetAsync(m->acts.dresidual, 0, N * m->cfg.channels * sizeof(floatX), s));
        m->zeroed = branch_mark(ctx);
    }
}

void enqueue_step(const Context& ctx, GPT2* m) {
    const size_t N = (size_t)m->B * m->T;
    const size_t token_bytes = (size_t)m->grad_accum * 2 * N * sizeof(int);
    CUDA_CHECK(cudaMemcpyAsync(m->d_tokens, m->io.tokens, token_bytes, cudaMemcpyHostToDevice,
                               ctx.stream));
    const float loss_scale = 1.0f / ((float)N * (float)m->grad_accum);
    for (int micro = 0; micro < m->grad_accum; micro++) {
        const int* inputs = m->d_tokens + (size_t)micro * 2 * N;
        const int* targets = inputs + N;
        // Multi-GPU: the gradients are reduced over the ranks once, after the last micro-step.
        m->reduce_grads = m->dist != nullptr && micro == m->grad_accum - 1;
        enqueue_zeroing(ctx, m, micro);
        gpt2_forward(ctx, m, inputs, targets, m->d_results, loss_scale,
                     /*backward_classifier=*/true);
        gpt2_backward(ctx, m, inputs);
        m->zeroed = nullptr;
    }
    m->reduce_grads = false;
    if (m->dist == nullptr) {
        NvtxRange range("optimizer");
        global_norm_squared(ctx, m->d_results + 1, m->acts.norm_scratch, m->grads, m->num_params);
        adamw_update(ctx, m->params, m->master, m->adam_m, m->adam_v, m->grads, m->tensors,
                     m->hyper, m->d_step_values, m->d_results + 1);
    } else {
        NvtxRange range("optimizer");
        MultiGpu* d = m->dist;
        multi_gpu_join(ctx, d);
        multi_gpu_all_reduce(ctx, d, m->d_results, 1, llmc::kNcclAvg);  // the global mean loss
        if (d->zero == 1) {
            // Each rank holds the reduced gradients of its own chunks only: the squared norm of
            // those, summed over the ranks, is the global one (the same on every rank, so every
            // rank skips a non-finite step alike).
            global_norm_squared_sharded(ctx, m->d_results + 1, m->acts.norm_scratch, m->grads,
                                        d->shard);
            multi_gpu_all_reduce(ctx, d, m->d_results + 1, 1, llmc::kNcclSum);
            adamw_update_sharded(ctx, m->params, m->master, m->adam_m, m->adam_v, m->grads,
                                 d->shard, m->hyper, m->d_step_values, m->d_results + 1);
            multi_gpu_all_gather_params(ctx, d, m->params);
        } else {
            global_norm_squared(ctx, m->d_results + 1, m->acts.norm_scratch, m->grads,
                                m->num_params);
            adamw_update(ctx, m->params, m->master, m->adam_m, m->adam_v, m->grads, m->tensors,
                         m->hyper, m->d_step_values, m->d_results + 1);
        }
    }
    CUDA_CHECK(cudaMemcpyAsync(m->io.results, m->d_results, 2 * sizeof(float),
                               cudaMemcpyDeviceToHost, ctx.stream));
}

}  // namespace

void gpt2_reset_graph(GPT2* m) {
    if (m->graph != nullptr) CUDA_CHECK(cudaGraphExecDestroy(m->graph));
    m->graph = nullptr;
}

void gpt2_step(const Context& ctx, GPT2* m, bool use_graph) {
    NvtxRange range("step");
    if (!use_graph || !m->warmed_up) {
        // The first step runs eagerly: it builds the cuBLASLt plans, which must not happen
        // during capture.
        enqueue_step(ctx, m);
        m->warmed_up = true;
        return;
    }
    if (m->graph == nullptr) {
        cudaGraph_t g = nullptr;
        // Multi-GPU: relaxed, since NCCL may set up a connection (cudaMalloc, host calls) in
        // this thread the first time a collective shape appears, which thread-local capture
        // would refuse.
        CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, m->dist != nullptr
                                                          ? cudaStreamCaptureModeRelaxed
                                                          : cudaStreamCaptureModeThreadLocal));
        enqueue_step(ctx, m);
        CUDA_CHECK(cudaStreamEndCapture(ctx.stream, &g));
        CUDA_CHECK(cudaGraphInstantiate(&m->graph, g, 0));
        CUDA_CHECK(cudaGraphDestroy(g));
    }
    CUDA_CHECK(cudaGraphLaunch(m->graph, ctx.stream));
}

float gpt2_eval_loss(const Context& ctx, GPT2* m, floatX* logits_copy) {
    NvtxRange range("eval");
    const size_t N = (size_t)m->B * m->T;
    CUDA_CHECK(cudaMemcpyAsync(m->d_tokens, m->io.tokens, 2 * N * sizeof(int),
                               cudaMemcpyHostToDevice, ctx.stream));
    CUDA_CHECK(cudaMemsetAsync(m->d_results, 0, sizeof(float), ctx.stream));
    gpt2_forward(ctx, m, m->d_tokens, m->d_tokens + N, m->d_results, 1.0f / (float)N,
                 /*backward_classifier=*/false, logits_copy);
    CUDA_CHECK(cudaMemcpyAsync(m->io.results, m->d_results, sizeof(float), cudaMemcpyDeviceToHost,
                               ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    return m->io.results[0];
}

void gpt2_position_losses(const Context& ctx, GPT2* m, int rows, int row_len, float* host_losses) {
    NvtxRange range("position losses");
    const size_t N = (size_t)m->B * m->T;
    LLMC_CHECK(rows > 0 && row_len > 0 && row_len <= m->T && (size_t)rows * row_len <= N,
               "gpt2_position_losses: %d rows of %d tokens do not fit the model's B*T = %d*%d",
               rows, row_len, m->B, m->T);
    CUDA_CHECK(cudaMemcpyAsync(m->d_tokens, m->io.tokens, 2 * N * sizeof(int),
                               cudaMemcpyHostToDevice, ctx.stream));
    // Every buffer is sized for B*T rows of activations, so any (rows, row_len) view of at most
    // that many positions runs in place; positions restart at 0 in each row of row_len.
    const int full_B = m->B, full_T = m->T;
    m->B = rows;
    m->T = row_len;
    gpt2_forward(ctx, m, m->d_tokens, m->d_tokens + N, nullptr, 0.0f,
                 /*backward_classifier=*/false);
    m->B = full_B;
    m->T = full_T;
    CUDA_CHECK(cudaMemcpyAsync(host_losses, m->acts.losses, (size_t)rows * row_len * sizeof(float),
                               cudaMemcpyDeviceToHost, ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}
