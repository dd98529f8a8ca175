// test_multi_gpu_host.cpp: the host side of multi-GPU training, on the CPU (no GPU, no NCCL
// calls): rank discovery from each launcher's variables, the unique-id bootstrap over TCP and
// through a file between forked processes (success, disagreeing ranks, absent ranks, a stale
// file), the ZeRO-1 shard map arithmetic, and a CPU simulation that reduce-scatter + sharded
// AdamW + all-gather gives bit for bit the parameters and moments of the whole update.
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "dist_env.h"
#include "host_test.h"
#include "nccl_api.h"
#include "shard_map.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
// nccl_api.h mirrors these values of the ABI instead of including nccl.h.
static_assert(sizeof(ncclUniqueId) == sizeof(llmc::NcclUniqueId), "ncclUniqueId size");
static_assert((int)ncclSuccess == llmc::kNcclSuccess &&
                  (int)ncclInProgress == llmc::kNcclInProgress,
              "ncclResult_t");
static_assert((int)ncclInt32 == llmc::kNcclInt32 && (int)ncclFloat32 == llmc::kNcclFloat32 &&
                  (int)ncclBfloat16 == llmc::kNcclBfloat16,
              "ncclDataType_t");
static_assert((int)ncclSum == llmc::kNcclSum && (int)ncclMax == llmc::kNcclMax &&
                  (int)ncclMin == llmc::kNcclMin && (int)ncclAvg == llmc::kNcclAvg,
              "ncclRedOp_t");
#endif

using namespace llmc;

namespace {

const char* kAllVars[] = {"LLMC_RANK",
                          "LLMC_WORLD_SIZE",
                          "LLMC_LOCAL_RANK",
                          "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK",
                          "SLURM_PROCID",
                          "SLURM_STEP_NUM_TASKS",
                          "SLURM_LOCALID",
                          "SLURM_NTASKS"};

void clear_env() {
    for (const char* v : kAllVars) unsetenv(v);
}

void test_discovery() {
    DistEnv e;
    std::string why;
    clear_env();
    check(dist_env_from_environment(&e, &why) && e.world_size == 1 && e.rank == 0,
          "no launcher variables: one process (%s)", e.source.c_str());
    setenv("LLMC_RANK", "1", 1), setenv("LLMC_WORLD_SIZE", "4", 1),
        setenv("LLMC_LOCAL_RANK", "1", 1);
    check(dist_env_from_environment(&e, &why) && e.rank == 1 && e.world_size == 4 &&
              e.local_rank == 1,
          "LLMC_*: rank 1 of 4, local 1");
    setenv("OMPI_COMM_WORLD_RANK", "3", 1), setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    check(dist_env_from_environment(&e, &why) && e.rank == 1 && e.world_size == 4,
          "LLMC_* wins over OpenMPI's variables");
    clear_env();
    setenv("OMPI_COMM_WORLD_RANK", "5", 1), setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    check(dist_env_from_environment(&e, &why) && e.rank == 5 && e.world_size == 8 &&
              e.local_rank == 1 && e.source == "OpenMPI",
          "OpenMPI: rank 5 of 8, local 1");
    clear_env();
    setenv("SLURM_PROCID", "0", 1), setenv("SLURM_NTASKS", "4", 1);
    check(dist_env_from_environment(&e, &why) && e.world_size == 1,
          "Slurm batch script (no job step): one process");
    setenv("SLURM_PROCID", "2", 1), setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    setenv("SLURM_LOCALID", "2", 1);
    check(dist_env_from_environment(&e, &why) && e.rank == 2 && e.world_size == 4 &&
              e.local_rank == 2 && e.source == "Slurm",
          "srun step: rank 2 of 4, local 2");
    clear_env();
    setenv("LLMC_RANK", "2", 1), setenv("LLMC_WORLD_SIZE", "2", 1);
    bool got = dist_env_from_environment(&e, &why);  // before why is printed below
    check(!got && why.find("LLMC_RANK=2") != std::string::npos,
          "rank outside the world refused: \"%s\"", why.c_str());
    setenv("LLMC_RANK", "x", 1);
    got = dist_env_from_environment(&e, &why);
    check(!got, "non-numeric rank refused: \"%s\"", why.c_str());
    unsetenv("LLMC_WORLD_SIZE");
    setenv("LLMC_RANK", "0", 1);
    got = dist_env_from_environment(&e, &why);
    check(!got && why.find("LLMC_WORLD_SIZE") != std::string::npos,
          "rank without a world size refused: \"%s\"", why.c_str());
    clear_env();

    BootstrapOptions o;
    setenv("MASTER_ADDR", "10.1.2.3", 1), setenv("MASTER_PORT", "1234", 1);
    setenv("LLMC_MASTER_PORT", "4321", 1);
    check(
        bootstrap_options_from_environment("", &o, &why) && o.addr == "10.1.2.3" && o.port == 4321,
        "MASTER_ADDR accepted, LLMC_MASTER_PORT wins over MASTER_PORT");
    setenv("LLMC_MASTER_PORT", "70000", 1);
    got = bootstrap_options_from_environment("", &o, &why);
    check(!got, "port 70000 refused: \"%s\"", why.c_str());
    unsetenv("LLMC_MASTER_PORT"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
    setenv("LLMC_INIT_FILE", "/a", 1);
    check(bootstrap_options_from_environment("/b", &o, &why) && o.init_file == "/b",
          "--init-file wins over LLMC_INIT_FILE");
    unsetenv("LLMC_INIT_FILE");
}

struct RankResult {
    bool ok;
    std::string why;
    std::vector<uint8_t> id;
};

// Runs bootstrap_share_id in one forked process per entry of `ranks` (a rank may be left out to
// play an absent one); each child reports (ok, id, sentence) through a pipe.
std::vector<RankResult> run_bootstrap(int world, const std::vector<int>& ranks,
                                      const std::vector<uint64_t>& fps, BootstrapOptions opt,
                                      const std::vector<int>& worlds = {}) {
    std::vector<int> fds;
    std::vector<pid_t> pids;
    std::fflush(stdout);
    for (size_t i = 0; i < ranks.size(); i++) {
        int p[2];
        if (pipe(p) != 0) std::exit(2);
        const pid_t pid = fork();
        if (pid == 0) {
            close(p[0]);
            DistEnv env;
            env.rank = ranks[i];
            env.world_size = worlds.empty() ? world : worlds[i];
            uint8_t id[kBootstrapIdBytes];
            for (size_t b = 0; b < kBootstrapIdBytes; b++) id[b] = env.rank == 0 ? (uint8_t)b : 0;
            std::string why;
            const bool ok = bootstrap_share_id(env, opt, fps[i], id, &why);
            const char flag = ok ? 1 : 0;
            ssize_t w = write(p[1], &flag, 1);
            w += write(p[1], id, sizeof(id));
            w += write(p[1], why.data(), why.size());
            (void)w;
            _exit(0);
        }
        close(p[1]);
        fds.push_back(p[0]);
        pids.push_back(pid);
    }
    std::vector<RankResult> out;
    for (size_t i = 0; i < ranks.size(); i++) {
        std::string bytes;
        char buf[512];
        ssize_t n;
        while ((n = read(fds[i], buf, sizeof(buf))) > 0) bytes.append(buf, n);
        close(fds[i]);
        waitpid(pids[i], nullptr, 0);
        RankResult r{false, "", {}};
        if (bytes.size() >= 1 + kBootstrapIdBytes) {
            r.ok = bytes[0] == 1;
            r.id.assign(bytes.begin() + 1, bytes.begin() + 1 + kBootstrapIdBytes);
            r.why = bytes.substr(1 + kBootstrapIdBytes);
        }
        out.push_back(r);
    }
    return out;
}

bool ids_match_rank0(const std::vector<RankResult>& rs) {
    for (const RankResult& r : rs) {
        if (!r.ok || r.id.size() != kBootstrapIdBytes) return false;
        for (size_t b = 0; b < kBootstrapIdBytes; b++)
            if (r.id[b] != (uint8_t)b) return false;
    }
    return true;
}

void test_bootstrap(const std::string& tmp) {
    BootstrapOptions tcp;
    tcp.port = 20000 + (int)(getpid() % 20000);
    tcp.timeout_s = 20;
    auto rs = run_bootstrap(4, {0, 1, 2, 3}, {7, 7, 7, 7}, tcp);
    check(ids_match_rank0(rs), "TCP: 4 ranks receive rank 0's id");
    // rank 0 started last: the others retry until it listens
    tcp.port++;
    rs = run_bootstrap(3, {2, 1, 0}, {7, 7, 7}, tcp);
    check(ids_match_rank0(rs), "TCP: ranks started before rank 0 retry and get the id");
    tcp.port++;
    rs = run_bootstrap(3, {0, 1, 2}, {7, 7, 8}, tcp);
    bool all_named = true;
    for (const RankResult& r : rs)
        all_named = all_named && !r.ok && r.why.find("rank 2") != std::string::npos;
    check(all_named, "TCP: a rank with other options makes every rank fail naming it: \"%s\"",
          rs[1].why.c_str());
    tcp.port++;
    rs = run_bootstrap(2, {0, 1}, {7, 7}, tcp, {2, 3});
    check(!rs[0].ok && !rs[1].ok && rs[1].why.find("world of 3") != std::string::npos,
          "TCP: world sizes that differ are refused: \"%s\"", rs[1].why.c_str());
    tcp.port++;
    tcp.timeout_s = 1;
    rs = run_bootstrap(2, {1}, {7}, tcp);
    check(!rs[0].ok && rs[0].why.find("could not reach rank 0") != std::string::npos,
          "TCP: rank 0 absent: a sentence after the timeout: \"%s\"", rs[0].why.c_str());
    tcp.port++;
    rs = run_bootstrap(3, {0, 1}, {7, 7}, tcp);
    check(!rs[0].ok && rs[0].why.find("only 1 of the other 2") != std::string::npos && !rs[1].ok,
          "TCP: a rank absent: rank 0 times out and releases the others: \"%s\"",
          rs[0].why.c_str());

    BootstrapOptions file;
    file.init_file = tmp + "/init_id";
    file.timeout_s = 20;
    rs = run_bootstrap(3, {1, 2, 0}, {5, 5, 5}, file);
    check(ids_match_rank0(rs), "file: 3 ranks receive rank 0's id");
    DistEnv r0;
    r0.world_size = 3;
    bootstrap_cleanup(r0, file);
    check(access(file.init_file.c_str(), F_OK) != 0, "file: rank 0 removes it afterwards");
    rs = run_bootstrap(2, {0, 1}, {5, 6}, file);
    check(!rs[1].ok && rs[1].why.find("other options") != std::string::npos,
          "file: a rank with other options refuses: \"%s\"", rs[1].why.c_str());
    // A leftover of an earlier run (old mtime) is not taken for this run's id.
    rs = run_bootstrap(2, {0}, {5}, file);
    utimbuf old{time(nullptr) - 3600, time(nullptr) - 3600};
    utime(file.init_file.c_str(), &old);
    file.timeout_s = 1;
    rs = run_bootstrap(2, {1}, {5}, file);
    check(!rs[0].ok && rs[0].why.find("found no init file") != std::string::npos,
          "file: a stale file is ignored: \"%s\"", rs[0].why.c_str());
    std::remove(file.init_file.c_str());
}

GPT2Config small_config(int C, int L) {
    GPT2Config c;
    c.max_seq_len = 16;
    c.vocab_size = 50;
    c.padded_vocab_size = 64;
    c.num_layers = L;
    c.num_heads = 4;
    c.channels = C;
    return c;
}

void test_shard_map() {
    for (int W : {1, 2, 3, 4, 8}) {
        const GPT2Config cfg = small_config(96, 3);
        const ParamLayout lay = param_layout(cfg);
        std::vector<int> owner(lay.total, -1);
        bool ok = true, index_ok = true;
        size_t local_sum = 0;
        for (int r = 0; r < W; r++) {
            ShardMap m;
            std::string why;
            ok = ok && shard_map_build(cfg, W, r, &m, &why);
            local_sum += m.local_total();
            size_t expect_local = 0;
            shard_for_each_chunk(m, [&](size_t lo, size_t go, size_t n) {
                index_ok = index_ok && lo == expect_local;
                expect_local += n;
                for (size_t i = 0; i < n; i++) {
                    ok = ok && owner[go + i] == -1;
                    owner[go + i] = r;
                    const int k = m.tensor_of(lo + i);
                    index_ok = index_ok && m.global_index(k, lo + i) == go + i;
                }
            });
            index_ok = index_ok && expect_local == m.local_total();
        }
        for (int o : owner) ok = ok && o >= 0;
        check(ok && local_sum == lay.total,
              "W=%d: the ranks' chunks cover every parameter exactly once", W);
        check(index_ok, "W=%d: global_index agrees with the chunk walk", W);
    }
    ShardMap m;
    std::string why;
    const bool built = shard_map_build(small_config(96, 2), 5, 0, &m, &why);
    check(!built && why.find("divides C") != std::string::npos, "C=96 on 5 GPUs refused: \"%s\"",
          why.c_str());
    const GPT2Config cfg = small_config(96, 3);
    std::vector<int> seen(param_layout(cfg).total, 0);
    for (int g = 0; g < grad_group_count(cfg); g++)
        for (const GradSlice& s : grad_group_slices(cfg, g))
            for (size_t i = 0; i < s.count; i++) seen[s.offset + i]++;
    bool once = true;
    for (int v : seen) once = once && v == 1;
    check(once, "the gradient groups cover every parameter exactly once");
}

// One AdamW element as adamw.cu computes it (fp32), for the simulation.
void adamw_ref(float& p, float& m, float& v, float g, float wd, float lr, float scale, int t) {
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    g *= scale;
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    const float step = (m / (1.0f - std::pow(b1, (float)t))) /
                       (std::sqrt(v / (1.0f - std::pow(b2, (float)t))) + eps);
    p = p - lr * (step + wd * p);
}

void test_zero1_simulation() {
    const int W = 4, t = 3;
    const float lr = 1e-3f, wd = 0.1f, clip = 1.0f;
    const GPT2Config cfg = small_config(64, 2);
    const size_t n = param_layout(cfg).total;
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<std::vector<float>> grads(W, std::vector<float>(n));
    for (auto& g : grads)
        for (float& x : g) x = normal(rng);
    std::vector<float> p0(n), m0(n), v0(n);
    for (size_t i = 0; i < n; i++) {
        p0[i] = normal(rng), m0[i] = normal(rng) * 0.1f, v0[i] = std::fabs(normal(rng)) * 1e-3f;
    }
    // The whole update: every rank all-reduces (mean over ranks, in rank order), then updates.
    std::vector<float> mean(n);
    for (size_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (int r = 0; r < W; r++) s += grads[r][i];
        mean[i] = s / W;
    }
    double norm2 = 0.0;
    for (float g : mean) norm2 += (double)g * g;
    const float scale = std::fmin(1.0f, clip / ((float)std::sqrt(norm2) + 1e-6f));
    const ParamLayout lay = param_layout(cfg);
    std::vector<float> p_ref = p0, m_ref = m0, v_ref = v0;
    for (int k = 0; k < kNumParamTensors; k++)
        for (size_t i = lay.offsets[k]; i < lay.offsets[k] + lay.sizes[k]; i++)
            adamw_ref(p_ref[i], m_ref[i], v_ref[i], mean[i], param_is_decayed(k) ? wd : 0.0f, lr,
                      scale, t);
    // ZeRO-1: reduce-scatter (rank r's chunks get the mean), per-rank norms summed, each rank
    // updates its chunks of its own state, then all-gather of the parameters.
    std::vector<std::vector<float>> buf = grads;
    std::vector<float> params = p0;
    std::vector<float> m_full(n, NAN), v_full(n, NAN);
    double norm2_sharded = 0.0;
    std::vector<ShardMap> maps(W);
    std::string why;
    for (int r = 0; r < W; r++) shard_map_build(cfg, W, r, &maps[r], &why);
    for (int r = 0; r < W; r++)
        shard_for_each_chunk(maps[r], [&](size_t, size_t go, size_t cnt) {
            for (size_t i = go; i < go + cnt; i++) {
                buf[r][i] = mean[i];
                norm2_sharded += (double)mean[i] * mean[i];
            }
        });
    check(std::fabs(norm2_sharded - norm2) <= 1e-9 * norm2,
          "sum of the ranks' chunk norms = the global norm (%.12g vs %.12g)", norm2_sharded, norm2);
    std::vector<std::vector<float>> gathered(W, std::vector<float>(n, NAN));
    for (int r = 0; r < W; r++) {
        const ShardMap& map = maps[r];
        std::vector<float> lp(map.local_total()), lm(map.local_total()), lv(map.local_total());
        shard_global_to_local(map, p0.data(), lp.data());
        shard_global_to_local(map, m0.data(), lm.data());
        shard_global_to_local(map, v0.data(), lv.data());
        for (size_t j = 0; j < map.local_total(); j++) {
            const int k = map.tensor_of(j);
            const size_t gi = map.global_index(k, j);
            adamw_ref(lp[j], lm[j], lv[j], buf[r][gi], map.decayed[k] ? wd : 0.0f, lr, scale, t);
        }
        // all-gather: every rank's chunks into every rank's parameter buffer
        for (int q = 0; q < W; q++)
            shard_local_to_global(map, lp.data(), 0, lp.size(), gathered[q].data());
        // the checkpoint gather, in two pieces to exercise the ranges
        const size_t half = map.local_total() / 2 + 1;
        shard_local_to_global(map, lm.data(), 0, half, m_full.data());
        shard_local_to_global(map, lm.data() + half, half, lm.size() - half, m_full.data());
        shard_local_to_global(map, lv.data(), 0, lv.size(), v_full.data());
    }
    bool same = true;
    for (int q = 0; q < W; q++)
        same = same && std::memcmp(gathered[q].data(), p_ref.data(), n * sizeof(float)) == 0;
    check(same, "W=%d: reduce-scatter + sharded AdamW + all-gather = the whole update, bit for bit",
          W);
    check(std::memcmp(m_full.data(), m_ref.data(), n * sizeof(float)) == 0 &&
              std::memcmp(v_full.data(), v_ref.data(), n * sizeof(float)) == 0,
          "gathered moments = the whole update's, bit for bit");
}

void test_nccl_load() {
    setenv("LLMC_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
    NcclApi api;
    std::string why;
    const bool loaded = nccl_load(&api, &why);
    check(!loaded && why.find("LLMC_NCCL_LIB") != std::string::npos,
          "a missing NCCL library is refused naming LLMC_NCCL_LIB: \"%s\"", why.c_str());
    unsetenv("LLMC_NCCL_LIB");
    NcclApi real;
    if (nccl_load(&real, &why))
        check(real.version >= kNcclMinVersion, "libnccl.so.2 loads: version %d from %s",
              real.version, real.path.c_str());
    else
        std::printf("note: no libnccl.so.2 on the search path here (%s)\n", why.c_str());
}

}  // namespace

// --launched: this process is one rank started by a real launcher (mpirun, scripts/run/launch.sh,
// srun; dev/test/test_launchers.sh runs them). It finds its place from the environment as the
// trainer does, gets rank 0's id through the TCP bootstrap (LLMC_MASTER_PORT from the caller),
// checks the id against the bytes rank 0 makes, and prints one line "rank R of W (local L, SOURCE):
// id ok" or the failure; exit 0 only when every check passed.
int launched_rank(const char* expect_source) {
    DistEnv env;
    std::string why;
    if (!dist_env_from_environment(&env, &why)) {
        std::printf("FAIL: %s\n", why.c_str());
        return 1;
    }
    if (env.source.find(expect_source) == std::string::npos || env.world_size < 2) {
        std::printf("FAIL: rank %d of %d found through \"%s\", expected %s and a world of 2+\n",
                    env.rank, env.world_size, env.source.c_str(), expect_source);
        return 1;
    }
    BootstrapOptions opt;
    if (!bootstrap_options_from_environment("", &opt, &why)) {
        std::printf("FAIL: %s\n", why.c_str());
        return 1;
    }
    opt.timeout_s = 30;
    uint8_t want[kBootstrapIdBytes], id[kBootstrapIdBytes];
    for (size_t i = 0; i < kBootstrapIdBytes; i++) want[i] = (uint8_t)(i * 37 + 11);
    if (env.rank == 0)
        std::memcpy(id, want, sizeof(id));
    else
        std::memset(id, 0, sizeof(id));
    if (!bootstrap_share_id(env, opt, 0x1234, id, &why)) {
        std::printf("FAIL: rank %d: %s\n", env.rank, why.c_str());
        return 1;
    }
    const bool ok = std::memcmp(id, want, sizeof(id)) == 0;
    std::printf("rank %d of %d (local %d, %s): id %s\n", env.rank, env.world_size, env.local_rank,
                env.source.c_str(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}

int main(int argc, char** argv) {
    if (argc == 3 && std::strcmp(argv[1], "--launched") == 0) return launched_rank(argv[2]);
    char tmpl[] = "/tmp/test_multi_gpu_XXXXXX";
    const char* tmp = mkdtemp(tmpl);
    if (tmp == nullptr) return 2;
    test_discovery();
    test_bootstrap(tmp);
    test_shard_map();
    test_zero1_simulation();
    test_nccl_load();
    rmdir(tmp);
    std::printf("test_multi_gpu_host: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
