#!/usr/bin/env bash
# run_tests.sh: every test this machine can run; `make test` calls it after building.
#
# CPU (always): the host tests (model files, data loader, multi-GPU bootstrap and shard map),
# the trainer's option checks, scripts/launch.sh with stand-in ranks, the Makefile's rules
# (dev/test_makefile.sh), how a GPU test that cannot run ends (dev/test_gpu_skip.sh), and the
# CPU fp32 reference against a reference dump that scripts/train_gpt2.py writes with PyTorch on
# the CPU for a small awkward config (2 layers, 4 heads, C=128, V=1000, B=3, T=77); the
# reference's DDP mode (2 CPU processes under torchrun) against one process with twice B.
# GPU: every per-op test of the build in PRECISION_DIR (default build/bf16, the default
# precision; `make test` passes its own), and test_gpt2cu on the same dump with CUDA graphs on
# and off. Each decides for itself (dev/test_device.h): without a GPU it exits 77 and is counted
# as SKIP with its reason; where nvidia-smi lists a GPU that CUDA cannot start, it FAILs.
# Ends with one line: "run_tests: N passed, M failed, K skipped"; exits 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PRECISION_DIR=${PRECISION_DIR:-build/bf16}
TESTDATA=build/testdata
mkdir -p "$TESTDATA"
# run NAME COMMAND... (exit 0 PASS, 77 SKIP, else FAIL), skip NAME REASON, and the counts.
source scripts/test_runner.sh

PY=$(bash scripts/install_deps.sh | tail -n 1) || { echo "FAIL deps: see the message above"; exit 1; }

# --- host tests -----------------------------------------------------------------------------
for t in build/host/dev/test_*; do
    # test_gpt2_cpu takes a reference dump and runs below, once the dump is written.
    [[ "$t" != *.o && "$t" != *.d && "$t" != */test_gpt2_cpu && -x "$t" ]] && run "$(basename "$t")" "$t"
done
run cli_checks bash scripts/test_cli.sh
run launch_checks bash dev/test_launch.sh
# The trainer's rank discovery and id bootstrap under mpirun, launch.sh and srun's variables.
run launcher_checks bash dev/test_launchers.sh build/host/dev/test_multi_gpu_host
# The Makefile by dry runs: the default goal, GPU_ARCH checks, spill flags, header dependencies.
run makefile_checks bash dev/test_makefile.sh
run format_check make --no-print-directory format-check
# Every file parser under libFuzzer + ASan/UBSan, 20 s each (scripts/fuzz.sh; LLMC_FUZZ_SECONDS).
run fuzz bash scripts/fuzz.sh "${LLMC_FUZZ_SECONDS:-20}"
if bash scripts/tokenizer_files.sh build/tokenizer >/dev/null 2>&1; then
    run test_prepare_data bash dev/test_prepare_data.sh
else
    skip test_prepare_data "GPT-2's tokenizer files unavailable (scripts/tokenizer_files.sh build/tokenizer failed)"
fi

# --- CPU reference against PyTorch ----------------------------------------------------------
SMALL=(--n-layer 2 --n-head 4 --n-embd 128 --vocab-size 1000 --block-size 96 -b 3 -t 77
       --random-biases --seed 1234 -l 1e-3 -c 0.1)
run write_small_dump "$PY" scripts/train_gpt2.py "${SMALL[@]}" --device cpu \
    --write-model "$TESTDATA/small_model.bin" --write-state "$TESTDATA/small_state.bin"
run test_gpt2_cpu build/host/dev/test_gpt2_cpu "$TESTDATA/small_model.bin" "$TESTDATA/small_state.bin"
# A GPU test that cannot run: SKIP (exit 77) without a GPU, FAIL with one CUDA cannot start
# (stand-in nvidia-smi); this script's own verdicts.
run gpu_skip_checks bash dev/test_gpu_skip.sh "$PRECISION_DIR/dev/test_gelu" \
    "$TESTDATA/small_model.bin" "$TESTDATA/small_state.bin"
# Hugging Face export: a small model out through scripts/export_hf.py and back through --hf-dir.
run test_export_hf "$PY" dev/test_export_hf.py "$TESTDATA/export_hf"
# Data parallel PyTorch reference: torchrun, 2 CPU processes (gloo) at B=2 against 1 at B=4 (~16 s).
run test_ddp_cpu "$PY" dev/test_ddp.py "$TESTDATA/ddp"

# --- GPU tests (each SKIPs, exit 77, without a GPU) ------------------------------------------
for t in "$PRECISION_DIR"/dev/test_*; do
    [[ "$t" != *.o && "$t" != *.d && -x "$t" ]] && run "gpu_$(basename "$t")" "$t"
done
for g in 1 0; do
    run "test_gpt2cu_small_graph$g" ./test_gpt2cu --model "$TESTDATA/small_model.bin" \
        --state "$TESTDATA/small_state.bin" --graph "$g"
done

echo "run_tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
