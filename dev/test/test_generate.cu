// test_generate.cu: GPU test of the sampling path (llmc/gpt2_eval.cu gpt2_forward_logits_row and
// llmc/sampler.cu gpt2_generate) on a small awkward model (L=2, NH=4, C=128, V=1000, Vp=1024,
// B=3, T=37), random weights and tokens from a fixed seed. Checks:
//   - the logits of positions 0, 17 and 36 of sequence 0 against the model's own full forward
//     (gpt2_eval_loss with a copy of every logit): both run the same kernels, so they differ
//     only where cuBLASLt picks another algorithm for the other shape (N = T rows instead of
//     B*T, and 1 row for the lm-head): fp32 1e-5, bf16 4 ulps (4 * 2^-8) of the largest logit;
//   - the same logits against the CPU fp32 reference (dev/ref/gpt2_cpu) in the fp32 build (1e-4 of
//     the largest logit: summation order only, TF32 off). The bf16 build's distance to fp32 is
//     test_gpt2cu's subject, with bounds calibrated against PyTorch;
//   - the logits row through the batch's own (B, T) buffer (as the trainer samples through its
//     evaluation buffer) bitwise those through a (1, T) buffer of its own: one forward of one
//     sequence either way;
//   - after the logits rows and after generation (a pass of another shape, through its own
//     buffer), the batch's tokens are untouched and its loss is bitwise what it was;
//   - greedy gpt2_generate (temperature 0) picks the argmax of gpt2_forward_logits_row at each
//     step, and sliding past T (40 tokens from a 5-token prompt) keeps working;
//   - sampling with one seed twice gives one sequence.
#include <algorithm>
#include <string>
#include <vector>

#include "context.cuh"
#include "gpt2.cuh"
#include "gpt2_eval.cuh"
#include "model_init.h"
#include "ref/gpt2_cpu.h"
#include "sampler.cuh"
#include "test_util.cuh"

using namespace llmc;

namespace {

constexpr int kB = 3, kT = 37;

// Whether io's tokens are `batch` and its loss is bitwise `loss`.
bool batch_unchanged(const Context& ctx, GPT2* model, EvalIO* io, const std::vector<int>& batch,
                     float loss, const char* after) {
    const bool same_tokens = std::equal(batch.begin(), batch.end(), io->tokens);
    const float again = gpt2_eval_loss(ctx, model, io);
    const bool ok = same_tokens && again == loss;
    std::printf("  after %s: batch tokens unchanged %s, loss %.9g before %.9g after %s\n", after,
                same_tokens ? "yes" : "NO", loss, again, ok ? "ok" : "FAIL");
    return ok;
}

// The window of the text ids[0, i) that sampling gives the model, in sequence 0 of io.
void put_window(const std::vector<int>& ids, int i, EvalIO* io) {
    const int len = std::min(i, io->T);
    std::copy(ids.begin() + (i - len), ids.begin() + i, io->inputs());
    std::fill(io->inputs() + len, io->inputs() + io->T, ids[i - 1]);
}

}  // namespace

int main() {
    skip_if_no_device();
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    GPT2Config cfg;
    cfg.max_seq_len = 64;
    cfg.vocab_size = 1000;
    cfg.padded_vocab_size = 1024;
    cfg.num_layers = 2;
    cfg.num_heads = 4;
    cfg.channels = 128;
    std::vector<float> params;
    gpt2_init_random(cfg, 1234, &params);
    // Larger embeddings than GPT-2's init, so the logits spread over a few units.
    const size_t wte = param_layout(cfg).offsets[kWte];
    for (size_t i = 0; i < (size_t)cfg.padded_vocab_size * cfg.channels; i++)
        params[wte + i] *= 20.0f;
    round_to_floatx(params);  // the CPU reference sees the weights the GPU holds
    GPT2 model;
    gpt2_create(ctx, &model, cfg, params, kB, kT);
    const int N = kB * kT, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    EvalIO batch_io, row_io;
    eval_io_create(&batch_io, kB, kT);
    eval_io_create(&row_io, 1, kT);
    Rng rng(99);
    for (int i = 0; i < 2 * N; i++) batch_io.tokens[i] = rng.randint(V);
    const std::vector<int> batch(batch_io.tokens, batch_io.tokens + 2 * N);
    std::copy(batch.begin(), batch.begin() + kT, row_io.inputs());

    DeviceBuffer<floatX> all_logits((size_t)N * Vp);
    const float loss_before = gpt2_eval_loss(ctx, &model, &batch_io, all_logits.get());
    const std::vector<float> full = download(all_logits.get(), (size_t)N * Vp);
    GPT2Cpu cpu;
    cpu.init(cfg, params);
    cpu.forward(batch.data(), nullptr, 1, kT);  // sequence 0 alone

    const bool fp32 = sizeof(floatX) == sizeof(float);
    bool shared_same = true;
    for (int pos : {0, 17, kT - 1}) {
        std::vector<float> row(V), shared(V), own(V), ref(V);
        gpt2_forward_logits_row(ctx, &model, &row_io, pos, row.data());
        gpt2_forward_logits_row(ctx, &model, &batch_io, pos, shared.data());
        shared_same = shared_same && std::memcmp(row.data(), shared.data(), V * sizeof(float)) == 0;
        std::copy(full.begin() + (size_t)pos * Vp, full.begin() + (size_t)pos * Vp + V,
                  own.begin());
        std::copy(cpu.acts.logits.begin() + (size_t)pos * Vp,
                  cpu.acts.logits.begin() + (size_t)pos * Vp + V, ref.begin());
        char name[64];
        std::snprintf(name, sizeof(name), "pos %d vs the full forward", pos);
        check_close(name, row, own, (fp32 ? 1e-5f : 4 * kBf16RoundingRel) * max_abs(own), 0.0f);
        if (fp32) {
            std::snprintf(name, sizeof(name), "pos %d vs the CPU reference", pos);
            check_close(name, row, ref, 1e-4f * max_abs(ref), 0.0f);
        }
    }
    std::printf("  logits rows through the (B, T) buffer bitwise those through a (1, T) one %s\n",
                shared_same ? "ok" : "FAIL");
    record_result(shared_same);
    record_result(batch_unchanged(ctx, &model, &batch_io, batch, loss_before, "the logits rows"));

    // Greedy: every token is the argmax of the logits at the end of the text so far, the
    // window sliding once the text passes T.
    std::vector<int> ids = {5, 17, 900, 3, 999};
    SamplerOptions greedy;
    greedy.temperature = 0.0f;
    uint64_t state = 1;
    std::string why;
    const bool ok = gpt2_generate(ctx, &model, &row_io, &ids, 40, greedy, &state, &why);
    int agree = 0;
    for (int i = 5; ok && i < (int)ids.size(); i++) {
        put_window(ids, i, &row_io);
        std::vector<float> logits(V);
        gpt2_forward_logits_row(ctx, &model, &row_io, std::min(i, kT) - 1, logits.data());
        agree += (int)(std::max_element(logits.begin(), logits.end()) - logits.begin()) == ids[i];
    }
    std::printf("  greedy: %d of 40 tokens are the argmax of their position's logits %s\n", agree,
                ok && agree == 40 ? "ok" : why.c_str());
    record_result(ok && agree == 40);

    // Sampling: one seed, one sequence.
    SamplerOptions sample;
    sample.top_k = 50;
    std::vector<int> a = {7}, b = {7};
    uint64_t sa = 42, sb = 42;
    const bool ran = gpt2_generate(ctx, &model, &row_io, &a, 20, sample, &sa, &why) &&
                     gpt2_generate(ctx, &model, &row_io, &b, 20, sample, &sb, &why);
    std::printf("  seed 42 twice: %s\n", ran && a == b ? "same 20 tokens ok" : "FAIL");
    record_result(ran && a == b);
    record_result(batch_unchanged(ctx, &model, &batch_io, batch, loss_before, "generation"));
    return test_summary("test_generate");
}
