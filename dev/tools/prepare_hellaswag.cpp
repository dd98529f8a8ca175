// prepare_hellaswag.cpp: HellaSwag's JSONL -> an eval file in llm.c's format (llmc/hellaswag.h),
// the file train_gpt2cu --hellaswag reads.
//
//   prepare_hellaswag [--tokenizer DIR] -o OUT.bin hellaswag_val.jsonl
//
// Each non-blank line is one JSON object with "ctx" (the context, a string), "endings" (the
// candidate endings, strings) and "label" (the index of the right one); other fields are
// ignored. The context is encoded with GPT-2's tokenizer (llmc/tokenizer.h) as it stands, each
// ending with a space in front, as GPT-2 sees a continuation (what llm.c's hellaswag.py writes).
// A line that is not such an object stops the tool with one sentence naming the file, the line
// and the column, and nothing is written: the output appears, under its name, only when every
// line is good.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hellaswag.h"
#include "json_value.h"
#include "tokenizer.h"

using namespace llmc;

namespace {

struct Options {
    std::string input, output, tokenizer_dir = "data/gpt2_tokenizer";
};

[[noreturn]] void usage(const std::string& sentence) {
    if (!sentence.empty()) std::fprintf(stderr, "error: %s\n", sentence.c_str());
    std::fprintf(stderr,
                 "usage: prepare_hellaswag [--tokenizer DIR] -o OUT.bin INPUT.jsonl\n"
                 "  HellaSwag JSONL (objects with ctx, endings, label) -> llm.c eval file\n"
                 "  --tokenizer DIR  GPT-2's encoder.json and vocab.bpe (default "
                 "data/gpt2_tokenizer;\n"
                 "                   scripts/data/tokenizer_files.sh DIR fetches them)\n");
    std::exit(sentence.empty() ? 0 : 2);
}

Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") usage("");
        if (a == "-o" || a == "--tokenizer") {
            if (i + 1 >= argc) usage(a + " needs a value");
            (a == "-o" ? o.output : o.tokenizer_dir) = argv[++i];
        } else if (a.size() > 1 && a[0] == '-') {
            usage("unknown option " + a);
        } else if (o.input.empty()) {
            o.input = a;
        } else {
            usage("one input file only (got " + o.input + " and " + a + ")");
        }
    }
    if (o.input.empty()) usage("no input: name HellaSwag's JSONL file (e.g. hellaswag_val.jsonl)");
    if (o.output.empty()) usage("no output: pass -o OUT.bin");
    return o;
}

// Fills *ex from one parsed line; false with *why and the column of the offending value.
bool example_of(const JsonValue& v, const Tokenizer& tok, EvalExample* ex, size_t* column,
                std::string* why) {
    *column = v.offset + 1;
    if (v.kind != JsonValue::Kind::kObject) {
        *why = std::string("the line is ") + json_kind_name(v.kind) + ", not a JSON object";
        return false;
    }
    const JsonValue* ctx = v.find("ctx");
    const JsonValue* endings = v.find("endings");
    const JsonValue* label = v.find("label");
    if (ctx == nullptr || endings == nullptr || label == nullptr) {
        *why = std::string("the object has no \"") +
               (ctx == nullptr       ? "ctx"
                : endings == nullptr ? "endings"
                                     : "label") +
               "\" field (HellaSwag's test split has no labels: use the validation split)";
        return false;
    }
    if (ctx->kind != JsonValue::Kind::kString || ctx->string.empty()) {
        *column = ctx->offset + 1;
        *why = "\"ctx\" must be a non-empty string";
        return false;
    }
    if (endings->kind != JsonValue::Kind::kArray || endings->items.empty()) {
        *column = endings->offset + 1;
        *why = "\"endings\" must be a non-empty array of strings";
        return false;
    }
    const long long k = (long long)endings->items.size();
    if (label->kind != JsonValue::Kind::kNumber || !label->integer || label->number < 0 ||
        label->number >= (double)k) {
        *column = label->offset + 1;
        *why = "\"label\" must be a whole number from 0 to " + std::to_string(k - 1) +
               " (an index into the " + std::to_string(k) + " endings)";
        return false;
    }
    ex->label = (int)label->number;
    ex->context.clear();
    tok.encode(ctx->string, &ex->context);
    ex->endings.assign((size_t)k, {});
    for (long long j = 0; j < k; j++) {
        const JsonValue& e = endings->items[(size_t)j];
        if (e.kind != JsonValue::Kind::kString || e.string.empty()) {
            *column = e.offset + 1;
            *why = "ending " + std::to_string(j) + " must be a non-empty string";
            return false;
        }
        tok.encode(" " + e.string, &ex->endings[(size_t)j]);
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_args(argc, argv);
    Tokenizer tok;
    std::string why;
    if (!tok.load(o.tokenizer_dir, &why)) {
        std::fprintf(stderr, "error: %s\n", why.c_str());
        return 1;
    }
    std::FILE* f = std::fopen(o.input.c_str(), "rb");
    if (f == nullptr) {
        std::fprintf(stderr, "error: cannot read %s: %s\n", o.input.c_str(), std::strerror(errno));
        return 1;
    }
    std::vector<EvalExample> examples;
    char* buf = nullptr;
    size_t cap = 0;
    long long line_no = 0;
    ssize_t n = 0;
    size_t longest_row = 0;
    while ((n = getline(&buf, &cap, f)) >= 0) {
        ++line_no;
        std::string line(buf, (size_t)n);
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
        size_t skip = line_no == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
        if (line.find_first_not_of(" \t", skip) == std::string::npos) continue;
        JsonValue v;
        size_t column = 0;
        EvalExample ex;
        const bool ok = json_parse(std::string_view(line).substr(skip), &v, &column, &why) &&
                        example_of(v, tok, &ex, &column, &why);
        if (!ok) {
            std::fprintf(stderr, "error: %s line %lld column %zu: %s; nothing was written.\n",
                         o.input.c_str(), line_no, column + skip, why.c_str());
            std::fclose(f);
            std::free(buf);
            return 1;
        }
        for (const std::vector<int>& e : ex.endings)
            longest_row = std::max(longest_row, ex.context.size() + e.size() - 1);
        examples.push_back(std::move(ex));
    }
    const bool read_error = std::ferror(f) != 0;
    std::fclose(f);
    std::free(buf);
    if (read_error) {
        std::fprintf(stderr, "error: cannot read %s; nothing was written.\n", o.input.c_str());
        return 1;
    }
    if (examples.empty()) {
        std::fprintf(stderr, "error: %s holds no examples; nothing was written.\n",
                     o.input.c_str());
        return 1;
    }
    write_eval_file(o.output, examples);
    std::printf(
        "wrote %s: %zu examples; the longest context + ending is %zu positions (a "
        "shorter -t drops context tokens from the left)\n",
        o.output.c_str(), examples.size(), longest_row);
    return 0;
}
