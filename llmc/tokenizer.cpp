// tokenizer.cpp: GPT-2 byte-level BPE (see tokenizer.h for the rules it implements).
#include "tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <queue>

#include "check.h"
#include "model_file.h"
#include "unicode_tables.h"

namespace llmc {
namespace {

constexpr uint64_t kHashMul = 0x9E3779B97F4A7C15ull;
constexpr int kNoMerge = INT_MAX;
// Pieces up to this many bytes merge in stack arrays with a linear scan per merge (what almost
// every piece needs); longer ones use a heap so a long run stays O(n log n).
constexpr size_t kShortPiece = 64;
constexpr int kAlphabetSize = 324;  // GPT-2's byte alphabet uses code points below 256 + 68
const char kEndOfText[] = "<|endoftext|>";

// Reads in chunks until EOF rather than trusting a size from fseek/ftell: on a folder that
// "size" is 2^63 - 1, and the read itself is what fails (EISDIR).
bool read_file(const std::string& path, std::string* out) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return false;
    out->clear();
    char buf[1 << 16];
    for (size_t got; (got = std::fread(buf, 1, sizeof(buf), f)) > 0;) out->append(buf, got);
    const bool ok = std::ferror(f) == 0;
    std::fclose(f);
    return ok;
}

// GPT-2's byte alphabet: the printable Latin-1 bytes stand for themselves and the other 68 bytes
// for U+0100.. in byte order, so every byte is a visible character in encoder.json / vocab.bpe.
void byte_alphabet(int cp_to_byte[kAlphabetSize]) {
    int next = 256;
    std::fill(cp_to_byte, cp_to_byte + kAlphabetSize, -1);
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        cp_to_byte[printable ? b : next++] = b;
    }
}

// Length of the well-formed UTF-8 sequence at p (1..4, *cp set), or 0 when it is ill-formed;
// then *bad is the length of its maximal subpart (the bytes one U+FFFD replaces), at least 1.
int utf8_sequence(const uint8_t* p, size_t n, uint32_t* cp, int* bad) {
    const uint8_t b = p[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    int need = 0;
    uint32_t value = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the next byte (Unicode's Table 3-7)
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1, value = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2, value = b & 0x0F;
        lo = b == 0xE0 ? 0xA0 : 0x80;  // no overlongs
        hi = b == 0xED ? 0x9F : 0xBF;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3, value = b & 0x07;
        lo = b == 0xF0 ? 0x90 : 0x80;  // no overlongs
        hi = b == 0xF4 ? 0x8F : 0xBF;  // nothing above U+10FFFF
    } else {
        *bad = 1;
        return 0;
    }
    for (int k = 1; k <= need; ++k) {
        if ((size_t)k >= n || p[k] < lo || p[k] > hi) {
            *bad = k;
            return 0;
        }
        value = (value << 6) | (p[k] & 0x3F);
        lo = 0x80, hi = 0xBF;
    }
    *cp = value;
    return need + 1;
}

// Offset of the first ill-formed byte, or n.
size_t first_invalid_utf8(const uint8_t* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint64_t word;
        if (i + 8 <= n && (std::memcpy(&word, s + i, 8), (word & 0x8080808080808080ull) == 0)) {
            i += 8;  // eight ASCII bytes
            continue;
        }
        uint32_t cp;
        int bad;
        const int len = utf8_sequence(s + i, n - i, &cp, &bad);
        if (len == 0) return i;
        i += len;
    }
    return n;
}

// The text with each maximal ill-formed subpart from `from` on replaced by U+FFFD.
std::string replace_invalid_utf8(const uint8_t* s, size_t n, size_t from) {
    std::string out(reinterpret_cast<const char*>(s), from);
    size_t i = from;
    while (i < n) {
        uint32_t cp;
        int bad;
        const int len = utf8_sequence(s + i, n - i, &cp, &bad);
        if (len > 0) {
            out.append(reinterpret_cast<const char*>(s + i), len);
            i += len;
        } else {
            out.append("\xEF\xBF\xBD");
            i += bad;
        }
    }
    return out;
}

void append_utf8(uint32_t cp, std::string* out) {
    const int extra = cp < 0x80 ? 0 : cp < 0x800 ? 1 : cp < 0x10000 ? 2 : 3;  // continuation bytes
    const uint32_t lead[] = {0x00, 0xC0, 0xE0, 0xF0};
    out->push_back((char)(lead[extra] | (cp >> (6 * extra))));
    for (int k = extra - 1; k >= 0; --k) out->push_back((char)(0x80 | ((cp >> (6 * k)) & 0x3F)));
}

// A token written in the byte alphabet (UTF-8 text) back to its bytes; false on a character
// outside the alphabet.
bool alphabet_to_bytes(std::string_view text, const int cp_to_byte[kAlphabetSize],
                       std::string* out) {
    out->clear();
    const uint8_t* s = reinterpret_cast<const uint8_t*>(text.data());
    for (size_t i = 0; i < text.size();) {
        uint32_t cp;
        int bad;
        const int len = utf8_sequence(s + i, text.size() - i, &cp, &bad);
        if (len == 0 || cp >= (uint32_t)kAlphabetSize || cp_to_byte[cp] < 0) return false;
        out->push_back((char)cp_to_byte[cp]);
        i += len;
    }
    return true;
}

// encoder.json: one flat JSON object of token (in the byte alphabet) -> id.
class JsonObjectReader {
  public:
    explicit JsonObjectReader(std::string_view s) : s_(s) {}
    bool at(char c) {  // after white space
        while (i_ < s_.size() && std::isspace((unsigned char)s_[i_])) ++i_;
        return i_ < s_.size() && s_[i_] == c;
    }
    bool take(char c) { return at(c) ? (++i_, true) : false; }
    bool done() { return (at('\0'), i_ == s_.size()); }
    bool string(std::string* out) {
        if (!take('"')) return false;
        out->clear();
        while (i_ < s_.size() && s_[i_] != '"') {
            if (s_[i_] != '\\') {
                out->push_back(s_[i_++]);
            } else if (!escape(out)) {
                return false;
            }
        }
        return take('"');
    }
    bool integer(long* out) {
        at('0');  // skips white space
        size_t digits = 0;
        // Digits past the ninth are skipped, not accumulated (a long id would overflow).
        for (*out = 0; i_ < s_.size() && std::isdigit((unsigned char)s_[i_]); ++i_, ++digits)
            if (digits < 9) *out = *out * 10 + (s_[i_] - '0');
        return digits > 0 && digits < 10;
    }

  private:
    bool escape(std::string* out) {  // at a backslash
        static const char kFrom[] = "\"\\/bfnrt", kTo[] = "\"\\/\b\f\n\r\t";
        const char e = ++i_ < s_.size() ? s_[i_++] : '\0';
        const char* simple = e == '\0' ? nullptr : std::strchr(kFrom, e);
        if (simple != nullptr) return out->push_back(kTo[simple - kFrom]), true;
        if (e != 'u') return false;
        uint32_t cp, low;
        if (!hex4(&cp)) return false;
        if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            const bool escaped_u = s_.compare(i_, 2, "\\u") == 0;
            if (!escaped_u || (i_ += 2, !hex4(&low)) || low < 0xDC00 || low > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        append_utf8(cp, out);
        return true;
    }
    bool hex4(uint32_t* out) {
        *out = 0;
        for (int k = 0; k < 4; ++k, ++i_) {
            if (i_ >= s_.size() || !std::isxdigit((unsigned char)s_[i_])) return false;
            const int c = std::tolower((unsigned char)s_[i_]);
            *out = *out * 16 + (uint32_t)(c <= '9' ? c - '0' : c - 'a' + 10);
        }
        return true;
    }
    std::string_view s_;
    size_t i_ = 0;
};

// Reads encoder.json (at json_path, for messages) into tokens[id] (bytes). Ids must be 0..n-1,
// each once.
bool parse_encoder_json(const std::string& json, const std::string& json_path,
                        const int cp_to_byte[kAlphabetSize], std::vector<std::string>* tokens,
                        std::string* why) {
    JsonObjectReader r(json);
    std::vector<std::pair<long, std::string>> entries;
    std::string key, bytes;
    long id;
    bool ok = r.take('{');
    while (ok && !r.at('}')) {
        ok = r.string(&key) && r.take(':') && r.integer(&id) && (r.at('}') || r.take(','));
        if (ok && !alphabet_to_bytes(key, cp_to_byte, &bytes)) {
            *why = json_path + " has a token outside GPT-2's byte alphabet";
            return false;
        }
        if (ok) entries.emplace_back(id, bytes);
    }
    if (!ok || !r.take('}') || !r.done()) {
        *why = json_path + " is not a JSON object of token -> id";
        return false;
    }
    tokens->assign(entries.size(), std::string());
    std::vector<bool> seen(entries.size(), false);
    for (auto& [tid, tbytes] : entries) {
        if (tid < 0 || (size_t)tid >= entries.size() || seen[tid]) {
            *why = json_path + "'s ids are not 0..N-1, each once";
            return false;
        }
        seen[tid] = true;
        (*tokens)[tid] = std::move(tbytes);
    }
    return true;
}

// tiktoken's consistency rule: the 256 byte tokens are ids 0..255 in the order of their alphabet
// characters, merge k of vocab.bpe makes token 256 + k, and <|endoftext|> is last.
bool check_merges(const std::string& bpe, const std::string& json_path, const std::string& bpe_path,
                  const std::vector<std::string>& tokens, const int cp_to_byte[kAlphabetSize],
                  std::string* why) {
    int rank = 0;
    for (uint32_t cp = 0; cp < (uint32_t)kAlphabetSize; ++cp) {
        if (cp_to_byte[cp] < 0) continue;
        if (tokens.size() <= 256 || tokens[rank] != std::string(1, (char)cp_to_byte[cp])) {
            *why = json_path + "'s first 256 ids are not GPT-2's byte tokens in order";
            return false;
        }
        ++rank;
    }
    size_t pos = bpe.find('\n');  // the first line is "#version: ..."
    if (bpe.compare(0, 8, "#version") != 0 || pos == std::string::npos) {
        *why = bpe_path + " does not start with a #version line";
        return false;
    }
    std::string left, right;
    while (++pos < bpe.size()) {
        size_t eol = bpe.find('\n', pos);
        if (eol == std::string::npos) eol = bpe.size();
        std::string_view line(bpe.data() + pos, eol - pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        const size_t space = line.find(' ');
        if (!line.empty()) {
            if (space == std::string_view::npos ||
                !alphabet_to_bytes(line.substr(0, space), cp_to_byte, &left) ||
                !alphabet_to_bytes(line.substr(space + 1), cp_to_byte, &right) ||
                (size_t)rank + 1 >= tokens.size() || tokens[rank] != left + right) {
                *why = bpe_path + "'s merge " + std::to_string(rank - 255) +
                       " does not make the token " + json_path + " has at id " +
                       std::to_string(rank);
                return false;
            }
            ++rank;
        }
        pos = eol;
    }
    if ((size_t)rank + 1 != tokens.size() || tokens[rank] != kEndOfText) {
        *why = json_path + " should end with <|endoftext|> right after the merged tokens";
        return false;
    }
    return true;
}

uint64_t load64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

uint32_t load32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Hash of n bytes. Loads may overlap (the length is hashed in, so equal strings still hash
// equal) to avoid a byte loop for the short pieces that dominate text.
uint64_t hash_bytes(const uint8_t* p, size_t n) {
    uint64_t h = kHashMul * (n + 1);
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8) h = ((h ^ load64(p + i)) * kHashMul) ^ (h >> 29);
        h ^= load64(p + n - 8);
    } else if (n >= 4) {
        h ^= (uint64_t)load32(p) << 32 | load32(p + n - 4);
    } else if (n > 0) {
        h ^= (uint64_t)p[0] << 16 | (uint64_t)p[n / 2] << 8 | p[n - 1];
    }
    h *= kHashMul;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    return h ^ (h >> 32);
}

// a[0, n) == b[0, n), with the same overlapping loads (memcmp is a call, and these are short).
bool same_bytes(const uint8_t* a, const uint8_t* b, size_t n) {
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8)
            if (load64(a + i) != load64(b + i)) return false;
        return load64(a + n - 8) == load64(b + n - 8);
    }
    if (n >= 4) return load32(a) == load32(b) && load32(a + n - 4) == load32(b + n - 4);
    for (size_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return false;
    return true;
}

uint64_t hash_pair_key(uint64_t key) {
    const uint64_t h = key * kHashMul;
    return h ^ (h >> 31);
}

size_t table_size_for(size_t n) {  // a power of two at most half full
    size_t size = 16;
    while (size < 2 * n) size *= 2;
    return size;
}

uint8_t astral_class(uint32_t cp) {
    const unicode::ClassRange* end = unicode::kClassRanges + unicode::kNumClassRanges;
    const unicode::ClassRange* r = std::upper_bound(
        unicode::kClassRanges, end, cp,
        [](uint32_t c, const unicode::ClassRange& range) { return c < range.first; });
    if (r == unicode::kClassRanges) return unicode::kOther;
    --r;
    return cp <= r->last ? r->cls : unicode::kOther;
}

}  // namespace

bool Tokenizer::load(const std::string& dir, std::string* why) {
    *this = Tokenizer();
    std::string json, bpe;
    const std::string json_path = dir + "/encoder.json", bpe_path = dir + "/vocab.bpe";
    if (!read_file(json_path, &json) || !read_file(bpe_path, &bpe)) {
        *why = "cannot read " + json_path + " and " + bpe_path +
               "; run scripts/data/tokenizer_files.sh " + dir + " to fetch them";
        return false;
    }
    int cp_to_byte[kAlphabetSize];
    byte_alphabet(cp_to_byte);
    std::vector<std::string> tokens;
    std::string detail;
    if (!parse_encoder_json(json, json_path, cp_to_byte, &tokens, &detail) ||
        !check_merges(bpe, json_path, bpe_path, tokens, cp_to_byte, &detail)) {
        *why = detail + "; these are not GPT-2's tokenizer files";
        return false;
    }
    if (tokens.size() > 65535) {  // the merge table packs a pair of ids into 32 bits
        *why = "the tokenizer in " + json_path + " has more than 65535 tokens";
        return false;
    }
    token_offsets_.assign(1, 0);
    for (const std::string& t : tokens) {
        token_bytes_ += t;
        token_offsets_.push_back((uint32_t)token_bytes_.size());
    }
    eot_ = (int)tokens.size() - 1;
    build_tables();
    return true;
}

void Tokenizer::build_tables() {
    const int vocab = vocab_size();
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(token_bytes_.data());
    token_table_.assign(table_size_for(vocab), 0);
    const size_t token_mask = token_table_.size() - 1;
    for (int id = 0; id < vocab; ++id) {
        if (id == eot_) continue;  // special: never produced from text
        const size_t len = token_offsets_[id + 1] - token_offsets_[id];
        const uint64_t h = hash_bytes(bytes + token_offsets_[id], len);
        size_t slot = h & token_mask;
        while (token_table_[slot] != 0) slot = (slot + 1) & token_mask;
        token_table_[slot] = (h >> 32 << 32) | (uint64_t)(id + 1);
        max_token_len_ = std::max(max_token_len_, len);
        if (len == 1) byte_token_[bytes[token_offsets_[id]]] = id;
    }
    // Every split of a token into two tokens is a merge, as tiktoken ranks concatenations.
    std::vector<uint64_t> merges;  // (key << 32) | (id + 1)
    for (int id = 0; id < vocab; ++id) {
        const uint8_t* t = bytes + token_offsets_[id];
        const size_t len = token_offsets_[id + 1] - token_offsets_[id];
        for (size_t k = 1; id != eot_ && k < len; ++k) {
            const int left = find_token(t, k), right = find_token(t + k, len - k);
            if (left >= 0 && right >= 0)
                merges.push_back(((uint64_t)left * vocab + right) << 32 | (uint64_t)(id + 1));
        }
    }
    byte_pair_token_.assign(256 * 256, -1);
    for (uint64_t m : merges) {
        const uint32_t key = (uint32_t)(m >> 32), left = key / vocab, right = key % vocab;
        if (left < 256 && right < 256) byte_pair_token_[left << 8 | right] = (int)(uint32_t)m - 1;
    }
    merge_table_.assign(table_size_for(merges.size()), 0);
    const size_t merge_mask = merge_table_.size() - 1;
    for (uint64_t m : merges) {
        size_t slot = hash_pair_key(m >> 32) & merge_mask;
        while (merge_table_[slot] != 0) slot = (slot + 1) & merge_mask;
        merge_table_[slot] = m;
    }
    bmp_class_.assign(0x10000, unicode::kOther);
    for (const unicode::ClassRange& r : unicode::kClassRanges)
        for (uint32_t cp = r.first; cp <= r.last && cp < 0x10000; ++cp) bmp_class_[cp] = r.cls;
}

int Tokenizer::find_token(const uint8_t* p, size_t n) const {
    const uint64_t h = hash_bytes(p, n);
    const size_t mask = token_table_.size() - 1;
    for (size_t slot = h & mask;; slot = (slot + 1) & mask) {
        const uint64_t e = token_table_[slot];
        if (e == 0) return -1;
        if ((e >> 32) != (h >> 32)) continue;
        const int id = (int)(uint32_t)e - 1;
        const uint32_t off = token_offsets_[id];
        const uint8_t* token = reinterpret_cast<const uint8_t*>(token_bytes_.data()) + off;
        if (token_offsets_[id + 1] - off == n && same_bytes(token, p, n)) return id;
    }
}

int Tokenizer::merged_token(int left, int right) const {
    if ((left | right) < 256) return byte_pair_token_[left << 8 | right];
    const uint64_t key = (uint64_t)left * (uint64_t)vocab_size() + (uint64_t)right;
    const size_t mask = merge_table_.size() - 1;
    for (size_t slot = hash_pair_key(key) & mask;; slot = (slot + 1) & mask) {
        const uint64_t e = merge_table_[slot];
        if (e == 0) return -1;
        if ((e >> 32) == key) return (int)(uint32_t)e - 1;
    }
}

// --- pre-tokenization ----------------------------------------------------------------------
// The text is valid UTF-8 here (encode() replaced anything else), so sequences decode unchecked.

uint8_t Tokenizer::char_class(const uint8_t* p, int* len) const {
    const uint32_t b = p[0];
    if (b < 0x80) {
        *len = 1;
        return bmp_class_[b];
    }
    if (b < 0xE0) {
        *len = 2;
        return bmp_class_[((b & 0x1F) << 6) | (p[1] & 0x3Fu)];
    }
    if (b < 0xF0) {
        *len = 3;
        return bmp_class_[((b & 0x0F) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu)];
    }
    *len = 4;
    return astral_class(((b & 0x07) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
                        (p[3] & 0x3Fu));
}

size_t Tokenizer::run_end(const uint8_t* s, size_t n, size_t i, uint8_t cls) const {
    int len;
    while (i < n && char_class(s + i, &len) == cls) i += len;
    return i;
}

// End of the piece that starts at i: the first alternative of the pattern that matches there.
size_t Tokenizer::piece_end(const uint8_t* s, size_t n, size_t i) const {
    const uint8_t c = s[i];
    if (c == '\'' && i + 1 < n) {  // '(?:[sdmt]|ll|ve|re)
        const uint8_t d = s[i + 1], e = i + 2 < n ? s[i + 2] : 0;
        if (d == 's' || d == 'd' || d == 'm' || d == 't') return i + 2;
        if ((d == 'l' && e == 'l') || (d == 'v' && e == 'e') || (d == 'r' && e == 'e'))
            return i + 3;
    }
    int len;
    const uint8_t cls = char_class(s + i, &len);
    if (c == ' ' && i + 1 < n) {  // ' ?' before a letter, number or other run
        int next_len;
        const uint8_t next = char_class(s + i + 1, &next_len);
        if (next != unicode::kSpace) return run_end(s, n, i + 1 + next_len, next);
    }
    if (cls != unicode::kSpace) return run_end(s, n, i + len, cls);
    // \s+(?!\S): the whole run if it ends the text, else all but its last character (which
    // then leads the next piece); a single one followed by a non-space falls to \s+.
    size_t end = i + len, last = i;
    while (end < n && char_class(s + end, &len) == unicode::kSpace) last = end, end += len;
    return (end == n || last == i) ? end : last;
}

// --- BPE ------------------------------------------------------------------------------------

void Tokenizer::encode_piece(const uint8_t* p, size_t n, std::vector<int>* out) const {
    if (n == 1) {
        out->push_back(byte_token_[p[0]]);
        return;
    }
    if (n <= max_token_len_) {  // a piece that is a token is that token (tiktoken's shortcut)
        const int id = find_token(p, n);
        if (id >= 0) {
            out->push_back(id);
            return;
        }
    }
    if (n <= kShortPiece) {
        merge_short_piece(p, n, out);
    } else {
        merge_long_piece(p, n, out);
    }
}

// rank[i] is the merge of parts i and i+1 (its token id = its rank), kNoMerge if none.
void Tokenizer::merge_short_piece(const uint8_t* p, size_t n, std::vector<int>* out) const {
    int part[kShortPiece], rank[kShortPiece];
    int m = (int)n;
    for (int i = 0; i < m; ++i) part[i] = byte_token_[p[i]];
    auto rank_of = [this](int left, int right) {
        const int t = merged_token(left, right);
        return t < 0 ? kNoMerge : t;
    };
    for (int i = 0; i + 1 < m; ++i) rank[i] = rank_of(part[i], part[i + 1]);
    while (m > 1) {
        int best = kNoMerge, at = -1;
        for (int i = 0; i + 1 < m; ++i) {
            if (rank[i] < best) best = rank[i], at = i;  // strict: the leftmost on ties
        }
        if (at < 0) break;
        part[at] = best;
        for (int i = at + 1; i + 1 < m; ++i) part[i] = part[i + 1];
        for (int i = at + 1; i + 2 < m; ++i) rank[i] = rank[i + 1];
        --m;
        rank[at] = at + 1 < m ? rank_of(part[at], part[at + 1]) : kNoMerge;
        if (at > 0) rank[at - 1] = rank_of(part[at - 1], part[at]);
    }
    out->insert(out->end(), part, part + m);
}

// The same merges in the same order for long pieces: parts form a linked list keyed by their
// first byte, and candidate merges sit in a min-heap keyed (rank, position). A popped candidate
// is current if the part at its position still merges with its neighbour at that rank (equal
// rank means equal bytes from there, so the same pair); stale ones are skipped.
void Tokenizer::merge_long_piece(const uint8_t* p, size_t n, std::vector<int>* out) const {
    LLMC_CHECK(n < (1u << 31), "a piece of %zu bytes is too long to encode (the limit is 2 GiB)",
               n);
    std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> heap;
    const int len = (int)n;
    std::vector<int> part(len), next(len), prev(len);
    std::vector<uint8_t> alive(len, 1);
    for (int i = 0; i < len; ++i) part[i] = byte_token_[p[i]], next[i] = i + 1, prev[i] = i - 1;
    auto rank_at = [&](int left) {  // merged token of the part at left and the next, or -1
        return next[left] < len ? merged_token(part[left], part[next[left]]) : -1;
    };
    auto consider = [&](int left) {
        const int t = rank_at(left);
        if (t >= 0) heap.push((uint64_t)t << 32 | (uint32_t)left);
    };
    for (int i = 0; i + 1 < len; ++i) consider(i);
    while (!heap.empty()) {
        const int rank = (int)(heap.top() >> 32), left = (int)(uint32_t)heap.top();
        heap.pop();
        if (!alive[left] || rank_at(left) != rank) continue;
        const int right = next[left];
        part[left] = rank;
        alive[right] = 0;
        next[left] = next[right];
        if (next[left] < len) prev[next[left]] = left;
        if (prev[left] >= 0) consider(prev[left]);
        consider(left);
    }
    for (int i = 0; i < len; i = next[i]) out->push_back(part[i]);
}

void Tokenizer::encode_valid(const uint8_t* s, size_t n, std::vector<int>* out) const {
    for (size_t i = 0; i < n;) {
        const size_t end = piece_end(s, n, i);
        encode_piece(s + i, end - i, out);
        i = end;
    }
}

// --- public ---------------------------------------------------------------------------------

void Tokenizer::encode(std::string_view text, std::vector<int>* out) const {
    LLMC_CHECK(eot_ >= 0, "Tokenizer::encode called before a successful load");
    const uint8_t* s = reinterpret_cast<const uint8_t*>(text.data());
    const size_t bad = first_invalid_utf8(s, text.size());
    if (bad == text.size()) {
        encode_valid(s, text.size(), out);
        return;
    }
    const std::string fixed = replace_invalid_utf8(s, text.size(), bad);
    encode_valid(reinterpret_cast<const uint8_t*>(fixed.data()), fixed.size(), out);
}

std::string Tokenizer::decode(const int* ids, size_t n) const {
    std::string out;
    for (size_t i = 0; i < n; ++i) {
        LLMC_CHECK(ids[i] >= 0 && ids[i] < vocab_size(),
                   "token id %d is outside the tokenizer's vocabulary (0..%d)", ids[i],
                   vocab_size() - 1);
        out.append(token_bytes_, token_offsets_[ids[i]],
                   token_offsets_[ids[i] + 1] - token_offsets_[ids[i]]);
    }
    return out;
}

void Tokenizer::write_tokenizer_file(const std::string& path) const {
    std::string why;
    LLMC_CHECK(write_tokenizer_file(path, &why), "%s", why.c_str());
}

bool Tokenizer::write_tokenizer_file(const std::string& path, std::string* why) const {
    LLMC_CHECK(eot_ >= 0, "write_tokenizer_file called before a successful load");
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) {
        *why = "cannot create the tokenizer file " + path + ": " + std::strerror(errno);
        return false;
    }
    int32_t header[256] = {};
    header[0] = kTokenizerMagic;
    header[1] = 2;
    header[2] = vocab_size();
    header[3] = eot_;
    bool ok = std::fwrite(header, sizeof(header), 1, f) == 1;
    for (int id = 0; id < vocab_size() && ok; ++id) {
        const uint32_t len = token_offsets_[id + 1] - token_offsets_[id];
        LLMC_CHECK(len >= 1 && len <= 255, "token %d has %u bytes; the file format allows 1..255",
                   id, len);
        const uint8_t len8 = (uint8_t)len;
        ok = std::fwrite(&len8, 1, 1, f) == 1 &&
             std::fwrite(token_bytes_.data() + token_offsets_[id], 1, len, f) == len;
    }
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) *why = "writing the tokenizer file " + path + " failed (disk full?)";
    return ok;
}

}  // namespace llmc
