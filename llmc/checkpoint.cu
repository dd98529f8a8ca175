// checkpoint.cu: device <-> host copies of the training state (see checkpoint.cuh). Plain
// cudaMemcpyAsync on ctx.stream followed by a stream synchronize: a checkpoint is rare, and its
// cost is dominated by the disk.
#include "check.h"
#include "checkpoint.cuh"

namespace llmc {
namespace {
void copy_to_host(const Context& ctx, void* dst, const void* src, size_t bytes) {
    LLMC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.stream));
}
}  // namespace

void checkpoint_download(const Context& ctx, const GPT2& m, const AdamW& opt, MultiGpu* dist,
                         std::vector<float>* weights, OptimizerState* state) {
    const size_t n = m.num_params;
    const bool root = dist == nullptr || dist->env.rank == 0;
    weights->resize(root ? n : 0);
    state->m.resize(root ? n : 0);
    state->v.resize(root ? n : 0);
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    LLMC_CHECK(opt.master != nullptr || kParamBytes == 4,
               "internal error: a %d-byte parameter build without master weights", kParamBytes);
    if (opt.sharded) {
        // ZeRO-1: every rank sends its chunks; rank 0 assembles the arrays of a 1-GPU run. The
        // fp32 build's weights are the parameters, whole on every rank after the all-gather.
        if (opt.master != nullptr) multi_gpu_gather_shards(ctx, dist, opt.master, weights->data());
        multi_gpu_gather_shards(ctx, dist, opt.m, state->m.data());
        multi_gpu_gather_shards(ctx, dist, opt.v, state->v.data());
    }
    state->raw_params.resize(root && kParamBytes != 4 ? n * kParamBytes : 0);
    if (!root) return;
    if (!opt.sharded || opt.master == nullptr) {
        // fp32 weights: the master copy when there is one, else the parameters themselves.
        const void* weights_src = opt.master != nullptr ? static_cast<const void*>(opt.master)
                                                        : static_cast<const void*>(m.params);
        copy_to_host(ctx, weights->data(), weights_src, n * sizeof(float));
    }
    if (!opt.sharded) {
        copy_to_host(ctx, state->m.data(), opt.m, n * sizeof(float));
        copy_to_host(ctx, state->v.data(), opt.v, n * sizeof(float));
    }
    if (!state->raw_params.empty())
        copy_to_host(ctx, state->raw_params.data(), m.params, n * kParamBytes);
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

void checkpoint_upload(const Context& ctx, GPT2* m, AdamW* opt, const OptimizerState& state) {
    const size_t n = m->num_params;
    LLMC_CHECK(state.m.size() == n && state.v.size() == n &&
                   state.raw_params.size() == (kParamBytes != 4 ? n * kParamBytes : 0),
               "internal error: checkpoint arrays do not match the model's %zu parameters", n);
    // Every rank read the whole checkpoint: a sharded state keeps its own chunks of m and v.
    optimizer_load_moments(ctx, opt, state.m.data(), state.v.data());
    if (!state.raw_params.empty()) {
        LLMC_CUDA_CHECK(cudaMemcpyAsync(m->params, state.raw_params.data(), n * kParamBytes,
                                        cudaMemcpyHostToDevice, ctx.stream));
    }
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

}  // namespace llmc
