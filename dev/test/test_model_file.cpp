// test_model_file.cpp: host test of llmc/model_file: parameter layout, presets, config checks,
// bf16 rounding, model file and debug state round trips, and the refusal of malformed files.
//
// Readers end the program on a bad file (LLMC_FAIL -> exit 1), so each malformed case runs in
// a forked child whose stderr is captured: the case passes when the child exits with status 1
// and its message names the file and says what is wrong.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "host_test.h"
#include "model_file.h"

namespace {

void set_int(std::vector<char>* bytes, size_t index, int value) {
    std::memcpy(bytes->data() + index * sizeof(int), &value, sizeof(int));
}

template <typename T>
void append(std::vector<char>* bytes, const T* data, size_t n) {
    const char* p = reinterpret_cast<const char*>(data);
    bytes->insert(bytes->end(), p, p + n * sizeof(T));
}

void test_layout_and_presets() {
    llmc::GPT2Config d12;
    check(llmc::config_from_preset("d12", &d12), "preset d12 exists");
    const llmc::ParamLayout lay = llmc::param_layout(d12);
    check(lay.total == 124475904u, "d12 has 124,475,904 params (got %zu)", lay.total);

    const int expected[4][3] = {{12, 12, 768}, {24, 16, 1024}, {36, 20, 1280}, {48, 25, 1600}};
    const char* names[4] = {"d12", "d24", "d36", "d48"};
    for (int i = 0; i < 4; i++) {
        llmc::GPT2Config c;
        const bool found = llmc::config_from_preset(names[i], &c);
        std::string why;
        const bool valid = llmc::validate_config(c, &why);
        const bool shape = c.num_layers == expected[i][0] && c.num_heads == expected[i][1] &&
                           c.channels == expected[i][2] && c.max_seq_len == 1024 &&
                           c.vocab_size == 50257 && c.padded_vocab_size == 50304;
        // Independent count: wte, wpe, 12C^2 + 13C per layer (4 matrices, 4 biases, 2 LNs), lnf.
        const size_t C = c.channels, L = c.num_layers;
        const size_t formula = 50304 * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C;
        const size_t total = llmc::param_layout(c).total;
        check(found && valid && shape && total == formula,
              "preset %s = (L %d, NH %d, C %d), %zu params (formula %zu)", names[i], c.num_layers,
              c.num_heads, c.channels, total, formula);
    }
    llmc::GPT2Config unused;
    check(!llmc::config_from_preset("d13", &unused), "unknown preset d13 is rejected");

    bool contiguous = lay.offsets[0] == 0;
    for (int i = 1; i < llmc::kNumParamTensors; i++) {
        contiguous = contiguous && lay.offsets[i] == lay.offsets[i - 1] + lay.sizes[i - 1];
    }
    contiguous = contiguous && lay.total == lay.offsets[15] + lay.sizes[15];
    check(contiguous, "tensors are packed back to back in file order");
    check(lay.sizes[llmc::kWte] == 50304u * 768 && lay.sizes[llmc::kQkvw] == 12u * 3 * 768 * 768 &&
              lay.sizes[llmc::kFcprojw] == 12u * 768 * 3072 && lay.sizes[llmc::kLnfb] == 768u,
          "d12 tensor sizes (wte Vp*C, qkvw L*3C*C, fcprojw L*C*4C, lnfb C)");

    std::string decayed;
    for (int i = 0; i < llmc::kNumParamTensors; i++) {
        if (llmc::param_is_decayed(i)) decayed += std::string(llmc::kParamNames[i]) + " ";
    }
    check(decayed == "wte wpe qkvw attprojw fcw fcprojw ", "decayed tensors: %s", decayed.c_str());
    check(std::strcmp(llmc::kParamNames[llmc::kAttprojb], "attprojb") == 0 &&
              std::strcmp(llmc::kParamNames[llmc::kLnfb], "lnfb") == 0,
          "kParamNames follow the enum");
}

// Each case breaks one field of a valid config and looks for the named value in the reason.
void test_validate_config() {
    struct Case {
        int field;  // index into the int fields below
        int value;
        const char* expected;
    };
    const Case cases[] = {
        {3, 5, "num_heads (5) must divide channels (768)"},
        {1, 50305, "vocab_size (50305) must not exceed padded_vocab_size (50304)"},
        {2, 0, "num_layers (0)"},
        {4, -768, "channels (-768)"},
        {0, 0, "max_seq_len (0)"},
    };
    for (const Case& c : cases) {
        llmc::GPT2Config cfg;
        llmc::config_from_preset("d12", &cfg);
        int* fields[5] = {&cfg.max_seq_len, &cfg.vocab_size, &cfg.num_layers, &cfg.num_heads,
                          &cfg.channels};
        *fields[c.field] = c.value;
        std::string why;
        const bool valid = llmc::validate_config(cfg, &why);
        check(!valid && why.find(c.expected) != std::string::npos, "validate_config: \"%s\"",
              why.c_str());
    }
}

uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

void test_bf16() {
    struct Case {
        uint32_t in;
        uint16_t out;
        const char* why;
    };
    const Case cases[] = {
        {0x3f800000u, 0x3f80u, "1.0 exact"},
        {0x3f808000u, 0x3f80u, "tie rounds to even (down)"},
        {0x3f818000u, 0x3f82u, "tie rounds to even (up)"},
        {0x3f808001u, 0x3f81u, "above half rounds up"},
        {0x3f807fffu, 0x3f80u, "below half rounds down"},
        {0xc0200000u, 0xc020u, "-2.5 exact"},
        {0x7f800000u, 0x7f80u, "+inf"},
        {0xff800000u, 0xff80u, "-inf"},
        {0x7f7fffffu, 0x7f80u, "FLT_MAX overflows to inf"},
        {0x00000001u, 0x0000u, "smallest denormal rounds to zero"},
    };
    for (const Case& c : cases) {
        const uint16_t got = llmc::float_to_bf16_bits(bits_float(c.in));
        check(got == c.out, "bf16 of 0x%08x is 0x%04x (expected 0x%04x: %s)", c.in, got, c.out,
              c.why);
    }
    const uint16_t nan = llmc::float_to_bf16_bits(bits_float(0x7f800001u));
    check(std::isnan(llmc::bf16_bits_to_float(nan)), "NaN with a low payload stays NaN (0x%04x)",
          nan);
    check(llmc::bf16_bits_to_float(0x3fc0u) == 1.5f, "bf16 0x3fc0 widens to 1.5");
}

// A small awkward config: odd sizes, V not a multiple of anything, Vp > V.
llmc::GPT2Config small_config() {
    llmc::GPT2Config c;
    c.max_seq_len = 33;
    c.vocab_size = 101;
    c.padded_vocab_size = 128;
    c.num_layers = 3;
    c.num_heads = 3;
    c.channels = 48;
    return c;
}

bool same_config(const llmc::GPT2Config& a, const llmc::GPT2Config& b) {
    return a.max_seq_len == b.max_seq_len && a.vocab_size == b.vocab_size &&
           a.padded_vocab_size == b.padded_vocab_size && a.num_layers == b.num_layers &&
           a.num_heads == b.num_heads && a.channels == b.channels;
}

void test_model_round_trip(const std::string& dir, const std::vector<float>& params) {
    const llmc::GPT2Config cfg = small_config();
    const std::string p32 = dir + "/model_fp32.bin", p16 = dir + "/model_bf16.bin";
    llmc::write_model_file(p32, cfg, params.data(), 3);
    llmc::write_model_file(p16, cfg, params.data(), 5);

    llmc::GPT2Config got;
    std::vector<float> back;
    int version = 0;
    llmc::read_model_file(p32, &got, &back, &version);
    size_t mismatch = 0;
    for (size_t i = 0; i < params.size(); i++)
        mismatch += float_bits(back[i]) != float_bits(params[i]);
    check(version == 3 && same_config(got, cfg) && back.size() == params.size() && mismatch == 0,
          "fp32 round trip: version %d, %zu params, %zu bitwise mismatches", version, back.size(),
          mismatch);

    llmc::read_model_file(p16, &got, &back, &version);
    // Round to nearest keeps 8 significant bits, so the error is at most 2^-8 of the value.
    double worst = 0.0;
    size_t worst_i = 0, not_rne = 0;
    for (size_t i = 0; i < params.size(); i++) {
        const double rel = std::fabs((double)back[i] - params[i]) / std::fabs(params[i]);
        if (rel > worst) worst = rel, worst_i = i;
        not_rne += back[i] != llmc::bf16_bits_to_float(llmc::float_to_bf16_bits(params[i]));
    }
    check(version == 5 && same_config(got, cfg) && back.size() == params.size() &&
              worst <= std::ldexp(1.0, -8) && not_rne == 0,
          "bf16 round trip: version %d, worst rel err %.3e at %zu (%.8g -> %.8g), %zu not RNE",
          version, worst, worst_i, params[worst_i], back[worst_i], not_rne);
    const long long size16 = (long long)read_bytes(p16).size();
    check(size16 == 1024 + 2 * (long long)params.size(), "bf16 file holds 2 bytes per param");
}

void test_model_refusals(const std::string& dir) {
    const std::string good = dir + "/model_fp32.bin", bad = dir + "/bad_model.bin";
    const std::vector<char> bytes = read_bytes(good);
    auto read = [&bad] {
        llmc::GPT2Config c;
        std::vector<float> p;
        llmc::read_model_file(bad, &c, &p, nullptr);
    };
    auto refuse = [&](const char* what, std::vector<char> file,
                      const std::vector<std::string>& needles) {
        write_bytes(bad, file);
        expect_refusal(what, bad, needles, read);
    };
    std::vector<char> f = bytes;
    expect_refusal("a missing file", dir + "/no_such.bin", {"could not open"}, [&dir] {
        llmc::GPT2Config c;
        std::vector<float> p;
        llmc::read_model_file(dir + "/no_such.bin", &c, &p, nullptr);
    });
    set_int(&f, 0, 20240327);
    refuse("a wrong magic", f, {"magic 20240327"});
    f = bytes;
    set_int(&f, 1, 4);
    refuse("a wrong version", f, {"version 4"});
    f = bytes;
    f.resize(f.size() - 10);
    refuse("a truncated file", f,
           {std::to_string(bytes.size() - 10), std::to_string(bytes.size())});
    f = bytes;
    f.push_back(0);
    refuse("a file with extra bytes", f, {std::to_string(bytes.size() + 1)});
    refuse("a file shorter than its header", std::vector<char>(bytes.begin(), bytes.begin() + 100),
           {"100 bytes"});
    f = bytes;
    set_int(&f, 1, 5);  // fp32 payload labelled bf16: twice the bytes the header implies
    refuse("fp32 data labelled version 5", f, {"bytes"});
    f = bytes;
    set_int(&f, 5, 5);
    refuse("num_heads not dividing channels", f, {"num_heads (5) must divide channels (48)"});
    f = bytes;
    set_int(&f, 4, 0);
    refuse("zero layers", f, {"num_layers (0)"});
    f = bytes;
    set_int(&f, 2, -1);
    refuse("a negative maxT", f, {"max_seq_len (-1)"});
    f = bytes;
    set_int(&f, 3, 129);
    refuse("vocab larger than the padded vocab", f,
           {"vocab_size (129) must not exceed padded_vocab_size (128)"});
}

// Bytes of a debug state for cfg with B, T; random tokens and values; n_steps < 0 means no
// trailer; trailer_version 1 (no baselines), 2 (with PyTorch's autocast baselines) or 3 (also
// the reference's width, 64, and TF32 baselines measured on a GPU, source 1).
std::vector<char> make_debug_state(const llmc::GPT2Config& cfg, int B, int T, int n_steps,
                                   std::mt19937* rng, llmc::DebugState* expect,
                                   int trailer_version = 1) {
    std::uniform_int_distribution<int> token(0, cfg.vocab_size - 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const size_t BT = (size_t)B * T;
    *expect = llmc::DebugState();
    expect->B = B;
    expect->T = T;
    expect->x.resize(BT);
    expect->y.resize(BT);
    for (size_t i = 0; i < BT; i++) expect->x[i] = token(*rng), expect->y[i] = token(*rng);
    expect->logits.resize(BT * cfg.vocab_size);
    for (float& v : expect->logits) v = normal(*rng);
    expect->loss = 4.25f;
    expect->grads.resize(llmc::param_layout(cfg).total);
    for (float& v : expect->grads) v = normal(*rng);
    int header[256] = {llmc::kDebugStateMagic, 2, B, T};
    std::vector<char> bytes;
    append(&bytes, header, 256);
    append(&bytes, expect->x.data(), BT);
    append(&bytes, expect->y.data(), BT);
    append(&bytes, expect->logits.data(), expect->logits.size());
    append(&bytes, &expect->loss, 1);
    append(&bytes, expect->grads.data(), expect->grads.size());
    expect->n_steps = n_steps < 0 ? 0 : n_steps;
    expect->step_losses.assign(expect->n_steps, 0.0f);
    for (int k = 0; k < expect->n_steps; k++) expect->step_losses[k] = 4.25f - 0.125f * k;
    if (n_steps < 0) return bytes;
    const float hp[6] = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    expect->lr = hp[0], expect->beta1 = hp[1], expect->beta2 = hp[2];
    expect->eps = hp[3], expect->weight_decay = hp[4], expect->grad_clip = hp[5];
    append(&bytes, &n_steps, 1);
    append(&bytes, hp, 6);
    append(&bytes, expect->step_losses.data(), expect->step_losses.size());
    expect->trailer_version = trailer_version;
    if (trailer_version < 2) return bytes;
    float base[llmc::kNumBaselines];
    for (float& b : base) b = std::fabs(normal(*rng)) * 1e-2f;
    expect->has_baseline = true;
    expect->base_logits = base[0];
    expect->base_loss = base[1];
    for (int i = 0; i < llmc::kNumParamTensors; i++) expect->base_grads[i] = base[2 + i];
    expect->base_step_losses = base[2 + llmc::kNumParamTensors];
    append(&bytes, &trailer_version, 1);
    append(&bytes, base, llmc::kNumBaselines);
    if (trailer_version < 3) return bytes;
    const int kinds[2] = {64, 1};
    for (float& b : base) b = std::fabs(normal(*rng)) * 1e-3f;
    expect->reference_bits = kinds[0];
    expect->tf32_source = kinds[1];
    expect->has_tf32_baseline = true;
    expect->tf32_logits = base[0];
    expect->tf32_loss = base[1];
    for (int i = 0; i < llmc::kNumParamTensors; i++) expect->tf32_grads[i] = base[2 + i];
    expect->tf32_step_losses = base[2 + llmc::kNumParamTensors];
    append(&bytes, kinds, 2);
    append(&bytes, base, llmc::kNumBaselines);
    return bytes;
}

bool same_state(const llmc::DebugState& a, const llmc::DebugState& b) {
    return a.B == b.B && a.T == b.T && a.x == b.x && a.y == b.y && a.logits == b.logits &&
           a.loss == b.loss && a.grads == b.grads && a.n_steps == b.n_steps && a.lr == b.lr &&
           a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
           a.weight_decay == b.weight_decay && a.grad_clip == b.grad_clip &&
           a.step_losses == b.step_losses && a.trailer_version == b.trailer_version &&
           a.has_baseline == b.has_baseline && a.base_logits == b.base_logits &&
           a.base_loss == b.base_loss && a.base_step_losses == b.base_step_losses &&
           std::equal(a.base_grads, a.base_grads + llmc::kNumParamTensors, b.base_grads) &&
           a.reference_bits == b.reference_bits && a.tf32_source == b.tf32_source &&
           a.has_tf32_baseline == b.has_tf32_baseline && a.tf32_logits == b.tf32_logits &&
           a.tf32_loss == b.tf32_loss && a.tf32_step_losses == b.tf32_step_losses &&
           std::equal(a.tf32_grads, a.tf32_grads + llmc::kNumParamTensors, b.tf32_grads);
}

void test_debug_state(const std::string& dir, const llmc::GPT2Config& cfg, std::mt19937* rng) {
    const std::string path = dir + "/state.bin";
    llmc::DebugState expect, got;
    std::vector<char> with_trailer = make_debug_state(cfg, 2, 7, 3, rng, &expect);
    write_bytes(path, with_trailer);
    llmc::read_debug_state(path, cfg, &got);
    check(same_state(got, expect) && !got.has_baseline,
          "debug state with a 3-step version 1 trailer reads back exactly, without baselines");
    llmc::DebugState expect2;
    const std::vector<char> with_baseline = make_debug_state(cfg, 3, 5, 10, rng, &expect2, 2);
    write_bytes(path, with_baseline);
    llmc::read_debug_state(path, cfg, &got);
    check(same_state(got, expect2) && got.has_baseline && got.trailer_version == 2 &&
              !got.has_tf32_baseline && got.reference_bits == 32,
          "debug state with a version 2 trailer (10 steps, 19 baselines) reads back exactly");
    llmc::DebugState expect3;
    const std::vector<char> with_tf32 = make_debug_state(cfg, 3, 5, 10, rng, &expect3, 3);
    write_bytes(path, with_tf32);
    llmc::read_debug_state(path, cfg, &got);
    check(same_state(got, expect3) && got.trailer_version == 3 && got.has_tf32_baseline &&
              got.reference_bits == 64 && got.tf32_source == 1,
          "debug state with a version 3 trailer (width 64, TF32 baselines) reads back exactly");

    write_bytes(path, make_debug_state(cfg, 1, cfg.max_seq_len, -1, rng, &expect));
    got.n_steps = 99;
    llmc::read_debug_state(path, cfg, &got);
    check(same_state(got, expect) && got.n_steps == 0,
          "debug state without a trailer reads back with n_steps 0 (B=1, T=maxT)");

    auto refuse = [&](const char* what, std::vector<char> file,
                      const std::vector<std::string>& needles) {
        write_bytes(path, file);
        expect_refusal(what, path, needles, [&] {
            llmc::DebugState st;
            llmc::read_debug_state(path, cfg, &st);
        });
    };
    std::vector<char> f = with_trailer;
    set_int(&f, 0, llmc::kModelMagic);
    refuse("a debug state with a wrong magic", f, {"magic 20240326"});
    f = with_trailer;
    set_int(&f, 1, 1);
    refuse("a debug state with a wrong version", f, {"version 1"});
    f = with_trailer;
    set_int(&f, 3, cfg.max_seq_len + 1);
    refuse("a debug state with T > maxT", f, {"T = 34"});
    const size_t core = with_trailer.size() - (4 + 24 + 3 * 4);
    refuse("a debug state truncated in the gradients",
           std::vector<char>(with_trailer.begin(), with_trailer.begin() + core - 4),
           {std::to_string(core - 4), std::to_string(core)});
    f = with_trailer;
    f.resize(f.size() - 2);
    refuse("a debug state with a truncated trailer", f, {"n_steps = 3", "38-byte trailer"});
    f.assign(with_trailer.begin(), with_trailer.begin() + core + 3);
    refuse("a debug state with a 3-byte trailer", f, {"3 bytes after the gradients"});
    const size_t v2_at = with_baseline.size() - 4 * (1 + llmc::kNumBaselines);
    f.assign(with_baseline.begin(), with_baseline.end() - 4);
    refuse("a debug state with a truncated version 2 trailer", f,
           {"version 2 trailer", "n_steps = 10", "truncated"});
    f.assign(with_baseline.begin(), with_baseline.begin() + v2_at + 2);
    refuse("a debug state with 2 stray bytes after a version 1 trailer", f, {"2 stray bytes"});
    f = with_baseline;
    std::memcpy(f.data() + v2_at, "\x07\0\0\0", 4);
    refuse("a debug state with trailer version 7", f,
           {"trailer version 7", "scripts/ref/train_gpt2.py --write-state"});
    const size_t v3_at = with_tf32.size() - 4 * (2 + llmc::kNumBaselines);
    f.assign(with_tf32.begin(), with_tf32.end() - 4);
    refuse("a debug state with a truncated version 3 trailer", f,
           {"version 3 trailer", "n_steps = 10", "truncated"});
    f = with_tf32;
    std::memcpy(f.data() + v3_at, "\x30\0\0\0", 4);
    refuse("a version 3 trailer with a reference width of 48", f, {"reference width 48"});
    f = with_tf32;
    std::memcpy(f.data() + v3_at + 4, "\x03\0\0\0", 4);
    refuse("a version 3 trailer with TF32 source 3", f, {"TF32 source 3"});
    f = with_trailer;
    set_int(&f, 256 + 5, cfg.vocab_size);
    refuse("a debug state with a token id outside the vocab", f, {"x[5] = 101"});
}

void remove_scratch(const std::string& dir) {
    for (const char* name : {"model_fp32.bin", "model_bf16.bin", "bad_model.bin", "state.bin"}) {
        std::remove((dir + "/" + name).c_str());
    }
    rmdir(dir.c_str());
}

}  // namespace

int main() {
    char dir_template[] = "/tmp/test_model_file.XXXXXX";
    const char* dir = mkdtemp(dir_template);
    if (dir == nullptr) {
        std::fprintf(stderr, "test_model_file: cannot create a scratch directory in /tmp\n");
        return 2;
    }
    const llmc::GPT2Config cfg = small_config();
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    std::vector<float> params(llmc::param_layout(cfg).total);
    for (float& p : params) p = normal(rng);

    test_layout_and_presets();
    test_validate_config();
    test_bf16();
    test_model_round_trip(dir, params);
    test_model_refusals(dir);
    test_debug_state(dir, cfg, &rng);
    remove_scratch(dir);

    std::printf("test_model_file: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
