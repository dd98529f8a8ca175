// checkpoint.cpp: the checkpoint files of checkpoint.h: writing them crash-safely, finding and
// pruning them, and reading them back with every check a resume needs.
//
// Readers check, in this order: the file opens, its size covers the header, the magic, the
// version, the header values, the exact file size the header implies, then (whole reads) the
// checksum of each array. Any problem ends the program with one sentence naming the file.
#include "checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "check.h"
#include "rng.h"

namespace llmc {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

struct FileCloser {
    std::FILE* f;
    ~FileCloser() {
        if (f != nullptr) std::fclose(f);
    }
};

std::string step_name(const char* prefix, long long step) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s_%08lld.bin", prefix, step);
    return buf;
}

// The step of a name "PREFIX_DIGITS.bin", or -1.
long long parse_step_name(const std::string& name, const std::string& prefix) {
    const std::string head = prefix + "_", tail = ".bin";
    if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
        return -1;
    const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
    if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
        return -1;
    return std::stoll(digits);
}

bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return names;
    while (const dirent* e = readdir(d)) names.push_back(e->d_name);
    closedir(d);
    return names;
}

// fsync of a path (a written file, or a directory so that renames in it are durable).
void fsync_path(const std::string& path, bool is_dir) {
    const int fd = open(path.c_str(), is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    LLMC_CHECK(fd >= 0, "cannot open '%s' to flush it to disk (%s).", path.c_str(),
               std::strerror(errno));
    const int rc = fsync(fd);
    const int err = errno;
    close(fd);
    LLMC_CHECK(rc == 0, "cannot flush '%s' to disk (%s).", path.c_str(), std::strerror(err));
}

void write_all(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
    LLMC_CHECK(bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes,
               "cannot write the checkpoint file '%s' (%s); is the disk full?", path.c_str(),
               std::strerror(errno));
}

std::vector<int64_t> make_header(const CheckpointMeta& m) {
    std::vector<int64_t> h(kStateHeaderBytes / sizeof(int64_t), 0);
    h[kSlotMagic] = kStateMagic;
    h[kSlotVersion] = kStateVersion;
    h[kSlotHeaderBytes] = kStateHeaderBytes;
    h[kSlotStep] = m.step;
    h[kSlotAdamT] = m.adam_t;
    h[kSlotNumParams] = m.num_params;
    h[kSlotParamBytes] = m.param_bytes;
    h[kSlotMaxT] = m.cfg.max_seq_len;
    h[kSlotVocab] = m.cfg.vocab_size;
    h[kSlotPaddedVocab] = m.cfg.padded_vocab_size;
    h[kSlotLayers] = m.cfg.num_layers;
    h[kSlotHeads] = m.cfg.num_heads;
    h[kSlotChannels] = m.cfg.channels;
    for (int slot : kOptionSlots) h[slot] = m.options[slot];
    h[kSlotTrainShards] = m.train_shards;
    h[kSlotTrainTokens] = m.train_tokens;
    h[kSlotLoaderEpoch] = m.loader.epoch;
    h[kSlotLoaderShard] = m.loader.shard;
    h[kSlotLoaderOffset] = m.loader.offset;
    h[kSlotBadStreak] = m.bad_streak;
    h[kSlotBadTotal] = m.bad_total;
    h[kSlotSumModel] = (int64_t)m.sum_model;
    h[kSlotSumM] = (int64_t)m.sum_m;
    h[kSlotSumV] = (int64_t)m.sum_v;
    h[kSlotSumParams] = (int64_t)m.sum_params;
    h[kSlotOutlierMean] = slot_from_double(m.outlier_mean);
    h[kSlotOutlierSq] = slot_from_double(m.outlier_sq);
    h[kSlotOutlierCount] = m.outlier_count;
    h[kSlotOutlierTotal] = m.outlier_total;
    char* bytes = reinterpret_cast<char*>(h.data());
    std::strncpy(bytes + kStatePrecisionOffset, m.precision.c_str(), 15);
    std::memcpy(bytes + kStatePatternOffset, m.option_text.data(), m.option_text.size());
    return h;
}

void parse_header(const std::vector<int64_t>& h, CheckpointMeta* m) {
    m->step = h[kSlotStep];
    m->adam_t = h[kSlotAdamT];
    m->num_params = h[kSlotNumParams];
    m->param_bytes = (int)h[kSlotParamBytes];
    m->cfg.max_seq_len = (int)h[kSlotMaxT];
    m->cfg.vocab_size = (int)h[kSlotVocab];
    m->cfg.padded_vocab_size = (int)h[kSlotPaddedVocab];
    m->cfg.num_layers = (int)h[kSlotLayers];
    m->cfg.num_heads = (int)h[kSlotHeads];
    m->cfg.channels = (int)h[kSlotChannels];
    for (int slot : kOptionSlots) m->options[slot] = h[slot];
    m->train_shards = h[kSlotTrainShards];
    m->train_tokens = h[kSlotTrainTokens];
    m->loader.epoch = h[kSlotLoaderEpoch];
    m->loader.shard = (int)h[kSlotLoaderShard];
    m->loader.offset = h[kSlotLoaderOffset];
    m->bad_streak = h[kSlotBadStreak];
    m->bad_total = h[kSlotBadTotal];
    m->sum_model = (uint64_t)h[kSlotSumModel];
    m->sum_m = (uint64_t)h[kSlotSumM];
    m->sum_v = (uint64_t)h[kSlotSumV];
    m->sum_params = (uint64_t)h[kSlotSumParams];
    m->outlier_mean = double_from_slot(h[kSlotOutlierMean]);
    m->outlier_sq = double_from_slot(h[kSlotOutlierSq]);
    m->outlier_count = h[kSlotOutlierCount];
    m->outlier_total = h[kSlotOutlierTotal];
    const char* bytes = reinterpret_cast<const char*>(h.data());
    m->precision.assign(bytes + kStatePrecisionOffset, strnlen(bytes + kStatePrecisionOffset, 15));
    m->option_text.assign(bytes + kStatePatternOffset,
                          strnlen(bytes + kStatePatternOffset, kStatePatternMax));
}

size_t payload_bytes(const CheckpointMeta& m) {
    const size_t n = (size_t)m.num_params;
    return 8 * n + (m.param_bytes != 4 ? n * (size_t)m.param_bytes : 0);
}

// Opens a state file and reads and checks its header; leaves the file at the first array.
void open_state(const std::string& path, CheckpointMeta* meta, FileCloser* file) {
    file->f = std::fopen(path.c_str(), "rb");
    LLMC_CHECK(file->f != nullptr, "could not open the checkpoint state file '%s' (%s).",
               path.c_str(), std::strerror(errno));
    std::fseek(file->f, 0, SEEK_END);
    const long long actual = std::ftell(file->f);
    std::fseek(file->f, 0, SEEK_SET);
    LLMC_CHECK(actual >= kStateHeaderBytes,
               "checkpoint state file '%s' is %lld bytes, too short for its %d-byte header; it "
               "is truncated.",
               path.c_str(), actual, kStateHeaderBytes);
    std::vector<int64_t> h(kStateHeaderBytes / sizeof(int64_t));
    LLMC_CHECK(std::fread(h.data(), 1, kStateHeaderBytes, file->f) == (size_t)kStateHeaderBytes,
               "could not read the header of '%s'.", path.c_str());
    LLMC_CHECK(h[kSlotMagic] == kStateMagic,
               "'%s' does not start with the checkpoint magic 'LLMCCKPT'; it is not a checkpoint "
               "state file.",
               path.c_str());
    LLMC_CHECK(h[kSlotVersion] == kStateVersion,
               "checkpoint state file '%s' has version %lld; this build reads version %d.",
               path.c_str(), (long long)h[kSlotVersion], kStateVersion);
    parse_header(h, meta);
    std::string why;
    LLMC_CHECK(h[kSlotHeaderBytes] == kStateHeaderBytes && validate_config(meta->cfg, &why),
               "checkpoint state file '%s' has a bad header: %s.", path.c_str(),
               why.empty() ? "wrong header size" : why.c_str());
    const long long expect_params = (long long)param_layout(meta->cfg).total;
    LLMC_CHECK(
        meta->num_params == expect_params && (meta->param_bytes == 4 || meta->param_bytes == 2),
        "checkpoint state file '%s' has a bad header: %lld parameters of %d bytes for a "
        "model of %lld parameters.",
        path.c_str(), meta->num_params, meta->param_bytes, expect_params);
    const long long B = meta->options[kSlotB], T = meta->options[kSlotT];
    LLMC_CHECK(meta->step >= 0 && meta->adam_t >= 0 && meta->adam_t <= meta->step && B > 0 && T > 0,
               "checkpoint state file '%s' has a bad header: step %lld, AdamW t %lld, B %lld, T "
               "%lld.",
               path.c_str(), meta->step, meta->adam_t, B, T);
    LLMC_CHECK(std::isfinite(meta->outlier_mean) && std::isfinite(meta->outlier_sq) &&
                   meta->outlier_count >= 0 && meta->outlier_total >= 0 &&
                   meta->outlier_total <= meta->step,
               "checkpoint state file '%s' has bad --skip-outliers statistics in its header "
               "(mean %g, mean square %g, %lld steps, %lld skipped).",
               path.c_str(), meta->outlier_mean, meta->outlier_sq, meta->outlier_count,
               meta->outlier_total);
    const long long expected = kStateHeaderBytes + (long long)payload_bytes(*meta);
    LLMC_CHECK(actual == expected,
               "checkpoint state file '%s' is %lld bytes but its header (%lld parameters, step "
               "%lld) needs %lld; it is truncated or corrupt.",
               path.c_str(), actual, meta->num_params, meta->step, expected);
}

void read_array(std::FILE* f, void* dst, size_t bytes, uint64_t want, const char* what,
                const std::string& path) {
    LLMC_CHECK(std::fread(dst, 1, bytes, f) == bytes, "could not read the %s from '%s'.", what,
               path.c_str());
    LLMC_CHECK(checksum64(dst, bytes) == want,
               "checkpoint state file '%s' is corrupt: its %s do not match their checksum "
               "(resume from an older checkpoint with --resume PATH).",
               path.c_str(), what);
}

}  // namespace

uint64_t checksum64(const void* data, size_t bytes) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    const size_t words = bytes / 8;
    uint64_t sum = 0;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        std::memcpy(&w, p + 8 * i, 8);
        sum += splitmix64(w + i * kGolden);
    }
    if (bytes % 8 != 0) {
        uint64_t w = 0;
        std::memcpy(&w, p + 8 * words, bytes % 8);
        sum += splitmix64(w + words * kGolden);
    }
    return splitmix64(sum ^ (uint64_t)bytes);
}

std::string checkpoint_model_path(const std::string& dir, long long step) {
    return dir + "/" + step_name("model", step);
}

std::string checkpoint_state_path(const std::string& dir, long long step) {
    return dir + "/" + step_name("state", step);
}

std::vector<long long> list_checkpoints(const std::string& dir) {
    std::vector<long long> steps;
    for (const std::string& name : list_dir(dir)) {
        const long long step = parse_step_name(name, "state");
        if (step >= 0 && file_exists(dir + "/" + name) &&
            file_exists(checkpoint_model_path(dir, step)))
            steps.push_back(step);
    }
    std::sort(steps.begin(), steps.end());
    return steps;
}

void write_checkpoint(const std::string& dir, CheckpointMeta* meta, const float* weights,
                      const OptimizerState& opt) {
    const size_t n = (size_t)meta->num_params;
    LLMC_CHECK(opt.m.size() == n && opt.v.size() == n &&
                   opt.raw_params.size() == (meta->param_bytes != 4 ? n * meta->param_bytes : 0),
               "internal error: checkpoint arrays do not match %zu parameters", n);
    LLMC_CHECK((int)meta->option_text.size() <= kStatePatternMax,
               "the train glob is %zu characters; a checkpoint holds at most %d.",
               meta->option_text.size(), kStatePatternMax);
    meta->sum_model = checksum64(weights, n * sizeof(float));
    meta->sum_m = checksum64(opt.m.data(), n * sizeof(float));
    meta->sum_v = checksum64(opt.v.data(), n * sizeof(float));
    meta->sum_params =
        opt.raw_params.empty() ? 0 : checksum64(opt.raw_params.data(), opt.raw_params.size());

    const std::string model = checkpoint_model_path(dir, meta->step);
    const std::string state = checkpoint_state_path(dir, meta->step);
    const std::string model_tmp = dir + "/." + step_name("model", meta->step) + ".tmp";
    const std::string state_tmp = dir + "/." + step_name("state", meta->step) + ".tmp";
    write_model_file(model_tmp, meta->cfg, weights, 3);
    fsync_path(model_tmp, false);
    {
        FileCloser file{std::fopen(state_tmp.c_str(), "wb")};
        LLMC_CHECK(file.f != nullptr, "cannot create the checkpoint file '%s' (%s).",
                   state_tmp.c_str(), std::strerror(errno));
        const std::vector<int64_t> header = make_header(*meta);
        write_all(file.f, header.data(), kStateHeaderBytes, state_tmp);
        write_all(file.f, opt.m.data(), n * sizeof(float), state_tmp);
        write_all(file.f, opt.v.data(), n * sizeof(float), state_tmp);
        write_all(file.f, opt.raw_params.data(), opt.raw_params.size(), state_tmp);
        LLMC_CHECK(std::fflush(file.f) == 0 && fsync(fileno(file.f)) == 0,
                   "cannot flush the checkpoint file '%s' to disk (%s); is the disk full?",
                   state_tmp.c_str(), std::strerror(errno));
        const int rc = std::fclose(file.f);
        file.f = nullptr;
        LLMC_CHECK(rc == 0, "cannot close the checkpoint file '%s' (%s).", state_tmp.c_str(),
                   std::strerror(errno));
    }
    // An older state file of this step (a run resumed from before it) goes first, so that at
    // every moment a state file under its final name has its own model file beside it.
    if (std::remove(state.c_str()) == 0) fsync_path(dir, true);
    LLMC_CHECK(std::rename(model_tmp.c_str(), model.c_str()) == 0,
               "cannot rename '%s' to '%s' (%s).", model_tmp.c_str(), model.c_str(),
               std::strerror(errno));
    LLMC_CHECK(std::rename(state_tmp.c_str(), state.c_str()) == 0,
               "cannot rename '%s' to '%s' (%s).", state_tmp.c_str(), state.c_str(),
               std::strerror(errno));
    fsync_path(dir, true);
}

int prune_checkpoints(const std::string& dir, int keep_last, int keep_every) {
    const std::vector<long long> steps = list_checkpoints(dir);
    std::set<long long> keep;
    for (size_t i = steps.size() > (size_t)keep_last ? steps.size() - keep_last : 0;
         i < steps.size(); i++)
        keep.insert(steps[i]);
    int removed = 0;
    for (long long s : steps) {
        if (keep.count(s) || (keep_every > 0 && s % keep_every == 0)) continue;
        // State first: a model file alone is not a checkpoint, a state file alone would be one.
        std::remove(checkpoint_state_path(dir, s).c_str());
        std::remove(checkpoint_model_path(dir, s).c_str());
        removed++;
    }
    // Temporary files of writers that died, and model files whose state file never arrived.
    const long long newest = steps.empty() ? -1 : steps.back();
    for (const std::string& name : list_dir(dir)) {
        const bool temp = name.size() > 5 && name[0] == '.' &&
                          name.compare(name.size() - 4, 4, ".tmp") == 0 &&
                          (name.rfind(".model_", 0) == 0 || name.rfind(".state_", 0) == 0);
        const long long orphan = parse_step_name(name, "model");
        if (temp ||
            (orphan >= 0 && orphan < newest && !file_exists(checkpoint_state_path(dir, orphan))))
            std::remove((dir + "/" + name).c_str());
    }
    return removed;
}

void read_checkpoint_meta(const std::string& state_path, CheckpointMeta* meta) {
    FileCloser file{nullptr};
    open_state(state_path, meta, &file);
}

void read_checkpoint_state(const std::string& state_path, CheckpointMeta* meta,
                           OptimizerState* opt) {
    FileCloser file{nullptr};
    open_state(state_path, meta, &file);
    const size_t n = (size_t)meta->num_params;
    opt->m.resize(n);
    opt->v.resize(n);
    opt->raw_params.resize(meta->param_bytes != 4 ? n * meta->param_bytes : 0);
    read_array(file.f, opt->m.data(), n * sizeof(float), meta->sum_m, "AdamW m values", state_path);
    read_array(file.f, opt->v.data(), n * sizeof(float), meta->sum_v, "AdamW v values", state_path);
    if (!opt->raw_params.empty())
        read_array(file.f, opt->raw_params.data(), opt->raw_params.size(), meta->sum_params,
                   "device parameters", state_path);
}

void read_checkpoint_model(const std::string& model_path, const CheckpointMeta& meta,
                           std::vector<float>* weights) {
    GPT2Config cfg;
    int version = 0;
    read_model_file(model_path, &cfg, weights, &version);
    const GPT2Config& c = meta.cfg;
    LLMC_CHECK(version == 3 && cfg.max_seq_len == c.max_seq_len && cfg.vocab_size == c.vocab_size &&
                   cfg.padded_vocab_size == c.padded_vocab_size && cfg.num_layers == c.num_layers &&
                   cfg.num_heads == c.num_heads && cfg.channels == c.channels,
               "model file '%s' does not have the shape (or fp32 version 3) its state file "
               "records; it belongs to another checkpoint.",
               model_path.c_str());
    LLMC_CHECK(checksum64(weights->data(), weights->size() * sizeof(float)) == meta.sum_model,
               "model file '%s' fails the checksum its state file records: it is corrupt or from "
               "another checkpoint (resume from an older checkpoint with --resume PATH).",
               model_path.c_str());
}

std::string resolve_resume_path(const std::string& path) {
    struct stat st;
    LLMC_CHECK(stat(path.c_str(), &st) == 0,
               "--resume %s: no such file or directory; pass a run directory or a "
               "state_SSSSSSSS.bin file.",
               path.c_str());
    if (!S_ISDIR(st.st_mode)) return path;
    const std::vector<long long> steps = list_checkpoints(path);
    return steps.empty() ? std::string() : checkpoint_state_path(path, steps.back());
}

std::string model_path_for_state(const std::string& state_path) {
    const size_t slash = state_path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : state_path.substr(0, slash);
    const std::string name = slash == std::string::npos ? state_path : state_path.substr(slash + 1);
    const long long step = parse_step_name(name, "state");
    LLMC_CHECK(step >= 0,
               "'%s' is not named like a checkpoint state file (state_SSSSSSSS.bin), so its "
               "model file cannot be found.",
               state_path.c_str());
    return checkpoint_model_path(dir, step);
}

}  // namespace llmc
