// test_layernorm.cu: layernorm forward and backward against the CPU reference (cpu_ops.h).
//
// Shapes: GPT-2 (N=4096, C=768), small and odd ones (N=77 with C=128 and C=96; N=33, C=13,
// which takes the one-element path; N=5, C=1600, GPT-2 XL's width with few warps per block;
// N=9, C=2048, too wide for the row-in-registers kernels in bf16), and more rows than three per
// warp of the backward's grid (N=12345 at C=768, N=9001 at C=1024, N=6007 at C=1600), so that
// variant 2's ring of staged rows wraps around and the column-slice kernels of the wide rows
// (C=1600 and 2048 with vector loads: a last slice of 64 and 512 columns in bf16) sum several
// rows per warp.
// Inputs have a mean of 2, so a one-pass variance would show. The backward starts from random
// dinp, dweight, dbias (it accumulates) and is run twice with the scratch poisoned: results
// must be bitwise identical.
// Everything runs three times: with the first backward kernels (variant 0) on one stream; with
// variant 1 (ctx.layernorm_backward_variant: the rows-in-flight kernel where GPT-2's widths take
// the register-held path), the weight/bias reduction on the branch stream (reduce_on_branch) and
// programmatic dependent launch where the device has it (sm_90+); with variant 2 (the
// staged-rows kernel there) on one stream, with programmatic dependent launch. The backward's
// results must be bitwise the same in every pass.
#include <vector>

#include "context.cuh"
#include "layernorm.cuh"
#include "ref/cpu_ops.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

// Statistics are float sums of C <= 1600 values of size ~2, in per-lane runs of <= 50 then a
// 5-level tree: relative error ~1e-7 typically, <= ~3e-6 in the worst case; 1e-5 leaves room.
// mean and rstd are float in both builds and the inputs are the same floatX values.
constexpr float kStatAtol = 1e-6f;
constexpr float kStatRtol = 1e-5f;
// out = (x - mean) * rstd * w + b, |out| <= ~6: the statistics' errors above times rstd*w.
// dinp: per-row float sums of C terms, |dinp| <= ~10. dweight, dbias: float sums over N <= 12345
// rows of terms <= ~2 (|sum| ~ 40-110), in runs of <= ~33 then fixed trees: ~1e-5, 10x margin.
constexpr float kOutAtol = 2e-5f;
constexpr float kDinpAtol = 2e-5f;
constexpr float kParamGradAtol = 1e-4f;
#if defined(ENABLE_BF16)
// Every floatX output is rounded once to bf16 (half an ulp, kBf16RoundingRel); 2x that.
constexpr float kOutRtol = 2 * kBf16RoundingRel;
#else
constexpr float kOutRtol = 1e-5f;
#endif

struct Shape {
    const char* name;
    int N, C;
};

struct Data {
    std::vector<float> inp, weight, bias, dout, dinp0, dweight0, dbias0, dres0;
};

Data make_data(const Shape& s, uint64_t seed) {
    Rng rng(seed);
    const size_t NC = (size_t)s.N * s.C;
    Data d;
    d.inp.resize(NC);
    d.dout.resize(NC);
    d.dinp0.resize(NC);
    d.weight.resize(s.C);
    d.bias.resize(s.C);
    d.dweight0.resize(s.C);
    d.dbias0.resize(s.C);
    d.dres0.resize(s.C);
    fill_uniform(d.inp, rng, 1.0f, 3.0f);
    fill_uniform(d.weight, rng, 0.5f, 1.5f);
    fill_uniform(d.bias, rng, -0.5f, 0.5f);
    fill_uniform(d.dout, rng, -1.0f, 1.0f);
    fill_uniform(d.dinp0, rng, -1.0f, 1.0f);
    fill_uniform(d.dweight0, rng, -1.0f, 1.0f);
    fill_uniform(d.dbias0, rng, -1.0f, 1.0f);
    fill_uniform(d.dres0, rng, -1.0f, 1.0f);
    for (std::vector<float>* v :
         {&d.inp, &d.weight, &d.bias, &d.dout, &d.dinp0, &d.dweight0, &d.dbias0, &d.dres0}) {
        round_to_floatx(*v);
    }
    return d;
}

struct Device {
    DeviceBuffer<floatX> inp, out, weight, bias, dout, dinp, dweight, dbias, dres;
    DeviceBuffer<float> mean, rstd;
    DeviceBuffer<unsigned char> scratch;
    Device(const Context& ctx, const Shape& s)
        : inp((size_t)s.N * s.C),
          out((size_t)s.N * s.C),
          weight(s.C),
          bias(s.C),
          dout((size_t)s.N * s.C),
          dinp((size_t)s.N * s.C),
          dweight(s.C),
          dbias(s.C),
          dres(s.C),
          mean(s.N),
          rstd(s.N),
          scratch(layernorm_backward_scratch_bytes(ctx, s.N, s.C)) {}
};

void poison_forward_outputs(Device& g) {
    poison(g.out.get(), g.out.size());
    poison(g.mean.get(), g.mean.size());
    poison(g.rstd.get(), g.rstd.size());
}

void check_forward(const char* op, const Device& g, const std::vector<float>& out,
                   const std::vector<float>& mean, const std::vector<float>& rstd) {
    char name[96];
    std::snprintf(name, sizeof(name), "%s out", op);
    check_close(name, download(g.out.get(), g.out.size()), out, kOutAtol, kOutRtol);
    std::snprintf(name, sizeof(name), "%s mean", op);
    check_close(name, download(g.mean.get(), g.mean.size()), mean, kStatAtol, kStatRtol);
    std::snprintf(name, sizeof(name), "%s rstd", op);
    check_close(name, download(g.rstd.get(), g.rstd.size()), rstd, kStatAtol, kStatRtol);
}

// The forward. Leaves the CPU statistics of inp in mean_ref / rstd_ref.
void test_forward(const Context& ctx, const Shape& s, const Data& d, Device& g,
                  std::vector<float>* mean_ref, std::vector<float>* rstd_ref) {
    const size_t NC = (size_t)s.N * s.C;
    std::vector<float> out(NC), mean(s.N), rstd(s.N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), d.inp.data(), d.weight.data(),
                           d.bias.data(), s.N, s.C);
    round_to_floatx(out);
    poison_forward_outputs(g);
    layernorm_forward(ctx, g.out.get(), g.mean.get(), g.rstd.get(), g.inp.get(), g.weight.get(),
                      g.bias.get(), s.N, s.C);
    check_forward("layernorm_forward", g, out, mean, rstd);
    *mean_ref = mean;
    *rstd_ref = rstd;
}

// How the parameter gradients start: the random values of Data (added to), zeros (added to),
// or NaN with accumulate_param_grads = false (written over, never read). dinp always starts
// from Data's values.
enum class GradInit { kRandom, kZeros, kPoisonWrite };

// Restores the accumulated gradients, poisons the scratch, runs (with the residual-bias sums
// when with_dres); returns the gradient bytes.
std::vector<unsigned char> run_backward(const Context& ctx, const Shape& s, const Data& d,
                                        Device& g, bool with_dres,
                                        GradInit init = GradInit::kRandom) {
    upload(g.dinp.get(), d.dinp0);
    for (auto [buf, host] : {std::pair{&g.dweight, &d.dweight0}, std::pair{&g.dbias, &d.dbias0},
                             std::pair{&g.dres, &d.dres0}}) {
        if (init == GradInit::kRandom) upload(buf->get(), *host);
        if (init == GradInit::kZeros) upload(buf->get(), std::vector<float>(buf->size(), 0.0f));
        if (init == GradInit::kPoisonWrite) poison(buf->get(), buf->size());
    }
    poison(g.scratch.get(), g.scratch.size());
    const bool on_branch = (ctx.branches & kBranchReduces) != 0;
    layernorm_backward(ctx, g.dinp.get(), g.dweight.get(), g.dbias.get(), g.scratch.get(),
                       g.dout.get(), g.inp.get(), g.weight.get(), g.mean.get(), g.rstd.get(), s.N,
                       s.C, with_dres ? g.dres.get() : nullptr, on_branch,
                       init != GradInit::kPoisonWrite);
    if (on_branch) branch_join(ctx);
    std::vector<unsigned char> bytes = download_bytes(g.dinp.get(), g.dinp.size() * sizeof(floatX));
    for (const DeviceBuffer<floatX>* b : {&g.dweight, &g.dbias, &g.dres}) {
        const std::vector<unsigned char> more =
            download_bytes(b->get(), b->size() * sizeof(floatX));
        bytes.insert(bytes.end(), more.begin(), more.end());
    }
    return bytes;
}

// Returns the first run's bytes (dinp, dweight, dbias, dres_bias), for the comparison between
// the two passes.
std::vector<unsigned char> test_backward(const Context& ctx, const Shape& s, const Data& d,
                                         Device& g, const std::vector<float>& mean,
                                         const std::vector<float>& rstd) {
    // Both sides use the CPU statistics, so this checks the backward alone.
    upload(g.mean.get(), mean);
    upload(g.rstd.get(), rstd);
    std::vector<float> dinp = d.dinp0, dweight = d.dweight0, dbias = d.dbias0;
    cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), d.dout.data(), d.inp.data(),
                            d.weight.data(), mean.data(), rstd.data(), s.N, s.C);
    const std::vector<unsigned char> plain = run_backward(ctx, s, d, g, false);
    check_close("layernorm_backward dres_bias untouched when not asked for",
                download(g.dres.get(), g.dres.size()), d.dres0, 0.0f, 0.0f);
    const std::vector<unsigned char> first = run_backward(ctx, s, d, g, true);
    check_close("layernorm_backward dinp", download(g.dinp.get(), g.dinp.size()), dinp, kDinpAtol,
                kOutRtol);
    check_close("layernorm_backward dweight", download(g.dweight.get(), g.dweight.size()), dweight,
                kParamGradAtol, kOutRtol);
    check_close("layernorm_backward dbias", download(g.dbias.get(), g.dbias.size()), dbias,
                kParamGradAtol, kOutRtol);
    // dres_bias += column sums of the updated dinp, as the device stored it (rounded to floatX):
    // the reference sums the device's own dinp in double, so only the sum's order differs.
    {
        const std::vector<float> dinp_dev = download(g.dinp.get(), g.dinp.size());
        std::vector<double> col(s.C, 0.0);
        for (int n = 0; n < s.N; n++) {
            for (int c = 0; c < s.C; c++) col[c] += dinp_dev[(size_t)n * s.C + c];
        }
        std::vector<float> dres(s.C);
        for (int c = 0; c < s.C; c++) dres[c] = (float)(d.dres0[c] + col[c]);
        check_close("layernorm_backward dres_bias", download(g.dres.get(), g.dres.size()), dres,
                    kParamGradAtol, kOutRtol);
    }
    const size_t same = ((size_t)s.N * s.C + 2 * (size_t)s.C) * sizeof(floatX);
    check_bitwise_equal("layernorm_backward dinp, dweight, dbias the same with dres_bias",
                        std::vector<unsigned char>(plain.begin(), plain.begin() + same),
                        std::vector<unsigned char>(first.begin(), first.begin() + same));
    const std::vector<unsigned char> second = run_backward(ctx, s, d, g, true);
    check_bitwise_equal("layernorm_backward run-to-run", first, second);
    // The first micro-step's way: the parameter gradients written over NaN = added onto zeros.
    check_bitwise_equal("layernorm_backward written = added onto zeros",
                        run_backward(ctx, s, d, g, true, GradInit::kPoisonWrite),
                        run_backward(ctx, s, d, g, true, GradInit::kZeros));
    return first;
}

std::vector<unsigned char> test_shape(const Context& ctx, const Shape& s, uint64_t seed) {
    std::printf("%s: N=%d C=%d\n", s.name, s.N, s.C);
    const Data d = make_data(s, seed);
    Device g(ctx, s);
    upload(g.inp.get(), d.inp);
    upload(g.weight.get(), d.weight);
    upload(g.bias.get(), d.bias);
    upload(g.dout.get(), d.dout);
    std::vector<float> mean, rstd;
    test_forward(ctx, s, d, g, &mean, &rstd);
    return test_backward(ctx, s, d, g, mean, rstd);
}

}  // namespace

int main() {
    skip_if_no_device();
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    std::printf("test_layernorm (%s)\n", kPrecisionName);
    const Shape shapes[] = {
        {"gpt2", 4096, 768},
        {"small", 77, 128},
        {"C96", 77, 96},
        {"odd C (one-element path)", 33, 13},
        {"gpt2-xl width", 5, 1600},
        // Wider than the register-held kernels take (7 * 32 * 8 bf16 values): the generic path.
        {"C2048 (generic vector path)", 9, 2048},
        // 1024 in bf16: the rows-in-flight kernel with one row per warp (GPT-2 medium's width).
        {"gpt2-medium width", 300, 1024},
        // Over 3 rows per warp of the backward's grid (2 blocks of 8 warps per SM, 132 SMs: 2112
        // warps; more SMs stay under 12345 / 3): variant 2's two-stage ring is reused.
        {"gpt2 width, 5+ rows per warp", 12345, 768},
        {"gpt2-medium width, 4+ rows per warp", 9001, 1024},
        {"gpt2-xl width, 2+ rows per warp", 6007, 1600},
    };
    constexpr int kShapes = sizeof(shapes) / sizeof(shapes[0]);
    constexpr int kPasses = 3;  // pass p runs backward variant p
    std::vector<std::vector<unsigned char>> runs[kPasses];
    for (int pass = 0; pass < kPasses; pass++) {
        const bool on_branch = pass == 1;
        ctx.layernorm_backward_variant = pass;
        context_set_overlap(&ctx, on_branch ? kBranchReduces : 0, /*pdl=*/pass != 0);
        std::printf("-- backward variant %d, reduction on the branch %d, pdl %s\n", pass,
                    on_branch ? 1 : 0, ctx.pdl ? "on" : "off");
        for (int i = 0; i < kShapes; i++) runs[pass].push_back(test_shape(ctx, shapes[i], i + 1));
    }
    for (int pass = 1; pass < kPasses; pass++) {
        for (int i = 0; i < kShapes; i++) {
            char name[128];
            std::snprintf(name, sizeof(name), "pass %d = pass 1 (layernorm_backward, %s)", pass + 1,
                          shapes[i].name);
            check_bitwise_equal(name, runs[0][i], runs[pass][i]);
        }
    }
    return test_summary("test_layernorm");
}
