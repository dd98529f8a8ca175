// test_encoder.cu: encoder forward and backward against the CPU reference (cpu_ops.h).
//
// Shapes: GPT-2 (B=4 and B=16, T=1024, C=768, V=50257), small and odd ones (B=1, T=77,
// C=128; C=96; C=13, which takes the one-element path), and V=7, where every token repeats
// ~600 times so the backward sums long runs. Ids: uniform; Zipf-like as in text (id k with
// probability ~ 1/(k+1): id 0 is ~6% of them, so its run crosses many of the backward's
// segments, 8 entries long below N = 16384 and 32 from there); one id everywhere (one run
// from the first segment to the last, partial one); and 64 copies of each id, so every run
// begins and ends on a segment boundary. wpe has
// maxT = T + 3 rows: rows >= T must stay untouched.
// The backward is run twice (scratch poisoned each time) and must be bitwise identical, and
// once more captured in a CUDA graph, as the trainer runs it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "context.cuh"
#include "encoder.cuh"
#include "ref/cpu_ops.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

// Forward: out = wte[id] + wpe[t] is one float add rounded once to floatX on both sides (the
// CPU result is rounded to floatX below), so the outputs must match exactly in both builds.
constexpr float kForwardAtol = 0.0f;
constexpr float kForwardRtol = 0.0f;
// Backward: the GPU sums each token's rows in float, the CPU in double. For runs of ~600
// O(1) terms the float rounding walk is ~sqrt(600) * 6e-8 * |partial sum ~ 15| ~ 2e-5; atol
// leaves 10x. A missing or doubled row changes an element by ~0.5.
constexpr float kBackwardAtol = 2e-4f;
#if defined(ENABLE_BF16)
// One final rounding to bf16 of the accumulated value: half an ulp, kBf16RoundingRel; 2x that.
constexpr float kBackwardRtol = 2 * kBf16RoundingRel;
#else
constexpr float kBackwardRtol = 1e-5f;
#endif

enum class Ids { kUniform, kZipf, kBlocksOf64 };

struct Shape {
    const char* name;
    int B, T, C, V;
    Ids ids = Ids::kUniform;
};

struct Data {
    std::vector<int> inp;
    std::vector<float> wte, wpe, dout, dwte0, dwpe0;
};

Data make_data(const Shape& s, int maxT, uint64_t seed) {
    Rng rng(seed);
    Data d;
    d.inp.resize((size_t)s.B * s.T);
    for (size_t i = 0; i < d.inp.size(); i++) {
        switch (s.ids) {
            case Ids::kUniform:
                d.inp[i] = rng.randint(s.V);
                break;
            case Ids::kZipf:  // log-uniform: P(id < k) = log(k + 1) / log(V + 1)
                d.inp[i] =
                    std::min(s.V - 1, (int)std::exp(rng.uniform() * std::log(s.V + 1.0)) - 1);
                break;
            case Ids::kBlocksOf64:
                d.inp[i] = (int)(i / 64) % s.V;
                break;
        }
    }
    d.wte.resize((size_t)s.V * s.C);
    d.wpe.resize((size_t)maxT * s.C);
    d.dout.resize((size_t)s.B * s.T * s.C);
    d.dwte0.resize(d.wte.size());
    d.dwpe0.resize(d.wpe.size());
    fill_uniform(d.wte, rng, -1.0f, 1.0f);
    fill_uniform(d.wpe, rng, -1.0f, 1.0f);
    fill_uniform(d.dout, rng, -1.0f, 1.0f);
    fill_uniform(d.dwte0, rng, -1.0f, 1.0f);
    fill_uniform(d.dwpe0, rng, -1.0f, 1.0f);
    for (std::vector<float>* v : {&d.wte, &d.wpe, &d.dout, &d.dwte0, &d.dwpe0}) round_to_floatx(*v);
    return d;
}

// How dwpe's rows t < T start (rows >= T always hold Data's values, which the backward must
// leave alone): Data's values (added to), zeros (added to), or NaN with accumulate_dwpe = false
// (written over, never read).
enum class GradInit { kRandom, kZeros, kPoisonWrite };

// Restores the initial gradients, poisons the scratch, runs the backward on ctx.stream; with
// graph, captures it into a CUDA graph first and launches the graph. Returns the gradient bytes.
std::vector<unsigned char> run_backward(const Context& ctx, const Shape& s, const Data& d,
                                        floatX* dwte, floatX* dwpe, void* scratch,
                                        size_t scratch_bytes, const floatX* dout, const int* inp,
                                        bool graph, GradInit init = GradInit::kRandom) {
    upload(dwte, d.dwte0);
    upload(dwpe, d.dwpe0);
    const size_t first_rows = (size_t)s.T * s.C;
    if (init == GradInit::kZeros) upload(dwpe, std::vector<float>(first_rows, 0.0f));
    if (init == GradInit::kPoisonWrite) poison(dwpe, first_rows);
    const bool accumulate_dwpe = init != GradInit::kPoisonWrite;
    poison(static_cast<unsigned char*>(scratch), scratch_bytes);
    if (graph) {
        cudaGraph_t g = nullptr;
        cudaGraphExec_t exec = nullptr;
        LLMC_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal));
        encoder_backward(ctx, dwte, dwpe, scratch, dout, inp, s.B, s.T, s.C, s.V, accumulate_dwpe);
        LLMC_CUDA_CHECK(cudaStreamEndCapture(ctx.stream, &g));
        LLMC_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        LLMC_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream));
        LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        LLMC_CUDA_CHECK(cudaGraphExecDestroy(exec));
        LLMC_CUDA_CHECK(cudaGraphDestroy(g));
    } else {
        encoder_backward(ctx, dwte, dwpe, scratch, dout, inp, s.B, s.T, s.C, s.V, accumulate_dwpe);
    }
    std::vector<unsigned char> bytes = download_bytes(dwte, d.dwte0.size() * sizeof(floatX));
    const std::vector<unsigned char> pe = download_bytes(dwpe, d.dwpe0.size() * sizeof(floatX));
    bytes.insert(bytes.end(), pe.begin(), pe.end());
    return bytes;
}

void test_shape(const Context& ctx, const Shape& s, uint64_t seed, bool test_graph) {
    std::printf("%s: B=%d T=%d C=%d V=%d\n", s.name, s.B, s.T, s.C, s.V);
    const int maxT = s.T + 3;
    const size_t N = (size_t)s.B * s.T;
    const Data d = make_data(s, maxT, seed);
    DeviceBuffer<int> inp(N);
    DeviceBuffer<floatX> wte(d.wte.size()), wpe(d.wpe.size()), out(N * s.C), dout(N * s.C);
    DeviceBuffer<floatX> dwte(d.wte.size()), dwpe(d.wpe.size());
    const size_t scratch_bytes = encoder_backward_scratch_bytes(s.B, s.T, s.C);
    DeviceBuffer<unsigned char> scratch(scratch_bytes);
    upload(inp.get(), d.inp);
    upload(wte.get(), d.wte);
    upload(wpe.get(), d.wpe);
    upload(dout.get(), d.dout);

    std::vector<float> ref_out(N * s.C);
    cpu::encoder_forward(ref_out.data(), d.inp.data(), d.wte.data(), d.wpe.data(), s.B, s.T, s.C);
    round_to_floatx(ref_out);
    poison(out.get(), out.size());
    encoder_forward(ctx, out.get(), inp.get(), wte.get(), wpe.get(), s.B, s.T, s.C);
    check_close("encoder_forward out", download(out.get(), out.size()), ref_out, kForwardAtol,
                kForwardRtol);

    std::vector<float> ref_dwte = d.dwte0, ref_dwpe = d.dwpe0;
    cpu::encoder_backward(ref_dwte.data(), ref_dwpe.data(), d.dout.data(), d.inp.data(), s.B, s.T,
                          s.C);
    const std::vector<unsigned char> first =
        run_backward(ctx, s, d, dwte.get(), dwpe.get(), scratch.get(), scratch_bytes, dout.get(),
                     inp.get(), false);
    check_close("encoder_backward dwte", download(dwte.get(), dwte.size()), ref_dwte, kBackwardAtol,
                kBackwardRtol);
    check_close("encoder_backward dwpe (all maxT rows)", download(dwpe.get(), dwpe.size()),
                ref_dwpe, kBackwardAtol, kBackwardRtol);
    const std::vector<unsigned char> second =
        run_backward(ctx, s, d, dwte.get(), dwpe.get(), scratch.get(), scratch_bytes, dout.get(),
                     inp.get(), false);
    check_bitwise_equal("encoder_backward run-to-run", first, second);
    // The first micro-step's way: dwpe's rows < T written over NaN = added onto zeros (rows >= T
    // untouched, dwte added to either way).
    check_bitwise_equal(
        "encoder_backward dwpe written = added onto zeros",
        run_backward(ctx, s, d, dwte.get(), dwpe.get(), scratch.get(), scratch_bytes, dout.get(),
                     inp.get(), false, GradInit::kPoisonWrite),
        run_backward(ctx, s, d, dwte.get(), dwpe.get(), scratch.get(), scratch_bytes, dout.get(),
                     inp.get(), false, GradInit::kZeros));
    if (test_graph) {
        const std::vector<unsigned char> graphed =
            run_backward(ctx, s, d, dwte.get(), dwpe.get(), scratch.get(), scratch_bytes,
                         dout.get(), inp.get(), true);
        check_bitwise_equal("encoder_backward in a CUDA graph vs eager", first, graphed);
    }
}

}  // namespace

int main() {
    skip_if_no_device();
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    std::printf("test_encoder (%s)\n", kPrecisionName);
    test_shape(ctx, {"gpt2", 4, 1024, 768, 50257}, 1, /*test_graph=*/true);
    test_shape(ctx, {"small", 1, 77, 128, 1000}, 2, false);
    test_shape(ctx, {"C96", 3, 77, 96, 1000}, 3, false);
    test_shape(ctx, {"odd C (one-element path)", 2, 33, 13, 50}, 4, true);
    test_shape(ctx, {"long runs", 4, 1024, 768, 7}, 5, false);
    // N >= 16384 takes 32-entry segments, smaller N 8-entry ones: both kinds for each id law.
    test_shape(ctx, {"gpt2 B=16 (32-entry segments)", 16, 1024, 768, 50257}, 6, false);
    test_shape(ctx, {"gpt2 B=16, Zipf ids", 16, 1024, 768, 50257, Ids::kZipf}, 7, true);
    test_shape(ctx, {"gpt2 B=4, Zipf ids", 4, 1024, 768, 50257, Ids::kZipf}, 8, false);
    test_shape(ctx, {"Zipf ids, odd C", 3, 77, 13, 50, Ids::kZipf}, 9, false);
    test_shape(ctx, {"one id (one run through every segment)", 3, 77, 96, 1}, 10, false);
    test_shape(ctx, {"one id, 32-entry segments", 16, 1031, 64, 1}, 11, false);
    test_shape(ctx, {"runs on segment boundaries", 16, 1024, 768, 256, Ids::kBlocksOf64}, 12,
               false);
    test_shape(ctx,
               {"runs on segment boundaries, 8-entry segments", 4, 1024, 768, 64, Ids::kBlocksOf64},
               13, false);
    return test_summary("test_encoder");
}
