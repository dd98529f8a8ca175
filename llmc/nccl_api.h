// nccl_api.h: the part of NCCL's C API this project calls, loaded at run time with dlopen, so
// the trainer builds without NCCL and a single-GPU run never needs it installed.
//
// The types mirror nccl.h's ABI (stable since NCCL 2.x: the enum values, ncclUniqueId's 128
// bytes, the communicator as an opaque pointer); dev/test/test_multi_gpu_host checks them against
// nccl.h when that header is present. The library: $LLMC_NCCL_LIB when set, else libnccl.so.2
// from the loader's search path (LD_LIBRARY_PATH, ldconfig). NCCL 2.10 or later is required
// (ncclAvg).
#pragma once
#include <cstddef>
#include <string>

#include "dist_env.h"

namespace llmc {

using NcclComm = struct NcclCommOpaque*;  // ncclComm_t
struct NcclUniqueId {
    char internal[kBootstrapIdBytes];
};
enum NcclResult : int { kNcclSuccess = 0, kNcclInProgress = 7 };
enum NcclDataType : int { kNcclInt32 = 2, kNcclFloat32 = 7, kNcclBfloat16 = 9 };
enum NcclRedOp : int { kNcclSum = 0, kNcclMax = 2, kNcclMin = 3, kNcclAvg = 4 };
constexpr int kNcclMinVersion = 21000;  // ncclAvg arrived in 2.10

// Function pointers, resolved by nccl_load. The stream argument is a cudaStream_t.
struct NcclApi {
    void* handle = nullptr;
    std::string path;  // what was loaded
    int version = 0;   // ncclGetVersion: major * 10000 + minor * 100 + patch
    int (*GetVersion)(int*) = nullptr;
    int (*GetUniqueId)(NcclUniqueId*) = nullptr;
    int (*CommInitRank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
    int (*CommDestroy)(NcclComm) = nullptr;
    int (*CommAbort)(NcclComm) = nullptr;
    int (*CommGetAsyncError)(NcclComm, int*) = nullptr;
    const char* (*GetErrorString)(int) = nullptr;
    const char* (*GetLastError)(NcclComm) = nullptr;
    int (*AllReduce)(const void*, void*, size_t, int, int, NcclComm, void*) = nullptr;
    int (*ReduceScatter)(const void*, void*, size_t, int, int, NcclComm, void*) = nullptr;
    int (*AllGather)(const void*, void*, size_t, int, NcclComm, void*) = nullptr;
    int (*Send)(const void*, size_t, int, int, NcclComm, void*) = nullptr;
    int (*Recv)(void*, size_t, int, int, NcclComm, void*) = nullptr;
    int (*GroupStart)() = nullptr;
    int (*GroupEnd)() = nullptr;
};

// Loads the library and every symbol above. Returns false with one sentence in *why (naming
// LLMC_NCCL_LIB) when it cannot.
bool nccl_load(NcclApi* api, std::string* why);

}  // namespace llmc
