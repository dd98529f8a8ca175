#!/usr/bin/env bash
# run_tests.sh: every test this machine can run; `make test` calls it after building.
#
# CPU (always): the host tests (model files, data loader, multi-GPU bootstrap and shard map),
# the trainer's option checks, scripts/launch.sh with stand-in ranks, and the
# CPU fp32 reference against reference dumps that scripts/train_gpt2.py writes with PyTorch on
# the CPU (float64 reference) for a small awkward config (2 layers, 4 heads, C=128, V=1000, B=3,
# T=77) and two shapes of scripts/test_shapes.sh's kind (head size 64, V=997; one token; T=31
# with B*NH*T odd); the reference's DDP mode (2 CPU processes under torchrun) against one
# process with twice B.
# GPU (when nvidia-smi sees a GPU): every per-op test of the build in PRECISION_DIR (default
# build/bf16, the default precision; `make test` passes its own), and test_gpt2cu on the same
# dumps, on the small one with CUDA graphs on and off. Without a GPU each prints SKIP and its
# reason. The full shape sweep is scripts/test_shapes.sh (GPU).
# Ends with one line: "run_tests: N passed, M failed, K skipped"; exits 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PRECISION_DIR=${PRECISION_DIR:-build/bf16}
TESTDATA=build/testdata
mkdir -p "$TESTDATA"
passed=0 failed=0 skipped=0

run() {  # run NAME COMMAND...: one test, judged by its exit code
    local name=$1; shift
    local log="$TESTDATA/$name.log"
    local t0=$SECONDS
    if "$@" >"$log" 2>&1; then
        echo "PASS $name ($((SECONDS - t0)) s)"
        passed=$((passed + 1))
    else
        echo "FAIL $name (exit $?; last lines of $log:)"
        tail -n 25 "$log" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
}
skip() { echo "SKIP $1: $2"; skipped=$((skipped + 1)); }

PY=$(bash scripts/install_deps.sh | tail -n 1) || { echo "FAIL deps: see the message above"; exit 1; }

# --- host tests -----------------------------------------------------------------------------
for t in build/host/dev/test_*; do
    # test_gpt2_cpu takes a reference dump and runs below, once the dump is written.
    [[ "$t" != *.o && "$t" != */test_gpt2_cpu && -x "$t" ]] && run "$(basename "$t")" "$t"
done
run cli_checks bash scripts/test_cli.sh
run launch_checks bash dev/test_launch.sh
# The trainer's rank discovery and id bootstrap under mpirun, launch.sh and srun's variables.
run launcher_checks bash dev/test_launchers.sh build/host/dev/test_multi_gpu_host
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
# Two shapes of the GPU sweep (scripts/test_shapes.sh), small enough for the CPU: L NH V B T.
SHAPES=("1 1 997 1 1" "2 3 997 3 31")
for i in "${!SHAPES[@]}"; do
    read -r L NH V B T <<<"${SHAPES[$i]}"
    run "write_shape${i}_dump" "$PY" scripts/train_gpt2.py --n-layer "$L" --n-head "$NH" \
        --n-embd $((64 * NH)) --vocab-size "$V" --block-size 64 -b "$B" -t "$T" --random-biases \
        --seed $((77 + i)) -l 1e-3 -c 0.1 --device cpu --write-model "$TESTDATA/shape${i}_model.bin" \
        --write-state "$TESTDATA/shape${i}_state.bin"
    run "test_gpt2_cpu_shape$i" build/host/dev/test_gpt2_cpu "$TESTDATA/shape${i}_model.bin" \
        "$TESTDATA/shape${i}_state.bin"
done
# Hugging Face export: a small model out through scripts/export_hf.py and back through --hf-dir.
run test_export_hf "$PY" dev/test_export_hf.py "$TESTDATA/export_hf"
# Data parallel PyTorch reference: torchrun, 2 CPU processes (gloo) at B=2 against 1 at B=4 (~16 s).
run test_ddp_cpu "$PY" dev/test_ddp.py "$TESTDATA/ddp"

# --- GPU tests ------------------------------------------------------------------------------
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    for t in "$PRECISION_DIR"/dev/test_*; do
        [[ "$t" != *.o && -x "$t" ]] && run "gpu_$(basename "$t")" "$t"
    done
    for g in 1 0; do
        run "test_gpt2cu_small_graph$g" ./test_gpt2cu --model "$TESTDATA/small_model.bin" \
            --state "$TESTDATA/small_state.bin" --graph "$g"
    done
    for i in "${!SHAPES[@]}"; do
        run "test_gpt2cu_shape$i" ./test_gpt2cu --model "$TESTDATA/shape${i}_model.bin" \
            --state "$TESTDATA/shape${i}_state.bin"
    done
else
    skip gpu_tests "no NVIDIA GPU visible (nvidia-smi lists none); per-op tests and test_gpt2cu need one"
fi

echo "run_tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
