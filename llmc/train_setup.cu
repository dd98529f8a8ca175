// train_setup.cu: the trainer's steps before its loop (see train_setup.cuh).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "checkpoint.cuh"
#include "model_init.h"
#include "schedule.h"
#include "train_resume.h"
#include "train_setup.cuh"
#include "util.h"

namespace llmc {
namespace {

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

// The memory plan of this run, before anything is allocated, and the largest micro-batch each
// recompute mode fits into the free device memory.
void print_memory_plan(const Context& ctx, const GPT2Config& cfg, const TrainConfig& tc,
                       int grad_accum, const GPT2Options& opts, int zero_shards) {
    train_print_memory_plan(train_memory_plan(ctx, cfg, tc.B, tc.T, grad_accum, opts, zero_shards),
                            stdout);
    size_t free_b = 0, total_b = 0;
    LLMC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    std::printf("largest B        at T=%d in the %.0f MiB free:", tc.T, free_b / 1048576.0);
    for (int r = 0; r <= 2; r++) {
        GPT2Options o = opts;
        o.recompute = r;
        std::printf(" %d (--recompute %d)%s",
                    train_largest_batch(ctx, cfg, tc.T, 1, o, zero_shards, free_b, 4096), r,
                    r < 2 ? "," : "\n");
    }
}

}  // namespace

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

ModelSource load_model_source(const TrainConfig& tc, const DistEnv& env) {
    ModelSource source;
    source.preset = config_from_preset(tc.model, &source.cfg);
    if (!source.preset) {
        int version = 0;
        read_model_file(tc.model, &source.cfg, &source.params, &version);
        std::printf("model            %s (version %d)\n", tc.model.c_str(), version);
    }
    const GPT2Config& cfg = source.cfg;
    if (tc.T > cfg.max_seq_len) {
        std::fprintf(stderr, "error: -t %d is longer than the model's maximum sequence length %d\n",
                     tc.T, cfg.max_seq_len);
        std::exit(2);
    }
    // A shape this build's kernels cannot take gets one sentence now, never a fault mid-run.
    std::string why;
    if (!gpt2_shape_supported(cfg, tc.B, tc.T, &why)) {
        std::fprintf(stderr, "error: %s\n", why.c_str());
        std::exit(2);
    }
    if (tc.world_size > 1 && tc.zero == 1) {  // C % N, before the GPU is touched
        ShardMap shard;
        LLMC_CHECK(shard_map_build(cfg, tc.world_size, env.rank, &shard, &why), "%s.", why.c_str());
    }
    return source;
}

int grad_accum_of(const TrainConfig& tc) {
    return (int)(tc.total_batch / ((long long)tc.world_size * tc.B * tc.T));
}

void open_train_data(const TrainConfig& tc, const GPT2Config& cfg, int grad_accum,
                     const DistEnv& env, TrainData* data) {
    const int global_B = tc.world_size * tc.B;
    DataLoaderOptions train_opts;
    train_opts.shuffle = tc.shuffle != 0;
    train_opts.seed = tc.seed;
    train_opts.prefetch = tc.prefetch ? std::max(2, grad_accum) : 0;
    dataloader_init(&data->train, tc.train_pattern, global_B, tc.T, cfg.vocab_size, 0, 1,
                    train_opts);
    data->has_val = !tc.val_pattern.empty();
    if (data->has_val) {
        DataLoaderOptions val_opts;
        val_opts.prefetch = tc.prefetch ? 2 : 0;
        dataloader_init(&data->val, tc.val_pattern, global_B, tc.T, cfg.vocab_size, 0, 1, val_opts);
    }
    data->has_decoder = load_sample_decoder(tc, &data->decoder);
    data->has_hellaswag = !tc.hellaswag.empty();
    if (data->has_hellaswag) {
        hellaswag_eval_init(tc.hellaswag, cfg, tc.B, tc.T, env.rank, env.world_size,
                            &data->hellaswag);
    }
}

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

void load_resume_point(const std::string& state_path, const CheckpointMeta& now,
                       const TrainConfig& tc, ModelSource* source, ResumePoint* point) {
    CheckpointMeta* saved = &point->saved;
    read_checkpoint_state(state_path, saved, &point->opt);
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
    read_checkpoint_model(model_path_for_state(state_path), *saved, &source->params);
    std::printf(
        "resume           from %s: step %lld, AdamW t %lld, next batch epoch %lld shard "
        "%d offset %lld\n",
        state_path.c_str(), saved->step, saved->adam_t, saved->loader.epoch, saved->loader.shard,
        saved->loader.offset);
}

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

uint64_t config_fingerprint(int argc, char** argv, int world_size) {
    uint64_t h = fnv1a64(kPrecisionName, std::strlen(kPrecisionName));
    h = fnv1a64(&world_size, sizeof(world_size), h);
    for (int i = 1; i < argc; i++) h = fnv1a64(argv[i], std::strlen(argv[i]) + 1, h);
    return h;
}

MultiGpu* start_multi_gpu(const DistEnv& env, const TrainConfig& tc, const Context& ctx,
                          const GPT2Config& cfg, uint64_t fingerprint, MultiGpu* state) {
    if (env.world_size == 1) return nullptr;
    BootstrapOptions bootstrap;
    std::string why;
    LLMC_CHECK(bootstrap_options_from_environment(tc.init_file, &bootstrap, &why), "%s.",
               why.c_str());
    multi_gpu_init(state, ctx, env, bootstrap, fingerprint, tc.zero, cfg);
    return state;
}

void print_run_start(const TrainConfig& tc, const TrainData& data, bool resumed,
                     ModelSource* source) {
    print_train_config(tc, stdout);
    print_schedule(schedule_of(tc), stdout);
    std::printf("train data       %zu shards, %zu batches per epoch\n", data.train.files.size(),
                dataloader_num_batches(data.train));
    if (source->preset && !resumed) {
        std::printf("model            preset %s, random init from seed %llu\n", tc.model.c_str(),
                    tc.seed);
        gpt2_init_random(source->cfg, tc.seed, &source->params);
    }
}

void build_training(const Context& ctx, const TrainConfig& tc, const ModelSource& source,
                    int grad_accum, MultiGpu* dist, ResumePoint* resume, TrainData* data,
                    GPT2* model, AdamW* opt, TrainStep* step) {
    const AdamWHyper hyper{tc.beta1, tc.beta2, tc.eps, tc.weight_decay, tc.grad_clip, tc.seed};
    GPT2Options model_opts;
    model_opts.recompute = tc.recompute;
    const bool sharded = dist != nullptr && tc.zero == 1;
    const int zero_shards = sharded ? tc.world_size : 1;
    print_memory_plan(ctx, source.cfg, tc, grad_accum, model_opts, zero_shards);
    train_check_memory(ctx, source.cfg, tc.B, tc.T, grad_accum, model_opts, zero_shards);
    gpt2_create(ctx, model, source.cfg, source.params, tc.B, tc.T, model_opts);
    optimizer_create(ctx, opt, model->layout, source.params, hyper,
                     sharded ? &dist->shard : nullptr);
    train_step_create(step, model, opt, grad_accum, dist);
    if (resume == nullptr) return;
    checkpoint_upload(ctx, model, opt, resume->opt);
    resume->opt = OptimizerState{};  // the host copies of m and v (and raw params) are spent
    // --overfit-batch trains on the loader's first batch, so it stays where it starts.
    if (!tc.overfit_batch) dataloader_seek(&data->train, resume->saved.loader);
}

}  // namespace llmc
