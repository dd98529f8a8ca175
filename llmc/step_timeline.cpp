// step_timeline.cpp: the analysis of a traced training step (see step_timeline.h).
#include "step_timeline.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

namespace llmc {

namespace {

constexpr const char* kFamilyNames[kNumFamilies] = {
    "GEMM (cuBLASLt, ours)",
    "flash forward",
    "flash backward (dq, dkdv, fused, row stats, bias reduce)",
    "layernorm forward",
    "layernorm backward (+ weight/bias reduce)",
    "classifier (softmax, loss)",
    "encoder (forward, backward, sort)",
    "gelu (recompute)",
    "bias gradient (column sums)",
    "global norm",
    "AdamW",
    "memset",
    "memcpy",
    "other",
};

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

double ns_to_ms(uint64_t ns) { return (double)ns * 1e-6; }

double median_of(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// The position of the first '(' outside template brackets (the parameter list), or npos.
size_t parameter_list(const std::string& s) {
    int depth = 0;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '<') depth++;
        if (s[i] == '>') depth--;
        // "(anonymous namespace)" is a qualifier, not a parameter list.
        if (s[i] == '(' && depth == 0 && s.compare(i, 21, "(anonymous namespace)") != 0) return i;
    }
    return std::string::npos;
}

}  // namespace

const char* family_name(int family) {
    return family >= 0 && family < kNumFamilies ? kFamilyNames[family] : "?";
}

// Our kernels are named after what they compute (llmc/*.cu); cuBLASLt's are not ours, so they
// are matched after ours (a GEMM's name may hold an epilogue's "gelu" or "bias").
int kernel_family(const TraceRecord& r) {
    if (r.kind == TraceKind::kMemset) return kFamMemset;
    if (r.kind == TraceKind::kMemcpy) return kFamMemcpy;
    std::string n = r.name;
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
    // The Hopper fused backward's helper (backward_row_stats_kernel) is named without "flash".
    if (has(n, "qkv_bias_reduce") || has(n, "backward_row_stats")) return kFamFlashBackward;
    if (has(n, "flash")) {
        const bool backward = has(n, "backward") || has(n, "bwd") || has(n, "_dq") ||
                              has(n, "dkdv") || has(n, "dk_dv") || has(n, "fused");
        return backward ? kFamFlashBackward : kFamFlashForward;
    }
    if (has(n, "layernorm_backward") || has(n, "layernorm_param_grads")) {
        return kFamLayernormBackward;
    }
    if (has(n, "layernorm")) return kFamLayernormForward;
    if (has(n, "classifier") || has(n, "loss_accumulate")) return kFamClassifier;
    if (has(n, "encoder") || has(n, "iota_kernel") || has(n, "radixsort")) return kFamEncoder;
    if (has(n, "adamw")) return kFamAdamw;
    if (has(n, "sum_of_squares") || has(n, "sum_partials") || has(n, "global_norm")) {
        return kFamGlobalNorm;
    }
    if (has(n, "bias_backward") || has(n, "bias_grad_accumulate")) return kFamBiasGrad;
    for (const char* gemm : {"gemm", "gemv", "nvjet", "xmma", "cutlass", "cublas", "splitk"}) {
        if (has(n, gemm)) return kFamGemm;
    }
    if (has(n, "gelu")) return kFamGelu;
    return kFamOther;
}

void sort_by_start(std::vector<TraceRecord>* recs) {
    std::stable_sort(recs->begin(), recs->end(), [](const TraceRecord& a, const TraceRecord& b) {
        return a.start_ns < b.start_ns;
    });
}

std::vector<TraceRecord> records_between(const std::vector<TraceRecord>& all, uint64_t begin_ns,
                                         uint64_t end_ns) {
    std::vector<TraceRecord> out;
    for (const TraceRecord& r : all) {
        if (r.start_ns >= begin_ns && r.start_ns < end_ns) out.push_back(r);
    }
    sort_by_start(&out);
    return out;
}

StepAnalysis analyze_step(const std::vector<TraceRecord>& recs, double wall_ms, int top) {
    StepAnalysis a;
    a.wall_ms = wall_ms;
    a.records = (int)recs.size();
    for (const TraceRecord& r : recs) {
        const uint64_t d = r.end_ns > r.start_ns ? r.end_ns - r.start_ns : 0;
        a.sum_ms += ns_to_ms(d);
        FamilyTotal& f = a.families[kernel_family(r)];
        f.count++;
        f.ms += ns_to_ms(d);
    }
    if (recs.empty()) {
        a.idle_ms = wall_ms;
        return a;
    }
    // Sweep in start order: [cur_begin, cur_end) is the union's current piece, and cur_owner
    // the record that reaches its end; a record starting after cur_end opens a gap.
    std::vector<TraceGap> gaps;
    uint64_t busy = 0, cur_begin = recs[0].start_ns, cur_end = recs[0].end_ns, last_end = 0;
    int cur_owner = 0;
    for (size_t i = 1; i < recs.size(); i++) {
        const TraceRecord& r = recs[i];
        if (r.start_ns > cur_end) {
            busy += cur_end - cur_begin;
            TraceGap g;
            g.us = (double)(r.start_ns - cur_end) * 1e-3;
            g.at_ms = ns_to_ms(cur_end - recs[0].start_ns);
            g.before = cur_owner;
            g.after = (int)i;
            gaps.push_back(g);
            cur_begin = r.start_ns;
            cur_end = r.end_ns;
            cur_owner = (int)i;
        } else if (r.end_ns > cur_end) {
            cur_end = r.end_ns;
            cur_owner = (int)i;
        }
    }
    busy += cur_end - cur_begin;
    for (const TraceRecord& r : recs) last_end = std::max(last_end, r.end_ns);
    a.busy_ms = ns_to_ms(busy);
    a.span_ms = ns_to_ms(last_end - recs[0].start_ns);
    a.in_span_gap_ms = a.span_ms - a.busy_ms;
    a.idle_ms = wall_ms - a.busy_ms;
    for (const TraceGap& g : gaps) {
        int b = 0;
        while (b < kGapBuckets - 1 && g.us > kGapBucketUs[b]) b++;
        a.gap_count[b]++;
        a.gap_us[b] += g.us;
    }
    std::stable_sort(gaps.begin(), gaps.end(),
                     [](const TraceGap& x, const TraceGap& y) { return x.us > y.us; });
    if ((int)gaps.size() > top) gaps.resize(top);
    a.top_gaps = gaps;
    return a;
}

std::string short_kernel_name(const std::string& name, size_t width) {
    std::string s = name;
    if (s.compare(0, 5, "void ") == 0) s = s.substr(5);
    const size_t params = parameter_list(s);
    if (params != std::string::npos) s = s.substr(0, params);
    // Namespaces before the kernel's own name go (anonymous, cub's versioned ones, ...).
    const size_t angle = s.find('<');
    const size_t colons = s.rfind("::", angle == std::string::npos ? std::string::npos : angle);
    if (colons != std::string::npos) s = s.substr(colons + 2);
    if (s.size() > width) s = s.substr(0, width - 3) + "...";
    return s;
}

namespace {

// Mean per step of each kernel (by short name) over every traced step.
struct KernelRow {
    std::string name;
    int family = kFamOther;
    double count = 0, ms = 0;
};

std::vector<KernelRow> kernels_by_total(const std::vector<std::vector<TraceRecord>>& steps) {
    std::map<std::string, KernelRow> rows;
    for (const auto& step : steps) {
        for (const TraceRecord& r : step) {
            const std::string key = short_kernel_name(r.name, 64);
            KernelRow& row = rows[key];
            row.name = key;
            row.family = kernel_family(r);
            row.count += 1.0 / steps.size();
            row.ms += ns_to_ms(r.end_ns - r.start_ns) / steps.size();
        }
    }
    std::vector<KernelRow> out;
    for (auto& kv : rows) out.push_back(kv.second);
    std::stable_sort(out.begin(), out.end(),
                     [](const KernelRow& a, const KernelRow& b) { return a.ms > b.ms; });
    return out;
}

void print_per_step(const std::vector<StepAnalysis>& analyses, FILE* out) {
    std::fprintf(out,
                 "| step | wall ms | span ms | busy ms | idle ms | idle %% | gaps in span ms | "
                 "outside span ms | overlap ms | records |\n|---|---|---|---|---|---|---|---|---|"
                 "---|\n");
    for (size_t i = 0; i < analyses.size(); i++) {
        const StepAnalysis& a = analyses[i];
        std::fprintf(out, "| %zu | %.3f | %.3f | %.3f | %.3f | %.2f | %.3f | %.3f | %.3f | %d |\n",
                     i + 1, a.wall_ms, a.span_ms, a.busy_ms, a.idle_ms,
                     a.wall_ms > 0 ? 100.0 * a.idle_ms / a.wall_ms : 0.0, a.in_span_gap_ms,
                     a.wall_ms - a.span_ms, a.sum_ms - a.busy_ms, a.records);
    }
}

void print_families(const std::vector<StepAnalysis>& analyses, double wall, FILE* out) {
    const double n = (double)analyses.size();
    std::fprintf(
        out, "\n| family | count per step | ms per step | %% of the step |\n|---|---|---|---|\n");
    double sum = 0, busy = 0;
    for (const StepAnalysis& a : analyses) {
        sum += a.sum_ms / n;
        busy += a.busy_ms / n;
    }
    for (int f = 0; f < kNumFamilies; f++) {
        double count = 0, ms = 0;
        for (const StepAnalysis& a : analyses) {
            count += a.families[f].count / n;
            ms += a.families[f].ms / n;
        }
        if (count == 0) continue;
        std::fprintf(out, "| %s | %.1f | %.3f | %.2f |\n", family_name(f), count, ms,
                     100.0 * ms / wall);
    }
    std::fprintf(out, "| all records (sum of durations) | | %.3f | %.2f |\n", sum,
                 100.0 * sum / wall);
    std::fprintf(out, "| busy (union of the records) | | %.3f | %.2f |\n", busy,
                 100.0 * busy / wall);
    std::fprintf(out, "| idle (wall - busy) | | %.3f | %.2f |\n", wall - busy,
                 100.0 * (wall - busy) / wall);
}

void print_kernels(const std::vector<std::vector<TraceRecord>>& steps, double wall, FILE* out) {
    const std::vector<KernelRow> rows = kernels_by_total(steps);
    std::fprintf(
        out,
        "\n| kernel (largest 15 by time) | family | count per step | ms per step | mean us "
        "| %% of the step |\n|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < rows.size() && i < 15; i++) {
        const KernelRow& r = rows[i];
        std::fprintf(out, "| %s | %s | %.1f | %.3f | %.1f | %.2f |\n", r.name.c_str(),
                     family_name(r.family), r.count, r.ms, 1e3 * r.ms / r.count,
                     100.0 * r.ms / wall);
    }
}

void print_gaps(const std::vector<TraceRecord>& recs, const StepAnalysis& a, int step, FILE* out) {
    std::fprintf(out, "\n| gaps of step %d, by length | count | total us |\n|---|---|---|\n", step);
    for (int b = 0; b < kGapBuckets; b++) {
        char label[48];
        if (b == 0)
            std::snprintf(label, sizeof(label), "<= %.0f us", kGapBucketUs[0]);
        else if (b == kGapBuckets - 1)
            std::snprintf(label, sizeof(label), "> %.0f us", kGapBucketUs[b - 1]);
        else
            std::snprintf(label, sizeof(label), "%.0f-%.0f us", kGapBucketUs[b - 1],
                          kGapBucketUs[b]);
        std::fprintf(out, "| %s | %d | %.1f |\n", label, a.gap_count[b], a.gap_us[b]);
    }
    std::fprintf(out,
                 "\n| largest gaps of step %d | us | at ms | before (ended last) | after (starts "
                 "the next work) |\n|---|---|---|---|---|\n",
                 step);
    for (size_t i = 0; i < a.top_gaps.size(); i++) {
        const TraceGap& g = a.top_gaps[i];
        std::fprintf(out, "| %zu | %.1f | %.3f | %s | %s |\n", i + 1, g.us, g.at_ms,
                     short_kernel_name(recs[g.before].name, 56).c_str(),
                     short_kernel_name(recs[g.after].name, 56).c_str());
    }
}

void csv_field(FILE* f, const std::string& s) {
    std::fputc('"', f);
    for (char c : s) {
        if (c == '"') std::fputc('"', f);
        std::fputc(c, f);
    }
    std::fputc('"', f);
}

const char* kind_name(TraceKind k) {
    return k == TraceKind::kKernel ? "kernel" : k == TraceKind::kMemcpy ? "memcpy" : "memset";
}

}  // namespace

void print_step_report(const std::vector<std::vector<TraceRecord>>& steps,
                       const std::vector<StepAnalysis>& analyses, FILE* out) {
    if (analyses.empty()) return;
    print_per_step(analyses, out);
    std::vector<double> walls;
    for (const StepAnalysis& a : analyses) walls.push_back(a.wall_ms);
    const double wall = median_of(walls);
    print_families(analyses, wall, out);
    print_kernels(steps, wall, out);
    // The step whose wall time is the median: its gaps stand for a typical step.
    size_t mid = 0;
    for (size_t i = 0; i < analyses.size(); i++) {
        if (analyses[i].wall_ms == wall) mid = i;
    }
    print_gaps(steps[mid], analyses[mid], (int)mid + 1, out);
}

bool write_trace_csv(const std::string& path, const std::vector<std::vector<TraceRecord>>& steps) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return false;
    std::fprintf(f,
                 "step,kind,family,start_us,end_us,duration_us,stream,correlation,graph_node,bytes,"
                 "grid,block,name\n");
    for (size_t s = 0; s < steps.size(); s++) {
        if (steps[s].empty()) continue;
        const uint64_t t0 = steps[s][0].start_ns;
        for (const TraceRecord& r : steps[s]) {
            std::fprintf(f, "%zu,%s,", s + 1, kind_name(r.kind));
            csv_field(f, family_name(kernel_family(r)));
            std::fprintf(f, ",%.3f,%.3f,%.3f,%u,%u,%llu,%llu,%dx%dx%d,%dx%dx%d,",
                         (double)(r.start_ns - t0) * 1e-3, (double)(r.end_ns - t0) * 1e-3,
                         (double)(r.end_ns - r.start_ns) * 1e-3, r.stream, r.correlation,
                         (unsigned long long)r.graph_node, (unsigned long long)r.bytes, r.grid[0],
                         r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2]);
            csv_field(f, r.name);
            std::fputc('\n', f);
        }
    }
    return std::fclose(f) == 0;
}

}  // namespace llmc
