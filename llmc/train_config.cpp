// train_config.cpp: the trainer's option table, and what is made from it: parsing, help,
// printing, config.json and the options a checkpoint records (see train_config.h).
#include "train_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "check.h"
#include "checkpoint.h"
#include "cli.h"

namespace llmc {
namespace {

using cli::Resume;

const char* kUsage = "train_gpt2cu -i TRAIN_GLOB [options]";

const char* kAbout =
    "Trains GPT-2 on token shards in llm.c's format (prepare_data writes NAME_train_NNNNNN.bin and "
    "NAME_val_NNNNNN.bin) on one GPU, or on several with one process per GPU. Every option has "
    "the form -k VALUE, -k=VALUE, --key VALUE or --key=VALUE.";

const char* kFooter =
    "environment: LLMC_DEBUG_SYNC=1 synchronizes after every kernel to locate a fault.\n"
    "multi-GPU: LLMC_RANK/LLMC_WORLD_SIZE/LLMC_LOCAL_RANK (else OpenMPI's or Slurm's),\n"
    "LLMC_MASTER_ADDR/LLMC_MASTER_PORT (or MASTER_ADDR/MASTER_PORT; default 127.0.0.1:29517),\n"
    "LLMC_NCCL_LIB (libnccl.so.2 to load), LLMC_BOOTSTRAP_TIMEOUT, LLMC_NCCL_TIMEOUT (s).\n";

// llm.c's train_gpt2cu flags that this trainer does not take, each with what it is here. The
// ones that mean the same here (-i -j -e -o -b -t -d -x -l -u -c -v -m) are options of the table.
const char* kMultiNode =
    "here each process learns its rank and the world size from its launcher: scripts/run/launch.sh "
    "-n N, mpirun -np N or srun (or LLMC_RANK, LLMC_WORLD_SIZE and LLMC_LOCAL_RANK)";
const std::vector<cli::Refusal>& llmc_flags() {
    static const std::vector<cli::Refusal> flags = {
        {"-s",
         "-s N is llm.c's sample_every; here text samples are --sample-every N and the seed is "
         "--seed N"},
        {"-g",
         "-g N is llm.c's genT, the length of its text samples; here that is --sample-tokens N, "
         "and clipping the gradient norm is --grad-clip NORM"},
        {"-n", "-n N is llm.c's checkpoint_every; here --checkpoint-every N (with -o DIR)"},
        {"-nk", "-nk K is llm.c's number of checkpoints to keep; here --keep-last K"},
        {"-nm", "-nm M is llm.c's major-checkpoint interval; here --keep-every M"},
        {"-y",
         "-y 1 is llm.c's resume switch; here --resume continues from the newest checkpoint in -o "
         "DIR (or --resume PATH)"},
        {"-q",
         "-q F is llm.c's final learning-rate fraction; here --lr-final-frac F, with --lr-schedule "
         "linear, cosine or wsd (llm.c's default -q 1 is --lr-schedule constant)"},
        {"-k",
         "-k NAME is llm.c's learning-rate scheduler; here --lr-schedule "
         "constant|linear|cosine|wsd"},
        {"-a", "-a 1 is llm.c's overfit_single_batch; here --overfit-batch 1"},
        {"-f", "-f 0|1 is llm.c's TF32 switch; here --tf32 0|1"},
        {"-w",
         "-w 0|1 is llm.c's switch for fp32 master weights; no equivalent: the bf16 build always "
         "keeps fp32 master weights and the fp32 build needs none"},
        {"-ge",
         "-ge N is llm.c's GELU fusion; no equivalent: the GELU is always fused into the matmuls, "
         "forward and backward"},
        {"-z",
         "-z N is llm.c's ZeRO stage; here --zero 0|1 (stage 1, the default on several GPUs)"},
        {"-r",
         "-r N is llm.c's recompute setting; here --recompute 0|1|2 (1 the GELU, 2 also the "
         "layernorms; our default is 0, llm.c's 1)"},
        {"-lg",
         "-lg N is llm.c's GPU logging interval; here --gpu-log N (clocks, power, temperature "
         "and throttling into DIR/log.jsonl)"},
        {"-sl",
         "-sl Z is llm.c's loss z-score skip; no equivalent for the loss: --skip-outliers Z skips "
         "on the gradient norm's z-score (llm.c's -sg)"},
        {"-sg", "-sg Z is llm.c's gradient-norm z-score skip; here --skip-outliers Z"},
        {"-pn", std::string("-pn N is llm.c's process count; ") + kMultiNode},
        {"-pr", std::string("-pr N is llm.c's process rank; ") + kMultiNode},
        {"-pg", std::string("-pg N is llm.c's GPUs per node; ") + kMultiNode},
        {"-pi",
         "-pi is llm.c's NCCL init method; here the NCCL id goes over TCP (LLMC_MASTER_ADDR, "
         "LLMC_MASTER_PORT) or, with --init-file PATH, through a shared file"},
        {"-pm",
         "-pm is llm.c's NCCL init method; here the NCCL id goes over TCP (LLMC_MASTER_ADDR, "
         "LLMC_MASTER_PORT) or, with --init-file PATH, through a shared file"},
        {"-ps",
         "-ps is llm.c's server address for NCCL's TCP init; here LLMC_MASTER_ADDR (or "
         "MASTER_ADDR) and LLMC_MASTER_PORT"},
        {"-pf", "-pf is llm.c's shared-filesystem path for NCCL's init; here --init-file PATH"},
        {"-pp", "-pp is llm.c's shared-filesystem path for NCCL's init; here --init-file PATH"},
    };
    return flags;
}

// Creates dir and its parents (mkdir -p), then creates and removes a file in it, so that an
// unwritable output directory is refused at start, not after hours of training.
void make_output_dir(const std::string& dir) {
    for (size_t pos = 1; pos <= dir.size(); pos++) {
        if (pos != dir.size() && dir[pos] != '/') continue;
        const std::string part = dir.substr(0, pos);
        if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
            LLMC_FAIL("cannot create the output directory '%s' (%s)", part.c_str(),
                      std::strerror(errno));
    }
    const std::string probe = dir + "/.write_test";
    FILE* f = std::fopen(probe.c_str(), "w");
    LLMC_CHECK(f != nullptr, "the output directory '%s' is not writable (%s)", dir.c_str(),
               std::strerror(errno));
    std::fclose(f);
    std::remove(probe.c_str());
}

// An existing file must be a writable regular file; a new one must be creatable in an existing
// directory, which is tried by creating it (exclusively, so nothing is overwritten) and removing
// it.
void check_output_file(const std::string& path, const char* option) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0) {
        LLMC_CHECK(S_ISREG(st.st_mode), "%s %s is not a regular file; pass a file's path.", option,
                   path.c_str());
        LLMC_CHECK(access(path.c_str(), W_OK) == 0, "%s %s exists and is not writable (%s).",
                   option, path.c_str(), std::strerror(errno));
        return;
    }
    const size_t slash = path.find_last_of('/');
    const std::string dir =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    LLMC_CHECK(stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
               "%s %s: the directory %s does not exist; create it or pass another path.", option,
               path.c_str(), dir.c_str());
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    LLMC_CHECK(fd >= 0, "%s %s cannot be created (%s); pass a path in a writable directory.",
               option, path.c_str(), std::strerror(errno));
    close(fd);
    unlink(path.c_str());
}

// Data, model and batch shape.
std::vector<cli::Option> data_options(TrainConfig* c) {
    using cli::heading;
    using cli::option;
    const Resume keep = Resume::kMustMatch, may_change = Resume::kMayChange;
    return {
        heading("data and model"),
        option("-i, --input", "GLOB", "train_pattern", &c->train_pattern,
               "training shards; quote the glob so that the shell leaves it alone, e.g. "
               "-i 'data/brown/*_train_*.bin'")
            .must_be_given("training shards are required: pass -i 'DIR/*_train_*.bin', e.g. "
                           "-i 'data/brown/*_train_*.bin' (make data writes data/brown/)")
            .on_resume(keep, kSlotText),
        option("-j, --val-input", "GLOB", "val_pattern", &c->val_pattern,
               "validation shards, e.g. -j 'data/brown/*_val_*.bin'")
            .with_default("none"),
        option("-e, --model", "MODEL", "model", &c->model,
               "model file (llm.c format) or preset d12|d24|d36|d48"),
        option("-o, --output-dir", "DIR", "output_dir", &c->output_dir,
               "write the trained model to DIR/model.bin at the end, the checkpoints, "
               "DIR/config.json and DIR/log.jsonl (one JSON line a step)")
            .with_default("none"),
        option("--seed", "N", "seed", &c->seed, 0, 1ll << 62,
               "seed of a preset's random initialisation, of the shuffle and of the bf16 build's "
               "stochastic rounding")
            .on_resume(keep, kSlotSeed),
        option("--shuffle", "0|1", "shuffle", &c->shuffle, 0, 1,
               "visit the training shards, and each shard's batches, in a new order every epoch "
               "drawn from the seed (0: name order); validation is never shuffled")
            .on_resume(keep, kSlotShuffle),
        option("--prefetch", "0|1", "prefetch", &c->prefetch, 0, 1,
               "read and shuffle batches on a background thread while the GPU computes (0 reads "
               "them between steps, for comparison)"),
        heading("batch"),
        option("-b, --batch-size", "B", "B", &c->B, 1, 1 << 16,
               "micro-batch size in sequences (of each GPU)")
            .on_resume(keep, kSlotB),
        option("-t, --seq-len", "T", "T", &c->T, 1, 1 << 20,
               "sequence length, at most the model's maxT")
            .on_resume(keep, kSlotT),
        option("-d, --total-batch", "TOKENS", "total_batch", &c->total_batch, 1, 1ll << 40,
               "tokens per optimizer step, a multiple of B*T (GPUs*B*T on several GPUs); more "
               "accumulates the gradients of several micro-steps")
            .with_default("B*T")
            .on_resume(may_change, kSlotTotalBatch),
    };
}

// The optimizer and its schedule.
std::vector<cli::Option> optimization_options(TrainConfig* c) {
    using cli::choice;
    using cli::heading;
    using cli::option;
    const Resume may_change = Resume::kMayChange;
    return {
        heading("optimization"),
        option("-x, --steps", "N", "steps", &c->steps, 1, 1 << 30, "optimizer steps")
            .on_resume(may_change, kSlotSteps),
        option("-l, --lr", "LR", "lr", &c->lr, 0.0, 10.0, "peak learning rate")
            .on_resume(may_change, kSlotLr),
        option("-u, --warmup", "N", "warmup", &c->warmup, 0, 1 << 30,
               "linear warmup steps, then the schedule")
            .on_resume(may_change, kSlotWarmup),
        choice("--lr-schedule", "lr_schedule", &c->lr_schedule, "constant|linear|cosine|wsd",
               "the learning rate after the warmup: linear and cosine decay to the final lr at "
               "the last step; wsd stays at the peak, then decays linearly over the last "
               "--decay-frac of the steps")
            .on_resume(may_change, kSlotSchedule),
        option("--lr-final-frac", "F", "lr_final_frac", &c->lr_final_frac, 0.0, 1.0,
               "final lr as a fraction of the peak")
            .on_resume(may_change, kSlotFinalFrac),
        option("--decay-frac", "F", "decay_frac", &c->decay_frac, 0.0, 1.0,
               "wsd: the fraction of the steps spent decaying")
            .on_resume(may_change, kSlotDecayFrac),
        option("-c, --weight-decay", "WD", "weight_decay", &c->weight_decay, 0.0, 10.0,
               "AdamW weight decay on the 2-D weights")
            .on_resume(may_change, kSlotWeightDecay),
        option("--grad-clip", "NORM", "grad_clip", &c->grad_clip, 0.0, 1e9,
               "clip the global gradient norm to NORM, 0 = off")
            .on_resume(may_change, kSlotGradClip),
        option("--beta1", "X", "beta1", &c->beta1, 0.0, 0.999999, "AdamW's first-moment decay")
            .on_resume(may_change, kSlotBeta1),
        option("--beta2", "X", "beta2", &c->beta2, 0.0, 0.999999, "AdamW's second-moment decay")
            .on_resume(may_change, kSlotBeta2),
        option("--eps", "X", "eps", &c->eps, 1e-30, 1.0, "AdamW's epsilon")
            .on_resume(may_change, kSlotEps),
    };
}

// Validation, samples and the runtime switches.
std::vector<cli::Option> evaluation_options(TrainConfig* c) {
    using cli::choice;
    using cli::heading;
    using cli::option;
    return {
        heading("evaluation"),
        option("-v, --val-every", "N", "val_every", &c->val_every, 0, 1 << 30,
               "validation loss every N steps and at the end, 0 = only at the end"),
        option("-m, --val-batches", "N", "val_batches", &c->val_batches, 1, 1 << 30,
               "batches per validation"),
        option("--sample-every", "N", "sample_every", &c->sample_every, 0, 1 << 30,
               "print a text sample every N steps and at the end, also written to DIR/log.jsonl "
               "(0: never)"),
        option("--sample-tokens", "K", "sample_tokens", &c->sample_tokens, 1, 1 << 20,
               "tokens per sample, continuing <|endoftext|>"),
        option("--temperature", "T", "temperature", &c->temperature, 0.0, 100.0,
               "sampling temperature, 0 = greedy"),
        option("--top-k", "K", "top_k", &c->top_k, 0, 1 << 24,
               "sample among the K most likely tokens, 0 = all"),
        option("--sample-seed", "S", "sample_seed", &c->sample_seed, 0, 1ll << 62,
               "seed of the samples (the step is mixed in)"),
        option("--tokenizer", "PATH", "tokenizer", &c->tokenizer,
               "decodes samples: an llm.c tokenizer.bin, or a directory with GPT-2's "
               "encoder.json and vocab.bpe; without one, samples print as token ids")
            .with_default("the tokenizer.bin beside the -i shards, which prepare_data writes"),
        option("--hellaswag", "FILE", "hellaswag", &c->hellaswag,
               "multiple-choice accuracy on an eval file in llm.c's format (its hellaswag_val.bin, "
               "or one made by prepare_hellaswag): each ending scored by the mean loss of its "
               "tokens after the context, in batches of B*T tokens; printed and written to "
               "DIR/log.jsonl (llm.c's -h 1)")
            .with_default("none"),
        option("--eval-every", "N", "eval_every", &c->eval_every, 0, 1 << 30,
               "HellaSwag every N steps, before the first step and at the end (0: only at the "
               "end)"),
        heading("runtime"),
        option("--tf32", "0|1", "tf32", &c->tf32, 0, 1,
               "TF32 tensor cores in the fp32 build's matmuls (PyTorch's 'high')"),
        option("--graph", "0|1", "graph", &c->graph, 0, 1,
               "run each step as a CUDA graph (0 for debugging)"),
        option("--overfit-batch", "0|1", "overfit_batch", &c->overfit_batch, 0, 1,
               "train on the first batch every step: a model that cannot drive this loss toward "
               "0 has a bug; also times steps without loading"),
        option("--recompute", "0|1|2", "recompute", &c->recompute, 0, 2,
               "memory for time: 1 recomputes each layer's GELU output in the backward instead "
               "of keeping it, 2 also its two layernorm outputs (the gradients are bitwise the "
               "same); the memory plan printed at start shows what each mode needs"),
        option("--autotune", "0|1", "autotune", &c->autotune, 0, 1,
               "time cuBLASLt's candidate kernels once per shape and keep the fastest of those "
               "whose results are bitwise the heuristic's pick's (0 takes that pick untimed; both "
               "give the same bits on every run)"),
        option("--device", "N", "device", &c->device, 0, 1024, "CUDA device"),
        option("--gpu-log", "N", "gpu_log", &c->gpu_log, 0, 1 << 30,
               "every N steps read the GPU's SM and memory clocks, power, temperature, throttle "
               "reasons and memory use (NVML, loaded at run time; LLMC_NVML_LIB names the "
               "library) into DIR/log.jsonl, and warn once when it throttles (0: off)"),
        option("--llmc-log", "DIR", "llmc_log", &c->llmc_log,
               "also write DIR/main.log in llm.c's format (s:S trl/tel/eval lines)")
            .with_default("none"),
        choice("--model-dtype", "model_dtype", &c->model_dtype, "fp32|bf16",
               "parameters of the final DIR/model.bin: fp32 (model file version 3) or bf16 "
               "(version 5, what llm.c's bf16 trainer loads)"),
        option("--json-summary", "PATH", "json_summary", &c->json_summary,
               "write the median step time, tok/s and memory as JSON at the end (after the final "
               "model); PATH's directory must exist"),
        option("--max-bad-steps", "K", "max_bad_steps", &c->max_bad_steps, 0, 1 << 30,
               "stop (exit 1, no checkpoint) after K steps in a row whose loss or gradient norm "
               "is not finite; such steps leave the weights alone (0 = never stop)"),
        option("--skip-outliers", "Z", "skip_outliers", &c->skip_outliers, 0.0, 1000.0,
               "skip the update of a step whose gradient norm is more than Z standard deviations "
               "above its recent mean (exponential averages over the applied steps, from the "
               "20th on); K such steps in a row stop the run like --max-bad-steps (0: off)"),
        option("--outlier-window", "W", "outlier_window", &c->outlier_window, 2, 1 << 24,
               "the averages' length in steps (decay 1 - 1/W)"),
    };
}

// Checkpoints, resume and several GPUs.
std::vector<cli::Option> run_options(TrainConfig* c) {
    using cli::heading;
    using cli::option;
    return {
        heading("checkpoints", "in -o DIR, beside DIR/config.json and DIR/log.jsonl"),
        option("--checkpoint-every", "N", "checkpoint_every", &c->checkpoint_every, 0, 1 << 30,
               "write DIR/model_SSSSSSSS.bin + state_SSSSSSSS.bin every N steps (0: only at the "
               "end; a run always checkpoints at its end and when stopped by SIGINT/SIGTERM)"),
        option("--keep-last", "K", "keep_last", &c->keep_last, 1, 1 << 30,
               "keep the newest K checkpoints"),
        option("--keep-every", "M", "keep_every", &c->keep_every, 0, 1 << 30,
               "also keep every checkpoint whose step is a multiple of M"),
        option("--resume", "PATH", "resume_path", &c->resume_path,
               "continue bit for bit from the newest complete checkpoint in -o (a fresh start "
               "when there is none yet), or from PATH: a run directory or a state_SSSSSSSS.bin "
               "file (then -o defaults to its directory)")
            .optional_value("")
            .mark_given(&c->resume, "resume"),
        option("--stop-after", "N", "stop_after", &c->stop_after, 1, 1 << 30,
               "stop after step N as if interrupted (checkpoint, exit 0); the schedule still "
               "spans -x steps, so a --resume continues the same run")
            .with_default("none"),
        heading("multi-GPU",
                "one process per GPU: scripts/run/launch.sh -n N, mpirun -np N or srun. -b is each "
                "GPU's micro-batch and -d counts the tokens of all GPUs (default N*B*T), so N "
                "GPUs at -b B read the batches of one GPU at -b N*B"),
        option("--zero", "0|1", "zero", &c->zero, 0, 1,
               "1: each GPU keeps 1/N of the optimizer state (ZeRO stage 1; needs C % N == 0); "
               "0: every GPU keeps all of it")
            .with_default("1 on several GPUs"),
        option("--init-file", "PATH", "init_file", &c->init_file,
               "share the NCCL id through PATH on a shared filesystem instead of TCP (also "
               "LLMC_INIT_FILE)"),
    };
}

}  // namespace

// The groups in the order of the help.
std::vector<cli::Option> train_options(TrainConfig* c) {
    std::vector<cli::Option> all;
    for (auto group : {data_options, optimization_options, evaluation_options, run_options}) {
        const std::vector<cli::Option> options = group(c);
        all.insert(all.end(), options.begin(), options.end());
    }
    return all;
}

cli::Program train_program(TrainConfig* c) {
    cli::Program p;
    p.usage = kUsage;
    p.about = kAbout;
    p.footer = kFooter;
    p.options = train_options(c);
    p.refused = llmc_flags();
    p.help_value =
        "-h 0|1 is llm.c's switch for its HellaSwag evaluation; here pass --hellaswag FILE (its "
        "hellaswag_val.bin, or a file from prepare_hellaswag) and --eval-every N; -h or --help "
        "alone prints the help";
    p.stray_hint =
        "if the shell expanded a glob into several files, quote it: -i 'data/brown/*_train_*.bin'";
    return p;
}

void parse_train_args(int argc, char** argv, TrainConfig* c) {
    cli::parse_or_exit(train_program(c), argc, argv);
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
        cli::usage_error("--resume needs the run's directory: pass -o DIR (or --resume PATH)");
    if (c->output_dir.empty() && c->checkpoint_every > 0)
        cli::usage_error("--checkpoint-every needs an output directory: pass -o DIR");
    if (c->eval_every > 0 && c->hellaswag.empty())
        cli::usage_error("--eval-every needs an eval file: pass --hellaswag FILE");
    if (c->stop_after > c->steps)
        cli::usage_error("--stop-after %d is past the last step (-x %d)", c->stop_after, c->steps);
    if (c->zero < 0) c->zero = c->world_size > 1 ? 1 : 0;
    const long long bt = (long long)c->world_size * c->B * c->T;
    if (c->total_batch < 0) c->total_batch = bt;
    if (c->total_batch % bt != 0 && c->world_size > 1)
        cli::usage_error(
            "total batch (-d) %lld is not a multiple of GPUs*B*T = %d*%d*%d = %lld (-d counts "
            "the tokens of all GPUs)",
            c->total_batch, c->world_size, c->B, c->T, bt);
    if (c->total_batch % bt != 0)
        cli::usage_error("total batch (-d) %lld is not a multiple of B*T = %d*%d = %lld",
                         c->total_batch, c->B, c->T, bt);
}

void print_train_config(const TrainConfig& c, FILE* out) {
    TrainConfig copy = c;
    cli::print_values(train_options(&copy), out);
    std::fprintf(out, "tokens per step  %lld (%lld micro-steps)\n", c.total_batch,
                 c.total_batch / ((long long)c.world_size * c.B * c.T));
    if (c.world_size > 1)
        std::fprintf(out, "GPUs, zero       %d, %d (global micro-batch %d sequences)\n",
                     c.world_size, c.zero, c.world_size * c.B);
}

void write_train_config_json(const TrainConfig& c, const std::string& extra, FILE* out) {
    TrainConfig copy = c;
    std::fprintf(out, "{\n%s,\n  \"world_size\": %d%s%s\n}\n",
                 cli::json_fields(train_options(&copy)).c_str(), c.world_size,
                 extra.empty() ? "" : ",\n  ", extra.c_str());
}

ScheduleConfig schedule_of(const TrainConfig& c) {
    ScheduleConfig s;
    parse_lr_schedule(c.lr_schedule, &s.kind);  // one of the table's choices
    s.peak_lr = c.lr;
    s.warmup = c.warmup;
    s.steps = c.steps;
    s.final_frac = c.lr_final_frac;
    s.decay_frac = c.decay_frac;
    return s;
}

void check_output_paths(const TrainConfig& c) {
    if (!c.output_dir.empty()) make_output_dir(c.output_dir);
    if (!c.json_summary.empty()) check_output_file(c.json_summary, "--json-summary");
}

}  // namespace llmc
