// fuzz_checkpoint.cpp: libFuzzer harness of the checkpoint readers (llmc/checkpoint.cpp), what
// --resume and generate_gpt2cu --load read. Input: a state file, then the model file of the same
// step. parse runs what a resume runs: read_checkpoint_state (header, exact size, arrays and
// their checksums), then read_checkpoint_model (shape and checksum against the state). Seeds:
// tiny checkpoints from write_checkpoint, fp32 (param_bytes 4) and bf16 (param_bytes 2, with
// the stored device parameters).
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include "checkpoint.h"
#include "fuzz_util.h"

namespace {

void parse(const std::vector<std::string>& paths) {
    llmc::CheckpointMeta meta;
    llmc::OptimizerState opt;
    llmc::read_checkpoint_state(paths[0], &meta, &opt);
    const size_t n = (size_t)meta.num_params;
    LLMC_FUZZ_ASSERT(n == llmc::param_layout(meta.cfg).total);
    LLMC_FUZZ_ASSERT(opt.m.size() == n && opt.v.size() == n);
    LLMC_FUZZ_ASSERT(opt.raw_params.size() == (meta.param_bytes == 4 ? 0 : n * meta.param_bytes));
    LLMC_FUZZ_ASSERT(meta.adam_t <= meta.step && meta.options[llmc::kSlotB] > 0 &&
                     meta.options[llmc::kSlotT] > 0);
    std::vector<float> weights;
    llmc::read_checkpoint_model(paths[1], meta, &weights);
    LLMC_FUZZ_ASSERT(weights.size() == n);
}

void write_seeds(const std::string& dir) {
    llmc::CheckpointMeta meta;  // small, and odd where the format allows it
    meta.cfg.max_seq_len = 8;
    meta.cfg.vocab_size = 11;
    meta.cfg.padded_vocab_size = 16;
    meta.cfg.num_layers = 2;
    meta.cfg.num_heads = 2;
    meta.cfg.channels = 4;
    meta.num_params = (long long)llmc::param_layout(meta.cfg).total;
    meta.options[llmc::kSlotB] = 2;
    meta.options[llmc::kSlotT] = 7;
    meta.options[llmc::kSlotTotalBatch] = 28;
    meta.step = 3;
    meta.adam_t = 2;
    meta.options[llmc::kSlotSeed] = 1234;
    meta.option_text = "data/x/*_train_*.bin";
    meta.train_shards = 1;
    meta.train_tokens = 1000;
    meta.options[llmc::kSlotLr] = llmc::slot_from_double(3e-4);
    meta.options[llmc::kSlotBeta1] = llmc::slot_from_double(0.9);
    meta.options[llmc::kSlotBeta2] = llmc::slot_from_double(0.95);
    meta.options[llmc::kSlotEps] = llmc::slot_from_double(1e-8);
    meta.options[llmc::kSlotGradClip] = llmc::slot_from_double(1.0);
    const size_t n = (size_t)meta.num_params;
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> weights(n);
    llmc::OptimizerState opt;
    opt.m.resize(n);
    opt.v.resize(n);
    for (size_t i = 0; i < n; i++) {
        weights[i] = normal(rng);
        opt.m[i] = normal(rng);
        opt.v[i] = std::abs(normal(rng));
    }
    // A private folder for the writer (it picks the names), then each pair becomes one seed.
    const std::string work = dir + "/.ckpt";
    if (mkdir(work.c_str(), 0755) != 0) llmc::fuzz::crash("cannot create", work);
    for (int param_bytes : {4, 2}) {
        meta.param_bytes = param_bytes;
        meta.precision = param_bytes == 4 ? "fp32" : "bf16";
        opt.raw_params.assign(param_bytes == 4 ? 0 : n * 2, 0);
        for (size_t i = 0; i < opt.raw_params.size(); i++) opt.raw_params[i] = (uint8_t)rng();
        llmc::write_checkpoint(work, &meta, weights.data(), opt);
        const std::string state = llmc::checkpoint_state_path(work, meta.step);
        const std::string model = llmc::checkpoint_model_path(work, meta.step);
        llmc::fuzz::write_seed(dir, "checkpoint_" + meta.precision,
                               {llmc::fuzz::read_file(state), llmc::fuzz::read_file(model)});
        std::remove(state.c_str());
        std::remove(model.c_str());
    }
    rmdir(work.c_str());
}

}  // namespace

const llmc::fuzz::Target& llmc::fuzz::target() {
    static const Target t{{"state_00000003.bin", "model_00000003.bin"}, parse, write_seeds, {}};
    return t;
}
