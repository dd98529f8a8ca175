// train_config.h: the trainer's options: one struct with a default and a comment per field, and
// one option table (train_options) from which come the parser, the --help text, the printed
// configuration, DIR/config.json and the options a checkpoint records for a resume, with which
// of them a resume must keep and which it may change (llmc/train_resume.h). Every value is
// validated with a sentence that says what to do.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "schedule.h"

namespace llmc {

struct TrainConfig {
    std::string train_pattern;          // -i  glob of training shards (required)
    std::string val_pattern;            // -j  glob of validation shards ("" = no validation)
    std::string model = "d12";          // -e  model file, or a preset d12|d24|d36|d48
    std::string output_dir;             // -o  where the final model is written ("" = none)
    int B = 4;                          // -b  micro-batch size (sequences, per GPU)
    int T = 1024;                       // -t  sequence length
    long long total_batch = -1;         // -d  tokens per step; -1 = B*T (no accumulation)
    int steps = 20;                     // -x  optimizer steps
    float lr = 3e-4f;                   // -l  peak learning rate
    int warmup = 0;                     // -u  linear warmup steps, then the schedule
    float weight_decay = 0.0f;          // -c  AdamW decay (2-D weights only)
    float beta1 = 0.9f, beta2 = 0.95f;  //     AdamW moments
    float eps = 1e-8f;                  //     AdamW epsilon
    float grad_clip = 1.0f;             // --grad-clip  clip the global gradient norm (0 = off)
    int val_every = 0;                  // -v  validate every N steps (0 = only at the end)
    int val_batches = 20;               // -m  batches per validation
    unsigned long long seed = 42;       // --seed  of the random init (presets) and shuffle
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

// The option table, bound to cfg's fields: each option's names, range or choices, help, JSON
// key and, for a resume, whether it must be kept (cli::Resume) and its checkpoint slot
// (llmc/checkpoint.h). Headings group the options.
std::vector<cli::Option> train_options(TrainConfig* cfg);
// The trainer's command line: the table, the usage and help texts, and llm.c's flags that mean
// something else here, refused with a sentence naming this trainer's option.
cli::Program train_program(TrainConfig* cfg);

// Parses argv into cfg. Prints the help and exits 0 on -h/--help; exits 2 with one sentence
// on an unknown option, a stray word, a missing or malformed value, a value out of range, or an
// llm.c option that means something else here. cfg->world_size must be set first: -d counts the
// tokens of all ranks and defaults to world_size * B * T.
void parse_train_args(int argc, char** argv, TrainConfig* cfg);

// Prints the resolved configuration: the options by group as a command line would give them,
// then the tokens per step (and the GPUs).
void print_train_config(const TrainConfig& cfg, FILE* out);

// Writes the resolved configuration as one JSON object (every option by its key, and
// world_size), followed by `extra` (already formatted "key": value pairs, may be empty).
void write_train_config_json(const TrainConfig& cfg, const std::string& extra, FILE* out);

// Checks every file the run will write before it starts: creates the -o directory (mkdir -p)
// and checks that it is writable, and checks that --json-summary's directory exists and that the
// file can be written there, leaving nothing behind that was not there. Exits 1 with a sentence.
void check_output_paths(const TrainConfig& cfg);

// The learning-rate schedule the options describe.
ScheduleConfig schedule_of(const TrainConfig& cfg);

}  // namespace llmc
