// test_tokenizer.cpp: host test of llmc/tokenizer against tiktoken's "gpt2" encoding.
//
//   build/host/dev/test/test_tokenizer [--dir DIR] [--work DIR] [--corpus-mb N] [--extra FILE]...
//
// --dir: GPT-2's encoder.json + vocab.bpe (default build/tokenizer; fetched there by
// scripts/data/tokenizer_files.sh when missing). --work: scratch folder (default
// build/testdata/tokenizer). --extra: a text file to add to the corpus (any bytes).
// Run from the repository root (run_tests.sh does). Checks, in order:
//   - load() refuses missing and inconsistent files with one sentence;
//   - vocab size, EOT, and ids of a few strings written down from tiktoken (no node needed);
//   - parity: our ids equal the npm tiktoken's (scripts/test/tokenizer_parity.js, node) on targeted
//     edge cases and on a deterministic synthetic corpus of --corpus-mb MB (default 12): prose
//     with contractions in all cases, numbers, code, whitespace runs of every White_Space
//     character and near-misses, many scripts, combining marks, emoji sequences, random code
//     points, ill-formed UTF-8, long single pieces (the heap merge path), and every code point
//     of planes 0-3 and 14 (sampled elsewhere) followed by "'s", which tells letters and numbers
//     from the rest, so the Unicode tables are checked one by one;
//   - decode(encode(x)) == x for valid UTF-8, and encoding is idempotent through decode for the
//     rest; the tokenizer file round trip; two threads encoding at once give the same ids.
// Prints our single-thread MB/s on the corpus (information). Ends with
// "test_tokenizer: N passed, M failed"; exits non-zero on any failure.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "model_file.h"
#include "rng.h"
#include "tokenizer.h"

namespace fs = std::filesystem;
using llmc::Tokenizer;

namespace {

struct Tally {
    int passed = 0, failed = 0;
    bool check(bool ok, const std::string& what) {
        ok ? ++passed : ++failed;
        if (!ok) std::printf("FAIL %s\n", what.c_str());
        return ok;
    }
};

std::string read_all(const fs::path& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void write_all(const fs::path& path, const std::string& data) {
    std::ofstream f(path, std::ios::binary);
    f.write(data.data(), (std::streamsize)data.size());
}

std::string utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += (char)cp;
    } else if (cp < 0x800) {
        s += {(char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F))};
    } else if (cp < 0x10000) {
        s += {(char)(0xE0 | (cp >> 12)), (char)(0x80 | ((cp >> 6) & 0x3F)),
              (char)(0x80 | (cp & 0x3F))};
    } else {
        s += {(char)(0xF0 | (cp >> 18)), (char)(0x80 | ((cp >> 12) & 0x3F)),
              (char)(0x80 | ((cp >> 6) & 0x3F)), (char)(0x80 | (cp & 0x3F))};
    }
    return s;
}

// Printable form of bytes for failure messages.
std::string escaped(const std::string& s, size_t max_len = 120) {
    std::string out;
    for (size_t i = 0; i < s.size() && i < max_len; ++i) {
        const unsigned char c = (unsigned char)s[i];
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\x%02x", c);
        out += (c >= 0x20 && c < 0x7F && c != '\\') ? std::string(1, (char)c) : std::string(buf);
    }
    return out + (s.size() > max_len ? "..." : "");
}

bool valid_utf8(const std::string& s) {  // strict: what the decoders keep unchanged
    for (size_t i = 0; i < s.size();) {
        const unsigned char b = (unsigned char)s[i];
        int need = b < 0x80                   ? 0
                   : (b >= 0xC2 && b <= 0xDF) ? 1
                   : (b >= 0xE0 && b <= 0xEF) ? 2
                   : (b >= 0xF0 && b <= 0xF4) ? 3
                                              : -1;
        if (need < 0 || i + need >= s.size()) return false;
        unsigned char lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
        unsigned char hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
        for (int k = 1; k <= need; ++k, lo = 0x80, hi = 0xBF) {
            const unsigned char c = (unsigned char)s[i + k];
            if (c < lo || c > hi) return false;
        }
        i += need + 1;
    }
    return true;
}

// --- the synthetic corpus -------------------------------------------------------------------

struct Rng {  // SplitMix64: the corpus must be the same on every machine
    uint64_t state;
    uint64_t next() { return llmc::splitmix64_next(&state); }
    uint32_t below(uint32_t n) { return (uint32_t)(next() % n); }
    uint32_t in(uint32_t lo, uint32_t hi) { return lo + below(hi - lo + 1); }  // inclusive
    template <class T, size_t N>
    const T& pick(const T (&a)[N]) {
        return a[below(N)];
    }
    std::string pick_word();  // from kWordList
};

// Words for the prose, space separated (split once by words()).
const char kWordList[] =
    "the of and to in is that it was for on are with as his they be at one have this "
    "from or had by word but what some we can out other were all there when up use "
    "your how said an each she which do their time if will way about many then them "
    "write would like so these her long make thing see him two has look more day "
    "could go come did number sound no most people my over know water than call "
    "first who may down side been now find tokenizer gradient transformer attention "
    "Shakespeare naïve café résumé über antidisestablishmentarianism "
    "pneumonoultramicroscopic qwxz Zyzzyva I";

std::string Rng::pick_word() {
    static const std::vector<std::string> words = [] {
        std::vector<std::string> w;
        std::istringstream in(kWordList);
        for (std::string x; in >> x;) w.push_back(x);
        return w;
    }();
    return words[below((uint32_t)words.size())];
}
const char* const kContractions[] = {"'s",      "'t",  "'re", "'ve", "'m",  "'ll",  "'d",  "'S",
                                     "'T",      "'RE", "'Ve", "'M",  "'LL", "'D",   "n't", "N'T",
                                     "\u2019s", "'",   "''",  "'x",  "'sa", "'lll", "'ree"};
const char* const kPunct[] = {",",      ".",  ";",  ":", "!", "?", "...", " -- ", "\u2014",
                              "\u2026", "\"", "(",  ")", "[", "]", "{",   "}",    "<",
                              ">",      "/",  "\\", "&", "%", "$", "#",   "@",    "*",
                              "+",      "=",  "~",  "`", "^", "|", "_"};
// White_Space characters, and near-misses that are not (U+001C..U+001F, ZWSP, U+180E, NEL's
// neighbours), spaced to be picked often.
const uint32_t kSpaces[] = {' ',    ' ',    ' ',    '\n',   '\n',   '\t',   '\r',
                            0x0B,   0x0C,   0x85,   0xA0,   0x1680, 0x2000, 0x2009,
                            0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0x1C,
                            0x1F,   0x200B, 0x180E, 0x84,   0x86,   0xFEFF, 0x2060};
// (first, last) code point ranges of scripts, marks, digits and symbols.
const uint32_t kScripts[][2] = {
    {0x4E00, 0x9FFF},   {0x3040, 0x30FF},   {0xAC00, 0xD7A3},   {0x0621, 0x064A},
    {0x064B, 0x0652},   {0x0660, 0x0669},   {0x06F0, 0x06F9},   {0x05D0, 0x05EA},
    {0x0410, 0x044F},   {0x0391, 0x03C9},   {0x0E01, 0x0E3A},   {0x0E50, 0x0E59},
    {0x0905, 0x0939},   {0x093E, 0x094D},   {0x0966, 0x096F},   {0x0300, 0x036F},
    {0xFF10, 0xFF19},   {0xFF21, 0xFF3A},   {0x2160, 0x2188},   {0x2070, 0x2079},
    {0x00B2, 0x00BE},   {0x2460, 0x249B},   {0x01C4, 0x01CC},   {0x02B0, 0x02C1},
    {0x1E00, 0x1EFF},   {0x20A0, 0x20C0},   {0x2200, 0x22FF},   {0x1D400, 0x1D7FF},
    {0x20000, 0x2A6DF}, {0x10D40, 0x10D8F}, {0x16100, 0x16139}, {0x1E5D0, 0x1E5FF},
    {0x11F00, 0x11F5F}, {0x1E4D0, 0x1E4F9}, {0x0640, 0x0640},   {0xFE00, 0xFE0F}};
const char* const kEmoji[] = {"\U0001F600",
                              "\U0001F44D\U0001F3FD",
                              "\U0001F469\u200D\U0001F4BB",
                              "\U0001F1FA\U0001F1F8",
                              "1\uFE0F\u20E3",
                              "\u2764\uFE0F",
                              "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
                              "\U0001F9D1\U0001F3FF\u200D\U0001F680",
                              "\u263A",
                              "\U0001FAE0"};
// Ill-formed UTF-8: lone continuation bytes, bad leads, overlongs, surrogates, beyond U+10FFFF,
// truncated sequences (at the end of the sample too).
const char* const kInvalid[] = {"\x80",         "\xBF",         "\xC0\x80",     "\xC1\xBF",
                                "\xC2",         "\xE0\x80\x80", "\xE0\xA0",     "\xED\xA0\x80",
                                "\xED\xBF\xBF", "\xEF\xBF",     "\xF0\x80\x80", "\xF0\x9F\x98",
                                "\xF4\x90\x80", "\xF5\x80",     "\xF8\x88\x80", "\xFE\xFF",
                                "\xE2\x82",     "\xC3",         "\xF0\x9F",     "\xFF"};

void prose(Rng& r, std::string* s) {
    for (int n = r.in(5, 80); n > 0; --n) {
        std::string w = r.pick_word();
        const uint32_t shape = r.below(10);
        if (shape == 0) {
            for (char& c : w) c = (char)std::toupper((unsigned char)c);
        } else if (shape < 3) {
            w[0] = (char)std::toupper((unsigned char)w[0]);
        }
        *s += w;
        if (r.below(6) == 0) *s += r.pick(kContractions);
        if (r.below(5) == 0) *s += r.pick(kPunct);
        const uint32_t gap = r.below(20);
        *s += gap < 15 ? " " : gap < 17 ? "\n" : gap < 18 ? "  " : gap < 19 ? "\n\n" : "";
    }
}

void numbers_and_code(Rng& r, std::string* s) {
    const char* const ops[] = {
        " = ", " == ", " != ", "->",  "::",  " <<= ", " && ", "++",  ";\n",
        "(",   ")",    " {\n", "}\n", "[i]", ", ",    " + ",  " * ", "/* x */"};
    for (int n = r.in(5, 60); n > 0; --n) {
        const uint32_t kind = r.below(4);
        if (kind == 0) {
            *s += std::to_string(r.next() % (1ull << r.in(1, 60)));
        } else if (kind == 1) {
            *s += std::to_string(r.below(1000)) + "," + std::to_string(r.in(100, 999)) + "." +
                  std::to_string(r.below(100));
        } else if (kind == 2) {
            *s += r.pick_word() + std::string(r.below(2) ? "_" : "") + std::to_string(r.below(64));
        } else {
            *s += r.pick(ops);
        }
        if (r.below(4) == 0) *s += r.below(3) ? std::string(r.in(1, 8), ' ') : std::string("\t\t");
    }
}

void whitespace(Rng& r, std::string* s) {
    for (int n = r.in(3, 30); n > 0; --n) {
        const uint32_t run = r.below(8) == 0 ? r.in(50, 3000) : r.in(1, 6);
        for (uint32_t k = 0; k < run; ++k) *s += utf8(r.pick(kSpaces));
        const uint32_t after = r.below(5);
        *s += after == 0   ? r.pick_word()
              : after == 1 ? r.pick(kPunct)
              : after == 2 ? std::to_string(r.below(100))
              : after == 3 ? utf8(r.in(0x4E00, 0x4E10))
                           : "";
    }
}

void scripts(Rng& r, std::string* s) {
    for (int n = r.in(5, 50); n > 0; --n) {
        const uint32_t(&range)[2] = r.pick(kScripts);
        for (uint32_t k = r.in(1, 12); k > 0; --k) *s += utf8(r.in(range[0], range[1]));
        const uint32_t after = r.below(6);
        if (after == 0) *s += r.pick(kEmoji);
        if (after == 1) *s += r.pick(kContractions);
        if (after < 4) *s += utf8(r.pick(kSpaces));
    }
}

void random_code_points(Rng& r, std::string* s) {
    for (int n = r.in(10, 200); n > 0; --n) {
        uint32_t cp = r.below(2) ? r.below(0x10000) : r.below(0x110000);
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
        *s += utf8(cp);
        if (r.below(4) == 0) *s += r.below(2) ? " " : r.pick(kPunct);
    }
}

void ill_formed(Rng& r, std::string* s) {
    for (int n = r.in(5, 40); n > 0; --n) {
        const uint32_t kind = r.below(4);
        *s += kind == 0 ? std::string(1, (char)r.in(0x80, 0xFF)) : std::string(r.pick(kInvalid));
        if (kind == 2) *s += r.pick_word();
        if (kind == 3) *s += r.below(2) ? " " : "\xE4\xB8\xAD";
    }
}

void long_pieces(Rng& r, std::string* s) {
    const uint32_t len = r.in(65, 2500), kind = r.below(6);
    const char* const alphabets[] = {"ACGT", "abcdefghijklmnopqrstuvwxyz", "0123456789", "=-=-+*#~",
                                     "!\"#$%&()*+,-./:;<=>?@[]^_`{|}~"};
    *s += r.below(2) ? " " : "";
    for (uint32_t k = 0; k < len; ++k) {
        if (kind < 5) {
            const char* a = alphabets[kind];
            *s += a[r.below((uint32_t)std::strlen(a))];
        } else {
            *s += utf8(r.in(0x4E00, 0x4E40));
        }
    }
    *s += r.below(2) ? "\n" : " x";
}

// Deterministic text of about `bytes` bytes, cut into records of about 1 MB (each its own text).
std::vector<std::string> synthetic_corpus(size_t bytes, uint64_t seed) {
    Rng r{seed};
    std::vector<std::string> records(1);
    size_t total = 0;
    void (*const kinds[])(Rng&, std::string*) = {
        prose,      prose,      prose,   numbers_and_code,
        whitespace, scripts,    scripts, random_code_points,
        ill_formed, long_pieces};
    while (total < bytes) {
        std::string seg;
        r.pick(kinds)(r, &seg);
        total += seg.size();
        records.back() += seg;
        if (records.back().size() > (1u << 20)) records.emplace_back();
    }
    return records;
}

// Every code point of planes 0-3 and 14 (others: every 97th) followed by "'s": a letter or number
// leaves "'s" whole, anything else takes the apostrophe, so each class is visible in the ids.
std::vector<std::string> all_code_points() {
    std::vector<std::string> records(1);
    for (uint32_t cp = 0; cp < 0x110000; ++cp) {
        const uint32_t plane = cp >> 16;
        if ((cp >= 0xD800 && cp <= 0xDFFF) || (plane > 3 && plane != 14 && cp % 97 != 0)) continue;
        records.back() += utf8(cp) + "'s";
        if (cp % 7 == 0) records.back() += cp % 2 ? " " : "\n";
        if (records.back().size() > (1u << 20)) records.emplace_back();
    }
    return records;
}

// Targeted cases, each encoded on its own.
std::vector<std::string> edge_cases() {
    std::vector<std::string> c = {"",
                                  "a",
                                  " ",
                                  "  ",
                                  "\n",
                                  " \n",
                                  "\n ",
                                  "a  b",
                                  "a   b",
                                  "a \n b",
                                  "a\t\tb",
                                  "a \t b",
                                  "  \t\n x",
                                  "abc   ",
                                  "abc \n",
                                  " x",
                                  "  x",
                                  "   x",
                                  "\n\nx",
                                  "\r\n\r\nx",
                                  "\t x",
                                  "x \u3000y",
                                  "x\u00a0 y",
                                  "x \u00a0y",
                                  "\u2028\u2029x",
                                  "\u0085x",
                                  "\x1c\x1d\x1e\x1fx",
                                  "\x0b\x0cx",
                                  "'s",
                                  "'S",
                                  "'ll",
                                  "'LL",
                                  "'l",
                                  "'re",
                                  "'ve",
                                  "'v",
                                  "'m",
                                  "'d",
                                  "'t",
                                  "'",
                                  "''",
                                  "''s",
                                  "x'",
                                  "'sa",
                                  " 's",
                                  " 'll",
                                  "it's'",
                                  "don't",
                                  "DON'T",
                                  "I'm",
                                  "we've",
                                  "they're",
                                  "you'd",
                                  "he'll",
                                  "\u2019s",
                                  "'\u00e9",
                                  "a1",
                                  "1a",
                                  "a 1",
                                  " 1",
                                  "1 2",
                                  "123456789012",
                                  "1,000.50",
                                  "\uff13",
                                  "\u0663\u0664",
                                  "\u216b",
                                  "\u00bd\u00b2",
                                  "\u01c5x",
                                  "e\u0301",
                                  "\u0301",
                                  " \u0301",
                                  "a\u0301b",
                                  "\U0001F642",
                                  " \U0001F642!",
                                  "\U0001F469\u200D\U0001F469\u200D\U0001F467",
                                  "\U0001F1FA\U0001F1F8",
                                  "\u4e2d\u6587",
                                  " \u4e2d\u6587",
                                  "\ud55c\uad6d\uc5b4",
                                  "\uff48\uff45\uff4c\uff4c\uff4f",
                                  "<|endoftext|>",
                                  "hello<|endoftext|>world",
                                  "\xef\xbb\xbf"
                                  "BOM",
                                  "\xff",
                                  "\xc0\x80",
                                  "\xed\xa0\x80",
                                  "\xe2\x82",
                                  "\xe2\x82"
                                  "a",
                                  "\xf0\x9f\x98",
                                  "\xf0\x9f\x98 ",
                                  "\xf4\x90\x80\x80",
                                  "a\x80"
                                  "b",
                                  "\xf8\x88\x80\x80\x80",
                                  " \xff",
                                  "\xff ",
                                  "\xef\xbf\xbd",
                                  "x\xc3",
                                  std::string(1, '\0'),
                                  std::string("a\0b", 3),
                                  std::string(1000, ' '),
                                  std::string(1000, ' ') + "x",
                                  std::string(100, '\n') + "x",
                                  std::string(300, 'a'),
                                  std::string(300, '!'),
                                  std::string(5000, '='),
                                  " " + std::string(200, '7')};
    return c;
}

}  // namespace

namespace {

struct Options {
    std::string dir = "build/tokenizer", work = "build/testdata/tokenizer";
    double corpus_mb = 12;
    std::vector<std::string> extra;
};

Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "error: %s needs a value (see the header of test_tokenizer.cpp)\n",
                         a.c_str());
            std::exit(2);
        }
        if (a == "--dir") {
            o.dir = argv[++i];
        } else if (a == "--work") {
            o.work = argv[++i];
        } else if (a == "--corpus-mb") {
            o.corpus_mb = std::atof(argv[++i]);
        } else if (a == "--extra") {
            o.extra.push_back(argv[++i]);
        } else {
            std::fprintf(stderr, "error: unknown option %s\n", a.c_str());
            std::exit(2);
        }
    }
    return o;
}

void check_load_errors(Tally& t, const Options& o) {
    Tokenizer tok;
    std::string why;
    const fs::path bad = fs::path(o.work) / "bad_files";
    fs::create_directories(bad);
    auto refused = [&](const std::string& what, const std::string& must_mention) {
        why.clear();
        const bool loaded = tok.load(bad.string(), &why);
        t.check(!loaded && why.find(must_mention) != std::string::npos &&
                    why.find('\n') == std::string::npos,
                "load refuses " + what + " (why: \"" + why + "\")");
    };
    fs::remove(bad / "encoder.json");
    fs::remove(bad / "vocab.bpe");
    refused("a folder without the files", "tokenizer_files.sh");
    const std::string json = read_all(fs::path(o.dir) / "encoder.json");
    const std::string bpe = read_all(fs::path(o.dir) / "vocab.bpe");
    write_all(bad / "encoder.json", json.substr(0, json.size() / 2));
    write_all(bad / "vocab.bpe", bpe);
    refused("a truncated encoder.json", "encoder.json");
    std::string swapped = json;  // two ids exchanged: " the" and "in"
    const size_t a = swapped.find("\"\\u0120the\": 262"), b = swapped.find("\"in\": 259");
    t.check(a != std::string::npos && b != std::string::npos, "encoder.json has the expected ids");
    swapped.replace(a, 16, "\"\\u0120the\": 259");
    swapped.replace(b, 9, "\"in\": 262");
    write_all(bad / "encoder.json", swapped);
    refused("encoder.json ids out of merge order", "merge");
    std::string reordered = bpe;  // merges 1 and 2 exchanged
    const size_t l1 = reordered.find('\n') + 1, l2 = reordered.find('\n', l1) + 1;
    const size_t l3 = reordered.find('\n', l2) + 1;
    reordered = reordered.substr(0, l1) + reordered.substr(l2, l3 - l2) +
                reordered.substr(l1, l2 - l1) + reordered.substr(l3);
    write_all(bad / "encoder.json", json);
    write_all(bad / "vocab.bpe", reordered);
    refused("vocab.bpe with merges out of order", "vocab.bpe");
    // Any valid JSON spelling of the same object loads: raw UTF-8 for the escapes, one entry per
    // line, and a surrogate-pair escape of a character that is not in the alphabet is refused.
    std::string respelled;
    for (size_t i = 0; i < json.size(); ++i) {
        if (json.compare(i, 6, "\\u0120") == 0) {
            respelled += "\xc4\xa0";
            i += 5;
        } else if (json.compare(i, 2, ", ") == 0) {  // between entries (keys have no spaces)
            respelled += ",\n  ";
            ++i;
        } else {
            respelled += json[i];
        }
    }
    write_all(bad / "encoder.json", respelled);
    write_all(bad / "vocab.bpe", bpe);
    std::vector<int> ids;
    if (t.check(tok.load(bad.string(), &why), "load accepts encoder.json spelled differently")) {
        tok.encode(" the world", &ids);
        t.check(ids == std::vector<int>{262, 995}, "respelled encoder.json gives the same ids");
    }
    write_all(bad / "encoder.json", "{\"\\ud83d\\ude00\": 0}");
    refused("a token outside the byte alphabet", "alphabet");
}

void check_known_ids(Tally& t, const Tokenizer& tok) {
    // From tiktoken 1.0.22 (npm), get_encoding("gpt2").encode_ordinary.
    const std::pair<std::string, std::vector<int>> known[] = {
        {"Hello world", {15496, 995}},
        {"hello   world\n\n", {31373, 220, 220, 995, 628}},
        {"I'm sure they'RE here, don't you think? We'll see.",
         {40, 1101, 1654, 484, 6, 2200, 994, 11, 836, 470, 345, 892, 30, 775, 1183, 766, 13}},
        {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}},
        {" \u00e9t\u00e9 \u4e2d\u6587 \U0001F600!!",
         {220, 25125, 2634, 220, 40792, 23877, 229, 30325, 222, 3228}},
        {"x = 12345678 + 3.14159;\n\tif (x) {\n\t\treturn;\n\t}",
         {87,  796, 17031, 2231, 30924, 1343, 513, 13,  1415, 19707, 26,  198, 197,
          361, 357, 87,    8,    1391,  198,  197, 197, 7783, 26,    198, 197, 92}},
        {"\xff\xfe"
         "ab\xe2\x82",
         {6353, 397, 4210}},  // ill-formed: as "\ufffd\ufffdab\ufffd"
        {"   \n\n  x  ", {220, 220, 220, 628, 220, 2124, 220, 220}}};
    for (const auto& [text, ids] : known) {
        std::vector<int> got;
        tok.encode(text, &got);
        t.check(got == ids, "ids of \"" + escaped(text) + "\"");
    }
    t.check(tok.vocab_size() == 50257 && tok.eot() == 50256, "vocab size 50257, EOT 50256");
    const int eot = tok.eot();
    t.check(tok.decode(&eot, 1) == "<|endoftext|>", "EOT decodes to <|endoftext|>");
}

// Runs `body` in a forked child with stderr in a file; true if the child exits with status 1 and
// its stderr holds `message` (a user's mistake ends with one sentence and exit code 1).
bool exits_with(const std::function<void()>& body, const std::string& message, const Options& o) {
    const fs::path err = fs::path(o.work) / "child_stderr.txt";
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        if (std::freopen(err.c_str(), "w", stderr) == nullptr) _exit(3);
        body();
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return false;
    return WIFEXITED(status) && WEXITSTATUS(status) == 1 &&
           read_all(err).find(message) != std::string::npos;
}

void check_misuse(Tally& t, const Tokenizer& tok, const Options& o) {
    const int bad_ids[] = {50257, -1};
    for (int id : bad_ids)
        t.check(exits_with([&] { tok.decode(&id, 1); }, "outside the tokenizer's vocabulary", o),
                "decode of id " + std::to_string(id) + " exits with a sentence");
    Tokenizer empty;
    std::vector<int> ids;
    t.check(exits_with([&] { empty.encode("x", &ids); }, "before a successful load", o),
            "encode before load exits with a sentence");
    t.check(exits_with([&] { tok.write_tokenizer_file(o.work + "/no/such/dir/t.bin"); },
                       "cannot create the tokenizer file", o),
            "write_tokenizer_file to a missing folder exits with a sentence");
}

void write_records(const fs::path& path, const std::vector<std::string>& records) {
    std::string data;
    for (const std::string& r : records) {
        const uint32_t n = (uint32_t)r.size();
        data.append(reinterpret_cast<const char*>(&n), 4);
        data += r;
    }
    write_all(path, data);
}

// Reference ids from node + tiktoken; false (with a message) when they cannot be had.
bool reference_ids(const Options& o, const std::vector<std::string>& records,
                   std::vector<std::vector<int>>* ref) {
    const fs::path in = fs::path(o.work) / "records.bin", out = fs::path(o.work) / "ref_ids.bin";
    write_records(in, records);
    fs::remove(out);
    const std::string cmd = "node scripts/test/tokenizer_parity.js --records --time '" +
                            in.string() + "' '" + out.string() + "'";
    std::fflush(stdout);
    if (std::system(cmd.c_str()) != 0) {
        std::printf("FAIL reference ids: `%s` failed (node 18+ and npm are needed)\n", cmd.c_str());
        return false;
    }
    const std::string data = read_all(out);
    size_t at = 0;
    for (size_t r = 0; r < records.size(); ++r) {
        uint32_t n = 0;
        if (at + 4 > data.size()) break;
        std::memcpy(&n, data.data() + at, 4);
        ref->emplace_back(n);
        if (at + 4 + 4ull * n > data.size()) break;
        if (n > 0) std::memcpy(ref->back().data(), data.data() + at + 4, 4ull * n);
        at += 4 + 4ull * n;
    }
    if (ref->size() != records.size() || at != data.size()) {
        std::printf("FAIL reference ids: %s is truncated\n", out.string().c_str());
        return false;
    }
    return true;
}

// The first difference, with the tokens around it, for a failure message.
std::string first_difference(const Tokenizer& tok, const std::vector<int>& ours,
                             const std::vector<int>& ref) {
    size_t k = 0;
    while (k < ours.size() && k < ref.size() && ours[k] == ref[k]) ++k;
    auto around = [&](const std::vector<int>& ids) {
        std::string s;
        for (size_t i = k >= 3 ? k - 3 : 0; i < ids.size() && i < k + 4; ++i)
            s += std::to_string(ids[i]) + ":\"" + escaped(tok.decode(&ids[i], 1)) + "\" ";
        return s;
    };
    return "first difference at token " + std::to_string(k) + " of " + std::to_string(ref.size()) +
           "\n    ours: " + around(ours) + "\n    ref:  " + around(ref);
}

void check_parity(Tally& t, const Tokenizer& tok, const std::vector<std::string>& records,
                  const std::vector<std::vector<int>>& ref, const std::vector<std::string>& names) {
    int shown = 0;
    size_t bytes = 0, tokens = 0, same = 0;
    for (size_t r = 0; r < records.size(); ++r) {
        std::vector<int> ours;
        tok.encode(records[r], &ours);
        bytes += records[r].size();
        tokens += ref[r].size();
        if (ours == ref[r]) {
            t.check(true, "");
            ++same;
            continue;
        }
        t.check(false, "parity on " + names[r] + " \"" + escaped(records[r], 60) + "\"");
        if (++shown <= 10) std::printf("    %s\n", first_difference(tok, ours, ref[r]).c_str());
    }
    std::printf("parity with tiktoken: %zu of %zu texts identical (%.1f MB, %zu tokens)\n", same,
                records.size(), bytes / 1e6, tokens);
}

void check_round_trips(Tally& t, const Tokenizer& tok, const std::vector<std::string>& records) {
    int bad = 0;
    for (const std::string& text : records) {
        std::vector<int> ids, again;
        tok.encode(text, &ids);
        const std::string back = tok.decode(ids.data(), ids.size());
        bool ok = back == text;
        if (!valid_utf8(text)) {  // U+FFFD stands in; then encoding is stable through decode
            tok.encode(back, &again);
            ok = valid_utf8(back) && again == ids;
        }
        if (!ok && ++bad <= 5)
            std::printf("    round trip fails on \"%s\"\n", escaped(text).c_str());
    }
    t.check(bad == 0, "decode(encode(x)) == x for valid UTF-8 (" + std::to_string(bad) + " bad)");
}

void check_tokenizer_file(Tally& t, const Tokenizer& tok, const Options& o) {
    const fs::path path = fs::path(o.work) / "gpt2_tokenizer.bin";
    tok.write_tokenizer_file(path.string());
    const std::string data = read_all(path);
    int32_t header[256] = {};
    if (!t.check(data.size() > sizeof(header), "tokenizer file has a header")) return;
    std::memcpy(header, data.data(), sizeof(header));
    t.check(header[0] == llmc::kTokenizerMagic && header[1] == 2 && header[2] == 50257 &&
                header[3] == 50256,
            "tokenizer file header (magic, version 2, 50257, 50256)");
    size_t at = sizeof(header);
    int bad = 0;
    for (int id = 0; id < tok.vocab_size(); ++id) {
        const size_t len = at < data.size() ? (uint8_t)data[at] : 0;
        if (at + 1 + len > data.size() || data.compare(at + 1, len, tok.decode(&id, 1)) != 0) {
            ++bad;
            break;
        }
        at += 1 + len;
    }
    t.check(bad == 0 && at == data.size(), "tokenizer file: every token's bytes, nothing after");
}

void check_threads(Tally& t, const Tokenizer& tok, const std::vector<std::string>& records) {
    std::vector<std::vector<int>> alone(records.size());
    for (size_t r = 0; r < records.size(); ++r) tok.encode(records[r], &alone[r]);
    std::vector<std::vector<int>> a(records.size()), b(records.size());
    std::thread ta([&] {
        for (size_t r = 0; r < records.size(); ++r) tok.encode(records[r], &a[r]);
    });
    std::thread tb([&] {
        for (size_t r = records.size(); r-- > 0;) tok.encode(records[r], &b[r]);
    });
    ta.join();
    tb.join();
    t.check(a == alone && b == alone, "two threads encoding at once give the single-thread ids");
}

void report_speed(const Tokenizer& tok, const std::vector<std::string>& records, const char* what) {
    size_t bytes = 0, tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& r : records) {
        std::vector<int> ids;
        tok.encode(r, &ids);
        bytes += r.size();
        tokens += ids.size();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("speed (%s): %.1f MB -> %zu tokens in %.3f s, %.1f MB/s (one thread)\n", what,
                bytes / 1e6, tokens, s, bytes / 1e6 / s);
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_args(argc, argv);
    Tally t;
    fs::create_directories(o.work);
    const std::string fetch = "bash scripts/data/tokenizer_files.sh '" + o.dir + "' > /dev/null";
    std::fflush(stdout);
    if (!t.check(std::system(fetch.c_str()) == 0, "GPT-2's tokenizer files in " + o.dir)) {
        std::printf("test_tokenizer: %d passed, %d failed\n", t.passed, t.failed);
        return 1;
    }
    check_load_errors(t, o);
    Tokenizer tok;
    std::string why;
    if (!t.check(tok.load(o.dir, &why), "load " + o.dir + ": " + why)) {
        std::printf("test_tokenizer: %d passed, %d failed\n", t.passed, t.failed);
        return 1;
    }
    check_known_ids(t, tok);
    check_misuse(t, tok, o);

    std::vector<std::string> records = edge_cases(), names;
    for (size_t i = 0; i < records.size(); ++i) names.push_back("edge case " + std::to_string(i));
    const size_t first_corpus = records.size();
    for (const std::string& r : synthetic_corpus((size_t)(o.corpus_mb * 1e6), 20240328)) {
        records.push_back(r);
        names.push_back("synthetic record " + std::to_string(records.size() - first_corpus));
    }
    const std::vector<std::string> corpus(records.begin() + first_corpus, records.end());
    for (const std::string& r : all_code_points()) {
        records.push_back(r);
        names.push_back("all-code-points record");
    }
    for (const std::string& path : o.extra) {
        records.push_back(read_all(path));
        names.push_back(path);
    }
    std::vector<std::vector<int>> ref;
    if (t.check(reference_ids(o, records, &ref), "reference ids from tiktoken"))
        check_parity(t, tok, records, ref, names);
    check_round_trips(t, tok, records);
    check_tokenizer_file(t, tok, o);
    check_threads(t, tok, corpus);
    report_speed(tok, corpus, "synthetic corpus");
    for (const std::string& path : o.extra) report_speed(tok, {read_all(path)}, path.c_str());
    std::printf("test_tokenizer: %d passed, %d failed\n", t.passed, t.failed);
    return t.failed == 0 ? 0 : 1;
}
