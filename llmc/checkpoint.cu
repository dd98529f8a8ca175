// checkpoint.cu: device <-> host copies of the training state (see checkpoint.cuh). Plain
// cudaMemcpyAsync on ctx.stream followed by a stream synchronize: a checkpoint is rare, and its
// cost is dominated by the disk.
#include "check.h"
#include "checkpoint.cuh"

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
    weights->resize(n);
    opt->m.resize(n);
    opt->v.resize(n);
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    // fp32 weights: the master copy when there is one, else the parameters themselves (float).
    const void* weights_src = m.master != nullptr ? static_cast<const void*>(m.master)
                                                  : static_cast<const void*>(m.params);
    LLMC_CHECK(m.master != nullptr || kParamBytes == 4,
               "internal error: a %d-byte parameter build without master weights", kParamBytes);
    copy_to_host(ctx, weights->data(), weights_src, n * sizeof(float));
    copy_to_host(ctx, opt->m.data(), m.adam_m, n * sizeof(float));
    copy_to_host(ctx, opt->v.data(), m.adam_v, n * sizeof(float));
    opt->raw_params.resize(kParamBytes != 4 ? n * kParamBytes : 0);
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
    copy_to_device(ctx, m->adam_m, opt.m.data(), n * sizeof(float));
    copy_to_device(ctx, m->adam_v, opt.v.data(), n * sizeof(float));
    if (!opt.raw_params.empty())
        copy_to_device(ctx, m->params, opt.raw_params.data(), n * kParamBytes);
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}
