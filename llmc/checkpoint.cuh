// checkpoint.cuh: moving the exact training state of a GPT2 between the device and the host
// arrays of a checkpoint (the files themselves are checkpoint.h's, host-only).
//
// weights (fp32, model-file layout): the parameters in the fp32 build, the fp32 master weights
// in the bf16 build: no rounding either way. opt.raw_params: the bf16 parameters as stored, bit
// for bit (empty in the fp32 build). The step count (AdamW t) travels in the state header.
#pragma once
#include <vector>

#include "checkpoint.h"
#include "gpt2.cuh"

// Bytes of one device parameter in this build (the state header's param_bytes).
constexpr int kParamBytes = (int)sizeof(floatX);

// Waits for ctx.stream, then copies weights, m, v (and raw params in bf16) to the host. With a
// MultiGpu every rank must call it (ZeRO-1 gathers the shards); only rank 0 receives the arrays
// (they are left empty elsewhere).
void gpt2_download_checkpoint(const Context& ctx, const GPT2& model, std::vector<float>* weights,
                              llmc::OptimizerState* opt);

// Restores a checkpoint into a model that gpt2_create built from the checkpoint's weights
// (which put them into params, or master in bf16): uploads m, v, and the raw params in bf16.
// Synchronous.
void gpt2_upload_checkpoint(const Context& ctx, GPT2* model, const llmc::OptimizerState& opt);
