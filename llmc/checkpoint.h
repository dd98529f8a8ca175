// checkpoint.h: training checkpoints on disk (host code, no CUDA): the file format, crash-safe
// writing, finding the newest complete checkpoint and pruning. Whether a run may continue a
// checkpoint is the trainer's option table's business (llmc/train_config.h).
//
// A checkpoint of step S (S optimizer steps done) is two files in the run directory:
//   model_SSSSSSSS.bin  an llm.c model file, version 3: the fp32 weights. Bit for bit these are
//                       the device parameters in the fp32 build and the fp32 master weights in
//                       the bf16 build, so any llm.c tool can read the model of a checkpoint.
//   state_SSSSSSSS.bin  everything else the run needs to continue exactly (format below).
// Each is written to a hidden temporary name (.model_SSSSSSSS.bin.tmp), fsync'd, and renamed;
// the state file is renamed last (after removing an older state file of the same step), then
// the directory is fsync'd. So a state file under its final name always has its model file
// beside it, a crash at any moment leaves every earlier checkpoint intact, and temporary files
// are never taken for checkpoints. "Complete" = both final names exist.
//
// State file (little-endian): a 4096-byte header of int64 slots (StateSlot below; float
// values are stored as the bits of a double; two strings at fixed byte offsets), then
//   m        num_params x fp32   AdamW first moment
//   v        num_params x fp32   AdamW second moment
//   params   num_params x param_bytes, only when param_bytes != 4: the device parameters as
//            stored (bf16 bits in the bf16 build), since rounding the master weights again would
//            not reproduce them (stochastic rounding)
// and nothing after. The header holds checksum64() of each array and of the model file's
// tensors, so a damaged file, or a model file from another checkpoint, is refused.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dataloader.h"
#include "model_file.h"

namespace llmc {

constexpr int64_t kStateMagic = 0x54504b43434d4c4cll;  // the bytes "LLMCCKPT"
constexpr int kStateVersion = 1;
constexpr int kStateHeaderBytes = 4096;
constexpr int kStatePrecisionOffset = 2048;  // byte offset of the precision name (16 bytes)
constexpr int kStatePatternOffset = 2064;    // byte offset of the train glob, NUL-terminated
constexpr int kStatePatternMax = kStateHeaderBytes - kStatePatternOffset - 1;

enum StateSlot {  // int64 slots of the state header
    kSlotMagic = 0,
    kSlotVersion,
    kSlotHeaderBytes,
    kSlotStep,        // optimizer steps done
    kSlotAdamT,       // AdamW updates applied (skipped steps excluded); the next uses t = this + 1
    kSlotNumParams,   // parameters
    kSlotParamBytes,  // bytes per device parameter: 4 (fp32 build) or 2 (bf16 build)
    kSlotMaxT,
    kSlotVocab,
    kSlotPaddedVocab,
    kSlotLayers,
    kSlotHeads,
    kSlotChannels,
    kSlotB,  // the global micro-batch: GPUs x -b (1 GPU: -b)
    kSlotT,
    kSlotTotalBatch,
    kSlotSeed,  // the run's seed: init, shuffle and stochastic rounding all derive from it
    kSlotShuffle,
    kSlotTrainShards,  // shards the train glob matched, and their total tokens
    kSlotTrainTokens,
    kSlotLoaderEpoch,  // the next training batch (DataLoaderPosition)
    kSlotLoaderShard,
    kSlotLoaderOffset,
    kSlotBadStreak,  // consecutive non-finite steps just before this checkpoint
    kSlotBadTotal,   // non-finite (skipped) steps so far
    kSlotSchedule,   // LrSchedule
    kSlotWarmup,
    kSlotSteps,
    kSlotLr,  // doubles from here to kSlotGradClip
    kSlotFinalFrac,
    kSlotDecayFrac,
    kSlotBeta1,
    kSlotBeta2,
    kSlotEps,
    kSlotWeightDecay,
    kSlotGradClip,
    kSlotSumModel,  // checksum64 of the model file's fp32 tensors
    kSlotSumM,
    kSlotSumV,
    kSlotSumParams,  // 0 when the params array is absent
    // --skip-outliers statistics (llmc/outlier.h); 0 in files written before the option, which
    // is what a run without it saves too
    kSlotOutlierMean,  // double
    kSlotOutlierSq,    // double
    kSlotOutlierCount,
    kSlotOutlierTotal,  // steps skipped as outliers so far
    kNumStateSlots
};
// scripts/test/test_resume.sh reads the header with these indices.
static_assert(kSlotStep == 3 && kSlotNumParams == 5 && kSlotParamBytes == 6 &&
                  kSlotSumModel == 36 && kSlotSumParams == 39,
              "update scripts/test/test_resume.sh with the state header");

// The slots that hold the run's options. The trainer's option table (llmc/train_config.cpp)
// says which option each one holds and whether a resume must keep it or may change it; an
// integer option is stored as it is (a choice as its index among the choices), a float option as
// the bits of its value as a double. kSlotB holds the global micro-batch, GPUs x -b, so a run may
// resume on another number of GPUs. The one text option, the train glob, sits at
// kStatePatternOffset; the table names it kSlotText.
constexpr int kOptionSlots[] = {kSlotB,       kSlotT,         kSlotTotalBatch,  kSlotSeed,
                                kSlotShuffle, kSlotSchedule,  kSlotWarmup,      kSlotSteps,
                                kSlotLr,      kSlotFinalFrac, kSlotDecayFrac,   kSlotBeta1,
                                kSlotBeta2,   kSlotEps,       kSlotWeightDecay, kSlotGradClip};
constexpr int kSlotText = kNumStateSlots;

inline int64_t slot_from_double(double x) {
    int64_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return bits;
}
inline double double_from_slot(int64_t bits) {
    double x;
    std::memcpy(&x, &bits, sizeof(x));
    return x;
}

// Everything in a state header.
struct CheckpointMeta {
    long long step = 0, adam_t = 0;
    GPT2Config cfg;
    long long num_params = 0;
    int param_bytes = 4;
    std::string precision;                         // "fp32" or "bf16"
    long long train_shards = 0, train_tokens = 0;  // what the train glob matched
    DataLoaderPosition loader;
    long long bad_streak = 0, bad_total = 0;
    double outlier_mean = 0, outlier_sq = 0;  // --skip-outliers statistics (llmc/outlier.h)
    long long outlier_count = 0, outlier_total = 0;
    uint64_t sum_model = 0, sum_m = 0, sum_v = 0, sum_params = 0;  // set by the writer
    // The run's options, by slot: the entries of kOptionSlots (the others stay 0), and the text
    // option (the train glob).
    int64_t options[kNumStateSlots] = {};
    std::string option_text;
};

struct OptimizerState {
    std::vector<float> m, v;          // num_params each
    std::vector<uint8_t> raw_params;  // num_params * param_bytes when param_bytes != 4, else empty
};

// A 64-bit checksum of bytes: the sum over the little-endian 64-bit words w_i (the last one
// zero-padded) of splitmix64(w_i + i * 0x9E3779B97F4A7C15), then splitmix64(sum ^ bytes).
// Every term is independent, so it is fast and easy to recompute elsewhere (numpy).
uint64_t checksum64(const void* data, size_t bytes);

std::string checkpoint_model_path(const std::string& dir, long long step);
std::string checkpoint_state_path(const std::string& dir, long long step);

// Steps of the complete checkpoints in dir, ascending (empty when none, or no such dir).
std::vector<long long> list_checkpoints(const std::string& dir);

// Writes the checkpoint of meta.step into dir as described above. weights: num_params fp32
// values for the model file. Fills the checksums of *meta. Exits with a sentence on an I/O
// error, leaving the earlier checkpoints untouched.
void write_checkpoint(const std::string& dir, CheckpointMeta* meta, const float* weights,
                      const OptimizerState& opt);

// Deletes the complete checkpoints that are neither among the newest keep_last nor at a step
// that is a multiple of keep_every (0 = none kept that way), and leftover temporary files.
// Returns how many checkpoints it removed.
int prune_checkpoints(const std::string& dir, int keep_last, int keep_every);

// Reads and checks a state file's header (magic, version, header values, exact file size).
void read_checkpoint_meta(const std::string& state_path, CheckpointMeta* meta);
// Reads the whole state file: header, arrays, checksums.
void read_checkpoint_state(const std::string& state_path, CheckpointMeta* meta,
                           OptimizerState* opt);
// Reads the model file of the checkpoint `meta` came from, and checks that it is that
// checkpoint's (shape and checksum).
void read_checkpoint_model(const std::string& model_path, const CheckpointMeta& meta,
                           std::vector<float>* weights);

// The state path a --resume argument names: a state file itself, or a directory (its newest
// complete checkpoint). Returns "" for a directory without checkpoints; exits with a sentence
// for a path that is neither.
std::string resolve_resume_path(const std::string& path);

// The model path that belongs to a state path (same directory, same step).
std::string model_path_for_state(const std::string& state_path);

}  // namespace llmc
