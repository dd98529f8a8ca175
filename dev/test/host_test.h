// host_test.h: what the host tests (dev/test/test_*.cpp) share.
//   check(ok, fmt, ...)  counts a pass or a failure and prints one line: "ok   ..." or "FAIL ..."
//   g_passed, g_failed   the counts, for the test's closing "N passed, M failed" line
//   host_test_summary(n) prints that line and returns main's exit code
//   read_bytes(path)     a whole file (empty when it cannot be read)
//   write_bytes(path, b) writes a scratch file, exits 2 when it cannot (the test itself broke)
//   expect_refusal(...)  runs a reader that must refuse a file with one sentence naming it
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

inline int g_passed = 0;
inline int g_failed = 0;

inline void check(bool ok, const char* fmt, ...) {
    (ok ? g_passed : g_failed)++;
    std::printf("%s ", ok ? "ok  " : "FAIL");
    va_list args;
    va_start(args, fmt);
    std::vprintf(fmt, args);
    va_end(args);
    std::printf("\n");
}

// "NAME: N passed, M failed"; 0 when nothing failed, else 1.
inline int host_test_summary(const char* name) {
    std::printf("%s: %d passed, %d failed\n", name, g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}

inline std::vector<char> read_bytes(const std::string& path) {
    std::vector<char> bytes;
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return bytes;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
    std::fclose(f);
    return bytes;
}

inline void write_bytes(const std::string& path, const std::vector<char>& bytes) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
        std::fprintf(stderr, "host test: cannot write scratch file %s\n", path.c_str());
        std::exit(2);
    }
    std::fclose(f);
}

// Runs fn in a child with stderr captured; expects exit status 1 and a message that contains
// `path` and every one of `needles`.
inline void expect_refusal(const char* what, const std::string& path,
                           const std::vector<std::string>& needles,
                           const std::function<void()>& fn) {
    int fds[2];
    if (pipe(fds) != 0) std::exit(2);
    std::fflush(stdout);  // the child's exit() would flush a copy of anything still buffered
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn();
        _exit(42);  // the reader accepted the file
    }
    close(fds[1]);
    std::string msg;
    char buf[512];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) msg.append(buf, n);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    bool ok = code == 1 && msg.find(path) != std::string::npos;
    for (const std::string& needle : needles) ok = ok && msg.find(needle) != std::string::npos;
    const std::string first_line = msg.substr(0, msg.find('\n'));
    check(ok, "refuses %s: exit %d, \"%s\"", what, code, first_line.c_str());
}
