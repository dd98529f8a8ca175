#!/usr/bin/env bash
# test_launch.sh: scripts/run/launch.sh with stand-in ranks (bash), on the CPU: every rank gets its
# LLMC_* variables and NCCL_NVLS_ENABLE=0; rank 0 writes to the terminal and the others to
# their log files; a failing rank stops the others at once and its exit code is the launcher's;
# SIGINT and SIGTERM reach every rank once, and ranks that ignore them are killed after
# LLMC_LAUNCH_GRACE seconds; bad options exit 2. Prints one line per check; exits 1 on a failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok=0 bad=0
check() {  # check NAME CONDITION-EXIT-CODE
    if [ "$2" = 0 ]; then echo "ok   $1"; ok=$((ok + 1)); else echo "FAIL $1"; bad=$((bad + 1)); fi
}

cat >"$tmp/rank.sh" <<'EOF'
#!/usr/bin/env bash
# rank.sh FAIL_RANK SECONDS: prints its variables, sleeps, and exits 7 if it is FAIL_RANK.
trap 'echo "rank $LLMC_RANK got INT"; exit 0' INT
trap 'echo "rank $LLMC_RANK got TERM"; exit 0' TERM
echo "rank=$LLMC_RANK world=$LLMC_WORLD_SIZE local=$LLMC_LOCAL_RANK port=$LLMC_MASTER_PORT nvls=$NCCL_NVLS_ENABLE"
if [ "$LLMC_RANK" = "$1" ]; then sleep 0.3; exit 7; fi
for _ in $(seq 1 $(($2 * 10))); do sleep 0.1; done
EOF
chmod +x "$tmp/rank.sh"

out=$(scripts/run/launch.sh -n 3 --logs "$tmp/a" -- "$tmp/rank.sh" -1 1 2>/dev/null)
rc=$?
port=$(sed -n 's/.*port=\([0-9]*\).*/\1/p' <<<"$out")
[ "$rc" = 0 ] && grep -q "rank=0 world=3 local=0 port=$port nvls=0" <<<"$out" &&
    grep -q "rank=2 world=3 local=2 port=$port nvls=0" "$tmp/a/rank_2.log" &&
    ! grep -q "rank=1" <<<"$out"
check "3 ranks: variables set, rank 0 on stdout, others in DIR/rank_R.log" $?

t0=$(date +%s)
scripts/run/launch.sh -n 3 --logs "$tmp/b" -- "$tmp/rank.sh" 1 30 >/dev/null 2>"$tmp/b.err"
rc=$?
dt=$(($(date +%s) - t0))
[ "$rc" = 7 ] && [ "$dt" -le 10 ] && grep -q "rank 1 exited with code 7" "$tmp/b.err"
check "a failing rank: exit 7 after ${dt} s, the others stopped" $?

for sig in INT TERM; do
    # A subshell with job control: the launcher in the background still gets a signal it can
    # trap (a plain background job would start with SIGINT ignored).
    (
        set -m
        scripts/run/launch.sh -n 2 --logs "$tmp/c$sig" -- "$tmp/rank.sh" -1 30 >"$tmp/c$sig.out" 2>/dev/null &
        lp=$!
        sleep 1
        kill -s "$sig" "$lp"
        wait "$lp"
    )
    rc=$?
    [ "$rc" = 0 ] && [ "$(grep -c "rank 0 got $sig" "$tmp/c$sig.out")" = 1 ] &&
        [ "$(grep -c "rank 1 got $sig" "$tmp/c$sig/rank_1.log")" = 1 ]
    check "SIG$sig reaches every rank once (exit $rc)" $?
done

# Ranks that ignore the stop signal are killed after LLMC_LAUNCH_GRACE seconds.
cat >"$tmp/stubborn.sh" <<'EOF'
#!/usr/bin/env bash
trap '' TERM
for _ in $(seq 1 300); do sleep 0.1; done
EOF
chmod +x "$tmp/stubborn.sh"
t0=$(date +%s)
(
    set -m
    LLMC_LAUNCH_GRACE=1 scripts/run/launch.sh -n 2 --logs "$tmp/d" -- "$tmp/stubborn.sh" >/dev/null 2>"$tmp/d.err" &
    lp=$!
    sleep 1
    kill -TERM "$lp"
    wait "$lp"
)
rc=$?
dt=$(($(date +%s) - t0))
[ "$rc" != 0 ] && [ "$dt" -le 8 ] && grep -q "killing them" "$tmp/d.err"
check "ranks ignoring SIGTERM killed after the grace period (exit $rc after ${dt} s)" $?

scripts/run/launch.sh -n 0 true >/dev/null 2>&1
[ $? = 2 ]
check "-n 0 refused with exit 2" $?
scripts/run/launch.sh -n 2 >/dev/null 2>&1
[ $? = 2 ]
check "no command refused with exit 2" $?

echo "test_launch: $ok passed, $bad failed"
[ "$bad" = 0 ]
