// check.h: every check macro of the project, in one place.
//
// LLMC_CHECK(cond, fmt, ...)   host check that stays on in release builds; prints the message
//                              (one plain sentence for the user) with file:line and exits 1.
// LLMC_FAIL(fmt, ...)          the same without a condition. Both go through llmc::fail(), which
//                              throws llmc::FatalError instead of exiting in fuzz builds
//                              (-DLLMC_FUZZ, `make fuzz`), so a harness can check the sentence.
// LLMC_CUDA_CHECK(expr)        a CUDA runtime call; prints the error name and string.
// LLMC_CUDA_CHECK_LAST()       after a kernel launch; with LLMC_DEBUG_SYNC=1 in the environment
//                              it also synchronizes so an asynchronous fault names the right
//                              kernel.
// LLMC_CUBLAS_CHECK(expr)      a cuBLAS / cuBLASLt call; prints the status name and string.
// LLMC_NCCL_CHECK(api, expr)   an NCCL call through a loaded NcclApi (nccl_api.h); prints NCCL's
//                              error string and its last error message.
#pragma once
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#ifdef LLMC_FUZZ
#include <stdexcept>
#include <string>
#endif

namespace llmc {
#ifdef LLMC_FUZZ
// Thrown by fail() in fuzz builds (-DLLMC_FUZZ), where exiting would end the fuzzer: the harness
// catches it and checks the sentence (what()) instead.
struct FatalError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
#endif

// The one fatal path of LLMC_FAIL / LLMC_CHECK: prints "error: <sentence>" and where, then exits 1.
[[noreturn]] inline __attribute__((format(printf, 3, 4))) void fail(const char* file, int line,
                                                                    const char* fmt, ...) {
    std::va_list args;
    va_start(args, fmt);
#ifdef LLMC_FUZZ
    (void)file, (void)line;
    char msg[4096];
    std::vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);
    throw FatalError(msg);
#else
    std::fprintf(stderr, "error: ");
    std::vfprintf(stderr, fmt, args);
    va_end(args);
    std::fprintf(stderr, "\n  (at %s:%d)\n", file, line);
    std::exit(1);
#endif
}
}  // namespace llmc

#define LLMC_FAIL(...) ::llmc::fail(__FILE__, __LINE__, __VA_ARGS__)

#define LLMC_CHECK(cond, ...)       \
    do {                            \
        if (!(cond)) {              \
            LLMC_FAIL(__VA_ARGS__); \
        }                           \
    } while (0)

#if defined(__CUDACC__) || defined(LLMC_WITH_CUDA)
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace llmc {
// True when LLMC_DEBUG_SYNC=1: every launch is followed by a device synchronize.
inline bool debug_sync_enabled() {
    static const int on = [] {
        const char* v = std::getenv("LLMC_DEBUG_SYNC");
        return (v != nullptr && v[0] == '1') ? 1 : 0;
    }();
    return on != 0;
}
}  // namespace llmc

#define LLMC_CUDA_CHECK(expr)                                                               \
    do {                                                                                    \
        cudaError_t llmc_err_ = (expr);                                                     \
        if (llmc_err_ != cudaSuccess) {                                                     \
            std::fprintf(stderr, "CUDA error %s (%s)\n  in %s\n  at %s:%d\n",               \
                         cudaGetErrorName(llmc_err_), cudaGetErrorString(llmc_err_), #expr, \
                         __FILE__, __LINE__);                                               \
            std::exit(1);                                                                   \
        }                                                                                   \
    } while (0)

#define LLMC_CUDA_CHECK_LAST()                        \
    do {                                              \
        LLMC_CUDA_CHECK(cudaGetLastError());          \
        if (llmc::debug_sync_enabled()) {             \
            LLMC_CUDA_CHECK(cudaDeviceSynchronize()); \
        }                                             \
    } while (0)

#define LLMC_CUBLAS_CHECK(expr)                                                                 \
    do {                                                                                        \
        cublasStatus_t llmc_st_ = (expr);                                                       \
        if (llmc_st_ != CUBLAS_STATUS_SUCCESS) {                                                \
            std::fprintf(stderr, "cuBLAS error %s (%s)\n  in %s\n  at %s:%d\n",                 \
                         cublasGetStatusName(llmc_st_), cublasGetStatusString(llmc_st_), #expr, \
                         __FILE__, __LINE__);                                                   \
            std::exit(1);                                                                       \
        }                                                                                       \
    } while (0)

#define LLMC_NCCL_CHECK(api, expr)                                                           \
    do {                                                                                     \
        const int llmc_nr_ = (expr);                                                         \
        if (llmc_nr_ != 0) {                                                                 \
            std::fprintf(stderr, "NCCL error %d (%s: %s)\n  in %s\n  at %s:%d\n", llmc_nr_,  \
                         (api).GetErrorString(llmc_nr_), (api).GetLastError(nullptr), #expr, \
                         __FILE__, __LINE__);                                                \
            std::exit(1);                                                                    \
        }                                                                                    \
    } while (0)
#endif
