// fuzz_model_file.cpp: libFuzzer harness of read_model_file (llmc/model_file.cpp), the model file
// every program loads. Input: one model file. Seeds: tiny fp32 (version 3) and bf16 (version 5)
// models from write_model_file. On success the parameters must match the header's layout.
#include <random>

#include "fuzz_util.h"
#include "model_file.h"

namespace {

void parse(const std::vector<std::string>& paths) {
    llmc::GPT2Config cfg;
    std::vector<float> params;
    int version = 0;
    llmc::read_model_file(paths[0], &cfg, &params, &version);
    LLMC_FUZZ_ASSERT(llmc::validate_config(cfg, nullptr));
    LLMC_FUZZ_ASSERT(params.size() == llmc::param_layout(cfg).total);
    LLMC_FUZZ_ASSERT(version == 3 || version == 5);
}

void write_seeds(const std::string& dir) {
    llmc::GPT2Config cfg;  // small, and odd where the format allows it
    cfg.max_seq_len = 8;
    cfg.vocab_size = 11;
    cfg.padded_vocab_size = 16;
    cfg.num_layers = 2;
    cfg.num_heads = 2;
    cfg.channels = 4;
    std::vector<float> params(llmc::param_layout(cfg).total);
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& p : params) p = normal(rng);
    const std::string tmp = dir + "/.model.tmp";
    for (int version : {3, 5}) {
        llmc::write_model_file(tmp, cfg, params.data(), version);
        llmc::fuzz::write_seed(dir, "model_v" + std::to_string(version),
                               {llmc::fuzz::read_file(tmp)});
    }
    std::remove(tmp.c_str());
}

}  // namespace

const llmc::fuzz::Target& llmc::fuzz::target() {
    static const Target t{{"model.bin"}, parse, write_seeds, {}};
    return t;
}
