// test_classifier.cu: fused_classifier, classifier_chunked and loss_accumulate against the CPU
// reference (cpu::crossentropy_forward_backward, cpu::matmul_forward / _backward, a double sum).
//
// Shapes: GPT-2 (N=4096, V=50257, Vp=50304), N=77 with V=1000, Vp=1024, N=33 with V=999,
// Vp=1003 (odd Vp: the one-element path), and N=3 with V=5, Vp=8 (most threads see no column).
// The padded columns hold NaN on input: they must not reach the loss and must come back 0.
// One row is shifted by +100 (exp would overflow without the max); targets include 0 and V-1.
// The GPT-2 case runs twice: losses and dlogits must be bitwise identical; write_dlogits=false
// must leave the logits untouched.
// classifier_chunked (lm-head GEMM + fused classifier + lm-head gradient, chunk by chunk): N=77
// C=64 V=1000 Vp=1024 in chunks of 32 (two full, one of 13), N=130 C=64 with GPT-2's V=50257
// Vp=50304 in chunks of 48, N=33 C=48 V=999 Vp=1000 in one chunk of 33 and with a chunk larger
// than N. Forward only: the copied-out logits against a CPU matmul and the losses against the CPU
// cross-entropy of those logits. With the backward: the same losses bitwise, dlnf (overwritten,
// poisoned first) and dwte (accumulated onto random values) against the CPU matmul backward of
// the CPU dlogits, and a second run bitwise identical.
// Everything runs twice: with the first kernel (variant 0, programmatic dependent launch off),
// then with the staged-row kernel (ctx.classifier_variant = 1) and PDL on where the device has it
// (sm_90+); the two passes' losses and dlogits must be bitwise the same (the same arithmetic in
// the same order).
#include <algorithm>
#include <cmath>
#include <vector>

#include "classifier.cuh"
#include "context.cuh"
#include "ref/cpu_ops.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

// losses: log(s) + (m - x_target) with s a float sum of <= 50257 terms in per-thread runs of
// <= ~100, each run rescaled to the row max once (the fast exp's <= 3e-7), then a 10-level tree:
// relative error of s ~1e-6, so ~1e-6 absolute on the loss. Float in both builds, from the same
// floatX logits.
constexpr float kLossAtol = 1e-5f;
constexpr float kLossRtol = 1e-5f;
// dlogits = (p - onehot) * dloss: p carries the ~1e-6 relative error of s plus <= 3e-7 of its exp,
// so its absolute error is <= ~2e-6 for p <= 1 (this bounds the cancellation in p - 1).
constexpr float kDlogitsAtolPerDloss = 5e-6f;
#if defined(ENABLE_BF16)
// dlogits are rounded once to bf16 (half an ulp, kBf16RoundingRel); 2x that.
constexpr float kDlogitsRtol = 2 * kBf16RoundingRel;
#else
constexpr float kDlogitsRtol = 1e-5f;
#endif
// loss_accumulate: a float sum of N <= 4096 positive losses in runs of <= 4, then a 10-level
// tree, scaled and added: at most ~16 roundings of 6e-8 each, 1e-6; 2x that.
constexpr float kLossSumRtol = 2e-6f;

// classifier_chunked. Tolerances with an absolute part relative to the largest reference value
// (kChunk*AtolOfMax * max|ref|): the sums cancel (dlogits rows sum to 0), so single elements can
// be far smaller than the terms they are summed from.
#if defined(ENABLE_BF16)
// Logits: one bf16 rounding of a float sum of C <= 64 exact products: half an ulp
// (kBf16RoundingRel), 2x that.
constexpr float kChunkLogitsRtol = 2 * kBf16RoundingRel;
constexpr float kChunkLogitsAtolOfMax = 1e-5f;
// dlnf: the reference takes the CPU dlogits rounded to bf16; the GPU's bf16 dlogits equal them
// but for rare 1-ulp ties, each moving a sum by <= one ulp of the largest term; plus one
// rounding of the result (half an ulp, 2x that).
constexpr float kChunkDlnfRtol = 2 * kBf16RoundingRel;
constexpr float kChunkDlnfAtolOfMax = kBf16RoundingRel;
// dwte: one bf16 rounding per chunk as the chunks accumulate (<= 3 here), 2x those half ulps.
constexpr float kChunkDwteRtol = 2 * 3 * kBf16RoundingRel;
constexpr float kChunkDwteAtolOfMax = kBf16RoundingRel;
#else
// fp32 GEMMs (TF32 off): a few ulp over C <= 64 terms.
constexpr float kChunkLogitsRtol = 1e-5f;
constexpr float kChunkLogitsAtolOfMax = 1e-6f;
// dlogits carry ~1e-6 relative error (see above), and the float sums over up to Vp = 50304 terms
// ~sqrt(Vp) * 6e-8 ~ 1e-5 of the terms' size: 1e-4 leaves 10x.
constexpr float kChunkDlnfRtol = 1e-4f;
constexpr float kChunkDlnfAtolOfMax = 1e-5f;
constexpr float kChunkDwteRtol = 1e-4f;
constexpr float kChunkDwteAtolOfMax = 1e-5f;
#endif

struct Shape {
    const char* name;
    int N, V, Vp;
    float dloss;
};

struct Data {
    std::vector<float> logits;  // (N, Vp), NaN in the padded columns
    std::vector<int> targets;
};

Data make_data(const Shape& s, uint64_t seed) {
    Rng rng(seed);
    Data d;
    d.logits.resize((size_t)s.N * s.Vp);
    d.targets.resize(s.N);
    for (int n = 0; n < s.N; n++) {
        float* row = d.logits.data() + (size_t)n * s.Vp;
        const float shift = n == 1 ? 100.0f : 0.0f;
        for (int v = 0; v < s.V; v++) row[v] = shift + 2.0f * rng.normal();
        for (int v = s.V; v < s.Vp; v++) row[v] = NAN;
        d.targets[n] = rng.randint(s.V);
    }
    d.targets[0] = 0;
    d.targets[s.N - 1] = s.V - 1;
    round_to_floatx(d.logits);
    return d;
}

// The columns [V, Vp) of every row.
std::vector<float> padded_columns(const std::vector<float>& x, const Shape& s) {
    std::vector<float> pad;
    pad.reserve((size_t)s.N * (s.Vp - s.V));
    for (int n = 0; n < s.N; n++) {
        for (int v = s.V; v < s.Vp; v++) pad.push_back(x[(size_t)n * s.Vp + v]);
    }
    return pad;
}

struct RunBytes {
    std::vector<unsigned char> logits, losses;
};

RunBytes run_classifier(const Context& ctx, const Shape& s, const Data& d, floatX* logits,
                        float* losses, const int* targets, bool write_dlogits) {
    upload(logits, d.logits);
    poison(losses, s.N);
    fused_classifier(ctx, logits, losses, targets, s.dloss, s.N, s.V, s.Vp, write_dlogits);
    return {download_bytes(logits, d.logits.size() * sizeof(floatX)),
            download_bytes(losses, s.N * sizeof(float))};
}

// loss_accumulate over the GPU losses, into a loss that already holds 0.25; twice, bitwise.
void test_loss_accumulate(const Context& ctx, const Shape& s, const float* losses) {
    const std::vector<float> host_losses = download(losses, s.N);
    const float scale = 1.0f / (float)s.N;
    double sum = 0.0;
    for (float x : host_losses) sum += x;
    const std::vector<float> ref = {(float)(0.25 + sum * scale)};
    DeviceBuffer<float> loss(1);
    std::vector<unsigned char> runs[2];
    for (std::vector<unsigned char>& bytes : runs) {
        upload(loss.get(), std::vector<float>{0.25f});
        loss_accumulate(ctx, loss.get(), losses, s.N, scale);
        bytes = download_bytes(loss.get(), sizeof(float));
    }
    check_close("loss_accumulate", download(loss.get(), 1), ref, 0.0f, kLossSumRtol);
    check_bitwise_equal("loss_accumulate run-to-run", runs[0], runs[1]);
}

// Returns the first run's bytes (losses and dlogits), for the comparison between variants.
RunBytes test_shape(const Context& ctx, const Shape& s, uint64_t seed, bool test_determinism) {
    std::printf("%s: N=%d V=%d Vp=%d dloss=%g\n", s.name, s.N, s.V, s.Vp, s.dloss);
    const Data d = make_data(s, seed);
    const size_t NV = (size_t)s.N * s.Vp;
    DeviceBuffer<floatX> logits(NV);
    DeviceBuffer<float> losses(s.N);
    DeviceBuffer<int> targets(s.N);
    upload(targets.get(), d.targets);

    std::vector<float> ref_dlogits(NV), ref_losses(s.N);
    cpu::crossentropy_forward_backward(ref_dlogits.data(), ref_losses.data(), d.logits.data(),
                                       d.targets.data(), s.N, s.V, s.Vp, s.dloss);

    const RunBytes first =
        run_classifier(ctx, s, d, logits.get(), losses.get(), targets.get(), true);
    const std::vector<float> dlogits = download(logits.get(), NV);
    check_close("fused_classifier losses", download(losses.get(), s.N), ref_losses, kLossAtol,
                kLossRtol);
    check_close("fused_classifier dlogits", dlogits, ref_dlogits,
                kDlogitsAtolPerDloss * std::fabs(s.dloss), kDlogitsRtol);
    if (s.Vp > s.V) {
        check_close("fused_classifier padded dlogits == 0", padded_columns(dlogits, s),
                    padded_columns(ref_dlogits, s), 0.0f, 0.0f);
    }
    test_loss_accumulate(ctx, s, losses.get());
    if (test_determinism) {
        const RunBytes second =
            run_classifier(ctx, s, d, logits.get(), losses.get(), targets.get(), true);
        check_bitwise_equal("fused_classifier losses run-to-run", first.losses, second.losses);
        check_bitwise_equal("fused_classifier dlogits run-to-run", first.logits, second.logits);
    }

    // Loss only: same losses, logits left exactly as uploaded.
    const RunBytes loss_only =
        run_classifier(ctx, s, d, logits.get(), losses.get(), targets.get(), false);
    check_close("fused_classifier losses (no dlogits)", download(losses.get(), s.N), ref_losses,
                kLossAtol, kLossRtol);
    upload(logits.get(), d.logits);
    check_bitwise_equal("fused_classifier logits untouched (no dlogits)", loss_only.logits,
                        download_bytes(logits.get(), NV * sizeof(floatX)));
    return first;
}

struct ChunkShape {
    const char* name;
    int N, C, V, Vp, chunk_rows;
};

void test_chunked(const Context& ctx, const ChunkShape& s, uint64_t seed) {
    std::printf("%s: N=%d C=%d V=%d Vp=%d chunk_rows=%d\n", s.name, s.N, s.C, s.V, s.Vp,
                s.chunk_rows);
    Rng rng(seed);
    const size_t NC = (size_t)s.N * s.C, VC = (size_t)s.Vp * s.C, NV = (size_t)s.N * s.Vp;
    std::vector<float> lnf(NC), wte(VC), dwte0(VC);
    fill_normal(lnf, rng, 0.0f, 1.0f);
    fill_normal(wte, rng, 0.0f, 0.3f);  // logits ~ N(0, 0.3^2 C): a few units
    fill_uniform(dwte0, rng, -0.01f, 0.01f);
    round_to_floatx(lnf);
    round_to_floatx(wte);
    round_to_floatx(dwte0);
    std::vector<int> targets(s.N);
    for (int& t : targets) t = rng.randint(s.V);
    targets[s.N - 1] = s.V - 1;
    const float dloss = 1.0f / (float)s.N;

    DeviceBuffer<floatX> d_lnf(NC), d_wte(VC), d_dwte(VC), d_dlnf(NC), d_copy(NV);
    DeviceBuffer<floatX> d_logits((size_t)std::min(s.chunk_rows, s.N) * s.Vp);
    DeviceBuffer<float> d_losses(s.N);
    DeviceBuffer<int> d_targets(s.N);
    upload(d_lnf.get(), lnf);
    upload(d_wte.get(), wte);
    upload(d_targets.get(), targets);

    // Forward only: every chunk's logits copied out.
    poison(d_copy.get(), NV);
    poison(d_losses.get(), s.N);
    classifier_chunked(ctx, d_logits.get(), d_losses.get(), nullptr, nullptr, d_lnf.get(),
                       d_wte.get(), d_targets.get(), dloss, s.N, s.C, s.V, s.Vp, s.chunk_rows,
                       d_copy.get());
    std::vector<float> ref_logits(NV);
    cpu::matmul_forward(ref_logits.data(), lnf.data(), wte.data(), nullptr, s.N, s.C, s.Vp);
    const std::vector<float> logits = download(d_copy.get(), NV);
    check_close("classifier_chunked logits", logits, ref_logits,
                kChunkLogitsAtolOfMax * max_abs(ref_logits), kChunkLogitsRtol);
    // The loss and dlogits of the GPU's own logits: the classifier kernel is checked above, so
    // this isolates the chunking (row offsets, the last chunk) and the lm-head gradient.
    std::vector<float> ref_dlogits(NV), ref_losses(s.N);
    cpu::crossentropy_forward_backward(ref_dlogits.data(), ref_losses.data(), logits.data(),
                                       targets.data(), s.N, s.V, s.Vp, dloss);
    round_to_floatx(ref_dlogits);
    const std::vector<unsigned char> fwd_losses =
        download_bytes(d_losses.get(), s.N * sizeof(float));
    check_close("classifier_chunked losses", download(d_losses.get(), s.N), ref_losses, kLossAtol,
                kLossRtol);

    // With the backward, twice: dlnf poisoned (overwritten), dwte reset (accumulated).
    std::vector<float> ref_dlnf(NC, 0.0f), ref_dwte = dwte0;
    cpu::matmul_backward(ref_dlnf.data(), ref_dwte.data(), nullptr, ref_dlogits.data(), lnf.data(),
                         wte.data(), s.N, s.C, s.Vp);
    std::vector<unsigned char> runs[2][2];
    for (auto& run : runs) {
        upload(d_dwte.get(), dwte0);
        poison(d_dlnf.get(), NC);
        poison(d_losses.get(), s.N);
        classifier_chunked(ctx, d_logits.get(), d_losses.get(), d_dlnf.get(), d_dwte.get(),
                           d_lnf.get(), d_wte.get(), d_targets.get(), dloss, s.N, s.C, s.V, s.Vp,
                           s.chunk_rows);
        run[0] = download_bytes(d_dlnf.get(), NC * sizeof(floatX));
        run[1] = download_bytes(d_dwte.get(), VC * sizeof(floatX));
    }
    check_bitwise_equal("classifier_chunked losses (backward == forward)",
                        download_bytes(d_losses.get(), s.N * sizeof(float)), fwd_losses);
    check_close("classifier_chunked dlnf", download(d_dlnf.get(), NC), ref_dlnf,
                kChunkDlnfAtolOfMax * max_abs(ref_dlnf), kChunkDlnfRtol);
    check_close("classifier_chunked dwte", download(d_dwte.get(), VC), ref_dwte,
                kChunkDwteAtolOfMax * max_abs(ref_dwte), kChunkDwteRtol);
    check_bitwise_equal("classifier_chunked dlnf run-to-run", runs[0][0], runs[1][0]);
    check_bitwise_equal("classifier_chunked dwte run-to-run", runs[0][1], runs[1][1]);

    // The first micro-step's way: dwte written over NaN (accumulate_dwte false: the first chunk
    // writes, the rest add) = added onto zeros.
    std::vector<unsigned char> dwte_bytes[2];
    for (int written = 0; written < 2; written++) {
        if (written) {
            poison(d_dwte.get(), VC);
        } else {
            upload(d_dwte.get(), std::vector<float>(VC, 0.0f));
        }
        classifier_chunked(ctx, d_logits.get(), d_losses.get(), d_dlnf.get(), d_dwte.get(),
                           d_lnf.get(), d_wte.get(), d_targets.get(), dloss, s.N, s.C, s.V, s.Vp,
                           s.chunk_rows, nullptr, /*accumulate_dwte=*/written == 0);
        dwte_bytes[written] = download_bytes(d_dwte.get(), VC * sizeof(floatX));
    }
    check_bitwise_equal("classifier_chunked dwte written = added onto zeros", dwte_bytes[1],
                        dwte_bytes[0]);
}

}  // namespace

int main() {
    skip_if_no_device();
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    std::printf("test_classifier (%s)\n", kPrecisionName);
    const Shape shapes[] = {{"gpt2", 4096, 50257, 50304, 1.0f / 4096.0f},
                            {"small", 77, 1000, 1024, 1.0f},
                            {"odd Vp (one-element path)", 33, 999, 1003, 0.5f},
                            {"tiny V", 3, 5, 8, 1.0f}};
    const bool determinism[] = {true, false, true, false};
    std::vector<RunBytes> runs[2];
    for (int variant = 0; variant < 2; variant++) {
        ctx.classifier_variant = variant;
        context_set_overlap(&ctx, 0, /*pdl=*/variant == 1);
        std::printf("-- classifier variant %d, pdl %s\n", variant, ctx.pdl ? "on" : "off");
        for (int i = 0; i < 4; i++)
            runs[variant].push_back(test_shape(ctx, shapes[i], i + 1, determinism[i]));
        test_chunked(ctx, {"chunked, ragged last chunk", 77, 64, 1000, 1024, 32}, 5);
        test_chunked(ctx, {"chunked, GPT-2 vocab", 130, 64, 50257, 50304, 48}, 6);
        test_chunked(ctx, {"chunked, one chunk, V % 128 != 0", 33, 48, 999, 1000, 33}, 7);
        test_chunked(ctx, {"chunked, chunk > N", 33, 48, 999, 1000, 100}, 8);
    }
    for (int i = 0; i < 4; i++) {
        char name[128];
        std::snprintf(name, sizeof(name), "variant 1 = variant 0, %s: losses", shapes[i].name);
        check_bitwise_equal(name, runs[0][i].losses, runs[1][i].losses);
        std::snprintf(name, sizeof(name), "variant 1 = variant 0, %s: dlogits", shapes[i].name);
        check_bitwise_equal(name, runs[0][i].logits, runs[1][i].logits);
    }
    return test_summary("test_classifier");
}
