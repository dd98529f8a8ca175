// prepare_data_encode.h: prepare_data's encoding pipeline (dev/tools/prepare_data.cpp has the
// rules): the progress display, batches of documents cut into segments, the threads that encode
// them, and the router that sends tokens to the train or val split (prepare_data_encode.cpp).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "prepare_data_io.h"
#include "tokenizer.h"

namespace prep {

// GPT-2's end-of-text token written as text; --special-eot encodes it as the token itself.
constexpr std::string_view kEotText = "<|endoftext|>";

// 24.3M, 512.0k, 87: rates of very different sizes stay readable.
std::string human(double v);

// Shared by the encoding threads and the main thread, which draws it on stderr.
struct Progress {
    std::atomic<uint64_t> bytes{0}, tokens{0};
    uint64_t total_bytes = 0;  // 0: not known (standard input): no bar, no percentage
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point last_draw = start;
    bool tty = false;

    Progress();
    double seconds() const;
    // A terminal gets a bar redrawn in place 5 times a second; a log a line every 10 seconds.
    void maybe_draw();
    void draw() const;
    // Ends the display; bytes_read: the input's size in bytes, now that all of it is read.
    void finish(uint64_t bytes_read);
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
                Progress* progress, std::string* why);

// Encodes every segment of a batch on up to `threads` threads; join() waits for them. When the
// system refuses a thread (std::system_error), the threads already started do all the work, or,
// when none started, join() does it on the calling thread: the tokens are the same either way.
// Each literal kEotText is counted, and with special_eot encoded as the EOT token (the text on
// either side encoded on its own, as tiktoken does with allowed_special).
class Encoder {
  public:
    Encoder(const llmc::Tokenizer& tok, Batch* batch, int threads, bool special_eot,
            Progress* progress);
    ~Encoder();
    Encoder(const Encoder&) = delete;
    Encoder& operator=(const Encoder&) = delete;
    // Waits for the work, drawing the progress bar meanwhile.
    void join(Progress* progress);
    int started() const { return (int)workers_.size(); }
    const std::string& refusal() const { return refusal_; }  // why a thread did not start
    long long literal_eots() const { return literals_.load(); }

  private:
    void work(bool draw);

    const llmc::Tokenizer& tok_;
    Batch* batch_;
    bool special_eot_;
    Progress* progress_;
    std::atomic<size_t> next_{0}, done_{0};
    std::atomic<long long> literals_{0};
    std::vector<std::thread> workers_;
    std::string refusal_;
    bool joined_ = false;
};

// How documents are split between train and val (see prepare_data.cpp).
struct SplitRule {
    long long val_tokens = -1;  // >= 0: the first val_tokens tokens are val
    double val_fraction = 0;    // otherwise: a document is val by the hash of its index
    uint64_t seed = 1;
};

// Sends tokens to the train or val split by the rule.
class Router {
  public:
    Router(SplitRule rule, ShardWriter* out, uint16_t eot) : rule_(rule), out_(out), eot_(eot) {}
    void write_batch(const Batch& batch);

  private:
    int split_of_next(const Document& doc) const;
    void emit(const Document& doc, const uint16_t* p, size_t n);

    SplitRule rule_;
    ShardWriter* out_;
    uint16_t eot_;
};

}  // namespace prep
