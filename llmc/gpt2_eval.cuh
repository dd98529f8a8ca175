// gpt2_eval.cuh: forward-only passes of the model outside the training step: the mean loss of a
// batch (validation), the per-position losses of rows of any length (HellaSwag), and the logits
// of one position (sampling). Each reads its tokens from an EvalIO of its caller's, never from
// the training step's buffers, so running one between two training steps changes nothing the
// next step reads. All of them synchronise.
#pragma once
#include "gpt2.cuh"

namespace llmc {

// Pinned host tokens and their device copy for forward-only passes of batches of at most
// B x T: inputs in tokens[0, B*T), targets in tokens[B*T, 2*B*T) (zero until written, so
// always valid ids), and the loss sum.
struct EvalIO {
    int B = 0, T = 0;
    int* tokens = nullptr;    // pinned, 2 * B * T
    int* d_tokens = nullptr;  // device copy of tokens
    float* d_loss = nullptr;  // device
    float* loss = nullptr;    // pinned

    EvalIO() = default;
    EvalIO(const EvalIO&) = delete;
    EvalIO& operator=(const EvalIO&) = delete;
    ~EvalIO();
    int* inputs() const { return tokens; }
    int* targets() const { return tokens + (size_t)B * T; }
};

// Allocates the buffers of an EvalIO for batches of at most (B, T), which must fit the model's
// arena (gpt2.cuh) that it will run on.
void eval_io_create(EvalIO* io, int B, int T);

// The mean loss of the (io.B, io.T) batch in io's tokens. logits_copy: as in GPT2ForwardArgs.
float gpt2_eval_loss(const Context& ctx, GPT2* model, EvalIO* io, floatX* logits_copy = nullptr);

// Per-position losses -log p(target) of io's tokens viewed as `rows` sequences of `row_len`
// tokens (rows * row_len <= io.B * io.T, row_len <= io.T; inputs in the first rows * row_len
// ids of io.inputs(), targets likewise of io.targets()) into host_losses (rows * row_len).
void gpt2_position_losses(const Context& ctx, GPT2* model, EvalIO* io, int rows, int row_len,
                          float* host_losses);

// Sampling: the forward of sequence 0 of io (its io.T inputs) as a batch of one sequence, then
// the logits of one position only, lnf[pos] @ wte^T, whose V values land in host_out as fp32.
void gpt2_forward_logits_row(const Context& ctx, GPT2* model, EvalIO* io, int pos, float* host_out);

}  // namespace llmc
