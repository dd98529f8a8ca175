// checkpoint.cuh: moving the exact training state of a GPT2 and its AdamW between the device and
// the host arrays of a checkpoint (the files themselves are checkpoint.h's, host-only).
//
// weights (fp32, model-file layout): the parameters in the fp32 build, the fp32 master weights
// in the bf16 build: no rounding either way. opt.raw_params: the bf16 parameters as stored, bit
// for bit (empty in the fp32 build). The step count (AdamW t) travels in the state header.
#pragma once
#include <vector>

#include "checkpoint.h"
#include "gpt2.cuh"
#include "multi_gpu.cuh"
#include "optimizer.cuh"

namespace llmc {

// Bytes of one device parameter in this build (the state header's param_bytes).
constexpr int kParamBytes = (int)sizeof(floatX);

// Waits for ctx.stream, then copies weights, m, v (and raw params in bf16) to the host. With
// `dist` every rank must call it (a sharded AdamW's chunks are gathered); only rank 0 receives
// the arrays (they are left empty elsewhere).
void checkpoint_download(const Context& ctx, const GPT2& model, const AdamW& opt, MultiGpu* dist,
                         std::vector<float>* weights, OptimizerState* state);

// Restores a checkpoint into a model and an AdamW created from the checkpoint's weights (which
// put them into params, or master in bf16): uploads m, v, and the raw params in bf16.
// Synchronous.
void checkpoint_upload(const Context& ctx, GPT2* model, AdamW* opt, const OptimizerState& state);

}  // namespace llmc
