// step_trace.cu: CUPTI activity records through dlopen (see step_trace.cuh).
//
// CUPTI fills buffers we hand it (buffer_requested) and gives them back full (buffer_completed),
// possibly from its own thread; the full ones wait in a list until stop() flushes CUPTI and
// reads them. The record layouts are this toolkit's (cupti_activity.h); the fields read here
// (kind, start, end, stream, grid, block, correlation id, name, graph node) have kept their
// place across CUPTI versions, and a library older than these headers gets a warning.
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "step_trace.cuh"

namespace llmc {

struct CuptiApi {
    void* handle = nullptr;
    std::string path;
    decltype(&cuptiActivityEnable) enable = nullptr;
    decltype(&cuptiActivityDisable) disable = nullptr;
    decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
    decltype(&cuptiActivityFlushAll) flush_all = nullptr;
    decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
    decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
    decltype(&cuptiGetTimestamp) timestamp = nullptr;
    decltype(&cuptiGetResultString) result_string = nullptr;
    decltype(&cuptiGetVersion) version = nullptr;
};

namespace {

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kBufferAlign = 8;  // CUPTI's records need 8-byte alignment
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

// The buffers CUPTI has given back, and the records it dropped. CUPTI's C callbacks take no
// user pointer, so this lives at file scope (one tracer at a time).
struct Collected {
    std::mutex mu;
    std::vector<std::pair<uint8_t*, size_t>> buffers;  // (buffer, valid bytes)
    size_t dropped = 0;
    CuptiApi* api = nullptr;
};
Collected& collected() {
    static Collected c;
    return c;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
    *size = *buffer != nullptr ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                               size_t valid) {
    Collected& c = collected();
    size_t dropped = 0;
    if (c.api != nullptr && c.api->dropped != nullptr) c.api->dropped(ctx, stream, &dropped);
    std::lock_guard<std::mutex> lock(c.mu);
    c.buffers.emplace_back(buffer, valid);
    c.dropped += dropped;
}

std::string result_text(const CuptiApi& api, CUptiResult r) {
    const char* s = nullptr;
    if (api.result_string != nullptr) api.result_string(r, &s);
    return s != nullptr ? s : "CUPTI error " + std::to_string((int)r);
}

template <typename F>
bool resolve(void* handle, const char* name, F* fn, std::string* missing) {
    *fn = reinterpret_cast<F>(dlsym(handle, name));
    if (*fn == nullptr) *missing += (missing->empty() ? "" : ", ") + std::string(name);
    return *fn != nullptr;
}

// dlopen's first hit among the usual places; *tried lists what was tried.
void* open_cupti(std::string* path, std::string* tried) {
    std::vector<std::string> candidates;
    const char* env = std::getenv("LLMC_CUPTI_LIB");
    if (env != nullptr && *env) candidates.push_back(env);
    candidates.push_back("libcupti.so.13");
    candidates.push_back("libcupti.so");
    const char* home_env = std::getenv("CUDA_HOME");
    const std::string home = home_env != nullptr && *home_env ? home_env : "/usr/local/cuda";
    for (const char* dir : {"/extras/CUPTI/lib64/", "/lib64/", "/targets/x86_64-linux/lib/"}) {
        candidates.push_back(home + dir + "libcupti.so.13");
        candidates.push_back(home + dir + "libcupti.so");
    }
    for (const std::string& c : candidates) {
        *tried += (tried->empty() ? "" : ", ") + c;
        void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h != nullptr) {
            *path = c;
            return h;
        }
    }
    return nullptr;
}

std::string demangled(const char* name) {
    if (name == nullptr) return "?";
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string out = status == 0 && d != nullptr ? d : name;
    std::free(d);
    return out;
}

const char* memcpy_kind(uint8_t k) {
    switch (k) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
            return "memcpy HtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
            return "memcpy DtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
            return "memcpy DtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
            return "memcpy HtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
            return "memcpy PtoP";
        default:
            return "memcpy";
    }
}

// Appends the kernel, memcpy and memset records of one buffer; names are demangled once per
// distinct name pointer (CUPTI shares one string among the records of a kernel).
void parse_buffer(const CuptiApi& api, uint8_t* buffer, size_t valid,
                  std::map<const char*, std::string>* names, std::vector<llmc::TraceRecord>* out) {
    CUpti_Activity* rec = nullptr;
    while (api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
        llmc::TraceRecord t;
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
            rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
            t.kind = llmc::TraceKind::kKernel;
            t.start_ns = k->start, t.end_ns = k->end;
            t.stream = k->streamId, t.correlation = k->correlationId, t.graph_node = k->graphNodeId;
            t.grid[0] = k->gridX, t.grid[1] = k->gridY, t.grid[2] = k->gridZ;
            t.block[0] = k->blockX, t.block[1] = k->blockY, t.block[2] = k->blockZ;
            auto it = names->find(k->name);
            if (it == names->end()) it = names->emplace(k->name, demangled(k->name)).first;
            t.name = it->second;
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
            t.kind = llmc::TraceKind::kMemcpy;
            t.start_ns = m->start, t.end_ns = m->end;
            t.stream = m->streamId, t.correlation = m->correlationId, t.graph_node = m->graphNodeId;
            t.bytes = m->bytes;
            t.name = memcpy_kind(m->copyKind);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
            t.kind = llmc::TraceKind::kMemset;
            t.start_ns = m->start, t.end_ns = m->end;
            t.stream = m->streamId, t.correlation = m->correlationId, t.graph_node = m->graphNodeId;
            t.bytes = m->bytes;
            t.name = "memset";
        } else {
            continue;
        }
        // A record CUPTI could not time has zero timestamps: it would only distort the union.
        if (t.start_ns != 0 && t.end_ns >= t.start_ns) out->push_back(t);
    }
}

}  // namespace

StepTracer::~StepTracer() {
    if (running_) {
        size_t dropped = 0;
        stop(&dropped);
    }
    delete api_;  // the library stays loaded: CUPTI does not support being unloaded
}

bool StepTracer::start(std::string* why) {
    if (api_ == nullptr) {
        std::string path, tried;
        void* h = open_cupti(&path, &tried);
        if (h == nullptr) {
            *why = "CUPTI (libcupti.so) was not found (tried " + tried +
                   "): set LLMC_CUPTI_LIB to its path, e.g. "
                   "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13";
            return false;
        }
        CuptiApi* a = new CuptiApi();
        a->handle = h;
        a->path = path;
        std::string missing;
        resolve(h, "cuptiActivityEnable", &a->enable, &missing);
        resolve(h, "cuptiActivityDisable", &a->disable, &missing);
        resolve(h, "cuptiActivityRegisterCallbacks", &a->register_callbacks, &missing);
        resolve(h, "cuptiActivityFlushAll", &a->flush_all, &missing);
        resolve(h, "cuptiActivityGetNextRecord", &a->next_record, &missing);
        resolve(h, "cuptiActivityGetNumDroppedRecords", &a->dropped, &missing);
        resolve(h, "cuptiGetTimestamp", &a->timestamp, &missing);
        resolve(h, "cuptiGetResultString", &a->result_string, &missing);
        resolve(h, "cuptiGetVersion", &a->version, &missing);
        if (!missing.empty()) {
            *why = path + " lacks " + missing + ": it is not a CUPTI this program can use";
            delete a;
            return false;
        }
        uint32_t version = 0;
        if (a->version(&version) == CUPTI_SUCCESS && version < CUPTI_API_VERSION) {
            std::fprintf(stderr,
                         "warning: %s is CUPTI API version %u, older than this build's headers "
                         "(%u): kernel records past their name may be misread\n",
                         path.c_str(), version, (unsigned)CUPTI_API_VERSION);
        }
        api_ = a;
    }
    collected().api = api_;
    CUptiResult r = api_->register_callbacks(buffer_requested, buffer_completed);
    for (size_t i = 0; r == CUPTI_SUCCESS && i < sizeof(kKinds) / sizeof(kKinds[0]); i++) {
        r = api_->enable(kKinds[i]);
    }
    if (r != CUPTI_SUCCESS) {
        *why = "CUPTI (" + api_->path + ") refused to trace: " + result_text(*api_, r);
        for (CUpti_ActivityKind k : kKinds) api_->disable(k);
        return false;
    }
    running_ = true;
    return true;
}

uint64_t StepTracer::timestamp() const {
    uint64_t t = 0;
    if (api_ != nullptr) api_->timestamp(&t);
    return t;
}

std::vector<llmc::TraceRecord> StepTracer::stop(size_t* dropped) {
    std::vector<llmc::TraceRecord> out;
    *dropped = 0;
    if (!running_) return out;
    api_->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (CUpti_ActivityKind k : kKinds) api_->disable(k);
    running_ = false;
    Collected& c = collected();
    std::vector<std::pair<uint8_t*, size_t>> buffers;
    {
        std::lock_guard<std::mutex> lock(c.mu);
        buffers.swap(c.buffers);
        *dropped = c.dropped;
        c.dropped = 0;
    }
    std::map<const char*, std::string> names;
    for (auto& b : buffers) {
        parse_buffer(*api_, b.first, b.second, &names, &out);
        std::free(b.first);
    }
    return out;
}

}  // namespace llmc
