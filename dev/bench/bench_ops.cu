// bench_ops.cu: every memory-bound launcher of llmc/ against the device's measured copy
// bandwidth, at GPT-2 d12 training shapes.
//
//   build/<prec>/dev/bench/bench_ops [--runs N] [--classifier-rows R] [--only FAMILY]
//
//   --only FAMILY   time the copy and one family: encoder, layernorm, bias, classifier, optimizer
//
// Shapes: B=64, T=1024 (N = B*T = 65536 rows), C=768, V=50257, Vp=50304, all 124,475,904
// parameters of d12 (16 tensors) for AdamW and the global norm (also sharded: rank 0 of a ZeRO-1
// split over 2 GPUs); the fused classifier runs on R rows of (Vp) logits (default 8192: the
// trainer computes the classifier in chunks of rows). The layernorm backward runs at B=4 (N=4096)
// too, and at GPT-2 XL's width (C=1600) at B=4 and B=16.
//
// Method:
//   1. Copy bandwidth: cudaMemcpyAsync device-to-device of 1 GiB; bytes = 2 * size (read +
//      write). Its median is the ceiling the kernels are measured against.
//   2. Each op: inputs filled with seeded uniform random values on the device (never zeros;
//      token ids uniform in [0, V), and for the encoder also Zipf-like as in text: id k with
//      probability ~ 1/(k+1), so a few ids fill thousands of rows), 5 warm-up launches, then >= 20
//      timed launches, each timed alone with CUDA events on ctx.stream after a memset of a 2x-L2
//      buffer (so no input is still in L2). Ops that overwrite an input (the in-place classifier)
//      get it restored from a pristine copy before the flush, outside the timed region.
//   3. Bytes are the minimal traffic: each input read once, each output written once, an
//      accumulated output read and written once; scratch traffic and second passes are not
//      counted, so the % column is the distance from the floor. Each row prints its formula.
// Ops with kernel variants (layernorm_backward, fused_classifier, global_norm_squared) get a row
// per variant. Our kernels launch with programmatic dependent launch (PDL) as the trainer runs
// them by default (LLMC_PDL=0: without).
// Rows under 80% of the copy bandwidth are flagged with '<80%'. loss_accumulate moves 256 KiB:
// it is launch-bound by nature and is listed for completeness. Results: docs/results.md.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "adamw.cuh"
#include "classifier.cuh"
#include "context.cuh"
#include "encoder.cuh"
#include "global_norm.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "model_file.h"
#include "shard_map.h"
#include "test/test_util.cuh"

using namespace llmc;

namespace {

constexpr int kB = 64, kT = 1024, kC = 768, kL = 12, kV = 50257, kVp = 50304, kMaxT = 1024;
constexpr int kN = kB * kT;
constexpr int kSmallB = 4;                     // the layernorm backward's second batch size
constexpr int kLayernormBackwardVariants = 3;  // LLMC_LAYERNORM_BACKWARD_VARIANT 0, 1, 2
constexpr int kGlobalNormVariants = 2;         // LLMC_GLOBAL_NORM_VARIANT 0, 1
constexpr int kWarmup = 5;
constexpr double kFlagFraction = 0.8;  // rows below this share of the copy bandwidth are flagged
constexpr size_t kX = sizeof(floatX);

// Seeded hash of (seed, i): the same numbers for any grid, uniform in [0, 1).
__device__ __forceinline__ float hash_uniform(unsigned long long seed, size_t i) {
    unsigned long long z = seed * 0x9E3779B97F4A7C15ull + i;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

template <typename T>
__global__ void fill_uniform_kernel(T* __restrict__ out, size_t n, unsigned long long seed,
                                    float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        out[i] = from_float<T>(lo + (hi - lo) * hash_uniform(seed, i));
    }
}

// Token ids in [0, v): uniform, or with zipf log-uniform (P(id < k) = log(k + 1) / log(v + 1),
// ~ Zipf's law with exponent 1: id 0 is ~6% of the ids at v = 50257, as a newline or a comma is
// in English text).
__global__ void fill_tokens_kernel(int* __restrict__ out, size_t n, unsigned long long seed, int v,
                                   bool zipf) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float u = hash_uniform(seed, i);
        const int id = zipf ? (int)expf(u * logf(v + 1.0f)) - 1 : (int)(u * (float)v);
        out[i] = max(0, min(id, v - 1));
    }
}

template <typename T>
void fill(const Context& ctx, T* p, size_t n, unsigned long long seed, float lo, float hi) {
    fill_uniform_kernel<T><<<1024, 256, 0, ctx.stream>>>(p, n, seed, lo, hi);
    LLMC_CUDA_CHECK_LAST();
}

void fill_tokens(const Context& ctx, int* p, size_t n, unsigned long long seed, bool zipf = false) {
    fill_tokens_kernel<<<256, 256, 0, ctx.stream>>>(p, n, seed, kV, zipf);
    LLMC_CUDA_CHECK_LAST();
}

struct Timing {
    double median_ms, min_ms, p90_ms;
};

// Times `op` `runs` times after kWarmup launches. Before each launch: `prepare` (untimed
// setup, e.g. restoring an overwritten input), then the L2 flush.
class Timer {
  public:
    Timer(const Context& ctx, int runs) : ctx_(ctx), runs_(runs) {
        flush_bytes_ = 2 * (size_t)std::max(ctx.props.l2CacheSize, 1 << 20);
        LLMC_CUDA_CHECK(cudaMalloc(&flush_, flush_bytes_));
        starts_.resize(runs);
        stops_.resize(runs);
        for (int i = 0; i < runs; i++) {
            LLMC_CUDA_CHECK(cudaEventCreate(&starts_[i]));
            LLMC_CUDA_CHECK(cudaEventCreate(&stops_[i]));
        }
    }
    ~Timer() {
        for (int i = 0; i < runs_; i++) {
            cudaEventDestroy(starts_[i]);
            cudaEventDestroy(stops_[i]);
        }
        cudaFree(flush_);
    }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;
    size_t flush_bytes() const { return flush_bytes_; }

    Timing time(
        const std::function<void()>& op, const std::function<void()>& prepare = [] {}) {
        for (int i = 0; i < kWarmup; i++) {
            prepare();
            op();
        }
        for (int i = 0; i < runs_; i++) {
            prepare();
            LLMC_CUDA_CHECK(cudaMemsetAsync(flush_, i & 0xFF, flush_bytes_, ctx_.stream));
            LLMC_CUDA_CHECK(cudaEventRecord(starts_[i], ctx_.stream));
            op();
            LLMC_CUDA_CHECK(cudaEventRecord(stops_[i], ctx_.stream));
        }
        LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
        std::vector<double> ms(runs_);
        for (int i = 0; i < runs_; i++) {
            float t = 0.0f;
            LLMC_CUDA_CHECK(cudaEventElapsedTime(&t, starts_[i], stops_[i]));
            ms[i] = t;
        }
        std::sort(ms.begin(), ms.end());
        const size_t p90 = std::min(ms.size() - 1, (ms.size() * 9 + 9) / 10 - 1);
        return {ms[ms.size() / 2], ms[0], ms[p90]};
    }

  private:
    const Context& ctx_;
    int runs_;
    void* flush_ = nullptr;
    size_t flush_bytes_ = 0;
    std::vector<cudaEvent_t> starts_, stops_;
};

struct Row {
    std::string name, formula;
    double bytes;
    Timing t;
};

double gb_per_s(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

void print_row(const Row& r, double copy_gbs) {
    const double gbs = gb_per_s(r.bytes, r.t.median_ms);
    const double frac = gbs / copy_gbs;
    std::printf("| %-46s | %9.1f | %9.1f | %9.1f | %9.1f | %7.0f | %5.1f%% | %-4s | %s |\n",
                r.name.c_str(), r.bytes / 1e6, r.t.median_ms * 1e3, r.t.min_ms * 1e3,
                r.t.p90_ms * 1e3, gbs, 100.0 * frac, frac < kFlagFraction ? "<80%" : "",
                r.formula.c_str());
    std::fflush(stdout);
}

// Distinct token ids among the N inputs: the wte rows the encoder must touch at least once.
size_t distinct_tokens(const int* d_inp) {
    std::vector<int> h(kN);
    LLMC_CUDA_CHECK(cudaDeviceSynchronize());
    LLMC_CUDA_CHECK(cudaMemcpy(h.data(), d_inp, kN * sizeof(int), cudaMemcpyDeviceToHost));
    return std::unordered_set<int>(h.begin(), h.end()).size();
}

Row bench_copy(const Context& ctx, Timer& timer) {
    const size_t bytes = size_t(1) << 30;
    DeviceBuffer<float> src(bytes / sizeof(float)), dst(bytes / sizeof(float));
    fill(ctx, src.get(), src.size(), 1, -1.0f, 1.0f);
    const Timing t = timer.time([&] {
        LLMC_CUDA_CHECK(
            cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream));
    });
    return {"copy (cudaMemcpyAsync D2D, 1 GiB)", "2*size", 2.0 * bytes, t};
}

void bench_encoder(const Context& ctx, Timer& timer, std::vector<Row>* rows) {
    const size_t NC = (size_t)kN * kC;
    DeviceBuffer<int> inp(kN);
    DeviceBuffer<floatX> wte((size_t)kVp * kC), wpe((size_t)kMaxT * kC), out(NC);
    DeviceBuffer<floatX> dwte((size_t)kVp * kC), dwpe((size_t)kMaxT * kC), dout(NC);
    DeviceBuffer<unsigned char> scratch(encoder_backward_scratch_bytes(kB, kT, kC));
    fill(ctx, wte.get(), wte.size(), 12, -0.1f, 0.1f);
    fill(ctx, wpe.get(), wpe.size(), 13, -0.1f, 0.1f);
    fill(ctx, dwte.get(), dwte.size(), 14, -0.01f, 0.01f);
    fill(ctx, dwpe.get(), dwpe.size(), 15, -0.01f, 0.01f);
    fill(ctx, dout.get(), NC, 16, -0.01f, 0.01f);
    for (const bool zipf : {false, true}) {
        fill_tokens(ctx, inp.get(), kN, 11, zipf);
        const double U = (double)distinct_tokens(inp.get());
        const char* ids = zipf ? "Zipf" : "uniform";
        std::printf("encoder: %.0f distinct token ids among N=%d %s ones\n", U, kN, ids);
        // forward: ids (4N), the U distinct wte rows and T wpe rows read once, out written.
        Timing t = timer.time(
            [&] { encoder_forward(ctx, out.get(), inp.get(), wte.get(), wpe.get(), kB, kT, kC); });
        rows->push_back({std::string("encoder_forward, ") + ids + " ids",
                         "4N + X*(U*C + T*C + N*C)",
                         4.0 * kN + kX * (U * kC + (double)kT * kC + (double)NC), t});
        // backward: dout and ids read; the U dwte rows and T dwpe rows read and written (+=).
        t = timer.time([&] {
            encoder_backward(ctx, dwte.get(), dwpe.get(), scratch.get(), dout.get(), inp.get(), kB,
                             kT, kC, kV);
        });
        rows->push_back({std::string("encoder_backward, ") + ids + " ids",
                         "4N + X*(N*C + 2*U*C + 2*T*C)",
                         4.0 * kN + kX * ((double)NC + 2.0 * U * kC + 2.0 * kT * kC), t});
    }
}

void bench_layernorm(Context& ctx, Timer& timer, std::vector<Row>* rows) {
    const size_t NC = (size_t)kN * kC;
    DeviceBuffer<floatX> inp(NC), out(NC), dout(NC), dinp(NC);
    DeviceBuffer<floatX> weight(kC), bias(kC), dweight(kC), dbias(kC), dres_bias(kC);
    DeviceBuffer<float> mean(kN), rstd(kN);
    DeviceBuffer<unsigned char> scratch(layernorm_backward_scratch_bytes(ctx, kN, kC));
    fill(ctx, inp.get(), NC, 21, -1.0f, 1.0f);
    fill(ctx, weight.get(), kC, 23, 0.5f, 1.5f);
    fill(ctx, bias.get(), kC, 24, -0.1f, 0.1f);
    fill(ctx, dout.get(), NC, 25, -0.01f, 0.01f);
    fill(ctx, dinp.get(), NC, 26, -0.01f, 0.01f);
    fill(ctx, dweight.get(), kC, 27, -0.01f, 0.01f);
    fill(ctx, dbias.get(), kC, 28, -0.01f, 0.01f);
    fill(ctx, dres_bias.get(), kC, 29, -0.01f, 0.01f);
    const double nc = (double)NC;
    Timing t = timer.time([&] {
        layernorm_forward(ctx, out.get(), mean.get(), rstd.get(), inp.get(), weight.get(),
                          bias.get(), kN, kC);
    });
    rows->push_back(
        {"layernorm_forward", "X*(2*N*C + 2*C) + 8N", kX * (2 * nc + 2.0 * kC) + 8.0 * kN, t});
    // mean and rstd of `inp` are what the forward just saved: the backward's real inputs.
    // dout, inp read; dinp read and written (+=); weight read; dweight, dbias and the residual
    // projection's bias gradient read and written (the call the model makes). Each variant of
    // the first kernel (layernorm.cu; LLMC_LAYERNORM_BACKWARD_VARIANT) in turn, at B=64 and on
    // the first rows only at B=4 (N = 4096: a grid of one wave, where latency weighs more).
    const int chosen = ctx.layernorm_backward_variant;
    for (const int b : {kB, kSmallB}) {
        const int n = b * kT;
        const std::string at = b == kB ? "" : " B=" + std::to_string(b);
        for (int variant = 0; variant < kLayernormBackwardVariants; variant++) {
            ctx.layernorm_backward_variant = variant;
            t = timer.time([&] {
                layernorm_backward(ctx, dinp.get(), dweight.get(), dbias.get(), scratch.get(),
                                   dout.get(), inp.get(), weight.get(), mean.get(), rstd.get(), n,
                                   kC, dres_bias.get());
            });
            rows->push_back({"layernorm_backward" + at + ", variant " + std::to_string(variant),
                             "X*(4*N*C + 7*C) + 8N", kX * (4.0 * n * kC + 7.0 * kC) + 8.0 * n, t});
        }
    }
    ctx.layernorm_backward_variant = chosen;
    // GPT-2 XL's rows (C = 1600, the wide-row kernels in bf16; every variant takes them) at its
    // d48 micro-batches B=4 and B=16, on the first rows of the same buffers.
    constexpr int kWideC = 1600;
    DeviceBuffer<floatX> wide_w(kWideC), wide_b(kWideC), wide_dw(kWideC), wide_db(kWideC),
        wide_dr(kWideC);
    fill(ctx, wide_w.get(), kWideC, 31, 0.5f, 1.5f);
    fill(ctx, wide_b.get(), kWideC, 32, -0.1f, 0.1f);
    fill(ctx, wide_dw.get(), kWideC, 33, -0.01f, 0.01f);
    fill(ctx, wide_db.get(), kWideC, 34, -0.01f, 0.01f);
    fill(ctx, wide_dr.get(), kWideC, 35, -0.01f, 0.01f);
    for (const int b : {4, 16}) {
        const int n = b * kT;
        DeviceBuffer<unsigned char> wide_scratch(layernorm_backward_scratch_bytes(ctx, n, kWideC));
        layernorm_forward(ctx, out.get(), mean.get(), rstd.get(), inp.get(), wide_w.get(),
                          wide_b.get(), n, kWideC);
        t = timer.time([&] {
            layernorm_backward(ctx, dinp.get(), wide_dw.get(), wide_db.get(), wide_scratch.get(),
                               dout.get(), inp.get(), wide_w.get(), mean.get(), rstd.get(), n,
                               kWideC, wide_dr.get());
        });
        rows->push_back({"layernorm_backward C=1600 B=" + std::to_string(b), "X*(4*N*C + 7*C) + 8N",
                         kX * (4.0 * n * kWideC + 7.0 * kWideC) + 8.0 * n, t});
    }
}

// Bias gradients of the two projections whose output gradient is not the residual stream's
// (those two come out of the layernorm backward): qkv (3C) and fc (4C).
void bench_bias_backward(const Context& ctx, Timer& timer, std::vector<Row>* rows) {
    for (int OC : {3 * kC, 4 * kC}) {
        const size_t n = (size_t)kN * OC;
        DeviceBuffer<floatX> dout(n), dbias(OC);
        DeviceBuffer<float> scratch(matmul_bias_scratch_floats(OC));
        fill(ctx, dout.get(), n, 51, -0.01f, 0.01f);
        fill(ctx, dbias.get(), OC, 52, -0.01f, 0.01f);
        const Timing t = timer.time(
            [&] { matmul_bias_backward(ctx, dbias.get(), scratch.get(), dout.get(), kN, OC); });
        const std::string name = "bias backward, OC = " + std::to_string(OC / kC) + "C";
        rows->push_back({name, "X*(N*OC + 2*OC)", kX * ((double)n + 2.0 * OC), t});
    }
}

void bench_classifier(Context& ctx, Timer& timer, int R, std::vector<Row>* rows) {
    const size_t n = (size_t)R * kVp;
    DeviceBuffer<floatX> logits(n), pristine(n);
    DeviceBuffer<float> losses(R), loss(1);
    DeviceBuffer<int> targets(R);
    fill(ctx, pristine.get(), n, 31, -4.0f, 4.0f);
    fill_tokens(ctx, targets.get(), R, 32);
    // The classifier overwrites its logits with dlogits: restore them before every launch.
    const auto restore = [&] {
        LLMC_CUDA_CHECK(cudaMemcpyAsync(logits.get(), pristine.get(), n * kX,
                                        cudaMemcpyDeviceToDevice, ctx.stream));
    };
    const double r = R;
    Timing t;
    // Each variant of the kernel (classifier.cu; LLMC_CLASSIFIER_VARIANT) in turn.
    const int chosen = ctx.classifier_variant;
    for (int variant = 0; variant < 2; variant++) {
        ctx.classifier_variant = variant;
        const std::string v = ", variant " + std::to_string(variant);
        t = timer.time(
            [&] {
                fused_classifier(ctx, logits.get(), losses.get(), targets.get(), 1.0f / (kN), R, kV,
                                 kVp, true);
            },
            restore);
        // The V valid logits and the targets read once; Vp dlogits and the losses written.
        rows->push_back({"fused_classifier (R rows, dlogits" + v + ")", "X*R*(V + Vp) + 8R",
                         kX * r * ((double)kV + kVp) + 8.0 * r, t});
        t = timer.time(
            [&] {
                fused_classifier(ctx, logits.get(), losses.get(), targets.get(), 1.0f, R, kV, kVp,
                                 false);
            },
            restore);
        rows->push_back({"fused_classifier (R rows, loss only" + v + ")", "X*R*V + 8R",
                         kX * r * (double)kV + 8.0 * r, t});
    }
    ctx.classifier_variant = chosen;
    DeviceBuffer<float> all_losses(kN);
    fill(ctx, all_losses.get(), kN, 33, 5.0f, 12.0f);
    fill(ctx, loss.get(), 1, 34, 1.0f, 2.0f);
    t = timer.time([&] { loss_accumulate(ctx, loss.get(), all_losses.get(), kN, 1.0f / kN); });
    rows->push_back({"loss_accumulate (N losses)", "4N + 8", 4.0 * kN + 8.0, t});
}

// d12's 16 tensors in the model file's order; 2-D weights (wte, wpe, matrices) decay.
AdamWTensors d12_tensors() {
    const size_t C = kC, L = kL;
    const size_t sizes[16] = {kVp * C,       kMaxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
                              L * C * C,     L * C,     L * C, L * C, L * 4 * C * C, L * 4 * C,
                              L * 4 * C * C, L * C,     C,     C};
    const int decayed[16] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
    AdamWTensors t{};
    t.count = 16;
    t.offsets[0] = 0;
    for (int i = 0; i < 16; i++) {
        t.offsets[i + 1] = t.offsets[i] + sizes[i];
        t.decayed[i] = decayed[i];
    }
    return t;
}

// d12 as a model config (the shard map is built from one).
GPT2Config d12_config() {
    GPT2Config c;
    c.max_seq_len = kMaxT;
    c.vocab_size = kV;
    c.padded_vocab_size = kVp;
    c.num_layers = kL;
    c.num_heads = 12;
    c.channels = kC;
    return c;
}

void bench_optimizer(Context& ctx, Timer& timer, std::vector<Row>* rows) {
    const AdamWTensors tensors = d12_tensors();
    const size_t P = tensors.offsets[16];
    std::printf("adamw / global norm: P = %zu d12 parameters\n", P);
    // The trainer keeps fp32 master weights in the bf16 build only.
    const bool with_master = kX < sizeof(float);
    DeviceBuffer<floatX> params(P), grads(P);
    DeviceBuffer<float> m(P), v(P), master(with_master ? P : 1), norm2(1);
    DeviceBuffer<unsigned char> norm_scratch(global_norm_scratch_bytes(ctx));
    DeviceBuffer<AdamWStepValues> step_values(1);
    fill(ctx, params.get(), P, 41, -0.1f, 0.1f);
    fill(ctx, grads.get(), P, 42, -0.01f, 0.01f);
    fill(ctx, m.get(), P, 43, -0.001f, 0.001f);
    fill(ctx, v.get(), P, 44, 1e-8f, 1e-6f);
    if (with_master) fill(ctx, master.get(), P, 45, -0.1f, 0.1f);
    const AdamWStepValues sv{6e-4f, 10};
    LLMC_CUDA_CHECK(cudaMemcpy(step_values.get(), &sv, sizeof(sv), cudaMemcpyHostToDevice));
    const double p = (double)P;
    // Each variant of the norm's first pass (global_norm.cu; LLMC_GLOBAL_NORM_VARIANT) in turn:
    // the whole buffer, then rank 0's chunks of a ZeRO-1 shard over W = 2 (P/2 values, read at
    // their places in the whole buffer), into its own output so norm2 stays the whole norm.
    const GPT2Config cfg = d12_config();
    LLMC_CHECK(param_layout(cfg).total == P, "bench_ops: d12's layout has %zu parameters, not %zu",
               param_layout(cfg).total, P);
    ShardMap shard;
    std::string why;
    LLMC_CHECK(shard_map_build(cfg, 2, 0, &shard, &why), "%s", why.c_str());
    DeviceBuffer<float> shard_norm2(1);
    Timing t;
    const int chosen = ctx.global_norm_variant;
    for (int variant = 0; variant < kGlobalNormVariants; variant++) {
        ctx.global_norm_variant = variant;
        const std::string v = ", variant " + std::to_string(variant);
        t = timer.time(
            [&] { global_norm_squared(ctx, norm2.get(), norm_scratch.get(), grads.get(), P); });
        rows->push_back({"global_norm_squared (P values" + v + ")", "X*P + 4", kX * p + 4.0, t});
        t = timer.time([&] {
            global_norm_squared_sharded(ctx, shard_norm2.get(), norm_scratch.get(), grads.get(),
                                        shard);
        });
        rows->push_back({"global_norm_squared_sharded (W=2" + v + ")", "X*P/2 + 4",
                         kX * (double)shard.local_total() + 4.0, t});
    }
    ctx.global_norm_variant = chosen;
    // Set by name: the struct may grow fields (value-initialized here) without breaking this.
    AdamWHyper hyper{};
    hyper.beta1 = 0.9f;
    hyper.beta2 = 0.95f;
    hyper.eps = 1e-8f;
    hyper.weight_decay = 0.1f;
    hyper.grad_clip = 1.0f;
    t = timer.time([&] {
        adamw_update(ctx, params.get(), with_master ? master.get() : nullptr, m.get(), v.get(),
                     grads.get(), tensors, hyper, step_values.get(), norm2.get());
    });
    // grads read; m, v read and written; with master: master read and written, params written;
    // without: params read and written.
    if (with_master) {
        rows->push_back({"adamw_update (P params, master)", "P*(2X + 24)", p * (2.0 * kX + 24), t});
    } else {
        rows->push_back({"adamw_update (P params)", "P*(3X + 16)", p * (3.0 * kX + 16), t});
    }
}

void usage_exit(const char* prog) {
    std::fprintf(stderr,
                 "usage: %s [--runs N (>= 20, default 30)] [--classifier-rows R (default 8192)] "
                 "[--only encoder|layernorm|bias|classifier|optimizer]\n",
                 prog);
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    int runs = 30, rows_R = 8192;
    std::string only;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && std::strcmp(argv[i], "--runs") == 0) {
            runs = std::atoi(argv[++i]);
        } else if (i + 1 < argc && std::strcmp(argv[i], "--classifier-rows") == 0) {
            rows_R = std::atoi(argv[++i]);
        } else if (i + 1 < argc && std::strcmp(argv[i], "--only") == 0) {
            only = argv[++i];
            if (only != "encoder" && only != "layernorm" && only != "bias" &&
                only != "classifier" && only != "optimizer") {
                usage_exit(argv[0]);
            }
        } else {
            usage_exit(argv[0]);
        }
    }
    if (runs < 20 || rows_R < 1 || rows_R > kN) {
        std::fprintf(stderr, "error: --runs must be >= 20 and --classifier-rows in [1, %d]\n", kN);
        return 2;
    }
    skip_if_no_device();
    Context ctx;
    context_init(&ctx, 0, true);
    Timer timer(ctx, runs);
    std::printf(
        "bench_ops: %s (%d SMs, L2 %d MiB), %s build, B=%d T=%d C=%d Vp=%d, %d timed "
        "runs per op after %d warm-up, L2 flushed with a %zu MiB memset before each\n",
        ctx.props.name, ctx.props.multiProcessorCount, ctx.props.l2CacheSize >> 20, kPrecisionName,
        kB, kT, kC, kVp, runs, kWarmup, timer.flush_bytes() >> 20);
    std::printf("X = sizeof(floatX) = %zu, N = B*T = %d, R = %d classifier rows\n", kX, kN, rows_R);

    const Row copy = bench_copy(ctx, timer);
    const double copy_gbs = gb_per_s(copy.bytes, copy.t.median_ms);
    std::vector<Row> rows;
    const auto want = [&](const char* family) { return only.empty() || only == family; };
    if (want("encoder")) bench_encoder(ctx, timer, &rows);
    if (want("layernorm")) bench_layernorm(ctx, timer, &rows);
    if (want("bias")) bench_bias_backward(ctx, timer, &rows);
    if (want("classifier")) bench_classifier(ctx, timer, rows_R, &rows);
    if (want("optimizer")) bench_optimizer(ctx, timer, &rows);

    std::printf("\n| %-46s | %9s | %9s | %9s | %9s | %7s | %6s | %-4s | %s |\n", "op", "MB",
                "median us", "min us", "p90 us", "GB/s", "% copy", "flag", "minimal bytes");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    print_row(copy, copy_gbs);
    int flagged = 0;
    for (const Row& r : rows) {
        print_row(r, copy_gbs);
        if (gb_per_s(r.bytes, r.t.median_ms) < kFlagFraction * copy_gbs) flagged++;
    }
    std::printf("\ncopy bandwidth %.0f GB/s (median); %d of %zu ops under %.0f%% of it\n", copy_gbs,
                flagged, rows.size(), 100.0 * kFlagFraction);
    return 0;
}
