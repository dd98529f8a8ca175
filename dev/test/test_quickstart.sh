#!/usr/bin/env bash
# test_quickstart.sh: scripts/quickstart.sh's own logic, on the CPU and without network.
#
# A scratch tree holds the real quickstart.sh beside stand-ins: scripts/data/datasets.sh (prints a
# line), a Makefile whose prepare_data and train_gpt2cu targets log that make ran, a validation
# shard header of 73,198 tokens (the Brown corpus's), and, for the GPU case, an nvidia-smi that
# lists a GPU and a ./train_gpt2cu that prints its arguments. Checks:
#   1. make runs for prepare_data every time, even when ./prepare_data exists (a pull rebuilds);
#   2. -m is the number of whole B x T batches of the validation split for the -b and -t given:
#      8 at the default B=8 T=1024, 17 with -b 4, 35 with -b 4 -t 512, 35 with -b=2;
#   3. without a GPU it trains nothing and prints the command; with one it runs make for
#      train_gpt2cu every time (even when ./train_gpt2cu exists) and then trains;
#   4. a -b that is not a number is refused with one sentence, exit 2; --help prints the usage.
# Ends with "test_quickstart: N passed, M failed"; exits 1 on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ok=0 bad=0
pass() { echo "PASS $*"; ok=$((ok + 1)); }
fail() { echo "FAIL $*"; bad=$((bad + 1)); }

mkdir -p "$WORK/tree/scripts/data" "$WORK/tree/data/brown" "$WORK/bin"
cp scripts/quickstart.sh "$WORK/tree/scripts/"
printf '#!/usr/bin/env bash\necho "stand-in datasets.sh $*"\n' >"$WORK/tree/scripts/data/datasets.sh"
printf '.PHONY: prepare_data train_gpt2cu\n%s:\n\t@echo "make ran: %s"\n' \
    prepare_data prepare_data train_gpt2cu train_gpt2cu >"$WORK/tree/Makefile"
printf '#!/usr/bin/env bash\necho "stand-in train_gpt2cu $*"\n' >"$WORK/tree/train_gpt2cu"
printf '#!/usr/bin/env bash\necho stand-in prepare_data\n' >"$WORK/tree/prepare_data"
chmod +x "$WORK/tree/train_gpt2cu" "$WORK/tree/prepare_data"
# A shard header: magic 20240520, version 1, 73198 tokens, the rest of the 256 ints zero.
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\xee\x1d\x01\x00'; head -c $((253 * 4)) /dev/zero; } \
    >"$WORK/tree/data/brown/brown_val_000000.bin"
printf '#!/usr/bin/env bash\necho "GPU 0: stand-in"\n' >"$WORK/bin/nvidia-smi"
chmod +x "$WORK/bin/nvidia-smi"
NOGPU_PATH=$(echo "$PATH" | tr ':' '\n' | while read -r d; do
    [ -x "$d/nvidia-smi" ] || printf '%s:' "$d"; done)

run() {  # run GPU(0|1) ARGS...: quickstart's output in $WORK/out, its exit code in $rc
    local gpu=$1
    shift
    if [ "$gpu" = 1 ]; then
        PATH="$WORK/bin:$PATH" bash "$WORK/tree/scripts/quickstart.sh" "$@" >"$WORK/out" 2>&1
    else
        PATH="$NOGPU_PATH" bash "$WORK/tree/scripts/quickstart.sh" "$@" >"$WORK/out" 2>&1
    fi
    rc=$?
}

run 0
grep -q "make ran: prepare_data" "$WORK/out" &&
    pass "make runs for prepare_data though ./prepare_data exists" ||
    fail "make did not run for prepare_data: $(cat "$WORK/out")"
for case in ":8" "-b 4:17" "-b 4 -t 512:35" "-b=2:35" "-b 16 -b 4:17"; do
    args=${case%:*} want=${case##*:}
    # shellcheck disable=SC2086  # the arguments are words
    run 0 $args
    if [ "$rc" = 0 ] && grep -q -- "-m $want -o out/brown_d12" "$WORK/out" &&
        ! grep -q "stand-in train_gpt2cu" "$WORK/out"; then
        pass "no GPU, '${args:-(defaults)}': -m $want in the printed command, nothing trained"
    else
        fail "no GPU, '${args:-(defaults)}': want -m $want and no training, exit $rc:"
        sed 's/^/    /' "$WORK/out"
    fi
done
run 1 -b 4
if [ "$rc" = 0 ] && grep -q "make ran: train_gpt2cu" "$WORK/out" &&
    grep -q -- "stand-in train_gpt2cu .* -b 4 -t 1024 .* -m 17 .* --resume -b 4$" "$WORK/out"; then
    pass "with a GPU: make runs for train_gpt2cu though it exists, then it trains with -m 17"
else
    fail "with a GPU, -b 4: exit $rc:"
    sed 's/^/    /' "$WORK/out"
fi
run 0 --help
if [ "$rc" = 0 ] && grep -q "^quickstart.sh \[train_gpt2cu options\]" "$WORK/out" &&
    ! grep -q "make ran" "$WORK/out"; then
    pass "--help prints the usage, exit 0, nothing built"
else
    fail "--help: exit $rc: $(head -n 3 "$WORK/out")"
fi
run 0 -b four
if [ "$rc" = 2 ] && [ "$(wc -l <"$WORK/out")" = 1 ] && grep -q "^error: -b and -t" "$WORK/out"; then
    pass "-b four: $(cat "$WORK/out")"
else
    fail "-b four: want one sentence and exit 2, got exit $rc: $(cat "$WORK/out")"
fi

echo "test_quickstart: $ok passed, $bad failed"
[ "$bad" = 0 ]
