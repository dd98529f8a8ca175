// test_step_timeline.cpp: host test of llmc/step_timeline (the analysis behind
// profile_gpt2cu --trace): busy time as the union of overlapping records, the gaps and the
// records on each side of them, the gap buckets, the family of real kernel names (ours, cuBLASLt's,
// CUB's), short names, the step window, the CSV (quoting, one line per record) and the report.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "host_test.h"
#include "step_timeline.h"

using namespace llmc;

namespace {

TraceRecord rec(const char* name, double start_us, double end_us,
                TraceKind kind = TraceKind::kKernel) {
    TraceRecord r;
    r.kind = kind;
    r.name = name;
    r.start_ns = (uint64_t)(start_us * 1000.0 + 0.5);
    r.end_ns = (uint64_t)(end_us * 1000.0 + 0.5);
    return r;
}

bool near(double a, double b) { return a - b < 1e-9 && b - a < 1e-9; }

// Three kernels in a row with one 5 us hole; the wall time adds 15 us outside the records.
void test_serial() {
    std::vector<TraceRecord> r = {rec("a", 0, 10), rec("b", 15, 25), rec("c", 25, 40)};
    const StepAnalysis a = analyze_step(r, 0.050, 10);
    check(near(a.busy_ms, 0.035) && near(a.span_ms, 0.040) && near(a.sum_ms, 0.035),
          "serial: busy %.6f span %.6f sum %.6f ms (want 0.035, 0.040, 0.035)", a.busy_ms,
          a.span_ms, a.sum_ms);
    check(near(a.idle_ms, 0.015) && near(a.in_span_gap_ms, 0.005),
          "serial: idle %.6f ms, gaps in span %.6f ms (want 0.015, 0.005)", a.idle_ms,
          a.in_span_gap_ms);
    // b starts 5 us after a ends; c starts where b ends, which is no gap.
    check(a.top_gaps.size() == 1 && near(a.top_gaps[0].us, 5.0) && a.top_gaps[0].before == 0 &&
              a.top_gaps[0].after == 1 && near(a.top_gaps[0].at_ms, 0.010),
          "serial: one gap of 5 us at 0.010 ms between records 0 and 1 (got %zu gaps)",
          a.top_gaps.size());
}

// Work on two branches: overlapping records count once in busy, fully in sum, and the record
// before a gap is the one that reached furthest, not the one that started last.
void test_overlap() {
    std::vector<TraceRecord> r = {rec("long", 100, 200),     rec("inside", 150, 180),
                                  rec("tail", 190, 250),     rec("next", 260, 270),
                                  rec("shadowed", 262, 265), rec("last", 300, 301)};
    const StepAnalysis a = analyze_step(r, 0.300, 10);
    check(near(a.busy_ms, 0.161) && near(a.sum_ms, 0.204),
          "overlap: busy %.6f ms (union, want 0.161), sum %.6f ms (want 0.204)", a.busy_ms,
          a.sum_ms);
    check(a.top_gaps.size() == 2 && near(a.top_gaps[0].us, 30.0) && a.top_gaps[0].before == 3 &&
              a.top_gaps[0].after == 5 && near(a.top_gaps[1].us, 10.0) &&
              a.top_gaps[1].before == 2 && a.top_gaps[1].after == 3,
          "overlap: gaps 30 us (next -> last) and 10 us (tail -> next), longest first");
    std::vector<TraceRecord> s = {rec("first_long", 0, 100), rec("short", 10, 20),
                                  rec("after", 110, 120)};
    const StepAnalysis b = analyze_step(s, 0.2, 10);
    check(b.top_gaps.size() == 1 && b.top_gaps[0].before == 0 && near(b.top_gaps[0].us, 10.0),
          "the gap's left side is the record that ended last (first_long), not the last started");
    check(analyze_step(s, 0.2, 0).top_gaps.empty(), "top = 0 keeps no gap");
}

void test_buckets() {
    // Holes of 0.5, 1.5, 3, 7, 20, 100 and 500 us: one per bucket.
    const double holes[] = {0.5, 1.5, 3, 7, 20, 100, 500};
    std::vector<TraceRecord> r;
    double t = 0;
    for (double h : holes) {
        r.push_back(rec("k", t, t + 1));
        t += 1 + h;
    }
    r.push_back(rec("k", t, t + 1));
    const StepAnalysis a = analyze_step(r, 1.0, 3);
    bool ok = true;
    for (int b = 0; b < kGapBuckets; b++)
        ok = ok && a.gap_count[b] == 1 && near(a.gap_us[b], holes[b]);
    check(ok, "gap buckets: one gap in each of the %d buckets, with its length", kGapBuckets);
    check(a.top_gaps.size() == 3 && near(a.top_gaps[0].us, 500) && near(a.top_gaps[2].us, 20),
          "the 3 largest gaps: 500, 100, 20 us");
    const StepAnalysis empty = analyze_step({}, 1.5, 10);
    check(empty.records == 0 && near(empty.idle_ms, 1.5) && near(empty.busy_ms, 0),
          "no records: the whole wall time is idle");
}

void test_families() {
    struct Case {
        const char* name;
        int family;
    };
    const Case cases[] = {
        {"_ZN12_GLOBAL__N_142layernorm_backward_row_in_registers_kernelILi8ELi3EEEvP13__nv_"
         "bfloat16PfPKS1_S5_S5_PKfS7_ii",
         kFamLayernormBackward},
        {"void (anonymous namespace)::layernorm_param_grads_reduce_kernel(__nv_bfloat16*)",
         kFamLayernormBackward},
        {"void (anonymous namespace)::layernorm_forward_row_in_registers_kernel<8, 3, true>()",
         kFamLayernormForward},
        {"nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_bias_gelu_NNT", kFamGemm},
        {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_execute_kernel__5x_cublas",
         kFamGemm},
        {"void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>()", kFamGemm},
        {"void (anonymous namespace)::flash_attention_forward_kernel<64, 4>()", kFamFlashForward},
        {"void (anonymous namespace)::flash_attention_backward_dq_kernel<64>()", kFamFlashBackward},
        {"void (anonymous namespace)::flash_attention_backward_dkdv_kernel<64>()",
         kFamFlashBackward},
        {"void (anonymous namespace)::qkv_bias_reduce_kernel()", kFamFlashBackward},
        // The Hopper kernels: the fused backward and its row statistics are backward work.
        {"void llmc::<unnamed>::flash_attention_sm90_forward_kernel<64, 3, true, false, false>()",
         kFamFlashForward},
        {"void llmc::<unnamed>::flash_attention_sm90_fused_kernel<64, 4, false>()",
         kFamFlashBackward},
        {"void llmc::<unnamed>::backward_row_stats_kernel<64>()", kFamFlashBackward},
        {"void (anonymous namespace)::fused_classifier_online_softmax_kernel<8>()", kFamClassifier},
        {"void (anonymous namespace)::loss_accumulate_block_sum_kernel()", kFamClassifier},
        {"void (anonymous namespace)::encoder_backward_token_runs_kernel<8>()", kFamEncoder},
        {"void cub::CUB_300000_SM_900::detail::radix_sort::DeviceRadixSortOnesweepKernel<int>()",
         kFamEncoder},
        {"void (anonymous namespace)::gelu_forward_elementwise_kernel<8>()", kFamGelu},
        {"void (anonymous namespace)::bias_backward_partial_kernel()", kFamBiasGrad},
        {"void (anonymous namespace)::sum_of_squares_block_partials_kernel<8>()", kFamGlobalNorm},
        {"void (anonymous namespace)::adamw_fused_kernel<8, true>()", kFamAdamw},
        // Our kernels live in namespace llmc.
        {"void llmc::(anonymous namespace)::layernorm_forward_warp_per_row_kernel<8, true>()",
         kFamLayernormForward},
        {"void llmc::(anonymous namespace)::adamw_sharded_kernel<8, true>(llmc::ChunkMap)",
         kFamAdamw},
        {"_ZN4llmc45_GLOBAL__N__ed9e8fe1_12_layernorm_cu_caa5f98137layernorm_forward_warp_per_"
         "row_kernelILi1ELb0EEEvP13__nv_bfloat16PfS4_S3_PKS2_S6_S6_S6_ii",
         kFamLayernormForward},
        {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL", kFamOther},
    };
    int wrong = 0;
    for (const Case& c : cases) {
        const int got = kernel_family(rec(c.name, 0, 1));
        if (got != c.family) {
            wrong++;
            std::printf("  %s -> %s (want %s)\n", c.name, family_name(got), family_name(c.family));
        }
    }
    check(wrong == 0, "kernel families of %zu real kernel names (%d wrong)",
          sizeof(cases) / sizeof(cases[0]), wrong);
    check(kernel_family(rec("x", 0, 1, TraceKind::kMemset)) == kFamMemset &&
              kernel_family(rec("x", 0, 1, TraceKind::kMemcpy)) == kFamMemcpy,
          "memset and memcpy records are their own families");
}

void test_names() {
    const std::string a = short_kernel_name(
        "void (anonymous namespace)::layernorm_backward_row_in_registers_kernel<8, 3>"
        "(__nv_bfloat16*, float*)",
        64);
    check(a == "layernorm_backward_row_in_registers_kernel<8, 3>", "short name: '%s'", a.c_str());
    const std::string n = short_kernel_name(
        "void llmc::(anonymous namespace)::adamw_fused_kernel<8, true>(llmc::AdamWTensors)", 64);
    check(n == "adamw_fused_kernel<8, true>", "short name drops llmc:: too: '%s'", n.c_str());
    const std::string b = short_kernel_name(
        "void cub::CUB_300000_SM_900::detail::radix_sort::DeviceRadixSortOnesweepKernel<cub::"
        "detail::policy, (bool)0>(int*)",
        40);
    check(b.size() == 40 && b.compare(0, 29, "DeviceRadixSortOnesweepKernel") == 0 &&
              b.compare(37, 3, "...") == 0,
          "short name drops namespaces and cuts at the width: '%s'", b.c_str());
    const std::string c = short_kernel_name("nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_NNT", 64);
    check(c == "nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_NNT", "a C name stays: '%s'", c.c_str());
}

void test_window_and_csv() {
    std::vector<TraceRecord> all = {rec("late", 50, 60), rec("early", 10, 20), rec("out", 100, 110),
                                    rec("edge", 99.999, 100.5)};
    const std::vector<TraceRecord> w = records_between(all, 10000, 100000);
    check(w.size() == 3 && w[0].name == "early" && w[1].name == "late" && w[2].name == "edge",
          "records_between keeps starts in [begin, end), sorted by start");
    std::vector<std::vector<TraceRecord>> steps = {w, {rec("say \"hi\", twice", 0, 2)}};
    steps[1][0].kind = TraceKind::kMemcpy;
    steps[1][0].bytes = 4096;
    const std::string path = "/tmp/llmc_test_step_timeline.csv";
    check(write_trace_csv(path, steps), "CSV written to %s", path.c_str());
    const std::vector<char> bytes = read_bytes(path);
    const std::string csv(bytes.begin(), bytes.end());
    int lines = 0;
    for (char ch : csv) lines += ch == '\n';
    check(lines == 5 && csv.compare(0, 17, "step,kind,family,") == 0,
          "CSV: a header and one line per record (%d lines)", lines);
    check(csv.find("\"say \"\"hi\"\", twice\"") != std::string::npos &&
              csv.find("2,memcpy,\"memcpy\",0.000,2.000,2.000,0,0,0,4096,") != std::string::npos,
          "CSV: a name with quotes and a comma is quoted; times from the step's first record");
    check(!write_trace_csv("/nonexistent/dir/x.csv", steps), "an unwritable CSV path fails");
    std::remove(path.c_str());
}

void test_report() {
    std::vector<std::vector<TraceRecord>> steps = {
        {rec("nvjet_hsh_gemm", 0, 80), rec("void k::layernorm_forward_kernel<8>()", 90, 100)},
        {rec("nvjet_hsh_gemm", 0, 82), rec("void k::layernorm_forward_kernel<8>()", 95, 105)}};
    std::vector<StepAnalysis> an = {analyze_step(steps[0], 0.120, 10),
                                    analyze_step(steps[1], 0.125, 10)};
    const std::string path = "/tmp/llmc_test_step_timeline_report.txt";
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) std::exit(2);
    print_step_report(steps, an, f);
    std::fclose(f);
    const std::vector<char> bytes = read_bytes(path);
    const std::string text(bytes.begin(), bytes.end());
    // Median wall 0.125 ms (step 2): GEMM 81 us mean = 64.80%, idle 125 - 91 = 34 us.
    check(text.find("| GEMM (cuBLASLt, ours) | 1.0 | 0.081 | 64.80 |") != std::string::npos,
          "report: the GEMM family row (mean per step, share of the median wall)");
    check(text.find("| idle (wall - busy) | | 0.034 | 27.20 |") != std::string::npos,
          "report: the idle row");
    check(text.find("largest gaps of step 2") != std::string::npos &&
              text.find("| 1 | 13.0 | 0.082 | nvjet_hsh_gemm | layernorm_forward_kernel<8> |") !=
                  std::string::npos,
          "report: the median step's largest gap with the kernels on each side");
    std::remove(path.c_str());
}

}  // namespace

int main() {
    test_serial();
    test_overlap();
    test_buckets();
    test_families();
    test_names();
    test_window_and_csv();
    test_report();
    std::printf("test_step_timeline: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
