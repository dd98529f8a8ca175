#!/usr/bin/env bash
# test_gpu_skip.sh: a GPU test that cannot run is a SKIP, not a PASS; on the CPU.
#
#   dev/test/test_gpu_skip.sh [GPU_TEST_BINARY [MODEL.bin STATE.bin]]
#
# With a stand-in nvidia-smi first on the PATH, runs a per-op GPU test (default
# build/bf16/dev/test/test_gelu) and test_gpt2cu (with the reference dump, when given) and checks
# dev/test/test_device.h's verdicts: no GPU listed -> "SKIP <reason>", exit 77; a GPU listed that
# CUDA cannot start -> "FAIL ..." naming the CUDA error, the driver and /dev/nvidia*, exit 1
# (staged only where CUDA cannot start: on a machine whose real nvidia-smi lists a GPU, the
# hidden-GPU SKIP is checked instead). Then scripts/test/test_runner.sh's verdicts: exit 0 PASS,
# 77 SKIP with the test's reason, other codes FAIL, and the counts. Prints one line per check;
# exits 1 on a failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
BIN=${1:-build/bf16/dev/test/test_gelu}
MODEL=${2:-}
STATE=${3:-}
[ -x "$BIN" ] || { echo "FAIL: $BIN is not built (make $BIN)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok=0 bad=0
check() {  # check NAME CONDITION-EXIT-CODE
    if [ "$2" = 0 ]; then echo "ok   $1"; ok=$((ok + 1)); else echo "FAIL $1"; bad=$((bad + 1)); fi
}
real_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

# Stand-in nvidia-smi: lists $FAKE_GPUS GPUs (like the real one: "No devices were found", exit
# 6, for none).
mkdir -p "$tmp/none" "$tmp/one"
fake_smi() {  # fake_smi DIR N
    cat >"$1/nvidia-smi" <<EOS
#!/bin/sh
if [ $2 = 0 ]; then echo "No devices were found"; exit 6; fi
echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"
EOS
    chmod +x "$1/nvidia-smi"
}
fake_smi "$tmp/none" 0
fake_smi "$tmp/one" 1

# run_as NAME PATHDIR [ENV...] -- COMMAND...: the command's output into $tmp/NAME.out, its exit
# code into $tmp/NAME.rc.
run_as() {
    local name=$1 dir=$2
    shift 2
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env PATH="$dir:$PATH" "${envs[@]}" "$@" >"$tmp/$name.out" 2>&1
    echo $? >"$tmp/$name.rc"
}
rc_of() { cat "$tmp/$1.rc"; }

# No GPU listed, CUDA hidden as well (so that a machine with a GPU sees none either): SKIP.
binaries=("$BIN")
[ -n "$MODEL" ] && binaries+=("./test_gpt2cu --model $MODEL --state $STATE")
i=0
for cmd in "${binaries[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # cmd is a command line of words without spaces inside them
    run_as "skip$i" "$tmp/none" CUDA_VISIBLE_DEVICES=-1 -- $cmd
    [ "$(rc_of "skip$i")" = 77 ] && grep -q '^SKIP no CUDA device (.*) and nvidia-smi lists no GPU' "$tmp/skip$i.out"
    check "no GPU: ${cmd%% *} exits 77 with 'SKIP <reason>' (exit $(rc_of "skip$i"): $(head -c 160 "$tmp/skip$i.out"))" $?
done

i=0
for cmd in "${binaries[@]}"; do
    i=$((i + 1))
    if [ "$real_gpus" = 0 ]; then
        # nvidia-smi lists a GPU, CUDA cannot start (no driver here): FAIL with what to check.
        # shellcheck disable=SC2086
        run_as "fail$i" "$tmp/one" -- $cmd
        [ "$(rc_of "fail$i")" = 1 ] && grep -q '^FAIL nvidia-smi lists 1 GPU(s) but CUDA cannot start (' "$tmp/fail$i.out" &&
            grep -q 'driver supports CUDA [0-9]*\.[0-9]*' "$tmp/fail$i.out" && grep -q '/dev/nvidia\*' "$tmp/fail$i.out"
        check "a GPU CUDA cannot start: ${cmd%% *} FAILs, exit 1, naming the driver and /dev/nvidia* (exit $(rc_of "fail$i"): $(head -c 200 "$tmp/fail$i.out"))" $?
    else
        # The real GPUs, hidden by CUDA_VISIBLE_DEVICES: SKIP naming the variable.
        # shellcheck disable=SC2086
        run_as "hidden$i" "" CUDA_VISIBLE_DEVICES=-1 -- $cmd
        [ "$(rc_of "hidden$i")" = 77 ] && grep -q "^SKIP CUDA_VISIBLE_DEVICES='-1' hides" "$tmp/hidden$i.out"
        check "GPUs hidden by CUDA_VISIBLE_DEVICES: ${cmd%% *} SKIPs naming it (exit $(rc_of "hidden$i"))" $?
    fi
done

# scripts/test/test_runner.sh: exit 77 is a SKIP with the test's reason, never a PASS.
out=$(
    # shellcheck disable=SC2034,SC2154 # TESTDATA is test_runner.sh's; the counts are its too
    TESTDATA=$tmp
    # shellcheck source=scripts/test/test_runner.sh
    source scripts/test/test_runner.sh
    run a_pass true
    run a_skip bash -c 'echo "some output"; echo "SKIP no CUDA device (reason)"; exit 77'
    run a_bare_skip bash -c 'exit 77'
    run a_fail bash -c 'echo "SKIP printed, then a crash"; exit 1'
    echo "counts $passed $failed $skipped"
)
grep -q '^PASS a_pass' <<<"$out" && grep -q '^SKIP a_skip: no CUDA device (reason)$' <<<"$out" &&
    grep -q '^SKIP a_bare_skip: exit 77 without a SKIP line' <<<"$out" &&
    grep -q '^FAIL a_fail (exit 1' <<<"$out" && grep -q '^counts 1 1 2$' <<<"$out"
check "test_runner.sh: exit 0 PASS, 77 SKIP with its reason, 1 FAIL; counts 1 passed 1 failed 2 skipped" $?

echo "test_gpu_skip: $ok passed, $bad failed"
[ "$bad" = 0 ]
