// prepare_data_io.cpp: inputs, JSONL, documents and segments, split hash, shard writer.
// See prepare_data_io.h for the contracts and prepare_data.cpp for the rules they implement.
#include "prepare_data_io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "dataloader.h"
#include "rng.h"
#include "tokenizer.h"

namespace fs = std::filesystem;

namespace prep {

// ---- inputs ------------------------------------------------------------------------------

namespace {

bool is_jsonl_name(const std::string& path) {
    const std::string ext = fs::path(path).extension().string();
    return ext == ".jsonl" || ext == ".JSONL";
}

bool is_json_name(const std::string& path) {
    const std::string ext = fs::path(path).extension().string();
    return ext == ".json" || ext == ".JSON";
}

bool add_file(const fs::path& p, InputFormat format, std::vector<InputFile>* files,
              std::string* why) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (ec || !fs::exists(st)) {
        std::error_code el;
        std::string reason = ec ? ec.message() : std::string("no such file");
        if (fs::is_symlink(fs::symlink_status(p, el))) reason = "it is a link to a missing file";
        *why = "cannot read " + p.string() + ": " + reason;
        return false;
    }
    if (!fs::is_regular_file(st)) {
        *why = p.string() + " is not a regular file; give text files, folders or JSONL files";
        return false;
    }
    InputFile f;
    f.path = p.string();
    f.jsonl =
        format == InputFormat::kJsonl || (format == InputFormat::kAuto && is_jsonl_name(f.path));
    f.json_array =
        format == InputFormat::kJson || (format == InputFormat::kAuto && is_json_name(f.path));
    f.bytes = (uint64_t)fs::file_size(p, ec);
    files->push_back(std::move(f));
    return true;
}

bool add_folder(const fs::path& root, InputFormat format, const fs::path& out_dir,
                std::vector<InputFile>* files, std::string* why) {
    std::vector<fs::path> found;
    std::error_code ec;
    fs::recursive_directory_iterator it(root, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
        const fs::path& p = it->path();
        const bool hidden = p.filename().string().rfind('.', 0) == 0;
        std::error_code eq;
        const bool is_out = fs::equivalent(p, out_dir, eq);
        if (hidden || is_out) {
            if (it->is_directory(eq)) it.disable_recursion_pending();
            continue;
        }
        if (!it->is_directory(eq)) found.push_back(p);
    }
    if (ec) {
        *why = "cannot read the folder " + root.string() + ": " + ec.message();
        return false;
    }
    std::sort(found.begin(), found.end(),
              [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });
    for (const fs::path& p : found) {
        if (!add_file(p, format, files, why)) return false;
    }
    return true;
}

}  // namespace

bool expand_inputs(const std::vector<std::string>& inputs, InputFormat format,
                   const std::string& out_dir, std::vector<InputFile>* files, std::string* why) {
    for (const std::string& in : inputs) {
        std::error_code ec;
        const bool dir = fs::is_directory(in, ec);
        if (dir ? !add_folder(in, format, out_dir, files, why)
                : !add_file(in, format, files, why)) {
            return false;
        }
    }
    return true;
}

// ---- documents ---------------------------------------------------------------------------

namespace {

bool graphic_ascii(char c) { return c > 0x20 && c < 0x7F; }

// Cutting before text[i] is exact when text[i-1] is '\n' between two printable ASCII non-space
// bytes: every GPT-2 pre-token pattern but the whitespace ones stops at '\n', that lone '\n' is
// its own piece both before 'x' and at the end of a text, and matching at i does not look back.
// (A longer whitespace run would not do: "\n\n" before a letter splits as "\n" + "\n".)
bool safe_cut(const std::string& t, size_t i) {
    return i >= 2 && i < t.size() && t[i - 1] == '\n' && graphic_ascii(t[i - 2]) &&
           graphic_ascii(t[i]);
}

}  // namespace

void cut_segments(const Document& doc, int doc_slot, size_t segment_bytes,
                  std::vector<Segment>* out) {
    const std::string& t = doc.text;
    uint64_t extra = doc.input_bytes > t.size() ? doc.input_bytes - t.size() : 0;
    size_t begin = 0;
    while (begin < t.size()) {
        size_t end = t.size();
        if (t.size() - begin > segment_bytes) {
            end = begin + segment_bytes;
            while (end < t.size() && !safe_cut(t, end)) ++end;
        }
        out->push_back(Segment{doc_slot, begin, end, end - begin + extra});
        extra = 0;
        begin = end;
    }
}

bool in_val_split(long long index, uint64_t seed, double fraction) {
    const uint64_t h = llmc::splitmix64(llmc::splitmix64(seed) ^ (uint64_t)index);
    return (double)(h >> 11) * 0x1p-53 < fraction;
}

// ---- corpus reader -----------------------------------------------------------------------

CorpusReader::CorpusReader(std::vector<InputFile> files, std::string doc_sep, std::string field)
    : files_(std::move(files)), sep_(std::move(doc_sep)), field_(std::move(field)) {}

CorpusReader::~CorpusReader() {
    close_file();
    std::free(line_);
}

bool CorpusReader::open_file(std::string* why) {
    const InputFile& in = files_[file_];
    std::FILE* f = std::fopen(in.path.c_str(), "rb");
    if (f == nullptr) {
        *why = "cannot read " + in.path + ": " + std::strerror(errno);
        return false;
    }
    open_ = true;
    line_no_ = 0;
    if (in.jsonl) {
        f_ = f;
        return true;
    }
    text_.clear();
    text_pos_ = 0;
    char buf[1 << 16];
    size_t got = 0;
    while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) text_.append(buf, got);
    const bool bad = std::ferror(f) != 0;
    std::fclose(f);
    if (bad) *why = "cannot read " + in.path + ": " + std::strerror(errno);
    return !bad;
}

void CorpusReader::close_file() {
    if (f_ != nullptr) std::fclose(f_);
    f_ = nullptr;
    open_ = false;
    text_ = std::string();
}

// The next piece of the open text file: the whole file, or the text up to the next separator.
bool CorpusReader::next_text(Document* doc) {
    if (text_pos_ > text_.size()) return false;
    size_t end = sep_.empty() ? std::string::npos : text_.find(sep_, text_pos_);
    const bool cut = end != std::string::npos;
    if (!cut) end = text_.size();
    doc->text.assign(text_, text_pos_, end - text_pos_);
    doc->input_bytes = end - text_pos_ + (cut ? sep_.size() : 0);
    text_pos_ = cut ? end + sep_.size() : text_.size() + 1;
    return true;
}

// The next non-blank line of the open JSONL file, parsed.
bool CorpusReader::next_jsonl(Document* doc, std::string* why) {
    for (;;) {
        errno = 0;
        const ssize_t n = getline(&line_, &line_cap_, f_);
        if (n < 0) {
            if (std::ferror(f_)) {
                *why = "cannot read " + files_[file_].path + ": " + std::strerror(errno);
            }
            return false;
        }
        ++line_no_;
        std::string_view line(line_, (size_t)n);
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
        if (line_no_ == 1 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
        if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) {
            pending_bytes_ += (uint64_t)n;
            continue;
        }
        if (!json_text_field(line, &doc->text, why, field_)) {
            *why = files_[file_].path + " line " + std::to_string(line_no_) + ": " + *why;
            return false;
        }
        doc->input_bytes = (uint64_t)n;
        return true;
    }
}

// The next element of the open JSON array file (read whole, like a text file).
bool CorpusReader::next_json_array(Document* doc, std::string* why) {
    const size_t before = text_pos_;
    if (!json_array_next(text_, &text_pos_, field_, &doc->text, why)) {
        if (!why->empty()) *why = files_[file_].path + " " + *why;
        return false;
    }
    doc->input_bytes = text_pos_ - before;
    return true;
}

bool CorpusReader::next(Document* doc, std::string* why) {
    why->clear();
    while (file_ < files_.size()) {
        if (!open_ && !open_file(why)) return false;
        const bool got = files_[file_].jsonl        ? next_jsonl(doc, why)
                         : files_[file_].json_array ? next_json_array(doc, why)
                                                    : next_text(doc);
        if (!why->empty()) return false;
        if (!got) {
            close_file();
            ++file_;
            continue;
        }
        doc->index = index_++;
        if (doc->text.empty()) {
            ++empty_;
            pending_bytes_ += doc->input_bytes;
            continue;
        }
        doc->input_bytes += pending_bytes_;
        pending_bytes_ = 0;
        return true;
    }
    return false;
}

// ---- shard writer ------------------------------------------------------------------------

namespace {
const char* const kSplitNames[2] = {"train", "val"};
}

ShardWriter::ShardWriter(std::string dir, std::string name, long long shard_tokens)
    : dir_(std::move(dir)), name_(std::move(name)), cap_(shard_tokens) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || !fs::is_directory(dir_)) {
        fail("cannot create the output folder " + dir_ + ": " +
             (ec ? ec.message() : std::string("a file has that name")));
    }
}

std::string ShardWriter::shard_name(int split, int index) const {
    char num[16];
    std::snprintf(num, sizeof(num), "%06d", index);
    return name_ + "_" + kSplitNames[split] + "_" + num + ".bin";
}

std::string ShardWriter::shard_glob(int split) const {
    return (fs::path(dir_) / (name_ + "_" + kSplitNames[split] + "_*.bin")).string();
}

void ShardWriter::write_tokenizer(const llmc::Tokenizer& tok) {
    const std::string tmp = (fs::path(dir_) / ".tokenizer.bin.tmp").string();
    temps_.emplace_back(tmp, (fs::path(dir_) / "tokenizer.bin").string());
    // Probe first, so an unwritable folder gets our sentence and cleanup.
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) {
        fail("cannot write in the output folder " + dir_ + ": " + std::strerror(errno));
    }
    std::fclose(f);
    tok.write_tokenizer_file(tmp);
}

void ShardWriter::open_shard(int split) {
    const std::string final_name = shard_name(split, stats_[split].shards);
    const std::string tmp = (fs::path(dir_) / ("." + final_name + ".tmp")).string();
    temps_.emplace_back(tmp, (fs::path(dir_) / final_name).string());
    f_[split] = std::fopen(tmp.c_str(), "wb");
    if (f_[split] == nullptr) fail("cannot create " + tmp + ": " + std::strerror(errno));
    const int32_t header[llmc::kShardHeaderInts] = {};  // the real one is written on close
    if (std::fwrite(header, sizeof(header), 1, f_[split]) != 1) {
        fail("cannot write " + tmp + ": " + std::strerror(errno));
    }
    in_shard_[split] = 0;
    stats_[split].shards++;
}

void ShardWriter::close_shard(int split) {
    std::FILE* f = f_[split];
    f_[split] = nullptr;
    int32_t header[llmc::kShardHeaderInts] = {};
    header[0] = llmc::kShardMagic;
    header[1] = llmc::kShardVersion;
    header[2] = (int32_t)in_shard_[split];
    stats_[split].last_shard_tokens = in_shard_[split];
    bool ok = std::fseek(f, 0, SEEK_SET) == 0 && std::fwrite(header, sizeof(header), 1, f) == 1;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) fail("cannot write a token shard in " + dir_ + ": " + std::strerror(errno));
}

void ShardWriter::write(int split, const uint16_t* tokens, size_t n) {
    while (n > 0) {
        if (f_[split] == nullptr) open_shard(split);
        const size_t k = std::min(n, (size_t)(cap_ - in_shard_[split]));
        if (std::fwrite(tokens, sizeof(uint16_t), k, f_[split]) != k) {
            fail("cannot write a token shard in " + dir_ + ": " + std::strerror(errno) +
                 " (disk full?)");
        }
        in_shard_[split] += (long long)k;
        stats_[split].tokens += (long long)k;
        tokens += k;
        n -= k;
        if (in_shard_[split] == cap_) close_shard(split);
    }
}

void ShardWriter::remove_stale_shards(const std::set<std::string>& fresh) {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
        const std::string f = e.path().filename().string();
        for (const char* split : kSplitNames) {
            const std::string prefix = name_ + "_" + split + "_";
            const bool ours = f.size() == prefix.size() + 10 && f.rfind(prefix, 0) == 0 &&
                              f.compare(f.size() - 4, 4, ".bin") == 0 &&
                              f.find_first_not_of("0123456789", prefix.size()) == f.size() - 4;
            std::error_code er;
            if (ours && fresh.count(f) == 0 && fs::remove(e.path(), er)) ++stale_removed_;
        }
    }
}

void ShardWriter::finish() {
    for (int split : {kTrain, kVal}) {
        if (f_[split] != nullptr) close_shard(split);
    }
    std::set<std::string> fresh;
    for (const auto& t : temps_) fresh.insert(fs::path(t.second).filename().string());
    while (!temps_.empty()) {
        const auto& t = temps_.back();
        if (std::rename(t.first.c_str(), t.second.c_str()) != 0) {
            fail("cannot rename " + t.first + " to " + t.second + ": " + std::strerror(errno));
        }
        temps_.pop_back();
    }
    remove_stale_shards(fresh);
}

void ShardWriter::fail(const std::string& sentence) {
    for (std::FILE*& f : f_) {
        if (f != nullptr) std::fclose(f);
        f = nullptr;
    }
    for (const auto& t : temps_) std::remove(t.first.c_str());
    if (isatty(2)) std::fputs("\r\033[K", stderr);  // clear a half-drawn progress bar
    std::fprintf(stderr, "error: %s\n", sentence.c_str());
    std::exit(1);
}

}  // namespace prep
