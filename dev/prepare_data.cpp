// prepare_data.cpp: text corpora -> GPT-2 token shards (llm.c's format) and the tokenizer file.
//
//   prepare_data -o OUT_DIR [options] INPUT...        (prepare_data --help lists every option)
//
// Inputs, read in the order given: text files, directories (every regular file below, sorted by
// path bytes; hidden names, links to folders and the output folder skipped), and JSONL files
// (*.jsonl, or --format jsonl): one JSON object per line whose string field "text" (--field) is
// the document; blank lines are skipped; JSON files (*.json, or --format json): one array of such
// objects, each a document (TinyStories' files). Text files are read whole; JSONL files line by
// line. Documents: a text file is one document, or several cut at each --doc-sep string (the
// separator itself is dropped); a JSONL line is one. Each document is written as EOT (50256)
// followed by its tokens; empty documents are skipped (they still count in the document index
// below).
//
// Validation split, fixed by the inputs and --seed alone, never by threads or shard size:
//   --val-fraction F (default 0.05): document i goes to val when splitmix64(splitmix64(seed) ^ i),
//     read as a number in [0, 1), is below F. i counts documents in input order, so appending
//     documents to a corpus never moves an earlier one to the other split.
//   --val-tokens N: the first N tokens of the output stream are val, the rest train (for a
//     corpus of one or a few documents; the cut may fall inside a document).
// Output: OUT_DIR/NAME_train_000000.bin, ..., NAME_val_000000.bin, ... (NAME: --name, default the
// folder's name), each --shard-tokens tokens except the last of each split, and
// OUT_DIR/tokenizer.bin. Everything is written under hidden temporary names and renamed at the
// end; on any error the temporaries are removed and nothing else is touched. After success,
// shards NAME_{train,val}_NNNNNN.bin left by an earlier run and not rewritten are removed.
//
// Encoding is parallel: documents are cut into segments of about --segment-bytes at places where
// GPT-2's pre-tokenizer always ends a piece (see safe_cut), segments are encoded on --threads
// threads, and tokens are written in input order, so the output is byte-identical for any thread
// count or segment size. Reading the next batch of documents overlaps encoding of the current one.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "prepare_data_io.h"
#include "tokenizer.h"

namespace fs = std::filesystem;
using namespace prep;

namespace {

struct Options {
    std::string out_dir;                                // -o
    std::vector<std::string> inputs;                    // the positional arguments
    std::string tokenizer_dir = "data/gpt2_tokenizer";  // encoder.json + vocab.bpe
    std::string name;                    // shard name prefix; empty: the output folder's name
    long long shard_tokens = 100000000;  // tokens per shard (the last of a split holds the rest)
    double val_fraction = 0.05;          // share of documents in val (hash of the index)
    long long val_tokens = -1;           // >= 0: the first N tokens are val instead
    uint64_t seed = 1;                   // seed of the document hash
    std::string doc_sep;                 // empty: a text file is one document
    InputFormat format = InputFormat::kAuto;
    std::string field = "text";         // the JSON field that holds a document
    int threads = 0;                    // 0: every core
    long long segment_bytes = 1 << 18;  // encoding work unit (does not change the output)
};

void print_help() {
    std::printf(
        "usage: prepare_data -o OUT_DIR [options] INPUT...\n"
        "\n"
        "Tokenizes text with GPT-2's BPE into llm.c token shards, OUT_DIR/NAME_train_000000.bin\n"
        "... and OUT_DIR/NAME_val_000000.bin ..., and writes OUT_DIR/tokenizer.bin. INPUT: a\n"
        "text file (one document), a folder (every file below it, sorted; hidden ones skipped),\n"
        "a JSONL file (*.jsonl: one JSON object per line with a string field \"text\", or "
        "--field)\n"
        "or a JSON file (*.json: an array of such objects).\n"
        "Each document is EOT (50256) then its tokens. The output does not depend on --threads.\n"
        "\n"
        "  -o, --out DIR       output folder, created if missing (required)\n"
        "  --tokenizer DIR     folder with GPT-2's encoder.json and vocab.bpe, which\n"
        "                      scripts/tokenizer_files.sh DIR fetches\n"
        "                      (default data/gpt2_tokenizer)\n"
        "  --name NAME         shard name prefix (default: OUT_DIR's last name)\n"
        "  --shard-tokens N    tokens per shard; the last of each split holds the rest\n"
        "                      (default 100000000)\n"
        "  --val-fraction F    document i goes to val when a hash of (seed, i) in [0, 1) is\n"
        "                      below F (default 0.05)\n"
        "  --val-tokens N      instead, the first N tokens go to val and the rest to train\n"
        "  --seed S            seed of that hash (default 1)\n"
        "  --doc-sep STR       cut text files into documents at each STR, dropping it; \\n \\t\n"
        "                      \\r \\\\ are escapes (default: one document per file)\n"
        "  --format F          auto (*.jsonl is JSONL, *.json a JSON array of objects, the\n"
        "                      rest text), text, jsonl or json (default auto)\n"
        "  --field NAME        the string field of each JSON object that holds the document\n"
        "                      (default text; TinyStories: story)\n"
        "  --threads N         encoding threads (default: every core)\n"
        "  --segment-bytes N   encoding work unit; does not change the output (default 262144)\n"
        "  -h, --help          this text\n"
        "\n"
        "Exit codes: 0 done; 1 bad input (one sentence; no shard or temporary file is left\n"
        "behind and an earlier output is untouched); 2 bad option.\n");
}

[[noreturn]] void usage_error(const std::string& sentence) {
    std::fprintf(stderr, "error: %s (prepare_data --help lists the options)\n", sentence.c_str());
    std::exit(2);
}

long long parse_count(const std::string& flag, const char* s, long long lo) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo) {
        usage_error(flag + " needs a whole number >= " + std::to_string(lo) + ", got '" + s + "'");
    }
    return v;
}

// "\n", "\t", "\r" and "\\" in a --doc-sep value become the characters they name.
std::string unescape_separator(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        const char c = s[++i];
        const char* from = "ntr\\";
        const char* to = "\n\t\r\\";
        const char* hit = c != '\0' ? std::strchr(from, c) : nullptr;
        if (hit == nullptr) {
            usage_error(std::string("--doc-sep knows the escapes \\n \\t \\r \\\\, not \\") + c);
        }
        out += to[hit - from];
    }
    return out;
}

double parse_fraction(const std::string& flag, const char* s) {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end == s || *end != '\0' || !(v >= 0 && v <= 1)) {
        usage_error(flag + " needs a number in [0, 1], got '" + s + "'");
    }
    return v;
}

InputFormat parse_format(const std::string& s) {
    if (s == "auto") return InputFormat::kAuto;
    if (s == "text") return InputFormat::kText;
    if (s == "jsonl") return InputFormat::kJsonl;
    if (s == "json") return InputFormat::kJson;
    usage_error("--format must be auto, text, jsonl or json, not '" + s + "'");
}

// Sets option `a` from its value `v`; false for an unknown option.
bool set_option(Options* o, const std::string& a, const char* v) {
    if (a == "-o" || a == "--out") {
        o->out_dir = v;
    } else if (a == "--tokenizer") {
        o->tokenizer_dir = v;
    } else if (a == "--name") {
        o->name = v;
    } else if (a == "--shard-tokens") {
        o->shard_tokens = parse_count(a, v, 1);
    } else if (a == "--val-fraction") {
        o->val_fraction = parse_fraction(a, v);
    } else if (a == "--val-tokens") {
        o->val_tokens = parse_count(a, v, 0);
    } else if (a == "--seed") {
        o->seed = (uint64_t)parse_count(a, v, 0);
    } else if (a == "--doc-sep") {
        o->doc_sep = unescape_separator(v);
        if (o->doc_sep.empty()) usage_error("--doc-sep must not be empty");
    } else if (a == "--format") {
        o->format = parse_format(v);
    } else if (a == "--field") {
        o->field = v;
        if (o->field.empty()) usage_error("--field must not be empty");
    } else if (a == "--threads") {
        o->threads = (int)parse_count(a, v, 1);
    } else if (a == "--segment-bytes") {
        o->segment_bytes = parse_count(a, v, 1);
    } else {
        return false;
    }
    return true;
}

Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            print_help();
            std::exit(0);
        }
        if (a.size() < 2 || a[0] != '-') {
            o.inputs.push_back(a);
            continue;
        }
        if (i + 1 >= argc) usage_error(a + " needs a value");
        if (!set_option(&o, a, argv[++i])) usage_error("unknown option " + a);
    }
    if (o.out_dir.empty()) usage_error("the output folder is required: -o OUT_DIR");
    if (o.inputs.empty()) usage_error("no input given: name text files, folders or JSONL files");
    if (o.name.empty()) {
        fs::path p = fs::absolute(o.out_dir).lexically_normal();
        if (!p.has_filename()) p = p.parent_path();  // "data/brown/"
        o.name = p.filename().string();
        if (o.name.empty()) o.name = "data";
    }
    if (o.threads == 0) o.threads = (int)std::max(1u, std::thread::hardware_concurrency());
    return o;
}

std::string with_commas(unsigned long long v) {
    std::string s = std::to_string(v);
    for (int i = (int)s.size() - 3; i > 0; i -= 3) s.insert((size_t)i, ",");
    return s;
}

std::string count_of(long long n, const char* noun) {
    return with_commas((unsigned long long)n) + " " + noun + (n == 1 ? "" : "s");
}

// 24.3M, 512.0k, 87: rates of very different sizes stay readable.
std::string human(double v) {
    char buf[32];
    const double scale = v >= 1e6 ? 1e6 : v >= 1e3 ? 1e3 : 1;
    const char* unit = v >= 1e6 ? "M" : v >= 1e3 ? "k" : "";
    std::snprintf(buf, sizeof(buf), scale > 1 ? "%.1f%s" : "%.0f%s", v / scale, unit);
    return buf;
}

// Shared by the encoding threads and the main thread, which draws it on stderr.
struct Progress {
    std::atomic<uint64_t> bytes{0}, tokens{0};
    uint64_t total_bytes = 0;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point last_draw = start;
    bool tty = isatty(2) != 0;

    double seconds() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    // A terminal gets a bar redrawn in place 5 times a second; a log a line every 10 seconds.
    void maybe_draw() {
        const auto now = std::chrono::steady_clock::now();
        const double since = std::chrono::duration<double>(now - last_draw).count();
        if (since < (tty ? 0.2 : 10.0)) return;
        last_draw = now;
        draw();
    }
    void draw() const {
        const double t = std::max(seconds(), 1e-9), b = (double)bytes.load();
        const double frac = total_bytes ? std::min(1.0, b / (double)total_bytes) : 1.0;
        char bar[31];
        const int filled = (int)(frac * 30);
        for (int i = 0; i < 30; ++i) bar[i] = i < filled ? '#' : '.';
        bar[30] = '\0';
        std::fprintf(stderr, "%s[%s] %5.1f%%  %.1f/%.1f MB  %.1f MB/s  %s tokens/s%s",
                     tty ? "\r" : "", bar, 100.0 * frac, b / 1e6, (double)total_bytes / 1e6,
                     b / 1e6 / t, human((double)tokens.load() / t).c_str(), tty ? "\033[K" : "\n");
    }
    void finish() {
        bytes = total_bytes;  // empty documents and blank lines are not counted on the way
        if (!tty) return;
        draw();
        std::fputc('\n', stderr);
    }
};

// A batch of documents and the segments they are cut into; tokens[k] are segment k's ids.
struct Batch {
    std::vector<Document> docs;
    std::vector<Segment> segments;
    std::vector<std::vector<uint16_t>> tokens;
};

// Reads documents until the batch holds target_bytes of text or the corpus ends. Returns false
// with *why on a read error.
bool read_batch(CorpusReader* reader, size_t target_bytes, long long segment_bytes, Batch* batch,
                Progress* progress, std::string* why) {
    *batch = Batch{};
    size_t bytes = 0;
    Document doc;
    while (bytes < target_bytes) {
        if (!reader->next(&doc, why)) return why->empty();
        bytes += doc.text.size();
        cut_segments(doc, (int)batch->docs.size(), (size_t)segment_bytes, &batch->segments);
        batch->docs.push_back(std::move(doc));
        progress->maybe_draw();
    }
    return true;
}

// Encodes every segment of a batch on `threads` threads; join() waits for them.
class Encoder {
  public:
    Encoder(const llmc::Tokenizer& tok, Batch* batch, int threads, Progress* progress)
        : batch_(batch) {
        batch->tokens.resize(batch->segments.size());
        for (int t = 0; t < threads; ++t) {
            workers_.emplace_back([this, &tok, progress] { work(tok, progress); });
        }
    }
    ~Encoder() { join(nullptr); }
    // Waits for the threads, drawing the progress bar meanwhile when one is given.
    void join(Progress* progress) {
        while (progress && done_.load() < workers_.size()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            progress->maybe_draw();
        }
        for (std::thread& w : workers_) {
            if (w.joinable()) w.join();
        }
    }

  private:
    void work(const llmc::Tokenizer& tok, Progress* progress) {
        std::vector<int> ids;
        for (size_t k = next_.fetch_add(1); k < batch_->segments.size(); k = next_.fetch_add(1)) {
            const Segment& s = batch_->segments[k];
            const std::string& text = batch_->docs[s.doc].text;
            ids.clear();
            tok.encode(std::string_view(text).substr(s.begin, s.end - s.begin), &ids);
            batch_->tokens[k].assign(ids.begin(), ids.end());  // ids < vocab size <= 65536
            progress->bytes += s.progress_bytes;
            progress->tokens += ids.size() + (s.begin == 0 ? 1 : 0);
        }
        done_.fetch_add(1);
    }
    Batch* batch_;
    std::atomic<size_t> next_{0}, done_{0};
    std::vector<std::thread> workers_;
};

// Sends tokens to the train or val split by the chosen rule.
class Router {
  public:
    Router(const Options& o, ShardWriter* out, uint16_t eot) : o_(o), out_(out), eot_(eot) {}
    void write_batch(const Batch& batch) {
        for (size_t k = 0; k < batch.segments.size(); ++k) {
            const Segment& s = batch.segments[k];
            const Document& doc = batch.docs[s.doc];
            if (s.begin == 0) {
                out_->count_document(split_of_next(doc));
                emit(doc, &eot_, 1);
            }
            emit(doc, batch.tokens[k].data(), batch.tokens[k].size());
        }
    }

  private:
    int split_of_next(const Document& doc) const {
        if (o_.val_tokens >= 0) return out_->tokens(kVal) < o_.val_tokens ? kVal : kTrain;
        return in_val_split(doc.index, o_.seed, o_.val_fraction) ? kVal : kTrain;
    }
    void emit(const Document& doc, const uint16_t* p, size_t n) {
        if (o_.val_tokens < 0) {
            out_->write(split_of_next(doc), p, n);
            return;
        }
        const size_t val_left = (size_t)std::max(0LL, o_.val_tokens - out_->tokens(kVal));
        const size_t nv = std::min(n, val_left);
        out_->write(kVal, p, nv);
        out_->write(kTrain, p + nv, n - nv);
    }
    const Options& o_;
    ShardWriter* out_;
    uint16_t eot_;
};

void print_summary(const Options& o, const CorpusReader& reader, const ShardWriter& out,
                   double seconds, uint64_t input_bytes) {
    const long long docs = out.stats(kTrain).documents + out.stats(kVal).documents;
    const long long tokens = out.stats(kTrain).tokens + out.stats(kVal).tokens;
    std::printf("prepared %s: %s, %s, from %s (%s skipped)\n", o.out_dir.c_str(),
                count_of(docs, "document").c_str(), count_of(tokens, "token").c_str(),
                count_of((long long)reader.num_files(), "file").c_str(),
                count_of(reader.empty_documents(), "empty document").c_str());
    for (int split : {kTrain, kVal}) {
        const SplitStats& s = out.stats(split);
        std::printf("  %-5s %16s %20s (%5.1f%%) %10s  %s\n", split == kTrain ? "train" : "val",
                    count_of(s.documents, "document").c_str(), count_of(s.tokens, "token").c_str(),
                    tokens ? 100.0 * s.tokens / tokens : 0.0, count_of(s.shards, "shard").c_str(),
                    s.shards ? out.shard_glob(split).c_str() : "");
    }
    std::printf("  tokenizer %s\n", (fs::path(o.out_dir) / "tokenizer.bin").c_str());
    if (out.stale_removed() > 0) {
        std::printf("  removed %s of an earlier run that this run did not rewrite\n",
                    count_of(out.stale_removed(), "stale shard").c_str());
    }
    const double t = std::max(seconds, 1e-9);
    std::printf("  %.2f MB in %.2f s: %.1f MB/s, %s tokens/s on %s\n", (double)input_bytes / 1e6,
                seconds, (double)input_bytes / 1e6 / t, human((double)tokens / t).c_str(),
                count_of(o.threads, "thread").c_str());
    for (int split : {kTrain, kVal}) {
        const long long last = out.stats(split).last_shard_tokens;
        // The data loader refuses a shard shorter than one batch, B*T+1 tokens (64 x 1024 + 1).
        if (out.stats(split).shards > 0 && last < 65537) {
            std::printf("note: the last %s shard holds %s; training needs B*T <= %lld\n",
                        split == kTrain ? "train" : "val", count_of(last, "token").c_str(),
                        last - 1);
        }
    }
    const bool want_val = o.val_tokens >= 0 ? o.val_tokens > 0 : o.val_fraction > 0;
    for (int split : {kTrain, kVal}) {
        if (out.stats(split).tokens == 0 && (split == kTrain || want_val)) {
            std::printf(
                "note: the %s split is empty (%s in all); cut the text into more documents "
                "with --doc-sep, or split by --val-tokens N\n",
                split == kTrain ? "train" : "val", count_of(docs, "document").c_str());
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_args(argc, argv);
    llmc::Tokenizer tok;
    std::string why;
    if (!tok.load(o.tokenizer_dir, &why)) {
        std::fprintf(stderr, "error: %s\n", why.c_str());
        return 1;
    }
    if (tok.vocab_size() > 65536) {
        std::fprintf(stderr, "error: a vocabulary of %d tokens does not fit uint16 shards\n",
                     tok.vocab_size());
        return 1;
    }
    std::vector<InputFile> files;
    if (!expand_inputs(o.inputs, o.format, o.out_dir, &files, &why)) {
        std::fprintf(stderr, "error: %s\n", why.c_str());
        return 1;
    }
    ShardWriter out(o.out_dir, o.name, o.shard_tokens);
    out.write_tokenizer(tok);

    Progress progress;
    for (const InputFile& f : files) progress.total_bytes += f.bytes;
    CorpusReader reader(files, o.doc_sep, o.field);
    Router router(o, &out, (uint16_t)tok.eot());
    // Enough text per batch that every thread has many segments to take.
    const size_t batch_bytes = std::max<size_t>(16u << 20, (size_t)o.threads * (4u << 20));
    Batch cur, next;
    if (!read_batch(&reader, batch_bytes, o.segment_bytes, &cur, &progress, &why)) out.fail(why);
    while (!cur.docs.empty()) {
        Encoder encoder(tok, &cur, o.threads, &progress);
        const bool read_ok =
            read_batch(&reader, batch_bytes, o.segment_bytes, &next, &progress, &why);
        encoder.join(&progress);
        if (!read_ok) out.fail(why);
        router.write_batch(cur);
        std::swap(cur, next);
    }
    if (out.stats(kTrain).documents + out.stats(kVal).documents == 0) {
        out.fail("the inputs hold no text: " + std::to_string(reader.num_files()) +
                 " file(s), every document empty");
    }
    progress.finish();
    out.finish();
    print_summary(o, reader, out, progress.seconds(), progress.total_bytes);
    return 0;
}
