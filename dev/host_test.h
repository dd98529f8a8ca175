// host_test.h: what the host tests (dev/test_*.cpp) share.
//   check(ok, fmt, ...)  counts a pass or a failure and prints one line: "ok   ..." or "FAIL ..."
//   g_passed, g_failed   the counts, for the test's closing "N passed, M failed" line
//   read_bytes(path)     a whole file (empty when it cannot be read)
//   write_bytes(path, b) writes a scratch file, exits 2 when it cannot (the test itself broke)
#pragma once
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
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
