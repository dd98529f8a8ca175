// test_resume_cpu.cpp: bit-exact resume on the CPU reference path. The CPU fp32 GPT-2
// (dev/ref/gpt2_cpu.h) trains on the real data loader (llmc/dataloader.h, shuffled, prefetching)
// and checkpoints through the real files (llmc/checkpoint.h, the fp32 build's layout: model
// file of version 3 plus a state file with m and v and no raw parameters), with the trainer's
// run state (llmc/run_state.h: each step recorded, the header filled and read back by it), as
// the trainer does:
//   1. reference: N = 20 steps uninterrupted, recording each step's loss;
//   2. a fresh run trains steps 1..10 and writes a checkpoint; everything is dropped; a new model
//      and loader are built from the checkpoint found by resolve_resume_path (params, m, v, step,
//      AdamW t, loader position, seed, shuffle, schedule and AdamW constants) and train 11..20;
//   3. every loss of steps 1..20 and the final parameters, m and v must equal the reference's
//      bit for bit (memcmp); a mismatch prints how many values differ and the worst difference.
// Negative controls, so the test can fail: resuming with the loader not restored (at epoch 0's
// first batch), with AdamW's t restarted at 1, or with zero moments must each change the losses
// or the parameters.
//
// Config (awkward on purpose): L=2, NH=4, C=96 (head size 24), V=997, Vp=1024, maxT=64, B=3,
// T=37 (B*T = 111 tokens per batch). Three shards of 3, 2 and 4 batches plus ragged tails: an
// epoch is 9 batches, so the checkpoint (after step 10) sits inside epoch 1 and the resumed
// steps cross into epoch 2. Tokens follow a seeded random bigram table (70%) or are uniform,
// so the loss falls and the gradients are not noise only.
//
// Optimizer: GPT2Cpu::update, the semantics of llmc/adamw.cuh (clip by the global norm, then
// AdamW with decay on the 2-D weights only) computed in double. Unlike the device kernel it never
// skips a non-finite step; the test checks that every loss and norm is finite instead. One
// micro-batch per step (no gradient accumulation). Schedule: cosine with warmup (schedule.h).
// Ends with "test_resume_cpu: N passed, M failed"; exits 1 on any failure. Runs in about 2 s on one
// core.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "dataloader.h"
#include "host_test.h"
#include "model_init.h"
#include "ref/gpt2_cpu.h"
#include "rng.h"
#include "run_state.h"
#include "schedule.h"
#include "train_resume.h"

namespace {

constexpr int kSteps = 20;       // the run's length (the schedule's too)
constexpr int kCheckpoint = 10;  // the interrupted run checkpoints after this step
constexpr int kB = 3, kT = 37;
constexpr uint64_t kSeed = 20261123;

llmc::GPT2Config test_config() {
    llmc::GPT2Config c;
    c.max_seq_len = 64;
    c.vocab_size = 997;
    c.padded_vocab_size = 1024;
    c.num_layers = 2;
    c.num_heads = 4;
    c.channels = 96;
    return c;
}

// The run's settings, from a trainer's command line through its parser.
llmc::TrainConfig default_settings(const std::string& dir) {
    const std::string pattern = dir + "/train_*.bin", b = std::to_string(kB),
                      t = std::to_string(kT), steps = std::to_string(kSteps),
                      seed = std::to_string(kSeed);
    const char* argv[] = {"train_gpt2cu",
                          "-i",
                          pattern.c_str(),
                          "-b",
                          b.c_str(),
                          "-t",
                          t.c_str(),
                          "-x",
                          steps.c_str(),
                          "--lr-schedule",
                          "cosine",
                          "-l",
                          "3e-3",
                          "-u",
                          "3",
                          "--lr-final-frac",
                          "0.1",
                          "-c",
                          "0.1",
                          "--grad-clip",
                          "2",
                          "--seed",
                          seed.c_str()};
    llmc::TrainConfig c;
    llmc::parse_train_args((int)std::size(argv), const_cast<char**>(argv), &c);
    return c;
}

// Three shards of 3, 2 and 4 batches; each has a tail shorter than a batch that is never read.
void write_shards(const std::string& dir, int vocab) {
    uint64_t rng = kSeed ^ 0xD1B54A32D192ED03ull;
    std::vector<uint16_t> bigram(vocab);
    for (int i = 0; i < vocab; i++) bigram[i] = (uint16_t)(llmc::splitmix64_next(&rng) % vocab);
    const int batches[3] = {3, 2, 4}, tails[3] = {17, 1, 60};
    uint16_t prev = 0;
    for (int s = 0; s < 3; s++) {
        std::vector<uint16_t> tokens((size_t)batches[s] * kB * kT + tails[s]);
        for (uint16_t& tok : tokens) {
            const uint64_t r = llmc::splitmix64_next(&rng);
            tok = (r % 10 < 7) ? bigram[prev] : (uint16_t)((r >> 8) % vocab);
            prev = tok;
        }
        char name[64];
        std::snprintf(name, sizeof(name), "/train_%03d.bin", s);
        llmc::write_shard(dir + name, tokens.data(), tokens.size());
    }
}

// What the trainer's loop carries: the model, the loader, and the run's state (run_state.h).
struct Trainer {
    GPT2Cpu model;
    llmc::DataLoader loader;
    llmc::TrainConfig settings;
    llmc::RunState run;
    std::vector<float> losses, norms;
    std::vector<int> inputs, targets;

    void open_loader() {
        llmc::DataLoaderOptions opts;
        opts.shuffle = settings.shuffle != 0;
        opts.seed = settings.seed;
        opts.prefetch = 2;  // the trainer prefetches; the order must not depend on it
        llmc::dataloader_init(&loader, settings.train_pattern, settings.B, settings.T,
                              model.cfg.vocab_size, 0, 1, opts);
        inputs.resize(settings.B * settings.T);
        targets.resize(settings.B * settings.T);
    }

    void train_until(int last_step) {
        const llmc::RunPolicy policy = llmc::run_policy_of(settings);
        while (run.step < last_step) {
            const int s = (int)run.step + 1;
            llmc::dataloader_next_batch(&loader, inputs.data(), targets.data());
            const float loss = model.forward(inputs.data(), targets.data(), settings.B, settings.T);
            model.zero_grad();
            model.backward();
            const float norm = model.update(
                llmc::lr_at_step(llmc::schedule_of(settings), s), settings.beta1, settings.beta2,
                settings.eps, settings.weight_decay, settings.grad_clip, (int)run.adam_t + 1);
            losses.push_back(loss);
            norms.push_back(norm);
            // The CPU update never skips; a finite step is applied by the loop's rules too.
            const float ceiling = llmc::run_next_ceiling(run, policy);
            const llmc::StepVerdict verdict =
                llmc::run_record_step(&run, policy, s, loss, norm * norm, ceiling).verdict;
            if (verdict != llmc::StepVerdict::kApplied) {
                std::fprintf(stderr, "test_resume_cpu: step %d was not applied\n", s);
                std::exit(1);
            }
        }
    }
};

// A new run: seeded init, loader at the start.
void start_new(Trainer* t, const llmc::TrainConfig& s) {
    t->settings = s;
    std::vector<float> params;
    llmc::gpt2_init_random(test_config(), s.seed, &params);
    t->model.init(test_config(), params);
    t->open_loader();
}

// The header fields that describe the run, as train_gpt2.cu's fp32 build records them.
llmc::CheckpointMeta describe(const Trainer& t) {
    return llmc::describe_run(t.settings, t.model.cfg, t.loader, "fp32", 4);
}

void save(const Trainer& t, const std::string& dir) {
    llmc::CheckpointMeta meta = describe(t);
    llmc::run_state_to_meta(t.run, &meta);
    meta.loader = llmc::dataloader_position(t.loader);
    llmc::OptimizerState opt;
    opt.m = t.model.adam_m;
    opt.v = t.model.adam_v;
    llmc::write_checkpoint(dir, &meta, t.model.params.data(), opt);
}

// What a resume may leave out, for the negative controls.
struct Omit {
    bool loader = false, adam_t = false, moments = false;
};

// Builds *t from the newest checkpoint in dir as train_gpt2.cu --resume does, after checking
// that a run described by `now` may continue it with no setting changed. The run's settings
// come from the state header alone (restore_resume_options, from defaults), so a setting the
// header lost would show in the losses.
void resume(Trainer* t, const std::string& dir, const llmc::CheckpointMeta& now, Omit omit) {
    const std::string state = llmc::resolve_resume_path(dir);
    llmc::CheckpointMeta saved;
    llmc::OptimizerState opt;
    llmc::read_checkpoint_state(state, &saved, &opt);
    const std::string why = llmc::resume_mismatch(saved, now);
    if (!why.empty()) std::printf("resume refused: %s\n", why.c_str());
    check(why.empty() && llmc::resume_changes(saved, now).empty(),
          "the checkpoint %s accepts this run unchanged", state.c_str());
    std::vector<float> weights;
    llmc::read_checkpoint_model(llmc::model_path_for_state(state), saved, &weights);

    llmc::TrainConfig restored;
    llmc::restore_resume_options(saved, &restored);
    t->settings = restored;
    t->model.init(saved.cfg, weights);
    if (!omit.moments) {
        t->model.adam_m = opt.m;
        t->model.adam_v = opt.v;
    }
    t->run = llmc::run_state_from_meta(saved);
    if (omit.adam_t) t->run.adam_t = 0;
    t->open_loader();
    if (!omit.loader) llmc::dataloader_seek(&t->loader, saved.loader);
}

// Counts the elements of a and b whose bits differ and the largest |a - b| among them.
struct Diff {
    size_t count = 0;
    double worst = 0.0;
    size_t where = 0;
};

Diff diff(const float* a, const float* b, size_t n) {
    Diff d;
    for (size_t i = 0; i < n; i++) {
        if (std::memcmp(&a[i], &b[i], sizeof(float)) == 0) continue;
        d.count++;
        const double e = std::fabs((double)a[i] - (double)b[i]);
        if (!(e <= d.worst)) {  // NaN counts as the worst
            d.worst = e;
            d.where = i;
        }
    }
    return d;
}

void check_equal(const char* what, const std::vector<float>& a, const std::vector<float>& b) {
    const bool same_size = a.size() == b.size();
    const Diff d = same_size ? diff(a.data(), b.data(), a.size()) : Diff{};
    const bool ok = same_size && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    if (!same_size) {
        check(false, "%s: %zu values vs %zu", what, a.size(), b.size());
    } else if (ok) {
        check(true, "%s: %zu values bitwise equal", what, a.size());
    } else {
        check(false, "%s: %zu of %zu values differ, worst |diff| %.3e at [%zu] (%.9g vs %.9g)",
              what, d.count, a.size(), d.worst, d.where, a[d.where], b[d.where]);
    }
}

bool all_finite(const std::vector<float>& v) {
    for (float x : v)
        if (!std::isfinite(x)) return false;
    return true;
}

// A negative control: a resume missing `omit` trains steps 11..20; its losses or its final
// parameters must differ from the reference's.
void control(const char* what, const std::string& dir, const llmc::CheckpointMeta& now, Omit omit,
             const Trainer& ref) {
    Trainer t;
    resume(&t, dir, now, omit);
    t.train_until(kSteps);
    const Diff dl = diff(t.losses.data(), ref.losses.data() + kCheckpoint, kSteps - kCheckpoint);
    const Diff dp = diff(t.model.params.data(), ref.model.params.data(), ref.model.params.size());
    check(dl.count > 0 || dp.count > 0,
          "control: resuming with %s differs (%zu of %d losses, worst %.3e; %zu params, worst "
          "%.3e)",
          what, dl.count, kSteps - kCheckpoint, dl.worst, dp.count, dp.worst);
}

}  // namespace

int main() {
    char dir_template[] = "/tmp/test_resume_cpu.XXXXXX";
    const char* tmp = mkdtemp(dir_template);
    if (tmp == nullptr) {
        std::fprintf(stderr, "test_resume_cpu: cannot create a scratch directory in /tmp\n");
        return 2;
    }
    const std::string dir = tmp, data = dir + "/data", ckpt = dir + "/run";
    std::filesystem::create_directories(data);
    std::filesystem::create_directories(ckpt);
    write_shards(data, test_config().vocab_size);
    const llmc::TrainConfig settings = default_settings(data);

    // 1. The uninterrupted reference.
    Trainer ref;
    start_new(&ref, settings);
    check(llmc::dataloader_num_batches(ref.loader) == 9, "an epoch is %zu batches (want 9)",
          llmc::dataloader_num_batches(ref.loader));
    ref.train_until(kSteps);
    int clipped = 0;
    for (int i = 0; i < kSteps; i++) {
        std::printf("step %2d  loss %.9g  norm %.6g  lr %.4e\n", i + 1, ref.losses[i], ref.norms[i],
                    llmc::lr_at_step(llmc::schedule_of(settings), i + 1));
        clipped += ref.norms[i] > settings.grad_clip;
    }
    check(all_finite(ref.losses) && all_finite(ref.norms), "reference losses and norms finite");
    check(ref.losses[kSteps - 1] < ref.losses[0] - 0.1f, "reference learns: loss %.4f -> %.4f",
          ref.losses[0], ref.losses[kSteps - 1]);
    // The clip must act on some steps and not on others, or it is not being tested.
    check(clipped > 0 && clipped < kSteps, "grad clip %.1f acts on %d of %d steps",
          settings.grad_clip, clipped, kSteps);

    // 2. Interrupted: steps 1..10, checkpoint, drop everything.
    llmc::CheckpointMeta now;
    llmc::DataLoaderPosition saved_pos;
    {
        Trainer first;
        start_new(&first, settings);
        first.train_until(kCheckpoint);
        check_equal("interrupted run, losses of steps 1..10", first.losses,
                    std::vector<float>(ref.losses.begin(), ref.losses.begin() + kCheckpoint));
        save(first, ckpt);
        now = describe(first);
        saved_pos = llmc::dataloader_position(first.loader);
    }
    check(saved_pos.epoch == 1,
          "the checkpoint's next batch is in epoch 1 (epoch %lld shard %d offset %lld)",
          saved_pos.epoch, saved_pos.shard, saved_pos.offset);

    // 3. Resumed: steps 11..20 from the checkpoint alone, compared bit for bit.
    {
        Trainer resumed;
        resume(&resumed, ckpt, now, Omit{});
        check(resumed.run.step == kCheckpoint && resumed.run.adam_t == kCheckpoint,
              "resumed at step %lld, AdamW t %lld", resumed.run.step, resumed.run.adam_t);
        resumed.train_until(kSteps);
        check_equal("resumed run, losses of steps 11..20", resumed.losses,
                    std::vector<float>(ref.losses.begin() + kCheckpoint, ref.losses.end()));
        check_equal("final parameters", resumed.model.params, ref.model.params);
        check_equal("final AdamW m", resumed.model.adam_m, ref.model.adam_m);
        check_equal("final AdamW v", resumed.model.adam_v, ref.model.adam_v);
    }

    // Negative controls: each omission must show.
    Omit no_loader, no_t, no_moments;
    no_loader.loader = true;
    no_t.adam_t = true;
    no_moments.moments = true;
    control("the loader at epoch 0's start", ckpt, now, no_loader, ref);
    control("AdamW t restarted at 1", ckpt, now, no_t, ref);
    control("zero AdamW moments", ckpt, now, no_moments, ref);

    std::filesystem::remove_all(dir);
    std::printf("test_resume_cpu: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
