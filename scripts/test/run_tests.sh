#!/usr/bin/env bash
# run_tests.sh: every test this machine can run; `make test` calls it after building.
#
# CPU (always): the host tests (model files, data loader, multi-GPU bootstrap and shard map),
# the trainer's option checks, scripts/run/launch.sh with stand-in ranks, the Makefile's rules
# (dev/test/test_makefile.sh), how a GPU test that cannot run ends (dev/test/test_gpu_skip.sh), and the
# CPU fp32 reference against reference dumps that scripts/ref/train_gpt2.py writes with PyTorch on
# the CPU (float64 reference) for a small awkward config (2 layers, 4 heads, C=128, V=1000, B=3,
# T=77), one with heads of 64 and T=128 (the fused Hopper attention backward's shape class, its row
# statistics from the attention projection's product) and two shapes of scripts/test/test_shapes.sh's
# kind (head size 64, V=997; one token; T=31 with B*NH*T odd); the reference's DDP mode (2 CPU processes under torchrun) against one
# process with twice B; the Python tools without their modules; quickstart.sh's logic; and the
# docs (the benchmark figures against docs/bench.csv, every command they show against the
# scripts, --help and the Makefile).
# GPU: every per-op test of the build in PRECISION_DIR (default build/bf16, the default
# precision; `make test` passes its own), and test_gpt2cu on the same dumps, on the small one
# with CUDA graphs on and off, each also with every step switch on (llmc/context.cuh). Each
# decides for itself (dev/test/test_device.h): without a GPU it exits 77 and is counted as SKIP with
# its reason; where nvidia-smi lists a GPU that CUDA cannot start, it FAILs. The full shape
# sweep is scripts/test/test_shapes.sh (GPU).
# Ends with one line: "run_tests: N passed, M failed, K skipped"; exits 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
PRECISION_DIR=${PRECISION_DIR:-build/bf16}
TESTDATA=build/testdata
mkdir -p "$TESTDATA"
# run NAME COMMAND... (exit 0 PASS, 77 SKIP, else FAIL), skip NAME REASON, and the counts.
source scripts/test/test_runner.sh

PY=$(bash scripts/deps/install_deps.sh | tail -n 1) || { echo "FAIL deps: see the message above"; exit 1; }

# --- host tests -----------------------------------------------------------------------------
for t in build/host/dev/test/test_*; do
    # test_gpt2_cpu takes a reference dump and runs below, once the dump is written.
    [[ "$t" != *.o && "$t" != *.d && "$t" != */test_gpt2_cpu && -x "$t" ]] && run "$(basename "$t")" "$t"
done
run cli_checks bash scripts/test/test_cli.sh
run launch_checks bash dev/test/test_launch.sh
# The trainer's rank discovery and id bootstrap under mpirun, launch.sh and srun's variables.
run launcher_checks bash dev/test/test_launchers.sh build/host/dev/test/test_multi_gpu_host
# scripts/run/run_gpt2_<size>.sh with a stand-in trainer: options, missing shards, retries.
run run_scripts bash dev/test/test_run_scripts.sh
# scripts/bench/compare_binaries.sh with a stand-in trainer: its table, -O / -N, refusals.
run compare_binaries bash dev/test/test_compare_binaries.sh
# The Makefile by dry runs: the default goal, GPU_ARCH checks, spill flags, header dependencies.
run makefile_checks bash dev/test/test_makefile.sh
run format_check make --no-print-directory format-check
# No function over 150 lines outside kernels (a brace counter; prints the longest ones).
run function_lengths "$PY" dev/test/check_functions.py
# llmc/'s include graph: no cycle, no include of a higher layer (the Makefile lists the layers).
run include_layers "$PY" dev/test/check_layers.py
# Every file parser under libFuzzer + ASan/UBSan, 20 s each (scripts/test/fuzz.sh; LLMC_FUZZ_SECONDS).
run fuzz bash scripts/test/fuzz.sh "${LLMC_FUZZ_SECONDS:-20}"
if bash scripts/data/tokenizer_files.sh build/tokenizer >/dev/null 2>&1; then
    run test_prepare_data bash dev/test/test_prepare_data.sh
    run test_prepare_hellaswag env PY="$PY" bash dev/test/test_prepare_hellaswag.sh
    run test_datasets bash dev/test/test_datasets.sh
else
    skip test_prepare_data "GPT-2's tokenizer files unavailable (scripts/data/tokenizer_files.sh build/tokenizer failed)"
    skip test_prepare_hellaswag "GPT-2's tokenizer files unavailable"
    skip test_datasets "GPT-2's tokenizer files unavailable"
fi

# --- CPU reference against PyTorch ----------------------------------------------------------
SMALL=(--n-layer 2 --n-head 4 --n-embd 128 --vocab-size 1000 --block-size 96 -b 3 -t 77
       --random-biases --seed 1234 -l 1e-3 -c 0.1)
run write_small_dump "$PY" scripts/ref/train_gpt2.py "${SMALL[@]}" --device cpu \
    --write-model "$TESTDATA/small_model.bin" --write-state "$TESTDATA/small_state.bin"
run test_gpt2_cpu build/host/dev/test/test_gpt2_cpu "$TESTDATA/small_model.bin" "$TESTDATA/small_state.bin"
# Heads of 64 channels and T a multiple of 64, where the fused Hopper attention backward can take
# its row statistics from the attention projection's product (test_gpt2cu_hs64_* below).
HS64=(--n-layer 2 --n-head 2 --n-embd 128 --vocab-size 997 --block-size 128 -b 2 -t 128
      --random-biases --seed 4321 -l 1e-3 -c 0.1)
run write_hs64_dump "$PY" scripts/ref/train_gpt2.py "${HS64[@]}" --device cpu \
    --write-model "$TESTDATA/hs64_model.bin" --write-state "$TESTDATA/hs64_state.bin"
run test_gpt2_cpu_hs64 build/host/dev/test/test_gpt2_cpu "$TESTDATA/hs64_model.bin" "$TESTDATA/hs64_state.bin"
# Two shapes of the GPU sweep (scripts/test/test_shapes.sh), small enough for the CPU: L NH V B T.
SHAPES=("1 1 997 1 1" "2 3 997 3 31")
for i in "${!SHAPES[@]}"; do
    read -r L NH V B T <<<"${SHAPES[$i]}"
    run "write_shape${i}_dump" "$PY" scripts/ref/train_gpt2.py --n-layer "$L" --n-head "$NH" \
        --n-embd $((64 * NH)) --vocab-size "$V" --block-size 64 -b "$B" -t "$T" --random-biases \
        --seed $((77 + i)) -l 1e-3 -c 0.1 --device cpu --write-model "$TESTDATA/shape${i}_model.bin" \
        --write-state "$TESTDATA/shape${i}_state.bin"
    run "test_gpt2_cpu_shape$i" build/host/dev/test/test_gpt2_cpu "$TESTDATA/shape${i}_model.bin" \
        "$TESTDATA/shape${i}_state.bin"
done
# HellaSwag-style evaluation: the CPU reference's per-example ending losses through the GPU path's
# batching against scripts/ref/hellaswag_ref.py (PyTorch) within 1e-5, with the same predictions, on
# the checked-in 50-example synthetic file (9 right with test_hellaswag's fixed model at B=3 T=77,
# some rows truncated) and on 300 generated examples at B=4 T=64.
HS=build/host/dev/test/test_hellaswag
run hellaswag_inputs bash -c "$HS --write-model $TESTDATA/hs_model.bin && \
    '$PY' scripts/test/hellaswag_synthetic.py -n 300 --vocab 1000 --seed 3 --ctx 1:70 --ending 1:30 \
        -o $TESTDATA/hs_synth300.bin"
run hellaswag_vs_pytorch_50 bash -c "'$PY' scripts/ref/hellaswag_ref.py --model $TESTDATA/hs_model.bin \
    --eval dev/test/data/hellaswag_synth50.bin -t 77 --device cpu --losses $TESTDATA/hs_ref50.txt && \
    $HS --compare $TESTDATA/hs_model.bin dev/test/data/hellaswag_synth50.bin $TESTDATA/hs_ref50.txt \
        -b 3 -t 77 --expect-correct 9"
run hellaswag_vs_pytorch_300 bash -c "'$PY' scripts/ref/hellaswag_ref.py --model $TESTDATA/hs_model.bin \
    --eval $TESTDATA/hs_synth300.bin -t 64 --device cpu --losses $TESTDATA/hs_ref300.txt && \
    $HS --compare $TESTDATA/hs_model.bin $TESTDATA/hs_synth300.bin $TESTDATA/hs_ref300.txt -b 4 -t 64"
# A GPU test that cannot run: SKIP (exit 77) without a GPU, FAIL with one CUDA cannot start
# (stand-in nvidia-smi); this script's own verdicts.
run gpu_skip_checks bash dev/test/test_gpu_skip.sh "$PRECISION_DIR/dev/test/test_gelu" \
    "$TESTDATA/small_model.bin" "$TESTDATA/small_state.bin"
# Hugging Face export: a small model out through scripts/hf/export_hf.py and back through --hf-dir.
run test_export_hf "$PY" dev/test/test_export_hf.py "$TESTDATA/export_hf"
# Data parallel PyTorch reference: torchrun, 2 CPU processes (gloo) at B=2 against 1 at B=4 (~16 s).
run test_ddp_cpu "$PY" dev/test/test_ddp.py "$TESTDATA/ddp"
# The Python tools: --help without their modules, a missing module as one sentence, plot.py's errors.
run py_tools bash dev/test/test_py_tools.sh "$PY" "$TESTDATA/py_tools"
run quickstart bash dev/test/test_quickstart.sh
# The multi-GPU test's loss comparisons (scripts/test/compare_losses.py) on synthetic logs.
run compare_losses "$PY" dev/test/test_compare_losses.py "$TESTDATA/compare_losses"
# ncu's per-instruction stall samples summed by scripts/bench/ncu_hotspots.py, on synthetic CSVs.
run ncu_hotspots "$PY" dev/test/test_ncu_hotspots.py "$TESTDATA/ncu_hotspots"

# --- the docs ---------------------------------------------------------------------------------
# The README's headline and results table and docs/results.md's speed table against docs/bench.csv.
run docs_figures "$PY" scripts/bench/bench_table.py --check
# Every command README.md, data/README.md and docs/ show: the script exists, is executable in git,
# takes the options shown (--help); make targets exist; links resolve.
run docs_commands "$PY" dev/test/test_docs.py --python "$PY"

# --- GPU tests (each SKIPs, exit 77, without a GPU) ------------------------------------------
for t in "$PRECISION_DIR"/dev/test/test_*; do
    [[ "$t" != *.o && "$t" != *.d && -x "$t" ]] && run "gpu_$(basename "$t")" "$t"
done
for g in 1 0; do
    run "test_gpt2cu_small_graph$g" ./test_gpt2cu --model "$TESTDATA/small_model.bin" \
        --state "$TESTDATA/small_state.bin" --graph "$g"
done
for i in "${!SHAPES[@]}"; do
    run "test_gpt2cu_shape$i" ./test_gpt2cu --model "$TESTDATA/shape${i}_model.bin" \
        --state "$TESTDATA/shape${i}_state.bin"
done
# Every step switch of llmc/context.cuh away from its default (graph branches, PDL, the other
# kernel variants): the same checks, and the gradients bitwise those of the switches' other
# setting (test_gpt2cu's last check). LLMC_GELU_GEMM=0 (cuBLASLt's GELU epilogues instead of
# our sm_90 kernels; other bits, which the reference checks bound) rides along: test_gpt2cu
# does not flip it.
for g in 1 0; do
    run "test_gpt2cu_small_graph${g}_switches" env LLMC_BRANCHES=0 LLMC_PDL=0 \
        LLMC_LAYERNORM_BACKWARD_VARIANT=1 LLMC_CLASSIFIER_VARIANT=0 LLMC_GLOBAL_NORM_VARIANT=0 \
        LLMC_FLASH_FUSED_BACKWARD=2 LLMC_GELU_GEMM=0 ./test_gpt2cu \
        --model "$TESTDATA/small_model.bin" --state "$TESTDATA/small_state.bin" --graph "$g"
done
# cuBLASLt's fc forward (GELU_AUX_BIAS) beside our sm_90 DGELU kernel: the default runs ours
# for both.
run test_gpt2cu_small_gelu_gemm1 env LLMC_GELU_GEMM=1 ./test_gpt2cu \
    --model "$TESTDATA/small_model.bin" --state "$TESTDATA/small_state.bin"
# The 128 x 256 kernel (matmul_sm90_plain.cu, off by default) for every product whose output
# width is a multiple of 256: at the small dump's C = 128 that is the fc forward with GELU
# (LLMC_GELU_GEMM=3; test_matmul runs the plain products at GPT-2's widths); graphs on and off.
for g in 1 0; do
    run "test_gpt2cu_small_graph${g}_wide_gemm" env LLMC_PLAIN_GEMM=7 LLMC_GELU_GEMM=3 ./test_gpt2cu \
        --model "$TESTDATA/small_model.bin" --state "$TESTDATA/small_state.bin" --graph "$g"
done
# The fused Hopper attention backward (the defaults take it on large grids only) with its row
# statistics from the attention projection's input-gradient product (LLMC_ROW_STATS_GEMM=1, the
# default) and from their own pass (0); graphs on and off.
for r in 1 0; do
    for g in 1 0; do
        run "test_gpt2cu_hs64_fused_row_stats${r}_graph${g}" env LLMC_FLASH_FUSED_BACKWARD=2 \
            LLMC_ROW_STATS_GEMM=$r ./test_gpt2cu --model "$TESTDATA/hs64_model.bin" \
            --state "$TESTDATA/hs64_state.bin" --graph "$g"
    done
done
# The attention projection's weight gradient forked to the branch after the fused backward's
# main kernel (LLMC_ATTPROJ_WEIGHT_LATE=1, off by default): test_gpt2cu's run with every step
# switch flipped (no branches) must match it bit for bit; graphs on and off.
for g in 1 0; do
    run "test_gpt2cu_hs64_fused_attproj_late_graph${g}" env LLMC_FLASH_FUSED_BACKWARD=2 \
        LLMC_ATTPROJ_WEIGHT_LATE=1 ./test_gpt2cu --model "$TESTDATA/hs64_model.bin" \
        --state "$TESTDATA/hs64_state.bin" --graph "$g"
done
# The sharded optimizer kernels, which only multi-GPU runs launch, without PDL too.
run gpu_test_adamw_sharded_pdl_off env LLMC_PDL=0 "$PRECISION_DIR/dev/test/test_adamw_sharded"

echo "run_tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
