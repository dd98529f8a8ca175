// prepare_data_encode.cpp: progress, batches, the encoding threads and the split router of
// prepare_data. See prepare_data_encode.h for the contracts.
#include "prepare_data_encode.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <system_error>

namespace prep {

std::string human(double v) {
    char buf[32];
    const double scale = v >= 1e6 ? 1e6 : v >= 1e3 ? 1e3 : 1;
    const char* unit = v >= 1e6 ? "M" : v >= 1e3 ? "k" : "";
    std::snprintf(buf, sizeof(buf), scale > 1 ? "%.1f%s" : "%.0f%s", v / scale, unit);
    return buf;
}

// ---- progress ----------------------------------------------------------------------------

Progress::Progress() : tty(isatty(2) != 0) {}

double Progress::seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Progress::maybe_draw() {
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_draw).count();
    if (since < (tty ? 0.2 : 10.0)) return;
    last_draw = now;
    draw();
}

void Progress::draw() const {
    const double t = std::max(seconds(), 1e-9), b = (double)bytes.load();
    const char* end = tty ? "\033[K" : "\n";
    const std::string rate = human((double)tokens.load() / t);
    if (total_bytes == 0) {
        std::fprintf(stderr, "%s%.1f MB  %.1f MB/s  %s tokens/s%s", tty ? "\r" : "", b / 1e6,
                     b / 1e6 / t, rate.c_str(), end);
        return;
    }
    const double frac = std::min(1.0, b / (double)total_bytes);
    char bar[31];
    const int filled = (int)(frac * 30);
    for (int i = 0; i < 30; ++i) bar[i] = i < filled ? '#' : '.';
    bar[30] = '\0';
    std::fprintf(stderr, "%s[%s] %5.1f%%  %.1f/%.1f MB  %.1f MB/s  %s tokens/s%s", tty ? "\r" : "",
                 bar, 100.0 * frac, b / 1e6, (double)total_bytes / 1e6, b / 1e6 / t, rate.c_str(),
                 end);
}

void Progress::finish(uint64_t bytes_read) {
    // Empty documents and blank lines are not counted on the way.
    bytes = bytes_read;
    total_bytes = bytes_read;
    if (!tty) return;
    draw();
    std::fputc('\n', stderr);
}

// ---- batches -----------------------------------------------------------------------------

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

// ---- encoder -----------------------------------------------------------------------------

Encoder::Encoder(const llmc::Tokenizer& tok, Batch* batch, int threads, bool special_eot,
                 Progress* progress)
    : tok_(tok), batch_(batch), special_eot_(special_eot), progress_(progress) {
    batch->tokens.resize(batch->segments.size());
    for (int t = 0; t < threads; ++t) {
        try {
            workers_.emplace_back([this] { work(false); });
        } catch (const std::system_error& e) {
            refusal_ = e.what();
            break;
        }
    }
}

Encoder::~Encoder() {
    for (std::thread& w : workers_) {
        if (w.joinable()) w.join();
    }
}

void Encoder::join(Progress* progress) {
    if (joined_) return;
    joined_ = true;
    if (workers_.empty()) {
        work(true);
        return;
    }
    while (done_.load() < workers_.size()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        progress->maybe_draw();
    }
    for (std::thread& w : workers_) w.join();
}

// Takes segments until none is left. `draw`: this is the main thread, which owns the display.
void Encoder::work(bool draw) {
    std::vector<int> ids;
    long long literals = 0;
    const int eot = tok_.eot();
    for (size_t k = next_.fetch_add(1); k < batch_->segments.size(); k = next_.fetch_add(1)) {
        const Segment& s = batch_->segments[k];
        const std::string_view text =
            std::string_view(batch_->docs[s.doc].text).substr(s.begin, s.end - s.begin);
        ids.clear();
        // Segments are cut only after a '\n', which a literal does not hold: none spans two.
        size_t from = 0;
        for (size_t hit = text.find(kEotText); hit != std::string_view::npos;
             hit = text.find(kEotText, hit + kEotText.size())) {
            ++literals;
            if (!special_eot_) continue;
            if (hit > from) tok_.encode(text.substr(from, hit - from), &ids);
            ids.push_back(eot);
            from = hit + kEotText.size();
        }
        if (from < text.size()) tok_.encode(text.substr(from), &ids);
        batch_->tokens[k].assign(ids.begin(), ids.end());  // ids < vocab size <= 65536
        progress_->bytes += s.progress_bytes;
        progress_->tokens += ids.size() + (s.begin == 0 ? 1 : 0);
        if (draw) progress_->maybe_draw();
    }
    literals_ += literals;
    done_.fetch_add(1);
}

// ---- router ------------------------------------------------------------------------------

void Router::write_batch(const Batch& batch) {
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

int Router::split_of_next(const Document& doc) const {
    if (rule_.val_tokens >= 0) return out_->tokens(kVal) < rule_.val_tokens ? kVal : kTrain;
    return in_val_split(doc.index, rule_.seed, rule_.val_fraction) ? kVal : kTrain;
}

void Router::emit(const Document& doc, const uint16_t* p, size_t n) {
    if (rule_.val_tokens < 0) {
        out_->write(split_of_next(doc), p, n);
        return;
    }
    const size_t val_left = (size_t)std::max(0LL, rule_.val_tokens - out_->tokens(kVal));
    const size_t nv = std::min(n, val_left);
    out_->write(kVal, p, nv);
    out_->write(kTrain, p + nv, n - nv);
}

}  // namespace prep
