// json_value.cpp: the JSON reader of json_value.h, recursive descent over one text.
#include "json_value.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace llmc {
namespace {

constexpr int kMaxDepth = 256;  // deeper nesting is refused rather than risking the stack

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

class Parser {
  public:
    explicit Parser(std::string_view s) : s_(s) {}

    // One value from *pos (whitespace before it skipped); with `whole`, only whitespace may
    // follow it. *pos ends past the value, or where the error is (then *why says what).
    bool parse(size_t* pos, bool whole, JsonValue* out, std::string* why) {
        pos_ = *pos;
        skip_ws();
        bool ok = value(out, 0);
        if (ok && whole) {
            skip_ws();
            if (more()) ok = fail("unexpected text after the JSON value");
        }
        *pos = ok ? pos_ : err_pos_;
        if (!ok) *why = err_;
        return ok;
    }

  private:
    bool fail(const std::string& what) {
        if (err_.empty()) {
            err_ = what;
            err_pos_ = pos_;
        }
        return false;
    }
    bool more() const { return pos_ < s_.size(); }
    char peek() const { return more() ? s_[pos_] : '\0'; }
    void skip_ws() {
        while (more() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
            ++pos_;
        }
    }

    bool value(JsonValue* v, int depth) {
        if (depth > kMaxDepth) return fail("nested too deeply");
        v->offset = pos_;
        const char c = peek();
        if (c == '"') {
            v->kind = JsonValue::Kind::kString;
            return string(&v->string);
        }
        if (c == '{') return object(v, depth);
        if (c == '[') return array(v, depth);
        if (c == 't' || c == 'f') {
            v->kind = JsonValue::Kind::kBool;
            v->boolean = c == 't';
            return literal(c == 't' ? "true" : "false");
        }
        if (c == 'n') {
            v->kind = JsonValue::Kind::kNull;
            return literal("null");
        }
        if (c == '-' || (c >= '0' && c <= '9')) return number(v);
        return fail(more() ? "unexpected character" : "missing value");
    }

    bool literal(std::string_view word) {
        if (s_.substr(pos_, word.size()) != word) return fail("unexpected character");
        pos_ += word.size();
        return true;
    }

    bool digits() {
        const size_t start = pos_;
        while (more() && peek() >= '0' && peek() <= '9') ++pos_;
        return pos_ > start;
    }

    bool number(JsonValue* v) {
        const size_t start = pos_;
        bool integer = true;
        if (peek() == '-') ++pos_;
        if (peek() == '0') {
            ++pos_;
        } else if (!digits()) {
            return fail("malformed number");
        }
        if (peek() == '.') {
            ++pos_;
            integer = false;
            if (!digits()) return fail("malformed number");
        }
        if (peek() == 'e' || peek() == 'E') {
            ++pos_;
            integer = false;
            if (peek() == '+' || peek() == '-') ++pos_;
            if (!digits()) return fail("malformed number");
        }
        const std::string text(s_.substr(start, pos_ - start));
        v->kind = JsonValue::Kind::kNumber;
        v->number = std::strtod(text.c_str(), nullptr);
        v->integer = integer;
        return true;
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

    // \uXXXX (pos_ just after the 'u'), joined with a following low surrogate to one character.
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
                pos_ = save;
            }
        }
        if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;  // UTF-8 cannot hold a lone surrogate
        append_utf8(cp, out);
        return true;
    }

    bool string(std::string* out) {
        const size_t start = pos_++;
        out->clear();
        for (;;) {
            const size_t run = pos_;
            while (more() && peek() != '"' && peek() != '\\' && (unsigned char)peek() >= 0x20) {
                ++pos_;
            }
            out->append(s_.data() + run, pos_ - run);
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
            const char* hit = e != '\0' ? std::strchr(from, e) : nullptr;
            if (e == 'u') {
                if (!unicode_escape(out)) return false;
            } else if (hit != nullptr) {
                out->push_back(to[hit - from]);
            } else {
                pos_ -= 2;
                return fail(std::string("unknown escape \\") + e);
            }
        }
    }

    bool array(JsonValue* v, int depth) {
        v->kind = JsonValue::Kind::kArray;
        ++pos_;
        skip_ws();
        if (peek() == ']') return ++pos_, true;
        for (;;) {
            skip_ws();
            v->items.emplace_back();
            if (!value(&v->items.back(), depth + 1)) return false;
            skip_ws();
            if (peek() == ',') {
                ++pos_;
                continue;
            }
            if (peek() != ']') return fail("expected ',' or ']' in an array");
            ++pos_;
            return true;
        }
    }

    bool object(JsonValue* v, int depth) {
        v->kind = JsonValue::Kind::kObject;
        ++pos_;
        skip_ws();
        if (peek() == '}') return ++pos_, true;
        for (;;) {
            skip_ws();
            if (peek() != '"') return fail("expected a key in double quotes");
            v->members.emplace_back();
            if (!string(&v->members.back().first)) return false;
            skip_ws();
            if (peek() != ':') return fail("expected ':' after a key");
            ++pos_;
            skip_ws();
            if (!value(&v->members.back().second, depth + 1)) return false;
            skip_ws();
            if (peek() == ',') {
                ++pos_;
                continue;
            }
            if (peek() != '}') return fail("expected ',' or '}' in an object");
            ++pos_;
            return true;
        }
    }

    std::string_view s_;
    size_t pos_ = 0;
    std::string err_;
    size_t err_pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::find(std::string_view key) const {
    for (size_t i = members.size(); i-- > 0;) {
        if (members[i].first == key) return &members[i].second;
    }
    return nullptr;
}

const char* json_kind_name(JsonValue::Kind kind) {
    switch (kind) {
        case JsonValue::Kind::kNull:
            return "null";
        case JsonValue::Kind::kBool:
            return "a boolean";
        case JsonValue::Kind::kNumber:
            return "a number";
        case JsonValue::Kind::kString:
            return "a string";
        case JsonValue::Kind::kArray:
            return "an array";
        case JsonValue::Kind::kObject:
            return "an object";
    }
    return "a value";
}

bool json_parse(std::string_view text, JsonValue* out, size_t* column, std::string* why) {
    *out = JsonValue{};
    size_t pos = 0;
    const bool ok = Parser(text).parse(&pos, true, out, why);
    if (!ok) *column = pos + 1;
    return ok;
}

bool json_parse_at(std::string_view text, size_t* pos, JsonValue* out, std::string* why) {
    *out = JsonValue{};
    return Parser(text).parse(pos, false, out, why);
}

}  // namespace llmc
