// bench_tokenizer.cpp: encoding speed of llmc/tokenizer (host only), one line per thread count.
//
//   build/host/dev/bench/bench_tokenizer --text FILE [--dir DIR] [--threads 1,2,...] [--doc-bytes
//   N]
//                                  [--repeat R] [--check IDS]
//
// The text (any bytes) is cut into documents: each ends at the first '\n' at or after N bytes
// from its start (default N = 65536), or at the end. scripts/bench/bench_tokenizer.py cuts it the
// same way for tiktoken's encode_ordinary_batch. Threads take documents from a shared counter.
// Each thread count runs once to warm up, then R times (default 5); reported: the median wall
// time (min and p90 too) and MB/s = text bytes / median. --check IDS: a file of little-endian
// uint32 ids (all documents in order) that the ids must equal.
// Output, one line per thread count: "threads=T docs=D bytes=B tokens=K median_s=.. min_s=..
// p90_s=.. MB/s=.. check=ok|differs|none".
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tokenizer.h"

namespace {

struct Options {
    std::string text, dir = "build/tokenizer", check;
    std::vector<int> threads = {1};
    size_t doc_bytes = 65536;
    int repeat = 5;
};

[[noreturn]] void usage(const std::string& problem) {
    std::fprintf(stderr, "error: %s (usage in the header of dev/bench/bench_tokenizer.cpp)\n",
                 problem.c_str());
    std::exit(2);
}

Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i += 2) {
        const std::string a = argv[i];
        if (i + 1 >= argc) usage(a + " needs a value");
        const std::string v = argv[i + 1];
        if (a == "--text") {
            o.text = v;
        } else if (a == "--dir") {
            o.dir = v;
        } else if (a == "--check") {
            o.check = v;
        } else if (a == "--doc-bytes") {
            o.doc_bytes = std::strtoull(v.c_str(), nullptr, 10);
        } else if (a == "--repeat") {
            o.repeat = std::atoi(v.c_str());
        } else if (a == "--threads") {
            o.threads.clear();
            for (size_t at = 0; at < v.size();) {
                size_t comma = v.find(',', at);
                if (comma == std::string::npos) comma = v.size();
                o.threads.push_back(std::atoi(v.substr(at, comma - at).c_str()));
                at = comma + 1;
            }
        } else {
            usage("unknown option " + a);
        }
    }
    if (o.text.empty()) usage("--text is required");
    if (o.repeat < 1 || o.doc_bytes < 1) usage("--repeat and --doc-bytes must be positive");
    for (int t : o.threads)
        if (t < 1 || t > 1024) usage("--threads takes counts from 1 to 1024");
    return o;
}

bool read_all(const std::string& path, std::string* out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::stringstream ss;
    ss << f.rdbuf();
    *out = ss.str();
    return true;
}

std::vector<std::string_view> split_documents(const std::string& text, size_t doc_bytes) {
    std::vector<std::string_view> docs;
    for (size_t at = 0; at < text.size();) {
        size_t end =
            at + doc_bytes >= text.size() ? std::string::npos : text.find('\n', at + doc_bytes);
        end = end == std::string::npos ? text.size() : end + 1;
        docs.emplace_back(text.data() + at, end - at);
        at = end;
    }
    return docs;
}

double encode_all(const llmc::Tokenizer& tok, const std::vector<std::string_view>& docs,
                  int threads, std::vector<std::vector<int>>* ids) {
    std::atomic<size_t> next{0};
    for (auto& v : *ids) v.clear();
    const auto t0 = std::chrono::steady_clock::now();
    auto work = [&] {
        for (size_t d; (d = next.fetch_add(1)) < docs.size();) tok.encode(docs[d], &(*ids)[d]);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_args(argc, argv);
    llmc::Tokenizer tok;
    std::string why, text, check_bytes;
    if (!tok.load(o.dir, &why)) usage(why);
    if (!read_all(o.text, &text)) usage("cannot read " + o.text);
    if (!o.check.empty() && !read_all(o.check, &check_bytes)) usage("cannot read " + o.check);
    const std::vector<std::string_view> docs = split_documents(text, o.doc_bytes);
    std::vector<std::vector<int>> ids(docs.size());
    for (int threads : o.threads) {
        encode_all(tok, docs, threads, &ids);  // warm-up
        std::vector<double> times;
        for (int r = 0; r < o.repeat; ++r) times.push_back(encode_all(tok, docs, threads, &ids));
        std::sort(times.begin(), times.end());
        const double median = times[times.size() / 2];
        const double p90 = times[std::min(times.size() - 1, (size_t)(0.9 * (double)times.size()))];
        std::vector<uint32_t> all;
        for (const auto& v : ids) all.insert(all.end(), v.begin(), v.end());
        const char* check = "none";
        if (!o.check.empty()) {
            const bool same = check_bytes.size() == 4 * all.size() &&
                              std::memcmp(check_bytes.data(), all.data(), check_bytes.size()) == 0;
            check = same ? "ok" : "differs";
        }
        std::printf(
            "threads=%d docs=%zu bytes=%zu tokens=%zu median_s=%.4f min_s=%.4f p90_s=%.4f "
            "MB/s=%.2f check=%s\n",
            threads, docs.size(), text.size(), all.size(), median, times.front(), p90,
            text.size() / 1e6 / median, check);
    }
    return 0;
}
