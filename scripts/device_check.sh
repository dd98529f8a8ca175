#!/usr/bin/env bash
# device_check.sh: the whole GPU check in one call, for a machine with an NVIDIA GPU.
#   1. builds what is missing (or uses binaries built elsewhere for sm_90 if they run here),
#   2. writes reference dumps with scripts/train_gpt2.py (small awkward config, and GPT-2 d12),
#   3. runs every per-op test, test_gpt2cu on both dumps with CUDA graphs on and off,
#   4. compute-sanitizer (memcheck, racecheck, synccheck) on the small config,
#   5. the benchmark against PyTorch (scripts/bench.sh),
# writing logs under $OUT (default build/device_check) and printing a short table last.
#   scripts/device_check.sh [--quick]   (--quick: skip the d12 dump and the benchmark)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/device_check}
mkdir -p "$OUT"
quick=${1:-}
PY=${LLMC_PYTHON:-python3}
export PYTHONUNBUFFERED=1
results=()

step() {  # step NAME COMMAND...: run, log to $OUT/NAME.log, remember PASS/FAIL and time
    local name=$1; shift
    local t0=$SECONDS
    if "$@" >"$OUT/$name.log" 2>&1; then
        results+=("PASS $name $((SECONDS - t0))s")
    else
        results+=("FAIL($?) $name $((SECONDS - t0))s")
        tail -n 15 "$OUT/$name.log" | sed "s/^/  [$name] /"
    fi
    echo "${results[-1]}"
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
# The device gets a copy of the tree without .git: the caller may leave the commit id in
# .carry/commit.txt.
git rev-parse --short HEAD 2>/dev/null >"$OUT/commit.txt" || cp .carry/commit.txt "$OUT/commit.txt" 2>/dev/null \
    || echo unknown >"$OUT/commit.txt"
if ! ./test_gpt2cu --help >/dev/null 2>&1 || [ ! -x build/fp32/dev/test_attention ]; then
    step build make -j16 all
fi

D=build/device_data
mkdir -p "$D"
SMALL=(--n-layer 2 --n-head 4 --n-embd 128 --vocab-size 1000 --block-size 96 -b 3 -t 77 --random-biases --seed 1234 -l 1e-3 -c 0.1)
step dump_small "$PY" scripts/train_gpt2.py "${SMALL[@]}" --device cpu --write-model "$D/small_model.bin" --write-state "$D/small_state.bin"
for t in build/fp32/dev/test_*; do
    [[ "$t" == *.o ]] || step "$(basename "$t")" "$t"
done
for g in 1 0; do
    step "test_gpt2cu_small_graph$g" ./test_gpt2cu --model "$D/small_model.bin" --state "$D/small_state.bin" --graph $g
done
if [ "$quick" != "--quick" ]; then
    step dump_d12 "$PY" scripts/train_gpt2.py -e d12 -b 4 -t 64 --random-biases --seed 1234 --device cuda \
        --write-model "$D/d12_model.bin" --write-state "$D/d12_state.bin"
    for g in 1 0; do
        step "test_gpt2cu_d12_graph$g" ./test_gpt2cu --model "$D/d12_model.bin" --state "$D/d12_state.bin" --graph $g
    done
fi
CS="compute-sanitizer --error-exitcode 9"
step sanitize_memcheck $CS --tool memcheck ./test_gpt2cu --model "$D/small_model.bin" --state "$D/small_state.bin" --graph 0
step sanitize_racecheck $CS --tool racecheck ./test_gpt2cu --model "$D/small_model.bin" --state "$D/small_state.bin" --graph 0
step sanitize_synccheck $CS --tool synccheck ./test_gpt2cu --model "$D/small_model.bin" --state "$D/small_state.bin" --graph 0
if [ "$quick" != "--quick" ]; then
    if [ -f .carry/tinyshakespeare.txt ] && [ -f .carry/encoder.json ]; then
        step tokenize "$PY" scripts/train_gpt2.py --tokenize .carry/tinyshakespeare.txt --encoder-dir .carry --out-dir "$D/tinyshakespeare"
        data="$D/tinyshakespeare/*_train_*.bin"
    else
        data=""
    fi
    step bench bash scripts/bench.sh -s 50 ${data:+-d "$data"} -o "$OUT/bench"
    sed -n '/^| config/,$p' "$OUT/bench.log"
    # Data pipeline: the loader's cost (wall-clock step with prefetch, without, and with no
    # loading at all), and the tokenizer's throughput against native tiktoken.
    if [ -n "$data" ]; then
        for mode in "--prefetch 1" "--prefetch 0" "--overfit-batch 1"; do
            tag=$(echo "$mode" | tr -d ' -')
            step "loader_$tag" ./train_gpt2cu -i "$data" -e d12 -b 4 -t 1024 -x 80 -l 1e-4 $mode
            grep -E "wall clock|data wait" "$OUT/loader_$tag.log" | sed "s/^/  [$tag] /"
        done
    fi
    if [ -x build/host/dev/bench_tokenizer ] && [ -f build/tokenizer/encoder.json ]; then
        for i in 1 2 3 4 5 6 7 8 9 10; do cat .carry/tinyshakespeare.txt; done >"$D/ts10.txt"
        step tokenizer_bench "$PY" scripts/bench_tokenizer.py --text "$D/ts10.txt" --dir build/tokenizer \
            --threads 1,16 --bench build/host/dev/bench_tokenizer
        tail -n 8 "$OUT/tokenizer_bench.log"
    fi
fi
echo
echo "== device check, commit $(cat "$OUT/commit.txt"), $(sed -n 2p "$OUT/gpu.txt")"
printf '%s\n' "${results[@]}"
