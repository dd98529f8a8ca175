// train_config.h: the trainer's options: one struct with a default and a comment per field,
// one parser, one printer. Every value is validated with a sentence that says what to do.
#pragma once
#include <cstdio>
#include <string>

namespace llmc {

struct TrainConfig {
    std::string train_pattern;          // -i  glob of training shards (required)
    std::string val_pattern;            // -j  glob of validation shards ("" = no validation)
    std::string model = "d12";          // -e  model file, or a preset d12|d24|d36|d48
    std::string output_dir;             // -o  where the final model is written ("" = none)
    int B = 4;                          // -b  micro-batch size (sequences)
    int T = 1024;                       // -t  sequence length
    long long total_batch = -1;         // -d  tokens per step; -1 = B*T (no accumulation)
    int steps = 20;                     // -x  optimizer steps
    float lr = 3e-4f;                   // -l  peak learning rate
    int warmup = 0;                     // -u  linear warmup steps, then the schedule
    float weight_decay = 0.0f;          // -c  AdamW decay (2-D weights only)
    float beta1 = 0.9f, beta2 = 0.95f;  //     AdamW moments
    float eps = 1e-8f;                  //     AdamW epsilon
    float grad_clip = 1.0f;             // -g  clip the global gradient norm (0 = off)
    int val_every = 0;                  // -v  validate every N steps (0 = only at the end)
    int val_batches = 20;               // -m  batches per validation
    unsigned long long seed = 42;       // -s  seed of the random init (presets) and shuffle
    int tf32 = 1;                       // --tf32 0|1  TF32 matmuls in the fp32 build
    int graph = 1;                      // --graph 0|1 replay the step as a CUDA graph
    int autotune = 1;                   // --autotune 0|1 time cuBLASLt's candidates once
    int device = 0;                     // --device    CUDA device index
    int shuffle = 1;                    // --shuffle 0|1 train batches in a seeded order per epoch
    int prefetch = 1;                   // --prefetch 0|1 read batches ahead on a thread
    int overfit_batch = 0;              // --overfit-batch 0|1 train on the first batch only
    int recompute = 0;                  // --recompute 0|1|2 activations recomputed in backward:
                                        //     1 GELU output, 2 also ln1/ln2 (less memory)
    std::string json_summary;           // --json-summary PATH  benchmark summary

    // text samples during training (llmc/sampler.h)
    int sample_every = 0;                   // --sample-every N  sample every N steps and at the end
                                            //     (0 = never)
    int sample_tokens = 64;                 // --sample-tokens K  tokens per sample
    float temperature = 1.0f;               // --temperature T  0 = greedy
    int top_k = 0;                          // --top-k K  0 = every token
    unsigned long long sample_seed = 1337;  // --sample-seed S
    std::string tokenizer;  // --tokenizer PATH  tokenizer.bin or a dir with encoder.json +
                            //     vocab.bpe ("" = tokenizer.bin beside the train shards)

    // learning-rate schedule, checkpoints, resume and stability
    std::string lr_schedule = "constant";  // --lr-schedule constant|linear|cosine|wsd
    float lr_final_frac = 0.0f;            // --lr-final-frac  final lr as a fraction of the peak
    float decay_frac = 0.2f;     // --decay-frac  wsd: fraction of the steps spent decaying
    int checkpoint_every = 0;    // --checkpoint-every N  checkpoint every N steps (0 = end)
    int keep_last = 2;           // --keep-last K  keep the newest K checkpoints
    int keep_every = 0;          // --keep-every M  also keep steps that are multiples of M
    bool resume = false;         // --resume [PATH]  continue from a checkpoint
    std::string resume_path;     //     PATH: a run dir or state file ("" = -o's newest)
    int stop_after = 0;          // --stop-after N  stop (checkpoint, exit 0) after step N
    int max_bad_steps = 10;      // --max-bad-steps K  stop after K non-finite steps in a row
    float skip_outliers = 0.0f;  // --skip-outliers Z  skip steps whose norm z-score exceeds Z
    int outlier_window = 100;    // --outlier-window W  the statistics' averaging length

    // evaluation, telemetry and llm.c interop (llmc/hellaswag.h, gpu_monitor.h, llmc_log.h)
    std::string hellaswag;             // --hellaswag FILE  eval file in llm.c's format ("" = none)
    int eval_every = 0;                // --eval-every N  HellaSwag every N steps (0 = at the end)
    int gpu_log = 0;                   // --gpu-log N  GPU clocks, power, temperature every N steps
    std::string llmc_log;              // --llmc-log DIR  also DIR/main.log in llm.c's format
    std::string model_dtype = "fp32";  // --model-dtype fp32|bf16  DIR/model.bin's parameters

    // multi-GPU (one process per GPU; llmc/multi_gpu.cuh)
    int world_size = 1;     // not an option: the launcher's, set before parsing (dist_env.h)
    int zero = -1;          // --zero 0|1  1: ZeRO-1 sharded optimizer (-1 = 1 when world > 1)
    std::string init_file;  // --init-file PATH  share the NCCL id through a file, not TCP
};

// Parses argv into cfg. Prints the help and exits 0 on -h/--help; exits 2 with one sentence
// on an unknown flag, a missing or malformed value, or a value out of range. cfg->world_size
// must be set first: -d counts the tokens of all ranks and defaults to world_size * B * T.
void parse_train_args(int argc, char** argv, TrainConfig* cfg);

// Prints the resolved configuration, one option a line.
void print_train_config(const TrainConfig& cfg, FILE* out);

// Writes the resolved configuration as one JSON object (every field above, by its long name),
// followed by `extra` (already formatted "key": value pairs, may be empty).
void write_train_config_json(const TrainConfig& cfg, const std::string& extra, FILE* out);

}  // namespace llmc
