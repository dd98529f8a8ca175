#!/usr/bin/env bash
# test_runner.sh: the verdicts of scripts/test/run_tests.sh, sourced (dev/test/test_gpu_skip.sh tests them).
#
#   run NAME COMMAND...  runs one test, its output into $TESTDATA/NAME.log, and judges its exit
#                        code: 0 PASS; 77 SKIP (the convention of dev/test/test_device.h and the test
#                        scripts), with the reason from the test's "SKIP <reason>" line; anything
#                        else FAIL, with the last lines of the log
#   skip NAME REASON     a SKIP decided by the caller
#   passed failed skipped  the counts so far
passed=0 failed=0 skipped=0

run() {
    local name=$1
    shift
    local log="$TESTDATA/$name.log" t0=$SECONDS rc=0 why
    "$@" >"$log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "PASS $name ($((SECONDS - t0)) s)"
        passed=$((passed + 1))
    elif [ "$rc" -eq 77 ]; then
        why=$(grep -m1 '^SKIP' "$log" | sed -E 's/^SKIP:? *//')
        echo "SKIP $name: ${why:-exit 77 without a SKIP line (see $log)}"
        skipped=$((skipped + 1))
    else
        echo "FAIL $name (exit $rc; last lines of $log:)"
        tail -n 25 "$log" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
}

skip() {
    echo "SKIP $1: $2"
    skipped=$((skipped + 1))
}
