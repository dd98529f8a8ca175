// test_sampler.cpp: host test of llmc/sampler: greedy at temperature 0 and at top-k 1, only the
// top-k ids are ever drawn, empirical frequencies against softmax(logits / T) computed here in
// double (with a bound that this many draws must meet, and a check that the bound is tight
// enough to tell the wrong temperature apart), one seed one sequence, bad options and
// non-finite logits refused with a sentence, TokenTable reading a tokenizer file and GPT-2's
// tokenizer folder (run from the repository root, as run_tests.sh does), and valid_utf8.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "host_test.h"
#include "rng.h"
#include "sampler.h"
#include "tokenizer.h"

namespace {

// Seeded logits, roughly GPT-2's spread (a few units).
std::vector<float> random_logits(int V, uint64_t seed) {
    std::vector<float> l(V);
    uint64_t s = seed;
    for (float& x : l) x = (float)((llmc::splitmix64_next(&s) >> 11) * 0x1.0p-53 * 6.0 - 3.0);
    return l;
}

// softmax(logits / T) over the ids in `keep` (all when empty), in double.
std::vector<double> softmax(const std::vector<float>& l, double T, const std::vector<int>& keep) {
    std::vector<double> p(l.size(), 0.0);
    double mx = -INFINITY, sum = 0.0;
    for (size_t i = 0; i < l.size(); i++) mx = std::max(mx, (double)l[i]);
    for (size_t i = 0; i < l.size(); i++) {
        bool in = keep.empty();
        for (int k : keep) in = in || (int)i == k;
        if (in) p[i] = std::exp(((double)l[i] - mx) / T), sum += p[i];
    }
    for (double& x : p) x /= sum;
    return p;
}

int sample(const std::vector<float>& l, float T, int k, uint64_t* rng) {
    std::string why;
    llmc::SamplerOptions o;
    o.temperature = T;
    o.top_k = k;
    const int id = llmc::sample_token(l.data(), (int)l.size(), o, rng, &why);
    if (id < 0) std::printf("     unexpected refusal: %s\n", why.c_str());
    return id;
}

void test_greedy() {
    for (int V : {1, 7, 50257}) {
        std::vector<float> l = random_logits(V, 100 + V);
        int want = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > l[want]) want = i;
        uint64_t rng = 5, before = rng;
        check(sample(l, 0.0f, 0, &rng) == want && rng == before,
              "V=%d temperature 0 gives the argmax %d without drawing", V, want);
        bool all = true;
        for (int i = 0; i < 50; i++) all = all && sample(l, 1.5f, 1, &rng) == want;
        check(all, "V=%d top-k 1 gives the argmax every time (50 draws at T=1.5)", V);
    }
    std::vector<float> tie = {1.0f, 3.0f, -2.0f, 3.0f};
    uint64_t rng = 1;
    check(sample(tie, 0.0f, 0, &rng) == 1, "equal maxima: the lower id");
}

// Frequencies of n draws against p: each |f_i - p_i| <= 5 sigma (binomial). With the seed fixed
// the outcome is deterministic; for a fresh seed a category fails with probability < 6e-7.
bool frequencies_match(const std::vector<int>& counts, const std::vector<double>& p, int n,
                       double* worst_sigmas) {
    *worst_sigmas = 0.0;
    bool ok = true;
    for (size_t i = 0; i < p.size(); i++) {
        const double f = (double)counts[i] / n;
        const double sigma = std::sqrt(p[i] * (1.0 - p[i]) / n);
        if (p[i] == 0.0) {
            ok = ok && counts[i] == 0;
            continue;
        }
        *worst_sigmas = std::max(*worst_sigmas, std::fabs(f - p[i]) / sigma);
        ok = ok && std::fabs(f - p[i]) <= 5.0 * sigma;
    }
    return ok;
}

void test_distribution() {
    const int V = 13, n = 400000;
    const std::vector<float> l = random_logits(V, 7);
    for (float T : {1.0f, 0.7f, 2.5f}) {
        for (int k : {0, 5, 13, 40}) {
            // The top-k ids, by the reference's own ranking.
            std::vector<int> keep;
            if (k > 0 && k < V) {
                std::vector<int> order(V);
                for (int i = 0; i < V; i++) order[i] = i;
                std::sort(order.begin(), order.end(), [&l](int a, int b) { return l[a] > l[b]; });
                keep.assign(order.begin(), order.begin() + k);
            }
            const std::vector<double> p = softmax(l, T, keep);
            std::vector<int> counts(V, 0);
            uint64_t rng = 1000 + (uint64_t)k;
            bool in_range = true, only_top = true;
            for (int i = 0; i < n; i++) {
                const int id = sample(l, T, k, &rng);
                in_range = in_range && id >= 0 && id < V;
                if (!in_range) break;
                only_top = only_top && p[id] > 0.0;
                counts[id]++;
            }
            double worst = 0.0;
            const bool match = in_range && frequencies_match(counts, p, n, &worst);
            check(in_range && only_top, "T=%g top-k %d: only the top-k ids drawn (%d draws)", T, k,
                  n);
            check(match, "T=%g top-k %d: frequencies within 5 sigma of softmax(l/T), worst %.2f", T,
                  k, worst);
            // Power: the same counts against the wrong temperature must fail the bound, or the
            // bound could not catch a sampler that ignored T.
            if (T != 1.0f) {
                double w = 0.0;
                const bool wrong = frequencies_match(counts, softmax(l, 1.0, keep), n, &w);
                check(!wrong, "T=%g top-k %d: the same counts fail against T=1 (%.1f sigma)", T, k,
                      w);
            }
        }
    }
}

void test_determinism() {
    const std::vector<float> l = random_logits(50257, 3);
    std::vector<int> a, b, c;
    uint64_t ra = 42, rb = 42, rc = 43;
    for (int i = 0; i < 200; i++) {
        a.push_back(sample(l, 1.0f, 40, &ra));
        b.push_back(sample(l, 1.0f, 40, &rb));
        c.push_back(sample(l, 1.0f, 40, &rc));
    }
    check(a == b, "one seed, one sequence (200 draws, V=50257, top-k 40)");
    check(a != c, "another seed, another sequence");
}

void test_refusals() {
    std::vector<float> l = random_logits(9, 1);
    uint64_t rng = 1;
    std::string why;
    llmc::SamplerOptions o;
    auto refused = [&](const char* what, const char* needle) {
        why.clear();
        const int id = llmc::sample_token(l.data(), (int)l.size(), o, &rng, &why);
        check(id == -1 && why.find(needle) != std::string::npos &&
                  why.find('\n') == std::string::npos,
              "%s refused: %s", what, why.c_str());
    };
    o.top_k = -1;
    refused("top-k -1", "top-k");
    o.top_k = 0;
    o.temperature = -0.5f;
    refused("temperature -0.5", "temperature");
    o.temperature = NAN;
    refused("temperature NaN", "temperature");
    o.temperature = INFINITY;
    refused("temperature inf", "temperature");
    o.temperature = 1.0f;
    l[4] = NAN;
    refused("a NaN logit", "logit 4");
    l[4] = -INFINITY;
    refused("a -inf logit", "not finite");
    l[4] = 0.0f;
    why.clear();
    const bool empty_refused = llmc::sample_token(l.data(), 0, o, &rng, &why) == -1;
    check(empty_refused && !why.empty(), "V=0 refused: %s", why.c_str());
    check(llmc::sampler_options_error(o).empty(), "default options accepted");
}

void test_token_table() {
    // A three-token file written by hand in llm.c's format.
    char path[] = "/tmp/test_sampler_XXXXXX";
    const int fd = mkstemp(path);
    int32_t header[256] = {};
    header[0] = 20240328;
    header[1] = 2;
    header[2] = 3;
    header[3] = 2;
    std::string body = std::string(reinterpret_cast<char*>(header), sizeof(header));
    body += std::string("\x05Hello", 6) + std::string("\x01,", 2) + std::string("\x03 yo", 4);
    check(fd >= 0 && write(fd, body.data(), body.size()) == (ssize_t)body.size(),
          "wrote a tokenizer file");
    close(fd);
    llmc::TokenTable t;
    std::string why;
    const bool ok = t.load(path, &why);
    const int ids[] = {0, 1, 2, 7};
    const std::string text = ok ? t.decode(ids, 4) : "";
    check(ok && t.vocab_size() == 3 && text == "Hello, yo<|7|>", "decodes '%s'", text.c_str());
    // Truncated: the last token's bytes cut short.
    FILE* f = std::fopen(path, "wb");
    std::fwrite(body.data(), 1, body.size() - 2, f);
    std::fclose(f);
    const bool truncated_loaded = t.load(path, &why);
    check(!truncated_loaded && why.find(path) != std::string::npos, "truncated file refused: %s",
          why.c_str());
    std::remove(path);
    const bool missing_loaded = t.load(path, &why);
    check(!missing_loaded && why.find(path) != std::string::npos, "missing file refused: %s",
          why.c_str());
}

// GPT-2's tokenizer (build/tokenizer, fetched by scripts/data/tokenizer_files.sh when missing, as
// test_tokenizer does): the table read from encoder.json + vocab.bpe and the one read from the
// tokenizer.bin that Tokenizer writes decode every id to the same bytes, and text round-trips.
void test_gpt2_tables() {
    const std::string dir = "build/tokenizer";
    const std::string fetch = "bash scripts/data/tokenizer_files.sh '" + dir + "' > /dev/null";
    if (!std::ifstream(dir + "/vocab.bpe").good() && std::system(fetch.c_str()) != 0) {
        check(false, "GPT-2's tokenizer files in %s (scripts/data/tokenizer_files.sh failed)",
              dir.c_str());
        return;
    }
    llmc::Tokenizer tok;
    std::string why;
    const bool loaded = tok.load(dir, &why);
    check(loaded, "Tokenizer loads %s %s", dir.c_str(), why.c_str());
    if (!loaded) return;
    llmc::TokenTable from_dir, from_file;
    check(from_dir.load(dir, &why), "TokenTable loads the folder %s %s", dir.c_str(), why.c_str());
    char path[] = "/tmp/test_sampler_tok_XXXXXX";
    close(mkstemp(path));
    tok.write_tokenizer_file(path);
    const bool file_ok = from_file.load(path, &why);
    std::remove(path);
    check(file_ok && from_file.vocab_size() == 50257 && from_dir.vocab_size() == 50257,
          "TokenTable loads the written tokenizer.bin: %d and %d tokens", from_file.vocab_size(),
          from_dir.vocab_size());
    int same = 0;
    for (int id = 0; id < 50257; id++)
        same += from_dir.decode(&id, 1) == from_file.decode(&id, 1) &&
                from_dir.decode(&id, 1) == tok.decode(&id, 1);
    check(same == 50257, "every id decodes alike from the folder, the file and Tokenizer (%d)",
          same);
    const std::string text = "Hello world, caf\xC3\xA9 \xE2\x80\x94 1234\n\n  it's <|endoftext|>";
    std::vector<int> ids;
    tok.encode(text, &ids);
    check(from_file.decode(ids.data(), ids.size()) == text, "a sentence of %zu tokens round-trips",
          ids.size());
}

void test_valid_utf8() {
    const std::string fffd = "\xEF\xBF\xBD";
    struct Case {
        std::string in, want;
    } cases[] = {
        {"plain ascii", "plain ascii"},
        {"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
        {"cut \xE2\x82", "cut " + fffd + fffd},
        {"\xC0\xAF", fffd + fffd},                        // overlong
        {"\xED\xA0\x80", fffd + fffd + fffd},             // surrogate
        {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd},  // past U+10FFFF
        {"a\xFF"
         "b",
         "a" + fffd + "b"},
    };
    for (const Case& c : cases)
        check(llmc::valid_utf8(c.in) == c.want, "valid_utf8 of %zu bytes", c.in.size());
}

}  // namespace

int main() {
    test_greedy();
    test_distribution();
    test_determinism();
    test_refusals();
    test_token_table();
    test_valid_utf8();
    test_gpt2_tables();
    std::printf("test_sampler: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
