// prepare_data_io.h: the input and output halves of prepare_data (dev/prepare_data.cpp has the
// command line, the threads and the overview of the rules): input expansion, JSONL parsing
// (prepare_data_json.cpp), documents and their segments, the validation-split hash, and the
// shard writer that leaves nothing behind on failure (prepare_data_io.cpp).
#pragma once
#include <cstdint>
#include <cstdio>
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
    std::string path;
    bool jsonl = false;
    bool json_array = false;  // a JSON array of objects (*.json), each one document
    uint64_t bytes = 0;
};

// Expands the command line's inputs in order: a file stays, a folder becomes every regular file
// below it (names starting with '.' skipped, and out_dir skipped when it lies inside), sorted
// by path bytes. kAuto reads *.jsonl as JSONL, *.json as a JSON array and anything else as text.
// False with one sentence in *why for a missing path, a broken link or a special file.
bool expand_inputs(const std::vector<std::string>& inputs, InputFormat format,
                   const std::string& out_dir, std::vector<InputFile>* files, std::string* why);

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

// Yields the corpus's non-empty documents in input order.
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
};

constexpr int kTrain = 0, kVal = 1;

struct SplitStats {
    long long documents = 0, tokens = 0;
    int shards = 0;
    long long last_shard_tokens = 0;  // the shard that holds the rest
};

// Writes the two splits as shards of shard_tokens tokens under hidden temporary names in dir and
// renames them in finish(). fail() removes every temporary, prints the sentence and exits 1.
class ShardWriter {
  public:
    ShardWriter(std::string dir, std::string name, long long shard_tokens);
    ShardWriter(const ShardWriter&) = delete;
    ShardWriter& operator=(const ShardWriter&) = delete;
    void write_tokenizer(const llmc::Tokenizer& tok);  // dir/tokenizer.bin, renamed in finish()
    void write(int split, const uint16_t* tokens, size_t n);
    void count_document(int split) { stats_[split].documents++; }
    long long tokens(int split) const { return stats_[split].tokens; }
    const SplitStats& stats(int split) const { return stats_[split]; }
    std::string shard_glob(int split) const;  // dir/NAME_train_*.bin
    int stale_removed() const { return stale_removed_; }
    // Closes the shards, renames every file to its final name, removes stale shards.
    void finish();
    [[noreturn]] void fail(const std::string& sentence);

  private:
    std::string shard_name(int split, int index) const;
    void open_shard(int split);
    void close_shard(int split);
    void remove_stale_shards(const std::set<std::string>& fresh);

    std::string dir_, name_;
    long long cap_;
    std::FILE* f_[2] = {nullptr, nullptr};
    long long in_shard_[2] = {0, 0};
    SplitStats stats_[2];
    std::vector<std::pair<std::string, std::string>> temps_;  // (temporary, final) paths
    int stale_removed_ = 0;
};

}  // namespace prep
