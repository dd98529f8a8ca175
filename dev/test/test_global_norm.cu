// test_global_norm.cu: global_norm_squared against a double sum (cpu::sum_of_squares).
//
// Sizes: GPT-2 124M's parameter count (124475904), 1000003 (not a multiple of the vector
// width), 7, 0, and 1 << 20 from a pointer one element past an aligned one (the one-element
// path). Values are ~0.01 with spikes of 3 at the first, middle and last index, so a skipped
// head or tail shows. Each size runs twice with scratch and output poisoned: bitwise identical.
#include <vector>

#include "context.cuh"
#include "global_norm.cuh"
#include "ref/cpu_ops.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

// A float sum of positive terms: each thread adds <= ~1000 squares in order, then fixed trees.
// Rounding errors of positive sums do not cancel in sign, but they are ~random in size:
// typically ~sqrt(1000) * 6e-8 / 2 ~ 1e-6 relative, worst case 1000 * 6e-8 = 6e-5. 2e-5 sits
// 20x above the typical case; a missing spike changes the sum by > 10%. The output is float
// in both builds and the inputs are the same floatX values, so one tolerance serves both.
constexpr float kRtol = 2e-5f;

void test_size(const Context& ctx, const char* name, size_t n, size_t offset, uint64_t seed) {
    std::printf("%s: n=%zu offset=%zu\n", name, n, offset);
    Rng rng(seed);
    std::vector<float> h(n);
    fill_uniform(h, rng, -0.01f, 0.01f);
    if (n > 0) {
        h[0] = 3.0f;
        h[n / 2] = -3.0f;
        h[n - 1] = 3.0f;
    }
    round_to_floatx(h);
    const std::vector<float> ref = {(float)cpu::sum_of_squares(h.data(), n)};

    DeviceBuffer<floatX> values(n + offset);
    upload(values.get() + offset, h);
    DeviceBuffer<unsigned char> scratch(global_norm_scratch_bytes(ctx));
    DeviceBuffer<float> out(1);
    std::vector<unsigned char> runs[2];
    for (std::vector<unsigned char>& bytes : runs) {
        poison(scratch.get(), scratch.size());
        poison(out.get(), 1);
        global_norm_squared(ctx, out.get(), scratch.get(), values.get() + offset, n);
        bytes = download_bytes(out.get(), sizeof(float));
    }
    check_close("global_norm_squared", download(out.get(), 1), ref, 0.0f, kRtol);
    check_bitwise_equal("global_norm_squared run-to-run", runs[0], runs[1]);
}

}  // namespace

int main() {
    skip_if_no_device();
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    std::printf("test_global_norm (%s)\n", kPrecisionName);
    test_size(ctx, "gpt2 124M params", 124475904, 0, 1);
    test_size(ctx, "odd n", 1000003, 0, 2);
    test_size(ctx, "tiny n", 7, 0, 3);
    test_size(ctx, "misaligned (one-element path)", 1 << 20, 1, 4);
    test_size(ctx, "empty", 0, 0, 5);
    return test_summary("test_global_norm");
}
