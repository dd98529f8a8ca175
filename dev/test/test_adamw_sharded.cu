// test_adamw_sharded.cu: the ZeRO-1 kernels on one GPU, each rank of W played in turn.
//
// adamw_update_sharded with rank r's ShardMap (its chunks of m, v, master concatenated; params
// and grads whole) against adamw_update over the whole arrays: in every chunk r owns, params,
// master, m and v must be bit-identical to the whole update (the same float math per element,
// the stochastic rounding drawn from the global index), and every element outside its chunks
// untouched. Assembling the W ranks' results gives the whole update bit for bit. The sum over
// the ranks of global_norm_squared_sharded equals global_norm_squared to float rounding (another
// summation order: rtol 1e-5 covers ~1e5 partial sums of positive terms at 2^-24 each, which
// bounds the relative error by n * eps only in the worst case; in practice it is ~1e-7). A
// non-finite norm leaves every array's bits. Configs: a GPT-2 shape at C=64 (vector path, W = 1,
// 2, 4) and C=54 with W=3 (chunks of 18: the one-element path).
#include <cmath>
#include <cstring>
#include <vector>

#include "adamw.cuh"
#include "context.cuh"
#include "global_norm.cuh"
#include "shard_map.h"
#include "test_util.cuh"

using namespace llmc;

namespace {

constexpr AdamWHyper kHyper = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 99};

GPT2Config config(int C, int NH, int L) {
    GPT2Config c;
    c.max_seq_len = 32;
    c.vocab_size = 100;
    c.padded_vocab_size = 128;
    c.num_layers = L;
    c.num_heads = NH;
    c.channels = C;
    return c;
}

struct Arrays {
    std::vector<float> params, master, m, v, grads;
};

std::vector<unsigned char> bytes_of(const std::vector<float>& v) {
    std::vector<unsigned char> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

void test_config(const Context& ctx, const GPT2Config& cfg, int W, bool use_master) {
    const ParamLayout lay = param_layout(cfg);
    const size_t n = lay.total;
    std::printf("C=%d L=%d W=%d master=%d (%zu parameters)\n", cfg.channels, cfg.num_layers, W,
                (int)use_master, n);
    Rng rng(1000 + W);
    Arrays a;
    a.master.resize(n), a.m.resize(n), a.v.resize(n), a.grads.resize(n);
    fill_normal(a.master, rng, 0.0f, 0.5f);
    fill_normal(a.m, rng, 0.0f, 0.01f);
    fill_uniform(a.v, rng, 0.0f, 1e-4f);
    fill_normal(a.grads, rng, 0.0f, 0.05f);
    round_to_floatx(a.grads);  // the GPU sees floatX gradients
    a.params = a.master;
    round_to_floatx(a.params);
    AdamWTensors tensors{};
    tensors.count = kNumParamTensors;
    for (int k = 0; k < kNumParamTensors; k++) {
        tensors.offsets[k] = lay.offsets[k];
        tensors.decayed[k] = param_is_decayed(k) ? 1 : 0;
    }
    tensors.offsets[kNumParamTensors] = n;
    AdamWStepValues sv{3e-3f, 4};
    DeviceBuffer<AdamWStepValues> d_sv(1);
    LLMC_CUDA_CHECK(cudaMemcpy(d_sv.get(), &sv, sizeof(sv), cudaMemcpyHostToDevice));
    DeviceBuffer<float> d_norm(1);
    DeviceBuffer<floatX> grads(n);
    upload(grads.get(), a.grads);
    DeviceBuffer<char> scratch(global_norm_scratch_bytes(ctx));
    global_norm_squared(ctx, d_norm.get(), scratch.get(), grads.get(), n);
    const float whole_norm = download(d_norm.get(), 1)[0];

    // The whole update.
    DeviceBuffer<floatX> params(n);
    DeviceBuffer<float> master(n), m(n), v(n);
    upload(params.get(), a.params), upload(master.get(), a.master);
    upload(m.get(), a.m), upload(v.get(), a.v);
    adamw_update(ctx, params.get(), use_master ? master.get() : nullptr, m.get(), v.get(),
                 grads.get(), tensors, kHyper, d_sv.get(), d_norm.get());
    const std::vector<float> ref_params = download(params.get(), n);
    const std::vector<float> ref_master = download(master.get(), n);
    const std::vector<float> ref_m = download(m.get(), n), ref_v = download(v.get(), n);

    std::vector<float> got_params(n, NAN), got_master(n, NAN), got_m(n, NAN), got_v(n, NAN);
    double norm_sum = 0.0;
    bool outside_untouched = true;
    for (int r = 0; r < W; r++) {
        ShardMap map;
        std::string why;
        LLMC_CHECK(shard_map_build(cfg, W, r, &map, &why), "%s", why.c_str());
        const size_t ln = map.local_total();
        std::vector<float> lmaster(ln), lm(ln), lv(ln);
        shard_global_to_local(map, a.master.data(), lmaster.data());
        shard_global_to_local(map, a.m.data(), lm.data());
        shard_global_to_local(map, a.v.data(), lv.data());
        DeviceBuffer<floatX> sp(n);
        DeviceBuffer<float> smaster(ln), sm(ln), sv_(ln);
        upload(sp.get(), a.params), upload(smaster.get(), lmaster);
        upload(sm.get(), lm), upload(sv_.get(), lv);
        global_norm_squared_sharded(ctx, d_norm.get(), scratch.get(), grads.get(), map);
        norm_sum += download(d_norm.get(), 1)[0];
        // Every rank clips with the same (summed) norm: the whole one here.
        LLMC_CUDA_CHECK(
            cudaMemcpy(d_norm.get(), &whole_norm, sizeof(float), cudaMemcpyHostToDevice));
        adamw_update_sharded(ctx, sp.get(), use_master ? smaster.get() : nullptr, sm.get(),
                             sv_.get(), grads.get(), map, kHyper, d_sv.get(), d_norm.get());
        const std::vector<float> p = download(sp.get(), n);
        std::vector<char> mine(n, 0);
        shard_for_each_chunk(map, [&](size_t, size_t go, size_t cnt) {
            for (size_t i = go; i < go + cnt; i++) mine[i] = 1;
        });
        for (size_t i = 0; i < n; i++) {
            if (mine[i])
                got_params[i] = p[i];
            else
                outside_untouched = outside_untouched && std::memcmp(&p[i], &a.params[i], 4) == 0;
        }
        shard_local_to_global(map, download(smaster.get(), ln).data(), 0, ln, got_master.data());
        shard_local_to_global(map, download(sm.get(), ln).data(), 0, ln, got_m.data());
        shard_local_to_global(map, download(sv_.get(), ln).data(), 0, ln, got_v.data());
    }
    record_result(outside_untouched);
    std::printf("  %-44s %s\n", "params outside a rank's chunks untouched",
                outside_untouched ? "ok" : "FAIL");
    check_bitwise_equal("params = whole update", bytes_of(got_params), bytes_of(ref_params));
    if (use_master)
        check_bitwise_equal("master = whole update", bytes_of(got_master), bytes_of(ref_master));
    check_bitwise_equal("m = whole update", bytes_of(got_m), bytes_of(ref_m));
    check_bitwise_equal("v = whole update", bytes_of(got_v), bytes_of(ref_v));
    const float sum = (float)norm_sum;
    check_close("sum of sharded squared norms", &sum, &whole_norm, 1, 0.0f, 1e-5f);
}

// A non-finite norm: the sharded update writes nothing.
void test_skip(const Context& ctx) {
    const GPT2Config cfg = config(64, 4, 2);
    const size_t n = param_layout(cfg).total;
    ShardMap map;
    std::string why;
    LLMC_CHECK(shard_map_build(cfg, 2, 1, &map, &why), "%s", why.c_str());
    Rng rng(7);
    std::vector<float> h(n);
    fill_normal(h, rng, 0.0f, 0.1f);
    DeviceBuffer<floatX> params(n), grads(n);
    DeviceBuffer<float> master(map.local_total()), m(map.local_total()), v(map.local_total());
    upload(params.get(), h), upload(grads.get(), h);
    std::vector<float> hl(map.local_total(), 0.5f);
    upload(master.get(), hl), upload(m.get(), hl), upload(v.get(), hl);
    AdamWStepValues sv{1e-2f, 1};
    DeviceBuffer<AdamWStepValues> d_sv(1);
    LLMC_CUDA_CHECK(cudaMemcpy(d_sv.get(), &sv, sizeof(sv), cudaMemcpyHostToDevice));
    DeviceBuffer<float> d_norm(1);
    const float nan = NAN;
    LLMC_CUDA_CHECK(cudaMemcpy(d_norm.get(), &nan, sizeof(float), cudaMemcpyHostToDevice));
    const auto before = download_bytes(params.get(), n * sizeof(floatX));
    adamw_update_sharded(ctx, params.get(), master.get(), m.get(), v.get(), grads.get(), map,
                         kHyper, d_sv.get(), d_norm.get());
    check_bitwise_equal("non-finite norm: params untouched",
                        download_bytes(params.get(), n * sizeof(floatX)), before);
    check_bitwise_equal("non-finite norm: m untouched",
                        download_bytes(m.get(), hl.size() * sizeof(float)), bytes_of(hl));
}

}  // namespace

int main() {
    skip_if_no_device();
    Context ctx;
    context_init(&ctx, 0, /*tf32=*/false);
    std::printf("test_adamw_sharded (%s)\n", kPrecisionName);
    const bool master = sizeof(floatX) != sizeof(float);
    for (int W : {1, 2, 4}) test_config(ctx, config(64, 4, 3), W, master);
    test_config(ctx, config(54, 6, 2), 3, master);
    test_config(ctx, config(54, 6, 2), 3, !master);
    test_skip(ctx);
    return test_summary("test_adamw_sharded");
}
