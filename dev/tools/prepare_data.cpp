// prepare_data.cpp: text corpora -> GPT-2 token shards (llm.c's format) and the tokenizer file.
//
//   prepare_data -o OUT_DIR [options] INPUT...        (prepare_data --help lists every option)
//
// Inputs, read in the order given: text files, directories (every regular file below, sorted by
// path bytes; hidden names, links to folders and the output folder skipped), JSONL files
// (*.jsonl, or --format jsonl): one JSON object per line whose string field "text" (--field) is
// the document; blank lines are skipped; JSON files (*.json, or --format json): one array of such
// objects, each a document (TinyStories' files); and "-", standard input (text, or JSONL / JSON
// with --format). Text and JSON files are read whole; JSONL files line by line. Every input must
// be UTF-8 text: compressed data, llm.c's binary files, UTF-16 and files holding NUL bytes or
// mostly invalid UTF-8 are refused with a sentence (check_text_head), before anything is written.
// Documents: a text file is one document, or several cut at each --doc-sep string (the separator
// itself is dropped); a JSONL line or a JSON array element is one. Each document is written as
// EOT (50256) followed by its tokens; empty documents are skipped (they still count in the
// document index below). A literal "<|endoftext|>" in a document is text (7 tokens, and a
// warning counts them), or with --special-eot the EOT token.
//
// Validation split, fixed by the inputs and --seed alone, never by threads or shard size:
//   --val-fraction F (default 0.05): document i goes to val when splitmix64(splitmix64(seed) ^ i),
//     read as a number in [0, 1), is below F. i counts documents in input order, so appending
//     documents to a corpus never moves an earlier one to the other split.
//   --val-tokens N: the first N tokens of the output stream are val, the rest train (for a
//     corpus of one or a few documents; the cut may fall inside a document).
// An empty train split is an error (but for --val-fraction 1), an empty val split a warning.
// Output: OUT_DIR/NAME_train_000000.bin, ..., NAME_val_000000.bin, ... (NAME: --name, default the
// folder's name), each --shard-tokens tokens except the last of each split, and
// OUT_DIR/tokenizer.bin. Everything is written under hidden temporary names and renamed at the
// end; on any error, SIGINT, SIGTERM or SIGHUP the temporaries and the folders this run created
// are removed and nothing else is touched. After success, shards NAME_{train,val}_NNNNNN.bin
// left by an earlier run and not rewritten are removed.
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

#include "prepare_data_encode.h"
#include "prepare_data_io.h"
#include "tokenizer.h"

namespace fs = std::filesystem;
using namespace prep;

namespace {

// The trainer reads B*T+1 tokens from one shard: refused below B=1, T=1024; a warning below B=8.
constexpr long long kMinShardTokens = 1 * 1024 + 1;
constexpr long long kWarnShardTokens = 8 * 1024 + 1;
// More encoding threads than this per logical CPU only contend.
constexpr long long kThreadsPerCpu = 4;

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
    bool special_eot = false;           // a literal "<|endoftext|>" becomes the EOT token
    std::string field = "text";         // the JSON field that holds a document
    long long threads = 0;              // as asked; 0: every core
    long long segment_bytes = 1 << 18;  // encoding work unit (does not change the output)
};

void print_help() {
    std::printf(
        "usage: prepare_data -o OUT_DIR [options] INPUT...\n"
        "\n"
        "Tokenizes text with GPT-2's BPE into llm.c token shards, OUT_DIR/NAME_train_000000.bin\n"
        "... and OUT_DIR/NAME_val_000000.bin ..., and writes OUT_DIR/tokenizer.bin. INPUT: a\n"
        "text file (one document), a folder (every file below it, sorted; hidden ones skipped),\n"
        "a JSONL file (*.jsonl: one JSON object per line with a string field \"text\", or\n"
        "--field), a JSON file (*.json: an array of such objects), or - for standard input\n"
        "(text, or JSONL / JSON with --format). Each document is EOT (50256) then its tokens.\n"
        "The output does not depend on --threads.\n"
        "\n"
        "  -o, --out DIR       output folder, created if missing (required)\n"
        "  --tokenizer DIR     folder with GPT-2's encoder.json and vocab.bpe, which\n"
        "                      scripts/data/tokenizer_files.sh DIR fetches\n"
        "                      (default data/gpt2_tokenizer)\n"
        "  --name NAME         shard name prefix (default: OUT_DIR's last name)\n"
        "  --shard-tokens N    tokens per shard; the last of each split holds the rest\n"
        "                      (default 100000000). The trainer reads B*T+1 tokens from one\n"
        "                      shard, so N must be at least 1025 (B=1, T=1024), below 8193\n"
        "                      (B=8) it gets a warning, and a split may have at most 10000\n"
        "                      shards\n"
        "  --val-fraction F    document i goes to val when a hash of (seed, i) in [0, 1) is\n"
        "                      below F (default 0.05)\n"
        "  --val-tokens N      instead, the first N tokens go to val and the rest to train\n"
        "  --seed S            seed of that hash (default 1)\n"
        "  --doc-sep STR       cut text files into documents at each STR, dropping it; \\n \\t\n"
        "                      \\r \\\\ are escapes (default: one document per file);\n"
        "                      --doc-sep '<|endoftext|>' for text that marks documents so\n"
        "  --special-eot       write each literal <|endoftext|> in the text as the EOT token\n"
        "                      (as tiktoken's allowed_special does), not as 7 text tokens;\n"
        "                      without it a warning counts them\n"
        "  --format F          auto (*.jsonl is JSONL, *.json a JSON array of objects, the\n"
        "                      rest text), text, jsonl or json (default auto)\n"
        "  --field NAME        the string field of each JSON object that holds the document\n"
        "                      (default text; TinyStories: story)\n"
        "  --threads N         encoding threads (default: every core); more than 4 per core\n"
        "                      are capped, and if the system refuses to start some, the run\n"
        "                      goes on with those it has\n"
        "  --segment-bytes N   encoding work unit; does not change the output (default 262144)\n"
        "  -h, --help          this text\n"
        "A value may also follow '=': --threads=8.\n"
        "\n"
        "Inputs must be UTF-8 text. Compressed files (gzip, bzip2, xz, zstd, zip), token\n"
        "shards, model and tokenizer files, UTF-16, and files holding NUL bytes or much\n"
        "invalid UTF-8 (over a quarter of the first 64 KiB) are refused; some invalid UTF-8\n"
        "(it becomes U+FFFD) gets a warning. Decompress on the way in:\n"
        "  gunzip -c corpus.jsonl.gz | prepare_data -o OUT_DIR --format jsonl -\n"
        "\n"
        "Splits: a train split left empty is an error (--val-tokens as large as the corpus, or\n"
        "every document in val), except with --val-fraction 1; an empty val split is a warning.\n"
        "\n"
        "Exit codes: 0 done; 1 bad input (one sentence; no shard or temporary file is left\n"
        "behind, nor a folder this run created, and an earlier output is untouched); 2 bad\n"
        "option. On SIGINT (Ctrl-C), SIGTERM or SIGHUP the same clean-up, then one sentence\n"
        "saying what was removed, and death by that signal (a shell shows 130, 143 or 129).\n");
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

// Options that take a value, and the one flag.
constexpr const char* kValueOptions[] = {"-o",
                                         "--out",
                                         "--tokenizer",
                                         "--name",
                                         "--shard-tokens",
                                         "--val-fraction",
                                         "--val-tokens",
                                         "--seed",
                                         "--doc-sep",
                                         "--format",
                                         "--field",
                                         "--threads",
                                         "--segment-bytes"};
constexpr const char* kSpecialEot = "--special-eot";

bool takes_value(const std::string& a) {
    return std::find(std::begin(kValueOptions), std::end(kValueOptions), a) !=
           std::end(kValueOptions);
}

// Sets option `a` (one of kValueOptions) from its value `v`.
void set_option(Options* o, const std::string& a, const char* v) {
    if (a == "-o" || a == "--out") {
        o->out_dir = v;
    } else if (a == "--tokenizer") {
        o->tokenizer_dir = v;
    } else if (a == "--name") {
        o->name = v;
    } else if (a == "--shard-tokens") {
        o->shard_tokens = parse_count(a, v, 1);
        if (o->shard_tokens < kMinShardTokens) {
            usage_error(
                "--shard-tokens must be at least 1025, as the trainer reads B*T+1 tokens "
                "from one shard (1025 for B=1, T=1024); got " +
                std::to_string(o->shard_tokens));
        }
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
        o->threads = parse_count(a, v, 1);
    } else if (a == "--segment-bytes") {
        o->segment_bytes = parse_count(a, v, 1);
    }
}

Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "-h" || a == "--help") {
            print_help();
            std::exit(0);
        }
        if (a.size() < 2 || a[0] != '-') {  // "-" is standard input
            o.inputs.push_back(a);
            continue;
        }
        std::string value;
        const size_t eq = a.find('=');
        const bool inline_value = a.rfind("--", 0) == 0 && eq != std::string::npos;
        if (inline_value) {
            value = a.substr(eq + 1);
            a.resize(eq);
        }
        if (a == kSpecialEot) {
            if (inline_value) usage_error(a + " takes no value");
            o.special_eot = true;
            continue;
        }
        if (!takes_value(a)) usage_error("unknown option " + a);
        if (!inline_value) {
            if (i + 1 >= argc) usage_error(a + " needs a value");
            value = argv[++i];
        }
        set_option(&o, a, value.c_str());
    }
    if (o.out_dir.empty()) usage_error("the output folder is required: -o OUT_DIR");
    if (o.inputs.empty()) {
        usage_error("no input given: name text files, folders, JSONL files or - (standard input)");
    }
    if (o.name.empty()) {
        fs::path p = fs::absolute(o.out_dir).lexically_normal();
        if (!p.has_filename()) p = p.parent_path();  // "data/brown/"
        o.name = p.filename().string();
        if (o.name.empty()) o.name = "data";
    }
    return o;
}

// The encoding threads: as asked, or every core, capped at kThreadsPerCpu per core.
int thread_count(const Options& o) {
    const long long cpus = std::max(1u, std::thread::hardware_concurrency());
    const long long cap = kThreadsPerCpu * cpus;
    if (o.threads > cap) {
        std::fprintf(stderr,
                     "note: --threads %lld is more than this machine can use; using %lld "
                     "(%lld per logical CPU, of which it has %lld)\n",
                     o.threads, cap, kThreadsPerCpu, cpus);
    }
    return (int)(o.threads == 0 ? cpus : std::min(o.threads, cap));
}

std::string with_commas(unsigned long long v) {
    std::string s = std::to_string(v);
    for (int i = (int)s.size() - 3; i > 0; i -= 3) s.insert((size_t)i, ",");
    return s;
}

std::string count_of(long long n, const char* noun) {
    return with_commas((unsigned long long)n) + " " + noun + (n == 1 ? "" : "s");
}

std::string times(long long n) {
    return n == 1 ? "once" : with_commas((unsigned long long)n) + " times";
}

void print_summary(const Options& o, const CorpusReader& reader, const ShardWriter& out,
                   double seconds, int threads, long long literal_eots) {
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
    if (o.special_eot) {
        std::printf("  <|endoftext|> found %s in the text, written as the EOT token\n",
                    times(literal_eots).c_str());
    }
    if (out.stale_removed() > 0) {
        std::printf("  removed %s of an earlier run that this run did not rewrite\n",
                    count_of(out.stale_removed(), "stale shard").c_str());
    }
    const double t = std::max(seconds, 1e-9);
    const double mb = (double)reader.bytes_read() / 1e6;
    std::printf("  %.2f MB in %.2f s: %.1f MB/s, %s tokens/s on %s\n", mb, seconds, mb / t,
                human((double)tokens / t).c_str(), count_of(threads, "thread").c_str());
    for (int split : {kTrain, kVal}) {
        const long long last = out.stats(split).last_shard_tokens;
        // The data loader refuses a shard shorter than one batch, B*T+1 tokens (64 x 1024 + 1).
        if (out.stats(split).shards > 0 && last < 65537) {
            std::printf("note: the last %s shard holds %s; training needs B*T <= %lld\n",
                        split == kTrain ? "train" : "val", count_of(last, "token").c_str(),
                        last - 1);
        }
    }
}

// An empty train split is an error, but for --val-fraction 1, which asks for it.
void check_train_split(const Options& o, ShardWriter* out) {
    if (out->stats(kTrain).tokens > 0 || (o.val_tokens < 0 && o.val_fraction >= 1)) return;
    const long long docs = out->stats(kVal).documents, tokens = out->stats(kVal).tokens;
    if (o.val_tokens >= 0) {
        out->fail("--val-tokens " + with_commas((unsigned long long)o.val_tokens) +
                  " takes the whole corpus (" + count_of(tokens, "token") +
                  "), leaving nothing for train; give a smaller --val-tokens, e.g. " +
                  std::to_string(std::max(1LL, tokens / 10)));
    }
    char fraction[32];
    std::snprintf(fraction, sizeof(fraction), "%g", o.val_fraction);
    out->fail("the val split took every document (" + count_of(docs, "document") + " in all) at " +
              "--val-fraction " + fraction + ", leaving nothing for train; cut the text into " +
              "more documents with --doc-sep STR, or split by tokens with --val-tokens N");
}

// The warnings printed after the summary, where they are seen.
void print_warnings(const Options& o, const ShardWriter& out, long long literal_eots) {
    const long long docs = out.stats(kTrain).documents + out.stats(kVal).documents;
    if (out.stats(kTrain).tokens == 0) {
        std::fprintf(stderr,
                     "warning: --val-fraction 1 put every document in val: there is "
                     "no train shard\n");
    }
    if (out.stats(kVal).tokens == 0 && o.val_tokens < 0 && o.val_fraction > 0) {
        std::fprintf(stderr,
                     "warning: the val split is empty: 0 of %s fell in it at "
                     "--val-fraction %g; cut the text into more documents with --doc-sep "
                     "STR, or split by tokens with --val-tokens N\n",
                     count_of(docs, "document").c_str(), o.val_fraction);
    }
    if (literal_eots > 0 && !o.special_eot) {
        std::fprintf(stderr,
                     "warning: the text holds the string <|endoftext|> %s, written as ordinary "
                     "text (7 tokens each); --special-eot writes each as the EOT token (50256), "
                     "--doc-sep '<|endoftext|>' cuts documents there\n",
                     times(literal_eots).c_str());
    }
}

// One warning for the files whose head holds some invalid UTF-8 (it is encoded as U+FFFD).
void warn_invalid_utf8(const std::vector<InputFile>& files) {
    const InputFile* first = nullptr;
    long long n = 0;
    for (const InputFile& f : files) {
        if (f.invalid_utf8 == 0) continue;
        if (first == nullptr) first = &f;
        ++n;
    }
    if (first == nullptr) return;
    std::fprintf(stderr,
                 "warning: %s %s bytes that are not valid UTF-8 (each becomes U+FFFD), the "
                 "first %s (%s in its first %s); if text is in another encoding, convert it "
                 "first, e.g. iconv -f LATIN1 -t UTF-8\n",
                 count_of(n, "file").c_str(), n == 1 ? "has" : "have", first->path.c_str(),
                 with_commas(first->invalid_utf8).c_str(),
                 count_of((long long)std::min<uint64_t>(first->bytes, kHeadBytes), "byte").c_str());
}

// The inputs' bytes, or 0 when standard input is one of them (its size is not known).
uint64_t known_size(const std::vector<InputFile>& files) {
    uint64_t bytes = 0;
    for (const InputFile& f : files) {
        if (f.path != kStdin) {
            bytes += f.bytes;
            continue;
        }
        if (isatty(0)) {
            std::fprintf(stderr,
                         "note: reading standard input from the terminal; end it with "
                         "Ctrl-D\n");
        }
        return 0;
    }
    return bytes;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_args(argc, argv);
    ShardWriter out(o.out_dir, o.name, o.shard_tokens);
    // First, so every thread started later has the signals blocked and the watcher takes them.
    SignalWatcher watcher(&out);
    int threads = thread_count(o);
    if (o.shard_tokens < kWarnShardTokens) {
        std::fprintf(stderr,
                     "warning: --shard-tokens %lld is less than one batch of B=8, T=1024 (8193 "
                     "tokens); the trainer needs B*T+1 tokens in every shard, so train with "
                     "B*T <= %lld\n",
                     o.shard_tokens, o.shard_tokens - 1);
    }
    llmc::Tokenizer tok;
    std::string why;
    if (!tok.load(o.tokenizer_dir, &why)) out.fail(why);
    if (tok.vocab_size() > 65536) {
        out.fail("a vocabulary of " + std::to_string(tok.vocab_size()) +
                 " tokens does not fit uint16 shards");
    }
    std::vector<InputFile> files;
    if (!expand_inputs(o.inputs, o.format, o.out_dir, &files, &why)) out.fail(why);
    warn_invalid_utf8(files);
    Progress progress;
    progress.total_bytes = known_size(files);
    out.create();
    out.write_tokenizer(tok);

    CorpusReader reader(files, o.doc_sep, o.field);
    Router router(SplitRule{o.val_tokens, o.val_fraction, o.seed}, &out, (uint16_t)tok.eot());
    // Enough text per batch that every thread has many segments to take, within memory.
    const size_t batch_bytes =
        std::clamp<size_t>((size_t)threads * (4u << 20), 16u << 20, 512u << 20);
    long long literal_eots = 0;
    Batch cur, next;
    if (!read_batch(&reader, batch_bytes, o.segment_bytes, &cur, &progress, &why)) out.fail(why);
    while (!cur.docs.empty()) {
        Encoder encoder(tok, &cur, threads, o.special_eot, &progress);
        if (encoder.started() < threads) {  // said once: later batches ask for no more
            std::fprintf(stderr,
                         "%snote: the system refused to start more than %d of %d encoding "
                         "threads (%s); going on with %s\n",
                         progress.tty ? "\r\033[K" : "", encoder.started(), threads,
                         encoder.refusal().c_str(),
                         encoder.started() > 0 ? count_of(encoder.started(), "thread").c_str()
                                               : "the main thread alone");
            threads = encoder.started();
        }
        const bool read_ok =
            read_batch(&reader, batch_bytes, o.segment_bytes, &next, &progress, &why);
        encoder.join(&progress);
        literal_eots += encoder.literal_eots();
        if (!read_ok) out.fail(why);
        router.write_batch(cur);
        std::swap(cur, next);
    }
    if (out.stats(kTrain).documents + out.stats(kVal).documents == 0) {
        out.fail("the inputs hold no text: " + std::to_string(reader.num_files()) +
                 " file(s), every document empty");
    }
    check_train_split(o, &out);
    progress.finish(reader.bytes_read());
    out.finish();
    print_summary(o, reader, out, progress.seconds(), std::max(1, threads), literal_eots);
    print_warnings(o, out, literal_eots);
    return 0;
}
