// multi_gpu.cu: NCCL communicator, gradient reduction overlapped with the backward, ZeRO-1
// parameter gather, host-side reductions and checkpoint shard gathering (see multi_gpu.cuh).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "multi_gpu.cuh"
#include "nvtx.h"

namespace llmc {

namespace {

constexpr int kFloatX = sizeof(floatX) == 2 ? kNcclBfloat16 : kNcclFloat32;
// Floats per piece when gathering a shard for a checkpoint: 64 MiB of device staging.
constexpr size_t kGatherPiece = 16u << 20;

double env_seconds(const char* name, double fallback) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return fallback;
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    LLMC_CHECK(*end == '\0' && s > 0, "%s='%s' is not a positive number of seconds.", name, v);
    return s;
}

// The watchdog: a thread that ends the process when multi_gpu_wait has been waiting for longer
// than LLMC_NCCL_TIMEOUT plus kAbortGraceSeconds, i.e. when the wait's own timeout could not act
// (a call into NCCL or CUDA that blocks on a kernel waiting for a dead peer).
constexpr int kAbortGraceSeconds = 10;

void watchdog_loop(MultiGpu* d) {
    using namespace std::chrono;
    const long long limit_ns = (long long)((d->timeout_s + kAbortGraceSeconds) * 1e9);
    while (!d->watchdog_stop.load()) {
        std::this_thread::sleep_for(milliseconds(200));
        const long long since = d->wait_start_ns.load();
        const long long now =
            duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
        if (since != 0 && now - since > limit_ns) {
            std::fprintf(stderr,
                         "error: rank %d has waited %.0f s for a step, a collective or the abort "
                         "after a failed peer (LLMC_NCCL_TIMEOUT %.0f s + %d s): exiting.\n",
                         d->env.rank, (now - since) / 1e9, d->timeout_s, kAbortGraceSeconds);
            std::_Exit(1);
        }
    }
}

}  // namespace

MultiGpu::~MultiGpu() {
    if (watchdog.joinable()) {
        watchdog_stop.store(true);
        watchdog.join();
    }
    if (comm != nullptr) nccl.CommDestroy(comm);
    for (cudaEvent_t e : group_ready) cudaEventDestroy(e);
    if (comm_done) cudaEventDestroy(comm_done);
    if (comm_stream) cudaStreamDestroy(comm_stream);
    cudaFree(d_scratch);
}

void multi_gpu_init(MultiGpu* d, const Context& ctx, const DistEnv& env,
                    const BootstrapOptions& bootstrap, uint64_t fingerprint, int zero,
                    const GPT2Config& cfg) {
    d->env = env;
    d->bootstrap = bootstrap;
    d->zero = zero;
    d->timeout_s = env_seconds("LLMC_NCCL_TIMEOUT", 600.0);
    std::string why;
    if (zero == 1)
        LLMC_CHECK(shard_map_build(cfg, env.world_size, env.rank, &d->shard, &why), "%s.",
                   why.c_str());
    // NVLink multicast (NVLS) stays off: the GPU machines this project runs on must not use
    // it. Set before the communicator exists, since NCCL reads it then; a user's setting wins.
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    LLMC_CHECK(nccl_load(&d->nccl, &why), "%s.", why.c_str());
    NcclUniqueId id{};
    if (env.rank == 0) LLMC_NCCL_CHECK(d->nccl, d->nccl.GetUniqueId(&id));
    LLMC_CHECK(bootstrap_share_id(env, bootstrap, fingerprint,
                                  reinterpret_cast<uint8_t*>(id.internal), &why),
               "%s.", why.c_str());
    LLMC_CUDA_CHECK(cudaSetDevice(ctx.device));
    LLMC_NCCL_CHECK(d->nccl, d->nccl.CommInitRank(&d->comm, env.world_size, id, env.rank));
    bootstrap_cleanup(env, bootstrap);
    // The gradient reduction runs beside the backward: a higher priority lets its small
    // kernels start as soon as a group is ready rather than after the queued compute.
    int least = 0, greatest = 0;
    LLMC_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    LLMC_CUDA_CHECK(cudaStreamCreateWithPriority(&d->comm_stream, cudaStreamNonBlocking, greatest));
    for (int g = 0; g < grad_group_count(cfg); g++) {
        d->groups.push_back(grad_group_slices(cfg, g));
        cudaEvent_t e;
        LLMC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        d->group_ready.push_back(e);
    }
    LLMC_CUDA_CHECK(cudaEventCreateWithFlags(&d->comm_done, cudaEventDisableTiming));
    LLMC_CUDA_CHECK(cudaMalloc(&d->d_scratch, 2 * sizeof(float)));
    d->watchdog = std::thread(watchdog_loop, d);
    std::printf(
        "multi-GPU        %d processes (%s), rank %d on device %d, NCCL %d from %s, "
        "zero %d\n",
        env.world_size, env.source.c_str(), env.rank, ctx.device, d->nccl.version,
        d->nccl.path.c_str(), zero);
}

void multi_gpu_grads_ready(const Context& ctx, MultiGpu* d, floatX* grads, int group) {
    NvtxRange range("reduce gradients", group);
    cudaEvent_t ready = d->group_ready[group];
    LLMC_CUDA_CHECK(cudaEventRecord(ready, ctx.stream));
    LLMC_CUDA_CHECK(cudaStreamWaitEvent(d->comm_stream, ready, 0));
    const NcclApi& n = d->nccl;
    const int W = d->env.world_size, r = d->env.rank;
    LLMC_NCCL_CHECK(n, n.GroupStart());
    for (const GradSlice& s : d->groups[group]) {
        floatX* base = grads + s.offset;
        if (d->zero == 1) {
            const size_t chunk = s.count / W;
            LLMC_NCCL_CHECK(n, n.ReduceScatter(base, base + (size_t)r * chunk, chunk, kFloatX,
                                               kNcclAvg, d->comm, d->comm_stream));
        } else {
            LLMC_NCCL_CHECK(
                n, n.AllReduce(base, base, s.count, kFloatX, kNcclAvg, d->comm, d->comm_stream));
        }
    }
    LLMC_NCCL_CHECK(n, n.GroupEnd());
}

void multi_gpu_join(const Context& ctx, MultiGpu* d) {
    LLMC_CUDA_CHECK(cudaEventRecord(d->comm_done, d->comm_stream));
    LLMC_CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, d->comm_done, 0));
}

void multi_gpu_all_reduce(const Context& ctx, MultiGpu* d, float* values, size_t n, NcclRedOp op) {
    LLMC_NCCL_CHECK(d->nccl,
                    d->nccl.AllReduce(values, values, n, kNcclFloat32, op, d->comm, ctx.stream));
}

void multi_gpu_all_gather_params(const Context& ctx, MultiGpu* d, floatX* params) {
    NvtxRange range("gather parameters");
    const NcclApi& n = d->nccl;
    const int W = d->env.world_size, r = d->env.rank;
    LLMC_NCCL_CHECK(n, n.GroupStart());
    for (const auto& group : d->groups) {
        for (const GradSlice& s : group) {
            floatX* base = params + s.offset;
            const size_t chunk = s.count / W;
            LLMC_NCCL_CHECK(n, n.AllGather(base + (size_t)r * chunk, base, chunk, kFloatX, d->comm,
                                           ctx.stream));
        }
    }
    LLMC_NCCL_CHECK(n, n.GroupEnd());
}

float multi_gpu_host_reduce(const Context& ctx, MultiGpu* d, float value, NcclRedOp op) {
    LLMC_CUDA_CHECK(
        cudaMemcpyAsync(d->d_scratch, &value, sizeof(float), cudaMemcpyHostToDevice, ctx.stream));
    multi_gpu_all_reduce(ctx, d, d->d_scratch, 1, op);
    // Wait through multi_gpu_wait (a failed peer ends this rank), then copy: a copy to pageable
    // memory would block in the driver until the collective is done.
    cudaEvent_t done;
    LLMC_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    LLMC_CUDA_CHECK(cudaEventRecord(done, ctx.stream));
    multi_gpu_wait(ctx, d, done);
    LLMC_CUDA_CHECK(cudaEventDestroy(done));
    float out = 0.0f;
    LLMC_CUDA_CHECK(cudaMemcpy(&out, d->d_scratch, sizeof(float), cudaMemcpyDeviceToHost));
    return out;
}

void multi_gpu_wait(const Context& ctx, MultiGpu* d, cudaEvent_t event) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    // Seen by the watchdog thread; cleared on the way out (a failure exits the process).
    d->wait_start_ns.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count());
    struct Clear {
        MultiGpu* d;
        ~Clear() { d->wait_start_ns.store(0); }
    } clear{d};
    Clock::time_point next_check = start;
    while (true) {
        const cudaError_t q = cudaEventQuery(event);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) LLMC_CUDA_CHECK(q);
        // Yield rather than sleep: like the driver's own spin-wait, it returns within
        // microseconds of the step's end (a sleep costs ~60 us of timer slack a step).
        std::this_thread::yield();
        const Clock::time_point now = Clock::now();
        if (now < next_check) continue;
        next_check = now + std::chrono::milliseconds(10);
        int async = 0;
        LLMC_NCCL_CHECK(d->nccl, d->nccl.CommGetAsyncError(d->comm, &async));
        const double waited = std::chrono::duration<double>(now - start).count();
        if (async != 0 || waited > d->timeout_s) {
            // The sentence first, then the abort: with a peer gone, ncclCommAbort (or the CUDA
            // teardown at exit) can block on a kernel still waiting for it. On 2 H200s a rank
            // whose peer was killed -9 never printed this sentence when the abort came first,
            // and hung until killed. The watchdog (multi_gpu_init) ends the process if it blocks.
            if (async != 0) {
                std::fprintf(stderr,
                             "error: rank %d: NCCL reported an error (%s): another rank probably "
                             "failed; see its output.\n",
                             d->env.rank, d->nccl.GetErrorString(async));
            } else {
                std::fprintf(stderr,
                             "error: rank %d waited %.0f s for a step or collective that did not "
                             "finish: another rank probably stopped or failed (see its output), "
                             "or raise LLMC_NCCL_TIMEOUT.\n",
                             d->env.rank, waited);
            }
            std::fflush(stdout);
            d->nccl.CommAbort(d->comm);
            d->comm = nullptr;
            std::exit(1);
        }
    }
}

void multi_gpu_gather_shards(const Context& ctx, MultiGpu* d, const float* d_local,
                             float* host_full) {
    const NcclApi& n = d->nccl;
    const size_t local = d->shard.local_total();
    const size_t piece = std::min(local, kGatherPiece);
    const int W = d->env.world_size;
    cudaEvent_t done;
    LLMC_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    LLMC_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    if (d->env.rank != 0) {
        for (size_t o = 0; o < local; o += piece)
            LLMC_NCCL_CHECK(n, n.Send(d_local + o, std::min(piece, local - o), kNcclFloat32, 0,
                                      d->comm, ctx.stream));
        LLMC_CUDA_CHECK(cudaEventRecord(done, ctx.stream));
        multi_gpu_wait(ctx, d, done);
        LLMC_CUDA_CHECK(cudaEventDestroy(done));
        return;
    }
    float* staging = nullptr;
    LLMC_CUDA_CHECK(cudaMalloc(&staging, piece * sizeof(float)));
    std::vector<float> host(piece);
    for (size_t o = 0; o < local; o += piece) {
        const size_t count = std::min(piece, local - o);
        for (int q = 0; q < W; q++) {
            const float* src = d_local + o;
            if (q != 0) {
                LLMC_NCCL_CHECK(n, n.Recv(staging, count, kNcclFloat32, q, d->comm, ctx.stream));
                LLMC_CUDA_CHECK(cudaEventRecord(done, ctx.stream));
                multi_gpu_wait(ctx, d, done);
                src = staging;
            }
            LLMC_CUDA_CHECK(
                cudaMemcpy(host.data(), src, count * sizeof(float), cudaMemcpyDeviceToHost));
            ShardMap of_q = d->shard;
            of_q.part = q;
            shard_local_to_global(of_q, host.data(), o, count, host_full);
        }
    }
    LLMC_CUDA_CHECK(cudaFree(staging));
    LLMC_CUDA_CHECK(cudaEventDestroy(done));
}

}  // namespace llmc
