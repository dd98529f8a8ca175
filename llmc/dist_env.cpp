// dist_env.cpp: rank discovery and the unique-id bootstrap (see dist_env.h).
#include "dist_env.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

namespace llmc {

namespace {

constexpr uint64_t kHelloMagic = 0x4f4c4c4548434d4cull;  // "LMCHELLO"
constexpr uint64_t kReplyMagic = 0x594c504552434d4cull;  // "LMCREPLY"

struct Hello {  // rank r -> rank 0
    uint64_t magic;
    int32_t rank, world_size;
    uint64_t fingerprint;
};

struct Reply {  // rank 0 -> rank r (and the init file's content)
    uint64_t magic;
    int32_t status;  // 0: go; 1: a rank disagrees (bad_rank, its world size and fingerprint)
    int32_t world_size;
    uint64_t fingerprint;
    int32_t bad_rank, bad_world;
    uint64_t bad_fingerprint;
    uint8_t id[kBootstrapIdBytes];
};

using Clock = std::chrono::steady_clock;

double seconds_left(Clock::time_point deadline) {
    return std::chrono::duration<double>(deadline - Clock::now()).count();
}

// Parses a whole non-negative decimal int; false for anything else.
bool parse_count(const char* text, int* out) {
    if (text == nullptr || *text == '\0') return false;
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0 || v > (1 << 24)) return false;
    *out = (int)v;
    return true;
}

// One launcher's three variables; 0 when absent, 1 when read, -1 with *why on a bad value.
int read_triple(const char* rank_var, const char* size_var, const char* local_var,
                const char* source, DistEnv* env, std::string* why) {
    const char* r = std::getenv(rank_var);
    const char* n = std::getenv(size_var);
    const char* lr = std::getenv(local_var);
    if (r == nullptr && n == nullptr) return 0;
    char buf[512];
    if (r == nullptr || n == nullptr) {
        std::snprintf(buf, sizeof(buf), "%s is set but %s is not: set both (or neither)",
                      r ? rank_var : size_var, r ? size_var : rank_var);
        *why = buf;
        return -1;
    }
    DistEnv e;
    e.source = source;
    if (!parse_count(r, &e.rank) || !parse_count(n, &e.world_size) || e.world_size < 1 ||
        e.rank >= e.world_size) {
        std::snprintf(buf, sizeof(buf),
                      "%s=%s and %s=%s are not a rank below a world size of at least 1", rank_var,
                      r, size_var, n);
        *why = buf;
        return -1;
    }
    e.local_rank = e.rank;  // a single host when the launcher does not say
    if (lr != nullptr && !parse_count(lr, &e.local_rank)) {
        std::snprintf(buf, sizeof(buf), "%s=%s is not a whole number", local_var, lr);
        *why = buf;
        return -1;
    }
    *env = e;
    return 1;
}

bool fail_errno(std::string* why, const std::string& what) {
    *why = what + " (" + std::strerror(errno) + ")";
    return false;
}

// Sends or receives exactly `bytes`, waiting at most until the deadline.
bool transfer(int fd, void* buf, size_t bytes, bool sending, Clock::time_point deadline) {
    char* p = static_cast<char*>(buf);
    size_t done = 0;
    while (done < bytes) {
        pollfd pfd{fd, (short)(sending ? POLLOUT : POLLIN), 0};
        const double left = seconds_left(deadline);
        if (left <= 0) {
            errno = ETIMEDOUT;
            return false;
        }
        const int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) {
            if (pr == 0) errno = ETIMEDOUT;
            return false;
        }
        const ssize_t n = sending ? send(fd, p + done, bytes - done, MSG_NOSIGNAL)
                                  : recv(fd, p + done, bytes - done, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {
            if (n == 0) errno = ECONNRESET;
            return false;
        }
        done += (size_t)n;
    }
    return true;
}

bool resolve(const BootstrapOptions& opt, sockaddr_in* out, std::string* why) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(opt.addr.c_str(), nullptr, &hints, &res);
    if (rc != 0 || res == nullptr) {
        *why = "cannot resolve the master address '" + opt.addr + "' (" + gai_strerror(rc) +
               "): set LLMC_MASTER_ADDR to rank 0's host name or IPv4 address";
        return false;
    }
    *out = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
    out->sin_port = htons((uint16_t)opt.port);
    freeaddrinfo(res);
    return true;
}

std::string endpoint(const BootstrapOptions& opt) {
    return opt.addr + ":" + std::to_string(opt.port);
}

std::string mismatch_sentence(const Reply& r) {
    char buf[512];
    if (r.bad_world != r.world_size)
        std::snprintf(buf, sizeof(buf),
                      "rank %d was started for a world of %d processes, rank 0 for %d: start "
                      "every rank with the same world size",
                      r.bad_rank, r.bad_world, r.world_size);
    else
        std::snprintf(buf, sizeof(buf),
                      "rank %d was started with other options or another build than rank 0 "
                      "(config fingerprint %016llx, rank 0's %016llx): every rank must run the "
                      "same binary with the same options",
                      r.bad_rank, (unsigned long long)r.bad_fingerprint,
                      (unsigned long long)r.fingerprint);
    return buf;
}

bool serve_tcp(const DistEnv& env, const BootstrapOptions& opt, uint64_t fp, const uint8_t* id,
               Clock::time_point deadline, std::string* why) {
    sockaddr_in addr{};
    if (!resolve(opt, &addr, why)) return false;
    // Loopback stays loopback; any other address listens on every interface (the name given
    // may be one that other hosts use to reach this one).
    if ((ntohl(addr.sin_addr.s_addr) >> 24) != 127) addr.sin_addr.s_addr = htonl(INADDR_ANY);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return fail_errno(why, "cannot create the bootstrap socket");
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 128) != 0) {
        close(fd);
        return fail_errno(why, "rank 0 cannot listen on " + endpoint(opt) +
                                   ": set LLMC_MASTER_PORT to a free port");
    }
    std::vector<int> peers;
    std::vector<Hello> hellos;
    bool ok = true;
    while (ok && (int)peers.size() < env.world_size - 1) {
        pollfd pfd{fd, POLLIN, 0};
        const double left = seconds_left(deadline);
        const int pr = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) {
            char buf[256];
            std::snprintf(buf, sizeof(buf),
                          "only %zu of the other %d ranks connected to %s within %.0f s: start "
                          "every rank (or raise LLMC_BOOTSTRAP_TIMEOUT)",
                          peers.size(), env.world_size - 1, endpoint(opt).c_str(), opt.timeout_s);
            *why = buf;
            ok = false;
            break;
        }
        const int c = accept(fd, nullptr, nullptr);
        if (c < 0) continue;
        Hello h{};
        if (!transfer(c, &h, sizeof(h), false, deadline) || h.magic != kHelloMagic) {
            close(c);  // not one of ours (a port scan, a stale client): ignore it
            continue;
        }
        peers.push_back(c);
        hellos.push_back(h);
    }
    close(fd);
    Reply reply{};
    reply.magic = kReplyMagic;
    reply.world_size = env.world_size;
    reply.fingerprint = fp;
    std::memcpy(reply.id, id, kBootstrapIdBytes);
    std::vector<int> seen(env.world_size, 0);
    for (const Hello& h : hellos) {
        const bool dup = h.rank > 0 && h.rank < env.world_size && seen[h.rank]++;
        if (reply.status == 0 &&
            (h.world_size != env.world_size || h.fingerprint != fp || h.rank <= 0 || dup)) {
            reply.status = 1;
            reply.bad_rank = h.rank, reply.bad_world = h.world_size;
            reply.bad_fingerprint = h.fingerprint;
        }
    }
    if (ok && reply.status != 0) {
        *why = (reply.bad_rank <= 0 || reply.bad_rank >= env.world_size) &&
                       reply.bad_world == env.world_size && reply.bad_fingerprint == fp
                   ? "two processes claim the same rank (or a rank outside the world): check "
                     "the launcher's rank variables"
                   : mismatch_sentence(reply);
        ok = false;
    }
    for (int c : peers) {
        if (!ok && reply.status == 0) reply.status = 2;  // rank 0 gave up
        transfer(c, &reply, sizeof(reply), true, deadline);
        close(c);
    }
    return ok;
}

bool join_tcp(const DistEnv& env, const BootstrapOptions& opt, uint64_t fp, uint8_t* id,
              Clock::time_point deadline, std::string* why) {
    sockaddr_in addr{};
    if (!resolve(opt, &addr, why)) return false;
    int fd = -1;
    // Rank 0 may not listen yet: retry until it does or the deadline passes.
    while (true) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return fail_errno(why, "cannot create the bootstrap socket");
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
        close(fd);
        if (seconds_left(deadline) <= 0) {
            char buf[256];
            std::snprintf(buf, sizeof(buf),
                          "rank %d could not reach rank 0 at %s within %.0f s: start rank 0, or "
                          "set LLMC_MASTER_ADDR / LLMC_MASTER_PORT to where it listens",
                          env.rank, endpoint(opt).c_str(), opt.timeout_s);
            *why = buf;
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Hello h{kHelloMagic, env.rank, env.world_size, fp};
    Reply r{};
    const bool ok =
        transfer(fd, &h, sizeof(h), true, deadline) && transfer(fd, &r, sizeof(r), false, deadline);
    close(fd);
    if (!ok || r.magic != kReplyMagic) {
        return fail_errno(why, "rank " + std::to_string(env.rank) +
                                   " lost the connection to rank 0 during the bootstrap");
    }
    if (r.status == 1) {
        *why = mismatch_sentence(r);
        return false;
    }
    if (r.status != 0) {
        *why = "rank 0 gave up on the bootstrap (its own error message says why)";
        return false;
    }
    std::memcpy(id, r.id, kBootstrapIdBytes);
    return true;
}

bool write_file_reply(const BootstrapOptions& opt, const Reply& r, std::string* why) {
    const size_t slash = opt.init_file.find_last_of('/');
    const std::string tmp = (slash == std::string::npos ? "" : opt.init_file.substr(0, slash + 1)) +
                            "." + opt.init_file.substr(slash + 1) + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) return fail_errno(why, "rank 0 cannot write the init file " + tmp);
    const bool ok =
        std::fwrite(&r, sizeof(r), 1, f) == 1 && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
    std::fclose(f);
    if (!ok || std::rename(tmp.c_str(), opt.init_file.c_str()) != 0)
        return fail_errno(why, "rank 0 cannot write the init file " + opt.init_file);
    return true;
}

bool read_file_reply(const DistEnv& env, const BootstrapOptions& opt, uint64_t fp, uint8_t* id,
                     Clock::time_point deadline, std::string* why) {
    // A file written more than a minute before this process started is an earlier run's.
    const time_t not_before = time(nullptr) - 60;
    while (true) {
        struct stat st {};
        if (stat(opt.init_file.c_str(), &st) == 0 && st.st_mtime >= not_before) {
            Reply r{};
            FILE* f = std::fopen(opt.init_file.c_str(), "rb");
            const bool got = f != nullptr && std::fread(&r, sizeof(r), 1, f) == 1;
            if (f != nullptr) std::fclose(f);
            if (got && r.magic == kReplyMagic) {
                if (r.world_size != env.world_size || r.fingerprint != fp) {
                    r.bad_rank = env.rank, r.bad_world = env.world_size;
                    r.bad_fingerprint = fp;
                    *why = mismatch_sentence(r);
                    return false;
                }
                std::memcpy(id, r.id, kBootstrapIdBytes);
                return true;
            }
        }
        if (seconds_left(deadline) <= 0) {
            char buf[512];
            std::snprintf(buf, sizeof(buf),
                          "rank %d found no init file %s from rank 0 within %.0f s: start rank "
                          "0, and give every rank the same path on a shared filesystem",
                          env.rank, opt.init_file.c_str(), opt.timeout_s);
            *why = buf;
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

}  // namespace

bool dist_env_from_environment(DistEnv* env, std::string* why) {
    *env = DistEnv{};
    int rc = read_triple("LLMC_RANK", "LLMC_WORLD_SIZE", "LLMC_LOCAL_RANK", "LLMC_RANK", env, why);
    if (rc == 0)
        rc = read_triple("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                         "OMPI_COMM_WORLD_LOCAL_RANK", "OpenMPI", env, why);
    // SLURM_PROCID alone is also set in a batch script (not a job step): only a step's size
    // makes this a multi-process launch.
    if (rc == 0 && std::getenv("SLURM_STEP_NUM_TASKS") != nullptr)
        rc =
            read_triple("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "Slurm", env, why);
    return rc >= 0;
}

bool bootstrap_options_from_environment(const std::string& init_file_flag, BootstrapOptions* opt,
                                        std::string* why) {
    *opt = BootstrapOptions{};
    auto first = [](const char* a, const char* b) {
        const char* v = std::getenv(a);
        return v != nullptr ? v : std::getenv(b);
    };
    if (const char* a = first("LLMC_MASTER_ADDR", "MASTER_ADDR")) opt->addr = a;
    if (const char* p = first("LLMC_MASTER_PORT", "MASTER_PORT")) {
        if (!parse_count(p, &opt->port) || opt->port < 1 || opt->port > 65535) {
            *why = std::string("the master port '") + p + "' is not a port number (1..65535)";
            return false;
        }
    }
    opt->init_file = init_file_flag;
    if (opt->init_file.empty())
        if (const char* f = std::getenv("LLMC_INIT_FILE")) opt->init_file = f;
    if (const char* t = std::getenv("LLMC_BOOTSTRAP_TIMEOUT")) {
        int s = 0;
        if (!parse_count(t, &s) || s < 1) {
            *why = std::string("LLMC_BOOTSTRAP_TIMEOUT='") + t + "' is not a number of seconds";
            return false;
        }
        opt->timeout_s = s;
    }
    return true;
}

bool bootstrap_share_id(const DistEnv& env, const BootstrapOptions& opt, uint64_t fingerprint,
                        uint8_t* id, std::string* why) {
    if (env.world_size == 1) return true;
    const Clock::time_point deadline =
        Clock::now() + std::chrono::milliseconds((long long)(opt.timeout_s * 1000));
    if (opt.init_file.empty()) {
        return env.rank == 0 ? serve_tcp(env, opt, fingerprint, id, deadline, why)
                             : join_tcp(env, opt, fingerprint, id, deadline, why);
    }
    if (env.rank != 0) return read_file_reply(env, opt, fingerprint, id, deadline, why);
    Reply r{};
    r.magic = kReplyMagic;
    r.world_size = env.world_size;
    r.fingerprint = fingerprint;
    std::memcpy(r.id, id, kBootstrapIdBytes);
    return write_file_reply(opt, r, why);
}

void bootstrap_cleanup(const DistEnv& env, const BootstrapOptions& opt) {
    if (env.rank == 0 && env.world_size > 1 && !opt.init_file.empty())
        std::remove(opt.init_file.c_str());
}

}  // namespace llmc
