// train_step.cuh: one training step of a GPT2 with its AdamW, and its CUDA graph.
//
// One step = copy the step's tokens and per-step values in, zero the gradients and the loss,
// forward + backward for each of grad_accum micro-batches (gradients summed), the global
// gradient norm, AdamW (with clipping), and an async copy of loss and norm to pinned host
// memory. The per-step inputs are read from pinned host memory by copies that are part of the
// step itself, so one captured graph serves every step: the host writes io.tokens and
// io.step_values, launches, and later reads io.results. It runs on ctx.stream with no host
// synchronisation; after one eager warm-up step it is captured into a CUDA graph and replayed
// (use_graph). Multi-GPU (multi_gpu.cuh): the last micro-step's backward hands each finished
// gradient group to the reducer, and the optimizer part reduces the loss and norm over the
// ranks (and gathers the parameters under ZeRO-1).
//
// Also the device memory of a training run, by part, before anything is allocated.
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gpt2.cuh"
#include "multi_gpu.cuh"
#include "optimizer.cuh"

namespace llmc {

struct TrainStepIO {  // pinned host memory, read and written by the step's own copies
    int* tokens;      // (grad_accum, 2, B*T): inputs then targets of each micro-batch
    AdamWStepValues* step_values;
    float* results;  // [0] mean loss of the step, [1] squared gradient norm
};

struct TrainStep {
    GPT2* model = nullptr;
    AdamW* opt = nullptr;
    MultiGpu* dist = nullptr;  // null on one GPU
    int B = 0, T = 0, grad_accum = 1;
    TrainStepIO io{};
    int* d_tokens = nullptr;  // device copy of io.tokens
    AdamWStepValues* d_step_values = nullptr;
    float* d_results = nullptr;  // [0] loss, [1] squared norm
    MultiGpuGradReducer reducer{nullptr, nullptr};
    cudaGraphExec_t graph = nullptr;
    bool warmed_up = false;

    TrainStep() = default;
    TrainStep(const TrainStep&) = delete;
    TrainStep& operator=(const TrainStep&) = delete;
    ~TrainStep();
};

// Allocates the step's buffers for micro-batches of the model's arena shape and grad_accum
// micro-steps per step. With `dist` (more than one process) the step reduces the gradients
// over the ranks; opt must then be sharded exactly when dist->zero == 1.
void train_step_create(TrainStep* step, GPT2* model, AdamW* opt, int grad_accum,
                       MultiGpu* dist = nullptr);

// Enqueues one whole training step on ctx.stream using io.tokens and io.step_values, which
// the caller fills before the call. With use_graph the step runs from a CUDA graph (captured on
// the first call after one eager warm-up step). Returns without synchronising; the results
// land in io.results once the stream reaches the end of the step.
void train_step_run(const Context& ctx, TrainStep* step, bool use_graph);
// Drops the captured graph, so that the next train_step_run with use_graph captures the step
// again (after a change that capture must see, such as a profiler starting to trace).
void train_step_reset_graph(TrainStep* step);

// Device memory of a training run, by part, in bytes.
struct TrainMemoryPlan {
    size_t params = 0, grads = 0, optimizer = 0, activations = 0, other = 0;
    // Allocated while running, outside the model's buffers: the cuBLASLt autotuner's random
    // operands (at most the classifier's rows x Vp dlogits and two copies of dwte) and what
    // cuBLASLt and the CUDA graph take.
    size_t reserve = 0;
    // Activation buffers grouped by name, largest first.
    std::vector<std::pair<std::string, size_t>> activation_parts;
    size_t total() const { return params + grads + optimizer + activations + other + reserve; }
};

// What gpt2_create, optimizer_create (its state divided over zero_shards ranks) and
// train_step_create allocate for micro-batches of (B, T), and the reserve, without allocating.
TrainMemoryPlan train_memory_plan(const Context& ctx, const GPT2Config& cfg, int B, int T,
                                  int grad_accum, const GPT2Options& opts, int zero_shards);
// The largest micro-batch B (up to max_B) whose plan fits in `bytes`; 0 when not even B = 1.
int train_largest_batch(const Context& ctx, const GPT2Config& cfg, int T, int grad_accum,
                        const GPT2Options& opts, int zero_shards, size_t bytes, int max_B);
// Prints the plan: each part in MiB and the largest activations.
void train_print_memory_plan(const TrainMemoryPlan& plan, FILE* out);
// Refuses, with the sizes and what to change (the -b that fits, with and without recompute), a
// run whose plan does not fit in the free device memory. Call before allocating.
void train_check_memory(const Context& ctx, const GPT2Config& cfg, int B, int T, int grad_accum,
                        const GPT2Options& opts, int zero_shards);

}  // namespace llmc
