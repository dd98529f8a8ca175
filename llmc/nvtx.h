// nvtx.h: a scoped NVTX range, so nsys timelines show forward, backward, optimizer and each
// layer. NVTX3 is header-only; with no profiler attached a range costs a few nanoseconds.
#pragma once
#include <nvtx3/nvToolsExt.h>

#include <cstdio>

namespace llmc {

class NvtxRange {
  public:
    explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
    NvtxRange(const char* prefix, int index) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%s %d", prefix, index);
        nvtxRangePushA(buf);
    }
    ~NvtxRange() { nvtxRangePop(); }
    NvtxRange(const NvtxRange&) = delete;
    NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace llmc
