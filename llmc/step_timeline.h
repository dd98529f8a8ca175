// step_timeline.h: where the time of a training step goes, from a trace of its GPU work
// (host code; the records come from CUPTI, step_trace.cuh, or from a test).
//
// A step's records are the kernels, memcpys and memsets that ran between two host timestamps
// taken around it. For one step:
//   busy  = the length of the union of the records' [start, end) intervals (work that overlaps,
//           on graph branches, counts once)
//   span  = last end - first start
//   idle  = wall - busy, where wall is the step as the trainer times it (CUDA events around the
//           launch): the gaps between records inside the span, plus what lies outside it (the
//           launch latency before the first record and the event after the last)
//   gaps  = the holes in the union inside the span, each with the record that ended last before
//           it and the record that starts it
//   families: records grouped by what they compute (kernel_family), count and total time
// Times are nanoseconds on CUPTI's clock in the records, milliseconds in the results.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace llmc {

enum class TraceKind { kKernel, kMemcpy, kMemset };

struct TraceRecord {
    TraceKind kind = TraceKind::kKernel;
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t stream = 0;
    uint32_t correlation = 0;  // all nodes of one graph launch share the launch's id
    uint64_t graph_node = 0;   // 0 outside a graph
    uint64_t bytes = 0;        // memcpy / memset
    int grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
    std::string name;  // kernel name (demangled where possible), or "memcpy HtoD" / "memset"
};

// The families of the per-family table, in its order. kernel_family() maps a record to one.
enum KernelFamily {
    kFamGemm,
    kFamFlashForward,
    kFamFlashBackward,
    kFamLayernormForward,
    kFamLayernormBackward,
    kFamClassifier,
    kFamEncoder,
    kFamGelu,
    kFamBiasGrad,
    kFamGlobalNorm,
    kFamAdamw,
    kFamMemset,
    kFamMemcpy,
    kFamOther,
    kNumFamilies
};
const char* family_name(int family);
int kernel_family(const TraceRecord& r);

struct TraceGap {
    double us = 0;     // length
    double at_ms = 0;  // where it starts, from the step's first record
    int before = -1;   // index (in the step's records) of the record that ended last
    int after = -1;    // index of the record that ends the gap
};

// Gap lengths are counted in these buckets (upper bounds in us; the last is open).
constexpr int kGapBuckets = 7;
constexpr double kGapBucketUs[kGapBuckets - 1] = {1.0, 2.0, 5.0, 10.0, 50.0, 200.0};

struct FamilyTotal {
    int count = 0;
    double ms = 0;
};

struct StepAnalysis {
    double wall_ms = 0;         // from the caller (events)
    double busy_ms = 0;         // union of the records
    double span_ms = 0;         // first start to last end
    double sum_ms = 0;          // sum of the records' durations (> busy when work overlaps)
    double idle_ms = 0;         // wall - busy
    double in_span_gap_ms = 0;  // span - busy: the gaps between records
    int records = 0;
    std::vector<TraceGap> top_gaps;  // the largest, longest first
    int gap_count[kGapBuckets] = {};
    double gap_us[kGapBuckets] = {};
    FamilyTotal families[kNumFamilies];
};

// Analyzes one step: `recs` are its records sorted by start (sort_by_start), wall_ms its event
// time. Keeps the `top` largest gaps.
StepAnalysis analyze_step(const std::vector<TraceRecord>& recs, double wall_ms, int top);

void sort_by_start(std::vector<TraceRecord>* recs);

// The records whose start lies in [begin_ns, end_ns), sorted by start.
std::vector<TraceRecord> records_between(const std::vector<TraceRecord>& all, uint64_t begin_ns,
                                         uint64_t end_ns);

// A kernel name for tables: template arguments and parameter lists removed, at most `width`
// characters ("layernorm_backward_row_in_registers_kernel", "nvjet_hsh_256x128_...").
std::string short_kernel_name(const std::string& name, size_t width);

// Prints the per-step lines, then for the traced steps together: the per-family table (mean
// per step, share of the mean wall time), the largest kernels by total time, the gap
// histogram and the `top` largest gaps of the median step with the kernels on each side.
void print_step_report(const std::vector<std::vector<TraceRecord>>& steps,
                       const std::vector<StepAnalysis>& analyses, FILE* out);

// Every record of every step as CSV (header line first): step, kind, family, start_us and
// end_us from the step's first record, duration_us, stream, correlation, graph_node, bytes,
// grid, block, name. Returns false when the file cannot be written.
bool write_trace_csv(const std::string& path, const std::vector<std::vector<TraceRecord>>& steps);

}  // namespace llmc
