#!/usr/bin/env bash
# compare_binaries.sh OLD NEW: two train_gpt2cu binaries (say, main's and a branch's) on the same
# GPU, data and options, for a change that must not move the step time or the losses.
#
#   scripts/bench/compare_binaries.sh [-e d12] [-b "64 4"] [-t 1024] [-s STEPS] [-r ROUNDS]
#                                     [-d GLOB] [-o OUTDIR] [-O "VAR=VALUE ..."]
#                                     [-N "VAR=VALUE ..."] OLD_BINARY NEW_BINARY
#
# -O and -N: environment assignments for the OLD and the NEW runs alone, so that one binary can
# be compared with itself under two settings of a switch (e.g. -N LLMC_GLOBAL_NORM_VARIANT=0
# with the same binary twice).
#
# For each B, ROUNDS rounds (default 3) of one OLD run then one NEW run, interleaved so that the
# GPU's clocks and temperature drift alike for both; each run trains STEPS steps (default 30) of
# the preset (default d12, T=1024, random init from one seed) on random-token shards (written to
# OUTDIR/shards once) or, with -d, the train shards GLOB names (real text: its skewed token
# counts are what the embedding's backward sums; uniform random ids hide that), with its
# --json-summary in OUTDIR. Prints per B the median over rounds of each binary's median GPU
# step (CUDA events, the trainer's first 2 steps left out) and wall clock step, NEW / OLD, and
# whether every step's loss of every NEW run equals OLD's first run's bit for bit (9
# significant digits); then each round's NEW / OLD ratio, whose spread shows the noise (the
# step of a B=64 d12 run moves by several percent as the GPU's power cap pulls its clock).
# Exit code 1 when a run failed or a loss differed; the times are for the reader to judge.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
preset=d12 batches="64 4" T=1024 steps=30 rounds=3 outdir=build/compare_binaries data=""
old_env="" new_env=""
while [ $# -gt 0 ]; do
    case $1 in
        -h | --help) usage; exit 0 ;;
        -e) preset=$2; shift 2 ;;
        -b) batches=$2; shift 2 ;;
        -t) T=$2; shift 2 ;;
        -s) steps=$2; shift 2 ;;
        -r) rounds=$2; shift 2 ;;
        -o) outdir=$2; shift 2 ;;
        -d) data=$2; shift 2 ;;
        -O) old_env=$2; shift 2 ;;
        -N) new_env=$2; shift 2 ;;
        -*) echo "error: unknown option $1 (--help lists them)" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# = 2 ] || { echo "error: give two binaries, OLD and NEW (--help)" >&2; exit 2; }
old=$1 new=$2
for b in "$old" "$new"; do
    [ -x "$b" ] || { echo "error: $b is not an executable train_gpt2cu" >&2; exit 2; }
done
for a in $old_env $new_env; do
    case $a in
        [A-Za-z_]*=*) ;;
        *) echo "error: -O / -N take VAR=VALUE assignments (got '$a')" >&2; exit 2 ;;
    esac
done
# numpy (find_python.sh's Python) only to write the random shards; the summary needs python3 alone.
PY=$(bash scripts/deps/find_python.sh) || PY=""
mkdir -p "$outdir"
if [ -n "$data" ]; then
    # shellcheck disable=SC2086  # the glob is expanded only to check that it names a file
    ls $data >/dev/null 2>&1 || { echo "error: -d $data names no file" >&2; exit 2; }
elif ! ls "$outdir"/shards/*_train_*.bin >/dev/null 2>&1; then
    [ -n "$PY" ] || { echo "error: no Python with numpy to write the random shards (scripts/deps/find_python.sh; or give -d)" >&2; exit 1; }
    "$PY" scripts/ref/train_gpt2.py --random-shards "$outdir/shards" --num-tokens 4000000 --seed 7 \
        >/dev/null || { echo "error: could not write random shards to $outdir/shards" >&2; exit 1; }
fi
failed=0
for B in $batches; do
    for r in $(seq 1 "$rounds"); do
        for side in old new; do
            bin=$old envs=$old_env
            [ "$side" = new ] && bin=$new envs=$new_env
            json=$outdir/$side.B$B.r$r.json
            rm -f "$json"
            # shellcheck disable=SC2086  # the assignments are split into words on purpose
            if ! env $envs "$bin" -e "$preset" -b "$B" -t "$T" -x "$steps" -i "${data:-$outdir/shards/*_train_*.bin}" \
                --json-summary "$json" >"$outdir/$side.B$B.r$r.log" 2>&1; then
                echo "FAIL $side B=$B round $r: see $outdir/$side.B$B.r$r.log"
                failed=1
            fi
        done
    done
done
# shellcheck disable=SC2086  # one argument a B
"${PY:-python3}" - "$outdir" "$rounds" "$old $old_env" "$new $new_env" $batches <<'EOF' || failed=1
import json, os, statistics, sys
outdir, rounds, old, new, batches = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
print(f"OLD {old.strip()}\nNEW {new.strip()}")
print("| B | OLD step ms | NEW step ms | NEW/OLD | OLD wall ms | NEW wall ms | NEW/OLD | losses |")
print("|---|---|---|---|---|---|---|---|")
bad = False
ratios = []
for B in batches:
    runs = {}
    for side in ("old", "new"):
        runs[side] = []
        for r in range(1, rounds + 1):
            path = f"{outdir}/{side}.B{B}.r{r}.json"
            if os.path.exists(path):
                runs[side].append(json.load(open(path)))
    if not runs["old"] or not runs["new"]:
        print(f"| {B} | (runs failed) | | | | | | |")
        bad = True
        continue
    med = {s: statistics.median(x["median_ms"] for x in runs[s]) for s in runs}
    wall = {s: statistics.median(x["wall_ms"] for x in runs[s]) for s in runs}
    ref = runs["old"][0]["losses"]
    same = all(x["losses"] == ref for x in runs["new"] + runs["old"])
    bad = bad or not same
    print(f"| {B} | {med['old']:.3f} | {med['new']:.3f} | {med['new'] / med['old']:.4f} | "
          f"{wall['old']:.3f} | {wall['new']:.3f} | {wall['new'] / wall['old']:.4f} | "
          f"{'bitwise equal' if same else 'DIFFER'} |")
    pairs = zip(runs["old"], runs["new"])
    ratios.append(f"B={B}: " + " ".join(f"{n['median_ms'] / o['median_ms']:.4f}" for o, n in pairs))
print("NEW/OLD GPU step of each round (its OLD and NEW runs back to back): " + "; ".join(ratios))
sys.exit(1 if bad else 0)
EOF
exit $failed
