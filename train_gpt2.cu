// train_gpt2.cu: the trainer. Parse the options, create the context, build the model, run the
// loop: each step fills the pinned token buffer from the data loader, launches the step (a CUDA
// graph after the first), waits for it at the step boundary and prints its line.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dataloader.h"
#include "gpt2.cuh"
#include "mfu.h"
#include "model_init.h"
#include "train_config.h"

using namespace llmc;

namespace {

// Reads the model file, or takes a preset's shape; the preset's random weights are made later,
// once every cheap check has passed.
bool load_model_or_preset(const TrainConfig& tc, GPT2Config* cfg, std::vector<float>* params) {
    if (config_from_preset(tc.model, cfg)) return true;
    int version = 0;
    read_model_file(tc.model, cfg, params, &version);
    std::printf("model            %s (version %d)\n", tc.model.c_str(), version);
    return false;
}

float lr_at_step(const TrainConfig& tc, int step) {  // step is 1-based
    if (tc.warmup > 0 && step <= tc.warmup) return tc.lr * (float)step / (float)tc.warmup;
    return tc.lr;
}

// Fills micro-batch slots of io.tokens: inputs then targets for each micro-step. Returns the
// host milliseconds it took: the time the GPU waits for data, since the step launches after it.
// With prefetch the loader's thread has read the batches during the previous step, and this is
// a copy out of its ring.
double fill_tokens(DataLoader* loader, GPT2* m, int micro_steps) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t N = (size_t)m->B * m->T;
    for (int i = 0; i < micro_steps; i++) {
        int* slot = m->io.tokens + (size_t)i * 2 * N;
        dataloader_next_batch(loader, slot, slot + N);
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The train loader shuffles per epoch from the run's seed and prefetches a whole step's micro-
// batches; the validation loader keeps name order so every validation sees the same batches.
void init_loaders(const TrainConfig& tc, int vocab_size, int grad_accum, DataLoader* train,
                  DataLoader* val) {
    DataLoaderOptions train_opts;
    train_opts.shuffle = tc.shuffle != 0;
    train_opts.seed = tc.seed;
    train_opts.prefetch = tc.prefetch ? std::max(2, grad_accum) : 0;
    dataloader_init(train, tc.train_pattern, tc.B, tc.T, vocab_size, 0, 1, train_opts);
    if (tc.val_pattern.empty()) return;
    DataLoaderOptions val_opts;
    val_opts.prefetch = tc.prefetch ? 2 : 0;
    dataloader_init(val, tc.val_pattern, tc.B, tc.T, vocab_size, 0, 1, val_opts);
}

float validation_loss(const Context& ctx, GPT2* m, DataLoader* val, int batches) {
    dataloader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        fill_tokens(val, m, 1);
        sum += gpt2_eval_loss(ctx, m);
    }
    return (float)(sum / batches);
}

// Creates dir and its parents (mkdir -p). Called before training so that an unwritable output
// directory is refused at start, not after hours of training.
void make_output_dir(const std::string& dir) {
    for (size_t pos = 1; pos <= dir.size(); pos++) {
        if (pos != dir.size() && dir[pos] != '/') continue;
        const std::string part = dir.substr(0, pos);
        if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
            LLMC_FAIL("cannot create the output directory '%s' (%s)", part.c_str(),
                      std::strerror(errno));
        }
    }
    const std::string probe = dir + "/.write_test";
    FILE* f = std::fopen(probe.c_str(), "w");
    LLMC_CHECK(f != nullptr, "the output directory '%s' is not writable (%s)", dir.c_str(),
               std::strerror(errno));
    std::fclose(f);
    std::remove(probe.c_str());
}

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void write_json_summary(const std::string& path, const TrainConfig& tc, const Context& ctx,
                        double median_ms, double wall_ms, double tok_s, double mfu, double peak_mib,
                        const std::vector<float>& losses) {
    FILE* f = std::fopen(path.c_str(), "w");
    LLMC_CHECK(f != nullptr, "cannot write the summary file %s", path.c_str());
    std::fprintf(f, "{\"median_ms\": %.4f, \"wall_ms\": %.4f, \"tok_per_s\": %.1f, \"mfu\": %.4f, ",
                 median_ms, wall_ms, tok_s, mfu);
    std::fprintf(f, "\"peak_mem_mib\": %.1f, \"prefetch\": %d, \"overfit_batch\": %d, ", peak_mib,
                 tc.prefetch, tc.overfit_batch);
    std::fprintf(f, "\"B\": %d, \"T\": %d, \"steps\": %d, \"precision\": \"%s\", \"tf32\": %d, ",
                 tc.B, tc.T, tc.steps, kPrecisionName, tc.tf32);
    std::fprintf(f, "\"graph\": %d, \"device_name\": \"%s\", \"losses\": [", tc.graph,
                 ctx.props.name);
    for (size_t i = 0; i < losses.size(); i++) std::fprintf(f, "%s%.6f", i ? ", " : "", losses[i]);
    std::fprintf(f, "]}\n");
    std::fclose(f);
}

// The memory plan of this run, before anything is allocated, and the largest micro-batch each
// recompute mode fits into the free device memory.
void print_memory_plan(const Context& ctx, const GPT2Config& cfg, const TrainConfig& tc,
                       int grad_accum, const GPT2Options& opts) {
    gpt2_print_memory_plan(gpt2_memory_plan(ctx, cfg, tc.B, tc.T, grad_accum, opts), stdout);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    std::printf("largest B        at T=%d in the %.0f MiB free:", tc.T, free_b / 1048576.0);
    for (int r = 0; r <= 2; r++) {
        GPT2Options o = opts;
        o.recompute = r;
        std::printf(" %d (--recompute %d)%s",
                    gpt2_largest_batch(ctx, cfg, tc.T, 1, o, free_b, 4096), r, r < 2 ? "," : "\n");
    }
}

}  // namespace

int main(int argc, char** argv) {
    TrainConfig tc;
    parse_train_args(argc, argv, &tc);

    GPT2Config cfg;
    std::vector<float> host_params;
    const bool preset = load_model_or_preset(tc, &cfg, &host_params);
    if (tc.T > cfg.max_seq_len) {
        std::fprintf(stderr, "error: -t %d is longer than the model's maximum sequence length %d\n",
                     tc.T, cfg.max_seq_len);
        return 2;
    }
    const int grad_accum = (int)(tc.total_batch / ((long long)tc.B * tc.T));
    if (!tc.output_dir.empty()) make_output_dir(tc.output_dir);
    // Data problems are reported before the GPU is touched, so they show on any machine.
    DataLoader train_loader, val_loader;
    init_loaders(tc, cfg.vocab_size, grad_accum, &train_loader, &val_loader);
    const bool has_val = !tc.val_pattern.empty();

    Context ctx;
    context_init(&ctx, tc.device, tc.tf32 != 0);
    ctx.autotune = tc.autotune != 0;
    print_train_config(tc, stdout);
    std::printf("train data       %zu shards, %zu batches per epoch\n", train_loader.files.size(),
                dataloader_num_batches(train_loader));
    if (preset) {
        std::printf("model            preset %s, random init from seed %llu\n", tc.model.c_str(),
                    tc.seed);
        gpt2_init_random(cfg, tc.seed, &host_params);
    }

    GPT2 model;
    AdamWHyper hyper{tc.beta1, tc.beta2, tc.eps, tc.weight_decay, tc.grad_clip, tc.seed};
    GPT2Options model_opts;
    model_opts.recompute = tc.recompute;
    print_memory_plan(ctx, cfg, tc, grad_accum, model_opts);
    gpt2_create(ctx, &model, cfg, host_params, tc.B, tc.T, grad_accum, hyper, model_opts);
    const char* mm_precision = sizeof(floatX) == 2 ? "bf16" : (tc.tf32 ? "tf32" : "fp32");
    const double peak_tflops = device_peak_tflops(ctx.props.name, mm_precision);
    std::printf("device           %s (%d SMs), %s build, %s matmuls, peak %.0f TFLOP/s\n",
                ctx.props.name, ctx.props.multiProcessorCount, kPrecisionName, mm_precision,
                peak_tflops);
    std::printf("config           L=%d NH=%d C=%d V=%d Vp=%d maxT=%d, %.1fM parameters\n",
                cfg.num_layers, cfg.num_heads, cfg.channels, cfg.vocab_size, cfg.padded_vocab_size,
                cfg.max_seq_len, model.num_params / 1e6);

    const double flops_per_step = gpt2_flops_per_token(cfg, tc.T) * (double)tc.total_batch;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> step_ms, data_ms, wall_ms;
    std::vector<float> losses;
    for (int step = 1; step <= tc.steps; step++) {
        const auto wall0 = std::chrono::steady_clock::now();
        // --overfit-batch keeps the first batch: no loading at all after step 1.
        if (!tc.overfit_batch || step == 1)
            data_ms.push_back(fill_tokens(&train_loader, &model, grad_accum));
        model.io.step_values->lr = lr_at_step(tc, step);
        model.io.step_values->step = step;
        CUDA_CHECK(cudaEventRecord(start, ctx.stream));
        gpt2_step(ctx, &model, tc.graph != 0);
        CUDA_CHECK(cudaEventRecord(stop, ctx.stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        const double wall =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0)
                .count();
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        const float loss = model.io.results[0];
        const float norm = std::sqrt(model.io.results[1]);
        const double tok_s = tc.total_batch / (ms / 1e3);
        const double mfu =
            peak_tflops > 0 ? flops_per_step / (ms / 1e3) / (peak_tflops * 1e12) : 0.0;
        std::printf(
            "step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s | MFU %.1f%%\n",
            step, tc.steps, loss, norm, model.io.step_values->lr, ms, tok_s, 100.0 * mfu);
        std::fflush(stdout);
        if (!std::isfinite(loss))
            std::fprintf(stderr, "warning: loss is not finite at step %d\n", step);
        losses.push_back(loss);
        // The first step builds plans and the second captures the graph: neither is timed.
        if (step > 2) {
            step_ms.push_back(ms);
            wall_ms.push_back(wall);
        }
        if (has_val && ((tc.val_every > 0 && step % tc.val_every == 0) || step == tc.steps)) {
            std::printf("val loss %.6f (step %d, %d batches)\n",
                        validation_loss(ctx, &model, &val_loader, tc.val_batches), step,
                        tc.val_batches);
        }
    }
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const double peak_mib = (total_b - free_b) / 1048576.0;
    const double med = median(step_ms);
    std::printf(
        "data wait: median %.3f ms, max %.3f ms per step before launch (prefetch %d, shuffle %d, "
        "overfit %d)\n",
        median(data_ms), *std::max_element(data_ms.begin(), data_ms.end()), tc.prefetch, tc.shuffle,
        tc.overfit_batch);
    // Wall clock covers the host's batch fill, the launch and the wait: what the loader costs.
    std::printf("wall clock: median %.3f ms per step (data fill + launch + GPU)\n",
                median(wall_ms));
    const double tok_s = med > 0 ? tc.total_batch / (med / 1e3) : 0.0;
    const double mfu =
        (med > 0 && peak_tflops > 0) ? flops_per_step / (med / 1e3) / (peak_tflops * 1e12) : 0.0;
    std::printf(
        "summary: median step %.2f ms over %zu steps | %.0f tok/s | MFU %.1f%% | device memory in "
        "use %.0f MiB\n",
        med, step_ms.size(), tok_s, 100.0 * mfu, peak_mib);
    if (!tc.json_summary.empty())
        write_json_summary(tc.json_summary, tc, ctx, med, median(wall_ms), tok_s, mfu, peak_mib,
                           losses);
    if (!tc.output_dir.empty()) {
        std::vector<float> trained;
        gpt2_download_params(ctx, model, &trained);
        const std::string path = tc.output_dir + "/model.bin";
        write_model_file(path, cfg, trained.data(), 3);
        std::printf("wrote %s\n", path.c_str());
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return 0;
}
