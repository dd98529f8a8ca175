// prepare_data_io.h: the input and output halves of prepare_data (dev/tools/prepare_data.cpp has
// the command line, the threads and the overview of the rules): input expansion and the check that
// an input is text, JSONL parsing (prepare_data_json.cpp), documents and their segments, the
// validation-split hash (prepare_data_io.cpp), and the shard writer that leaves nothing behind
// on failure or on SIGINT/SIGTERM/SIGHUP, with the thread that waits for those signals
// (prepare_data_out.cpp).
#pragma once
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmc {
class Tokenizer;
}

namespace prep {

enum class InputFormat { kAuto, kText, kJsonl, kJson };

struct InputFile {
    std::string path;  // kStdin: standard input
    bool jsonl = false;
    bool json_array = false;  // a JSON array of objects (*.json), each one document
    uint64_t bytes = 0;       // 0 for standard input, whose size is not known in advance
    size_t invalid_utf8 = 0;  // bytes of ill-formed UTF-8 in its first kHeadBytes
};

constexpr const char* kStdin = "-";

// Expands the command line's inputs in order: a file stays, a folder becomes every regular file
// below it (names starting with '.' skipped, and out_dir skipped when it lies inside), sorted
// by path bytes, and "-" is standard input (once at most). kAuto reads *.jsonl as JSONL, *.json as
// a JSON array and anything else (standard input too) as text. Every file's first kHeadBytes must
// pass check_text_head. False with one sentence in *why for a missing path, a broken link, a
// special file or a file that is not text.
bool expand_inputs(const std::vector<std::string>& inputs, InputFormat format,
                   const std::string& out_dir, std::vector<InputFile>* files, std::string* why);

constexpr size_t kHeadBytes = 1 << 16;

// True when `head`, an input's first bytes, looks like UTF-8 text. False with one sentence that
// names `name` and says what to do instead for: compressed data (gzip, bzip2, xz, zstd, zip),
// llm.c's binary files (token shard, tokenizer, model, debug state) and this project's
// checkpoints, UTF-16 (a byte-order mark), any NUL byte, and more than a quarter of the bytes
// in ill-formed UTF-8 sequences (a sequence cut by the end of `head` is not counted; *invalid
// gets their number when not null). `jsonl` adds --format jsonl to the command it suggests.
bool check_text_head(const std::string& name, std::string_view head, bool jsonl, std::string* why,
                     size_t* invalid = nullptr);

// One JSON object (a JSONL line): sets *text to its top-level string field `field` ("text" by
// default, prepare_data --field), decoded (escapes, \uXXXX with surrogate pairs; a lone surrogate
// becomes U+FFFD). False with *why (the column and what is wrong) for malformed JSON, a line that
// is not an object, a missing or non-string field.
bool json_text_field(std::string_view line, std::string* text, std::string* why,
                     const std::string& field = "text");

// A JSON array of objects (a *.json file, e.g. TinyStories' data00.json), one element at a time:
// *pos starts at 0 and is advanced past each element; *text receives the element's `field`.
// Returns true with *text set, or false at the end (*why empty) or on an error (*why: the line
// and column in `json` and what is wrong).
bool json_array_next(std::string_view json, size_t* pos, const std::string& field,
                     std::string* text, std::string* why);

struct Document {
    std::string text;
    long long index = 0;       // position among all documents of the corpus, empty ones included
    uint64_t input_bytes = 0;  // input bytes it came from (JSON syntax, separator), for progress
};

// The encoding work unit: text[begin, end) of batch document `doc`. A document's first segment
// has begin == 0 and is the one preceded by EOT.
struct Segment {
    int doc = 0;
    size_t begin = 0, end = 0;
    uint64_t progress_bytes = 0;
};

// Appends the segments of a non-empty document: pieces of about segment_bytes, cut only where
// GPT-2's pre-tokenizer ends a piece whatever follows, so encoding them one by one gives the ids
// of the whole text.
void cut_segments(const Document& doc, int doc_slot, size_t segment_bytes,
                  std::vector<Segment>* out);

// True when document `index` belongs to the validation split (see prepare_data.cpp).
bool in_val_split(long long index, uint64_t seed, double fraction);

// Yields the corpus's non-empty documents in input order. A text file is also refused when it
// holds a NUL byte past the head that expand_inputs checked; standard input is checked here.
class CorpusReader {
  public:
    CorpusReader(std::vector<InputFile> files, std::string doc_sep, std::string field = "text");
    ~CorpusReader();
    CorpusReader(const CorpusReader&) = delete;
    CorpusReader& operator=(const CorpusReader&) = delete;
    // The next document: true; the end: false with *why empty; an error: false with *why set.
    bool next(Document* doc, std::string* why);
    long long empty_documents() const { return empty_; }
    size_t num_files() const { return files_.size(); }
    uint64_t bytes_read() const { return bytes_read_; }  // input bytes read so far

  private:
    bool open_file(std::string* why);
    void close_file();
    bool next_jsonl(Document* doc, std::string* why);
    bool next_json_array(Document* doc, std::string* why);
    bool next_text(Document* doc);

    std::vector<InputFile> files_;
    std::string sep_;
    std::string field_;  // the JSON field that holds a document
    size_t file_ = 0;    // index of the file being read
    bool open_ = false;
    std::FILE* f_ = nullptr;  // the open JSONL file
    char* line_ = nullptr;
    size_t line_cap_ = 0;
    long long line_no_ = 0;
    std::string text_;  // the open text file, whole
    size_t text_pos_ = 0;
    long long index_ = 0, empty_ = 0;
    uint64_t pending_bytes_ = 0;  // input bytes of skipped empty documents
    uint64_t bytes_read_ = 0;
};

constexpr int kTrain = 0, kVal = 1;
// More shards than this in one split is a --shard-tokens mistake (130,000 files of 1 KB).
constexpr int kMaxShardsPerSplit = 10000;

struct SplitStats {
    long long documents = 0, tokens = 0;
    int shards = 0;
    long long last_shard_tokens = 0;  // the shard that holds the rest
};

// Writes the two splits as shards of shard_tokens tokens under hidden temporary names in dir and
// renames them in finish(). Until finish() is done, fail() and interrupt() undo the run: they
// remove every temporary file and every folder create() made (when nothing else is in it), so an
// earlier output in dir is left as it was. interrupt() runs on the signal watcher's thread while
// the main thread writes, so creating, renaming and removing files all hold one lock.
class ShardWriter {
  public:
    // Touches nothing on disk yet.
    ShardWriter(std::string dir, std::string name, long long shard_tokens);
    ShardWriter(const ShardWriter&) = delete;
    ShardWriter& operator=(const ShardWriter&) = delete;
    void create();                                     // dir and its missing parents
    void write_tokenizer(const llmc::Tokenizer& tok);  // dir/tokenizer.bin, renamed in finish()
    void write(int split, const uint16_t* tokens, size_t n);
    void count_document(int split) { stats_[split].documents++; }
    long long tokens(int split) const { return stats_[split].tokens; }
    const SplitStats& stats(int split) const { return stats_[split]; }
    std::string shard_glob(int split) const;  // dir/NAME_train_*.bin
    int stale_removed() const { return stale_removed_; }
    // Closes the shards, renames every file to its final name, removes stale shards.
    void finish();
    // Undoes the run, prints "error: <sentence>" and exits 1.
    [[noreturn]] void fail(const std::string& sentence);
    // For the signal watcher: undoes the run unless finish() is done, prints one sentence saying
    // what it removed, and ends the process by signal `sig` (a shell shows 128 + sig).
    [[noreturn]] void interrupt(int sig);

  private:
    std::string shard_name(int split, int index) const;
    std::FILE* create_temp(const std::string& tmp, const std::string& final_path);
    void open_shard(int split);
    void close_shard(int split);
    void remove_stale_shards(const std::set<std::string>& fresh);
    std::string undo();  // with mutex_ held; what it removed, in words

    std::string dir_, name_;
    long long cap_;
    std::FILE* f_[2] = {nullptr, nullptr};
    long long in_shard_[2] = {0, 0};
    SplitStats stats_[2];
    int stale_removed_ = 0;
    std::mutex mutex_;                                        // guards the members below
    std::vector<std::pair<std::string, std::string>> temps_;  // (temporary, final) paths
    std::vector<std::string> created_dirs_;                   // the deepest first
    bool committed_ = false;
};

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread, and so in every thread started after
// it, and waits for them on a thread of its own, which hands one to ShardWriter::interrupt. A
// signal that is ignored at start (nohup, a shell's background job) stays ignored. Construct it
// before any other thread starts; the destructor stops the thread.
class SignalWatcher {
  public:
    explicit SignalWatcher(ShardWriter* out);
    ~SignalWatcher();
    SignalWatcher(const SignalWatcher&) = delete;
    SignalWatcher& operator=(const SignalWatcher&) = delete;

  private:
    static void* wait_loop(void* self);

    ShardWriter* out_;
    sigset_t set_;
    pthread_t thread_{};
    bool running_ = false;
    int wake_signal_ = 0;  // sent by the destructor to end sigwait
    std::atomic<bool> stopping_{false};
};

}  // namespace prep
