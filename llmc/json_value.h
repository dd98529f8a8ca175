// json_value.h: a small JSON reader (RFC 8259) that builds a tree of one JSON text, for the
// tools that read records (dev/tools/prepare_hellaswag.cpp: HellaSwag's JSONL; prepare_data:
// JSONL lines and the elements of a JSON array). Strings are decoded to UTF-8 (escapes, \u
// surrogate pairs; a lone surrogate becomes U+FFFD); numbers keep their value as a double.
// Host-only C++, no dependencies.
//
// A parse error is reported as the 1-based column (byte offset in the text + 1) and what is
// wrong, so a caller can name file, line and column in one sentence.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmc {

struct JsonValue {
    enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
    Kind kind = Kind::kNull;
    size_t offset = 0;  // where the value starts in the text (bytes; column = offset + 1)
    bool boolean = false;
    double number = 0.0;
    bool integer = false;  // the number was written without a fraction or exponent
    std::string string;
    std::vector<JsonValue> items;                            // kArray
    std::vector<std::pair<std::string, JsonValue>> members;  // kObject, in text order

    // The member named key (the last one when a key repeats, as Python's json keeps), or null.
    const JsonValue* find(std::string_view key) const;
};

// "a string", "an array", ... for messages.
const char* json_kind_name(JsonValue::Kind kind);

// Parses one JSON text (whitespace around it allowed). On failure returns false and sets
// *column (1-based) and *why (what is wrong there).
bool json_parse(std::string_view text, JsonValue* out, size_t* column, std::string* why);

// Parses one JSON value of text from *pos (whitespace before it skipped); what follows it is
// left alone. On success *pos is just past the value (offsets in *out are into text); on failure
// *pos is where the error is and *why says what.
bool json_parse_at(std::string_view text, size_t* pos, JsonValue* out, std::string* why);

}  // namespace llmc
