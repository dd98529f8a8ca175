// model_file.h: GPT-2 configuration, parameter layout and the llm.c-compatible files
// (model file and debug state). Host-only C++; used by the trainer, the tests and the CPU
// reference alike.
//
// Model file: 256 x int32 header
//   [0] magic 20240326  [1] version (3 = fp32 params, 5 = bf16 params)
//   [2] maxT  [3] V (vocab size)  [4] L  [5] NH  [6] C  [7] Vp (padded vocab)
// then the 16 parameter tensors in kParamNames order, wte padded to Vp rows.
//
// Debug state: 256 x int32 header
//   [0] magic 20240327  [1] version 2  [2] B  [3] T
// then x (B*T int32), y (B*T int32), logits (B*T*V fp32), loss (1 fp32), every parameter
// gradient in the model file's layout (fp32, wte padded to Vp rows).
// This project appends a trailer that llm.c readers ignore (they stop after the gradients):
//   int32 n_steps; float lr, beta1, beta2, eps, weight_decay, grad_clip; float losses[n_steps]
// losses[k] is the loss of the forward pass after k AdamW updates on the same batch (so
// losses[0] == loss); each update clips the global gradient norm to grad_clip as PyTorch's
// clip_grad_norm_ does, and decays only the 2-D weights.
// Trailer version 2 (scripts/ref/train_gpt2.py writes it; version 1 is the above alone) appends
//   int32 trailer_version (2); float baseline[kNumBaselines]
// PyTorch's own bf16 error on the same batch: the run under torch.autocast(bfloat16) against the
// fp32 run, in the order logits (||a - f|| / ||f||), loss (|a - f|), the 16 gradients in file
// order (||a - f|| / ||f||), step losses (max over k of |a_k - f_k|, a and f each running its
// own n_steps AdamW steps). The bf16 test_gpt2cu sets its thresholds from these.
// Trailer version 3 (written by scripts/ref/train_gpt2.py since; versions 1 and 2 are still read)
// has trailer_version 3, the same kNumBaselines floats, then
//   int32 reference_bits (32 or 64: the float width of the run that wrote logits, loss,
//         gradients and step losses); int32 tf32_source (0: no TF32 baseline, 1: measured with
//         torch.backends.cuda.matmul.allow_tf32 on a GPU, 2: emulated on the CPU by rounding
//         every matmul input to TF32's 10-bit mantissa); float tf32_baseline[kNumBaselines]
// PyTorch's TF32 error on the same batch, in the order and sense of the bf16 baselines: the run
// with TF32 matmuls against the reference. The fp32 test_gpt2cu with --tf32 1 is judged by it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

constexpr int kModelMagic = 20240326;
constexpr int kDebugStateMagic = 20240327;
constexpr int kTokenizerMagic = 20240328;
constexpr int kNumParamTensors = 16;
constexpr int kTrailerVersion = 3;                   // the newest debug-state trailer
constexpr int kNumBaselines = kNumParamTensors + 3;  // logits, loss, 16 grads, step losses

// Parameter tensors, in file order. Linear weights are (out_features, in_features), row-major.
enum ParamIndex {
    kWte = 0,  // (Vp, C)
    kWpe,      // (maxT, C)
    kLn1w,
    kLn1b,      // (L, C)
    kQkvw,      // (L, 3C, C)
    kQkvb,      // (L, 3C)
    kAttprojw,  // (L, C, C)
    kAttprojb,  // (L, C)
    kLn2w,
    kLn2b,     // (L, C)
    kFcw,      // (L, 4C, C)
    kFcb,      // (L, 4C)
    kFcprojw,  // (L, C, 4C)
    kFcprojb,  // (L, C)
    kLnfw,
    kLnfb,  // (C)
};
extern const char* const kParamNames[kNumParamTensors];

struct GPT2Config {
    int max_seq_len = 0;        // maxT
    int vocab_size = 0;         // V
    int padded_vocab_size = 0;  // Vp >= V, a multiple of 128 in files written by this project
    int num_layers = 0;         // L
    int num_heads = 0;          // NH
    int channels = 0;           // C
};

// Element counts and offsets of the 16 tensors for a config (offsets in elements).
struct ParamLayout {
    size_t sizes[kNumParamTensors];
    size_t offsets[kNumParamTensors];
    size_t total;
};
ParamLayout param_layout(const GPT2Config& cfg);

// True for the tensors that take weight decay (the 2-D ones: wte, wpe and the four matrices).
bool param_is_decayed(int index);

// Checks a config's values; on failure returns false and a sentence in *why.
bool validate_config(const GPT2Config& cfg, std::string* why);

// "d12", "d24", "d36", "d48" -> GPT-2 124M / 350M / 774M / 1558M shapes (maxT 1024,
// V 50257, Vp 50304). Returns false for any other name.
bool config_from_preset(const std::string& name, GPT2Config* cfg);

// Reads a model file; params receive the 16 tensors as fp32 (bf16 files are widened).
// Any problem (missing file, wrong magic/version, truncated) exits with one sentence.
void read_model_file(const std::string& path, GPT2Config* cfg, std::vector<float>* params,
                     int* file_version);
// Writes a model file with fp32 (version 3) or bf16 (version 5, round-to-nearest-even) params.
void write_model_file(const std::string& path, const GPT2Config& cfg, const float* params,
                      int version);

struct DebugState {
    int B = 0, T = 0;
    std::vector<int> x, y;      // B*T each
    std::vector<float> logits;  // B*T*V
    float loss = 0.0f;
    std::vector<float> grads;  // param_layout(cfg).total
    // trailer (n_steps == 0 when the file has none)
    int n_steps = 0;
    float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, grad_clip = 0;
    std::vector<float> step_losses;  // n_steps
    // trailer version 2 (trailer_version: 0 no trailer, 1, 2 or 3): PyTorch's bf16 autocast error
    int trailer_version = 0;
    bool has_baseline = false;  // trailer_version >= 2
    float base_logits = 0, base_loss = 0, base_step_losses = 0;
    float base_grads[kNumParamTensors] = {};
    // trailer version 3: the reference's float width (32 before version 3) and PyTorch's TF32
    // error (tf32_source as in the format above; has_tf32_baseline when it is not 0)
    int reference_bits = 32;
    int tf32_source = 0;
    bool has_tf32_baseline = false;
    float tf32_logits = 0, tf32_loss = 0, tf32_step_losses = 0;
    float tf32_grads[kNumParamTensors] = {};
};
// Reads a debug state written for the model `cfg`; exits with one sentence on any problem.
void read_debug_state(const std::string& path, const GPT2Config& cfg, DebugState* st);

// bf16 <-> fp32 helpers used by the file code (round-to-nearest-even, NaN kept).
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);

}  // namespace llmc
