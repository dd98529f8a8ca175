// multi_gpu.cuh: data parallel training on NCCL, one process per GPU (the state of it lives
// here, not in the model or the Context).
//
// Gradients: as soon as the backward has finished a group of gradient slices (llmc::
// grad_group_slices: the lnf pair first, then each layer from the last, then wte and wpe),
// multi_gpu_grads_ready records an event on the main stream; the communication stream waits on
// it and reduces that group (ncclAvg, in floatX: bf16 in the bf16 build) inside one
// ncclGroupStart/End, while the main stream goes on with the next layer's backward. The main
// stream joins the communication stream (multi_gpu_join) before the norm and AdamW.
//   zero 0: ncclAllReduce in place; every rank then runs the whole AdamW.
//   zero 1: ncclReduceScatter in place (rank r's chunk of each slice, recvbuff = sendbuff +
//           r * chunk: llmc::ShardMap); each rank updates its chunks (adamw_update_sharded),
//           then multi_gpu_all_gather_params brings every chunk back (ncclAllGather in place).
// All of it is stream-ordered work on two streams joined by events, so the whole step stays
// one CUDA graph. A single-GPU run has no MultiGpu at all (the step's pointer is null): no
// second stream, no events, no NCCL.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <thread>
#include <vector>

#include "context.cuh"
#include "dist_env.h"
#include "gpt2.cuh"
#include "nccl_api.h"
#include "precision.cuh"
#include "shard_map.h"

namespace llmc {

struct MultiGpu {
    llmc::DistEnv env;
    llmc::BootstrapOptions bootstrap;
    int zero = 0;  // 0: all-reduce + whole optimizer per rank; 1: ZeRO stage 1
    llmc::NcclApi nccl;
    llmc::NcclComm comm = nullptr;
    cudaStream_t comm_stream = nullptr;
    std::vector<cudaEvent_t> group_ready;  // one per gradient group
    cudaEvent_t comm_done = nullptr;
    std::vector<std::vector<llmc::GradSlice>> groups;
    llmc::ShardMap shard;        // this rank's chunks (zero 1)
    float* d_scratch = nullptr;  // 2 floats for host-side reductions
    double timeout_s = 600.0;    // LLMC_NCCL_TIMEOUT: longest wait for a step or collective
    // The watchdog thread (multi_gpu.cu): when multi_gpu_wait started waiting (steady clock, ns;
    // 0 when not waiting), and its stop flag.
    std::atomic<long long> wait_start_ns{0};
    std::atomic<bool> watchdog_stop{false};
    std::thread watchdog;

    MultiGpu() = default;
    MultiGpu(const MultiGpu&) = delete;
    MultiGpu& operator=(const MultiGpu&) = delete;
    ~MultiGpu();
};

// Sets NCCL_NVLS_ENABLE=0 unless set, loads NCCL, shares rank 0's unique id (dist_env.h),
// creates the communicator on ctx's device, the communication stream and events, and the
// gradient groups and shard map of `cfg`. Exits with one sentence on any failure.
void multi_gpu_init(MultiGpu* d, const Context& ctx, const llmc::DistEnv& env,
                    const llmc::BootstrapOptions& bootstrap, uint64_t fingerprint, int zero,
                    const llmc::GPT2Config& cfg);

// The backward has finished gradient group `group` of `grads` on ctx.stream: reduce it on the
// communication stream (all-reduce or reduce-scatter, by zero).
void multi_gpu_grads_ready(const Context& ctx, MultiGpu* d, floatX* grads, int group);
// ctx.stream waits for everything enqueued on the communication stream.
void multi_gpu_join(const Context& ctx, MultiGpu* d);
// In place over every rank, on ctx.stream: n floats.
void multi_gpu_all_reduce(const Context& ctx, MultiGpu* d, float* values, size_t n,
                          llmc::NcclRedOp op);
// zero 1, after adamw_update_sharded: every rank's chunks of params to every rank, on ctx.stream.
void multi_gpu_all_gather_params(const Context& ctx, MultiGpu* d, floatX* params);
// A host value reduced over the ranks (synchronises): the mean validation loss, whether any rank
// was asked to stop, whether every rank's checkpoint is good.
float multi_gpu_host_reduce(const Context& ctx, MultiGpu* d, float value, llmc::NcclRedOp op);

// Waits for `event` (the end of a step). Instead of blocking in the driver it polls, so that an
// NCCL error or a peer that stopped answering (no progress for timeout_s) ends this rank with
// one sentence (after ncclCommAbort) instead of a hang.
void multi_gpu_wait(const Context& ctx, MultiGpu* d, cudaEvent_t event);

// zero 1 checkpoints: every rank's local shard (shard.local_total() floats at d_local) lands in
// host_full (the whole model's numbering) on rank 0, through a bounded device staging buffer
// (ncclSend/ncclRecv, a piece at a time); host_full is untouched on other ranks. Synchronous.
void multi_gpu_gather_shards(const Context& ctx, MultiGpu* d, const float* d_local,
                             float* host_full);

// The backward's gradient-ready hook (gpt2.cuh) over the ranks: each finished group of `grads`
// is reduced at once (multi_gpu_grads_ready).
class MultiGpuGradReducer final : public llmc::GradReadyHook {
  public:
    MultiGpuGradReducer(MultiGpu* d, floatX* grads) : d_(d), grads_(grads) {}
    void grads_ready(const Context& ctx, int group) override {
        multi_gpu_grads_ready(ctx, d_, grads_, group);
    }

  private:
    MultiGpu* d_;
    floatX* grads_;
};

}  // namespace llmc
