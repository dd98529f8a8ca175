// nccl_api.cpp: dlopen of the NCCL library (see nccl_api.h).
#include "nccl_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace llmc {

namespace {
template <typename F>
bool resolve(void* handle, const char* name, F* fn, std::string* missing) {
    *fn = reinterpret_cast<F>(dlsym(handle, name));
    if (*fn == nullptr) *missing += std::string(*missing->c_str() ? ", " : "") + name;
    return *fn != nullptr;
}
}  // namespace

bool nccl_load(NcclApi* api, std::string* why) {
    const char* env = std::getenv("LLMC_NCCL_LIB");
    api->path = env != nullptr && *env ? env : "libnccl.so.2";
    api->handle = dlopen(api->path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (api->handle == nullptr) {
        const char* err = dlerror();
        *why = "cannot load the NCCL library '" + api->path + "' (" + (err ? err : "?") +
               "), which a run on more than one GPU needs: set LLMC_NCCL_LIB to the path of "
               "libnccl.so.2 (e.g. PyTorch's, under site-packages/nvidia/nccl/lib)";
        return false;
    }
    std::string missing;
    void* h = api->handle;
    resolve(h, "ncclGetVersion", &api->GetVersion, &missing);
    resolve(h, "ncclGetUniqueId", &api->GetUniqueId, &missing);
    resolve(h, "ncclCommInitRank", &api->CommInitRank, &missing);
    resolve(h, "ncclCommDestroy", &api->CommDestroy, &missing);
    resolve(h, "ncclCommAbort", &api->CommAbort, &missing);
    resolve(h, "ncclCommGetAsyncError", &api->CommGetAsyncError, &missing);
    resolve(h, "ncclGetErrorString", &api->GetErrorString, &missing);
    resolve(h, "ncclGetLastError", &api->GetLastError, &missing);
    resolve(h, "ncclAllReduce", &api->AllReduce, &missing);
    resolve(h, "ncclReduceScatter", &api->ReduceScatter, &missing);
    resolve(h, "ncclAllGather", &api->AllGather, &missing);
    resolve(h, "ncclSend", &api->Send, &missing);
    resolve(h, "ncclRecv", &api->Recv, &missing);
    resolve(h, "ncclGroupStart", &api->GroupStart, &missing);
    resolve(h, "ncclGroupEnd", &api->GroupEnd, &missing);
    if (!missing.empty()) {
        *why = "the NCCL library '" + api->path + "' lacks " + missing +
               ": set LLMC_NCCL_LIB to an NCCL 2.10 or newer libnccl.so.2";
        return false;
    }
    api->GetVersion(&api->version);
    if (api->version < kNcclMinVersion) {
        char buf[256];
        std::snprintf(buf, sizeof(buf),
                      "the NCCL library '%s' is version %d; 2.10 (21000) or newer is needed: "
                      "set LLMC_NCCL_LIB to a newer libnccl.so.2",
                      api->path.c_str(), api->version);
        *why = buf;
        return false;
    }
    return true;
}

}  // namespace llmc
