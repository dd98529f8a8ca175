// trainer.cu: the training loop (see trainer.cuh).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <string>

#include "checkpoint.cuh"
#include "mfu.h"
#include "rng.h"
#include "sampler.cuh"
#include "trainer.cuh"
#include "util.h"

namespace llmc {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// "1h02m", "12m34s", "45s".
std::string format_duration(double seconds) {
    char buf[32];
    const long long s = (long long)std::llround(std::max(0.0, seconds));
    if (s >= 3600)
        std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, s / 60 % 60);
    else if (s >= 60)
        std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
    else
        std::snprintf(buf, sizeof(buf), "%llds", s);
    return buf;
}

// Set by SIGINT/SIGTERM, read by the loop after each step. A signal handler can only reach
// global state, hence this one non-constant global.
volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
    g_stop_signal = sig;
    const char msg[] = "\nstop requested: finishing this step, then a checkpoint (again to kill)\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
}

// The first SIGINT/SIGTERM asks for a clean stop; SA_RESETHAND makes a second one kill the run.
void install_stop_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    // SA_RESTART: a system call of the loader's thread that the signal lands in is restarted,
    // not failed with EINTR.
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

// Fills `micro_steps` micro-batches of B x T at `tokens` (inputs then targets of each). Returns
// the host milliseconds it took: the time the GPU waits for data, since the step launches after
// it. With prefetch the loader's thread has read the batches during the previous step, and this
// is a copy out of its ring. With W ranks the loader serves global batches of W*B rows, exactly
// those of one GPU at -b W*B, and rank r keeps rows [r*B, (r+1)*B) of each.
double fill_batches(DataLoader* loader, int* tokens, int B, int T, int micro_steps, int rank,
                    int world) {
    const auto t0 = Clock::now();
    const size_t N = (size_t)B * T;
    std::vector<int> global(world > 1 ? 2 * N * world : 0);
    for (int i = 0; i < micro_steps; i++) {
        int* slot = tokens + (size_t)i * 2 * N;
        if (world == 1) {
            dataloader_next_batch(loader, slot, slot + N);
            continue;
        }
        int* gin = global.data();
        int* gtarget = gin + N * world;
        dataloader_next_batch(loader, gin, gtarget);
        std::copy(gin + N * rank, gin + N * (rank + 1), slot);
        std::copy(gtarget + N * rank, gtarget + N * (rank + 1), slot + N);
    }
    return ms_since(t0);
}

// The validation loss over --val-batches batches from the loader's start. With several ranks,
// the mean over the ranks (each has its rows of the same global batches).
float validation_loss(Trainer* tr) {
    EvalIO* io = &tr->eval_io;
    dataloader_reset(&tr->data->val);
    double sum = 0.0;
    for (int i = 0; i < tr->tc->val_batches; i++) {
        fill_batches(&tr->data->val, io->tokens, io->B, io->T, 1, tr->rank, tr->world);
        sum += gpt2_eval_loss(*tr->ctx, tr->model, io);
    }
    const float mine = (float)(sum / tr->tc->val_batches);
    return tr->dist != nullptr ? multi_gpu_host_reduce(*tr->ctx, tr->dist, mine, kNcclAvg) : mine;
}

// K tokens after <|endoftext|> from the model as trained so far, printed and logged. The seed
// of step S's sample is splitmix64(--sample-seed) ^ S. A refusal (non-finite logits) is a
// warning: the step's own checks decide whether the run goes on.
void print_sample(Trainer* tr, int step) {
    const TrainConfig& tc = *tr->tc;
    const auto t0 = Clock::now();
    // GPT-2's <|endoftext|> id, or the last id of a smaller vocabulary.
    std::vector<int> ids{std::min(50256, tr->model->cfg.vocab_size - 1)};
    uint64_t rng = splitmix64(tc.sample_seed) ^ (uint64_t)step;
    SamplerOptions opts;
    opts.temperature = tc.temperature;
    opts.top_k = tc.top_k;
    std::string why;
    if (!gpt2_generate(*tr->ctx, tr->model, &tr->eval_io, &ids, tc.sample_tokens, opts, &rng,
                       &why)) {
        std::fprintf(stderr, "warning: no sample at step %d: %s\n", step, why.c_str());
        return;
    }
    std::string text;
    if (tr->data->has_decoder) {
        text = valid_utf8(tr->data->decoder.decode(ids.data() + 1, ids.size() - 1));
    } else {
        for (size_t i = 1; i < ids.size(); i++) text += (i > 1 ? " " : "") + std::to_string(ids[i]);
    }
    const double s = ms_since(t0) / 1e3;
    std::printf("sample (step %d, %d tokens, %.1f s):\n%s\n---\n", step, tc.sample_tokens, s,
                text.c_str());
    tr->log.write_sample(step, text, tc.sample_tokens, tc.temperature, tc.top_k, tc.sample_seed);
}

// HellaSwag on the model as trained so far: printed, and added to the step's log records (rec:
// null for the evaluation before the first step, which has no record in log.jsonl).
void log_hellaswag(Trainer* tr, int step, StepRecord* rec) {
    const HellaSwagResult h =
        hellaswag_evaluate(*tr->ctx, tr->model, &tr->eval_io, tr->data->hellaswag, step, tr->dist);
    const double n = h.score.examples > 0 ? h.score.examples : 1;
    std::printf("hellaswag %d/%d = %.4f (lowest summed loss: %d = %.4f) (step %d, %.2f s)\n",
                h.score.correct, h.score.examples, h.score.correct / n, h.score.correct_sum,
                h.score.correct_sum / n, step, h.seconds);
    if (rec != nullptr)
        rec->extra += (rec->extra.empty() ? "" : ", ") + eval_score_json(h.score, h.seconds);
    tr->llmc_log.eval(step, (float)(h.score.correct / n));
}

// One telemetry sample into the step's record, and the warning when throttling first shows.
void log_gpu_sample(GpuMonitor* monitor, int step, StepRecord* rec) {
    GpuSample s;
    std::string why;
    if (!monitor->sample(&s, &why)) {
        std::fprintf(stderr, "warning: no GPU telemetry at step %d: %s\n", step, why.c_str());
        return;
    }
    rec->extra += (rec->extra.empty() ? "" : ", ") + gpu_sample_json(s);
    const std::string warning = monitor->throttle_warning(step, s);
    if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
}

bool all_finite(const std::vector<float>& v) {
    for (float x : v)
        if (!std::isfinite(x)) return false;
    return true;
}

// Writes the checkpoint of run.step and prunes old ones. Refuses (returns false, with a
// sentence) to save a broken state: non-finite weights or moments.
bool save_checkpoint(Trainer* tr) {
    const TrainConfig& tc = *tr->tc;
    const auto t0 = Clock::now();
    CheckpointMeta meta = tr->run_meta;
    run_state_to_meta(tr->run, &meta);
    meta.loader = dataloader_position(tr->data->train);
    std::vector<float> weights;
    OptimizerState opt;
    // Every rank takes part (ZeRO-1 gathers the shards); rank 0 alone checks and writes, and
    // tells the others whether it did.
    checkpoint_download(*tr->ctx, *tr->model, *tr->opt, tr->dist, &weights, &opt);
    const bool root = tr->rank == 0;
    bool finite = !root || (all_finite(weights) && all_finite(opt.m) && all_finite(opt.v));
    if (tr->dist != nullptr)
        finite = multi_gpu_host_reduce(*tr->ctx, tr->dist, finite ? 1.0f : 0.0f, kNcclMin) > 0.5f;
    if (!finite) {
        std::fprintf(stderr,
                     "error: the weights or AdamW moments hold non-finite values at step %lld; "
                     "no checkpoint written (the newest good one stays in %s).\n",
                     tr->run.step, tc.output_dir.c_str());
        return false;
    }
    if (!root) return true;
    write_checkpoint(tc.output_dir, &meta, weights.data(), opt);
    const int pruned = prune_checkpoints(tc.output_dir, tc.keep_last, tc.keep_every);
    std::printf("checkpoint       %s (%.1f s%s)\n",
                checkpoint_state_path(tc.output_dir, tr->run.step).c_str(), ms_since(t0) / 1e3,
                pruned ? ", older ones pruned" : "");
    return true;
}

// DIR/model.bin: the final checkpoint's model file, as a hard link (a copy where links fail);
// with --model-dtype bf16 its parameters rounded to bf16 (model file version 5, llm.c's bf16).
void write_final_model(const std::string& dir, long long step, const GPT2Config& cfg,
                       const std::string& dtype) {
    const std::string path = dir + "/model.bin", src = checkpoint_model_path(dir, step);
    std::remove(path.c_str());
    if (dtype == "bf16") {
        GPT2Config c;
        std::vector<float> params;
        read_model_file(src, &c, &params, nullptr);
        write_model_file(path, cfg, params.data(), 5);
    } else if (link(src.c_str(), path.c_str()) != 0) {
        GPT2Config c;
        std::vector<float> params;
        int version = 0;
        read_model_file(src, &c, &params, &version);
        write_model_file(path, cfg, params.data(), 3);
    }
    std::printf("wrote %s\n", path.c_str());
}

void write_run_config(const TrainConfig& tc, const GPT2Config& cfg, const Context& ctx,
                      long long start_step) {
    const std::string path = tc.output_dir + "/config.json";
    FILE* f = std::fopen(path.c_str(), "w");
    LLMC_CHECK(f != nullptr, "cannot write %s (%s).", path.c_str(), std::strerror(errno));
    char extra[512];
    std::snprintf(extra, sizeof(extra),
                  "\"precision\": \"%s\",\n  \"device_name\": %s,\n  \"num_layers\": %d,\n  "
                  "\"num_heads\": %d,\n  \"channels\": %d,\n  \"vocab_size\": %d,\n  "
                  "\"padded_vocab_size\": %d,\n  \"max_seq_len\": %d,\n  \"start_step\": %lld",
                  kPrecisionName, json_string(ctx.props.name).c_str(), cfg.num_layers,
                  cfg.num_heads, cfg.channels, cfg.vocab_size, cfg.padded_vocab_size,
                  cfg.max_seq_len, start_step);
    write_train_config_json(tc, extra, f);
    std::fclose(f);
}

// median_ms: the GPU step (events around the launch); wall_ms: the host's data fill, the launch
// and the wait, the window PyTorch's reference times; period_ms: from one step's log record to
// the next, the host's work between steps included (the summary lines say which steps).
void write_json_summary(const std::string& path, const TrainConfig& tc, const Context& ctx,
                        double median_ms, double wall_ms, double period_ms, double tok_s,
                        double mfu, double peak_mib, const std::vector<float>& losses) {
    FILE* f = std::fopen(path.c_str(), "w");
    LLMC_CHECK(f != nullptr, "cannot write the summary file %s (%s) after training finished.",
               path.c_str(), std::strerror(errno));
    std::fprintf(f,
                 "{\"median_ms\": %.4f, \"wall_ms\": %.4f, \"period_ms\": %.4f, \"tok_per_s\": "
                 "%.1f, \"mfu\": %.4f, ",
                 median_ms, wall_ms, period_ms, tok_s, mfu);
    std::fprintf(f, "\"peak_mem_mib\": %.1f, \"prefetch\": %d, \"overfit_batch\": %d, ", peak_mib,
                 tc.prefetch, tc.overfit_batch);
    std::fprintf(f, "\"B\": %d, \"T\": %d, \"steps\": %d, \"precision\": \"%s\", \"tf32\": %d, ",
                 tc.B, tc.T, tc.steps, kPrecisionName, tc.tf32);
    std::fprintf(f, "\"graph\": %d, \"device_name\": \"%s\", \"losses\": [", tc.graph,
                 ctx.props.name);
    // 9 significant digits: a float survives the round trip, so two runs compare bit for bit.
    for (size_t i = 0; i < losses.size(); i++) std::fprintf(f, "%s%.9g", i ? ", " : "", losses[i]);
    std::fprintf(f, "]}\n");
    std::fclose(f);
}

// The step itself: its batches, its values (the outlier ceiling: AdamW skips above it on the
// device; +inf without --skip-outliers), the launch between two events and the wait. Fills rec's
// step, loss, lr and timing, and returns the step's verdict; *wall gets the host's milliseconds.
StepOutcome take_step(Trainer* tr, int step, float ceiling, cudaEvent_t start, cudaEvent_t stop,
                      StepRecord* rec, double* wall) {
    const TrainConfig& tc = *tr->tc;
    const Context& ctx = *tr->ctx;
    TrainStep* s = tr->step;
    const auto wall0 = Clock::now();
    if (step == tr->first_step + 2) tr->timed_since = wall0;
    // --overfit-batch keeps the first batch: no loading at all after the first step.
    if (!tc.overfit_batch || step == tr->first_step) {
        tr->data_ms.push_back(fill_batches(&tr->data->train, s->io.tokens, s->B, s->T,
                                           s->grad_accum, tr->rank, tr->world));
    }
    s->io.step_values->lr = lr_at_step(tr->schedule, step);
    s->io.step_values->step = (int)(tr->run.adam_t + 1);
    s->io.step_values->max_norm_squared = ceiling;
    LLMC_CUDA_CHECK(cudaEventRecord(start, ctx.stream));
    train_step_run(ctx, s, tc.graph != 0);
    LLMC_CUDA_CHECK(cudaEventRecord(stop, ctx.stream));
    if (tr->dist != nullptr)
        multi_gpu_wait(ctx, tr->dist, stop);
    else
        LLMC_CUDA_CHECK(cudaEventSynchronize(stop));
    *wall = ms_since(wall0);
    float ms = 0.0f;
    LLMC_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    const StepOutcome out =
        run_record_step(&tr->run, tr->policy, step, s->io.results[0], s->io.results[1], ceiling);
    rec->step = step;
    rec->loss = s->io.results[0];
    rec->norm = out.norm;
    rec->lr = s->io.step_values->lr;
    rec->ms = ms;
    rec->tok_s = tc.total_batch / (ms / 1e3);
    rec->mfu =
        tr->peak_tflops > 0 ? tr->flops_per_step / (ms / 1e3) / (tr->peak_tflops * 1e12) : 0.0;
    rec->skipped = out.verdict != StepVerdict::kApplied;
    return out;
}

// The step's line on stdout, with the time left once two steps have been timed.
void print_step_line(const Trainer& tr, const StepRecord& rec, StepVerdict verdict) {
    const int step = (int)rec.step, steps = tr.tc->steps;
    std::string eta;
    if (step >= tr.first_step + 3) {
        const double spent = ms_since(tr.timed_since) / 1e3;
        eta = " | ETA " + format_duration(spent / (step - tr.first_step - 1) * (steps - step));
    }
    std::printf(
        "step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s | MFU "
        "%.1f%%%s%s\n",
        step, steps, rec.loss, rec.norm, rec.lr, rec.ms, rec.tok_s, 100.0 * rec.mfu, eta.c_str(),
        verdict == StepVerdict::kNotFinite ? " | SKIPPED (not finite)"
        : verdict == StepVerdict::kOutlier ? " | SKIPPED (outlier)"
                                           : "");
    std::fflush(stdout);
}

// Validation, HellaSwag, telemetry, llm.c's log lines and a sample, where the options ask for
// them after `step`. Returns whether any of them ran (the step's period then is not a plain
// step's).
bool run_between_steps(Trainer* tr, int step, StepRecord* rec) {
    const TrainConfig& tc = *tr->tc;
    if (tr->data->has_val && ((tc.val_every > 0 && step % tc.val_every == 0) || step == tc.steps)) {
        rec->has_val = true;
        rec->val_loss = validation_loss(tr);
        std::printf("val loss %.6f (step %d, %d batches)\n", rec->val_loss, step, tc.val_batches);
    }
    const bool evaluated = tr->data->has_hellaswag &&
                           ((tc.eval_every > 0 && step % tc.eval_every == 0) || step == tc.steps);
    if (evaluated) log_hellaswag(tr, step, rec);
    if (tr->gpu_monitor.is_open() && step % tc.gpu_log == 0)
        log_gpu_sample(&tr->gpu_monitor, step, rec);
    tr->llmc_log.train(step, rec->loss, rec->lr, rec->norm);
    if (rec->has_val) tr->llmc_log.val(step, rec->val_loss);
    const bool sampled = tr->rank == 0 && tc.sample_every > 0 && !rec->skipped &&
                         (step % tc.sample_every == 0 || step == tc.steps);
    if (sampled) print_sample(tr, step);
    return rec->has_val || evaluated || sampled;
}

// The warning for a skipped step, and the error when the run gives up on it (returns false).
bool report_skipped(const Trainer& tr, const StepRecord& rec, const StepOutcome& out,
                    float ceiling) {
    if (out.verdict == StepVerdict::kApplied) return true;
    const TrainConfig& tc = *tr.tc;
    const RunState& run = tr.run;
    const bool outlier = out.verdict == StepVerdict::kOutlier;
    if (outlier) {
        std::fprintf(stderr,
                     "warning: step %d's gradient norm %.4f is above the outlier ceiling %.4f "
                     "(--skip-outliers %g); its update was skipped (%lld in a row, %lld in "
                     "all)\n",
                     (int)rec.step, rec.norm, std::sqrt(ceiling), tc.skip_outliers,
                     run.outlier_streak, run.outlier_total);
    } else {
        std::fprintf(stderr,
                     "warning: step %d has a non-finite loss or gradient norm; its update "
                     "was skipped (%lld in a row, %lld in all)\n",
                     (int)rec.step, run.bad_streak, run.bad_total);
    }
    if (!out.give_up) return true;
    if (outlier) {
        std::fprintf(stderr,
                     "error: %lld steps in a row were skipped as outliers (--max-bad-steps "
                     "%d): the gradient norm has moved, not spiked; raise --skip-outliers "
                     "or resume without it.\n",
                     run.outlier_streak, tc.max_bad_steps);
    } else {
        std::fprintf(stderr,
                     "error: %lld steps in a row had a non-finite loss or gradient norm "
                     "(--max-bad-steps %d): stopping without a checkpoint; lower the "
                     "learning rate or resume from the last good checkpoint.\n",
                     run.bad_streak, tc.max_bad_steps);
    }
    return false;
}

// Whether the run stops after `step` (on every rank alike), and the checkpoint that is due then.
// Returns false when a checkpoint could not be written.
bool stop_and_checkpoint(Trainer* tr, int step) {
    const TrainConfig& tc = *tr->tc;
    tr->stopped = run_stops_after(tr->policy, step, g_stop_signal != 0);
    // A signal may reach some ranks only: they all stop after the same step.
    if (tr->dist != nullptr) {
        tr->stopped =
            multi_gpu_host_reduce(*tr->ctx, tr->dist, tr->stopped ? 1.0f : 0.0f, kNcclMax) > 0.5f;
    }
    const bool due = !tc.output_dir.empty() && run_checkpoint_due(tr->policy, step, tr->stopped);
    tr->checkpointed = due;
    if (!due) return true;
    if (!run_checkpointable(tr->run)) {
        std::printf("checkpoint       not written at step %d: the step was not finite\n", step);
        tr->checkpoint_ok = false;
        return true;
    }
    if (!save_checkpoint(tr)) return false;
    tr->checkpoint_ok = true;
    return true;
}

// One iteration of the loop. Returns false when the run must end with exit code 1.
bool train_one_step(Trainer* tr, int step, cudaEvent_t start, cudaEvent_t stop) {
    StepRecord rec;
    double wall = 0.0;
    const float ceiling = run_next_ceiling(tr->run, tr->policy);
    const StepOutcome out = take_step(tr, step, ceiling, start, stop, &rec, &wall);
    print_step_line(*tr, rec, out.verdict);
    tr->losses.push_back(rec.loss);
    // The first step builds plans and the second captures the graph: neither is timed.
    if (step >= tr->first_step + 2) {
        tr->step_ms.push_back(rec.ms);
        tr->wall_ms.push_back(wall);
    }
    const bool busy = run_between_steps(tr, step, &rec);
    const auto now = Clock::now();
    rec.period_ms = std::chrono::duration<double, std::milli>(now - tr->record_time).count();
    tr->record_time = now;
    // The median period stands for plain steps: no validation, HellaSwag, sample or
    // checkpoint inside.
    if (step >= tr->first_step + 2 && !busy && !tr->checkpointed)
        tr->period_ms.push_back(rec.period_ms);
    tr->log.write(rec);
    if (!report_skipped(*tr, rec, out, ceiling)) return false;
    return stop_and_checkpoint(tr, step);
}

}  // namespace

void trainer_init(Trainer* tr, const TrainConfig& tc, const Context& ctx, GPT2* model, AdamW* opt,
                  TrainStep* step, MultiGpu* dist, TrainData* data, const CheckpointMeta& run_meta,
                  const RunState& run, bool resumed) {
    tr->tc = &tc, tr->ctx = &ctx, tr->model = model, tr->opt = opt, tr->step = step;
    tr->dist = dist, tr->data = data, tr->run_meta = run_meta, tr->run = run;
    tr->resumed = resumed;
    tr->rank = dist != nullptr ? dist->env.rank : 0;
    tr->world = tc.world_size;
    tr->schedule = schedule_of(tc);
    tr->policy = run_policy_of(tc);
    const GPT2Config& cfg = model->cfg;
    const char* mm_precision = sizeof(floatX) == 2 ? "bf16" : (tc.tf32 ? "tf32" : "fp32");
    tr->peak_tflops = device_peak_tflops(ctx.props.name, mm_precision);
    std::printf("device           %s (%d SMs), %s build, %s matmuls, peak %.0f TFLOP/s\n",
                ctx.props.name, ctx.props.multiProcessorCount, kPrecisionName, mm_precision,
                tr->peak_tflops);
    if (!context_switches_default(ctx)) {
        std::printf("step switches    %s\n", context_overlap_summary(ctx).c_str());
    }
    std::printf("config           L=%d NH=%d C=%d V=%d Vp=%d maxT=%d, %.1fM parameters\n",
                cfg.num_layers, cfg.num_heads, cfg.channels, cfg.vocab_size, cfg.padded_vocab_size,
                cfg.max_seq_len, model->num_params / 1e6);
    const bool root = tr->rank == 0;
    const long long resume_step = resumed ? run.step : -1;
    if (!tc.output_dir.empty() && root) {
        write_run_config(tc, cfg, ctx, run.step);
        tr->log.open(tc.output_dir + "/log.jsonl", resume_step);
    }
    if (root && !tc.llmc_log.empty()) tr->llmc_log.open(tc.llmc_log, resume_step);
    if (root && tc.gpu_log > 0) {  // without NVML one line says why and the run goes on
        std::string why;
        if (!tr->gpu_monitor.open(ctx.props.pciDomainID, ctx.props.pciBusID, ctx.props.pciDeviceID,
                                  &why))
            std::printf("gpu log          off: %s\n", why.c_str());
    }
    if (data->has_hellaswag)
        std::printf(
            "hellaswag        %s: %zu examples, %zu forwards of B*T tokens per evaluation%s\n",
            tc.hellaswag.c_str(), data->hellaswag.examples.size(), data->hellaswag.batches.size(),
            tr->world > 1 ? " on this rank" : "");
    if (data->has_val || data->has_hellaswag || tc.sample_every > 0)
        eval_io_create(&tr->eval_io, tc.B, tc.T);
    install_stop_handlers();
    // Per GPU: MFU compares one GPU's share of the step's FLOPs with one GPU's peak.
    tr->flops_per_step = gpt2_flops_per_token(cfg, tc.T) * (double)tc.total_batch / tc.world_size;
}

int trainer_run(Trainer* tr) {
    const TrainConfig& tc = *tr->tc;
    cudaEvent_t start, stop;
    LLMC_CUDA_CHECK(cudaEventCreate(&start));
    LLMC_CUDA_CHECK(cudaEventCreate(&stop));
    tr->record_time = Clock::now();
    tr->first_step = (int)tr->run.step + 1;
    // As llm.c: with --eval-every, HellaSwag also scores the model a new run starts from.
    if (tr->data->has_hellaswag && tc.eval_every > 0 && tr->run.step == 0)
        log_hellaswag(tr, 0, nullptr);
    tr->timed_since = Clock::now();  // for the ETA, from the third step on
    int rc = 0;
    for (int step = tr->first_step; step <= tc.steps; step++) {
        if (!train_one_step(tr, step, start, stop)) {
            rc = 1;
            break;
        }
        if (tr->stopped) break;
    }
    LLMC_CUDA_CHECK(cudaEventDestroy(start));
    LLMC_CUDA_CHECK(cudaEventDestroy(stop));
    return rc;
}

void trainer_finish(Trainer* tr) {
    const TrainConfig& tc = *tr->tc;
    size_t free_b = 0, total_b = 0;
    LLMC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const double peak_mib = (total_b - free_b) / 1048576.0;
    const double med = median(tr->step_ms);
    std::printf(
        "data wait: median %.3f ms, max %.3f ms per step before launch (prefetch %d, shuffle %d, "
        "overfit %d)\n",
        median(tr->data_ms), *std::max_element(tr->data_ms.begin(), tr->data_ms.end()), tc.prefetch,
        tc.shuffle, tc.overfit_batch);
    // Wall clock covers the host's batch fill, the launch and the wait: what the loader costs.
    std::printf("wall clock: median %.3f ms per step (data fill + launch + GPU)\n",
                median(tr->wall_ms));
    // Everything the loop does per step, so the GPU's idle time between steps shows here.
    std::printf(
        "step period: median %.3f ms from one step's log record to the next (%zu steps without "
        "validation, sample or checkpoint; the GPU step is %.3f ms of it)\n",
        median(tr->period_ms), tr->period_ms.size(), median(tr->step_ms));
    const double tok_s = med > 0 ? tc.total_batch / (med / 1e3) : 0.0;
    const double mfu = (med > 0 && tr->peak_tflops > 0)
                           ? tr->flops_per_step / (med / 1e3) / (tr->peak_tflops * 1e12)
                           : 0.0;
    std::printf(
        "summary: median step %.2f ms over %zu steps | %.0f tok/s | MFU %.1f%% | device memory in "
        "use %.0f MiB\n",
        med, tr->step_ms.size(), tok_s, 100.0 * mfu, peak_mib);
    if (tr->dist != nullptr) {
        const float most = multi_gpu_host_reduce(*tr->ctx, tr->dist, (float)peak_mib, kNcclMax);
        std::printf(
            "multi-GPU memory: device memory in use %.0f MiB on rank 0, %.0f MiB on the "
            "fullest of %d GPUs (zero %d)\n",
            peak_mib, most, tc.world_size, tc.zero);
    }
    const bool root = tr->rank == 0, has_output = !tc.output_dir.empty();
    const long long last = tr->run.step;
    // The model first: a summary that cannot be written must not cost a finished run its model.
    if (root && has_output && tr->checkpoint_ok && last == tc.steps)
        write_final_model(tc.output_dir, last, tr->model->cfg, tc.model_dtype);
    if (root && !tc.json_summary.empty())
        write_json_summary(tc.json_summary, tc, *tr->ctx, med, median(tr->wall_ms),
                           median(tr->period_ms), tok_s, mfu, peak_mib, tr->losses);
    if (!tr->stopped || last >= tc.steps) return;
    if (!has_output)
        std::printf("stopped after step %lld; no -o, so no checkpoint was written\n", last);
    else if (tr->checkpoint_ok)
        std::printf("stopped after step %lld; checkpoint %s; continue with --resume -o %s\n", last,
                    checkpoint_state_path(tc.output_dir, last).c_str(), tc.output_dir.c_str());
    else
        std::printf(
            "stopped after step %lld; its state was not finite, so the newest "
            "checkpoint in %s is an earlier one\n",
            last, tc.output_dir.c_str());
}

}  // namespace llmc
