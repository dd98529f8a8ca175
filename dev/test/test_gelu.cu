// test_gelu.cu: gelu_forward against the CPU reference (cpu::gelu_forward, in double).
//
// Sizes: GPT-2's fc output at B=4, T=1024 (N * 4C = 4096 * 3072), 1000003 (not a multiple of
// the vector width: the vector pass plus the one-element tail), 7 (tail only). Inputs are
// N(0, 2) with a few values out to +-12 (tanh saturated, and the cancellation in 1 + tanh for
// large negative x). The same values are also run from a buffer one element off alignment (the
// one-element path): the bytes must equal the vector path's, since the model recomputes GELU
// in the backward and relies on getting the forward's exact bits.
#include <vector>

#include "context.cuh"
#include "gelu.cuh"
#include "ref/cpu_ops.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

// tanh from the hardware exp2 and reciprocal (gelu.cuh) is within ~2e-7 absolute, and the
// polynomial adds a few roundings: ~1e-6 relative to x / 2. For x << 0 the output is tiny and
// 1 + tanh cancels, so the bound there is absolute: ~|x| * 2e-7 for |x| <= 12, so atol 2e-6. rtol
// 1e-5 is 10x the typical relative error.
constexpr float kAtol = 2e-6f;
#if defined(ENABLE_BF16)
// One rounding of the float result to bf16: half an ulp (kBf16RoundingRel), 2x that.
constexpr float kRtol = 2 * kBf16RoundingRel;
#else
constexpr float kRtol = 1e-5f;
#endif

void test_size(const Context& ctx, const char* name, size_t n, uint64_t seed) {
    std::printf("%s: n=%zu\n", name, n);
    Rng rng(seed);
    std::vector<float> h(n);
    fill_normal(h, rng, 0.0f, 2.0f);
    h[0] = -12.0f;
    h[n / 2] = 12.0f;
    h[n - 1] = -5.5f;
    round_to_floatx(h);
    std::vector<float> ref(n);
    cpu::gelu_forward(ref.data(), h.data(), n);

    DeviceBuffer<floatX> inp(n + 1), out(n + 1);
    upload(inp.get(), h);
    poison(out.get(), n + 1);
    gelu_forward(ctx, out.get(), inp.get(), n);
    check_close("gelu_forward", download(out.get(), n), ref, kAtol, kRtol);
    const std::vector<unsigned char> vec_bytes = download_bytes(out.get(), n * sizeof(floatX));

    // The same values one element off alignment: only the one-element path can take them.
    upload(inp.get() + 1, h);
    poison(out.get(), n + 1);
    gelu_forward(ctx, out.get() + 1, inp.get() + 1, n);
    check_bitwise_equal("gelu_forward unaligned == aligned",
                        download_bytes(out.get() + 1, n * sizeof(floatX)), vec_bytes);
}

}  // namespace

int main() {
    skip_if_no_device();
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    std::printf("test_gelu (%s)\n", kPrecisionName);
    test_size(ctx, "gpt2 fc (B=4, T=1024)", (size_t)4096 * 3072, 1);
    test_size(ctx, "odd n", 1000003, 2);
    test_size(ctx, "tiny n", 7, 3);
    return test_summary("test_gelu");
}
