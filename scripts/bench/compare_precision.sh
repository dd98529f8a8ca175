#!/usr/bin/env bash
# compare_precision.sh: trains the fp32 and the bf16 build from the same random init (same
# preset and seed) on the same data in the same order, and compares the loss curves step by
# step. Bar: the curves agree within 0.02 (max |loss_bf16 - loss_fp32| over every step).
#
#   scripts/bench/compare_precision.sh [-d DATA_GLOB] [-o OUTDIR] [-e PRESET] [-s SEED] [-x STEPS]
#                                [-b B] [-t T] [-l LR] [-f TF32] [-a TOL]
#
#   -d GLOB   train shards. Default: the first of data/tinyshakespeare/, build/device_data/
#             tinyshakespeare/ (scripts/test/device_check.sh writes it), build/bench/shards/ that
#             has *_train_*.bin files, else random-token shards written to OUTDIR/shards (on
#             random tokens the loss barely moves, so that comparison is weak: said so).
#   -o DIR    logs, losses.csv (step, loss_fp32, loss_bf16, diff), losses.png (default $OUT or
#             build/compare_precision)
#   -e d12 -s 42 -x 200 -b 8 -t 1024 -l 3e-4   model preset, seed, steps, batch, length, lr
#   -f 0|1    TF32 in the fp32 run (default 0: full fp32 matmuls, the reference)
#   -a TOL    the bar on max |diff| (default 0.02)
#   -n 0|1    also train the fp32 build with TF32 matmuls (default 1, when -f is 0) and print its
#             max |diff| against fp32: how far a small, harmless perturbation alone moves the curve,
#             the scale to read the bf16 gap against (not part of the bar)
#   -p 0|1    also train scripts/ref/train_gpt2.py (PyTorch, eager, on the GPU) in fp32 and in bf16
#             autocast on the same data, preset, seed, B, T, lr and steps, and print PyTorch's own
#             bf16 gap: what bf16 does to this curve in the reference implementation (default 0;
#             not part of the bar)
# Every gap is also printed over 20-step means (the step-to-step noise averaged out).
# Prints max |diff| over all steps and over the last 50, and PASS / FAIL; exit code 1 on FAIL.
# The trainers are build/fp32/train_gpt2cu and build/bf16/train_gpt2cu (built when missing).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
data="" outdir=${OUT:-build/compare_precision} preset=d12 seed=42 steps=200 B=8 T=1024 lr=3e-4
tf32=0 tol=0.02 noise=1 torch_runs=0
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
[ "${1:-}" = --help ] && { usage; exit 0; }
while getopts "d:o:e:s:x:b:t:l:f:a:n:p:h" opt; do
    case $opt in
        d) data=$OPTARG ;;
        o) outdir=$OPTARG ;;
        e) preset=$OPTARG ;;
        s) seed=$OPTARG ;;
        x) steps=$OPTARG ;;
        b) B=$OPTARG ;;
        t) T=$OPTARG ;;
        l) lr=$OPTARG ;;
        f) tf32=$OPTARG ;;
        a) tol=$OPTARG ;;
        n) noise=$OPTARG ;;
        p) torch_runs=$OPTARG ;;
        h) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
if ! [[ "$steps" =~ ^[0-9]+$ ]] || [ "$steps" -lt 1 ]; then
    echo "error: -x must be a positive number of steps, got '$steps'" >&2
    exit 2
fi
mkdir -p "$outdir"
# Parsing needs only the standard library; the plot needs matplotlib, looked for below.
PY=python3
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import matplotlib' >/dev/null 2>&1; then
        PY=$p
        break
    fi
done

if [ -z "$data" ]; then
    for d in data/tinyshakespeare build/device_data/tinyshakespeare build/bench/shards; do
        if ls "$d"/*_train_*.bin >/dev/null 2>&1; then
            data="$d/*_train_*.bin"
            break
        fi
    done
fi
if [ -z "$data" ]; then
    echo "note: no tinyshakespeare shards found; writing random-token shards (the loss barely"
    echo "      moves on random tokens: a weak comparison; pass -d for real text)"
    TPY=${LLMC_PYTHON:-$(bash scripts/deps/find_python.sh)} || true
    "$TPY" scripts/ref/train_gpt2.py --random-shards "$outdir/shards" --num-tokens 2000000 --seed 7 \
        >/dev/null || { echo "error: could not write random shards" >&2; exit 1; }
    data="$outdir/shards/*_train_*.bin"
fi
if ! ls $data >/dev/null 2>&1; then
    echo "error: no file matches the shard pattern '$data'" >&2
    exit 1
fi
echo "data: $data | $preset seed $seed, $steps steps, B=$B T=$T lr $lr, fp32 run with --tf32 $tf32"

runs="fp32 bf16"
[ "$noise" = 1 ] && [ "$tf32" = 0 ] && runs+=" tf32"
for run in $runs; do
    prec=$run
    [ "$run" = tf32 ] && prec=fp32
    bin=build/$prec/train_gpt2cu
    if [ ! -x "$bin" ]; then
        echo "== building $bin (make PRECISION=${prec^^})"
        make -j"$(nproc)" PRECISION="${prec^^}" "$bin" >"$outdir/build_$prec.log" 2>&1 || {
            echo "error: building $bin failed, see $outdir/build_$prec.log" >&2
            exit 1
        }
    fi
    flags=()
    [ "$run" = fp32 ] && flags=(--tf32 "$tf32")
    [ "$run" = tf32 ] && flags=(--tf32 1)
    t0=$SECONDS
    if ! "$bin" -i "$data" -e "$preset" --seed "$seed" -x "$steps" -b "$B" -t "$T" -l "$lr" "${flags[@]}" \
        >"$outdir/train_$run.log" 2>&1; then
        echo "error: the $run run failed; last lines of $outdir/train_$run.log:" >&2
        tail -n 8 "$outdir/train_$run.log" >&2
        exit 1
    fi
    echo "$run: $(grep '^summary' "$outdir/train_$run.log") ($((SECONDS - t0)) s)"
done

if [ "$torch_runs" = 1 ]; then
    TPY=${LLMC_PYTHON:-$(bash scripts/deps/find_python.sh)} || { echo "error: no python with torch" >&2; exit 1; }
    for dt in float32 bfloat16; do
        t0=$SECONDS
        if ! "$TPY" scripts/ref/train_gpt2.py -i "$data" -e "$preset" --seed "$seed" -x "$steps" -b "$B" \
            -t "$T" -l "$lr" --dtype "$dt" --device cuda >"$outdir/train_torch_$dt.log" 2>&1; then
            echo "error: the PyTorch $dt run failed; last lines of $outdir/train_torch_$dt.log:" >&2
            tail -n 8 "$outdir/train_torch_$dt.log" >&2
            exit 1
        fi
        echo "torch $dt: $((SECONDS - t0)) s"
    done
fi

"$PY" - "$outdir" "$steps" "$tol" <<'EOF'
import os, re, sys
outdir, steps, tol = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
# train_gpt2.cu prints "step %5d/%d | loss %.6f | norm ... | lr ... | ms | tok/s | MFU".
line = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) \|")
def losses(prec):
    out = {}
    for l in open(f"{outdir}/train_{prec}.log"):  # the reference prints the same step lines
        m = line.match(l)
        if m:
            out[int(m.group(1))] = float(m.group(3))
    return out
fp32, bf16 = losses("fp32"), losses("bf16")
missing = [s for s in range(1, steps + 1) if s not in fp32 or s not in bf16]
if missing:
    sys.exit(f"error: {len(missing)} of {steps} steps have no loss line in both logs "
             f"(first: step {missing[0]}); see {outdir}/train_*.log")
rows = [(s, fp32[s], bf16[s], bf16[s] - fp32[s]) for s in range(1, steps + 1)]
with open(f"{outdir}/losses.csv", "w") as f:
    f.write("step,loss_fp32,loss_bf16,diff\n")
    for r in rows:
        f.write("%d,%.6f,%.6f,%.6f\n" % r)
def worst(rs):
    r = max(rs, key=lambda r: abs(r[3]))
    return abs(r[3]), r[0]
d_all, s_all = worst(rows)
d_last, s_last = worst(rows[-50:])
nonfinite = [r[0] for r in rows if not all(map(lambda x: x == x and abs(x) != float("inf"), r[1:3]))]
print(f"wrote {outdir}/losses.csv")
for s in sorted({1, steps // 4, steps // 2, 3 * steps // 4, steps} - {0}):
    print(f"  step {s:4d}: fp32 {fp32[s]:.4f}  bf16 {bf16[s]:.4f}  diff {bf16[s] - fp32[s]:+.4f}")
print(f"max |diff| over all {steps} steps: {d_all:.4f} (step {s_all})")
print(f"max |diff| over the last {min(50, steps)} steps: {d_last:.4f} (step {s_last})")
def mean_gap(a, b, w=20):  # max |difference of w-step means| (the step-to-step noise averaged)
    s = [k for k in range(1, steps + 1) if k in a and k in b]
    if len(s) < w:
        return float("nan")
    return max(abs(sum(a[k] - b[k] for k in s[i:i + w]) / w) for i in range(len(s) - w + 1))
print(f"over 20-step means: max |bf16 - fp32| {mean_gap(bf16, fp32):.4f}")
if os.path.exists(f"{outdir}/train_tf32.log"):
    tf32 = losses("tf32")
    ref = [(s, abs(tf32[s] - fp32[s])) for s in range(1, steps + 1) if s in tf32]
    if ref:
        r = max(ref, key=lambda r: r[1])
        r50 = max(ref[-50:], key=lambda r: r[1])
        print(f"for scale, fp32 with TF32 matmuls vs fp32: max |diff| {r[1]:.4f} (step {r[0]}), "
              f"{r50[1]:.4f} over the last 50 steps, {mean_gap(tf32, fp32):.4f} over 20-step means")
if os.path.exists(f"{outdir}/train_torch_bfloat16.log"):
    t32, t16 = losses("torch_float32"), losses("torch_bfloat16")
    ref = [(s, abs(t16[s] - t32[s])) for s in range(1, steps + 1) if s in t16 and s in t32]
    if ref:
        r = max(ref, key=lambda r: r[1])
        print(f"for scale, PyTorch's own bf16 autocast vs its fp32: max |diff| {r[1]:.4f} "
              f"(step {r[0]}), {mean_gap(t16, t32):.4f} over 20-step means")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    a.plot([r[0] for r in rows], [r[1] for r in rows], label="fp32")
    a.plot([r[0] for r in rows], [r[2] for r in rows], label="bf16", alpha=0.8)
    a.set_ylabel("train loss"); a.legend()
    b.plot([r[0] for r in rows], [r[3] for r in rows], color="k")
    b.axhline(tol, ls="--", color="r"); b.axhline(-tol, ls="--", color="r")
    b.set_ylabel("bf16 - fp32"); b.set_xlabel("step")
    fig.tight_layout(); fig.savefig(f"{outdir}/losses.png", dpi=100)
    print(f"wrote {outdir}/losses.png")
except ImportError:
    print("no matplotlib in this python: no plot (the CSV has the curves)")
ok = d_all <= tol and not nonfinite
print(f"{'PASS' if ok else 'FAIL'}: bf16 and fp32 loss curves agree within {tol}"
      + ("" if ok else f" (max |diff| {d_all:.4f}" + (f", non-finite losses at steps {nonfinite[:5]}" if nonfinite else "") + ")"))
sys.exit(0 if ok else 1)
EOF
