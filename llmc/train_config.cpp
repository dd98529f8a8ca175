// train_config.cpp: parsing and printing the trainer's options (see train_config.h).
#include "train_config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "run_log.h"
#include "schedule.h"

namespace llmc {
namespace {

const char* kHelp =
    "usage: train_gpt2cu -i TRAIN_GLOB [options]\n"
    "\n"
    "Trains GPT-2 on llm.c-format token shards on one GPU.\n"
    "\n"
    "data and model:\n"
    "  -i GLOB      training shards, e.g. 'data/tinyshakespeare/*_train.bin' (required)\n"
    "  -j GLOB      validation shards (default: none)\n"
    "  -e MODEL     model file (llm.c format) or preset d12|d24|d36|d48 (default d12)\n"
    "  -o DIR       write the trained model to DIR/model.bin at the end (default: none)\n"
    "  -s SEED      seed of a preset's random initialisation and of the shuffle (default 42)\n"
    "  --shuffle 0|1   visit the training shards, and each shard's batches, in a new order every\n"
    "               epoch drawn from the seed (default 1; 0: name order). Validation is never\n"
    "               shuffled\n"
    "  --prefetch 0|1  read and shuffle batches on a background thread while the GPU computes\n"
    "               (default 1; 0 reads them between steps, for comparison)\n"
    "batch:\n"
    "  -b B         micro-batch size in sequences (default 4)\n"
    "  -t T         sequence length, at most the model's maxT (default 1024)\n"
    "  -d TOKENS    tokens per optimizer step, a multiple of B*T (default B*T)\n"
    "optimization:\n"
    "  -x STEPS     optimizer steps (default 20)\n"
    "  -l LR        peak learning rate (default 3e-4)\n"
    "  -u STEPS     linear warmup steps, then the schedule (default 0)\n"
    "  --lr-schedule constant|linear|cosine|wsd   lr after the warmup (default constant):\n"
    "               linear/cosine decay to the final lr at the last step; wsd stays at the peak,\n"
    "               then decays linearly over the last --decay-frac of the steps\n"
    "  --lr-final-frac F  final lr as a fraction of the peak (default 0)\n"
    "  --decay-frac F     wsd: fraction of the steps spent decaying (default 0.2)\n"
    "  -c WD        AdamW weight decay on 2-D weights (default 0)\n"
    "  -g NORM      clip the global gradient norm to NORM, 0 = off (default 1.0)\n"
    "  --beta1 X --beta2 X --eps X   AdamW constants (default 0.9, 0.95, 1e-8)\n"
    "evaluation:\n"
    "  -v N         validation loss every N steps, 0 = only at the end (default 0)\n"
    "  -m N         validation batches (default 20)\n"
    "  --sample-every N   print a text sample every N steps and at the end, also written to\n"
    "               DIR/log.jsonl (default 0: never)\n"
    "  --sample-tokens K  tokens per sample, continuing <|endoftext|> (default 64)\n"
    "  --temperature T    sampling temperature, 0 = greedy (default 1)\n"
    "  --top-k K          sample among the K most likely tokens, 0 = all (default 0)\n"
    "  --sample-seed S    seed of the samples (default 1337; the step is mixed in)\n"
    "  --tokenizer PATH   decodes samples: an llm.c tokenizer.bin, or a directory with GPT-2's\n"
    "               encoder.json and vocab.bpe (default: tokenizer.bin beside the -i shards,\n"
    "               which prepare_data writes; without one samples print as token ids)\n"
    "runtime:\n"
    "  --tf32 0|1   TF32 tensor cores in fp32 matmuls (default 1, PyTorch's 'high')\n"
    "  --graph 0|1  run each step as a CUDA graph (default 1; 0 for debugging)\n"
    "  --overfit-batch 0|1  train on the first batch every step (default 0): a model that\n"
    "               cannot drive this loss toward 0 has a bug; also times steps without loading\n"
    "  --recompute 0|1|2  memory for time: 1 recomputes each layer's GELU output in the backward\n"
    "               instead of keeping it, 2 also its two layernorm outputs (default 0; the\n"
    "               gradients are bitwise the same). The memory plan printed at start shows\n"
    "               what each mode needs\n"
    "  --autotune 0|1  time cuBLASLt's candidate kernels once per shape and keep the fastest\n"
    "               of those whose results are bitwise the heuristic's pick's (default 1; 0\n"
    "               takes that pick untimed; both give the same bits on every run)\n"
    "  --device N   CUDA device (default 0)\n"
    "  --json-summary PATH   write median step time, tok/s and memory as JSON\n"
    "  --max-bad-steps K  stop (exit 1, no checkpoint) after K steps in a row whose loss or\n"
    "               gradient norm is not finite; such steps leave the weights alone (default\n"
    "               10; 0 = never stop)\n"
    "  --skip-outliers Z  skip the update of a step whose gradient norm is more than Z standard\n"
    "               deviations above its recent mean (exponential averages over the applied\n"
    "               steps, from the 20th on); K such steps in a row stop the run like\n"
    "               --max-bad-steps (default 0: off)\n"
    "  --outlier-window W  the averages' length in steps (decay 1 - 1/W; default 100)\n"
    "checkpoints (in -o DIR; also DIR/config.json and DIR/log.jsonl, one JSON line a step):\n"
    "  --checkpoint-every N  write DIR/model_SSSSSSSS.bin + state_SSSSSSSS.bin every N steps\n"
    "               (default 0: only at the end; a run always checkpoints at its end and when\n"
    "               stopped by SIGINT/SIGTERM)\n"
    "  --keep-last K    keep the newest K checkpoints (default 2)\n"
    "  --keep-every M   also keep every checkpoint whose step is a multiple of M (default 0)\n"
    "  --resume [PATH]  continue bit for bit from the newest complete checkpoint in -o (a\n"
    "               fresh start when there is none yet), or from PATH: a run directory or a\n"
    "               state_SSSSSSSS.bin file (then -o defaults to its directory)\n"
    "  --stop-after N   stop after step N as if interrupted (checkpoint, exit 0); the schedule\n"
    "               still spans -x steps, so a --resume continues the same run\n"
    "multi-GPU (one process per GPU: scripts/launch.sh -n N, mpirun -np N or srun; README):\n"
    "  -b and -d    -b is each GPU's micro-batch; -d counts the tokens of all GPUs (default\n"
    "               N*B*T), so N GPUs at -b B read the batches of one GPU at -b N*B\n"
    "  --zero 0|1   1 (the default with N > 1): each GPU keeps 1/N of the optimizer state\n"
    "               (ZeRO stage 1; needs C % N == 0); 0: every GPU keeps all of it\n"
    "  --init-file PATH  share the NCCL id through PATH on a shared filesystem instead of\n"
    "               TCP (also LLMC_INIT_FILE)\n"
    "  -h, --help   this text\n"
    "\n"
    "environment: LLMC_DEBUG_SYNC=1 synchronizes after every kernel to locate a fault.\n"
    "multi-GPU: LLMC_RANK/LLMC_WORLD_SIZE/LLMC_LOCAL_RANK (else OpenMPI's or Slurm's),\n"
    "LLMC_MASTER_ADDR/LLMC_MASTER_PORT (or MASTER_ADDR/MASTER_PORT; default 127.0.0.1:29517),\n"
    "LLMC_NCCL_LIB (libnccl.so.2 to load), LLMC_BOOTSTRAP_TIMEOUT, LLMC_NCCL_TIMEOUT (s).\n";

[[noreturn]] void usage_error(const char* fmt, const char* a, const char* b = "") {
    std::fprintf(stderr, "error: ");
    std::fprintf(stderr, fmt, a, b);
    std::fprintf(stderr, "\n(run with --help for the options)\n");
    std::exit(2);
}

long long parse_int(const char* flag, const char* text, long long lo, long long hi) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0')
        usage_error("%s needs a whole number, got '%s'", flag, text);
    if (v < lo || v > hi) {
        char range[96];
        std::snprintf(range, sizeof(range), "%lld..%lld, got %s", lo, hi, text);
        usage_error("%s must be in %s", flag, range);
    }
    return v;
}

float parse_float(const char* flag, const char* text, double lo, double hi) {
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0')
        usage_error("%s needs a number, got '%s'", flag, text);
    if (!(v >= lo && v <= hi)) {
        char range[96];
        std::snprintf(range, sizeof(range), "[%g, %g], got %s", lo, hi, text);
        usage_error("%s must be in %s", flag, range);
    }
    return static_cast<float>(v);
}

}  // namespace

void parse_train_args(int argc, char** argv, TrainConfig* c) {
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (std::strcmp(f, "-h") == 0 || std::strcmp(f, "--help") == 0) {
            std::fputs(kHelp, stdout);
            std::exit(0);
        }
        if (std::strcmp(f, "--resume") == 0) {  // the only option whose value is optional
            c->resume = true;
            if (i + 1 < argc && argv[i + 1][0] != '-') c->resume_path = argv[++i];
            continue;
        }
        if (i + 1 >= argc) usage_error("%s needs a value", f);
        const char* v = argv[++i];
        auto is = [f](const char* name) { return std::strcmp(f, name) == 0; };
        if (is("-i"))
            c->train_pattern = v;
        else if (is("-j"))
            c->val_pattern = v;
        else if (is("-e"))
            c->model = v;
        else if (is("-o"))
            c->output_dir = v;
        else if (is("-s"))
            c->seed = (unsigned long long)parse_int(f, v, 0, (1ll << 62));
        else if (is("-b"))
            c->B = (int)parse_int(f, v, 1, 1 << 16);
        else if (is("-t"))
            c->T = (int)parse_int(f, v, 1, 1 << 20);
        else if (is("-d"))
            c->total_batch = parse_int(f, v, 1, 1ll << 40);
        else if (is("-x"))
            c->steps = (int)parse_int(f, v, 1, 1 << 30);
        else if (is("-l"))
            c->lr = parse_float(f, v, 0.0, 10.0);
        else if (is("-u"))
            c->warmup = (int)parse_int(f, v, 0, 1 << 30);
        else if (is("-c"))
            c->weight_decay = parse_float(f, v, 0.0, 10.0);
        else if (is("-g"))
            c->grad_clip = parse_float(f, v, 0.0, 1e9);
        else if (is("--beta1"))
            c->beta1 = parse_float(f, v, 0.0, 0.999999);
        else if (is("--beta2"))
            c->beta2 = parse_float(f, v, 0.0, 0.999999);
        else if (is("--eps"))
            c->eps = parse_float(f, v, 1e-30, 1.0);
        else if (is("-v"))
            c->val_every = (int)parse_int(f, v, 0, 1 << 30);
        else if (is("-m"))
            c->val_batches = (int)parse_int(f, v, 1, 1 << 30);
        else if (is("--tf32"))
            c->tf32 = (int)parse_int(f, v, 0, 1);
        else if (is("--graph"))
            c->graph = (int)parse_int(f, v, 0, 1);
        else if (is("--overfit-batch"))
            c->overfit_batch = (int)parse_int(f, v, 0, 1);
        else if (is("--recompute"))
            c->recompute = (int)parse_int(f, v, 0, 2);
        else if (is("--autotune"))
            c->autotune = (int)parse_int(f, v, 0, 1);
        else if (is("--device"))
            c->device = (int)parse_int(f, v, 0, 1024);
        else if (is("--shuffle"))
            c->shuffle = (int)parse_int(f, v, 0, 1);
        else if (is("--prefetch"))
            c->prefetch = (int)parse_int(f, v, 0, 1);
        else if (is("--json-summary"))
            c->json_summary = v;
        else if (is("--lr-schedule"))
            c->lr_schedule = v;
        else if (is("--lr-final-frac"))
            c->lr_final_frac = parse_float(f, v, 0.0, 1.0);
        else if (is("--decay-frac"))
            c->decay_frac = parse_float(f, v, 0.0, 1.0);
        else if (is("--checkpoint-every"))
            c->checkpoint_every = (int)parse_int(f, v, 0, 1 << 30);
        else if (is("--keep-last"))
            c->keep_last = (int)parse_int(f, v, 1, 1 << 30);
        else if (is("--keep-every"))
            c->keep_every = (int)parse_int(f, v, 0, 1 << 30);
        else if (is("--stop-after"))
            c->stop_after = (int)parse_int(f, v, 1, 1 << 30);
        else if (is("--sample-every"))
            c->sample_every = (int)parse_int(f, v, 0, 1 << 30);
        else if (is("--sample-tokens"))
            c->sample_tokens = (int)parse_int(f, v, 1, 1 << 20);
        else if (is("--temperature"))
            c->temperature = parse_float(f, v, 0.0, 100.0);
        else if (is("--top-k"))
            c->top_k = (int)parse_int(f, v, 0, 1 << 24);
        else if (is("--sample-seed"))
            c->sample_seed = (unsigned long long)parse_int(f, v, 0, (1ll << 62));
        else if (is("--tokenizer"))
            c->tokenizer = v;
        else if (is("--max-bad-steps"))
            c->max_bad_steps = (int)parse_int(f, v, 0, 1 << 30);
        else if (is("--skip-outliers"))
            c->skip_outliers = parse_float(f, v, 0.0, 1000.0);
        else if (is("--outlier-window"))
            c->outlier_window = (int)parse_int(f, v, 2, 1 << 24);
        else if (is("--zero"))
            c->zero = (int)parse_int(f, v, 0, 1);
        else if (is("--init-file"))
            c->init_file = v;
        else
            usage_error("unknown option '%s'", f);
    }
    if (c->train_pattern.empty())
        usage_error("%s", "training shards are required: pass -i 'DIR/*_train.bin'");
    LrSchedule kind;
    if (!parse_lr_schedule(c->lr_schedule, &kind))
        usage_error("--lr-schedule must be constant, linear, cosine or wsd, not '%s'",
                    c->lr_schedule.c_str());
    // --resume PATH without -o: the run continues in the checkpoint's directory.
    if (c->output_dir.empty() && !c->resume_path.empty()) {
        struct stat st;
        const bool is_dir = stat(c->resume_path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
        const size_t slash = c->resume_path.find_last_of('/');
        c->output_dir = is_dir
                            ? c->resume_path
                            : (slash == std::string::npos ? "." : c->resume_path.substr(0, slash));
    }
    if (c->output_dir.empty() && c->resume)
        usage_error("%s", "--resume needs the run's directory: pass -o DIR (or --resume PATH)");
    if (c->output_dir.empty() && c->checkpoint_every > 0)
        usage_error("%s", "--checkpoint-every needs an output directory: pass -o DIR");
    if (c->stop_after > c->steps) {
        char msg[96];
        std::snprintf(msg, sizeof(msg), "%d is past the last step (-x %d)", c->stop_after,
                      c->steps);
        usage_error("--stop-after %s", msg);
    }
    if (c->zero < 0) c->zero = c->world_size > 1 ? 1 : 0;
    const long long bt = (long long)c->world_size * c->B * c->T;
    if (c->total_batch < 0) c->total_batch = bt;
    if (c->total_batch % bt != 0) {
        char msg[200];
        if (c->world_size > 1)
            std::snprintf(msg, sizeof(msg),
                          "%lld is not a multiple of GPUs*B*T = %d*%d*%d = %lld (-d counts the "
                          "tokens of all GPUs)",
                          c->total_batch, c->world_size, c->B, c->T, bt);
        else
            std::snprintf(msg, sizeof(msg), "%lld is not a multiple of B*T = %d*%d = %lld",
                          c->total_batch, c->B, c->T, bt);
        usage_error("total batch (-d) %s", msg);
    }
}

void print_train_config(const TrainConfig& c, FILE* out) {
    std::fprintf(out, "train shards     %s\n", c.train_pattern.c_str());
    std::fprintf(out, "val shards       %s\n",
                 c.val_pattern.empty() ? "(none)" : c.val_pattern.c_str());
    std::fprintf(out, "model            %s\n", c.model.c_str());
    std::fprintf(out, "output dir       %s\n",
                 c.output_dir.empty() ? "(none)" : c.output_dir.c_str());
    std::fprintf(out, "B, T             %d, %d\n", c.B, c.T);
    std::fprintf(out, "tokens per step  %lld (%lld micro-steps)\n", c.total_batch,
                 c.total_batch / ((long long)c.world_size * c.B * c.T));
    if (c.world_size > 1)
        std::fprintf(out, "GPUs, zero       %d, %d (global micro-batch %d sequences)\n",
                     c.world_size, c.zero, c.world_size * c.B);
    std::fprintf(out, "steps            %d\n", c.steps);
    std::fprintf(out, "lr, warmup       %g, %d\n", c.lr, c.warmup);
    std::fprintf(out, "AdamW            beta1 %g beta2 %g eps %g weight decay %g\n", c.beta1,
                 c.beta2, c.eps, c.weight_decay);
    std::fprintf(out, "grad clip        %g\n", c.grad_clip);
    std::fprintf(out, "val every, batch %d, %d\n", c.val_every, c.val_batches);
    std::fprintf(out, "seed             %llu\n", c.seed);
    std::fprintf(out, "shuffle, prefetch, overfit %d, %d, %d\n", c.shuffle, c.prefetch,
                 c.overfit_batch);
    std::fprintf(out, "tf32, graph, tune %d, %d, %d\n", c.tf32, c.graph, c.autotune);
    std::fprintf(out, "recompute        %d\n", c.recompute);
    std::fprintf(out, "device           %d\n", c.device);
    std::fprintf(out, "checkpoints      every %d steps (0 = at the end), keep last %d, every %d\n",
                 c.checkpoint_every, c.keep_last, c.keep_every);
    if (c.resume)
        std::fprintf(out, "resume           %s\n",
                     c.resume_path.empty() ? "(newest in -o)" : c.resume_path.c_str());
    if (c.stop_after > 0) std::fprintf(out, "stop after       step %d\n", c.stop_after);
    std::fprintf(out, "max bad steps    %d\n", c.max_bad_steps);
    if (c.skip_outliers > 0)
        std::fprintf(out, "skip outliers    gradient norm z-score > %g (window %d steps)\n",
                     c.skip_outliers, c.outlier_window);
    if (c.sample_every > 0)
        std::fprintf(out,
                     "samples          every %d steps, %d tokens, temperature %g, top-k %d, seed "
                     "%llu\n",
                     c.sample_every, c.sample_tokens, c.temperature, c.top_k, c.sample_seed);
}

void write_train_config_json(const TrainConfig& c, const std::string& extra, FILE* out) {
    std::fprintf(out, "{\n  \"train_pattern\": %s,\n  \"val_pattern\": %s,\n",
                 json_string(c.train_pattern).c_str(), json_string(c.val_pattern).c_str());
    std::fprintf(out, "  \"model\": %s,\n  \"output_dir\": %s,\n", json_string(c.model).c_str(),
                 json_string(c.output_dir).c_str());
    std::fprintf(out, "  \"B\": %d,\n  \"T\": %d,\n  \"total_batch\": %lld,\n  \"steps\": %d,\n",
                 c.B, c.T, c.total_batch, c.steps);
    std::fprintf(out, "  \"lr\": %.9g,\n  \"warmup\": %d,\n  \"lr_schedule\": %s,\n", c.lr,
                 c.warmup, json_string(c.lr_schedule).c_str());
    std::fprintf(out, "  \"lr_final_frac\": %.9g,\n  \"decay_frac\": %.9g,\n", c.lr_final_frac,
                 c.decay_frac);
    std::fprintf(out, "  \"weight_decay\": %.9g,\n  \"beta1\": %.9g,\n  \"beta2\": %.9g,\n",
                 c.weight_decay, c.beta1, c.beta2);
    std::fprintf(out, "  \"eps\": %.9g,\n  \"grad_clip\": %.9g,\n", c.eps, c.grad_clip);
    std::fprintf(out, "  \"val_every\": %d,\n  \"val_batches\": %d,\n  \"seed\": %llu,\n",
                 c.val_every, c.val_batches, c.seed);
    std::fprintf(out, "  \"tf32\": %d,\n  \"graph\": %d,\n  \"autotune\": %d,\n  \"device\": %d,\n",
                 c.tf32, c.graph, c.autotune, c.device);
    std::fprintf(out, "  \"shuffle\": %d,\n  \"prefetch\": %d,\n  \"overfit_batch\": %d,\n",
                 c.shuffle, c.prefetch, c.overfit_batch);
    std::fprintf(out, "  \"checkpoint_every\": %d,\n  \"keep_last\": %d,\n  \"keep_every\": %d,\n",
                 c.checkpoint_every, c.keep_last, c.keep_every);
    std::fprintf(out, "  \"resume\": %s,\n  \"resume_path\": %s,\n  \"stop_after\": %d,\n",
                 c.resume ? "true" : "false", json_string(c.resume_path).c_str(), c.stop_after);
    std::fprintf(out, "  \"sample_every\": %d,\n  \"sample_tokens\": %d,\n", c.sample_every,
                 c.sample_tokens);
    std::fprintf(out, "  \"temperature\": %.9g,\n  \"top_k\": %d,\n  \"sample_seed\": %llu,\n",
                 c.temperature, c.top_k, c.sample_seed);
    std::fprintf(out, "  \"tokenizer\": %s,\n", json_string(c.tokenizer).c_str());
    std::fprintf(out, "  \"world_size\": %d,\n  \"zero\": %d,\n", c.world_size, c.zero);
    std::fprintf(out, "  \"skip_outliers\": %.9g,\n  \"outlier_window\": %d,\n", c.skip_outliers,
                 c.outlier_window);
    std::fprintf(out, "  \"max_bad_steps\": %d%s%s\n}\n", c.max_bad_steps,
                 extra.empty() ? "" : ",\n  ", extra.c_str());
}

}  // namespace llmc
