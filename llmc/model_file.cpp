// model_file.cpp: GPT-2 config checks, the parameter layout, and reading/writing the model
// file and the debug state described in model_file.h.
//
// Every reader checks, in this order: the file opens, the magic, the version, the header values
// (validate_config), then the exact byte size the header implies against the real size. Any
// problem ends the program with one sentence naming the file (LLMC_FAIL), because a bad file is
// a user mistake, not a bug.
#include "model_file.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "check.h"

namespace llmc {

const char* const kParamNames[kNumParamTensors] = {
    "wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb",
};

namespace {

constexpr int kHeaderInts = 256;
constexpr int kDebugStateVersion = 2;
// Upper bounds that keep every size product far from overflow and catch garbage headers.
constexpr int kMaxSeqLen = 1 << 20;
constexpr int kMaxVocab = 1 << 24;
constexpr int kMaxLayers = 1024;
constexpr int kMaxChannels = 1 << 16;
constexpr int kMaxSteps = 1 << 20;

// A FILE* that closes itself, so every early exit path stays leak-free in tests.
struct FileCloser {
    std::FILE* f;
    ~FileCloser() {
        if (f != nullptr) std::fclose(f);
    }
};

long long file_size_bytes(std::FILE* f) {
    std::fseek(f, 0, SEEK_END);
    long long size = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    return size;
}

// Reads n bytes; the size was checked up front, so a short read means the file changed or an
// I/O error, which is reported the same way.
void read_exact(std::FILE* f, void* dst, size_t n, const char* what, const std::string& path) {
    LLMC_CHECK(std::fread(dst, 1, n, f) == n, "could not read the %s from '%s'.", what,
               path.c_str());
}

bool check_range(const char* name, int value, int lo, int hi, std::string* why) {
    if (value >= lo && value <= hi) return true;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s (%d) must be between %d and %d", name, value, lo, hi);
    *why = buf;
    return false;
}

}  // namespace

ParamLayout param_layout(const GPT2Config& cfg) {
    const size_t Vp = cfg.padded_vocab_size, maxT = cfg.max_seq_len;
    const size_t L = cfg.num_layers, C = cfg.channels;
    ParamLayout layout;
    layout.sizes[kWte] = Vp * C;
    layout.sizes[kWpe] = maxT * C;
    layout.sizes[kLn1w] = L * C;
    layout.sizes[kLn1b] = L * C;
    layout.sizes[kQkvw] = L * 3 * C * C;
    layout.sizes[kQkvb] = L * 3 * C;
    layout.sizes[kAttprojw] = L * C * C;
    layout.sizes[kAttprojb] = L * C;
    layout.sizes[kLn2w] = L * C;
    layout.sizes[kLn2b] = L * C;
    layout.sizes[kFcw] = L * 4 * C * C;
    layout.sizes[kFcb] = L * 4 * C;
    layout.sizes[kFcprojw] = L * C * 4 * C;
    layout.sizes[kFcprojb] = L * C;
    layout.sizes[kLnfw] = C;
    layout.sizes[kLnfb] = C;
    size_t offset = 0;
    for (int i = 0; i < kNumParamTensors; i++) {
        layout.offsets[i] = offset;
        offset += layout.sizes[i];
    }
    layout.total = offset;
    return layout;
}

bool param_is_decayed(int index) {
    return index == kWte || index == kWpe || index == kQkvw || index == kAttprojw ||
           index == kFcw || index == kFcprojw;
}

bool validate_config(const GPT2Config& cfg, std::string* why) {
    std::string local;
    if (why == nullptr) why = &local;
    if (!check_range("max_seq_len", cfg.max_seq_len, 1, kMaxSeqLen, why)) return false;
    if (!check_range("vocab_size", cfg.vocab_size, 1, kMaxVocab, why)) return false;
    if (!check_range("padded_vocab_size", cfg.padded_vocab_size, 1, kMaxVocab, why)) return false;
    if (!check_range("num_layers", cfg.num_layers, 1, kMaxLayers, why)) return false;
    if (!check_range("num_heads", cfg.num_heads, 1, kMaxChannels, why)) return false;
    if (!check_range("channels", cfg.channels, 1, kMaxChannels, why)) return false;
    char buf[160];
    if (cfg.vocab_size > cfg.padded_vocab_size) {
        std::snprintf(buf, sizeof(buf), "vocab_size (%d) must not exceed padded_vocab_size (%d)",
                      cfg.vocab_size, cfg.padded_vocab_size);
        *why = buf;
        return false;
    }
    if (cfg.channels % cfg.num_heads != 0) {
        std::snprintf(buf, sizeof(buf), "num_heads (%d) must divide channels (%d)", cfg.num_heads,
                      cfg.channels);
        *why = buf;
        return false;
    }
    return true;
}

bool config_from_preset(const std::string& name, GPT2Config* cfg) {
    int L = 0, NH = 0, C = 0;
    if (name == "d12") {
        L = 12, NH = 12, C = 768;
    } else if (name == "d24") {
        L = 24, NH = 16, C = 1024;
    } else if (name == "d36") {
        L = 36, NH = 20, C = 1280;
    } else if (name == "d48") {
        L = 48, NH = 25, C = 1600;
    } else {
        return false;
    }
    cfg->max_seq_len = 1024;
    cfg->vocab_size = 50257;
    cfg->padded_vocab_size = 50304;
    cfg->num_layers = L;
    cfg->num_heads = NH;
    cfg->channels = C;
    return true;
}

uint16_t float_to_bf16_bits(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    // A NaN whose payload sits only in the low half would truncate to infinity; keep it a
    // quiet NaN instead.
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
    // Round to nearest, ties to even: add just under half an ulp plus the lowest kept bit.
    const uint32_t lsb = (bits >> 16) & 1u;
    bits += 0x7fffu + lsb;
    return static_cast<uint16_t>(bits >> 16);
}

float bf16_bits_to_float(uint16_t b) {
    const uint32_t bits = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

void read_model_file(const std::string& path, GPT2Config* cfg, std::vector<float>* params,
                     int* file_version) {
    FileCloser file{std::fopen(path.c_str(), "rb")};
    LLMC_CHECK(file.f != nullptr, "could not open the model file '%s'; check the path.",
               path.c_str());
    const long long actual = file_size_bytes(file.f);
    LLMC_CHECK(actual >= (long long)(kHeaderInts * sizeof(int)),
               "model file '%s' is %lld bytes, too short to hold its %d-byte header.", path.c_str(),
               actual, (int)(kHeaderInts * sizeof(int)));
    int header[kHeaderInts];
    read_exact(file.f, header, sizeof(header), "header", path);
    LLMC_CHECK(header[0] == kModelMagic,
               "model file '%s' has magic %d, not %d; it is not a GPT-2 model file.", path.c_str(),
               header[0], kModelMagic);
    const int version = header[1];
    LLMC_CHECK(version == 3 || version == 5,
               "model file '%s' has version %d; only 3 (fp32) and 5 (bf16) are supported.",
               path.c_str(), version);
    GPT2Config c;
    c.max_seq_len = header[2];
    c.vocab_size = header[3];
    c.num_layers = header[4];
    c.num_heads = header[5];
    c.channels = header[6];
    c.padded_vocab_size = header[7];
    std::string why;
    LLMC_CHECK(validate_config(c, &why), "model file '%s' has a bad header: %s.", path.c_str(),
               why.c_str());

    const ParamLayout layout = param_layout(c);
    const size_t elem_bytes = version == 3 ? sizeof(float) : sizeof(uint16_t);
    const long long expected = (long long)(sizeof(header) + layout.total * elem_bytes);
    LLMC_CHECK(actual == expected,
               "model file '%s' is %lld bytes but its header (L=%d, NH=%d, C=%d, Vp=%d, "
               "maxT=%d, version %d) needs %lld bytes; it is truncated or corrupt.",
               path.c_str(), actual, c.num_layers, c.num_heads, c.channels, c.padded_vocab_size,
               c.max_seq_len, version, expected);

    params->resize(layout.total);
    if (version == 3) {
        read_exact(file.f, params->data(), layout.total * sizeof(float), "parameters", path);
    } else {
        std::vector<uint16_t> raw(layout.total);
        read_exact(file.f, raw.data(), layout.total * sizeof(uint16_t), "parameters", path);
        for (size_t i = 0; i < layout.total; i++) (*params)[i] = bf16_bits_to_float(raw[i]);
    }
    *cfg = c;
    if (file_version != nullptr) *file_version = version;
}

void write_model_file(const std::string& path, const GPT2Config& cfg, const float* params,
                      int version) {
    LLMC_CHECK(version == 3 || version == 5,
               "cannot write model file '%s' as version %d; use 3 (fp32) or 5 (bf16).",
               path.c_str(), version);
    std::string why;
    LLMC_CHECK(validate_config(cfg, &why), "cannot write model file '%s': %s.", path.c_str(),
               why.c_str());
    int header[kHeaderInts] = {};
    header[0] = kModelMagic;
    header[1] = version;
    header[2] = cfg.max_seq_len;
    header[3] = cfg.vocab_size;
    header[4] = cfg.num_layers;
    header[5] = cfg.num_heads;
    header[6] = cfg.channels;
    header[7] = cfg.padded_vocab_size;

    FileCloser file{std::fopen(path.c_str(), "wb")};
    LLMC_CHECK(file.f != nullptr, "could not create the model file '%s'.", path.c_str());
    const size_t total = param_layout(cfg).total;
    bool ok = std::fwrite(header, sizeof(header), 1, file.f) == 1;
    if (version == 3) {
        ok = ok && std::fwrite(params, sizeof(float), total, file.f) == total;
    } else {
        // Convert in chunks so a large model does not need a second full-size buffer.
        std::vector<uint16_t> chunk(1 << 20);
        for (size_t start = 0; ok && start < total; start += chunk.size()) {
            const size_t n = std::min(chunk.size(), total - start);
            for (size_t i = 0; i < n; i++) chunk[i] = float_to_bf16_bits(params[start + i]);
            ok = std::fwrite(chunk.data(), sizeof(uint16_t), n, file.f) == n;
        }
    }
    const bool closed = std::fclose(file.f) == 0;
    file.f = nullptr;
    ok = ok && closed;
    LLMC_CHECK(ok, "could not write the model file '%s' (disk full?).", path.c_str());
}

namespace {

// Every token id must index a real vocab row, or the encoder would read out of bounds.
void check_tokens(const std::vector<int>& tokens, int V, const char* what,
                  const std::string& path) {
    for (size_t i = 0; i < tokens.size(); i++) {
        LLMC_CHECK(tokens[i] >= 0 && tokens[i] < V,
                   "debug state '%s' has %s[%zu] = %d, outside the model's vocab [0, %d).",
                   path.c_str(), what, i, tokens[i], V);
    }
}

// One set of kNumBaselines floats: logits, loss, the 16 gradients, step losses.
void unpack_baselines(const float* b, float* logits, float* loss, float* grads, float* steps) {
    *logits = b[0];
    *loss = b[1];
    for (int i = 0; i < kNumParamTensors; i++) grads[i] = b[2 + i];
    *steps = b[2 + kNumParamTensors];
}

// The optional trailer: n_steps, six hyper-parameters, n_steps losses (version 1), then the
// version (2 or 3) and kNumBaselines floats, and in version 3 the reference's width, the TF32
// source and kNumBaselines more floats.
void read_trailer(std::FILE* f, long long remaining, const std::string& path, DebugState* st) {
    const long long fixed = (long long)(sizeof(int) + 6 * sizeof(float));
    LLMC_CHECK(remaining >= fixed,
               "debug state '%s' has %lld bytes after the gradients, fewer than the %lld-byte "
               "trailer needs; it is truncated or corrupt.",
               path.c_str(), remaining, fixed);
    read_exact(f, &st->n_steps, sizeof(int), "trailer", path);
    LLMC_CHECK(st->n_steps >= 0 && st->n_steps <= kMaxSteps,
               "debug state '%s' has a trailer with n_steps = %d, outside [0, %d].", path.c_str(),
               st->n_steps, kMaxSteps);
    const long long baselines = (long long)(kNumBaselines * sizeof(float));
    const long long v1 = fixed + (long long)st->n_steps * (long long)sizeof(float);
    const long long v2 = v1 + (long long)sizeof(int) + baselines;
    const long long v3 = v2 + 2 * (long long)sizeof(int) + baselines;
    LLMC_CHECK(remaining >= v1,
               "debug state '%s' has a %lld-byte trailer but n_steps = %d needs %lld bytes; it "
               "is truncated or corrupt.",
               path.c_str(), remaining, st->n_steps, v1);
    float hp[6];
    read_exact(f, hp, sizeof(hp), "trailer", path);
    st->lr = hp[0];
    st->beta1 = hp[1];
    st->beta2 = hp[2];
    st->eps = hp[3];
    st->weight_decay = hp[4];
    st->grad_clip = hp[5];
    st->step_losses.resize(st->n_steps);
    read_exact(f, st->step_losses.data(), st->n_steps * sizeof(float), "trailer losses", path);
    st->trailer_version = 1;
    if (remaining == v1) return;
    LLMC_CHECK(remaining >= v1 + (long long)sizeof(int),
               "debug state '%s' has %lld stray bytes after its trailer; it is corrupt.",
               path.c_str(), remaining - v1);
    int version = 0;
    read_exact(f, &version, sizeof(int), "trailer version", path);
    LLMC_CHECK(version == 2 || version == 3,
               "debug state '%s' has trailer version %d; this build reads versions 1 to %d, so "
               "rewrite the state with this checkout's scripts/ref/train_gpt2.py --write-state.",
               path.c_str(), version, kTrailerVersion);
    const long long want = version == 2 ? v2 : v3;
    LLMC_CHECK(remaining == want,
               "debug state '%s' has a %lld-byte version %d trailer but n_steps = %d needs %lld "
               "bytes; it is truncated or corrupt.",
               path.c_str(), remaining, version, st->n_steps, want);
    float base[kNumBaselines];
    read_exact(f, base, sizeof(base), "trailer baselines", path);
    unpack_baselines(base, &st->base_logits, &st->base_loss, st->base_grads, &st->base_step_losses);
    st->trailer_version = version;
    st->has_baseline = true;
    if (version == 2) return;
    int kinds[2];
    read_exact(f, kinds, sizeof(kinds), "trailer reference width and TF32 source", path);
    LLMC_CHECK((kinds[0] == 32 || kinds[0] == 64) && kinds[1] >= 0 && kinds[1] <= 2,
               "debug state '%s' has a version 3 trailer with reference width %d and TF32 source "
               "%d (want 32 or 64, and 0, 1 or 2); it is corrupt.",
               path.c_str(), kinds[0], kinds[1]);
    st->reference_bits = kinds[0];
    st->tf32_source = kinds[1];
    read_exact(f, base, sizeof(base), "trailer TF32 baselines", path);
    unpack_baselines(base, &st->tf32_logits, &st->tf32_loss, st->tf32_grads, &st->tf32_step_losses);
    st->has_tf32_baseline = st->tf32_source != 0;
}

}  // namespace

void read_debug_state(const std::string& path, const GPT2Config& cfg, DebugState* st) {
    FileCloser file{std::fopen(path.c_str(), "rb")};
    LLMC_CHECK(file.f != nullptr, "could not open the debug state '%s'; check the path.",
               path.c_str());
    const long long actual = file_size_bytes(file.f);
    LLMC_CHECK(actual >= (long long)(kHeaderInts * sizeof(int)),
               "debug state '%s' is %lld bytes, too short to hold its %d-byte header.",
               path.c_str(), actual, (int)(kHeaderInts * sizeof(int)));
    int header[kHeaderInts];
    read_exact(file.f, header, sizeof(header), "header", path);
    LLMC_CHECK(header[0] == kDebugStateMagic,
               "debug state '%s' has magic %d, not %d; it is not a debug state file.", path.c_str(),
               header[0], kDebugStateMagic);
    LLMC_CHECK(header[1] == kDebugStateVersion, "debug state '%s' has version %d, not %d.",
               path.c_str(), header[1], kDebugStateVersion);
    const int B = header[2], T = header[3];
    LLMC_CHECK(B >= 1 && B <= (1 << 16) && T >= 1 && T <= cfg.max_seq_len,
               "debug state '%s' has B = %d and T = %d; need B >= 1 and 1 <= T <= maxT (%d).",
               path.c_str(), B, T, cfg.max_seq_len);

    const size_t BT = (size_t)B * T;
    const size_t n_grads = param_layout(cfg).total;
    const long long core =
        (long long)(sizeof(header) + 2 * BT * sizeof(int) + BT * cfg.vocab_size * sizeof(float) +
                    sizeof(float) + n_grads * sizeof(float));
    LLMC_CHECK(actual >= core,
               "debug state '%s' is %lld bytes but B=%d, T=%d with this model (V=%d, %zu params) "
               "needs at least %lld bytes; it is truncated or for another model.",
               path.c_str(), actual, B, T, cfg.vocab_size, n_grads, core);
    st->B = B;
    st->T = T;
    st->x.resize(BT);
    st->y.resize(BT);
    st->logits.resize(BT * cfg.vocab_size);
    st->grads.resize(n_grads);
    read_exact(file.f, st->x.data(), BT * sizeof(int), "inputs", path);
    read_exact(file.f, st->y.data(), BT * sizeof(int), "targets", path);
    read_exact(file.f, st->logits.data(), st->logits.size() * sizeof(float), "logits", path);
    read_exact(file.f, &st->loss, sizeof(float), "loss", path);
    read_exact(file.f, st->grads.data(), n_grads * sizeof(float), "gradients", path);
    check_tokens(st->x, cfg.vocab_size, "x", path);
    check_tokens(st->y, cfg.vocab_size, "y", path);

    st->n_steps = 0;
    st->lr = st->beta1 = st->beta2 = st->eps = st->weight_decay = st->grad_clip = 0.0f;
    st->step_losses.clear();
    st->trailer_version = 0;
    st->has_baseline = false;
    st->base_logits = st->base_loss = st->base_step_losses = 0.0f;
    for (float& b : st->base_grads) b = 0.0f;
    st->reference_bits = 32;
    st->tf32_source = 0;
    st->has_tf32_baseline = false;
    st->tf32_logits = st->tf32_loss = st->tf32_step_losses = 0.0f;
    for (float& b : st->tf32_grads) b = 0.0f;
    if (actual > core) read_trailer(file.f, actual - core, path, st);
}

}  // namespace llmc
