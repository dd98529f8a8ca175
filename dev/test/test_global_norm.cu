// test_global_norm.cu: global_norm_squared and global_norm_squared_sharded against a double sum
// (cpu::sum_of_squares), under every variant of pass 1 (ctx.global_norm_variant).
//
// Whole buffer: GPT-2 124M's parameter count (124475904), 1000003 (not a multiple of the vector
// width), 7, 0, and 1 << 20 from a pointer one element past an aligned one (the one-element
// path). Values are ~0.01 with spikes of 3 at the first, middle and last index, so a skipped
// head or tail shows. Sharded: every rank of W = 1, 2, 3 over a GPT-2 layout of ~14M parameters
// (C=384, L=6: several trips of the stride loop per thread, tensors crossed within a trip), one
// past an aligned pointer (the one-element path), and C=54 with W=3 (chunks of 18: the
// one-element path); the reference is the double sum of the rank's chunks.
// Each case runs twice per variant with scratch and output poisoned: bitwise identical, and every
// variant bitwise equal to variant 0 (they add the same squares in the same order); with W=1 the
// sharded norm is bitwise the whole one (the same order again).
#include <functional>
#include <string>
#include <vector>

#include "context.cuh"
#include "global_norm.cuh"
#include "ref/cpu_ops.h"
#include "shard_map.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

constexpr int kVariants = 2;  // LLMC_GLOBAL_NORM_VARIANT 0, 1

// A float sum of positive terms: each thread adds <= ~1000 squares in order, then fixed trees.
// Rounding errors of positive sums do not cancel in sign, but they are ~random in size:
// typically ~sqrt(1000) * 6e-8 / 2 ~ 1e-6 relative, worst case 1000 * 6e-8 = 6e-5. 2e-5 sits
// 20x above the typical case; a missing spike changes the sum by > 10%. The output is float
// in both builds and the inputs are the same floatX values, so one tolerance serves both.
constexpr float kRtol = 2e-5f;

// Runs `op` (which writes *out) twice under each variant with scratch and out poisoned; checks
// each against ref, each variant's runs against each other and every variant against variant
// 0, bitwise. Returns variant 0's bytes.
std::vector<unsigned char> check_variants(Context& ctx, const std::string& name, float ref,
                                          void* scratch, size_t scratch_bytes, float* out,
                                          const std::function<void()>& op) {
    const int chosen = ctx.global_norm_variant;
    std::vector<unsigned char> first;
    for (int variant = 0; variant < kVariants; variant++) {
        ctx.global_norm_variant = variant;
        const std::string v = name + ", variant " + std::to_string(variant);
        std::vector<unsigned char> runs[2];
        for (std::vector<unsigned char>& bytes : runs) {
            poison(static_cast<unsigned char*>(scratch), scratch_bytes);
            poison(out, 1);
            op();
            bytes = download_bytes(out, sizeof(float));
        }
        const std::vector<float> got = download(out, 1), want = {ref};
        check_close(v.c_str(), got, want, 0.0f, kRtol);
        check_bitwise_equal((v + " run-to-run").c_str(), runs[0], runs[1]);
        if (variant == 0) {
            first = runs[0];
        } else {
            check_bitwise_equal((v + " = variant 0").c_str(), runs[0], first);
        }
    }
    ctx.global_norm_variant = chosen;
    return first;
}

std::vector<float> spiked_values(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> h(n);
    fill_uniform(h, rng, -0.01f, 0.01f);
    if (n > 0) {
        h[0] = 3.0f;
        h[n / 2] = -3.0f;
        h[n - 1] = 3.0f;
    }
    round_to_floatx(h);
    return h;
}

void test_size(Context& ctx, const char* name, size_t n, size_t offset, uint64_t seed) {
    std::printf("%s: n=%zu offset=%zu\n", name, n, offset);
    const std::vector<float> h = spiked_values(n, seed);
    DeviceBuffer<floatX> values(n + offset);
    upload(values.get() + offset, h);
    DeviceBuffer<unsigned char> scratch(global_norm_scratch_bytes(ctx));
    DeviceBuffer<float> out(1);
    check_variants(ctx, "global_norm_squared", (float)cpu::sum_of_squares(h.data(), n),
                   scratch.get(), scratch.size(), out.get(), [&] {
                       global_norm_squared(ctx, out.get(), scratch.get(), values.get() + offset, n);
                   });
}

GPT2Config config(int C, int L, int V, int Vp) {
    GPT2Config c;
    c.max_seq_len = 64;
    c.vocab_size = V;
    c.padded_vocab_size = Vp;
    c.num_layers = L;
    c.num_heads = 6;
    c.channels = C;
    return c;
}

// Every rank of W over the gradients of cfg's layout, from `offset` elements past an aligned
// pointer; with W = 1 the sharded norm must be bitwise the whole one.
void test_sharded(Context& ctx, const GPT2Config& cfg, int W, size_t offset, uint64_t seed) {
    const size_t n = param_layout(cfg).total;
    std::printf("sharded: C=%d L=%d W=%d offset=%zu (%zu parameters)\n", cfg.channels,
                cfg.num_layers, W, offset, n);
    const std::vector<float> h = spiked_values(n, seed);
    DeviceBuffer<floatX> values(n + offset);
    upload(values.get() + offset, h);
    DeviceBuffer<unsigned char> scratch(global_norm_scratch_bytes(ctx));
    DeviceBuffer<float> out(1);
    for (int r = 0; r < W; r++) {
        ShardMap map;
        std::string why;
        LLMC_CHECK(shard_map_build(cfg, W, r, &map, &why), "%s", why.c_str());
        double ref = 0.0;
        shard_for_each_chunk(map, [&](size_t, size_t go, size_t count) {
            ref += cpu::sum_of_squares(h.data() + go, count);
        });
        const std::string name = "sharded rank " + std::to_string(r);
        const std::vector<unsigned char> sharded =
            check_variants(ctx, name, (float)ref, scratch.get(), scratch.size(), out.get(), [&] {
                global_norm_squared_sharded(ctx, out.get(), scratch.get(), values.get() + offset,
                                            map);
            });
        if (W == 1) {
            global_norm_squared(ctx, out.get(), scratch.get(), values.get() + offset, n);
            check_bitwise_equal("W=1 sharded = whole", sharded,
                                download_bytes(out.get(), sizeof(float)));
        }
    }
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
    const GPT2Config mid = config(384, 6, 8000, 8192);
    for (int W = 1; W <= 3; W++) test_sharded(ctx, mid, W, 0, 10 + W);
    test_sharded(ctx, mid, 2, 1, 14);                      // the one-element path
    test_sharded(ctx, config(54, 2, 100, 128), 3, 0, 15);  // chunks of 18: one-element path
    return test_summary("test_global_norm");
}
