// context.cuh: the state every launcher takes first, instead of globals.
//
// A Context owns the device properties, the one non-default stream all work runs on, the
// cuBLASLt handle and its workspace, and the cache of matmul plans (descriptors and the chosen
// algorithm per shape, built once and reused, also inside CUDA graph capture).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <tuple>

#include "check.h"

struct MatmulPlan;  // defined in matmul.cu

// Everything that selects a cuBLASLt plan: shape, layouts, batch, epilogue, and the pointer
// alignment the chosen algorithm may assume.
struct MatmulKey {
    int m, n, k, lda, ldb, ldc, ldaux, batch;
    long long stride_a, stride_b, stride_c;
    int transa, transb, epilogue, align;
    bool operator<(const MatmulKey& o) const {
        return std::tie(m, n, k, lda, ldb, ldc, ldaux, batch, stride_a, stride_b, stride_c, transa,
                        transb, epilogue, align) <
               std::tie(o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.ldaux, o.batch, o.stride_a,
                        o.stride_b, o.stride_c, o.transa, o.transb, o.epilogue, o.align);
    }
};

struct Context {
    int device = 0;
    cudaDeviceProp props{};
    cudaStream_t stream = nullptr;
    cublasLtHandle_t lt = nullptr;
    void* lt_workspace = nullptr;  // cuBLASLt workspace (device)
    size_t lt_workspace_bytes = 0;
    bool tf32 = true;  // fp32 build: TF32 tensor cores in matmuls ('high')
    // Time cuBLASLt's candidate algorithms once per plan and keep the fastest among those whose
    // results are bitwise the heuristic's first choice's (matmul.cu), so the bits are those of
    // autotune off, run after run. Off: the heuristic's first choice, untimed.
    bool autotune = true;
    mutable int autotune_skipped = 0;  // plans left untuned for want of memory
    // Cached plans; mutable because launchers take a const Context& yet fill the cache.
    mutable std::map<MatmulKey, MatmulPlan*> plans;

    Context() = default;
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ~Context();
};

// Frees the cached plans (defined with the plans, in matmul.cu).
void matmul_plans_destroy(const Context& ctx);

// Selects `device`, creates the stream, the cuBLASLt handle and a 32 MiB workspace.
void context_init(Context* ctx, int device, bool tf32);

// Number of streaming multiprocessors (for sizing persistent grids).
inline int ctx_num_sms(const Context& ctx) { return ctx.props.multiProcessorCount; }
