// tokenizer.h: GPT-2's byte-level BPE tokenizer, giving exactly the token ids of tiktoken's
// "gpt2" encoding. Host-only C++, no dependencies; the files are GPT-2's encoder.json and
// vocab.bpe (scripts/data/tokenizer_files.sh fetches them).
//
// encode(text):
//   1. Bytes to characters: the text is read as UTF-8, and every ill-formed sequence becomes
//      U+FFFD, one per maximal subpart (Unicode's recommended practice, what JavaScript's
//      TextDecoder and Python's bytes.decode("utf-8", "replace") do): a lead byte followed by
//      some but not all of its continuation bytes is one U+FFFD; any other bad byte is one each.
//      Valid UTF-8 passes through unchanged.
//   2. Pre-tokenization into pieces, by GPT-2's pattern as tiktoken writes it
//        '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      matched leftmost-first by a hand-written scanner (contractions are lowercase only; a
//      whitespace run followed by a non-space gives its last character to the next piece).
//      Classes are Unicode 16.0's, the version of tiktoken's regex engine (unicode_tables.h).
//   3. Each piece is one token when its bytes are one; otherwise byte-level BPE: start from
//      one token per byte and repeatedly merge the adjacent pair whose concatenation is the
//      token of lowest rank (leftmost on ties), as tiktoken does. A token's rank is its id.
//   No special tokens are recognised in text: "<|endoftext|>" is encoded as plain text.
//
// load() checks that the two files agree the way tiktoken checks them (byte tokens, then one
// token per merge in order, then <|endoftext|>), so ids and ranks are the same numbers.
// A loaded Tokenizer is immutable; encode() and decode() may run on many threads at once.
//
// Tokenizer file (llm.c's): 256 x int32 header [0] magic 20240328 [1] version 2 [2] vocab size
// [3] EOT id, then for each id in order a uint8 length and the token's bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llmc {

class Tokenizer {
  public:
    // Loads encoder.json + vocab.bpe from dir; on failure returns false with one sentence in *why.
    bool load(const std::string& dir, std::string* why);
    // Appends the ids of `text` (any bytes; see above) to out. No special tokens are recognised.
    void encode(std::string_view text, std::vector<int>* out) const;
    // The bytes of the tokens, concatenated (<|endoftext|> gives its text). Exits with a
    // sentence on an id outside the vocabulary.
    std::string decode(const int* ids, size_t n) const;
    int vocab_size() const {  // 50257 (0 before a successful load)
        return token_offsets_.empty() ? 0 : (int)token_offsets_.size() - 1;
    }
    int eot() const { return eot_; }  // 50256 (<|endoftext|>); -1 before a successful load
    // Writes the llm.c tokenizer file (format above); exits with a sentence if it cannot.
    void write_tokenizer_file(const std::string& path) const;
    // The same, but returns false with one sentence in *why instead of exiting.
    bool write_tokenizer_file(const std::string& path, std::string* why) const;

  private:
    void build_tables();  // the lookup tables, from token_bytes_ / token_offsets_
    int find_token(const uint8_t* bytes, size_t n) const;  // -1 if not a mergeable token
    int merged_token(int left, int right) const;           // -1 if the pair never merges
    uint8_t char_class(const uint8_t* p, int* len) const;  // class of the character at p
    size_t run_end(const uint8_t* s, size_t n, size_t i, uint8_t cls) const;
    size_t piece_end(const uint8_t* s, size_t n, size_t i) const;
    void encode_valid(const uint8_t* s, size_t n, std::vector<int>* out) const;
    void encode_piece(const uint8_t* p, size_t n, std::vector<int>* out) const;
    void merge_short_piece(const uint8_t* p, size_t n, std::vector<int>* out) const;
    void merge_long_piece(const uint8_t* p, size_t n, std::vector<int>* out) const;

    std::string token_bytes_;              // every token's bytes, back to back, in id order
    std::vector<uint32_t> token_offsets_;  // token i is token_bytes_[offsets[i], offsets[i+1])
    int eot_ = -1;
    int byte_token_[256] = {};  // the token of each single byte
    size_t max_token_len_ = 0;
    // Open-addressing tables. token_table_: (hash tag << 32) | (id + 1), 0 = empty.
    // merge_table_: ((left * V + right) << 32) | (merged id + 1), 0 = empty.
    std::vector<uint64_t> token_table_, merge_table_;
    std::vector<int> byte_pair_token_;  // merge of two byte tokens (ids < 256): most lookups
    std::vector<uint8_t> bmp_class_;    // unicode::CharClass of each code point below 0x10000
};

}  // namespace llmc
