// checkpoint.cu: device <-> host copies of the training state (see checkpoint.cuh). Plain
// cudaMemcpyAsync on ctx.stream followed by a stream synchronize: a checkpoint is rare, and its
// cost is dominated by the disk.
#include "check.h"
#include "checkpoint.cuh"
#include "multi_gpu.cuh"

using namespace llmc;

namespace {
void copy_to_host(const Context& ctx, void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.stream));
}
void copy_to_device(const Context& ctx, void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream));
}
}  // namespace

void gpt2_download_checkpoint(const Context& ctx, const GPT2& m, std::vector<float>* weights,
                              OptimizerState* opt) {
    const size_t n = m.num_params;
    const bool sharded = m.dist != nullptr && m.dist->zero == 1;
    const bool root = m.dist == nullptr || m.dist->env.rank == 0;
    weights->resize(root ? n : 0);
    opt->m.resize(root ? n : 0);
    opt->v.resize(root ? n : 0);
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    LLMC_CHECK(m.master != nullptr || kParamBytes == 4,
               "internal error: a %d-byte parameter build without master weights", kParamBytes);
    if (sharded) {
        // ZeRO-1: every rank sends its chunks; rank 0 assembles the arrays of a 1-GPU run. The
        // fp32 build's weights are the parameters, whole on every rank after the all-gather.
        if (m.master != nullptr) multi_gpu_gather_shards(ctx, m.dist, m.master, weights->data());
        multi_gpu_gather_shards(ctx, m.dist, m.adam_m, opt->m.data());
        multi_gpu_gather_shards(ctx, m.dist, m.adam_v, opt->v.data());
    }
    opt->raw_params.resize(root && kParamBytes != 4 ? n * kParamBytes : 0);
    if (!root) return;
    if (!sharded || m.master == nullptr) {
        // fp32 weights: the master copy when there is one, else the parameters themselves.
        const void* weights_src = m.master != nullptr ? static_cast<const void*>(m.master)
                                                      : static_cast<const void*>(m.params);
        copy_to_host(ctx, weights->data(), weights_src, n * sizeof(float));
    }
    if (!sharded) {
        copy_to_host(ctx, opt->m.data(), m.adam_m, n * sizeof(float));
        copy_to_host(ctx, opt->v.data(), m.adam_v, n * sizeof(float));
    }
    if (!opt->raw_params.empty())
        copy_to_host(ctx, opt->raw_params.data(), m.params, n * kParamBytes);
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

void gpt2_upload_checkpoint(const Context& ctx, GPT2* m, const OptimizerState& opt) {
    const size_t n = m->num_params;
    LLMC_CHECK(opt.m.size() == n && opt.v.size() == n &&
                   opt.raw_params.size() == (kParamBytes != 4 ? n * kParamBytes : 0),
               "internal error: checkpoint arrays do not match the model's %zu parameters", n);
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    if (m->dist != nullptr && m->dist->zero == 1) {
        // Every rank read the whole checkpoint: it keeps its own chunks of m and v.
        multi_gpu_upload_shard(ctx, *m->dist, opt.m.data(), m->adam_m);
        multi_gpu_upload_shard(ctx, *m->dist, opt.v.data(), m->adam_v);
    } else {
        copy_to_device(ctx, m->adam_m, opt.m.data(), n * sizeof(float));
        copy_to_device(ctx, m->adam_v, opt.v.data(), n * sizeof(float));
    }
    if (!opt.raw_params.empty())
        copy_to_device(ctx, m->params, opt.raw_params.data(), n * kParamBytes);
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}
