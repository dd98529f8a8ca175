#!/usr/bin/env bash
# fuzz.sh [SECONDS]: fuzzes every file parser for SECONDS each (default 60) and fails on any crash.
#
# Builds the harnesses (`make fuzz`: dev/fuzz/fuzz_*.cpp with clang, libFuzzer, ASan and UBSan), then
# for each: writes its seeds (valid small files, checked to parse) to build/fuzz/seeds/NAME, and
# runs libFuzzer on them with the corpus kept in build/fuzz/corpus/NAME, so a later run starts
# where this one stopped. A crash is any sanitizer report, an exception other than the parser's
# one-sentence refusal, a refusal that does not name the file, an input that runs over 5 s
# (-timeout: a hang), a single allocation over 256 MB (-malloc_limit_mb: inputs are a few KB, so
# that is a size taken from a header without checking it) or 2 GB of memory in all. The failing
# input is saved as build/fuzz/crashes/NAME-crash-<sha1>; rerun it with ./build/fuzz/NAME FILE.
# CI (scripts/test/run_tests.sh) runs `scripts/test/fuzz.sh 20`. Ends with "fuzz: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
    echo "error: scripts/test/fuzz.sh takes the seconds to fuzz each parser (a positive integer), not '$secs'" >&2
    exit 2
fi
if ! command -v "${FUZZ_CXX:-clang++}" >/dev/null 2>&1; then
    echo "error: fuzzing needs clang++ with libFuzzer (Debian: apt-get install clang; scripts/deps/install_deps.sh does it)" >&2
    exit 1
fi
mkdir -p build/fuzz/crashes
if ! make --no-print-directory -j2 fuzz >build/fuzz/build.log 2>&1; then
    echo "error: building the fuzz harnesses failed; last lines of build/fuzz/build.log:" >&2
    tail -n 20 build/fuzz/build.log >&2
    exit 1
fi

passed=0 failed=0
for src in dev/fuzz/fuzz_*.cpp; do
    name=$(basename "$src" .cpp)
    bin=build/fuzz/$name seeds=build/fuzz/seeds/$name corpus=build/fuzz/corpus/$name
    log=build/fuzz/$name.log
    rm -rf "$seeds"
    mkdir -p "$seeds" "$corpus"
    if ! LLMC_FUZZ_SEEDS=$seeds "$bin" >"$log" 2>&1; then
        echo "FAIL $name: its seeds are not accepted by the parser (see $log)"
        tail -n 5 "$log" | sed 's/^/    /'
        failed=$((failed + 1))
        continue
    fi
    t0=$SECONDS
    "$bin" -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -malloc_limit_mb=256 \
        -print_final_stats=1 -artifact_prefix="build/fuzz/crashes/$name-" "$corpus" "$seeds" \
        >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if [ "$rc" = 0 ]; then
        echo "PASS $name: ${runs:-?} inputs in $((SECONDS - t0)) s, corpus of $(ls "$corpus" | wc -l) files"
        passed=$((passed + 1))
    else
        artifact=$(sed -n "s/.*Test unit written to //p" "$log" | tail -n 1)
        echo "FAIL $name (exit $rc) after ${runs:-?} inputs; reproduce: $bin ${artifact:-<see $log>}"
        grep -m 3 -E "ERROR|runtime error|fuzz harness|out-of-memory|timeout" "$log" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" = 0 ]
