// fuzz_debug_state.cpp: libFuzzer harness of read_debug_state (llmc/model_file.cpp), the PyTorch
// dump test_gpt2cu and test_gpt2_cpu read. Input: one debug state for a fixed tiny model (the
// model's config comes from its own, separately checked file). Seeds: states with and without
// the trailer, laid out by hand after model_file.h (only PyTorch writes them in this project).
#include <cstring>

#include "fuzz_util.h"
#include "model_file.h"

namespace {

llmc::GPT2Config model_config() {
    llmc::GPT2Config cfg;
    cfg.max_seq_len = 8;
    cfg.vocab_size = 11;
    cfg.padded_vocab_size = 16;
    cfg.num_layers = 2;
    cfg.num_heads = 2;
    cfg.channels = 4;
    return cfg;
}

void parse(const std::vector<std::string>& paths) {
    const llmc::GPT2Config cfg = model_config();
    llmc::DebugState st;
    llmc::read_debug_state(paths[0], cfg, &st);
    const size_t BT = (size_t)st.B * st.T;
    LLMC_FUZZ_ASSERT(st.B >= 1 && st.T >= 1 && st.T <= cfg.max_seq_len);
    LLMC_FUZZ_ASSERT(st.x.size() == BT && st.y.size() == BT);
    LLMC_FUZZ_ASSERT(st.logits.size() == BT * cfg.vocab_size);
    LLMC_FUZZ_ASSERT(st.grads.size() == llmc::param_layout(cfg).total);
    LLMC_FUZZ_ASSERT(st.n_steps >= 0 && st.step_losses.size() == (size_t)st.n_steps);
    LLMC_FUZZ_ASSERT(st.reference_bits == 32 || st.reference_bits == 64);
    LLMC_FUZZ_ASSERT(st.has_tf32_baseline == (st.tf32_source != 0) &&
                     (!st.has_tf32_baseline || st.trailer_version == 3));
    for (size_t i = 0; i < BT; ++i) {
        LLMC_FUZZ_ASSERT(st.x[i] >= 0 && st.x[i] < cfg.vocab_size);
        LLMC_FUZZ_ASSERT(st.y[i] >= 0 && st.y[i] < cfg.vocab_size);
    }
}

template <class T>
void append(std::string* out, const T& value) {
    out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void write_seeds(const std::string& dir) {
    const llmc::GPT2Config cfg = model_config();
    const int B = 2, T = 3;
    std::string core;
    int header[256] = {};
    header[0] = llmc::kDebugStateMagic;
    header[1] = 2;
    header[2] = B;
    header[3] = T;
    core.append(reinterpret_cast<const char*>(header), sizeof(header));
    for (int i = 0; i < B * T; ++i) append(&core, (i * 7) % cfg.vocab_size);           // x
    for (int i = 0; i < B * T; ++i) append(&core, (i * 5 + 1) % cfg.vocab_size);       // y
    for (int i = 0; i < B * T * cfg.vocab_size; ++i) append(&core, 0.01f * (i % 13));  // logits
    append(&core, 2.4f);                                                               // loss
    const size_t n_grads = llmc::param_layout(cfg).total;
    for (size_t i = 0; i < n_grads; ++i) append(&core, 1e-3f * (float)(i % 17) - 8e-3f);
    llmc::fuzz::write_seed(dir, "state_plain", {core});
    std::string trailed = core;
    const int n_steps = 3;
    append(&trailed, n_steps);
    for (float hp : {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f}) append(&trailed, hp);
    for (float loss : {2.4f, 2.3f, 2.1f}) append(&trailed, loss);
    llmc::fuzz::write_seed(dir, "state_trailer", {trailed});
    // Version 3: the autocast baselines, the reference's width (64), the TF32 source (2,
    // emulated) and the TF32 baselines.
    std::string v3 = trailed;
    append(&v3, 3);
    for (int i = 0; i < llmc::kNumBaselines; ++i) append(&v3, 1e-2f + 1e-4f * i);
    append(&v3, 64);
    append(&v3, 2);
    for (int i = 0; i < llmc::kNumBaselines; ++i) append(&v3, 1e-3f + 1e-5f * i);
    llmc::fuzz::write_seed(dir, "state_trailer_v3", {v3});
}

}  // namespace

const llmc::fuzz::Target& llmc::fuzz::target() {
    static const Target t{{"state.bin"}, parse, write_seeds, {}};
    return t;
}
