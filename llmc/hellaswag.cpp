// hellaswag.cpp: eval files, batch planning and scoring (see hellaswag.h).
#include "hellaswag.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "check.h"

namespace llmc {
namespace {

constexpr int kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
constexpr int kMaxTokenId = 65534;  // 65535 marks the start of an example
constexpr int kMaxExampleBytes = 65535;

std::string sentence(const char* fmt, long long a, long long b = 0, long long c = 0) {
    char buf[256];
    std::snprintf(buf, sizeof(buf), fmt, a, b, c);
    return buf;
}

bool tokens_fit(const std::vector<int>& tokens) {
    for (int t : tokens)
        if (t < 0 || t > kMaxTokenId) return false;
    return true;
}

}  // namespace

bool encode_eval_file(const std::vector<EvalExample>& examples, std::vector<uint8_t>* bytes,
                      std::string* why) {
    if (examples.empty() || examples.size() > 65535) {
        *why = sentence("an eval file holds 1 to 65535 examples, not %lld",
                        (long long)examples.size());
        return false;
    }
    std::vector<uint16_t> stream;
    int longest = 0;
    for (size_t i = 0; i < examples.size(); i++) {
        const EvalExample& ex = examples[i];
        const long long k = (long long)ex.endings.size();
        if (k < 1 || k > 65535 || ex.label < 0 || ex.label >= k) {
            *why = sentence(
                "example %lld has %lld endings and label %lld (need 1 or more "
                "endings and 0 <= label < endings)",
                (long long)i, k, ex.label);
            return false;
        }
        bool ok = !ex.context.empty() && tokens_fit(ex.context);
        for (const std::vector<int>& e : ex.endings) ok = ok && !e.empty() && tokens_fit(e);
        if (!ok) {
            *why = sentence(
                "example %lld has an empty context or ending, or a token id above "
                "%lld",
                (long long)i, kMaxTokenId);
            return false;
        }
        const size_t start = stream.size();
        stream.push_back((uint16_t)kEvalExampleStart);
        stream.push_back(0);  // the example's bytes, filled in below
        stream.push_back((uint16_t)i);
        stream.push_back((uint16_t)ex.label);
        stream.push_back((uint16_t)k);
        long long words = 6 + (long long)ex.context.size();
        for (const std::vector<int>& e : ex.endings) words += 1 + (long long)e.size();
        if (words * 2 > kMaxExampleBytes) {
            *why = sentence("example %lld takes %lld bytes; the format allows at most %lld",
                            (long long)i, words * 2, kMaxExampleBytes);
            return false;
        }
        stream.push_back((uint16_t)ex.context.size());
        for (int t : ex.context) stream.push_back((uint16_t)t);
        for (const std::vector<int>& e : ex.endings) {
            stream.push_back((uint16_t)e.size());
            for (int t : e) stream.push_back((uint16_t)t);
        }
        const int nbytes = (int)((stream.size() - start) * 2);
        stream[start + 1] = (uint16_t)nbytes;
        longest = std::max(longest, nbytes);
    }
    int32_t header[kHeaderInts] = {};
    header[0] = kEvalMagic;
    header[1] = kEvalVersion;
    header[2] = (int32_t)examples.size();
    header[3] = longest;
    bytes->resize(kHeaderBytes + stream.size() * 2);
    std::memcpy(bytes->data(), header, kHeaderBytes);
    std::memcpy(bytes->data() + kHeaderBytes, stream.data(), stream.size() * 2);
    return true;
}

bool decode_eval_file(const uint8_t* data, size_t size, std::vector<EvalExample>* examples,
                      std::string* why) {
    examples->clear();
    if (size < kHeaderBytes) {
        *why = sentence("it is %lld bytes, too short for the %lld-byte header", (long long)size,
                        (long long)kHeaderBytes);
        return false;
    }
    int32_t header[kHeaderInts];
    std::memcpy(header, data, kHeaderBytes);
    if (header[0] != kEvalMagic) {
        *why = sentence(
            "its magic is %lld, not %lld: it is not an eval file (llm.c's "
            "hellaswag_val.bin format)",
            header[0], kEvalMagic);
        return false;
    }
    if (header[1] != kEvalVersion) {
        *why = sentence("it has version %lld; only version %lld is known", header[1], kEvalVersion);
        return false;
    }
    const long long n = header[2], longest = header[3];
    if (n < 1 || n > 65535 || longest < 12 || longest > kMaxExampleBytes) {
        *why = sentence(
            "its header says %lld examples of at most %lld bytes (need 1..65535 "
            "examples of 12..65535 bytes)",
            n, longest);
        return false;
    }
    if ((size - kHeaderBytes) % 2 != 0) {
        *why = "its size is not the header plus whole uint16 values";
        return false;
    }
    const uint16_t* w = reinterpret_cast<const uint16_t*>(data + kHeaderBytes);
    const size_t words = (size - kHeaderBytes) / 2;
    examples->reserve((size_t)n);
    size_t pos = 0;
    for (long long i = 0; i < n; i++) {
        if (pos + 6 > words) {
            *why = sentence("it ends inside example %lld of %lld (truncated)", i, n);
            return false;
        }
        const uint16_t* e = w + pos;
        const long long nbytes = e[1], k = e[4], ctx = e[5];
        if (e[0] != kEvalExampleStart || e[2] != (uint16_t)i) {
            *why = sentence(
                "example %lld does not start with the marker 65535 and its index "
                "(found %lld, %lld)",
                i, e[0], e[2]);
            return false;
        }
        if (nbytes % 2 != 0 || nbytes > longest || pos + (size_t)nbytes / 2 > words) {
            *why = sentence(
                "example %lld says it is %lld bytes, past the longest in the header "
                "or the end of the file",
                i, nbytes);
            return false;
        }
        const size_t end = pos + (size_t)nbytes / 2;
        if (k < 1 || e[3] >= k || ctx < 1) {
            *why = sentence("example %lld has label %lld of %lld endings or an empty context", i,
                            e[3], k);
            return false;
        }
        EvalExample ex;
        ex.label = e[3];
        size_t p = pos + 6;
        if (p + (size_t)ctx > end) {
            *why = sentence("example %lld's context runs past its %lld bytes", i, nbytes);
            return false;
        }
        ex.context.assign(w + p, w + p + ctx);
        p += (size_t)ctx;
        ex.endings.resize((size_t)k);
        for (long long j = 0; j < k; j++) {
            const size_t len = p < end ? w[p] : 0;
            if (len < 1 || p + 1 + len > end) {
                *why = sentence("example %lld's ending %lld is empty or runs past its %lld bytes",
                                i, j, nbytes);
                return false;
            }
            ex.endings[(size_t)j].assign(w + p + 1, w + p + 1 + len);
            p += 1 + len;
        }
        bool ok = p == end && tokens_fit(ex.context);
        for (const std::vector<int>& t : ex.endings) ok = ok && tokens_fit(t);
        if (!ok) {
            *why = sentence("example %lld has %lld stray bytes or a token id of 65535", i,
                            (long long)(end - p) * 2);
            return false;
        }
        examples->push_back(std::move(ex));
        pos = end;
    }
    if (pos != words) {
        *why =
            sentence("it has %lld bytes after its %lld examples", (long long)(words - pos) * 2, n);
        return false;
    }
    return true;
}

void read_eval_file(const std::string& path, std::vector<EvalExample>* examples) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    LLMC_CHECK(f != nullptr, "could not open the eval file '%s' (%s); check the path.",
               path.c_str(), std::strerror(errno));
    std::vector<uint8_t> bytes;
    uint8_t buf[1 << 16];
    size_t got = 0;
    while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0)
        bytes.insert(bytes.end(), buf, buf + got);
    const bool bad = std::ferror(f) != 0;
    std::fclose(f);
    LLMC_CHECK(!bad, "could not read the eval file '%s'.", path.c_str());
    std::string why;
    LLMC_CHECK(decode_eval_file(bytes.data(), bytes.size(), examples, &why),
               "eval file '%s' is not usable: %s.", path.c_str(), why.c_str());
}

void write_eval_file(const std::string& path, const std::vector<EvalExample>& examples) {
    std::vector<uint8_t> bytes;
    std::string why;
    LLMC_CHECK(encode_eval_file(examples, &bytes, &why), "cannot write the eval file '%s': %s.",
               path.c_str(), why.c_str());
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    LLMC_CHECK(f != nullptr, "could not create '%s' (%s).", tmp.c_str(), std::strerror(errno));
    bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    ok = (std::fflush(f) == 0) && ok;
    ok = (fsync(fileno(f)) == 0) && ok;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        LLMC_FAIL("could not write the eval file '%s' (disk full?).", path.c_str());
    }
}

bool plan_eval_batches(const std::vector<EvalExample>& examples, int begin, int end, int B, int T,
                       int vocab_size, int max_rows, std::vector<EvalBatch>* batches,
                       std::string* why) {
    batches->clear();
    std::vector<EvalRow> rows;
    for (int i = begin; i < end; i++) {
        const EvalExample& ex = examples[i];
        int top = 0;
        for (int t : ex.context) top = std::max(top, t);
        for (size_t j = 0; j < ex.endings.size(); j++) {
            const int c = (int)ex.context.size(), e = (int)ex.endings[j].size();
            for (int t : ex.endings[j]) top = std::max(top, t);
            if (e > T) {
                *why = sentence(
                    "example %lld's ending %lld has %lld tokens, more than the "
                    "sequence length allows (raise -t)",
                    i, (long long)j, e);
                return false;
            }
            EvalRow r;
            r.example = i;
            r.ending = (int)j;
            r.skip = std::max(0, c + e - 1 - T);
            r.length = c - r.skip + e - 1;
            rows.push_back(r);
        }
        if (top >= vocab_size) {
            *why = sentence(
                "example %lld has token id %lld, outside the model's vocabulary of "
                "%lld",
                i, top, vocab_size);
            return false;
        }
    }
    // Longest first; ties in file order, so the plan is the same on every machine.
    std::stable_sort(rows.begin(), rows.end(),
                     [](const EvalRow& a, const EvalRow& b) { return a.length > b.length; });
    const long long N = (long long)B * T;
    for (size_t i = 0; i < rows.size();) {
        int len = rows[i].length;
        // Ends at T at the latest: T divides B*T, and B rows are never too many.
        while (N % len != 0 || (max_rows > 0 && len < T && N / len > max_rows)) len++;
        const size_t take = std::min(rows.size() - i, (size_t)(N / len));
        EvalBatch b;
        b.row_len = len;
        b.rows.assign(rows.begin() + (long)i, rows.begin() + (long)(i + take));
        batches->push_back(std::move(b));
        i += take;
    }
    return true;
}

void fill_eval_batch(const std::vector<EvalExample>& examples, const EvalBatch& batch, int B, int T,
                     int* inputs, int* targets) {
    const size_t N = (size_t)B * T;
    std::fill(inputs, inputs + N, 0);
    std::fill(targets, targets + N, 0);
    for (size_t r = 0; r < batch.rows.size(); r++) {
        const EvalRow& row = batch.rows[r];
        const EvalExample& ex = examples[row.example];
        const std::vector<int>& ending = ex.endings[row.ending];
        int* in = inputs + r * batch.row_len;
        int* tg = targets + r * batch.row_len;
        // The row's tokens are context[skip:] + ending; inputs are all but the last,
        // targets all but the first.
        const int c = (int)ex.context.size() - row.skip;
        auto token = [&](int k) { return k < c ? ex.context[row.skip + k] : ending[k - c]; };
        for (int k = 0; k < row.length; k++) {
            in[k] = token(k);
            tg[k] = token(k + 1);
        }
    }
}

void eval_losses_init(const std::vector<EvalExample>& examples, EvalLosses* losses) {
    int k = 0;
    for (const EvalExample& ex : examples) k = std::max(k, (int)ex.endings.size());
    losses->max_endings = k;
    losses->sum.assign(examples.size() * (size_t)k, 0.0);
    losses->count.assign(examples.size() * (size_t)k, 0);
}

void eval_losses_add(const std::vector<EvalExample>& examples, const EvalBatch& batch,
                     const float* position_losses, EvalLosses* losses) {
    for (size_t r = 0; r < batch.rows.size(); r++) {
        const EvalRow& row = batch.rows[r];
        const EvalExample& ex = examples[row.example];
        const int c = (int)ex.context.size() - row.skip;
        const int e = (int)ex.endings[row.ending].size();
        const float* l = position_losses + r * batch.row_len;
        // Summed in position order, in double: the mean of a few dozen fp32 losses.
        double sum = 0.0;
        for (int k = c - 1; k < c - 1 + e; k++) sum += l[k];
        const size_t slot = (size_t)row.example * losses->max_endings + row.ending;
        losses->sum[slot] += sum;
        losses->count[slot] += e;
    }
}

EvalScore eval_score(const std::vector<EvalExample>& examples, const EvalLosses& losses, int begin,
                     int end, std::vector<int>* predicted) {
    EvalScore s;
    if (predicted != nullptr) predicted->assign((size_t)(end - begin), -1);
    for (int i = begin; i < end; i++) {
        const EvalExample& ex = examples[i];
        int best = -1, best_sum = -1;
        double best_mean = 0.0, best_total = 0.0;
        for (size_t j = 0; j < ex.endings.size(); j++) {
            const size_t slot = (size_t)i * losses.max_endings + j;
            if (losses.count[slot] == 0) continue;  // not evaluated (another rank's example)
            const double total = losses.sum[slot];
            const double mean = total / losses.count[slot];
            if (best < 0 || mean < best_mean) best = (int)j, best_mean = mean;
            if (best_sum < 0 || total < best_total) best_sum = (int)j, best_total = total;
        }
        if (best < 0) continue;
        s.examples++;
        s.correct += best == ex.label ? 1 : 0;
        s.correct_sum += best_sum == ex.label ? 1 : 0;
        if (predicted != nullptr) (*predicted)[(size_t)(i - begin)] = best;
    }
    return s;
}

std::string eval_score_json(const EvalScore& s, double seconds) {
    const double n = s.examples > 0 ? s.examples : 1;
    char buf[256];
    std::snprintf(
        buf, sizeof(buf),
        "\"hellaswag_acc\": %.6f, \"hellaswag_acc_sum\": %.6f, \"hellaswag_correct\": %d, "
        "\"hellaswag_correct_sum\": %d, \"hellaswag_examples\": %d, \"hellaswag_s\": %.3f",
        s.correct / n, s.correct_sum / n, s.correct, s.correct_sum, s.examples, seconds);
    return buf;
}

void eval_rank_range(int n, int rank, int world, int* begin, int* end) {
    const int per = (n + world - 1) / world;
    *begin = std::min(n, per * rank);
    *end = std::min(n, per * (rank + 1));
}

}  // namespace llmc
