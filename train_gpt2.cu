// train_gpt2.cu: the trainer. Parse the options, create the context, build the model (or restore
// a checkpoint), run the loop: each step fills the pinned token buffer from the data loader,
// launches the step (a CUDA graph after the first), waits for it at the step boundary, prints
// its line and logs it to DIR/log.jsonl; checkpoints every --checkpoint-every steps, at the end,
// and when SIGINT/SIGTERM asks the run to stop (after the current step).
// Multi-GPU (one process per GPU, llmc/multi_gpu.cuh): each rank reads its rows of the global
// batch, the step reduces the gradients; rank 0 alone prints, logs, samples and writes files.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint.cuh"
#include "dataloader.h"
#include "gpt2.cuh"
#include "gpu_monitor.h"
#include "hellaswag_eval.cuh"
#include "llmc_log.h"
#include "mfu.h"
#include "model_init.h"
#include "multi_gpu.cuh"
#include "outlier.h"
#include "rng.h"
#include "run_log.h"
#include "sampler.cuh"
#include "schedule.h"
#include "train_config.h"
#include "train_resume.h"

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

// Where this process sits among the ranks (one process: rank 0 of 1).
struct RankInfo {
    int rank = 0, world = 1;
};

// Fills micro-batch slots of io.tokens: inputs then targets for each micro-step. Returns the
// host milliseconds it took: the time the GPU waits for data, since the step launches after it.
// With prefetch the loader's thread has read the batches during the previous step, and this is
// a copy out of its ring. With W ranks the loader serves global batches of W*B rows, exactly
// those of one GPU at -b W*B, and rank r keeps rows [r*B, (r+1)*B) of each.
double fill_tokens(DataLoader* loader, GPT2* m, int micro_steps, const RankInfo& ri) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t N = (size_t)m->B * m->T;
    std::vector<int> global(ri.world > 1 ? 2 * N * ri.world : 0);
    for (int i = 0; i < micro_steps; i++) {
        int* slot = m->io.tokens + (size_t)i * 2 * N;
        if (ri.world == 1) {
            dataloader_next_batch(loader, slot, slot + N);
            continue;
        }
        int* gin = global.data();
        int* gtarget = gin + N * ri.world;
        dataloader_next_batch(loader, gin, gtarget);
        std::copy(gin + N * ri.rank, gin + N * (ri.rank + 1), slot);
        std::copy(gtarget + N * ri.rank, gtarget + N * (ri.rank + 1), slot + N);
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The train loader shuffles per epoch from the run's seed and prefetches a whole step's micro-
// batches; the validation loader keeps name order so every validation sees the same batches.
// With several ranks both loaders serve the global micro-batch (world_size * B rows).
void init_loaders(const TrainConfig& tc, int vocab_size, int grad_accum, DataLoader* train,
                  DataLoader* val) {
    const int global_B = tc.world_size * tc.B;
    DataLoaderOptions train_opts;
    train_opts.shuffle = tc.shuffle != 0;
    train_opts.seed = tc.seed;
    train_opts.prefetch = tc.prefetch ? std::max(2, grad_accum) : 0;
    dataloader_init(train, tc.train_pattern, global_B, tc.T, vocab_size, 0, 1, train_opts);
    if (tc.val_pattern.empty()) return;
    DataLoaderOptions val_opts;
    val_opts.prefetch = tc.prefetch ? 2 : 0;
    dataloader_init(val, tc.val_pattern, global_B, tc.T, vocab_size, 0, 1, val_opts);
}

// Validation fills micro-batch 0 of io.tokens; it is restored after, since --overfit-batch
// trains on what io.tokens holds.
// With several ranks, the mean over the ranks (each has its rows of the same global batches).
float validation_loss(const Context& ctx, GPT2* m, DataLoader* val, int batches,
                      const RankInfo& ri) {
    dataloader_reset(val);
    const std::vector<int> train_batch(m->io.tokens, m->io.tokens + 2 * (size_t)m->B * m->T);
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        fill_tokens(val, m, 1, ri);
        sum += gpt2_eval_loss(ctx, m);
    }
    std::copy(train_batch.begin(), train_batch.end(), m->io.tokens);
    const float mine = (float)(sum / batches);
    return m->dist != nullptr ? multi_gpu_host_reduce(ctx, m->dist, mine, kNcclAvg) : mine;
}

// The decoder of samples: --tokenizer, else the tokenizer.bin prepare_data writes beside the
// shards. Only a --tokenizer that cannot be read is an error; without one, samples are ids.
bool load_sample_decoder(const TrainConfig& tc, TokenTable* table) {
    if (tc.sample_every == 0) return false;
    std::string why;
    if (!tc.tokenizer.empty()) {
        LLMC_CHECK(table->load(tc.tokenizer, &why), "--tokenizer: %s.", why.c_str());
        return true;
    }
    const size_t slash = tc.train_pattern.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : tc.train_pattern.substr(0, slash);
    if (table->load(dir + "/tokenizer.bin", &why)) return true;
    std::printf("samples          printed as token ids: %s (pass --tokenizer)\n", why.c_str());
    return false;
}

// K tokens after <|endoftext|> from the model as trained so far, printed and logged. The seed
// of step S's sample is splitmix64(--sample-seed) ^ S. A refusal (non-finite logits) is a
// warning: the step's own checks decide whether the run goes on.
void print_sample(const Context& ctx, GPT2* m, const TrainConfig& tc, const TokenTable* table,
                  int step, RunLog* log) {
    const auto t0 = std::chrono::steady_clock::now();
    // GPT-2's <|endoftext|> id, or the last id of a smaller vocabulary.
    std::vector<int> ids{std::min(50256, m->cfg.vocab_size - 1)};
    uint64_t rng = splitmix64(tc.sample_seed) ^ (uint64_t)step;
    SamplerOptions opts;
    opts.temperature = tc.temperature;
    opts.top_k = tc.top_k;
    std::string why;
    if (!gpt2_generate(ctx, m, &ids, tc.sample_tokens, opts, &rng, &why)) {
        std::fprintf(stderr, "warning: no sample at step %d: %s\n", step, why.c_str());
        return;
    }
    std::string text;
    if (table != nullptr) {
        text = valid_utf8(table->decode(ids.data() + 1, ids.size() - 1));
    } else {
        for (size_t i = 1; i < ids.size(); i++) text += (i > 1 ? " " : "") + std::to_string(ids[i]);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("sample (step %d, %d tokens, %.1f s):\n%s\n---\n", step, tc.sample_tokens, s,
                text.c_str());
    log->write_sample(step, text, tc.sample_tokens, tc.temperature, tc.top_k, tc.sample_seed);
}

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// median_ms: the GPU step (events around the launch); wall_ms: the host's data fill, the launch
// and the wait, the window PyTorch's reference times; period_ms: from one step's log record to
// the next, the host's work between steps included (main's summary lines say which steps).
void write_json_summary(const std::string& path, const TrainConfig& tc, const Context& ctx,
                        double median_ms, double wall_ms, double period_ms, double tok_s,
                        double mfu, double peak_mib, const std::vector<float>& losses) {
    FILE* f = std::fopen(path.c_str(), "w");
    LLMC_CHECK(f != nullptr, "cannot write the summary file %s (%s) after training finished.",
               path.c_str(), std::strerror(errno));
    std::fprintf(f,
                 "{\"median_ms\": %.4f, \"wall_ms\": %.4f, \"period_ms\": %.4f, \"tok_per_s\": "
                 "%.1f, \"mfu\": %.4f, ",
                 median_ms, wall_ms, period_ms, tok_s, mfu);
    std::fprintf(f, "\"peak_mem_mib\": %.1f, \"prefetch\": %d, \"overfit_batch\": %d, ", peak_mib,
                 tc.prefetch, tc.overfit_batch);
    std::fprintf(f, "\"B\": %d, \"T\": %d, \"steps\": %d, \"precision\": \"%s\", \"tf32\": %d, ",
                 tc.B, tc.T, tc.steps, kPrecisionName, tc.tf32);
    std::fprintf(f, "\"graph\": %d, \"device_name\": \"%s\", \"losses\": [", tc.graph,
                 ctx.props.name);
    // 9 significant digits: a float survives the round trip, so two runs compare bit for bit.
    for (size_t i = 0; i < losses.size(); i++) std::fprintf(f, "%s%.9g", i ? ", " : "", losses[i]);
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

// Set by SIGINT/SIGTERM, read by the loop after each step. A signal handler can only reach
// global state, hence this one non-constant global.
volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
    g_stop_signal = sig;
    const char msg[] = "\nstop requested: finishing this step, then a checkpoint (again to kill)\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
}

// The first SIGINT/SIGTERM asks for a clean stop; SA_RESETHAND makes a second one kill the run.
void install_stop_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    // SA_RESTART: a system call of the loader's thread that the signal lands in is restarted,
    // not failed with EINTR.
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

// What the loop carries from step to step; a checkpoint saves it.
struct RunState {
    long long step = 0;        // optimizer steps done
    long long adam_t = 0;      // AdamW updates applied; a non-finite step is skipped, not counted
    long long bad_streak = 0;  // non-finite steps in a row, ending at `step`
    long long bad_total = 0;
    OutlierStats outliers;         // --skip-outliers statistics of the applied steps
    long long outlier_total = 0;   // steps skipped as outliers
    long long outlier_streak = 0;  // ... in a row, ending at `step` (not saved)
};

// The state file to resume from, or "" for a new run. A new run refuses a directory that holds
// checkpoints already, so that a later --resume can never mix two runs.
std::string find_resume_state(const TrainConfig& tc) {
    if (tc.output_dir.empty()) return "";
    const std::vector<long long> existing = list_checkpoints(tc.output_dir);
    if (!tc.resume) {
        LLMC_CHECK(existing.empty(),
                   "the output directory '%s' already holds checkpoints (the newest of step "
                   "%lld); pass --resume to continue that run, or another -o to start a new one.",
                   tc.output_dir.c_str(), existing.empty() ? 0ll : existing.back());
        return "";
    }
    if (tc.resume_path.empty()) {
        if (existing.empty())
            std::printf("resume           no checkpoint in %s yet: starting a new run\n",
                        tc.output_dir.c_str());
        return existing.empty() ? "" : checkpoint_state_path(tc.output_dir, existing.back());
    }
    const std::string path = resolve_resume_path(tc.resume_path);
    LLMC_CHECK(!path.empty(), "--resume %s: the directory holds no complete checkpoint.",
               tc.resume_path.c_str());
    return path;
}

// Reads the checkpoint at state_path into *saved, *opt and *weights after checking that this
// run can continue it; prints what changed. Exits 1 with a sentence on a mismatch.
void load_checkpoint(const std::string& state_path, const CheckpointMeta& now,
                     const TrainConfig& tc, CheckpointMeta* saved, OptimizerState* opt,
                     std::vector<float>* weights) {
    read_checkpoint_state(state_path, saved, opt);
    const std::string why = resume_mismatch(*saved, now);
    LLMC_CHECK(why.empty(), "cannot resume from %s: %s.", state_path.c_str(), why.c_str());
    LLMC_CHECK(tc.stop_after == 0 || tc.stop_after > saved->step,
               "--stop-after %d is not after the checkpoint's step %lld.", tc.stop_after,
               saved->step);
    for (const std::string& change : resume_changes(*saved, now))
        std::printf(
            "note: %s since the checkpoint; from here the run differs from an "
            "uninterrupted one\n",
            change.c_str());
    read_checkpoint_model(model_path_for_state(state_path), *saved, weights);
    std::printf(
        "resume           from %s: step %lld, AdamW t %lld, next batch epoch %lld shard "
        "%d offset %lld\n",
        state_path.c_str(), saved->step, saved->adam_t, saved->loader.epoch, saved->loader.shard,
        saved->loader.offset);
}

bool all_finite(const std::vector<float>& v) {
    for (float x : v)
        if (!std::isfinite(x)) return false;
    return true;
}

// Writes the checkpoint of run.step and prunes old ones. Refuses (returns false, with a
// sentence) to save a broken state: non-finite weights or moments.
bool save_checkpoint(const Context& ctx, const GPT2& model, const TrainConfig& tc,
                     const CheckpointMeta& base, const RunState& run, const DataLoader& train) {
    const auto t0 = std::chrono::steady_clock::now();
    CheckpointMeta meta = base;
    meta.step = run.step;
    meta.adam_t = run.adam_t;
    meta.bad_streak = run.bad_streak;
    meta.bad_total = run.bad_total;
    meta.outlier_mean = run.outliers.mean;
    meta.outlier_sq = run.outliers.sq;
    meta.outlier_count = run.outliers.count;
    meta.outlier_total = run.outlier_total;
    meta.loader = dataloader_position(train);
    std::vector<float> weights;
    OptimizerState opt;
    // Every rank takes part (ZeRO-1 gathers the shards); rank 0 alone checks and writes, and
    // tells the others whether it did.
    gpt2_download_checkpoint(ctx, model, &weights, &opt);
    const bool root = model.dist == nullptr || model.dist->env.rank == 0;
    bool finite = !root || (all_finite(weights) && all_finite(opt.m) && all_finite(opt.v));
    if (model.dist != nullptr)
        finite = multi_gpu_host_reduce(ctx, model.dist, finite ? 1.0f : 0.0f, kNcclMin) > 0.5f;
    if (!finite) {
        std::fprintf(stderr,
                     "error: the weights or AdamW moments hold non-finite values at step %lld; "
                     "no checkpoint written (the newest good one stays in %s).\n",
                     run.step, tc.output_dir.c_str());
        return false;
    }
    if (!root) return true;
    write_checkpoint(tc.output_dir, &meta, weights.data(), opt);
    const int pruned = prune_checkpoints(tc.output_dir, tc.keep_last, tc.keep_every);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("checkpoint       %s (%.1f s%s)\n",
                checkpoint_state_path(tc.output_dir, run.step).c_str(), s,
                pruned ? ", older ones pruned" : "");
    return true;
}

// DIR/model.bin: the final checkpoint's model file, as a hard link (a copy where links fail);
// with --model-dtype bf16 its parameters rounded to bf16 (model file version 5, llm.c's bf16).
void write_final_model(const std::string& dir, long long step, const GPT2Config& cfg,
                       const std::string& dtype) {
    const std::string path = dir + "/model.bin", src = checkpoint_model_path(dir, step);
    std::remove(path.c_str());
    if (dtype == "bf16") {
        GPT2Config c;
        std::vector<float> params;
        read_model_file(src, &c, &params, nullptr);
        write_model_file(path, cfg, params.data(), 5);
    } else if (link(src.c_str(), path.c_str()) != 0) {
        GPT2Config c;
        std::vector<float> params;
        int version = 0;
        read_model_file(src, &c, &params, &version);
        write_model_file(path, cfg, params.data(), 3);
    }
    std::printf("wrote %s\n", path.c_str());
}

void write_run_config(const TrainConfig& tc, const GPT2Config& cfg, const Context& ctx,
                      long long start_step) {
    const std::string path = tc.output_dir + "/config.json";
    FILE* f = std::fopen(path.c_str(), "w");
    LLMC_CHECK(f != nullptr, "cannot write %s (%s).", path.c_str(), std::strerror(errno));
    char extra[512];
    std::snprintf(extra, sizeof(extra),
                  "\"precision\": \"%s\",\n  \"device_name\": %s,\n  \"num_layers\": %d,\n  "
                  "\"num_heads\": %d,\n  \"channels\": %d,\n  \"vocab_size\": %d,\n  "
                  "\"padded_vocab_size\": %d,\n  \"max_seq_len\": %d,\n  \"start_step\": %lld",
                  kPrecisionName, json_string(ctx.props.name).c_str(), cfg.num_layers,
                  cfg.num_heads, cfg.channels, cfg.vocab_size, cfg.padded_vocab_size,
                  cfg.max_seq_len, start_step);
    write_train_config_json(tc, extra, f);
    std::fclose(f);
}

// "1h02m", "12m34s", "45s".
std::string format_duration(double seconds) {
    char buf[32];
    const long long s = (long long)std::llround(std::max(0.0, seconds));
    if (s >= 3600)
        std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, s / 60 % 60);
    else if (s >= 60)
        std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
    else
        std::snprintf(buf, sizeof(buf), "%llds", s);
    return buf;
}

// HellaSwag on the model as trained so far: printed, and added to the step's log records (rec:
// null for the evaluation before the first step, which has no record in log.jsonl).
void log_hellaswag(const Context& ctx, GPT2* model, const HellaSwagEval& ev, int step,
                   StepRecord* rec, const LlmcLog& llmc_log) {
    const HellaSwagResult h = hellaswag_evaluate(ctx, model, ev, step);
    const double n = h.score.examples > 0 ? h.score.examples : 1;
    std::printf("hellaswag %d/%d = %.4f (lowest summed loss: %d = %.4f) (step %d, %.2f s)\n",
                h.score.correct, h.score.examples, h.score.correct / n, h.score.correct_sum,
                h.score.correct_sum / n, step, h.seconds);
    if (rec != nullptr)
        rec->extra += (rec->extra.empty() ? "" : ", ") + eval_score_json(h.score, h.seconds);
    llmc_log.eval(step, (float)(h.score.correct / n));
}

// NVML for --gpu-log; without it one line says why and the run goes on.
void open_gpu_monitor(const Context& ctx, GpuMonitor* monitor) {
    std::string why;
    if (!monitor->open(ctx.props.pciDomainID, ctx.props.pciBusID, ctx.props.pciDeviceID, &why))
        std::printf("gpu log          off: %s\n", why.c_str());
}

// One telemetry sample into the step's record, and the warning when throttling first shows.
void log_gpu_sample(GpuMonitor* monitor, int step, StepRecord* rec) {
    GpuSample s;
    std::string why;
    if (!monitor->sample(&s, &why)) {
        std::fprintf(stderr, "warning: no GPU telemetry at step %d: %s\n", step, why.c_str());
        return;
    }
    rec->extra += (rec->extra.empty() ? "" : ", ") + gpu_sample_json(s);
    const std::string warning = monitor->throttle_warning(step, s);
    if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
}

// What every rank must agree on: the command line, the build and the world size.
uint64_t config_fingerprint(int argc, char** argv, int world_size) {
    uint64_t h = fnv1a64(kPrecisionName, std::strlen(kPrecisionName));
    h = fnv1a64(&world_size, sizeof(world_size), h);
    for (int i = 1; i < argc; i++) h = fnv1a64(argv[i], std::strlen(argv[i]) + 1, h);
    return h;
}

// The launcher's ranks (dist_env.h); other ranks than 0 print only warnings and errors.
DistEnv discover_ranks() {
    DistEnv env;
    std::string why;
    if (!dist_env_from_environment(&env, &why)) {
        std::fprintf(stderr, "error: %s.\n", why.c_str());
        std::exit(2);
    }
    if (env.rank != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) {
        std::fprintf(stderr, "error: rank %d cannot silence its standard output.\n", env.rank);
        std::exit(1);
    }
    return env;
}

// With several ranks: checks the GPU of this rank exists, and connects the ranks (NCCL).
void start_multi_gpu(const DistEnv& env, const TrainConfig& tc, const Context& ctx,
                     const GPT2Config& cfg, uint64_t fingerprint, MultiGpu* dist) {
    BootstrapOptions bootstrap;
    std::string why;
    LLMC_CHECK(bootstrap_options_from_environment(tc.init_file, &bootstrap, &why), "%s.",
               why.c_str());
    multi_gpu_init(dist, ctx, env, bootstrap, fingerprint, tc.zero, cfg);
}

// The CUDA device of this rank: its local rank with several processes, else --device.
int pick_device(const DistEnv& env, const TrainConfig& tc) {
    if (env.world_size == 1) return tc.device;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    LLMC_CHECK(env.local_rank < count,
               "rank %d (local rank %d, from %s) needs GPU %d, but this host shows %d: start at "
               "most %d processes per host (or check CUDA_VISIBLE_DEVICES).",
               env.rank, env.local_rank, env.source.c_str(), env.local_rank, count, count);
    return env.local_rank;
}

}  // namespace

int main(int argc, char** argv) {
    const DistEnv env = discover_ranks();
    const RankInfo ri{env.rank, env.world_size};
    const bool root = env.rank == 0;
    TrainConfig tc;
    tc.world_size = env.world_size;
    parse_train_args(argc, argv, &tc);
    const ScheduleConfig schedule = schedule_of(tc);

    GPT2Config cfg;
    std::vector<float> host_params;
    const bool preset = load_model_or_preset(tc, &cfg, &host_params);
    if (tc.T > cfg.max_seq_len) {
        std::fprintf(stderr, "error: -t %d is longer than the model's maximum sequence length %d\n",
                     tc.T, cfg.max_seq_len);
        return 2;
    }
    {  // A shape this build's kernels cannot take gets one sentence now, never a fault mid-run.
        std::string why;
        if (!gpt2_shape_supported(cfg, tc.B, tc.T, &why)) {
            std::fprintf(stderr, "error: %s\n", why.c_str());
            return 2;
        }
    }
    if (tc.world_size > 1 && tc.zero == 1) {  // C % N, before the GPU is touched
        ShardMap shard;
        std::string why;
        LLMC_CHECK(shard_map_build(cfg, tc.world_size, env.rank, &shard, &why), "%s.", why.c_str());
    }
    const int grad_accum = (int)(tc.total_batch / ((long long)tc.world_size * tc.B * tc.T));
    // Every file the run writes is checked now, before the first step (rank 0 writes them all).
    if (root) check_output_paths(tc);
    const std::string resume_state = find_resume_state(tc);
    // Data problems are reported before the GPU is touched, so they show on any machine.
    DataLoader train_loader, val_loader;
    init_loaders(tc, cfg.vocab_size, grad_accum, &train_loader, &val_loader);
    const bool has_val = !tc.val_pattern.empty();
    TokenTable sample_decoder;
    const bool has_decoder = load_sample_decoder(tc, &sample_decoder);
    HellaSwagEval hellaswag;
    const bool has_hellaswag = !tc.hellaswag.empty();
    if (has_hellaswag)
        hellaswag_eval_init(tc.hellaswag, cfg, tc.B, tc.T, env.rank, env.world_size, &hellaswag);

    // A resume replaces the initial weights with the checkpoint's, after checking that this run
    // (shape, batch, data, seed, precision) can continue it.
    const CheckpointMeta run_meta =
        describe_run(tc, cfg, train_loader, kPrecisionName, kParamBytes);
    CheckpointMeta saved;
    OptimizerState saved_opt;
    RunState run;
    if (!resume_state.empty()) {
        load_checkpoint(resume_state, run_meta, tc, &saved, &saved_opt, &host_params);
        run.step = saved.step;
        run.adam_t = saved.adam_t;
        run.bad_streak = saved.bad_streak;
        run.bad_total = saved.bad_total;
        run.outliers = {saved.outlier_mean, saved.outlier_sq, saved.outlier_count};
        run.outlier_total = saved.outlier_total;
        if (run.step >= tc.steps) {
            std::printf("the checkpoint is at step %lld, the last of -x %d: nothing to train\n",
                        run.step, tc.steps);
            return 0;
        }
    }

    Context ctx;
    context_init(&ctx, pick_device(env, tc), tc.tf32 != 0);
    ctx.autotune = tc.autotune != 0;
    MultiGpu dist_state;  // unused on one GPU: the model gets a null pointer
    MultiGpu* dist = env.world_size > 1 ? &dist_state : nullptr;
    if (dist != nullptr)
        start_multi_gpu(env, tc, ctx, cfg, config_fingerprint(argc, argv, env.world_size), dist);
    print_train_config(tc, stdout);
    print_schedule(schedule, stdout);
    std::printf("train data       %zu shards, %zu batches per epoch\n", train_loader.files.size(),
                dataloader_num_batches(train_loader));
    if (preset && resume_state.empty()) {
        std::printf("model            preset %s, random init from seed %llu\n", tc.model.c_str(),
                    tc.seed);
        gpt2_init_random(cfg, tc.seed, &host_params);
    }

    GPT2 model;
    AdamWHyper hyper{tc.beta1, tc.beta2, tc.eps, tc.weight_decay, tc.grad_clip, tc.seed};
    GPT2Options model_opts;
    model_opts.recompute = tc.recompute;
    model_opts.zero_shards = dist != nullptr && tc.zero == 1 ? env.world_size : 1;
    print_memory_plan(ctx, cfg, tc, grad_accum, model_opts);
    gpt2_create(ctx, &model, cfg, host_params, tc.B, tc.T, grad_accum, hyper, model_opts, dist);
    if (!resume_state.empty()) {
        gpt2_upload_checkpoint(ctx, &model, saved_opt);
        saved_opt = OptimizerState{};
        // --overfit-batch trains on the loader's first batch, so it stays where it starts.
        if (!tc.overfit_batch) dataloader_seek(&train_loader, saved.loader);
    }
    const char* mm_precision = sizeof(floatX) == 2 ? "bf16" : (tc.tf32 ? "tf32" : "fp32");
    const double peak_tflops = device_peak_tflops(ctx.props.name, mm_precision);
    std::printf("device           %s (%d SMs), %s build, %s matmuls, peak %.0f TFLOP/s\n",
                ctx.props.name, ctx.props.multiProcessorCount, kPrecisionName, mm_precision,
                peak_tflops);
    if (ctx.branches != 0 || ctx.pdl || ctx.layernorm_backward_variant != 0 ||
        ctx.classifier_variant != 0)
        std::printf("step switches    %s\n", context_overlap_summary(ctx).c_str());
    std::printf("config           L=%d NH=%d C=%d V=%d Vp=%d maxT=%d, %.1fM parameters\n",
                cfg.num_layers, cfg.num_heads, cfg.channels, cfg.vocab_size, cfg.padded_vocab_size,
                cfg.max_seq_len, model.num_params / 1e6);

    const bool has_output = !tc.output_dir.empty();
    RunLog log;
    if (has_output && root) {
        write_run_config(tc, cfg, ctx, run.step);
        log.open(tc.output_dir + "/log.jsonl", resume_state.empty() ? -1 : run.step);
    }
    LlmcLog llmc_log;
    if (root && !tc.llmc_log.empty())
        llmc_log.open(tc.llmc_log, resume_state.empty() ? -1 : run.step);
    GpuMonitor gpu_monitor;
    if (root && tc.gpu_log > 0) open_gpu_monitor(ctx, &gpu_monitor);
    if (has_hellaswag)
        std::printf(
            "hellaswag        %s: %zu examples, %zu forwards of B*T tokens per evaluation%s\n",
            tc.hellaswag.c_str(), hellaswag.examples.size(), hellaswag.batches.size(),
            env.world_size > 1 ? " on this rank" : "");
    install_stop_handlers();

    // Per GPU: MFU compares one GPU's share of the step's FLOPs with one GPU's peak.
    const double flops_per_step =
        gpt2_flops_per_token(cfg, tc.T) * (double)tc.total_batch / tc.world_size;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> step_ms, data_ms, wall_ms, period_ms;
    // The previous log record's time, and whether a checkpoint was written since.
    auto record_time = std::chrono::steady_clock::now();
    bool checkpointed = false;
    std::vector<float> losses;
    const int first_step = (int)run.step + 1;
    // As llm.c: with --eval-every, HellaSwag also scores the model a new run starts from.
    if (has_hellaswag && tc.eval_every > 0 && run.step == 0)
        log_hellaswag(ctx, &model, hellaswag, 0, nullptr, llmc_log);
    auto timed_since = std::chrono::steady_clock::now();  // for the ETA, from the third step on
    bool stopped = false, checkpoint_ok = true;
    for (int step = first_step; step <= tc.steps; step++) {
        const auto wall0 = std::chrono::steady_clock::now();
        if (step == first_step + 2) timed_since = wall0;
        // --overfit-batch keeps the first batch: no loading at all after the first step.
        if (!tc.overfit_batch || step == first_step)
            data_ms.push_back(fill_tokens(&train_loader, &model, grad_accum, ri));
        model.io.step_values->lr = lr_at_step(schedule, step);
        model.io.step_values->step = (int)(run.adam_t + 1);
        // The outlier ceiling (+inf without --skip-outliers): AdamW skips above it on the device.
        const float ceiling = outlier_max_norm_squared(run.outliers, tc.skip_outliers);
        model.io.step_values->max_norm_squared = ceiling;
        CUDA_CHECK(cudaEventRecord(start, ctx.stream));
        gpt2_step(ctx, &model, tc.graph != 0);
        CUDA_CHECK(cudaEventRecord(stop, ctx.stream));
        if (dist != nullptr)
            multi_gpu_wait(ctx, dist, stop);
        else
            CUDA_CHECK(cudaEventSynchronize(stop));
        const double wall =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0)
                .count();
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        StepRecord rec;
        rec.step = step;
        rec.loss = model.io.results[0];
        rec.norm = std::sqrt(model.io.results[1]);
        rec.lr = model.io.step_values->lr;
        rec.ms = ms;
        rec.tok_s = tc.total_batch / (ms / 1e3);
        rec.mfu = peak_tflops > 0 ? flops_per_step / (ms / 1e3) / (peak_tflops * 1e12) : 0.0;
        // A non-finite loss or norm: AdamW skips the update on the device, so t does not advance.
        // An outlier: a finite squared norm above the ceiling, the same float comparison as
        // AdamW's; skipped too, but the weights stay good, so checkpoints go on.
        const bool bad = !std::isfinite(rec.loss) || !std::isfinite(rec.norm);
        const bool outlier = !bad && model.io.results[1] > ceiling;
        rec.skipped = bad || outlier;
        run.step = step;
        run.bad_streak = bad ? run.bad_streak + 1 : 0;
        run.bad_total += bad ? 1 : 0;
        run.outlier_streak = outlier ? run.outlier_streak + 1 : 0;
        run.outlier_total += outlier ? 1 : 0;
        run.adam_t += rec.skipped ? 0 : 1;
        if (!rec.skipped) outlier_update(&run.outliers, rec.norm, tc.outlier_window);
        std::string eta;
        if (step >= first_step + 3) {
            const double spent =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - timed_since)
                    .count();
            eta = " | ETA " + format_duration(spent / (step - first_step - 1) * (tc.steps - step));
        }
        std::printf(
            "step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s | MFU "
            "%.1f%%%s%s\n",
            step, tc.steps, rec.loss, rec.norm, rec.lr, ms, rec.tok_s, 100.0 * rec.mfu, eta.c_str(),
            bad       ? " | SKIPPED (not finite)"
            : outlier ? " | SKIPPED (outlier)"
                      : "");
        std::fflush(stdout);
        losses.push_back(rec.loss);
        // The first step builds plans and the second captures the graph: neither is timed.
        if (step >= first_step + 2) {
            step_ms.push_back(ms);
            wall_ms.push_back(wall);
        }
        if (has_val && ((tc.val_every > 0 && step % tc.val_every == 0) || step == tc.steps)) {
            rec.has_val = true;
            rec.val_loss = validation_loss(ctx, &model, &val_loader, tc.val_batches, ri);
            std::printf("val loss %.6f (step %d, %d batches)\n", rec.val_loss, step,
                        tc.val_batches);
        }
        const bool evaluated =
            has_hellaswag && ((tc.eval_every > 0 && step % tc.eval_every == 0) || step == tc.steps);
        if (evaluated) log_hellaswag(ctx, &model, hellaswag, step, &rec, llmc_log);
        if (gpu_monitor.is_open() && step % tc.gpu_log == 0)
            log_gpu_sample(&gpu_monitor, step, &rec);
        llmc_log.train(step, rec.loss, rec.lr, rec.norm);
        if (rec.has_val) llmc_log.val(step, rec.val_loss);
        const bool sampled = root && tc.sample_every > 0 && !rec.skipped &&
                             (step % tc.sample_every == 0 || step == tc.steps);
        if (sampled)
            print_sample(ctx, &model, tc, has_decoder ? &sample_decoder : nullptr, step, &log);
        const auto now = std::chrono::steady_clock::now();
        rec.period_ms = std::chrono::duration<double, std::milli>(now - record_time).count();
        record_time = now;
        // The median period stands for plain steps: no validation, HellaSwag, sample or
        // checkpoint inside.
        if (step >= first_step + 2 && !rec.has_val && !evaluated && !sampled && !checkpointed)
            period_ms.push_back(rec.period_ms);
        log.write(rec);
        if (outlier) {
            std::fprintf(stderr,
                         "warning: step %d's gradient norm %.4f is above the outlier ceiling %.4f "
                         "(--skip-outliers %g); its update was skipped (%lld in a row, %lld in "
                         "all)\n",
                         step, rec.norm, std::sqrt(ceiling), tc.skip_outliers, run.outlier_streak,
                         run.outlier_total);
            if (tc.max_bad_steps > 0 && run.outlier_streak >= tc.max_bad_steps) {
                std::fprintf(stderr,
                             "error: %lld steps in a row were skipped as outliers (--max-bad-steps "
                             "%d): the gradient norm has moved, not spiked; raise --skip-outliers "
                             "or resume without it.\n",
                             run.outlier_streak, tc.max_bad_steps);
                return 1;
            }
        }
        if (bad) {
            std::fprintf(stderr,
                         "warning: step %d has a non-finite loss or gradient norm; its update "
                         "was skipped (%lld in a row, %lld in all)\n",
                         step, run.bad_streak, run.bad_total);
            if (tc.max_bad_steps > 0 && run.bad_streak >= tc.max_bad_steps) {
                std::fprintf(stderr,
                             "error: %lld steps in a row had a non-finite loss or gradient norm "
                             "(--max-bad-steps %d): stopping without a checkpoint; lower the "
                             "learning rate or resume from the last good checkpoint.\n",
                             run.bad_streak, tc.max_bad_steps);
                return 1;
            }
        }
        stopped = g_stop_signal != 0 || step == tc.stop_after;
        // A signal may reach some ranks only: they all stop after the same step.
        if (dist != nullptr)
            stopped = multi_gpu_host_reduce(ctx, dist, stopped ? 1.0f : 0.0f, kNcclMax) > 0.5f;
        const bool due = step == tc.steps || stopped ||
                         (tc.checkpoint_every > 0 && step % tc.checkpoint_every == 0);
        checkpointed = has_output && due;
        if (has_output && due) {
            if (run.bad_streak > 0) {
                std::printf("checkpoint       not written at step %d: the step was not finite\n",
                            step);
                checkpoint_ok = false;
            } else if (!save_checkpoint(ctx, model, tc, run_meta, run, train_loader)) {
                return 1;
            } else {
                checkpoint_ok = true;
            }
        }
        if (stopped) break;
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
    // Everything the loop does per step, so the GPU's idle time between steps shows here.
    std::printf(
        "step period: median %.3f ms from one step's log record to the next (%zu steps without "
        "validation, sample or checkpoint; the GPU step is %.3f ms of it)\n",
        median(period_ms), period_ms.size(), median(step_ms));
    const double tok_s = med > 0 ? tc.total_batch / (med / 1e3) : 0.0;
    const double mfu =
        (med > 0 && peak_tflops > 0) ? flops_per_step / (med / 1e3) / (peak_tflops * 1e12) : 0.0;
    std::printf(
        "summary: median step %.2f ms over %zu steps | %.0f tok/s | MFU %.1f%% | device memory in "
        "use %.0f MiB\n",
        med, step_ms.size(), tok_s, 100.0 * mfu, peak_mib);
    if (dist != nullptr) {
        const float most = multi_gpu_host_reduce(ctx, dist, (float)peak_mib, kNcclMax);
        std::printf(
            "multi-GPU memory: device memory in use %.0f MiB on rank 0, %.0f MiB on the "
            "fullest of %d GPUs (zero %d)\n",
            peak_mib, most, env.world_size, tc.zero);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    // The model first: a summary that cannot be written must not cost a finished run its model.
    if (root && has_output && checkpoint_ok && run.step == tc.steps)
        write_final_model(tc.output_dir, run.step, cfg, tc.model_dtype);
    if (root && !tc.json_summary.empty())
        write_json_summary(tc.json_summary, tc, ctx, med, median(wall_ms), median(period_ms), tok_s,
                           mfu, peak_mib, losses);
    if (stopped && run.step < tc.steps) {
        if (!has_output)
            std::printf("stopped after step %lld; no -o, so no checkpoint was written\n", run.step);
        else if (checkpoint_ok)
            std::printf("stopped after step %lld; checkpoint %s; continue with --resume -o %s\n",
                        run.step, checkpoint_state_path(tc.output_dir, run.step).c_str(),
                        tc.output_dir.c_str());
        else
            std::printf(
                "stopped after step %lld; its state was not finite, so the newest "
                "checkpoint in %s is an earlier one\n",
                run.step, tc.output_dir.c_str());
    }
    return 0;
}
