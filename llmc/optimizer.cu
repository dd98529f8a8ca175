// optimizer.cu: AdamW's state and its update, whole or sharded (see optimizer.cuh).
#include "global_norm.cuh"
#include "optimizer.cuh"

namespace llmc {
namespace {

// Whole-model host values (num_params floats) into a device array of the state: all of them,
// or the shard's chunks in its local numbering. Synchronous.
void upload_state(const AdamW& opt, const float* host_full, float* d_state) {
    if (!opt.sharded) {
        LLMC_CUDA_CHECK(
            cudaMemcpy(d_state, host_full, opt.elems * sizeof(float), cudaMemcpyHostToDevice));
        return;
    }
    std::vector<float> local(opt.elems);
    shard_global_to_local(opt.shard, host_full, local.data());
    LLMC_CUDA_CHECK(
        cudaMemcpy(d_state, local.data(), local.size() * sizeof(float), cudaMemcpyHostToDevice));
}

}  // namespace

AdamW::~AdamW() { cudaFree(state); }

size_t optimizer_state_bytes(size_t num_params, int shards) {
    return (sizeof(floatX) != sizeof(float) ? 3 : 2) * (num_params / shards) * sizeof(float);
}

void optimizer_create(const Context& ctx, AdamW* opt, const ParamLayout& layout,
                      const std::vector<float>& host_params, const AdamWHyper& hyper,
                      const ShardMap* shard) {
    const size_t n = layout.total;
    LLMC_CHECK(host_params.size() == n, "parameter count %zu does not match the layout (%zu)",
               host_params.size(), n);
    opt->hyper = hyper;
    opt->tensors.count = kNumParamTensors;
    for (int i = 0; i < kNumParamTensors; i++) {
        opt->tensors.offsets[i] = layout.offsets[i];
        opt->tensors.decayed[i] = param_is_decayed(i) ? 1 : 0;
    }
    opt->tensors.offsets[kNumParamTensors] = n;
    opt->sharded = shard != nullptr;
    if (opt->sharded) opt->shard = *shard;
    opt->elems = opt->sharded ? shard->local_total() : n;
    const bool with_master = sizeof(floatX) != sizeof(float);
    const size_t bytes = (with_master ? 3 : 2) * opt->elems * sizeof(float);
    device_alloc(reinterpret_cast<void**>(&opt->state), bytes, "optimizer state");
    opt->m = opt->state;
    opt->v = opt->state + opt->elems;
    opt->master = with_master ? opt->state + 2 * opt->elems : nullptr;
    LLMC_CUDA_CHECK(cudaMemsetAsync(opt->state, 0, 2 * opt->elems * sizeof(float), ctx.stream));
    if (with_master) upload_state(*opt, host_params.data(), opt->master);
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

void optimizer_grad_norm_squared(const Context& ctx, const AdamW& opt, float* out, void* scratch,
                                 const floatX* grads) {
    if (opt.sharded) {
        global_norm_squared_sharded(ctx, out, scratch, grads, opt.shard);
    } else {
        global_norm_squared(ctx, out, scratch, grads, opt.tensors.offsets[opt.tensors.count]);
    }
}

void optimizer_update(const Context& ctx, AdamW* opt, floatX* params, const floatX* grads,
                      const AdamWStepValues* step_values, const float* norm_squared) {
    if (opt->sharded) {
        adamw_update_sharded(ctx, params, opt->master, opt->m, opt->v, grads, opt->shard,
                             opt->hyper, step_values, norm_squared);
    } else {
        adamw_update(ctx, params, opt->master, opt->m, opt->v, grads, opt->tensors, opt->hyper,
                     step_values, norm_squared);
    }
}

void optimizer_load_moments(const Context& ctx, AdamW* opt, const float* host_m,
                            const float* host_v) {
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    upload_state(*opt, host_m, opt->m);
    upload_state(*opt, host_v, opt->v);
}

}  // namespace llmc
