// cli.cpp: the option table's parser, help, printer and JSON writer (see cli.h).
#include "cli.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstring>

#include "util.h"

namespace llmc {
namespace cli {
namespace {

constexpr size_t kHelpWidth = 100;   // columns of the help and the printed values
constexpr size_t kHelpIndent = 26;   // where an option's help starts
constexpr size_t kValueIndent = 17;  // where the printed values start (the trainer's log column)

const Option* find_option(const Program& p, const std::string& name) {
    for (const Option& o : p.options) {
        if (o.is_heading()) continue;
        for (const std::string& n : option_names(o))
            if (n == name) return &o;
    }
    return nullptr;
}

// A word that names one of the program's options (or -h/--help), with or without "=VALUE".
bool names_an_option(const Program& p, const char* word) {
    const std::string name = std::string(word).substr(0, std::string(word).find('='));
    return name == "-h" || name == "--help" || find_option(p, name) != nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); j++) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag = up;
        }
    }
    return row[b.size()];
}

// "; did you mean --seed?" for a name within 2 edits (a third of its length) of a known one.
std::string suggestion(const Program& p, const std::string& name) {
    std::string best;
    size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
    for (const Option& o : p.options) {
        if (o.is_heading()) continue;
        for (const std::string& n : option_names(o)) {
            const size_t d = edit_distance(name, n);
            if (d < best_d && n.size() > 2) best = n, best_d = d;
        }
    }
    return best.empty() ? "" : "; did you mean " + best + "?";
}

bool parse_whole(const std::string& text, long long* v) {
    char* end = nullptr;
    errno = 0;
    *v = std::strtoll(text.c_str(), &end, 10);
    return errno == 0 && !text.empty() && *end == '\0';
}

std::string choices_sentence(const char* choices) {  // "a|b|c" -> "a, b or c"
    std::string s = choices;
    const size_t last = s.rfind('|');
    if (last != std::string::npos) s.replace(last, 1, " or ");
    for (size_t at = s.find('|'); at != std::string::npos; at = s.find('|')) s.replace(at, 1, ", ");
    return s;
}

bool is_choice(const char* choices, const std::string& value) {
    const std::string list = std::string("|") + choices + "|";
    return !value.empty() && value.find('|') == std::string::npos &&
           list.find("|" + value + "|") != std::string::npos;
}

// Stores value (given as `name`) in o's field; false with one sentence in *error.
bool assign(const Option& o, const std::string& name, const std::string& value,
            std::string* error) {
    char buf[256];
    if (std::string* const* text = std::get_if<std::string*>(&o.field)) {
        if (o.choices != nullptr && !is_choice(o.choices, value)) {
            *error = name + " must be " + choices_sentence(o.choices) + ", not '" + value + "'";
            return false;
        }
        **text = value;
        return true;
    }
    if (float* const* f = std::get_if<float*>(&o.field)) {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(value.c_str(), &end);
        if (errno == ERANGE && v == 0.0) errno = 0;  // an underflow is a number, caught below
        if (errno != 0 || value.empty() || *end != '\0') {
            *error = name + " needs a number, got '" + value + "'";
            return false;
        }
        if (!(v >= o.float_lo && v <= o.float_hi)) {
            std::snprintf(buf, sizeof(buf), "%s must be in [%g, %g], got %s", name.c_str(),
                          o.float_lo, o.float_hi, value.c_str());
            *error = buf;
            return false;
        }
        **f = static_cast<float>(v);
        return true;
    }
    long long v = 0;
    if (!parse_whole(value, &v)) {
        *error = name + " needs a whole number, got '" + value + "'";
        return false;
    }
    if (v < o.int_lo || v > o.int_hi) {
        std::snprintf(buf, sizeof(buf), "%s must be in %lld..%lld, got %s", name.c_str(), o.int_lo,
                      o.int_hi, value.c_str());
        *error = buf;
        return false;
    }
    if (int* const* i = std::get_if<int*>(&o.field)) **i = static_cast<int>(v);
    if (long long* const* l = std::get_if<long long*>(&o.field)) **l = v;
    if (unsigned long long* const* u = std::get_if<unsigned long long*>(&o.field))
        **u = static_cast<unsigned long long>(v);
    return true;
}

// The shortest decimal that reads back as the same float.
std::string float_text(float v) {
    char buf[32];
    for (int digits = 1; digits <= 9; digits++) {
        std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
        if (std::strtof(buf, nullptr) == v) break;
    }
    return buf;
}

bool shell_safe(const std::string& s) {
    for (char c : s)
        if (!std::isalnum(static_cast<unsigned char>(c)) && std::strchr("_@%+=:,./-", c) == nullptr)
            return false;
    return !s.empty();
}

// Appends text to *out as words wrapped at kHelpWidth, each new line indented by `indent`;
// *col is the current column.
void wrap(const std::string& text, size_t indent, size_t* col, std::string* out) {
    size_t pos = 0;
    while (pos < text.size()) {
        if (text[pos] == ' ') {
            pos++;
            continue;
        }
        size_t end = std::min(text.find(' ', pos), text.size());
        // An option's name stays on the line of its value, "(default" on the line of the default.
        const std::string first = text.substr(pos, end - pos);
        if (end < text.size() && (first == "(default" || (first.size() >= 2 && first[0] == '-')))
            end = std::min(text.find(' ', end + 1), text.size());
        const std::string word = text.substr(pos, end - pos);
        const bool fresh = *col <= indent;
        if (!fresh && *col + 1 + word.size() > kHelpWidth) {
            *out += "\n" + std::string(indent, ' ');
            *col = indent;
        } else if (!fresh) {
            *out += ' ';
            (*col)++;
        }
        *out += word;
        *col += word.size();
        pos = end;
    }
}

// Whether a numeric field holds a value its option accepts (text is always accepted).
bool in_range(const Option& o) {
    long long v = 0;
    if (int* const* i = std::get_if<int*>(&o.field)) v = **i;
    if (long long* const* l = std::get_if<long long*>(&o.field)) v = **l;
    if (unsigned long long* const* u = std::get_if<unsigned long long*>(&o.field))
        return **u <= (unsigned long long)o.int_hi && (long long)**u >= o.int_lo;
    if (float* const* f = std::get_if<float*>(&o.field))
        return **f >= o.float_lo && **f <= o.float_hi;
    return std::get_if<std::string*>(&o.field) != nullptr || (v >= o.int_lo && v <= o.int_hi);
}

std::string default_of(const Option& o) {
    if (o.required != nullptr) return " (required)";
    if (o.default_text != nullptr) return std::string(" (default ") + o.default_text + ")";
    if (o.implicit != nullptr) return "";
    const std::string v = value_text(o);
    return v.empty() || v == "''" ? "" : " (default " + v + ")";
}

}  // namespace

std::vector<std::string> option_names(const Option& o) {
    std::vector<std::string> names;
    std::string cur;
    for (const char* p = o.names;; p++) {
        if (*p == ',' || *p == ' ' || *p == '\0') {
            if (!cur.empty()) names.push_back(cur);
            cur.clear();
            if (*p == '\0') break;
        } else {
            cur += *p;
        }
    }
    return names;
}

Option heading(const char* title, const char* note) {
    Option o;
    o.names = title;
    o.help = note;
    return o;
}

Option option(const char* names, const char* metavar, const char* key, int* field, long long lo,
              long long hi, const char* help) {
    Option o;
    o.names = names, o.metavar = metavar, o.key = key, o.help = help, o.field = field;
    o.int_lo = lo, o.int_hi = hi;
    return o;
}

Option option(const char* names, const char* metavar, const char* key, long long* field,
              long long lo, long long hi, const char* help) {
    Option o;
    o.names = names, o.metavar = metavar, o.key = key, o.help = help, o.field = field;
    o.int_lo = lo, o.int_hi = hi;
    return o;
}

Option option(const char* names, const char* metavar, const char* key, unsigned long long* field,
              long long lo, long long hi, const char* help) {
    Option o;
    o.names = names, o.metavar = metavar, o.key = key, o.help = help, o.field = field;
    o.int_lo = lo, o.int_hi = hi;
    return o;
}

Option option(const char* names, const char* metavar, const char* key, float* field, double lo,
              double hi, const char* help) {
    Option o;
    o.names = names, o.metavar = metavar, o.key = key, o.help = help, o.field = field;
    o.float_lo = lo, o.float_hi = hi;
    return o;
}

Option option(const char* names, const char* metavar, const char* key, std::string* field,
              const char* help) {
    Option o;
    o.names = names, o.metavar = metavar, o.key = key, o.help = help, o.field = field;
    return o;
}

Option choice(const char* names, const char* key, std::string* field, const char* choices,
              const char* help) {
    Option o = option(names, choices, key, field, help);
    o.choices = choices;
    return o;
}

Parsed parse(const Program& p, int argc, const char* const* argv, std::string* error) {
    std::vector<const Option*> seen;
    std::string last;  // the previous option as written, with its value
    for (int i = 1; i < argc; i++) {
        const std::string word = argv[i];
        if (p.positional != nullptr && word == "--") {
            p.positional->insert(p.positional->end(), argv + i + 1, argv + argc);
            break;
        }
        if (p.positional != nullptr && (word.size() < 2 || word[0] != '-')) {
            p.positional->push_back(word);
            continue;
        }
        if (word.size() < 2 || word[0] != '-' || word == "--") {
            *error = "stray argument '" + word + "'" + (last.empty() ? "" : " after " + last) +
                     ": an option takes one value";
            if (p.stray_hint != nullptr) *error += std::string("; ") + p.stray_hint;
            return Parsed::kError;
        }
        const size_t eq = word.find('=');
        const std::string name = word.substr(0, eq);
        const bool has_inline = eq != std::string::npos;
        if (name == "-h" || name == "--help") {
            // A word after -h is its value, unless the program takes positional words.
            if (has_inline || (p.positional == nullptr && i + 1 < argc && argv[i + 1][0] != '-')) {
                *error = name == "-h" && p.help_value != nullptr
                             ? p.help_value
                             : name + " takes no value; pass it alone for the help";
                return Parsed::kError;
            }
            return Parsed::kHelp;
        }
        const Option* o = find_option(p, name);
        if (o == nullptr) {
            for (const Refusal& r : p.refused) {
                if (name == r.name) {
                    *error = r.sentence;
                    return Parsed::kError;
                }
            }
            *error = "unknown option " + name + suggestion(p, name);
            return Parsed::kError;
        }
        std::string value;
        if (has_inline) {
            value = word.substr(eq + 1);
        } else if (o->implicit != nullptr) {
            value = i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : o->implicit;
        } else if (i + 1 >= argc || names_an_option(p, argv[i + 1])) {
            *error = name + " needs a value (" + o->metavar + ")";
            if (i + 1 < argc) *error += std::string(", but ") + argv[i + 1] + " follows it";
            return Parsed::kError;
        } else {
            value = argv[++i];
        }
        if (!assign(*o, name, value, error)) return Parsed::kError;
        if (o->given != nullptr) *o->given = true;
        seen.push_back(o);
        last = has_inline || value.empty() ? word : word + " " + value;
    }
    for (const Option& o : p.options) {
        if (o.required != nullptr && std::find(seen.begin(), seen.end(), &o) == seen.end()) {
            *error = o.required;
            return Parsed::kError;
        }
    }
    return Parsed::kOk;
}

void parse_or_exit(const Program& p, int argc, const char* const* argv) {
    const std::string help = help_text(p);  // before parsing: the defaults
    std::string error;
    const Parsed r = parse(p, argc, argv, &error);
    if (r == Parsed::kHelp) {
        std::fputs(help.c_str(), stdout);
        std::exit(0);
    }
    if (r == Parsed::kError) usage_error("%s", error.c_str());
}

std::string help_text(const Program& p) {
    std::string out = std::string("usage: ") + p.usage + "\n\n";
    size_t col = 0;
    wrap(p.about, 0, &col, &out);
    out += "\n";
    if (!p.options.empty() && !p.options.front().is_heading()) out += "\noptions:\n";
    for (const Option& o : p.options) {
        if (o.is_heading()) {
            out += std::string("\n") + o.names + ":\n";
            if (o.help[0] != '\0') {
                out += "  ";
                col = 2;
                wrap(o.help, 2, &col, &out);
                out += "\n";
            }
            continue;
        }
        std::string left = std::string("  ") + o.names;
        if (o.metavar[0] != '\0')
            left += o.implicit != nullptr ? std::string(" [") + o.metavar + "]"
                                          : std::string(" ") + o.metavar;
        out += left;
        if (left.size() + 2 > kHelpIndent) out += "\n", left.clear();
        out += std::string(kHelpIndent - left.size(), ' ');
        col = kHelpIndent;
        wrap(std::string(o.help) + default_of(o), kHelpIndent, &col, &out);
        out += "\n";
    }
    out += "\n  -h, --help" + std::string(kHelpIndent - 12, ' ') + "this text\n";
    if (p.footer[0] != '\0') out += std::string("\n") + p.footer;
    return out;
}

void usage_error(const char* fmt, ...) {
    std::va_list args;
    va_start(args, fmt);
    std::fprintf(stderr, "error: ");
    std::vfprintf(stderr, fmt, args);
    va_end(args);
    std::fprintf(stderr, "\n(run with --help for the options)\n");
    std::exit(2);
}

long long parse_int(const char* what, const std::string& text, long long lo, long long hi) {
    long long v = 0;
    if (!parse_whole(text, &v))
        usage_error("%s needs a whole number, got '%s'", what, text.c_str());
    if (v < lo || v > hi)
        usage_error("%s must be in %lld..%lld, got %s", what, lo, hi, text.c_str());
    return v;
}

std::string value_text(const Option& o) {
    if (int* const* i = std::get_if<int*>(&o.field)) return std::to_string(**i);
    if (long long* const* l = std::get_if<long long*>(&o.field)) return std::to_string(**l);
    if (unsigned long long* const* u = std::get_if<unsigned long long*>(&o.field))
        return std::to_string(**u);
    if (float* const* f = std::get_if<float*>(&o.field)) return float_text(**f);
    if (std::string* const* t = std::get_if<std::string*>(&o.field)) {
        const std::string& s = **t;
        if (shell_safe(s)) return s;
        std::string quoted = "'";
        for (char c : s) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
        return quoted + "'";
    }
    return "";
}

void print_values(const std::vector<Option>& options, FILE* out) {
    std::string text;
    size_t col = 0;
    for (const Option& o : options) {
        if (o.is_heading()) {
            if (!text.empty()) text += "\n";
            text += o.names;
            text += std::string(
                kValueIndent > std::strlen(o.names) ? kValueIndent - std::strlen(o.names) : 1, ' ');
            col = kValueIndent;
            continue;
        }
        const std::string* t = std::get_if<std::string*>(&o.field) != nullptr
                                   ? *std::get_if<std::string*>(&o.field)
                                   : nullptr;
        if (o.implicit != nullptr && o.given != nullptr && !*o.given) continue;
        if (o.implicit == nullptr && t != nullptr && t->empty()) continue;
        if (!in_range(o)) continue;  // a value no command line gives: "not set" (--stop-after 0)
        const std::string name = option_names(o).front();
        const std::string v = t != nullptr && t->empty() ? "" : " " + value_text(o);
        // An option and its value stay on one line.
        if (col > kValueIndent && col + 1 + name.size() + v.size() > kHelpWidth) {
            text += "\n" + std::string(kValueIndent, ' ');
            col = kValueIndent;
        } else if (col > kValueIndent) {
            text += ' ';
            col++;
        }
        text += name + v;
        col += name.size() + v.size();
    }
    std::fprintf(out, "%s\n", text.c_str());
}

std::string json_fields(const std::vector<Option>& options) {
    std::string out;
    char buf[64];
    for (const Option& o : options) {
        if (o.is_heading()) continue;
        if (o.given_key != nullptr && o.given != nullptr)
            out += std::string(out.empty() ? "" : ",\n") + "  \"" + o.given_key +
                   "\": " + (*o.given ? "true" : "false");
        std::string v;
        if (float* const* f = std::get_if<float*>(&o.field)) {
            std::snprintf(buf, sizeof(buf), "%.9g", **f);
            v = buf;
        } else if (std::string* const* t = std::get_if<std::string*>(&o.field)) {
            v = json_string(**t);
        } else {
            v = value_text(o);
        }
        out += std::string(out.empty() ? "" : ",\n") + "  \"" + o.key + "\": " + v;
    }
    return out;
}

}  // namespace cli
}  // namespace llmc
