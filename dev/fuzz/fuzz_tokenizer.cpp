// fuzz_tokenizer.cpp: libFuzzer harness of Tokenizer::load (llmc/tokenizer.cpp): GPT-2's
// encoder.json and vocab.bpe, which prepare_data reads. Input: encoder.json, the separator,
// vocab.bpe. load reports a bad file through its `why` sentence (not LLMC_FAIL), which the
// harness raises as llmc::FatalError so the framework checks it the same way. A tokenizer it
// accepts must round-trip text: decode(encode(s)) == s for valid UTF-8. Seeds: a tiny vocabulary
// (the 256 byte tokens, a few merges, <|endoftext|>) in raw UTF-8 and in \u escapes.
#include <algorithm>

#include "fuzz_util.h"
#include "tokenizer.h"

namespace {

void parse(const std::vector<std::string>& paths) {
    const std::string dir = paths[0].substr(0, paths[0].rfind('/'));
    llmc::Tokenizer tok;
    std::string why;
    if (!tok.load(dir, &why)) throw llmc::FatalError(why);
    LLMC_FUZZ_ASSERT(tok.vocab_size() > 256 && tok.eot() == tok.vocab_size() - 1);
    const std::string text =
        "The theory, then: 42 tokens\n\n  in\ttext's \xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 "
        "\xf0\x9f\x98\x80 <|endoftext|> the end   ";
    std::vector<int> ids;
    tok.encode(text, &ids);
    LLMC_FUZZ_ASSERT(!ids.empty() && ids.size() <= text.size());
    LLMC_FUZZ_ASSERT(tok.decode(ids.data(), ids.size()) == text);
}

// GPT-2's byte alphabet (the characters vocab files spell bytes with): printable Latin-1 bytes
// stand for themselves, the other 68 for U+0100.. in byte order.
std::vector<uint32_t> byte_code_points() {
    std::vector<uint32_t> cp(256);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        cp[b] = printable ? (uint32_t)b : next++;
    }
    return cp;
}

enum Spelling { kRaw, kJson, kJsonEscaped };

// One token's bytes in the alphabet: raw UTF-8 (vocab.bpe), or a JSON string body in UTF-8 or
// in \u escapes (encoder.json).
std::string spell(const std::string& bytes, Spelling how) {
    static const std::vector<uint32_t> cps = byte_code_points();
    std::string out;
    for (unsigned char b : bytes) {
        const uint32_t c = cps[b];
        char buf[8];
        if (how == kJsonEscaped) {
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
        } else if (how == kJson && (c == '"' || c == '\\')) {
            out += '\\';
            out += (char)c;
        } else if (c < 0x80) {
            out += (char)c;
        } else {  // two UTF-8 bytes: every alphabet code point is below 0x800
            out += (char)(0xC0 | (c >> 6));
            out += (char)(0x80 | (c & 0x3F));
        }
    }
    return out;
}

void write_seeds(const std::string& dir) {
    // The byte order of ids 0..255 is the alphabet's code point order, as in GPT-2's files.
    const std::vector<uint32_t> cps = byte_code_points();
    std::vector<int> by_cp(256);
    for (int b = 0; b < 256; ++b) by_cp[b] = b;
    std::sort(by_cp.begin(), by_cp.end(), [&](int a, int b) { return cps[a] < cps[b]; });
    const std::vector<std::pair<std::string, std::string>> merges = {
        {" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {" ", "in"}, {"e", "n"}, {"t", "h"}};
    for (Spelling how : {kJson, kJsonEscaped}) {
        std::string json = "{", bpe = "#version: 0.2\n";
        int id = 0;
        auto add = [&](const std::string& key_json) {
            json += (id == 0 ? "\"" : ", \"") + key_json + "\": " + std::to_string(id);
            ++id;
        };
        for (int b : by_cp) add(spell(std::string(1, (char)b), how));
        for (const auto& [l, r] : merges) {
            add(spell(l + r, how));
            bpe += spell(l, kRaw) + " " + spell(r, kRaw) + "\n";
        }
        add("<|endoftext|>");
        json += "}";
        llmc::fuzz::write_seed(dir, how == kJson ? "tiny_utf8" : "tiny_escaped", {json, bpe});
    }
}

}  // namespace

const llmc::fuzz::Target& llmc::fuzz::target() {
    static const Target t{{"encoder.json", "vocab.bpe"}, parse, write_seeds, {}};
    return t;
}
