#!/usr/bin/env bash
# check_flash_sm90.sh: the Hopper flash attention (llmc/flash_attention_sm90*.cu: forward, and
# backward for HS=64) on an H100/H200, in one call: build what is missing, then
#   layout    build/bf16/dev/test/test_wgmma_tiles (TMA tile, wgmma SS and RS tiles against the CPU)
#   test      build/bf16/dev/test/test_flash_attention (both paths, every variant, every shape), then
#             again on the small shapes with LLMC_FLASH_SM90=0 (must print "SKIP sm90 path" and
#             pass on the mma.sync kernels alone) and with LLMC_FLASH_SM90=fwd (Hopper forward,
#             mma.sync backward)
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on test_wgmma_tiles and on
#             test_flash_attention --small
#   bench     build/bf16/dev/bench/bench_attention --variants, then scripts/bench/bench_attention.py (PyTorch's
#             flash and cuDNN) when a Python with torch and CUDA is found
#
#   scripts/test/check_flash_sm90.sh [--only STAGE,...]      (stages: layout test sanitize bench)
#
# Each step has a time limit (a deadlocked kernel traps after 10 s by itself; the limits are a
# second net). Logs go to build/check_flash_sm90/; a PASS/FAIL line per step is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
only=""
while [ $# -gt 0 ]; do
    case $1 in
        --only) only=${2:-}; shift 2 ;;
        -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
LOGS=build/check_flash_sm90
mkdir -p "$LOGS"
results=()
step() {  # step NAME LIMIT_S COMMAND...: run, log, record PASS/FAIL
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    echo "== $name: $*"
    if timeout -k 10 "$limit" "$@" 2>&1 | tee "$LOGS/$name.log"; then
        results+=("PASS $name ($((SECONDS - t0)) s)")
    else
        results+=("FAIL $name (exit ${PIPESTATUS[0]}, $((SECONDS - t0)) s; log $LOGS/$name.log)")
    fi
}

BINS="build/bf16/dev/test/test_wgmma_tiles build/bf16/dev/test/test_flash_attention build/bf16/dev/bench/bench_attention"
make -j"$(nproc)" $BINS >"$LOGS/build.log" 2>&1 || { tail -30 "$LOGS/build.log"; echo "FAIL build"; exit 1; }
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader

want layout && step layout 120 build/bf16/dev/test/test_wgmma_tiles
if want test; then
    step test 900 build/bf16/dev/test/test_flash_attention
    step test_switched_off 300 env LLMC_FLASH_SM90=0 build/bf16/dev/test/test_flash_attention --small
    grep -q "^SKIP sm90 path" "$LOGS/test_switched_off.log" ||
        results+=("FAIL test_switched_off (LLMC_FLASH_SM90=0 did not switch the Hopper kernels off)")
    step test_forward_only 300 env LLMC_FLASH_SM90=fwd build/bf16/dev/test/test_flash_attention --small
fi
if want sanitize; then
    CS=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
    for tool in memcheck racecheck synccheck; do
        step "sanitize_${tool}_tiles" 600 "$CS" --error-exitcode 9 --tool $tool \
            build/bf16/dev/test/test_wgmma_tiles
        step "sanitize_${tool}_flash" 900 "$CS" --error-exitcode 9 --tool $tool \
            build/bf16/dev/test/test_flash_attention --small
    done
fi
if want bench; then
    step bench 900 build/bf16/dev/bench/bench_attention --variants
    PY=$(bash scripts/deps/find_python.sh 2>/dev/null || true)
    if [ -n "$PY" ] && "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        step bench_torch 900 "$PY" scripts/bench/bench_attention.py
    else
        results+=("SKIP bench_torch (no Python with torch and CUDA)")
    fi
fi
printf '%s\n' "${results[@]}"
! printf '%s\n' "${results[@]}" | grep -q '^FAIL'
