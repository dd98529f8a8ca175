// cli.h: command lines from one table of options (host code, no CUDA).
//
// A program lists each option once: its names ("-b, --batch-size"), the field it fills (int,
// long long, unsigned long long, float or std::string), a range or a list of choices, a help
// line and the JSON key it is saved under. Its default is the field's value before parsing.
// From the table come the parser, the --help text, the resolved configuration printed at start
// and the JSON object a run saves, so an option is written in one place.
//
// The parser's rules:
//   -k VALUE, -k=VALUE, --key VALUE and --key=VALUE; a later option overrides an earlier one.
//   A name is looked up before its value is taken: an unknown name is called unknown wherever it
//   stands, a known one at the end of the line is missing its value, and a word where an option
//   should stand is a stray word, unless the program takes positional words (INPUT...).
//   A value is the next word even when it starts with '-' (-1 is a number), unless that word is
//   one of the program's own options. An option with an implicit value (--resume [PATH]) takes
//   the next word only when it does not start with '-'.
//   -h and --help print the help; given a value (-h 1) they are refused (-h VALUE with the
//   program's own sentence, if it has one).
//   The program's refused names (another program's flags that mean something else here) are
//   refused with their own sentence.
// Every refusal is one sentence on stderr and exit code 2.
#pragma once
#include <cstdio>
#include <string>
#include <variant>
#include <vector>

namespace llmc {
namespace cli {

// Where an option's value goes; std::monostate marks a heading of the help.
using Field =
    std::variant<std::monostate, int*, long long*, unsigned long long*, float*, std::string*>;

// What a resumed run may do with an option's value (for programs that checkpoint).
enum class Resume { kFree, kMustMatch, kMayChange };

struct Option {
    const char* names = "";            // "-b, --batch-size" (one or both forms); a heading's title
    const char* metavar = "";          // the value's name in the help: "B"
    const char* key = "";              // the JSON key
    const char* help = "";             // one paragraph; a heading's note
    Field field;                       // where the value goes (none: a heading)
    long long int_lo = 0, int_hi = 0;  // integer fields: the accepted range
    double float_lo = 0.0, float_hi = 0.0;  // float fields: the accepted range
    const char* choices = nullptr;          // text fields: "a|b|c" accepts only these
    const char* implicit = nullptr;         // the value when given alone (nullptr: needs one)
    bool* given = nullptr;                  // set when the option appears on the line
    const char* given_key = nullptr;        // JSON key of *given (nullptr: not written)
    const char* default_text = nullptr;     // the help's default where the field's value is
                                            // not the way to say it
    const char* required = nullptr;         // the sentence when the option is missing
    Resume resume = Resume::kFree;          // what a resume may do (programs that checkpoint)
    int slot = -1;                          // ... and where their checkpoints keep the value

    bool is_heading() const { return field.index() == 0; }
    Option& with_default(const char* text) {
        default_text = text;
        return *this;
    }
    Option& optional_value(const char* implicit_value) {
        implicit = implicit_value;
        return *this;
    }
    Option& mark_given(bool* flag, const char* json_key = nullptr) {
        given = flag;
        given_key = json_key;
        return *this;
    }
    Option& must_be_given(const char* sentence) {
        required = sentence;
        return *this;
    }
    Option& on_resume(Resume what, int header_slot) {
        resume = what;
        slot = header_slot;
        return *this;
    }
};

// A heading of the help (and of the printed configuration), with an optional note under it.
Option heading(const char* title, const char* note = "");
// An option of each field type: integers and floats within [lo, hi], text as given.
Option option(const char* names, const char* metavar, const char* key, int* field, long long lo,
              long long hi, const char* help);
Option option(const char* names, const char* metavar, const char* key, long long* field,
              long long lo, long long hi, const char* help);
Option option(const char* names, const char* metavar, const char* key, unsigned long long* field,
              long long lo, long long hi, const char* help);
Option option(const char* names, const char* metavar, const char* key, float* field, double lo,
              double hi, const char* help);
Option option(const char* names, const char* metavar, const char* key, std::string* field,
              const char* help);
// A text option that accepts only the names in choices ("constant|linear|cosine|wsd").
Option choice(const char* names, const char* key, std::string* field, const char* choices,
              const char* help);

// A name that means something else here, refused with its sentence.
struct Refusal {
    const char* name;  // "-s"
    std::string sentence;
};

struct Program {
    const char* usage = "";   // "train_gpt2cu -i TRAIN_GLOB [options]"
    const char* about = "";   // a paragraph under the usage line
    const char* footer = "";  // printed as it is after the options (environment variables, ...)
    std::vector<Option> options;
    std::vector<Refusal> refused;
    const char* help_value = nullptr;  // the sentence for -h VALUE (nullptr: a plain one)
    const char* stray_hint = nullptr;  // appended to the sentence about a stray word
    // Words that are not options nor their values ("-" included, and every word after "--"),
    // in order; nullptr: each such word is a stray word.
    std::vector<std::string>* positional = nullptr;
};

enum class Parsed { kOk, kHelp, kError };

// Fills the options' fields from argv[1..argc). kHelp for -h/--help; kError with one sentence in
// *error (fields may then be partly filled).
Parsed parse(const Program& program, int argc, const char* const* argv, std::string* error);
// parse(); prints the help and exits 0 on -h/--help, exits 2 with the sentence on an error.
void parse_or_exit(const Program& program, int argc, const char* const* argv);
// The --help text; defaults are the fields' values now, so call it before parsing.
std::string help_text(const Program& program);

// "error: <sentence>" and a pointer to --help on stderr, then exit code 2.
[[noreturn]] __attribute__((format(printf, 1, 2))) void usage_error(const char* fmt, ...);
// text as a whole number within [lo, hi], or usage_error() naming `what`.
long long parse_int(const char* what, const std::string& text, long long lo, long long hi);

// The option's names as written in the table: {"-b", "--batch-size"}.
std::vector<std::string> option_names(const Option& option);
// The field's value as a command line would give it: a number, or text quoted for the shell
// where it needs to be ("" for empty text).
std::string value_text(const Option& option);
// The options' values, one line per heading: "batch            -b 4 -t 1024 -d 4096". Left
// out: empty text, implicit-value options that were not given, and numbers outside their range
// (a sentinel such as 0 for "not set").
void print_values(const std::vector<Option>& options, FILE* out);
// The options as JSON "key": value lines (indent two spaces, comma-separated, no braces):
// integers, floats with 9 significant digits (every float apart), text as JSON strings.
std::string json_fields(const std::vector<Option>& options);

}  // namespace cli
}  // namespace llmc
