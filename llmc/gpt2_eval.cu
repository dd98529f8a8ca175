// gpt2_eval.cu: forward-only passes through an EvalIO (see gpt2_eval.cuh).
#include <cstring>
#include <vector>

#include "gpt2_eval.cuh"
#include "matmul.cuh"
#include "nvtx.h"

namespace llmc {
namespace {

// The whole token buffer (inputs and targets) to the device, on ctx.stream.
void upload_tokens(const Context& ctx, const EvalIO& io) {
    LLMC_CUDA_CHECK(cudaMemcpyAsync(io.d_tokens, io.tokens, 2 * (size_t)io.B * io.T * sizeof(int),
                                    cudaMemcpyHostToDevice, ctx.stream));
}

// A batch of B x T read from the device copy of io's inputs and targets.
GPT2Batch batch_of(const EvalIO& io, int B, int T) {
    GPT2Batch batch;
    batch.inputs = io.d_tokens;
    batch.targets = io.d_tokens + (size_t)io.B * io.T;
    batch.B = B;
    batch.T = T;
    return batch;
}

}  // namespace

EvalIO::~EvalIO() {
    cudaFree(d_tokens);
    cudaFree(d_loss);
    cudaFreeHost(tokens);
    cudaFreeHost(loss);
}

void eval_io_create(EvalIO* io, int B, int T) {
    LLMC_CHECK(B >= 1 && T >= 1, "eval_io_create: bad shape B=%d T=%d", B, T);
    io->B = B;
    io->T = T;
    const size_t n = 2 * (size_t)B * T;
    LLMC_CUDA_CHECK(cudaMalloc(&io->d_tokens, n * sizeof(int)));
    LLMC_CUDA_CHECK(cudaMalloc(&io->d_loss, sizeof(float)));
    LLMC_CUDA_CHECK(cudaMallocHost(&io->tokens, n * sizeof(int)));
    LLMC_CUDA_CHECK(cudaMallocHost(&io->loss, sizeof(float)));
    std::memset(io->tokens, 0, n * sizeof(int));  // pinned memory starts uninitialised
}

float gpt2_eval_loss(const Context& ctx, GPT2* m, EvalIO* io, floatX* logits_copy) {
    NvtxRange range("eval");
    const size_t N = (size_t)io->B * io->T;
    upload_tokens(ctx, *io);
    LLMC_CUDA_CHECK(cudaMemsetAsync(io->d_loss, 0, sizeof(float), ctx.stream));
    GPT2ForwardArgs args;
    args.d_loss = io->d_loss;
    args.loss_scale = 1.0f / (float)N;
    args.logits_copy = logits_copy;
    gpt2_forward(ctx, m, batch_of(*io, io->B, io->T), args);
    LLMC_CUDA_CHECK(
        cudaMemcpyAsync(io->loss, io->d_loss, sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    return *io->loss;
}

void gpt2_position_losses(const Context& ctx, GPT2* m, EvalIO* io, int rows, int row_len,
                          float* host_losses) {
    NvtxRange range("position losses");
    const size_t N = (size_t)io->B * io->T;
    LLMC_CHECK(rows > 0 && row_len > 0 && row_len <= io->T && (size_t)rows * row_len <= N,
               "gpt2_position_losses: %d rows of %d tokens do not fit the buffer's B*T = %d*%d",
               rows, row_len, io->B, io->T);
    upload_tokens(ctx, *io);
    // Every buffer is sized for B*T rows of activations, so any (rows, row_len) view of at most
    // that many positions runs in place; positions restart at 0 in each row of row_len.
    gpt2_forward(ctx, m, batch_of(*io, rows, row_len), GPT2ForwardArgs());
    LLMC_CUDA_CHECK(cudaMemcpyAsync(host_losses, m->acts.losses,
                                    (size_t)rows * row_len * sizeof(float), cudaMemcpyDeviceToHost,
                                    ctx.stream));
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

void gpt2_forward_logits_row(const Context& ctx, GPT2* m, EvalIO* io, int pos, float* host_out) {
    NvtxRange range("logits row");
    const int C = m->cfg.channels, V = m->cfg.vocab_size;
    LLMC_CHECK(pos >= 0 && pos < io->T,
               "gpt2_forward_logits_row: position %d is outside the sequence of %d", pos, io->T);
    upload_tokens(ctx, *io);
    // Only sequence 0 matters: a batch of one sequence, with cuBLASLt plans of that shape.
    gpt2_forward(ctx, m, batch_of(*io, 1, io->T), GPT2ForwardArgs());
    // The row is copied to a buffer of its own so the (1, C) x (C, Vp) product has the
    // 256-byte alignment of every other plan, whatever C is.
    GPT2Activations& a = m->acts;
    LLMC_CUDA_CHECK(cudaMemcpyAsync(a.lnf_row, a.lnf + (size_t)pos * C, C * sizeof(floatX),
                                    cudaMemcpyDeviceToDevice, ctx.stream));
    matmul_forward(ctx, a.logits_row, a.lnf_row, m->param[kWte], nullptr, 1, C,
                   m->cfg.padded_vocab_size);
    std::vector<floatX> logits(V);
    LLMC_CUDA_CHECK(cudaMemcpyAsync(logits.data(), a.logits_row, V * sizeof(floatX),
                                    cudaMemcpyDeviceToHost, ctx.stream));
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    for (int i = 0; i < V; i++) host_out[i] = to_float(logits[i]);
}

}  // namespace llmc
