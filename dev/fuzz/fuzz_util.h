// fuzz_util.h: the shared part of the libFuzzer harnesses dev/fuzz/fuzz_<parser>.cpp (`make fuzz`
// builds them with clang, -fsanitize=fuzzer,address,undefined and -DLLMC_FUZZ; scripts/test/fuzz.sh
// runs them). Include it from exactly one file per harness; it defines libFuzzer's entry points.
//
// A harness is one small file that defines llmc::fuzz::target():
//   files        the names of the files one fuzz input becomes: the input is cut at each
//                kFileSeparator into at most files.size() parts, part i is written to
//                <private temp dir>/files[i] (a file with no part is not created at all);
//   parse        runs the real parser on those paths, as the programs call it;
//   write_seeds  writes valid small inputs into a folder (write_seed below), built with the
//                project's own writers where it has them.
// For every input, parse must either return or fail with llmc::FatalError (LLMC_FAIL in a
// -DLLMC_FUZZ build) whose sentence is one line and names one of the input's file paths (or one
// of target().also_named, e.g. a glob). Anything else -- a sanitizer report, another exception,
// a message that does not say which file is bad, a hang (-timeout), an allocation bomb
// (-malloc_limit_mb) -- is a crash for libFuzzer.
//
// Seeds: `LLMC_FUZZ_SEEDS=DIR ./build/fuzz/fuzz_x` writes the seeds into DIR, checks that parse
// accepts every one of them (so the fuzzer starts from files that get past every check), and
// exits 0, or 1 naming the seed it rejected.
#pragma once
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "check.h"

namespace llmc::fuzz {

// Cuts one fuzz input into the files of a multi-file parser (libFuzzer's mutations can insert
// it; the seeds contain it).
constexpr std::string_view kFileSeparator = "\n==llmc-fuzz-next-file==\n";

struct Target {
    std::vector<std::string> files;
    void (*parse)(const std::vector<std::string>& paths);
    void (*write_seeds)(const std::string& dir);
    std::vector<std::string> also_named;  // relative to the temp dir, like files
};
const Target& target();  // defined by the harness

// Fails the run the way libFuzzer reports a crash (abort), after saying why.
[[noreturn]] inline void crash(const char* what, const std::string& detail) {
    std::fprintf(stderr, "fuzz harness: %s: %s\n", what, detail.c_str());
    std::abort();
}

inline void write_file(const std::string& path, std::string_view bytes) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) crash("cannot create", path);
    const bool ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (std::fclose(f) != 0 || !ok) crash("cannot write", path);
}

// A seed: the parts of one input joined by kFileSeparator, written to dir/name.
inline void write_seed(const std::string& dir, const std::string& name,
                       const std::vector<std::string>& parts) {
    std::string joined;
    for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0) joined += kFileSeparator;
        joined += parts[i];
    }
    write_file(dir + "/" + name, joined);
}

inline std::string read_file(const std::string& path) {
    std::string out;
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) crash("cannot open", path);
    char buf[1 << 16];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, got);
    std::fclose(f);
    return out;
}

// This process's private folder for the files of each input, removed at exit.
inline const std::string& work_dir() {
    static const std::string dir = [] {
        const char* tmp = std::getenv("TMPDIR");
        std::string pattern =
            std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/llmc_fuzz_XXXXXX";
        if (mkdtemp(pattern.data()) == nullptr) crash("cannot create a temp folder", pattern);
        return pattern;
    }();
    return dir;
}

inline void remove_work_files() {
    const Target& t = target();
    for (const std::string& name : t.files) unlink((work_dir() + "/" + name).c_str());
    rmdir(work_dir().c_str());
}

// Writes the parts of `input` as the target's files; returns their paths (all of them, also the
// ones not written, which the parser then finds missing).
inline std::vector<std::string> write_input(std::string_view input) {
    const Target& t = target();
    std::vector<std::string> paths;
    for (size_t i = 0; i < t.files.size(); ++i) {
        paths.push_back(work_dir() + "/" + t.files[i]);
        unlink(paths.back().c_str());
    }
    for (size_t i = 0; i < t.files.size(); ++i) {
        const size_t cut = i + 1 < t.files.size() ? input.find(kFileSeparator) : input.npos;
        write_file(paths[i], input.substr(0, cut));
        if (cut == input.npos) break;
        input.remove_prefix(cut + kFileSeparator.size());
    }
    return paths;
}

// Runs the parser on one input; returns the FatalError sentence ("" when it accepted the
// files), and crashes on anything that is not a clean, helpful refusal.
inline std::string run_one(std::string_view input) {
    const Target& t = target();
    const std::vector<std::string> paths = write_input(input);
    std::string message;
    try {
        t.parse(paths);
        return "";
    } catch (const llmc::FatalError& e) {
        message = e.what();
    } catch (const std::exception& e) {
        crash("the parser threw something other than llmc::FatalError", e.what());
    }
    if (message.empty() || message.find('\n') != std::string::npos)
        crash("the error is not one sentence on one line", message);
    std::vector<std::string> names = paths;
    for (const std::string& extra : t.also_named) names.push_back(work_dir() + "/" + extra);
    for (const std::string& name : names)
        if (message.find(name) != std::string::npos) return message;
    crash("the error does not name the file", message);
}

// LLMC_FUZZ_SEEDS=DIR: write the seeds, check that the parser accepts each, exit.
inline void seed_mode(const char* dir) {
    target().write_seeds(dir);
    DIR* d = opendir(dir);
    if (d == nullptr) crash("cannot list the seed folder", dir);
    int seeds = 0;
    for (dirent* e; (e = readdir(d)) != nullptr;) {
        if (e->d_name[0] == '.') continue;
        const std::string path = std::string(dir) + "/" + e->d_name;
        const std::string message = run_one(read_file(path));
        if (!message.empty()) {
            std::fprintf(stderr, "fuzz harness: the parser rejects the seed %s: %s\n", path.c_str(),
                         message.c_str());
            std::exit(1);
        }
        ++seeds;
    }
    closedir(d);
    std::printf("wrote and checked %d seeds in %s\n", seeds, dir);
    remove_work_files();
    std::exit(seeds > 0 ? 0 : 1);
}

}  // namespace llmc::fuzz

// A check of what the parser returned on success (shapes, ranges): a failure is a crash.
#define LLMC_FUZZ_ASSERT(cond)                                       \
    do {                                                             \
        if (!(cond)) ::llmc::fuzz::crash("assertion failed", #cond); \
    } while (0)

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* seeds = std::getenv("LLMC_FUZZ_SEEDS");
    if (seeds != nullptr && seeds[0] != '\0') llmc::fuzz::seed_mode(seeds);
    // Construct both statics before registering, so they are destroyed after it runs.
    llmc::fuzz::target();
    llmc::fuzz::work_dir();
    std::atexit(llmc::fuzz::remove_work_files);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    llmc::fuzz::run_one(std::string_view(reinterpret_cast<const char*>(data), size));
    return 0;
}
