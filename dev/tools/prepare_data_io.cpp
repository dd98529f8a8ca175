// prepare_data_io.cpp: inputs and the check that they are text, documents and segments, split
// hash. See prepare_data_io.h for the contracts and prepare_data.cpp for the rules they implement.
#include "prepare_data_io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "checkpoint.h"
#include "dataloader.h"
#include "model_file.h"
#include "rng.h"

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

// The first kHeadBytes of a file (fewer when it is shorter). False with *why if it cannot be read.
bool read_head(const std::string& path, std::string* head, std::string* why) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
        *why = "cannot read " + path + ": " + std::strerror(errno);
        return false;
    }
    head->resize(kHeadBytes);
    head->resize(std::fread(&(*head)[0], 1, kHeadBytes, f));
    const bool bad = std::ferror(f) != 0;
    std::fclose(f);
    if (bad) *why = "cannot read " + path + ": " + std::strerror(errno);
    return !bad;
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
    std::string head;
    // data.jsonl.gz: the command that a refusal suggests reads it as JSONL.
    const bool jsonl_hint = f.jsonl || is_jsonl_name(p.stem().string());
    if (!read_head(f.path, &head, why) ||
        !check_text_head(f.path, head, jsonl_hint, why, &f.invalid_utf8)) {
        return false;
    }
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
    bool have_stdin = false;
    for (const std::string& in : inputs) {
        if (in == kStdin) {
            if (have_stdin) {
                *why = "- (standard input) is given twice; it can be read once";
                return false;
            }
            have_stdin = true;
            files->push_back(
                InputFile{kStdin, format == InputFormat::kJsonl, format == InputFormat::kJson, 0});
            continue;
        }
        std::error_code ec;
        const bool dir = fs::is_directory(in, ec);
        if (dir ? !add_folder(in, format, out_dir, files, why)
                : !add_file(in, format, files, why)) {
            return false;
        }
    }
    return true;
}

// ---- is it text? --------------------------------------------------------------------------

namespace {

// Bytes that belong to ill-formed UTF-8 sequences (each maximal subpart counted whole). A
// sequence cut short by the end of s is not counted: s may be the head of a longer file.
size_t invalid_utf8_bytes(const unsigned char* s, size_t n) {
    size_t bad = 0, i = 0;
    while (i < n) {
        const unsigned char c = s[i];
        int need = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the first continuation byte
        if (c < 0x80) {
            ++i;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;  // overlong
            if (c == 0xED) hi = 0x9F;  // surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;  // overlong
            if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
        } else {
            ++bad, ++i;
            continue;
        }
        size_t k = 1;
        while (k <= (size_t)need && i + k < n) {
            const unsigned char b = s[i + k];
            if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
            ++k;
        }
        if (k == (size_t)need + 1) {
            i += k;
        } else if (i + k == n) {
            return bad;  // cut by the end of the head
        } else {
            bad += k;
            i += k;
        }
    }
    return bad;
}

constexpr const char* kStdinName = "standard input";  // in sentences

bool starts_with(std::string_view s, std::string_view prefix) {
    return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

bool check_text_head(const std::string& name, std::string_view head, bool jsonl, std::string* why,
                     size_t* invalid) {
    const std::string pipe_to = std::string(" | prepare_data -o OUT_DIR") +
                                (jsonl ? " --format jsonl" : "") + " - (- reads standard input)";
    struct Compressed {
        std::string_view magic;
        const char* format;
        const char* command;
    };
    static const Compressed kCompressed[] = {
        {std::string_view("\x1f\x8b", 2), "gzip", "gunzip -c"},
        {std::string_view("BZh", 3), "bzip2", "bzip2 -dc"},
        {std::string_view("\xfd\x37\x7a\x58\x5a\x00", 6), "xz", "xz -dc"},
        {std::string_view("\x28\xb5\x2f\xfd", 4), "zstd", "zstd -dc"},
        {std::string_view("PK\x03\x04", 4), "zip", "unzip -p"},
    };
    for (const Compressed& c : kCompressed) {
        if (!starts_with(head, c.magic)) continue;
        *why = name + " is " + c.format + "-compressed, not text; decompress it on the way in: " +
               (name == kStdinName ? std::string("... | ") + c.command + pipe_to
                                   : c.command + (" " + name) + pipe_to);
        return false;
    }
    struct Binary {
        int32_t magic;
        const char* what;
    };
    static const Binary kBinary[] = {
        {llmc::kShardMagic, "a token shard, already tokenized (train on it with -i or -j)"},
        {llmc::kTokenizerMagic, "a tokenizer file"},
        {llmc::kModelMagic, "a model file"},
        {llmc::kDebugStateMagic, "a debug state file"},
    };
    int32_t magic = 0;
    if (head.size() >= sizeof(magic)) std::memcpy(&magic, head.data(), sizeof(magic));
    const char* binary = nullptr;
    for (const Binary& b : kBinary) {
        if (magic == b.magic) binary = b.what;
    }
    if (head.size() >= 8 && std::memcmp(head.data(), &llmc::kStateMagic, 8) == 0) {
        binary = "a training checkpoint";
    }
    if (binary != nullptr) {
        *why = name + " is " + binary + ", not text; give prepare_data text files, JSONL files " +
               "or folders of them";
        return false;
    }
    if (starts_with(head, "\xff\xfe") || starts_with(head, "\xfe\xff")) {
        *why = name + " is UTF-16 text; convert it to UTF-8 first: iconv -f UTF-16 -t UTF-8 " +
               name + " > " + name + ".utf8";
        return false;
    }
    const size_t nul = head.find('\0');
    if (nul != std::string_view::npos) {
        *why = name + " holds a NUL byte (at byte " + std::to_string(nul) + "), so it is " +
               "binary, not text; give prepare_data text files, JSONL files or folders of them";
        return false;
    }
    const size_t bad =
        invalid_utf8_bytes(reinterpret_cast<const unsigned char*>(head.data()), head.size());
    if (invalid != nullptr) *invalid = bad;
    // Western text in a legacy 8-bit encoding has a few per cent of such bytes (each accented
    // letter), up to a fifth in the densest; past a quarter it is binary, or text in a Cyrillic,
    // Greek or CJK encoding that would come out as U+FFFD soup.
    if (bad * 4 > head.size()) {
        *why = name + " is not UTF-8 text: " + std::to_string(bad) + " of its first " +
               std::to_string(head.size()) + " bytes are not valid UTF-8; if it is text in " +
               "another encoding, convert it first, e.g. iconv -f LATIN1 -t UTF-8 " + name + " > " +
               name + ".utf8";
        return false;
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

namespace {

std::string display_name(const InputFile& in) {
    return in.path == kStdin ? std::string(kStdinName) : in.path;
}

}  // namespace

bool CorpusReader::open_file(std::string* why) {
    const InputFile& in = files_[file_];
    const bool from_stdin = in.path == kStdin;
    std::FILE* f = from_stdin ? stdin : std::fopen(in.path.c_str(), "rb");
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
    if (!from_stdin) std::fclose(f);
    bytes_read_ += text_.size();
    if (bad) {
        *why = "cannot read " + display_name(in) + ": " + std::strerror(errno);
        return false;
    }
    // A file's head was checked by expand_inputs; standard input's is checked now.
    const std::string_view text(text_);
    if (from_stdin)
        return check_text_head(display_name(in), text.substr(0, kHeadBytes), false, why);
    const size_t nul = text.find('\0', std::min(text.size(), kHeadBytes));
    if (nul != std::string_view::npos) {
        *why = in.path + " holds a NUL byte (at byte " + std::to_string(nul) + "), so it is " +
               "binary, not text; give prepare_data text files, JSONL files or folders of them";
        return false;
    }
    return true;
}

void CorpusReader::close_file() {
    if (f_ != nullptr && f_ != stdin) std::fclose(f_);
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
                *why = "cannot read " + display_name(files_[file_]) + ": " + std::strerror(errno);
            }
            return false;
        }
        ++line_no_;
        bytes_read_ += (uint64_t)n;
        std::string_view line(line_, (size_t)n);
        // Standard input's first line stands in for the head that expand_inputs checks of a file.
        if (line_no_ == 1 && files_[file_].path == kStdin &&
            !check_text_head(display_name(files_[file_]), line.substr(0, kHeadBytes), true, why)) {
            return false;
        }
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
        if (line_no_ == 1 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
        if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) {
            pending_bytes_ += (uint64_t)n;
            continue;
        }
        if (!json_text_field(line, &doc->text, why, field_)) {
            *why = display_name(files_[file_]) + " line " + std::to_string(line_no_) + ": " + *why;
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

}  // namespace prep
