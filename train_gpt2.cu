// train_gpt2.cu: the trainer. Parse the options; check the model, the data and a checkpoint to
// resume from before the GPU is touched; create the context (and, with several ranks, their
// communicator); build the model, its optimizer and its training step; run the loop
// (llmc/trainer.cuh: validation, HellaSwag, samples, logs, checkpoints); print the summary.
// Multi-GPU (one process per GPU, llmc/multi_gpu.cuh): each rank reads its rows of the global
// batch, the step reduces the gradients; rank 0 alone prints, logs, samples and writes files.
#include <cstdio>
#include <string>

#include "checkpoint.cuh"   // defines: kParamBytes, the device side of checkpoints
#include "context.cuh"      // defines: Context, context_init
#include "dist_env.h"       // defines: DistEnv, the ranks a launcher started
#include "gpt2.cuh"         // defines: GPT2, the model's buffers, forward and backward
#include "multi_gpu.cuh"    // defines: MultiGpu, the ranks' NCCL communicator
#include "optimizer.cuh"    // defines: AdamW, the optimizer's state
#include "run_state.h"      // defines: RunState, the loop's state and its decisions
#include "train_config.h"   // defines: TrainConfig, parse_train_args, check_output_paths
#include "train_resume.h"   // defines: describe_run, what a checkpoint records of the run
#include "train_setup.cuh"  // defines: ModelSource, TrainData, ResumePoint, build_training
#include "train_step.cuh"   // defines: TrainStep, one training step and its CUDA graph
#include "trainer.cuh"      // defines: Trainer, the loop, its evaluations, logs, checkpoints

using namespace llmc;

int main(int argc, char** argv) {
    // The ranks (other ranks than 0 print only warnings and errors) and the options.
    const DistEnv env = discover_ranks();
    TrainConfig tc;
    tc.world_size = env.world_size;
    parse_train_args(argc, argv, &tc);

    // What a user can get wrong is checked before the GPU is touched, so it shows on any machine:
    // the model's shape, the files the run writes (rank 0 writes them all), the data.
    ModelSource source = load_model_source(tc, env);
    const int grad_accum = grad_accum_of(tc);
    if (env.rank == 0) check_output_paths(tc);
    const std::string resume_state = find_resume_state(tc);
    TrainData data;
    open_train_data(tc, source.cfg, grad_accum, env, &data);

    // A resume replaces the initial weights with the checkpoint's, after checking that this run
    // (shape, batch, data, seed, precision) can continue it.
    const CheckpointMeta run_meta =
        describe_run(tc, source.cfg, data.train, kPrecisionName, kParamBytes);
    const bool resumed = !resume_state.empty();
    ResumePoint resume;
    RunState run;
    if (resumed) {
        load_resume_point(resume_state, run_meta, tc, &source, &resume);
        run = run_state_from_meta(resume.saved);
        if (run.step >= tc.steps) {
            std::printf("the checkpoint is at step %lld, the last of -x %d: nothing to train\n",
                        run.step, tc.steps);
            return 0;
        }
    }

    // The device and, with several ranks, their communicator.
    Context ctx;
    context_init(&ctx, pick_device(env, tc), tc.tf32 != 0);
    ctx.autotune = tc.autotune != 0;
    MultiGpu dist_state;
    MultiGpu* dist = start_multi_gpu(env, tc, ctx, source.cfg,
                                     config_fingerprint(argc, argv, env.world_size), &dist_state);
    print_run_start(tc, data, resumed, &source);

    // The model, its optimizer and its step (a resume's state restored into them).
    GPT2 model;
    AdamW opt;
    TrainStep step;
    build_training(ctx, tc, source, grad_accum, dist, resumed ? &resume : nullptr, &data, &model,
                   &opt, &step);

    // The loop, then the summary and the final model.
    Trainer trainer;
    trainer_init(&trainer, tc, ctx, &model, &opt, &step, dist, &data, run_meta, run, resumed);
    const int rc = trainer_run(&trainer);
    if (rc != 0) return rc;
    trainer_finish(&trainer);
    return 0;
}
