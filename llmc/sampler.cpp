// sampler.cpp: next-token sampling and the tokenizer-file decoder (see sampler.h).
#include "sampler.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "rng.h"
#include "tokenizer.h"

namespace llmc {
namespace {

constexpr int32_t kTokenizerFileMagic = 20240328;

// Argmax, the lowest id among equal maxima.
int argmax(const float* logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

}  // namespace

std::string sampler_options_error(const SamplerOptions& o) {
    char buf[160];
    if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature)) {
        std::snprintf(buf, sizeof(buf),
                      "the temperature must be a finite number >= 0 (0 = greedy), not %g",
                      o.temperature);
        return buf;
    }
    if (o.top_k < 0) {
        std::snprintf(buf, sizeof(buf), "top-k must be >= 0 (0 = every token), not %d", o.top_k);
        return buf;
    }
    return "";
}

int sample_token(const float* logits, int V, const SamplerOptions& o, uint64_t* rng,
                 std::string* why) {
    *why = sampler_options_error(o);
    if (!why->empty()) return -1;
    if (V < 1) {
        *why = "there are no logits to sample from (V = " + std::to_string(V) + ")";
        return -1;
    }
    for (int i = 0; i < V; i++) {
        if (!std::isfinite(logits[i])) {
            char buf[160];
            std::snprintf(buf, sizeof(buf),
                          "logit %d of %d is %g; the model's output is not finite (diverged "
                          "weights?), so there is nothing to sample",
                          i, V, logits[i]);
            *why = buf;
            return -1;
        }
    }
    if (o.temperature == 0.0f || o.top_k == 1) return argmax(logits, V);

    // Candidates in id order: all tokens, or the top_k largest (a total order, so the same set
    // on every standard library).
    std::vector<int> ids(V);
    for (int i = 0; i < V; i++) ids[i] = i;
    if (o.top_k > 0 && o.top_k < V) {
        auto larger = [logits](int a, int b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        };
        std::nth_element(ids.begin(), ids.begin() + (o.top_k - 1), ids.end(), larger);
        ids.resize(o.top_k);
        std::sort(ids.begin(), ids.end());
    }
    double max_logit = -INFINITY;
    for (int id : ids) max_logit = std::max(max_logit, (double)logits[id]);
    std::vector<double> weight(ids.size());
    double sum = 0.0;
    for (size_t j = 0; j < ids.size(); j++) {
        weight[j] = std::exp(((double)logits[ids[j]] - max_logit) / (double)o.temperature);
        sum += weight[j];
    }
    // 53 random bits: u in [0, 1) exactly representable.
    const double u = (double)(splitmix64_next(rng) >> 11) * 0x1.0p-53;
    const double target = u * sum;
    double cumulative = 0.0;
    for (size_t j = 0; j < ids.size(); j++) {
        cumulative += weight[j];
        if (target < cumulative) return ids[j];
    }
    // Rounding can leave target at the very top: the last candidate with any weight.
    for (size_t j = ids.size(); j-- > 0;)
        if (weight[j] > 0.0) return ids[j];
    return ids.back();
}

std::string valid_utf8(const std::string& s) {
    std::string out;
    const size_t n = s.size();
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        // Length and the allowed range of the second byte (Unicode's table of well-formed
        // sequences); later bytes are plain continuation bytes.
        int len = 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c < 0x80)
            len = 1;
        else if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        }
        bool ok = len > 0 && i + len <= n;
        for (int k = 1; ok && k < len; k++) {
            const unsigned char b = (unsigned char)s[i + k];
            ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        }
        if (ok) {
            out.append(s, i, len);
            i += len;
        } else {
            out += "\xEF\xBF\xBD";
            i += 1;
        }
    }
    return out;
}

bool TokenTable::load(const std::string& path, std::string* why) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        // GPT-2's encoder.json + vocab.bpe: each id's bytes through the tokenizer's decode.
        Tokenizer tok;
        if (!tok.load(path, why)) return false;
        bytes_.clear();
        offsets_.assign(1, 0);
        for (int id = 0; id < tok.vocab_size(); id++) {
            bytes_ += tok.decode(&id, 1);
            offsets_.push_back((uint32_t)bytes_.size());
        }
        return true;
    }
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
        *why = "cannot open the tokenizer file '" + path + "' (" + std::strerror(errno) + ")";
        return false;
    }
    std::string data;
    char buf[1 << 16];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, got);
    std::fclose(f);
    int32_t header[256];
    if (data.size() < sizeof(header)) {
        *why = "the tokenizer file '" + path + "' is too short for its 1024-byte header";
        return false;
    }
    std::memcpy(header, data.data(), sizeof(header));
    if (header[0] != kTokenizerFileMagic || (header[1] != 1 && header[1] != 2) || header[2] < 1 ||
        header[2] > (1 << 24)) {
        *why = "'" + path + "' is not an llm.c tokenizer file (bad magic, version or vocab size)";
        return false;
    }
    const int V = header[2];
    bytes_.clear();
    offsets_.assign(1, 0);
    size_t pos = sizeof(header);
    for (int id = 0; id < V; id++) {
        const size_t len = pos < data.size() ? (unsigned char)data[pos] : 0;
        if (len == 0 || pos + 1 + len > data.size()) {
            *why = "the tokenizer file '" + path + "' is truncated or corrupt at token " +
                   std::to_string(id) + " of " + std::to_string(V);
            bytes_.clear();
            offsets_.assign(1, 0);
            return false;
        }
        bytes_.append(data, pos + 1, len);
        offsets_.push_back((uint32_t)bytes_.size());
        pos += 1 + len;
    }
    return true;
}

std::string TokenTable::decode(const int* ids, size_t n) const {
    std::string out;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < vocab_size())
            out.append(bytes_, offsets_[ids[i]], offsets_[ids[i] + 1] - offsets_[ids[i]]);
        else
            out += "<|" + std::to_string(ids[i]) + "|>";
    }
    return out;
}

}  // namespace llmc
