#!/usr/bin/env bash
# test_run_scripts.sh: scripts/run/run_gpt2_<size>.sh and their shared loop
# (scripts/run/run_gpt2_common.sh) on the CPU, with a stand-in trainer (BIN) that records its
# arguments and exits with a chosen status:
#   - each size starts the trainer once with its preset, TRAIN and VAL as -i / -j, the extra
#     options, then -o OUT --resume, and ends when the trainer exits 0;
#   - a glob that matches no shard stops before the trainer starts, with one sentence;
#   - exit 2 (options refused) is not retried; another failure is retried until MAX_RETRIES
#     starts in a row wrote no new checkpoint.
# Exits 1 on any failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=dev/test/check_cmd.sh
. dev/test/check_cmd.sh  # check NAME CONDITION..., the counts ok and bad, the scratch dir tmp
mkdir -p "$tmp/shards"
touch "$tmp/shards/x_train_000001.bin" "$tmp/shards/x_val_000000.bin"
# The stand-in trainer: appends its arguments as one line to $CALLS and exits with $FAKE_RC.
cat >"$tmp/fake_trainer" <<'FAKE'
#!/usr/bin/env bash
echo "$*" >>"$CALLS"
exit "${FAKE_RC:-0}"
FAKE
chmod +x "$tmp/fake_trainer"
export BIN=$tmp/fake_trainer TRAIN="$tmp/shards/*_train_*.bin" VAL="$tmp/shards/*_val_*.bin"

for pair in 124M:d12 350M:d24 774M:d36 1558M:d48; do
    size=${pair%%:*} preset=${pair#*:}
    export CALLS=$tmp/calls_$size OUT=$tmp/out_$size
    scripts/run/run_gpt2_$size.sh --seed 7 >"$tmp/log_$size" 2>&1
    rc=$?
    line=$(cat "$CALLS" 2>/dev/null)
    check "run_gpt2_$size.sh: one start, exit 0" test "$rc" = 0 -a "$(wc -l <"$CALLS")" = 1
    check "run_gpt2_$size.sh: -i/-j from TRAIN/VAL, -e $preset, the extra option, -o OUT --resume" \
        test "${line#"-i $TRAIN -j $VAL -e $preset "}" != "$line" -a \
        "${line%" --seed 7 -o $OUT --resume"}" != "$line"
done

export CALLS=$tmp/calls_missing OUT=$tmp/out_missing
out=$(TRAIN="$tmp/none/*.bin" scripts/run/run_gpt2_124M.sh 2>&1)
rc=$?
check "no train shard: exit 1 before the trainer starts" test "$rc" = 1 -a ! -e "$CALLS"
check "no train shard: one sentence naming the glob" grep -q "^error: no train shards match '$tmp/none/\*.bin'" <<<"$out"

export CALLS=$tmp/calls_refused OUT=$tmp/out_refused
out=$(FAKE_RC=2 scripts/run/run_gpt2_124M.sh 2>&1)
rc=$?
check "options refused (exit 2): one start, exit 2" test "$rc" = 2 -a "$(wc -l <"$CALLS")" = 1

export CALLS=$tmp/calls_crash OUT=$tmp/out_crash
out=$(FAKE_RC=3 RETRY_WAIT=0 MAX_RETRIES=3 scripts/run/run_gpt2_124M.sh 2>&1)
rc=$?
check "a crash without new checkpoints: 3 starts, then exit 3" test "$rc" = 3 -a "$(wc -l <"$CALLS")" = 3
check "a crash: says it gives up" grep -q "3 starts in a row without a new checkpoint (last exit 3); giving up" <<<"$out"

echo "test_run_scripts: $ok passed, $bad failed"
[ "$bad" = 0 ]
