// test_checkpoint.cpp: host test of llmc/checkpoint, llmc/train_resume and llmc/run_log: the
// checksum, the checkpoint writer/reader round trip (fp32 build layout, and bf16 with raw
// parameters), finding the newest complete checkpoint among partial and temporary files, pruning,
// the options a checkpoint records (from the trainer's option table) and the resume checks on
// them, the header layout of version 1, the log's truncation on resume, the refusal of every
// malformed file, and util's env_int (the LLMC_* switches).
//
// Readers end the program on a bad file (LLMC_FAIL -> exit 1), so each malformed case runs in a
// forked child whose stderr is captured: the case passes when the child exits with status 1
// and its message names the file and says what is wrong.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "host_test.h"
#include "run_log.h"
#include "train_resume.h"
#include "util.h"

namespace {

bool exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

void set_slot(std::vector<char>* bytes, int slot, int64_t value) {
    std::memcpy(bytes->data() + slot * sizeof(int64_t), &value, sizeof(value));
}

llmc::GPT2Config small_config() {  // awkward on purpose: odd V, Vp not a multiple of 128
    llmc::GPT2Config c;
    c.max_seq_len = 16;
    c.vocab_size = 37;
    c.padded_vocab_size = 40;
    c.num_layers = 2;
    c.num_heads = 3;
    c.channels = 9;
    return c;
}

// Arrays of one checkpoint, drawn fresh from rng (never zeros).
struct Arrays {
    std::vector<float> weights;
    llmc::OptimizerState opt;
};

Arrays random_arrays(size_t n, int param_bytes, std::mt19937* rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Arrays a;
    a.weights.resize(n);
    a.opt.m.resize(n);
    a.opt.v.resize(n);
    for (size_t i = 0; i < n; i++) {
        a.weights[i] = normal(*rng);
        a.opt.m[i] = 1e-3f * normal(*rng);
        a.opt.v[i] = 1e-6f * std::fabs(normal(*rng));
    }
    if (param_bytes != 4) {
        a.opt.raw_params.resize(n * param_bytes);
        for (size_t i = 0; i < n; i++) {
            const uint16_t b = llmc::float_to_bf16_bits(a.weights[i] + 1e-3f * normal(*rng));
            std::memcpy(a.opt.raw_params.data() + 2 * i, &b, 2);
        }
    }
    return a;
}

llmc::CheckpointMeta sample_meta(long long step, int param_bytes) {
    llmc::CheckpointMeta m;
    m.step = step;
    m.adam_t = step > 3 ? step - 3 : 0;
    m.cfg = small_config();
    m.num_params = (long long)llmc::param_layout(m.cfg).total;
    m.param_bytes = param_bytes;
    m.precision = param_bytes == 2 ? "bf16" : "fp32";
    m.train_shards = 3;
    m.train_tokens = 123456789012ll;
    m.loader.epoch = 2;
    m.loader.shard = 1;
    m.loader.offset = 21 * 5;
    m.bad_streak = 0;
    m.bad_total = 3;
    m.outlier_mean = 1.25;
    m.outlier_sq = 1.5625 + 0.01;
    m.outlier_count = 40;
    m.outlier_total = 2;
    // The options, as the trainer's table stores them (llmc/train_resume.cpp).
    int64_t* o = m.options;
    o[llmc::kSlotB] = 3;
    o[llmc::kSlotT] = 7;
    o[llmc::kSlotTotalBatch] = 42;
    o[llmc::kSlotSeed] = (int64_t)0xFEEDFACECAFEBEEFull;  // high bit set: must survive the slot
    o[llmc::kSlotShuffle] = 1;
    o[llmc::kSlotSchedule] = 2;
    o[llmc::kSlotWarmup] = 7;
    o[llmc::kSlotSteps] = 1000;
    o[llmc::kSlotLr] = llmc::slot_from_double(6e-4f);  // a float value, as the trainer stores
    o[llmc::kSlotFinalFrac] = llmc::slot_from_double(0.1f);
    o[llmc::kSlotDecayFrac] = llmc::slot_from_double(0.2f);
    o[llmc::kSlotBeta1] = llmc::slot_from_double(0.9f);
    o[llmc::kSlotBeta2] = llmc::slot_from_double(0.95f);
    o[llmc::kSlotEps] = llmc::slot_from_double(1e-8f);
    o[llmc::kSlotWeightDecay] = llmc::slot_from_double(0.1f);
    o[llmc::kSlotGradClip] = llmc::slot_from_double(1.0f);
    m.option_text = "data/some dir/\"quoted\"_train_*.bin";
    return m;
}

bool same_meta(const llmc::CheckpointMeta& a, const llmc::CheckpointMeta& b) {
    const llmc::GPT2Config &x = a.cfg, &y = b.cfg;
    return a.step == b.step && a.adam_t == b.adam_t && x.max_seq_len == y.max_seq_len &&
           x.vocab_size == y.vocab_size && x.padded_vocab_size == y.padded_vocab_size &&
           x.num_layers == y.num_layers && x.num_heads == y.num_heads && x.channels == y.channels &&
           a.num_params == b.num_params && a.param_bytes == b.param_bytes &&
           a.precision == b.precision && a.train_shards == b.train_shards &&
           a.train_tokens == b.train_tokens && a.loader.epoch == b.loader.epoch &&
           a.loader.shard == b.loader.shard && a.loader.offset == b.loader.offset &&
           a.bad_streak == b.bad_streak && a.bad_total == b.bad_total &&
           a.outlier_mean == b.outlier_mean && a.outlier_sq == b.outlier_sq &&
           a.outlier_count == b.outlier_count && a.outlier_total == b.outlier_total &&
           a.sum_model == b.sum_model && a.sum_m == b.sum_m && a.sum_v == b.sum_v &&
           a.sum_params == b.sum_params &&
           std::memcmp(a.options, b.options, sizeof(a.options)) == 0 &&
           a.option_text == b.option_text;
}

bool same_bits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

// The checksum's definition, written out a second way (bytes assembled by shifts, the tail
// padded explicitly), to catch a slip in either.
uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
uint64_t reference_checksum(const std::vector<unsigned char>& bytes) {
    std::vector<unsigned char> padded = bytes;
    while (padded.size() % 8 != 0) padded.push_back(0);
    uint64_t sum = 0;
    for (size_t i = 0; i < padded.size() / 8; i++) {
        uint64_t w = 0;
        for (int k = 7; k >= 0; k--) w = (w << 8) | padded[8 * i + k];
        sum += mix(w + (uint64_t)i * 0x9E3779B97F4A7C15ull);
    }
    return mix(sum ^ (uint64_t)bytes.size());
}

void test_checksum(std::mt19937* rng) {
    std::vector<unsigned char> bytes(1001);
    for (unsigned char& b : bytes) b = (unsigned char)((*rng)() & 0xff);
    const uint64_t base = llmc::checksum64(bytes.data(), bytes.size());
    check(base == reference_checksum(bytes), "checksum64 matches its definition (1001 bytes)");
    bool all_flips = true;
    for (size_t bit = 0; bit < bytes.size() * 8; bit += 97) {
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        all_flips = all_flips && llmc::checksum64(bytes.data(), bytes.size()) != base;
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    check(all_flips, "checksum64 changes on every single-bit flip tried");
    std::vector<unsigned char> longer = bytes;
    longer.push_back(0);
    check(llmc::checksum64(longer.data(), longer.size()) != base,
          "checksum64 changes when a zero byte is appended");
    std::vector<unsigned char> swapped = bytes;
    for (int k = 0; k < 8; k++) std::swap(swapped[k], swapped[8 + k]);
    check(swapped == bytes || llmc::checksum64(swapped.data(), swapped.size()) != base,
          "checksum64 changes when two words swap places");
    check(llmc::checksum64(nullptr, 0) == reference_checksum({}), "checksum64 of nothing");
}

void test_round_trip(const std::string& dir, int param_bytes, std::mt19937* rng) {
    const char* build = param_bytes == 2 ? "bf16" : "fp32";
    llmc::CheckpointMeta meta = sample_meta(50, param_bytes);
    const Arrays a = random_arrays((size_t)meta.num_params, param_bytes, rng);
    llmc::write_checkpoint(dir, &meta, a.weights.data(), a.opt);
    const std::string state = llmc::checkpoint_state_path(dir, 50);
    check(state == dir + "/state_00000050.bin" &&
              llmc::checkpoint_model_path(dir, 50) == dir + "/model_00000050.bin",
          "%s checkpoint names: state_00000050.bin, model_00000050.bin", build);
    check(!exists(dir + "/.state_00000050.bin.tmp") && !exists(dir + "/.model_00000050.bin.tmp"),
          "%s: no temporary file left after a write", build);
    const size_t n = (size_t)meta.num_params;
    const long long want_size = 4096 + 8 * (long long)n + (param_bytes == 2 ? 2 * (long long)n : 0);
    check((long long)read_bytes(state).size() == want_size, "%s state file is %lld bytes", build,
          want_size);

    llmc::CheckpointMeta back;
    llmc::OptimizerState opt;
    llmc::read_checkpoint_state(state, &back, &opt);
    check(same_meta(meta, back), "%s: every header field reads back as written", build);
    check(opt.m.size() == n && same_bits(opt.m.data(), a.opt.m.data(), n * 4) &&
              opt.v.size() == n && same_bits(opt.v.data(), a.opt.v.data(), n * 4),
          "%s: AdamW m and v read back bit for bit", build);
    check(opt.raw_params.size() == a.opt.raw_params.size() &&
              same_bits(opt.raw_params.data(), a.opt.raw_params.data(), opt.raw_params.size()),
          "%s: raw device parameters read back bit for bit (%zu bytes)", build,
          opt.raw_params.size());
    std::vector<float> weights;
    llmc::read_checkpoint_model(llmc::model_path_for_state(state), back, &weights);
    check(weights.size() == n && same_bits(weights.data(), a.weights.data(), n * 4),
          "%s: model file weights read back bit for bit", build);
    llmc::CheckpointMeta header_only;
    llmc::read_checkpoint_meta(state, &header_only);
    check(same_meta(meta, header_only), "%s: read_checkpoint_meta gives the same header", build);
}

void test_listing_and_prune(const std::string& dir, std::mt19937* rng) {
    for (long long s = 1; s <= 10; s++) {
        llmc::CheckpointMeta meta = sample_meta(s, 4);
        const Arrays a = random_arrays((size_t)meta.num_params, 4, rng);
        llmc::write_checkpoint(dir, &meta, a.weights.data(), a.opt);
    }
    // Leftovers of a crash: temporary files, a model whose state never arrived, odd names.
    write_bytes(dir + "/.state_00000011.bin.tmp", {'x'});
    write_bytes(dir + "/.model_00000011.bin.tmp", {'x'});
    write_bytes(dir + "/model_00000012.bin", {'x'});
    write_bytes(dir + "/state_00000013.bin.tmp", {'x'});
    write_bytes(dir + "/state_abc.bin", {'x'});
    write_bytes(dir + "/model_00000003.bin.bak", {'x'});
    std::vector<long long> steps = llmc::list_checkpoints(dir);
    check(steps.size() == 10 && steps.front() == 1 && steps.back() == 10,
          "list_checkpoints finds the 10 complete checkpoints and nothing else (%zu)",
          steps.size());
    check(llmc::resolve_resume_path(dir) == llmc::checkpoint_state_path(dir, 10),
          "--resume DIR picks the newest complete checkpoint (step 10, not the partial 12)");

    // A state file without its model file is not complete either.
    std::rename(llmc::checkpoint_model_path(dir, 10).c_str(), (dir + "/moved.bin").c_str());
    steps = llmc::list_checkpoints(dir);
    check(steps.size() == 9 && steps.back() == 9, "a state file without its model is skipped");
    std::rename((dir + "/moved.bin").c_str(), llmc::checkpoint_model_path(dir, 10).c_str());

    const int removed = llmc::prune_checkpoints(dir, 3, 4);
    steps = llmc::list_checkpoints(dir);
    const bool kept = steps == std::vector<long long>{4, 8, 9, 10};
    check(removed == 6 && kept, "prune (keep last 3, every 4) keeps 4 8 9 10, removed %d", removed);
    check(!exists(dir + "/model_00000001.bin") && !exists(dir + "/state_00000001.bin") &&
              !exists(dir + "/model_00000005.bin"),
          "pruned checkpoints lose both files");
    check(!exists(dir + "/.state_00000011.bin.tmp") && !exists(dir + "/.model_00000011.bin.tmp"),
          "prune removes leftover temporary files");
    check(exists(dir + "/model_00000012.bin"),
          "prune keeps a model file newer than the newest checkpoint (its state may follow)");
    check(exists(dir + "/state_abc.bin") && exists(dir + "/model_00000003.bin.bak"),
          "prune leaves files that are not checkpoints alone");

    // Rewriting an existing step (a run resumed from before it) replaces both files.
    llmc::CheckpointMeta meta = sample_meta(9, 4);
    const Arrays a = random_arrays((size_t)meta.num_params, 4, rng);
    llmc::write_checkpoint(dir, &meta, a.weights.data(), a.opt);
    llmc::CheckpointMeta back;
    llmc::OptimizerState opt;
    llmc::read_checkpoint_state(llmc::checkpoint_state_path(dir, 9), &back, &opt);
    std::vector<float> w;
    llmc::read_checkpoint_model(llmc::checkpoint_model_path(dir, 9), back, &w);
    check(same_bits(w.data(), a.weights.data(), w.size() * 4) &&
              same_bits(opt.m.data(), a.opt.m.data(), opt.m.size() * 4),
          "rewriting step 9 replaces its model and state files");

    const std::string empty = dir + "/empty";
    mkdir(empty.c_str(), 0755);
    check(llmc::resolve_resume_path(empty).empty() && llmc::list_checkpoints(empty).empty(),
          "a directory without checkpoints resolves to none");
    check(llmc::resolve_resume_path(llmc::checkpoint_state_path(dir, 8)) ==
              llmc::checkpoint_state_path(dir, 8),
          "--resume FILE names that state file");
    rmdir(empty.c_str());
}

void test_resume_checks() {
    const llmc::CheckpointMeta saved = sample_meta(50, 4);
    check(llmc::resume_mismatch(saved, saved).empty() && llmc::resume_changes(saved, saved).empty(),
          "an identical run may resume with no notes");
    struct Case {
        const char* what;
        std::function<void(llmc::CheckpointMeta*)> change;
        const char* phrase;
    };
    const Case cases[] = {
        {"precision", [](llmc::CheckpointMeta* m) { m->precision = "bf16"; }, "bf16 build"},
        {"model shape", [](llmc::CheckpointMeta* m) { m->cfg.num_layers = 3; }, "L=3"},
        {"B", [](llmc::CheckpointMeta* m) { m->options[llmc::kSlotB] = 4; },
         "read 3 sequences per micro-step (GPUs x -b), this one 4; resume with the same batch "
         "shape (GPUs x -b = 3)"},
        {"T", [](llmc::CheckpointMeta* m) { m->options[llmc::kSlotT] = 8; },
         "had -t 7, this one has -t 8; resume with -t 7"},
        {"train glob", [](llmc::CheckpointMeta* m) { m->option_text = "x"; },
         "had -i 'data/some dir/\"quoted\"_train_*.bin', this one has -i x"},
        {"data", [](llmc::CheckpointMeta* m) { m->train_tokens++; }, "training data changed"},
        {"seed", [](llmc::CheckpointMeta* m) { m->options[llmc::kSlotSeed] = 1; },
         "this one has --seed 1; resume with --seed 18369614221190020847"},
        {"shuffle", [](llmc::CheckpointMeta* m) { m->options[llmc::kSlotShuffle] = 0; },
         "resume with --shuffle 1"},
    };
    for (const Case& c : cases) {
        llmc::CheckpointMeta now = saved;
        c.change(&now);
        const std::string why = llmc::resume_mismatch(saved, now);
        check(why.find(c.phrase) != std::string::npos, "resume refused on another %s: \"%s\"",
              c.what, why.c_str());
    }
    llmc::CheckpointMeta now = saved;
    now.options[llmc::kSlotLr] = llmc::slot_from_double(1e-3f);
    now.options[llmc::kSlotSteps] = 2000;
    now.options[llmc::kSlotTotalBatch] = 84;
    now.options[llmc::kSlotSchedule] = 3;
    const std::vector<std::string> notes = llmc::resume_changes(saved, now);
    std::string all;
    for (const std::string& n : notes) all += n + "; ";
    check(llmc::resume_mismatch(saved, now).empty() && notes.size() == 4 &&
              all.find("-d (--total-batch) changed from 42 to 84") != std::string::npos &&
              all.find("-x (--steps) changed from 1000 to 2000") != std::string::npos &&
              all.find("-l (--lr) changed from 0.0006 to 0.001") != std::string::npos &&
              all.find("--lr-schedule changed from cosine to wsd") != std::string::npos,
          "lr, steps, schedule and total batch may change, with a note each: %s", all.c_str());
}

// The trainer's option table decides what a checkpoint records: describe_run stores each option
// it marks in that option's slot, and restore_resume_options reads them back.
void test_run_options() {
    llmc::TrainConfig defaults;
    std::map<int, int> uses;
    for (const llmc::cli::Option& o : llmc::train_options(&defaults))
        if (o.resume != llmc::cli::Resume::kFree) uses[o.slot]++;
    bool one_each = uses.size() == std::size(llmc::kOptionSlots) + 1 && uses[llmc::kSlotText] == 1;
    for (int slot : llmc::kOptionSlots) one_each = one_each && uses[slot] == 1;
    check(one_each,
          "each option slot of the header (and the text slot) holds one option of the "
          "table, %zu in all",
          uses.size());

    // Every recorded option away from its default, on 2 GPUs (-d counts the tokens of both).
    const char* argv[] = {"train_gpt2cu",
                          "-i",
                          "d/x_train_*.bin",
                          "-b",
                          "3",
                          "-t",
                          "37",
                          "-d",
                          "444",
                          "--seed",
                          "77",
                          "--shuffle",
                          "0",
                          "-x",
                          "30",
                          "-l",
                          "0.002",
                          "-u",
                          "5",
                          "--lr-schedule",
                          "wsd",
                          "--lr-final-frac",
                          "0.05",
                          "--decay-frac",
                          "0.3",
                          "-c",
                          "0.05",
                          "--grad-clip",
                          "0.5",
                          "--beta1",
                          "0.8",
                          "--beta2",
                          "0.99",
                          "--eps",
                          "1e-6",
                          "-v",
                          "5"};
    llmc::TrainConfig two;
    two.world_size = 2;
    llmc::parse_train_args((int)std::size(argv), const_cast<char**>(argv), &two);
    llmc::DataLoader loader;
    loader.files = {"d/x_train_000000.bin", "d/x_train_000001.bin"};
    loader.shard_tokens = {1000, 2345};
    const llmc::CheckpointMeta meta = llmc::describe_run(two, small_config(), loader, "fp32", 4);
    const int64_t* o = meta.options;
    check(o[llmc::kSlotB] == 6 && o[llmc::kSlotT] == 37 && o[llmc::kSlotTotalBatch] == 444 &&
              o[llmc::kSlotSeed] == 77 && o[llmc::kSlotShuffle] == 0 &&
              o[llmc::kSlotSchedule] == (int)llmc::LrSchedule::kWsd &&
              o[llmc::kSlotLr] == llmc::slot_from_double(0.002f) &&
              o[llmc::kSlotGradClip] == llmc::slot_from_double(0.5f) &&
              meta.option_text == "d/x_train_*.bin" && meta.train_shards == 2 &&
              meta.train_tokens == 3345 && meta.precision == "fp32",
          "describe_run records the options by slot (B as GPUs x -b = 6, the schedule as %lld)",
          (long long)o[llmc::kSlotSchedule]);

    // The same run continued on 3 GPUs at -b 2: nothing to refuse, nothing changed.
    llmc::TrainConfig three;
    three.world_size = 3;
    llmc::restore_resume_options(meta, &three);
    check(three.B == 2 && three.T == 37 && three.total_batch == 444 && three.seed == 77 &&
              three.shuffle == 0 && three.steps == 30 && three.lr == two.lr && three.warmup == 5 &&
              three.lr_schedule == "wsd" && three.lr_final_frac == two.lr_final_frac &&
              three.decay_frac == two.decay_frac && three.weight_decay == two.weight_decay &&
              three.grad_clip == two.grad_clip && three.beta1 == two.beta1 &&
              three.beta2 == two.beta2 && three.eps == two.eps &&
              three.train_pattern == two.train_pattern && three.val_every == 0,
          "restore_resume_options gives back every recorded option (-b 6 / 3 GPUs = %d), and "
          "only those",
          three.B);
    const llmc::CheckpointMeta again = llmc::describe_run(three, small_config(), loader, "fp32", 4);
    check(llmc::resume_mismatch(meta, again).empty() && llmc::resume_changes(meta, again).empty(),
          "a run on 3 GPUs at -b 2 continues one on 2 GPUs at -b 3 with no notes");

    // The schedule's index among the choices is LrSchedule's value, which the files hold.
    bool same_kind = true;
    for (const char* name : {"constant", "linear", "cosine", "wsd"}) {
        llmc::TrainConfig c = two;
        c.lr_schedule = name;
        llmc::LrSchedule kind;
        same_kind =
            same_kind && llmc::parse_lr_schedule(name, &kind) &&
            llmc::describe_run(c, small_config(), loader, "fp32", 4).options[llmc::kSlotSchedule] ==
                (int)kind;
    }
    check(same_kind, "--lr-schedule's choices are stored as LrSchedule's values");
}

// The option slots are where version 1 of the format has always kept these values, so every
// checkpoint written before the option table still loads: the slots are set here by number.
void test_version1_layout(const std::string& dir, std::mt19937* rng) {
    llmc::CheckpointMeta meta = sample_meta(60, 4);
    const Arrays a = random_arrays((size_t)meta.num_params, 4, rng);
    llmc::write_checkpoint(dir, &meta, a.weights.data(), a.opt);
    const std::string state = llmc::checkpoint_state_path(dir, 60);
    std::vector<char> bytes = read_bytes(state);
    const int64_t ints[] = {5, 9, 45, 99, 0};  // slots 13..17: B, T, total batch, seed, shuffle
    for (int i = 0; i < 5; i++) set_slot(&bytes, 13 + i, ints[i]);
    set_slot(&bytes, 25, 1);    // schedule (linear)
    set_slot(&bytes, 26, 4);    // warmup
    set_slot(&bytes, 27, 500);  // steps
    for (int i = 0; i < 8; i++) set_slot(&bytes, 28 + i, llmc::slot_from_double(0.125 * (i + 1)));
    const char glob[] = "old/run_train_*.bin";
    std::memset(bytes.data() + 2064, 0, 2032);
    std::memcpy(bytes.data() + 2064, glob, sizeof(glob));
    write_bytes(state, bytes);
    llmc::CheckpointMeta back;
    llmc::read_checkpoint_meta(state, &back);
    const int64_t* o = back.options;
    bool doubles = true;
    const int float_slots[] = {llmc::kSlotLr,          llmc::kSlotFinalFrac, llmc::kSlotDecayFrac,
                               llmc::kSlotBeta1,       llmc::kSlotBeta2,     llmc::kSlotEps,
                               llmc::kSlotWeightDecay, llmc::kSlotGradClip};
    for (int i = 0; i < 8; i++)
        doubles = doubles && llmc::double_from_slot(o[float_slots[i]]) == 0.125 * (i + 1);
    check(o[llmc::kSlotB] == 5 && o[llmc::kSlotT] == 9 && o[llmc::kSlotTotalBatch] == 45 &&
              o[llmc::kSlotSeed] == 99 && o[llmc::kSlotShuffle] == 0 &&
              o[llmc::kSlotSchedule] == 1 && o[llmc::kSlotWarmup] == 4 &&
              o[llmc::kSlotSteps] == 500 && doubles && back.option_text == glob,
          "a version 1 header set slot by slot reads back into the same options");
}

void test_refusals(const std::string& dir, std::mt19937* rng) {
    llmc::CheckpointMeta meta = sample_meta(70, 2);
    const Arrays a = random_arrays((size_t)meta.num_params, 2, rng);
    llmc::write_checkpoint(dir, &meta, a.weights.data(), a.opt);
    const std::string state = llmc::checkpoint_state_path(dir, 70);
    const std::string model = llmc::checkpoint_model_path(dir, 70);
    const std::vector<char> good = read_bytes(state);
    const std::string bad = dir + "/state_00000071.bin";
    auto read_state = [&bad]() {
        llmc::CheckpointMeta m;
        llmc::OptimizerState o;
        llmc::read_checkpoint_state(bad, &m, &o);
    };

    expect_refusal("a missing state file", dir + "/state_00000099.bin", {"could not open"}, [&]() {
        llmc::CheckpointMeta m;
        llmc::read_checkpoint_meta(dir + "/state_00000099.bin", &m);
    });
    std::vector<char> bytes(good.begin(), good.begin() + 1000);
    write_bytes(bad, bytes);
    expect_refusal("a file shorter than the header", bad, {"too short", "truncated"}, read_state);
    bytes = good;
    bytes.pop_back();
    write_bytes(bad, bytes);
    expect_refusal("a state file missing its last byte", bad, {"truncated or corrupt"}, read_state);
    bytes = good;
    bytes.push_back(0);
    write_bytes(bad, bytes);
    expect_refusal("a state file one byte too long", bad, {"needs"}, read_state);
    bytes = good;
    bytes[0] ^= 1;
    write_bytes(bad, bytes);
    expect_refusal("a wrong magic", bad, {"not a checkpoint state file"}, read_state);
    bytes = good;
    set_slot(&bytes, llmc::kSlotVersion, 2);
    write_bytes(bad, bytes);
    expect_refusal("a wrong version", bad, {"version 2"}, read_state);
    bytes = good;
    set_slot(&bytes, llmc::kSlotNumParams, meta.num_params + 1);
    write_bytes(bad, bytes);
    expect_refusal("a parameter count that does not match the shape", bad, {"bad header"},
                   read_state);
    bytes = good;
    set_slot(&bytes, llmc::kSlotChannels, 10);  // 3 heads do not divide 10 channels
    write_bytes(bad, bytes);
    expect_refusal("a bad model shape", bad, {"bad header", "num_heads"}, read_state);
    bytes = good;
    set_slot(&bytes, llmc::kSlotParamBytes, 4);  // the size no longer matches: no raw params
    write_bytes(bad, bytes);
    expect_refusal("a size mismatch (parameter bytes)", bad, {"truncated or corrupt"}, read_state);
    bytes = good;
    bytes[4096 + 5] ^= 0x10;  // inside m
    write_bytes(bad, bytes);
    expect_refusal("a flipped bit in m", bad, {"AdamW m", "checksum"}, read_state);
    bytes = good;
    bytes[bytes.size() - 3] ^= 0x01;  // inside the raw parameters
    write_bytes(bad, bytes);
    expect_refusal("a flipped bit in the raw parameters", bad, {"device parameters", "checksum"},
                   read_state);

    // A model file from another checkpoint (same shape, other weights), or a corrupt one.
    llmc::CheckpointMeta other = sample_meta(72, 2);
    const Arrays b = random_arrays((size_t)other.num_params, 2, rng);
    llmc::write_checkpoint(dir, &other, b.weights.data(), b.opt);
    expect_refusal("a model file of another checkpoint", llmc::checkpoint_model_path(dir, 72),
                   {"fails the checksum"}, [&]() {
                       std::vector<float> w;
                       llmc::read_checkpoint_model(llmc::checkpoint_model_path(dir, 72), meta, &w);
                   });
    llmc::CheckpointMeta wide = meta;
    wide.cfg.num_layers = 1;
    expect_refusal("a model file of another shape", model, {"does not have the shape"}, [&]() {
        std::vector<float> w;
        llmc::read_checkpoint_model(model, wide, &w);
    });
    expect_refusal("--resume of a missing path", dir + "/nowhere", {"no such file"},
                   [&]() { llmc::resolve_resume_path(dir + "/nowhere"); });
    expect_refusal("a state file not named state_SSSSSSSS.bin", dir + "/x.bin", {"not named"},
                   [&]() { llmc::model_path_for_state(dir + "/x.bin"); });
    expect_refusal("a write into a missing directory", dir + "/missing", {"could not"}, [&]() {
        llmc::CheckpointMeta m = sample_meta(1, 4);
        const Arrays c = random_arrays((size_t)m.num_params, 4, rng);
        llmc::write_checkpoint(dir + "/missing", &m, c.weights.data(), c.opt);
    });
    std::remove(bad.c_str());
}

std::vector<std::string> read_lines(const std::string& path) {
    const std::vector<char> bytes = read_bytes(path);
    std::vector<std::string> lines;
    std::string cur;
    for (char c : bytes) {
        if (c == '\n') {
            lines.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    return lines;
}

void test_run_log(const std::string& dir) {
    const std::string path = dir + "/log.jsonl";
    const float losses[5] = {10.9876543f, 3.14159274f, NAN, 1.0f / 3.0f, 2.5e-8f};
    {
        llmc::RunLog log;
        log.open(path, -1);
        for (int s = 1; s <= 5; s++) {
            llmc::StepRecord r;
            r.step = s;
            r.loss = losses[s - 1];
            r.norm = s == 3 ? INFINITY : 0.5f * s;
            r.skipped = s == 3;
            r.has_val = s == 4;
            r.val_loss = 2.0f;
            r.lr = 6e-4f;
            r.ms = 12.5;
            r.tok_s = 1000;
            r.mfu = 0.25;
            log.write(r);
        }
    }
    std::vector<std::string> lines = read_lines(path);
    bool exact = lines.size() == 5;
    for (int s : {1, 2, 4, 5}) {
        if (!exact) break;
        const size_t at = lines[s - 1].find("\"loss\": ");
        const float back = std::strtof(lines[s - 1].c_str() + at + 8, nullptr);
        exact = at != std::string::npos && std::memcmp(&back, &losses[s - 1], 4) == 0;
    }
    check(exact, "log.jsonl losses read back bit for bit from their 9 digits");
    check(lines.size() == 5 && lines[2].find("\"loss\": null") != std::string::npos &&
              lines[2].find("\"norm\": null") != std::string::npos &&
              lines[2].find("\"skipped\": true") != std::string::npos,
          "a non-finite step is logged as null and skipped: %s",
          lines.size() == 5 ? lines[2].c_str() : "");
    check(lines.size() == 5 && lines[3].find("\"val_loss\": 2,") != std::string::npos &&
              lines[2].find("val_loss") == std::string::npos,
          "val_loss appears only on the steps that validate");
    {
        llmc::RunLog log;
        log.open(path, 2);  // a resume from step 2: steps 3..5 are dropped, then redone
        llmc::StepRecord r;
        r.step = 3;
        r.loss = 7.0f;
        log.write(r);
    }
    lines = read_lines(path);
    check(lines.size() == 3 && lines[0].rfind("{\"step\": 1,", 0) == 0 &&
              lines[1].rfind("{\"step\": 2,", 0) == 0 &&
              lines[2].rfind("{\"step\": 3, \"loss\": 7,", 0) == 0,
          "resuming at step 2 keeps steps 1-2 and appends the redone step 3");
    check(llmc::json_string("a\"b\\c\n") == "\"a\\\"b\\\\c\\u000a\"",
          "json_string escapes quotes, backslashes and control characters");
    std::remove(path.c_str());
}

// util's env_int, which reads the LLMC_* switches: unset and empty give the fallback, a number
// in range is taken, anything else ends the program with the variable, its value and the range.
void test_env_int() {
    const char* name = "LLMC_TEST_ENV_INT";
    unsetenv(name);
    check(llmc::env_int(name, 1, 64, 8) == 8, "env_int: unset gives the fallback");
    setenv(name, "", 1);
    check(llmc::env_int(name, 1, 64, 8) == 8, "env_int: empty gives the fallback");
    setenv(name, "32", 1);
    check(llmc::env_int(name, 1, 64, 8) == 32, "env_int: 32 in [1, 64] is taken");
    setenv(name, "0", 1);
    check(llmc::env_int(name, 0, 1, 7) == 0, "env_int: 0, the low end of [0, 1], is taken");
    setenv(name, "1", 1);
    check(llmc::env_int(name, 0, 1, 7) == 1, "env_int: 1, the high end of [0, 1], is taken");
    for (const char* bad : {"65", "0", "-3", "2x", "1.5", "99999999999999999999"}) {
        setenv(name, bad, 1);
        expect_refusal("env_int", name, {std::string(name) + "=" + bad, "from 1 to 64"},
                       [&] { llmc::env_int(name, 1, 64, 8); });
    }
    unsetenv(name);
}

void remove_dir(const std::string& dir) {
    const std::string cmd = "rm -rf '" + dir + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
}

}  // namespace

int main() {
    char dir_template[] = "/tmp/test_checkpoint.XXXXXX";
    const char* tmp = mkdtemp(dir_template);
    if (tmp == nullptr) {
        std::fprintf(stderr, "test_checkpoint: cannot create a scratch directory in /tmp\n");
        return 2;
    }
    const std::string dir = tmp;
    for (const char* sub : {"/fp32", "/bf16", "/many", "/bad"}) mkdir((dir + sub).c_str(), 0755);
    std::mt19937 rng(20261123);
    test_checksum(&rng);
    test_round_trip(dir + "/fp32", 4, &rng);
    test_round_trip(dir + "/bf16", 2, &rng);
    test_listing_and_prune(dir + "/many", &rng);
    test_resume_checks();
    test_run_options();
    test_version1_layout(dir + "/fp32", &rng);
    test_refusals(dir + "/bad", &rng);
    test_run_log(dir);
    test_env_int();
    remove_dir(dir);
    std::printf("test_checkpoint: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
