// step_trace.cuh: a GPU timeline without nsys, from CUPTI's activity API.
//
// StepTracer loads CUPTI at run time (dlopen: no binary links it), records every kernel
// (CONCURRENT_KERNEL: tracing does not serialize kernels), memcpy and memset with their start and
// end on the device, graph nodes included, and hands them back as llmc::TraceRecord
// (step_timeline.h), whose analysis finds where a step's time goes. The library is looked for
// in LLMC_CUPTI_LIB, the loader's path, then $CUDA_HOME (default
// /usr/local/cuda)/extras/CUPTI/lib64, lib64 and targets/x86_64-linux/lib; when it is absent,
// start() says so in one sentence. Records come through CUPTI's buffer callbacks, which carry no
// user pointer, so one tracer may be active at a time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "step_timeline.h"

namespace llmc {

struct CuptiApi;  // the loaded functions (step_trace.cu)

class StepTracer {
  public:
    StepTracer() = default;
    StepTracer(const StepTracer&) = delete;
    StepTracer& operator=(const StepTracer&) = delete;
    ~StepTracer();

    // Loads CUPTI and starts recording kernels, memcpys and memsets. Returns false with the
    // reason in *why (no CUPTI, or CUPTI refused) and records nothing.
    bool start(std::string* why);
    // CUPTI's clock (ns), the one the records' start and end are on.
    uint64_t timestamp() const;
    // Stops recording and returns every record since start() (kernel names demangled). Call
    // when the work is done (after a synchronize): records of unfinished work are incomplete.
    // *dropped: records CUPTI could not keep (its buffers were full).
    std::vector<llmc::TraceRecord> stop(size_t* dropped);

  private:
    CuptiApi* api_ = nullptr;
    bool running_ = false;
};

}  // namespace llmc
