// train_step.cu: one training step and its CUDA graph, and the memory plan of a training run
// (see train_step.cuh).
#include <algorithm>
#include <cstring>

#include "attention.cuh"
#include "nvtx.h"
#include "train_step.cuh"

namespace llmc {
namespace {

constexpr double kMiB = 1048576.0;

// Zeroes the loss (first micro-step) and copies the step's values in, and zeroes dresidual for
// this micro-step's backward, on ctx.stream or, with kBranchZeroing, on the branch beside the
// forward, which does not touch them before the classifier (gpt2_forward waits for the returned
// mark there; gpt2_backward skips its own memset of dresidual). Returns the branch's mark after
// the memsets, or null when they ran on ctx.stream. The gradients need no zeroing: the first
// micro-step writes every one of them (gpt2_backward with accumulate = false).
cudaEvent_t enqueue_zeroing(const Context& ctx, TrainStep* s, int micro) {
    const GPT2& m = *s->model;
    const size_t N = (size_t)s->B * s->T;
    const bool on_branch = (ctx.branches & kBranchZeroing) != 0;
    const cudaStream_t stream = stream_for(ctx, on_branch);
    if (on_branch) branch_fork(ctx);
    if (micro == 0) {
        LLMC_CUDA_CHECK(cudaMemcpyAsync(s->d_step_values, s->io.step_values,
                                        sizeof(AdamWStepValues), cudaMemcpyHostToDevice, stream));
        LLMC_CUDA_CHECK(cudaMemsetAsync(s->d_results, 0, 2 * sizeof(float), stream));
    }
    if (!on_branch) return nullptr;
    LLMC_CUDA_CHECK(
        cudaMemsetAsync(m.acts.dresidual, 0, N * m.cfg.channels * sizeof(floatX), stream));
    return branch_mark(ctx);
}

// The global norm and AdamW; with several ranks first the mean loss over them, and the norm of
// the shards summed over them under ZeRO-1 (each rank holds the reduced gradients of its own
// chunks only; the sum is the same on every rank, so every rank skips a non-finite step alike),
// and after the update every rank's chunks of the parameters to every rank.
void enqueue_optimizer(const Context& ctx, TrainStep* s) {
    NvtxRange range("optimizer");
    GPT2* m = s->model;
    float* norm_squared = s->d_results + 1;
    if (s->dist != nullptr) {
        multi_gpu_join(ctx, s->dist);
        multi_gpu_all_reduce(ctx, s->dist, s->d_results, 1, kNcclAvg);  // the global mean loss
    }
    optimizer_grad_norm_squared(ctx, *s->opt, norm_squared, m->acts.norm_scratch, m->grads);
    if (s->opt->sharded) multi_gpu_all_reduce(ctx, s->dist, norm_squared, 1, kNcclSum);
    optimizer_update(ctx, s->opt, m->params, m->grads, s->d_step_values, norm_squared);
    if (s->opt->sharded) multi_gpu_all_gather_params(ctx, s->dist, m->params);
}

void enqueue_step(const Context& ctx, TrainStep* s) {
    const size_t N = (size_t)s->B * s->T;
    const size_t token_bytes = (size_t)s->grad_accum * 2 * N * sizeof(int);
    LLMC_CUDA_CHECK(cudaMemcpyAsync(s->d_tokens, s->io.tokens, token_bytes, cudaMemcpyHostToDevice,
                                    ctx.stream));
    GPT2ForwardArgs args;
    args.d_loss = s->d_results;
    args.loss_scale = 1.0f / ((float)N * (float)s->grad_accum);
    args.backward_classifier = true;
    for (int micro = 0; micro < s->grad_accum; micro++) {
        GPT2Batch batch;
        batch.inputs = s->d_tokens + (size_t)micro * 2 * N;
        batch.targets = batch.inputs + N;
        batch.B = s->B;
        batch.T = s->T;
        // Multi-GPU: the gradients are reduced over the ranks once, after the last micro-step.
        const bool reduce = s->dist != nullptr && micro == s->grad_accum - 1;
        args.zeroed = enqueue_zeroing(ctx, s, micro);
        args.accumulate_grads = micro > 0;  // the first micro-step writes the gradients
        gpt2_forward(ctx, s->model, batch, args);
        gpt2_backward(ctx, s->model, batch, args.accumulate_grads, args.zeroed,
                      reduce ? &s->reducer : nullptr);
    }
    enqueue_optimizer(ctx, s);
    LLMC_CUDA_CHECK(cudaMemcpyAsync(s->io.results, s->d_results, 2 * sizeof(float),
                                    cudaMemcpyDeviceToHost, ctx.stream));
}

}  // namespace

TrainStep::~TrainStep() {
    if (graph) cudaGraphExecDestroy(graph);
    cudaFree(d_tokens);
    cudaFree(d_step_values);
    cudaFree(d_results);
    cudaFreeHost(io.tokens);
    cudaFreeHost(io.step_values);
    cudaFreeHost(io.results);
}

void train_step_create(TrainStep* s, GPT2* model, AdamW* opt, int grad_accum, MultiGpu* dist) {
    LLMC_CHECK(grad_accum >= 1, "gradient accumulation steps must be >= 1, got %d", grad_accum);
    LLMC_CHECK(opt->sharded == (dist != nullptr && dist->zero == 1),
               "internal error: the optimizer state is %s but the run has zero %d",
               opt->sharded ? "sharded" : "whole", dist != nullptr ? dist->zero : 0);
    s->model = model;
    s->opt = opt;
    s->dist = dist;
    s->B = model->B;
    s->T = model->T;
    s->grad_accum = grad_accum;
    s->reducer = MultiGpuGradReducer(dist, model->grads);
    const size_t tokens = (size_t)grad_accum * 2 * s->B * s->T;
    device_alloc(reinterpret_cast<void**>(&s->d_tokens), tokens * sizeof(int), "token buffer");
    LLMC_CUDA_CHECK(cudaMalloc(&s->d_step_values, sizeof(AdamWStepValues)));
    LLMC_CUDA_CHECK(cudaMalloc(&s->d_results, 2 * sizeof(float)));
    LLMC_CUDA_CHECK(cudaMallocHost(&s->io.tokens, tokens * sizeof(int)));
    LLMC_CUDA_CHECK(cudaMallocHost(&s->io.step_values, sizeof(AdamWStepValues)));
    LLMC_CUDA_CHECK(cudaMallocHost(&s->io.results, 2 * sizeof(float)));
    // Pinned memory starts uninitialised.
    std::memset(s->io.tokens, 0, tokens * sizeof(int));
    *s->io.step_values = AdamWStepValues{0.0f, 1};
    s->io.results[0] = s->io.results[1] = 0.0f;
}

void train_step_reset_graph(TrainStep* s) {
    if (s->graph != nullptr) LLMC_CUDA_CHECK(cudaGraphExecDestroy(s->graph));
    s->graph = nullptr;
}

void train_step_run(const Context& ctx, TrainStep* s, bool use_graph) {
    NvtxRange range("step");
    if (!use_graph || !s->warmed_up) {
        // The first step runs eagerly: it builds the cuBLASLt plans, which must not happen
        // during capture.
        enqueue_step(ctx, s);
        s->warmed_up = true;
        return;
    }
    if (s->graph == nullptr) {
        cudaGraph_t g = nullptr;
        // Multi-GPU: relaxed, since NCCL may set up a connection (cudaMalloc, host calls) in
        // this thread the first time a collective shape appears, which thread-local capture
        // would refuse.
        LLMC_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, s->dist != nullptr
                                                               ? cudaStreamCaptureModeRelaxed
                                                               : cudaStreamCaptureModeThreadLocal));
        enqueue_step(ctx, s);
        LLMC_CUDA_CHECK(cudaStreamEndCapture(ctx.stream, &g));
        LLMC_CUDA_CHECK(cudaGraphInstantiate(&s->graph, g, 0));
        LLMC_CUDA_CHECK(cudaGraphDestroy(g));
    }
    LLMC_CUDA_CHECK(cudaGraphLaunch(s->graph, ctx.stream));
}

TrainMemoryPlan train_memory_plan(const Context& ctx, const GPT2Config& cfg, int B, int T,
                                  int grad_accum, const GPT2Options& opts, int zero_shards) {
    TrainMemoryPlan plan;
    const size_t n = param_layout(cfg).total;
    plan.params = n * sizeof(floatX);
    plan.grads = n * sizeof(floatX);
    plan.optimizer = optimizer_state_bytes(n, zero_shards);
    plan.activations = gpt2_activation_bytes(ctx, cfg, B, T, opts, &plan.activation_parts);
    std::sort(plan.activation_parts.begin(), plan.activation_parts.end(),
              [](const auto& x, const auto& y) { return x.second > y.second; });
    plan.other = (size_t)grad_accum * 2 * B * T * sizeof(int) + sizeof(AdamWStepValues) + 8;
    // The autotuner's buffers (matmul.cu): a random input as large as the largest GEMM input,
    // and two copies of D for accumulating GEMMs. The largest are the classifier's backward
    // (dlogits, rows x Vp, with two copies of dwte) and the MLP weight gradients (an (N, 4C)
    // input, two copies of a 4C x C gradient); in fp32 also a T x T score area of attention.
    // Without that memory the tuner leaves a plan untuned (same bits, maybe slower). 256 MiB
    // more for cuBLASLt and the graph (the runs behind it: docs/perf-log.md).
    const size_t Vp = cfg.padded_vocab_size, C = cfg.channels, N = (size_t)B * T;
    const size_t rows = gpt2_classifier_chunk_rows(opts, B, T);
    size_t tune = std::max(rows * Vp + 2 * Vp * C, 4 * N * C + 8 * C * C) * sizeof(floatX);
    if (sizeof(floatX) == 4) {  // the cuBLAS attention: one of its two score areas
        tune = std::max(tune, attention_scratch_bytes(B, T, (int)C, cfg.num_heads) / 2);
    }
    plan.reserve = tune + (256u << 20);
    return plan;
}

int train_largest_batch(const Context& ctx, const GPT2Config& cfg, int T, int grad_accum,
                        const GPT2Options& opts, int zero_shards, size_t bytes, int max_B) {
    // Memory grows with B: bisect for the last B that fits (and that gpt2_create accepts).
    int lo = 0,
        hi = (int)std::min<long long>(max_B, ((1ll << 31) - 1) / ((long long)T * 4 * cfg.channels));
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (train_memory_plan(ctx, cfg, mid, T, grad_accum, opts, zero_shards).total() <= bytes)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

void train_print_memory_plan(const TrainMemoryPlan& plan, FILE* out) {
    std::fprintf(out,
                 "memory (MiB)     params %.0f, grads %.0f, optimizer %.0f, activations %.0f, "
                 "runtime reserve %.0f, total %.0f\n",
                 plan.params / kMiB, plan.grads / kMiB, plan.optimizer / kMiB,
                 plan.activations / kMiB, plan.reserve / kMiB, plan.total() / kMiB);
    std::fprintf(out, "largest acts     ");
    const size_t shown = std::min<size_t>(plan.activation_parts.size(), 6);
    for (size_t i = 0; i < shown; i++) {
        std::fprintf(out, "%s%s %.0f", i ? ", " : "", plan.activation_parts[i].first.c_str(),
                     plan.activation_parts[i].second / kMiB);
    }
    std::fprintf(out, "\n");
}

void train_check_memory(const Context& ctx, const GPT2Config& cfg, int B, int T, int grad_accum,
                        const GPT2Options& opts, int zero_shards) {
    // Refuse up front what cannot fit, with the numbers a user needs to pick B and --recompute.
    const TrainMemoryPlan plan = train_memory_plan(ctx, cfg, B, T, grad_accum, opts, zero_shards);
    size_t free_b = 0, total_b = 0;
    LLMC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (plan.total() <= free_b) return;
    GPT2Options most = opts;
    most.recompute = 2;
    const int fits = train_largest_batch(ctx, cfg, T, grad_accum, opts, zero_shards, free_b, B);
    const int fits_most =
        train_largest_batch(ctx, cfg, T, grad_accum, most, zero_shards, free_b, B);
    LLMC_CHECK(fits_most > 0,
               "the model needs %.0f MiB of device memory at B=%d T=%d, but only %.0f MiB of "
               "%.0f MiB are free, and not even B=1 with --recompute 2 fits: use a shorter "
               "sequence (-t), a smaller model or a GPU with more memory",
               plan.total() / kMiB, B, T, free_b / kMiB, total_b / kMiB);
    LLMC_FAIL(
        "the model needs %.0f MiB of device memory at B=%d T=%d with --recompute %d, but only "
        "%.0f MiB of %.0f MiB are free: lower the micro-batch (-b %d fits) or recompute "
        "activations (-b %d fits with --recompute 2)",
        plan.total() / kMiB, B, T, opts.recompute, free_b / kMiB, total_b / kMiB, fits, fits_most);
}

}  // namespace llmc
