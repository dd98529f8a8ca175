// prepare_data_json.cpp: prepare_data's JSON inputs (prepare_data_io.h): the text field of a
// JSONL line, and of each element of a JSON array, read with llmc's JSON reader (json_value.h);
// the errors name the column (a line) or the line and column (an array) and what is wrong.
#include <string>

#include "json_value.h"
#include "prepare_data_io.h"

namespace prep {

namespace {

using llmc::JsonValue;

size_t skip_ws(std::string_view s, size_t pos) {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r'))
        ++pos;
    return pos;
}

// The string member `field` of an object: nullptr with *why when it is missing or not a string.
const JsonValue* text_member(const JsonValue& object, const std::string& field,
                             const char* missing_tail, std::string* why) {
    const JsonValue* t = object.find(field);
    if (t == nullptr) {
        *why = "the " + std::string(missing_tail) + " has no \"" + field + "\" field";
    } else if (t->kind != JsonValue::Kind::kString) {
        *why = "\"" + field + "\" is " + llmc::json_kind_name(t->kind) + ", not a string";
        t = nullptr;
    }
    return t;
}

// "line L column C: what" for the byte offset `at` of a whole-file JSON text.
bool located(std::string_view json, size_t at, const std::string& what, std::string* why) {
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < at && i < json.size(); ++i) {
        if (json[i] == '\n') ++line, line_start = i + 1;
    }
    *why = "line " + std::to_string(line) + " column " + std::to_string(at - line_start + 1) +
           ": " + what;
    return false;
}

}  // namespace

bool json_text_field(std::string_view line, std::string* text, std::string* why,
                     const std::string& field) {
    size_t pos = skip_ws(line, 0);
    if (pos == line.size()) {
        *why = "the line is empty";
        return false;
    }
    if (line[pos] != '{') {
        *why = "the line is not a JSON object (it must start with '{')";
        return false;
    }
    JsonValue v;
    std::string what;
    bool ok = llmc::json_parse_at(line, &pos, &v, &what);
    if (ok && (pos = skip_ws(line, pos)) < line.size()) {
        ok = false;
        what = "unexpected text after the JSON object";
    }
    if (!ok) {
        *why = "malformed JSON at column " + std::to_string(pos + 1) + ": " + what;
        return false;
    }
    const JsonValue* t = text_member(v, field, "JSON object", why);
    if (t == nullptr) {
        if (v.find(field) == nullptr) *why += " (each line needs one)";
        return false;
    }
    *text = t->string;
    return true;
}

bool json_array_next(std::string_view json, size_t* pos, const std::string& field,
                     std::string* text, std::string* why) {
    why->clear();
    if (*pos == std::string_view::npos) return false;
    size_t p = *pos;
    // After the closing ']' only whitespace may follow; marks the end (*pos = npos).
    auto end_of_array = [&]() {
        p = skip_ws(json, p);
        if (p < json.size()) return located(json, p, "unexpected text after the JSON array", why);
        *pos = std::string_view::npos;
        return true;
    };
    if (p == 0) {
        if (json.substr(0, 3) == "\xEF\xBB\xBF") p = 3;
        p = skip_ws(json, p);
        if (p == json.size() || json[p] != '[')
            return located(json, p, "a .json input must be a JSON array of objects", why);
        p = skip_ws(json, p + 1);
        if (p < json.size() && json[p] == ']') {
            ++p;
            end_of_array();
            return false;  // an empty array: no element (*why says so when text follows)
        }
    }
    p = skip_ws(json, p);
    if (p == json.size() || json[p] != '{')
        return located(json, p, "each element of the array must be a JSON object", why);
    const size_t start = p;
    JsonValue v;
    std::string what;
    if (!llmc::json_parse_at(json, &p, &v, &what))
        return located(json, p, "malformed JSON: " + what, why);
    const JsonValue* t = text_member(v, field, "object", &what);
    if (t == nullptr) {
        const JsonValue* bad = v.find(field);
        return located(json, bad != nullptr ? bad->offset : start,
                       bad != nullptr ? "malformed JSON: " + what : what, why);
    }
    *text = t->string;
    p = skip_ws(json, p);
    if (p < json.size() && json[p] == ',') {
        *pos = p + 1;
        return true;
    }
    if (p == json.size() || json[p] != ']')
        return located(json, p, "expected ',' or ']' after an array element", why);
    ++p;
    return end_of_array();  // this element is the last
}

}  // namespace prep
