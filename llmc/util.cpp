// util.cpp: small host helpers (see util.h).
#include "util.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"

namespace llmc {

std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += (char)c;
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
        } else {
            out += (char)c;
        }
    }
    return out + "\"";
}

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

void keep_lines(const std::string& path, const std::function<bool(const std::string&)>& keep,
                const char* what) {
    std::vector<std::string> kept;
    if (std::FILE* in = std::fopen(path.c_str(), "r")) {
        std::string line;
        int c;
        while ((c = std::fgetc(in)) != EOF) {
            if (c != '\n') {
                line += (char)c;
                continue;
            }
            if (keep(line)) kept.push_back(line);
            line.clear();
        }
        std::fclose(in);
    }
    const std::string tmp = path + ".tmp";
    std::FILE* out = std::fopen(tmp.c_str(), "w");
    LLMC_CHECK(out != nullptr, "cannot write %s '%s' (%s).", what, tmp.c_str(),
               std::strerror(errno));
    for (const std::string& l : kept) std::fprintf(out, "%s\n", l.c_str());
    LLMC_CHECK(std::fclose(out) == 0 && std::rename(tmp.c_str(), path.c_str()) == 0,
               "cannot write %s '%s' (%s).", what, path.c_str(), std::strerror(errno));
}

int env_int(const char* name, int lo, int hi, int fallback) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return fallback;
    char* end = nullptr;
    errno = 0;
    const long x = std::strtol(v, &end, 10);
    LLMC_CHECK(*end == '\0' && errno == 0 && x >= lo && x <= hi,
               "%s=%s: use a whole number from %d to %d.", name, v, lo, hi);
    return (int)x;
}

}  // namespace llmc
