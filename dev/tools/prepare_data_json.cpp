// prepare_data_json.cpp: the JSON reader of prepare_data's JSONL input (json_text_field in
// prepare_data_io.h): a recursive-descent scanner of one RFC 8259 JSON text that decodes the
// top-level "text" string and only checks everything else.
#include <cstring>

#include "prepare_data_io.h"

namespace prep {

namespace {

void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
        out->push_back((char)cp);
    } else if (cp < 0x800) {
        out->push_back((char)(0xC0 | (cp >> 6)));
        out->push_back((char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out->push_back((char)(0xE0 | (cp >> 12)));
        out->push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back((char)(0x80 | (cp & 0x3F)));
    } else {
        out->push_back((char)(0xF0 | (cp >> 18)));
        out->push_back((char)(0x80 | ((cp >> 12) & 0x3F)));
        out->push_back((char)(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back((char)(0x80 | (cp & 0x3F)));
    }
}

// A recursive-descent reader of one JSON text (RFC 8259) that keeps only what it is asked for.
class JsonScanner {
  public:
    JsonScanner(std::string_view s, const std::string& field) : s_(s), field_(field) {}

    bool text_field(std::string* text, std::string* why) {
        bool found = false;
        const bool ok = object_with_text(text, &found) && at_end();
        if (!ok) {
            *why = err_;
            return false;
        }
        if (!found) *why = "the JSON object has no \"" + field_ + "\" field (each line needs one)";
        return found;
    }

    // One element of a top-level array of objects; see json_array_next.
    bool array_element(size_t* pos, std::string* text, std::string* why) {
        pos_ = *pos;
        if (pos_ == std::string_view::npos) return false;
        if (pos_ == 0) {
            if (s_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
            skip_ws();
            if (peek() != '[') return located(why, "a .json input must be a JSON array of objects");
            ++pos_;
            skip_ws();
            if (peek() == ']') return ++pos_, end_of_array(pos, why);
        }
        skip_ws();
        const size_t start = pos_;
        if (peek() != '{') return located(why, "each element of the array must be a JSON object");
        bool found = false;
        if (!object_with_text(text, &found)) return located(why, err_.c_str());
        if (!found) {
            pos_ = start;
            return located(why, ("the object has no \"" + field_ + "\" field").c_str());
        }
        skip_ws();
        if (peek() == ',') {
            *pos = ++pos_;
            return true;
        }
        if (peek() != ']') return located(why, "expected ',' or ']' after an array element");
        ++pos_;
        end_of_array(pos, why);  // this element is the last
        return why->empty();
    }

  private:
    static constexpr int kMaxDepth = 512;

    bool fail(const std::string& what) {
        if (err_.empty()) {
            err_ = "malformed JSON at column " + std::to_string(pos_ + 1) + ": " + what;
            err_pos_ = pos_;
            err_what_ = what;
        }
        return false;
    }
    // An error in a whole-file JSON text, by line and column.
    bool located(std::string* why, const char* what) {
        const size_t at = err_what_.empty() ? pos_ : err_pos_;
        size_t line = 1, line_start = 0;
        for (size_t i = 0; i < at && i < s_.size(); ++i) {
            if (s_[i] == '\n') ++line, line_start = i + 1;
        }
        *why = "line " + std::to_string(line) + " column " + std::to_string(at - line_start + 1) +
               ": " + (err_what_.empty() ? std::string(what) : "malformed JSON: " + err_what_);
        return false;
    }
    // After the closing ']': only whitespace may follow. Marks the end (*pos = npos).
    bool end_of_array(size_t* pos, std::string* why) {
        skip_ws();
        if (more()) return located(why, "unexpected text after the JSON array");
        *pos = std::string_view::npos;
        why->clear();
        return false;
    }
    bool more() const { return pos_ < s_.size(); }
    char peek() const { return more() ? s_[pos_] : '\0'; }
    void skip_ws() {
        while (more() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
            ++pos_;
        }
    }
    bool expect(char c, const char* what) {
        skip_ws();
        if (peek() != c) return fail(std::string("expected ") + what);
        ++pos_;
        return true;
    }
    bool at_end() {
        skip_ws();
        return !more() || fail("unexpected text after the JSON object");
    }

    bool object_with_text(std::string* text, bool* found) {
        skip_ws();
        if (peek() != '{') {
            err_ = more() ? "the line is not a JSON object (it must start with '{')"
                          : "the line is empty";
            return false;
        }
        ++pos_;
        skip_ws();
        if (peek() == '}') return ++pos_, true;
        for (;;) {
            std::string key;
            skip_ws();
            if (peek() != '"') return fail("expected a key in double quotes");
            if (!string(&key) || !expect(':', "':' after a key")) return false;
            skip_ws();
            if (key == field_) {
                if (peek() != '"') {
                    err_what_ = "\"" + field_ + "\" is " + kind_of_value() + ", not a string";
                    err_ = err_what_;
                    err_pos_ = pos_;
                    return false;
                }
                text->clear();
                if (!string(text)) return false;
                *found = true;  // a repeated key: the last one wins, as in Python's json
            } else if (!value(1)) {
                return false;
            }
            skip_ws();
            if (peek() == ',') {
                ++pos_;
                continue;
            }
            return expect('}', "',' or '}' after a value");
        }
    }
    const char* kind_of_value() const {
        switch (peek()) {
            case '{':
                return "an object";
            case '[':
                return "an array";
            case 't':
            case 'f':
                return "a boolean";
            case 'n':
                return "null";
            default:
                return "a number";
        }
    }

    bool hex4(uint32_t* v) {
        if (pos_ + 4 > s_.size()) return fail("\\u needs 4 hex digits");
        *v = 0;
        for (int i = 0; i < 4; ++i) {
            const char c = s_[pos_ + i];
            const int d = (c >= '0' && c <= '9')   ? c - '0'
                          : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                          : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                   : -1;
            if (d < 0) return fail("\\u needs 4 hex digits");
            *v = *v * 16 + (uint32_t)d;
        }
        pos_ += 4;
        return true;
    }
    // \uXXXX (pos_ just after the 'u'), with a following low surrogate when XXXX is a high one.
    bool unicode_escape(std::string* out) {
        uint32_t cp = 0;
        if (!hex4(&cp)) return false;
        if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(pos_, 2) == "\\u") {
            const size_t save = pos_;
            uint32_t lo = 0;
            pos_ += 2;
            if (!hex4(&lo)) return false;
            if (lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
                pos_ = save;  // not a pair: the high one alone, the next escape read on its own
            }
        }
        // A lone surrogate is not a character; UTF-8 cannot hold it.
        if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
        if (out) append_utf8(cp, out);
        return true;
    }
    // A string at pos_ (on its opening quote), decoded into *out when out is not null.
    bool string(std::string* out) {
        const size_t start = pos_++;
        for (;;) {
            const size_t run = pos_;
            while (more() && peek() != '"' && peek() != '\\' && (unsigned char)peek() >= 0x20) {
                ++pos_;
            }
            if (out) out->append(s_.data() + run, pos_ - run);
            if (!more()) return pos_ = start, fail("unterminated string");
            const char c = s_[pos_++];
            if (c == '"') return true;
            if (c != '\\') {
                --pos_;
                return fail("a control character inside a string must be escaped");
            }
            if (!more()) return pos_ = start, fail("unterminated string");
            const char e = s_[pos_++];
            const char* from = "\"\\/bfnrt";
            const char* to = "\"\\/\b\f\n\r\t";
            const char* hit = std::strchr(from, e);
            if (e == 'u') {
                if (!unicode_escape(out)) return false;
            } else if (e != '\0' && hit != nullptr) {
                if (out) out->push_back(to[hit - from]);
            } else {
                pos_ -= 2;
                return fail(std::string("unknown escape \\") + e);
            }
        }
    }
    bool digits() {
        const size_t start = pos_;
        while (more() && peek() >= '0' && peek() <= '9') ++pos_;
        return pos_ > start;
    }
    bool number() {
        if (peek() == '-') ++pos_;
        if (peek() == '0') {
            ++pos_;
        } else if (!digits()) {
            return fail("malformed number");
        }
        if (peek() == '.' && (++pos_, !digits())) return fail("malformed number");
        if (peek() == 'e' || peek() == 'E') {
            ++pos_;
            if (peek() == '+' || peek() == '-') ++pos_;
            if (!digits()) return fail("malformed number");
        }
        return true;
    }
    bool literal(std::string_view word) {
        if (s_.substr(pos_, word.size()) != word) return fail("unexpected character");
        pos_ += word.size();
        return true;
    }
    // Skips any value at pos_ (whitespace before it already skipped).
    bool value(int depth) {
        if (depth > kMaxDepth) return fail("nested too deeply");
        const char c = peek();
        if (c == '"') return string(nullptr);
        if (c == 't') return literal("true");
        if (c == 'f') return literal("false");
        if (c == 'n') return literal("null");
        if (c == '-' || (c >= '0' && c <= '9')) return number();
        if (c != '{' && c != '[') return fail(more() ? "unexpected character" : "missing value");
        const char close = c == '{' ? '}' : ']';
        ++pos_;
        skip_ws();
        if (peek() == close) return ++pos_, true;
        for (;;) {
            skip_ws();
            if (close == '}') {
                if (peek() != '"') return fail("expected a key in double quotes");
                if (!string(nullptr) || !expect(':', "':' after a key")) return false;
                skip_ws();
            }
            if (!value(depth + 1)) return false;
            skip_ws();
            if (peek() == ',') {
                ++pos_;
                continue;
            }
            return expect(close, close == '}' ? "',' or '}'" : "',' or ']'");
        }
    }

    std::string_view s_;
    const std::string& field_;
    size_t pos_ = 0;
    std::string err_;
    size_t err_pos_ = 0;
    std::string err_what_;  // err_ without its column, for located()
};

}  // namespace

bool json_text_field(std::string_view line, std::string* text, std::string* why,
                     const std::string& field) {
    return JsonScanner(line, field).text_field(text, why);
}

bool json_array_next(std::string_view json, size_t* pos, const std::string& field,
                     std::string* text, std::string* why) {
    why->clear();
    return JsonScanner(json, field).array_element(pos, text, why);
}

}  // namespace prep
