// test_hellaswag.cpp: HellaSwag-style evaluation on the host (llmc/hellaswag.h, llmc/json_value.h,
// llmc/llmc_log.h, the pure parts of llmc/gpu_monitor.h), and the CPU reference's scores.
//
//   test_hellaswag                          self-contained checks (CI, ~1 s)
//   test_hellaswag --write-model PATH       the fixed small model the cross-checks use
//   test_hellaswag --compare MODEL EVAL REF -b B -t T [--expect-correct N]
//       scores EVAL with the CPU fp32 reference through the GPU path's batching (the planner,
//       rows of several examples per forward of B*T tokens), compares each example's mean and
//       summed ending losses with REF (scripts/ref/hellaswag_ref.py --losses, PyTorch) within 1e-5
//       (relative to max(1, |ref|): fp32 sums of a few dozen losses of size ~7 agree to ~1e-6),
//       requires identical predictions, and with --expect-correct that N examples are right.
//
// Self-contained checks: the eval file's bytes are llm.c's layout field by field; encode/decode
// round trip; every malformed file refused with its sentence; the JSON reader's values and
// error columns; the planner (each row once, row_len | B*T, rows fit, truncation from the left,
// refusals); the scoring (mean vs sum, ties); per-example losses through packed, reshaped
// batches equal to each row run alone; llm.c's main.log lines and resume filtering; the
// telemetry's JSON and throttle names. Ends with "test_hellaswag: N passed, M failed".
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "gpu_monitor.h"
#include "hellaswag.h"
#include "host_test.h"
#include "json_value.h"
#include "llmc_log.h"
#include "model_file.h"
#include "ref/gpt2_cpu.h"
#include "rng.h"

using namespace llmc;

namespace {

// The cross-checks' model: L=2, NH=4, C=64, V=1000 (Vp 1024), maxT=96, weights ~ U(-a, a) with
// a = 0.2 (layernorm weights 1 + U(-0.2, 0.2)): larger than GPT-2's init so that endings' losses
// differ by far more than fp32 rounding and predictions are stable across implementations.
GPT2Config small_config() {
    GPT2Config c;
    c.max_seq_len = 96;
    c.vocab_size = 1000;
    c.padded_vocab_size = 1024;
    c.num_layers = 2;
    c.num_heads = 4;
    c.channels = 64;
    return c;
}

float uniform(uint64_t* s) { return (float)((splitmix64_next(s) >> 11) * 0x1p-53) * 2.0f - 1.0f; }

std::vector<float> small_params(const GPT2Config& cfg) {
    const ParamLayout lay = param_layout(cfg);
    std::vector<float> p(lay.total);
    uint64_t s = 20240522;
    for (float& x : p) x = 0.2f * uniform(&s);
    for (int t : {kLn1w, kLn2w, kLnfw})
        for (size_t i = 0; i < lay.sizes[t]; i++) p[lay.offsets[t] + i] += 1.0f;
    for (size_t i = (size_t)cfg.vocab_size * cfg.channels; i < lay.sizes[kWte]; i++) p[i] = 0.0f;
    return p;
}

std::vector<EvalExample> random_examples(int n, int vocab, int max_ctx, int max_end, uint64_t s) {
    std::vector<EvalExample> out(n);
    auto draw = [&](int lo, int hi) {
        std::vector<int> t(lo + splitmix64_next(&s) % (hi - lo + 1));
        for (int& x : t) x = (int)(splitmix64_next(&s) % vocab);
        return t;
    };
    for (int i = 0; i < n; i++) {
        out[i].label = i % 4;
        out[i].context = draw(1, max_ctx);
        for (int j = 0; j < 4; j++) out[i].endings.push_back(draw(1, max_end));
    }
    return out;
}

void test_format(const std::string& dir) {
    std::vector<EvalExample> ex(2);
    ex[0] = {1, {10, 20, 30}, {{5}, {6, 7}, {8}, {9, 9, 9}}};
    ex[1] = {3, {40000}, {{1, 2}, {3}, {4}, {65534}}};
    std::vector<uint8_t> bytes;
    std::string why;
    check(encode_eval_file(ex, &bytes, &why), "encode two examples (%s)", why.c_str());
    int32_t header[4];
    std::memcpy(header, bytes.data(), sizeof(header));
    // Example 0: 6 fields + 3 context + (1+1) + (1+2) + (1+1) + (1+3) = 20 uint16 = 40 bytes.
    const std::vector<uint16_t> first = {65535, 40, 0, 1, 4, 3, 10, 20, 30, 1,
                                         5,     2,  6, 7, 1, 8, 3,  9,  9,  9};
    std::vector<uint16_t> words((bytes.size() - 1024) / 2);
    std::memcpy(words.data(), bytes.data() + 1024, words.size() * 2);
    check(header[0] == 20240522 && header[1] == 1 && header[2] == 2 && header[3] == 40,
          "header: magic %d, version %d, %d examples, longest %d bytes", header[0], header[1],
          header[2], header[3]);
    check(std::equal(first.begin(), first.end(), words.begin()) && words[20] == 65535 &&
              words[21] == 32 && words[22] == 1 && words[23] == 3,
          "example stream laid out as llm.c's write_evalfile (marker, bytes, index, label, ...)");
    std::vector<EvalExample> back;
    const bool ok = decode_eval_file(bytes.data(), bytes.size(), &back, &why);
    bool same = ok && back.size() == 2;
    for (size_t i = 0; same && i < 2; i++)
        same = back[i].label == ex[i].label && back[i].context == ex[i].context &&
               back[i].endings == ex[i].endings;
    check(same, "decode gives the examples back (%s)", why.c_str());
    write_eval_file(dir + "/two.bin", ex);
    read_eval_file(dir + "/two.bin", &back);
    check(back.size() == 2 && back[1].endings[3][0] == 65534, "write_eval_file / read_eval_file");
    // The file scripts/test/hellaswag_synthetic.py wrote (Python's writer) reads here.
    read_eval_file("dev/test/data/hellaswag_synth50.bin", &back);
    check(back.size() == 50 && back[5].label == 1 && back[5].endings.size() == 4,
          "the checked-in synthetic file (Python-written) reads: %zu examples", back.size());

    auto refuse = [&](const char* what, std::vector<uint8_t> b, const char* needle) {
        std::vector<EvalExample> out;
        std::string w;
        const bool accepted = decode_eval_file(b.data(), b.size(), &out, &w);
        check(!accepted && w.find(needle) != std::string::npos, "refuses %s: \"%s\"", what,
              w.c_str());
    };
    auto poke = [&](size_t word, uint16_t v) {
        std::vector<uint8_t> b = bytes;
        std::memcpy(b.data() + 1024 + 2 * word, &v, 2);
        return b;
    };
    std::vector<uint8_t> b = bytes;
    b[0] ^= 1;
    refuse("a bad magic", b, "not an eval file");
    refuse("a truncated file", std::vector<uint8_t>(bytes.begin(), bytes.end() - 4), "example 1");
    refuse("a short header", std::vector<uint8_t>(bytes.begin(), bytes.begin() + 100), "too short");
    refuse("a wrong index", poke(2, 7), "marker 65535 and its index");
    refuse("a label past the endings", poke(3, 4), "label 4 of 4 endings");
    refuse("an empty context", poke(5, 0), "empty context");
    refuse("an example size past the file", poke(1, 60000), "past the longest");
    refuse("a short example size", poke(1, 38), "runs past its 38 bytes");
    b = bytes;
    b.push_back(0), b.push_back(0);
    refuse("bytes after the last example", b, "after its 2 examples");
    check(!encode_eval_file({{0, {}, {{1}}}}, &bytes, &why) &&
              why.find("empty context") != std::string::npos,
          "encode refuses an empty context");
    write_bytes(dir + "/junk.bin", std::vector<char>(2000, 'x'));
    expect_refusal("a junk eval file by name", dir + "/junk.bin", {"not an eval file"},
                   [&] { read_eval_file(dir + "/junk.bin", &back); });
}

void test_json() {
    JsonValue v;
    size_t col = 0;
    std::string why;
    const bool ok = json_parse(
        R"( {"ctx": "A \u00e9\ud83d\ude00 \"q\"", "endings": ["x", "y"], "label": 1, "n": null,)"
        R"( "d": {"e": [1.5e3, true]}, "ctx": "last"} )",
        &v, &col, &why);
    const JsonValue* end = v.find("endings");
    check(ok && v.find("ctx")->string == "last" && end->items.size() == 2 &&
              end->items[1].string == "y" && v.find("label")->integer &&
              v.find("label")->number == 1.0 && v.find("d")->find("e")->items[0].number == 1500,
          "json: values, nesting, a repeated key keeps the last (%s)", why.c_str());
    json_parse(R"({"ctx": "A \u00e9\ud83d\ude00"})", &v, &col, &why);
    check(v.find("ctx")->string == "A \xc3\xa9\xf0\x9f\x98\x80",
          "json: \\u escapes and a surrogate pair");
    struct Bad {
        const char* text;
        size_t column;
        const char* needle;
    } bad[] = {{R"({"a": 1,})", 9, "key"},
               {R"({"a" 1})", 6, "':'"},
               {R"({"a": [1 2]})", 10, "',' or ']'"},
               {R"({"a": "x)", 7, "unterminated"},
               {R"({"a": 01})", 8, "',' or '}'"},
               {"{} x", 4, "after the JSON value"}};
    for (const Bad& b : bad) {
        const bool accepted = json_parse(b.text, &v, &col, &why);
        check(!accepted && col == b.column && why.find(b.needle) != std::string::npos,
              "json refuses %s at column %zu: %s", b.text, col, why.c_str());
    }
}

void test_planner() {
    const int B = 3, T = 20, V = 50;
    std::vector<EvalExample> ex = random_examples(40, V, 25, 12, 7);
    std::vector<EvalBatch> batches;
    std::string why;
    check(plan_eval_batches(ex, 0, 40, B, T, V, 0, &batches, &why), "plan 40 examples (%s)",
          why.c_str());
    std::vector<int> seen(40 * 4, 0);
    bool shapes = true, lengths = true;
    for (const EvalBatch& b : batches) {
        shapes = shapes && (B * T) % b.row_len == 0 && b.row_len <= T &&
                 (int)b.rows.size() <= B * T / b.row_len;
        for (const EvalRow& r : b.rows) {
            seen[r.example * 4 + r.ending]++;
            const int c = (int)ex[r.example].context.size(),
                      e = (int)ex[r.example].endings[r.ending].size();
            lengths = lengths && r.length <= b.row_len && r.length == c - r.skip + e - 1 &&
                      r.skip == std::max(0, c + e - 1 - T);
        }
    }
    bool once = true;
    for (int s : seen) once = once && s == 1;
    check(once, "every (example, ending) is planned once");
    check(shapes, "row_len divides B*T, is at most T, and the rows fit");
    check(lengths, "row lengths, with context dropped from the left past T");
    check(plan_eval_batches(ex, 0, 40, B, T, V, 2, &batches, &why), "plan with max_rows 2");
    bool capped = true;
    for (const EvalBatch& b : batches)
        capped = capped && (B * T / b.row_len <= 2 || b.row_len == T);
    check(capped, "max_rows bounds the rows of a forward (row_len grows to fit)");
    ex[3].endings[2].assign(21, 1);
    check(!plan_eval_batches(ex, 0, 40, B, T, V, 0, &batches, &why) &&
              why.find("example 3's ending 2 has 21 tokens") != std::string::npos,
          "refuses an ending longer than T: %s", why.c_str());
    ex[3].endings[2].assign(2, 60);
    check(!plan_eval_batches(ex, 0, 40, B, T, V, 0, &batches, &why) &&
              why.find("token id 60") != std::string::npos,
          "refuses a token outside the vocabulary: %s", why.c_str());
    int b0, e0, b1, e1, b2, e2;
    eval_rank_range(10, 0, 3, &b0, &e0), eval_rank_range(10, 1, 3, &b1, &e1);
    eval_rank_range(10, 2, 3, &b2, &e2);
    check(b0 == 0 && e0 == 4 && b1 == 4 && e1 == 8 && b2 == 8 && e2 == 10,
          "rank ranges of 10 examples over 3 ranks: [0,4) [4,8) [8,10)");
}

void test_scoring() {
    // One example, context 2 tokens, endings of 1, 3, 2, 1 tokens; losses chosen so that the
    // mean prefers ending 1 and the sum ending 0, and endings 2 and 3 tie with each other.
    std::vector<EvalExample> ex = {{1, {1, 2}, {{3}, {4, 5, 6}, {7, 8}, {9}}}};
    std::vector<EvalBatch> batches;
    std::string why;
    plan_eval_batches(ex, 0, 1, 4, 4, 10, 0, &batches, &why);
    EvalLosses losses;
    eval_losses_init(ex, &losses);
    const double per_token[4] = {1.5, 1.0, 2.0, 2.0};  // mean losses of endings 0..3
    for (const EvalBatch& b : batches) {
        std::vector<float> pos(16, 100.0f);  // padding and context positions: must be ignored
        for (size_t r = 0; r < b.rows.size(); r++) {
            const EvalRow& row = b.rows[r];
            const int c = 2 - row.skip, e = (int)ex[0].endings[row.ending].size();
            for (int k = c - 1; k < c - 1 + e; k++)
                pos[r * b.row_len + k] = (float)per_token[row.ending];
        }
        eval_losses_add(ex, b, pos.data(), &losses);
    }
    std::vector<int> pred;
    EvalScore s = eval_score(ex, losses, 0, 1, &pred);
    check(s.examples == 1 && s.correct == 1 && s.correct_sum == 0 && pred[0] == 1,
          "mean loss picks ending 1 (right), summed loss ending 0 (wrong)");
    ex[0].label = 2;
    losses.sum[0] = losses.sum[1] = 10.0;  // means 10 and 3.33: endings 2 and 3 tie at 2.0
    s = eval_score(ex, losses, 0, 1, &pred);
    check(pred[0] == 2 && s.correct == 1, "a tie goes to the lower ending index (picked %d)",
          pred[0]);
    const std::string js = eval_score_json(s, 1.25);
    check(js.find("\"hellaswag_acc\": 1.000000") != std::string::npos &&
              js.find("\"hellaswag_s\": 1.250") != std::string::npos,
          "log.jsonl fields: %s", js.c_str());
}

// Per (example, ending) summed losses through the planner's packed batches with the CPU model.
EvalLosses packed_losses(GPT2Cpu* model, const std::vector<EvalExample>& ex, int B, int T) {
    std::vector<EvalBatch> batches;
    std::string why;
    LLMC_CHECK(
        plan_eval_batches(ex, 0, (int)ex.size(), B, T, model->cfg.vocab_size, 0, &batches, &why),
        "%s", why.c_str());
    EvalLosses losses;
    eval_losses_init(ex, &losses);
    std::vector<int> in(B * T), tg(B * T);
    for (const EvalBatch& b : batches) {
        fill_eval_batch(ex, b, B, T, in.data(), tg.data());
        model->forward(in.data(), tg.data(), B * T / b.row_len, b.row_len);
        eval_losses_add(ex, b, model->acts.losses.data(), &losses);
    }
    return losses;
}

void test_cpu_packing() {
    GPT2Cpu model;
    model.init(small_config(), small_params(small_config()));
    const int B = 4, T = 24;
    const std::vector<EvalExample> ex = random_examples(12, 1000, 20, 10, 99);
    const EvalLosses packed = packed_losses(&model, ex, B, T);
    double worst = 0.0;
    for (size_t i = 0; i < ex.size(); i++) {
        for (size_t j = 0; j < 4; j++) {
            const std::vector<int>& e = ex[i].endings[j];
            std::vector<int> row(ex[i].context);
            row.insert(row.end(), e.begin(), e.end());
            const int skip = std::max(0, (int)row.size() - 1 - T);
            const int n = (int)row.size() - 1 - skip;
            model.forward(row.data() + skip, row.data() + skip + 1, 1, n);
            double sum = 0.0;
            for (int k = n - (int)e.size(); k < n; k++) sum += model.acts.losses[k];
            worst = std::max(worst, std::fabs(sum - packed.sum[i * 4 + j]));
        }
    }
    check(worst <= 1e-4,
          "packed, reshaped batches give each row's losses as run alone (worst "
          "summed-loss difference %.3g)",
          worst);
}

void test_llmc_log(const std::string& dir) {
    check(llmc_log_train_line(1, 10.9876543f, 6e-4f, 1.23456f) ==
              "s:0 trl:10.9877 lr:0.000600 norm:1.23",
          "train line: %s", llmc_log_train_line(1, 10.9876543f, 6e-4f, 1.23456f).c_str());
    check(llmc_log_val_line(250, 3.5f) == "s:250 tel:3.5000", "val line");
    check(llmc_log_eval_line(250, 0.29547f) == "s:250 eval:0.2955", "eval line");
    LlmcLog log;
    log.open(dir + "/llmc", -1);
    for (int s = 1; s <= 4; s++) log.train(s, 5.0f - s, 1e-3f, 1.0f);
    log.val(2, 3.25f), log.eval(2, 0.25f), log.val(4, 3.0f), log.eval(4, 0.5f);
    LlmcLog resumed;
    resumed.open(dir + "/llmc", 2);
    resumed.train(3, 1.5f, 1e-3f, 0.5f);
    std::ifstream in(dir + "/llmc/main.log");
    std::stringstream got;
    got << in.rdbuf();
    const std::string want =
        "s:0 trl:4.0000 lr:0.001000 norm:1.00\ns:1 trl:3.0000 lr:0.001000 norm:1.00\n"
        "s:2 tel:3.2500\ns:2 eval:0.2500\ns:2 trl:1.5000 lr:0.001000 norm:0.50\n";
    check(got.str() == want, "a resume after step 2 keeps the lines up to it and appends:\n%s",
          got.str().c_str());
}

void test_gpu_monitor_text() {
    check(throttle_reason_names(0) == "none" &&
              throttle_reason_names(0x4 | 0x40) == "software power cap, hardware thermal slowdown",
          "throttle reason names: %s", throttle_reason_names(0x44).c_str());
    GpuSample s;
    s.sm_mhz = 1980, s.mem_mhz = 2619, s.power_w = 512.25, s.temp_c = 61, s.mem_used_mib = 23001;
    s.throttle = 4;
    check(gpu_sample_json(s) ==
              "\"gpu_sm_mhz\": 1980, \"gpu_mem_mhz\": 2619, \"gpu_power_w\": 512.2, "
              "\"gpu_temp_c\": 61, \"gpu_mem_used_mib\": 23001, \"gpu_throttle\": 4",
          "telemetry JSON: %s", gpu_sample_json(s).c_str());
    GpuMonitor m;
    s.throttle = 1;  // idle is not throttling
    const bool quiet = m.throttle_warning(5, s).empty();
    s.throttle = 0x20;
    const std::string first = m.throttle_warning(6, s), second = m.throttle_warning(7, s);
    check(quiet && first.find("step 6 (software thermal slowdown)") != std::string::npos &&
              second.empty(),
          "one throttle warning, for power or heat only: %s", first.c_str());
    setenv("LLMC_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    std::string why;
    const bool refused = !m.open(0, 0, 0, &why);  // before why.c_str() is taken for the message
    check(refused && why.find("could not be loaded") != std::string::npos,
          "no NVML: one sentence (%s)", why.c_str());
}

// --compare MODEL EVAL REF -b B -t T [--expect-correct N]
int compare(int argc, char** argv) {
    std::string model_path = argv[2], eval_path = argv[3], ref_path = argv[4];
    int B = 0, T = 0, expect = -1;
    for (int i = 5; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        (a == "-b" ? B : a == "-t" ? T : expect) = std::atoi(argv[i + 1]);
    }
    GPT2Cpu model;
    model.load(model_path);
    std::vector<EvalExample> ex;
    read_eval_file(eval_path, &ex);
    const EvalLosses l = packed_losses(&model, ex, B, T);
    std::vector<int> pred;
    const EvalScore s = eval_score(ex, l, 0, (int)ex.size(), &pred);
    std::ifstream ref(ref_path);
    double worst = 0.0;
    int mismatched = 0, lines = 0;
    for (std::string line; std::getline(ref, line); lines++) {
        std::istringstream f(line);
        int i, label, p, p_sum;
        f >> i >> label >> p >> p_sum;
        const size_t k = ex[i].endings.size();
        std::vector<double> v(2 * k);
        for (double& x : v) f >> x;
        for (size_t j = 0; j < k; j++) {
            const size_t slot = (size_t)i * l.max_endings + j;
            const double mean = l.sum[slot] / l.count[slot];
            worst = std::max(worst, std::fabs(mean - v[j]) / std::max(1.0, std::fabs(v[j])));
            worst = std::max(
                worst, std::fabs(l.sum[slot] - v[k + j]) / std::max(1.0, std::fabs(v[k + j])));
        }
        mismatched += pred[i] != p;
    }
    check(lines == (int)ex.size(), "the reference has a line per example (%d of %zu)", lines,
          ex.size());
    check(worst <= 1e-5, "per-example ending losses within 1e-5 of PyTorch's (worst %.3g)", worst);
    check(mismatched == 0, "the same prediction for every example (%d differ)", mismatched);
    std::printf("hellaswag %d/%d = %.4f (lowest summed loss: %d)\n", s.correct, s.examples,
                (double)s.correct / s.examples, s.correct_sum);
    if (expect >= 0)
        check(s.correct == expect, "%d examples right, as recorded for this file and model (%d)",
              s.correct, expect);
    std::printf("test_hellaswag: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 3 && std::strcmp(argv[1], "--write-model") == 0) {
        const GPT2Config cfg = small_config();
        write_model_file(argv[2], cfg, small_params(cfg).data(), 3);
        return 0;
    }
    if (argc >= 9 && std::strcmp(argv[1], "--compare") == 0) return compare(argc, argv);
    if (argc != 1) {
        std::fprintf(stderr,
                     "usage: test_hellaswag [--write-model PATH | --compare MODEL EVAL "
                     "REF -b B -t T [--expect-correct N]]\n");
        return 2;
    }
    char dir_template[] = "/tmp/test_hellaswag.XXXXXX";
    const char* dir = mkdtemp(dir_template);
    if (dir == nullptr) return 2;
    test_format(dir);
    test_json();
    test_planner();
    test_scoring();
    test_cpu_packing();
    test_llmc_log(dir);
    test_gpu_monitor_text();
    std::string cmd = std::string("rm -rf ") + dir;
    if (std::system(cmd.c_str()) != 0) std::printf("note: could not remove %s\n", dir);
    std::printf("test_hellaswag: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
