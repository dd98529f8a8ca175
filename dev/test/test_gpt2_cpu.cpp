// test_gpt2_cpu.cpp: the CPU GPT-2 (gpt2_cpu.h) against the PyTorch reference dump.
//
//   test_gpt2_cpu <model.bin> <debug_state.bin>
//
// Loads the model and the debug state written by scripts/ref/train_gpt2.py, runs forward on the
// state's batch and compares the logits (first V of each Vp row) and the loss, runs backward
// and compares each of the 16 gradient tensors, then replays the trailer's AdamW steps and
// compares each step's loss. Both sides are fp32; this side sums in double, so differences are
// the reference's fp32 rounding. Exits 1 on any mismatch.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model_file.h"
#include "ref/gpt2_cpu.h"

namespace {

// Per element: |ours - ref| <= atol_frac * max|ref| + rtol * |ref|. Scaling the absolute part
// by the tensor's largest magnitude makes one tolerance fit tensors of any scale while
// elements near zero (whose relative error is meaningless) are still bounded.
struct Tolerance {
    double atol_frac;
    double rtol;
};

// fp32 logits: PyTorch's fp32 matmuls round at ~1e-7 relative per op, a few ops deep. Measured
// worst error / max|logit|: 4e-7 on the CI config (L2 C128), 1.7e-6 on d12; 1e-5 leaves 6x on
// d12 and still catches a real error (a wrong op is off by O(1) relative).
constexpr Tolerance kLogitsTol = {1e-5, 1e-5};
// Gradients pass through every op twice and through long fp32 reductions (over B*T rows, Vp
// columns) on the reference side, where cancellation leaves small elements further off.
// Measured worst error / max|grad| per tensor: <= 1e-6 on the CI config, <= 5e-6 on d12.
// 5e-5 of the tensor's largest element keeps 10x on d12; the rtol part covers large elements.
constexpr Tolerance kGradTol = {5e-5, 1e-4};
// The loss is a mean of per-position losses: fp32 rounding only (measured 1 ulp, ~1e-6).
constexpr double kLossTol = 1e-5;
// After k AdamW steps the reference's rounding in grads is amplified by Adam's division by
// sqrt(v) for tiny gradients; measured drift <= 1.5e-6 over 10 steps, so 1e-4 abs. A missing
// clip moves the loss by ~1e-3 here; a missing weight decay only shows with a larger lr * wd.
constexpr double kStepLossTol = 1e-4;

struct Tally {
    int passed = 0;
    int failed = 0;
    void add(bool ok) { (ok ? passed : failed)++; }
};

// Compares n elements of ours[i * stride_ours + j] with ref[i * stride_ref + j], j < cols
// (rows of logits skip the padded columns); prints one table row.
bool compare_tensor(const char* name, const float* ours, const float* ref, size_t rows, size_t cols,
                    size_t stride_ours, size_t stride_ref, Tolerance tol) {
    double max_ref = 0.0;
    for (size_t i = 0; i < rows; i++) {
        for (size_t j = 0; j < cols; j++)
            max_ref = std::fmax(max_ref, std::fabs(ref[i * stride_ref + j]));
    }
    double max_abs = 0.0, max_rel = 0.0, worst_ratio = -1.0;
    size_t worst = 0;
    bool finite = true;
    for (size_t i = 0; i < rows; i++) {
        for (size_t j = 0; j < cols; j++) {
            const double a = ours[i * stride_ours + j], r = ref[i * stride_ref + j];
            const double err = std::fabs(a - r);
            if (!std::isfinite(a) || !std::isfinite(r)) finite = false;
            const double allowed = tol.atol_frac * max_ref + tol.rtol * std::fabs(r);
            // Relative error is reported only where the element is not tiny for its tensor.
            if (std::fabs(r) > 1e-3 * max_ref) max_rel = std::fmax(max_rel, err / std::fabs(r));
            max_abs = std::fmax(max_abs, err);
            const double ratio = allowed > 0.0 ? err / allowed : (err > 0.0 ? INFINITY : 0.0);
            if (ratio > worst_ratio) {
                worst_ratio = ratio;
                worst = i * cols + j;
            }
        }
    }
    const bool ok = finite && worst_ratio <= 1.0;
    const size_t wi = worst / cols, wj = worst % cols;
    std::printf("%-9s %10zu %11.4e %11.4e %11.4e %10zu %14.7e %14.7e  %s\n", name, rows * cols,
                max_ref, max_abs, max_rel, worst, ours[wi * stride_ours + wj],
                ref[wi * stride_ref + wj], ok ? "ok" : "FAIL");
    return ok;
}

void print_table_header() {
    std::printf("%-9s %10s %11s %11s %11s %10s %14s %14s\n", "tensor", "n", "max|ref|",
                "max abs err", "max rel err", "worst idx", "ours", "ref");
}

bool compare_scalar(const char* name, double ours, double ref, double tol) {
    const double err = std::fabs(ours - ref);
    const bool ok = std::isfinite(ours) && err <= tol;
    std::printf("%-12s ours %.7f  ref %.7f  abs err %.3e  tol %.1e  %s\n", name, ours, ref, err,
                tol, ok ? "ok" : "FAIL");
    return ok;
}

// Replays the trailer: losses[k] is the loss after k AdamW updates on the same batch; the
// gradients of the loss-0 forward are already in the model when this runs.
void check_steps(GPT2Cpu* model, const llmc::DebugState& st, Tally* tally) {
    if (st.n_steps == 0) {
        std::printf("no AdamW trailer in the debug state; step losses not checked\n");
        return;
    }
    std::printf("AdamW steps: lr %g beta1 %g beta2 %g eps %g weight_decay %g grad_clip %g\n", st.lr,
                st.beta1, st.beta2, st.eps, st.weight_decay, st.grad_clip);
    float loss = model->mean_loss;
    for (int k = 0; k < st.n_steps; k++) {
        if (k > 0) {
            model->update(st.lr, st.beta1, st.beta2, st.eps, st.weight_decay, st.grad_clip, k);
            loss = model->forward(st.x.data(), st.y.data(), st.B, st.T);
            model->zero_grad();
            model->backward();
        }
        char name[32];
        std::snprintf(name, sizeof(name), "step %d loss", k);
        tally->add(compare_scalar(name, loss, st.step_losses[k], kStepLossTol));
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s <model.bin> <debug_state.bin>\n", argv[0]);
        return 2;
    }
    const auto start = std::chrono::steady_clock::now();
    GPT2Cpu model;
    model.load(argv[1]);
    const llmc::GPT2Config& c = model.cfg;
    llmc::DebugState st;
    llmc::read_debug_state(argv[2], c, &st);
    std::printf("model: L=%d NH=%d C=%d V=%d Vp=%d maxT=%d (%zu params); batch B=%d T=%d\n",
                c.num_layers, c.num_heads, c.channels, c.vocab_size, c.padded_vocab_size,
                c.max_seq_len, model.layout.total, st.B, st.T);

    Tally tally;
    const float loss = model.forward(st.x.data(), st.y.data(), st.B, st.T);
    print_table_header();
    tally.add(compare_tensor("logits", model.acts.logits.data(), st.logits.data(),
                             (size_t)st.B * st.T, c.vocab_size, c.padded_vocab_size, c.vocab_size,
                             kLogitsTol));
    tally.add(compare_scalar("loss", loss, st.loss, kLossTol));

    model.zero_grad();
    model.backward();
    print_table_header();
    for (int i = 0; i < llmc::kNumParamTensors; i++) {
        const size_t off = model.layout.offsets[i], n = model.layout.sizes[i];
        tally.add(compare_tensor(llmc::kParamNames[i], model.grads.data() + off,
                                 st.grads.data() + off, 1, n, n, n, kGradTol));
    }
    check_steps(&model, st, &tally);

    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("time: %.2f s\n", seconds);
    std::printf("test_gpt2_cpu: %d passed, %d failed\n", tally.passed, tally.failed);
    return tally.failed == 0 ? 0 : 1;
}
