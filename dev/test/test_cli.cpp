// test_cli.cpp: host test of llmc/cli (the option-table parser, help, printer and JSON writer)
// and of the trainer's table in llmc/train_config: every form an option may take, every refusal
// named for what it is (unknown option, stray word, missing value, llm.c's flags), the help made
// from the table, the printed configuration and config.json's keys. scripts/test/test_cli.sh runs
// the binaries themselves.
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "cli.h"
#include "host_test.h"
#include "train_config.h"

namespace {

using llmc::cli::Parsed;

// A small program with one option of each kind.
struct Toy {
    int n = 3;
    long long big = -1;
    float x = 0.5f;
    std::string name = "abc", mode = "fast", path;
    bool path_given = false;
};

llmc::cli::Program toy_program(Toy* t) {
    using llmc::cli::option;
    llmc::cli::Program p;
    p.usage = "toy [options]";
    p.about = "A toy.";
    p.options = {
        llmc::cli::heading("numbers"),
        option("-n, --count", "N", "n", &t->n, 0, 10, "a count"),
        option("--big", "B", "big", &t->big, -5, 1ll << 40, "a big one").with_default("none"),
        option("-x", "X", "x", &t->x, -1.0, 1.0, "a float"),
        llmc::cli::heading("text"),
        option("--name", "NAME", "name", &t->name, "a name")
            .must_be_given("a name is required: pass --name NAME"),
        llmc::cli::choice("--mode", "mode", &t->mode, "fast|slow|off", "a mode"),
        option("--path", "PATH", "path", &t->path, "a path")
            .optional_value("")
            .mark_given(&t->path_given, "path_given"),
    };
    p.refused = {{"-s", "-s is another program's; here --name"}};
    p.help_value = "-h N is another program's switch";
    p.stray_hint = "quote globs";
    return p;
}

// Parses words (argv[0] added) into a fresh Toy; returns the outcome and the sentence.
Parsed parse_toy(std::vector<const char*> words, Toy* t, std::string* error) {
    words.insert(words.begin(), "toy");
    error->clear();
    return llmc::cli::parse(toy_program(t), (int)words.size(), words.data(), error);
}

void expect_ok(std::vector<const char*> words, const char* what,
               const std::function<bool(const Toy&)>& holds) {
    Toy t;
    std::string error;
    const Parsed r = parse_toy(words, &t, &error);
    check(r == Parsed::kOk && holds(t), "%s (%s)", what, error.c_str());
}

void expect_error(std::vector<const char*> words, const char* phrase) {
    Toy t;
    std::string error;
    const Parsed r = parse_toy(words, &t, &error);
    std::string line;
    for (const char* w : words) line += std::string(" ") + w;
    check(r == Parsed::kError && error.find(phrase) != std::string::npos,
          "toy%s -> \"%s\" (want \"%s\")", line.c_str(), error.c_str(), phrase);
}

void test_forms() {
    auto n7 = [](const Toy& t) { return t.n == 7; };
    expect_ok({"--name", "a", "-n", "7"}, "-n 7", n7);
    expect_ok({"--name", "a", "-n=7"}, "-n=7", n7);
    expect_ok({"--name", "a", "--count", "7"}, "--count 7", n7);
    expect_ok({"--name=a", "--count=7"}, "--count=7 and --name=a", n7);
    expect_ok({"--name", "a", "-n", "2", "-n", "7"}, "a later option overrides an earlier one", n7);
    expect_ok({"--name", "a", "-x", "-0.25"}, "a value may start with '-'",
              [](const Toy& t) { return t.x == -0.25f; });
    expect_ok({"--name", "a=b"}, "a value may hold '='",
              [](const Toy& t) { return t.name == "a=b"; });
    expect_ok({"--name", "a", "--big", "1099511627776"}, "long long up to its bound",
              [](const Toy& t) { return t.big == (1ll << 40); });
    expect_ok({"--name", "a", "--mode", "slow"}, "a choice",
              [](const Toy& t) { return t.mode == "slow"; });
    expect_ok({"--name", "a", "--path"}, "an optional value given alone",
              [](const Toy& t) { return t.path_given && t.path.empty(); });
    expect_ok({"--name", "a", "--path", "p/q", "-n", "1"}, "an optional value given",
              [](const Toy& t) { return t.path_given && t.path == "p/q" && t.n == 1; });
    expect_ok({"--path", "-n", "1", "--name", "a"}, "an optional value is not the next option",
              [](const Toy& t) { return t.path_given && t.path.empty() && t.n == 1; });
    expect_ok({"--name", "a"}, "defaults stay", [](const Toy& t) {
        return t.n == 3 && t.x == 0.5f && t.mode == "fast" && !t.path_given;
    });
}

void test_refusals() {
    expect_error({"--name", "a", "--bogus"}, "unknown option --bogus");
    expect_error({"--name", "a", "--bogus", "1"}, "unknown option --bogus");
    expect_error({"--name", "a", "--cuont", "1"}, "unknown option --cuont; did you mean --count?");
    expect_error({"--name", "a", "-n"}, "-n needs a value (N)");
    expect_error({"--name", "a", "-n", "--mode", "slow"},
                 "-n needs a value (N), but --mode follows");
    expect_error({"--name", "a", "-n", "1", "stray"}, "stray argument 'stray' after -n 1");
    expect_error({"stray", "--name", "a"}, "stray argument 'stray'");
    expect_error({"--name", "a", "-n", "1", "stray"}, "; quote globs");
    expect_error({"--name", "a", "-"}, "stray argument '-'");
    expect_error({"--name", "a", "-n", "11"}, "-n must be in 0..10, got 11");
    expect_error({"--name", "a", "--count=-1"}, "--count must be in 0..10, got -1");
    expect_error({"--name", "a", "-n", "1.5"}, "-n needs a whole number, got '1.5'");
    expect_error({"--name", "a", "-n="}, "-n needs a whole number, got ''");
    expect_error({"--name", "a", "-x", "2"}, "-x must be in [-1, 1], got 2");
    expect_error({"--name", "a", "-x", "nan"}, "-x must be in [-1, 1], got nan");
    expect_error({"--name", "a", "-x", "0.5x"}, "-x needs a number, got '0.5x'");
    expect_error({"--name", "a", "--mode", "medium"},
                 "--mode must be fast, slow or off, not 'medium'");
    expect_error({"-n", "1"}, "a name is required: pass --name NAME");
    expect_error({"--name", "a", "-s", "5"}, "-s is another program's; here --name");
    expect_error({"--name", "a", "-s=5"}, "-s is another program's");
    expect_error({"-h", "1"}, "-h N is another program's switch");
    expect_error({"-h=0"}, "-h N is another program's switch");
    expect_error({"--help", "1"}, "--help takes no value");
    Toy t;
    std::string error;
    check(parse_toy({"-h"}, &t, &error) == Parsed::kHelp &&
              parse_toy({"--name", "a", "--help", "-n", "1"}, &t, &error) == Parsed::kHelp,
          "-h and --help alone ask for the help");
}

// A program that takes positional words (prepare_data's INPUT...).
void test_positional() {
    Toy t;
    std::vector<std::string> words;
    llmc::cli::Program p = toy_program(&t);
    p.positional = &words;
    const char* argv[] = {"toy", "a.txt", "--name", "n", "-", "-n", "4", "b", "--", "-x", "--name"};
    std::string error;
    const Parsed r = llmc::cli::parse(p, (int)std::size(argv), argv, &error);
    check(r == Parsed::kOk && t.n == 4 && t.name == "n" && t.x == 0.5f &&
              words == std::vector<std::string>{"a.txt", "-", "b", "-x", "--name"},
          "positional words between options, '-' among them, and every word after '--' (%zu)",
          words.size());
    const char* unknown[] = {"toy", "a.txt", "--bogus", "--name", "n"};
    check(llmc::cli::parse(p, 5, unknown, &error) == Parsed::kError &&
              error == "unknown option --bogus",
          "an unknown option among positional words is still unknown: %s", error.c_str());
    const char* help[] = {"toy", "-h", "a.txt"};
    check(llmc::cli::parse(p, 3, help, &error) == Parsed::kHelp,
          "-h before a positional word asks for the help");
}

void test_help_and_values() {
    Toy t;
    t.big = -1;
    const std::string help = llmc::cli::help_text(toy_program(&t));
    check(help.find("numbers:\n  -n, --count N") != std::string::npos &&
              help.find("a count (default 3)") != std::string::npos &&
              help.find("a big one (default none)") != std::string::npos &&
              help.find("a name (required)") != std::string::npos &&
              help.find("--path [PATH]") != std::string::npos &&
              help.find("--mode fast|slow|off") != std::string::npos &&
              help.find("  -h, --help") != std::string::npos,
          "the help holds the headings, the defaults and the forms:\n%s", help.c_str());
    t.name = "it's here";
    t.x = 0.1f;
    t.path_given = true;
    const llmc::cli::Program p = toy_program(&t);
    check(llmc::cli::value_text(p.options[5]) == "'it'\\''s here'" &&
              llmc::cli::value_text(p.options[3]) == "0.1",
          "values print as a shell would take them: %s, %s",
          llmc::cli::value_text(p.options[5]).c_str(), llmc::cli::value_text(p.options[3]).c_str());
    const std::string json = llmc::cli::json_fields(p.options);
    check(json.find("  \"n\": 3,\n  \"big\": -1,\n  \"x\": 0.100000001,\n  \"name\": \"it's "
                    "here\",\n  \"mode\": \"fast\",\n  \"path_given\": true,\n  \"path\": \"\"") !=
              std::string::npos,
          "json_fields: every key in table order, floats to 9 digits:\n%s", json.c_str());
}

// Lines of text (a help, a printout) no wider than the help's width.
size_t widest_line(const std::string& text) {
    size_t widest = 0, start = 0;
    for (size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', start)) {
        widest = std::max(widest, nl - start);
        start = nl + 1;
    }
    return widest;
}

std::string captured(const std::function<void(FILE*)>& write) {
    FILE* f = std::tmpfile();
    write(f);
    std::rewind(f);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    std::fclose(f);
    return out;
}

void test_trainer_table() {
    llmc::TrainConfig c;
    const llmc::cli::Program p = llmc::train_program(&c);
    std::set<std::string> names, keys;
    bool unique = true;
    for (const llmc::cli::Option& o : p.options) {
        if (o.is_heading()) continue;
        for (const std::string& n : llmc::cli::option_names(o))
            unique = unique && names.insert(n).second;
        unique = unique && keys.insert(o.key).second;
    }
    for (const llmc::cli::Refusal& r : p.refused) unique = unique && names.insert(r.name).second;
    check(unique && names.count("-s") && names.count("-g") && !names.count("-h"),
          "the trainer's names and keys are unique, llm.c's -s and -g are refused (%zu names)",
          names.size());
    // Every option of ours that a refusal names exists.
    bool named_exist = true;
    for (const llmc::cli::Refusal& r : p.refused) {
        const std::string& s = r.sentence;
        for (size_t at = s.find("--"); at != std::string::npos; at = s.find("--", at + 2)) {
            const size_t end = s.find_first_of(" ,;)", at);
            const std::string name = s.substr(at, end - at);
            named_exist = named_exist && (name == "--help" || names.count(name) == 1);
            if (names.count(name) == 0 && name != "--help")
                std::printf("  %s names %s, not an option\n", r.name, name.c_str());
        }
    }
    check(named_exist, "every option the llm.c refusals name is one of the trainer's");
    const std::string help = llmc::cli::help_text(p);
    check(widest_line(help) <= 100 &&
              help.find("'data/brown/*_train_*.bin'") != std::string::npos &&
              help.find("_train.bin") == std::string::npos,
          "the trainer's help fits 100 columns and shows a glob of prepare_data's shards (widest "
          "line %zu)",
          widest_line(help));

    // config.json: the keys the readers know stay, with the option table's values.
    llmc::TrainConfig r;
    const char* argv[] = {"train_gpt2cu", "-i", "d/a_train_*.bin", "-b=2", "--tf32=0",
                          "-t",           "64", "--resume",        "-o",   "out/x"};
    llmc::parse_train_args((int)std::size(argv), const_cast<char**>(argv), &r);
    const std::string json =
        captured([&](FILE* f) { llmc::write_train_config_json(r, "\"precision\": \"bf16\"", f); });
    const char* legacy[] = {"train_pattern",
                            "val_pattern",
                            "model",
                            "output_dir",
                            "B",
                            "T",
                            "total_batch",
                            "steps",
                            "lr",
                            "warmup",
                            "lr_schedule",
                            "lr_final_frac",
                            "decay_frac",
                            "weight_decay",
                            "beta1",
                            "beta2",
                            "eps",
                            "grad_clip",
                            "val_every",
                            "val_batches",
                            "seed",
                            "tf32",
                            "graph",
                            "autotune",
                            "device",
                            "shuffle",
                            "prefetch",
                            "overfit_batch",
                            "checkpoint_every",
                            "keep_last",
                            "keep_every",
                            "resume",
                            "resume_path",
                            "stop_after",
                            "sample_every",
                            "sample_tokens",
                            "temperature",
                            "top_k",
                            "sample_seed",
                            "tokenizer",
                            "world_size",
                            "zero",
                            "skip_outliers",
                            "outlier_window",
                            "max_bad_steps",
                            "precision"};
    std::string missing;
    for (const char* k : legacy)
        if (json.find(std::string("\n  \"") + k + "\": ") == std::string::npos)
            missing += k + std::string(" ");
    check(missing.empty() && json.find("\"B\": 2,") != std::string::npos &&
              json.find("\"tf32\": 0,") != std::string::npos &&
              json.find("\"resume\": true,") != std::string::npos &&
              json.find("\"total_batch\": 128,") != std::string::npos &&
              json.rfind("{\n", 0) == 0 &&
              json.find("\"precision\": \"bf16\"\n}\n") != std::string::npos,
          "config.json keeps every key its readers know (missing: %s):\n%s", missing.c_str(),
          json.c_str());
    const std::string printed = captured([&](FILE* f) { llmc::print_train_config(r, f); });
    check(printed.find("-i 'd/a_train_*.bin'") != std::string::npos &&
              printed.find("-b 2 -t 64 -d 128") != std::string::npos &&
              printed.find("--tf32 0") != std::string::npos &&
              printed.find("--resume") != std::string::npos &&
              printed.find("--stop-after") == std::string::npos &&
              printed.find("-j ") == std::string::npos && widest_line(printed) <= 100,
          "the printed configuration reads as a command line:\n%s", printed.c_str());
}

}  // namespace

int main() {
    test_forms();
    test_refusals();
    test_positional();
    test_help_and_values();
    test_trainer_table();
    std::printf("test_cli: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
