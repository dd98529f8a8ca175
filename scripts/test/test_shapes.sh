#!/usr/bin/env bash
# test_shapes.sh: the shape sweep, on a machine with an NVIDIA GPU. Configs no other test uses,
# drawn with a seed, each dumped by scripts/ref/train_gpt2.py on the GPU (float64 reference, PyTorch's
# bf16 autocast and TF32 errors in the trailer) and checked by test_gpt2cu in both precisions;
# train_gpt2cu trains a few of them for 3 steps, twice, with the default options.
#
#   scripts/test/test_shapes.sh [-s SEED] [-n CONFIGS] [-j JOBS] [-o OUTDIR] [-k]
#
#   -s SEED     seed of the draw and of each dump (default 13)
#   -n CONFIGS  configs in all (default 12, at least 4): four fixed ones, the rest drawn
#               from L 1-4, NH 1-8, head size 64 (C = 64 NH), V in {50257, 997}, B 1-5, maxT
#               1024, T in 1..1024 (a third each: T < 64, a prime, any), so that odd and prime
#               T, B*NH*T odd and C not a multiple of 128 come up. The fixed ones: the outside
#               reviewer's two, L=4 NH=5 (C=320) V=50257 B=3 T=333 and L=3 NH=6 (C=384) V=50257
#               B=5 T=200 (TF32's step losses), the smallest (L=1 NH=1 B=1 T=1) and
#               T = maxT = 1024 with NH=8 B=2.
#   -j JOBS     test runs at once on the one GPU (default 4; the runs are small)
#   -o OUTDIR   dumps, logs and the table (default $OUT/test_shapes or build/test_shapes)
#   -k          keep the dumps (up to ~1 GB each with V=50257) instead of deleting them at the end
#
# Per config: test_gpt2cu of build/bf16 with graphs on and off, and of build/fp32 with --tf32 1
# and 0, graphs on and off (six runs; each also reruns its AdamW steps in fresh contexts,
# autotuned and not, and checks the bits are the same). The second reviewer config is also
# dumped without a TF32 baseline (--tf32-baseline none), so that --tf32 1 takes the bound derived
# from the autocast baseline, as for a version 2 dump. Then train_gpt2cu (both precisions) for
# 3 steps on random tokens at the reviewer's shape and the first two drawn ones, twice each, the
# losses compared bit for bit, and the reviewer's `train_gpt2cu -e d48 -b 1 -t 333` (bf16) once.
# Prints one table: config, run, PASS/FAIL and the worst error / bound ratio per quantity
# (logits, loss, gradients, step losses; < 1 passes). Exits 1 if anything failed.
# Binaries missing from build/{bf16,fp32} are built first (minutes with 16 cores; build them in
# an earlier call to keep this one short). The sweep itself: about 3-5 minutes on an H100 with
# the defaults (an estimate; each stage prints its time).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
seed=13 count=12 jobs=4 keep=0
out=${OUT:+$OUT/test_shapes}
out=${out:-build/test_shapes}
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
while getopts "s:n:j:o:kh" opt; do
    case $opt in
        s) seed=$OPTARG ;;
        n) count=$OPTARG ;;
        j) jobs=$OPTARG ;;
        o) out=$OPTARG ;;
        k) keep=1 ;;
        h) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
for v in "$seed" "$count" "$jobs"; do
    [[ "$v" =~ ^[0-9]+$ ]] || { echo "error: -s, -n and -j take numbers, got '$v'" >&2; exit 2; }
done
[ "$count" -ge 4 ] && [ "$jobs" -ge 1 ] || { echo "error: -n must be >= 4 and -j >= 1" >&2; exit 2; }
nvidia-smi -L 2>/dev/null | grep -q '^GPU' || { echo "SKIP: no NVIDIA GPU visible (nvidia-smi lists none)"; exit 77; }
PY=$(bash scripts/deps/find_python.sh) || { echo "FAIL: no python with torch and numpy (scripts/deps/find_python.sh)"; exit 1; }
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    { echo "FAIL: $PY's torch sees no CUDA device; the dumps are written on the GPU"; exit 1; }
T0=$SECONDS
mkdir -p "$out"
rm -rf "${out:?}"/c* "$out"/d48 "$out"/train_* "$out"/emulated* "$out"/results.txt

# --- binaries -----------------------------------------------------------------------------
for p in bf16 fp32; do
    missing=()
    for b in test_gpt2cu train_gpt2cu; do [ -x "build/$p/$b" ] || missing+=("build/$p/$b"); done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "building ${missing[*]}"
        make -j"$(nproc)" PRECISION="${p^^}" "${missing[@]}" >"$out/build_$p.log" 2>&1 ||
            { echo "FAIL: could not build ${missing[*]} (see $out/build_$p.log)"; exit 1; }
    fi
done

# --- configs: name L NH C V B T maxT --------------------------------------------------------
configs=$("$PY" - "$seed" "$count" <<'EOF'
import random, sys
seed, count = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
primes = [p for p in range(2, 1025) if all(p % d for d in range(2, int(p ** 0.5) + 1))]
rows = [("reviewer", 4, 5, 50257, 3, 333), ("reviewer_tf32", 3, 6, 50257, 5, 200),
        ("smallest", 1, 1, 997, 1, 1), ("t_max", 2, 8, 50257, 2, 1024)]
while len(rows) < count:
    kind = len(rows) % 3
    T = rng.randint(1, 63) if kind == 0 else rng.choice(primes) if kind == 1 else rng.randint(1, 1024)
    rows.append((f"draw{len(rows) - 3}", rng.randint(1, 4), rng.randint(1, 8), rng.choice([50257, 997]),
                 rng.randint(1, 5), T))
for name, L, NH, V, B, T in rows:
    print(name, L, NH, 64 * NH, V, B, T, 1024)
EOF
) || { echo "FAIL: could not draw the configs"; exit 1; }
echo "configs (seed $seed):"
echo "$configs" | awk '{ printf "  c%02d %-9s L=%s NH=%s C=%s V=%s B=%s T=%s maxT=%s  B*NH*T=%d\n", NR, $1, $2, $3, $4, $5, $6, $7, $8, $6 * $3 * $7 }'

# --- a pool of background jobs: run_job DIR TAG COMMAND... --------------------------------------
# Each job leaves DIR/TAG.log and DIR/TAG.rc (its exit code; 124 when it timed out).
run_job() {
    local dir=$1 tag=$2
    shift 2
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    ( timeout 600 "$@" >"$dir/$tag.log" 2>&1; echo $? >"$dir/$tag.rc" ) &
}

# --- dumps and test_gpt2cu ------------------------------------------------------------------
RUNS=("bf16:1:1" "bf16:1:0" "fp32:1:1" "fp32:1:0" "fp32:0:1" "fp32:0:0")  # precision:tf32:graph
# The dumps first, DUMP_JOBS at once (each a PyTorch process on the GPU, ~20 s), then the tests.
DUMP_JOBS=${LLMC_SHAPES_DUMP_JOBS:-6}
dump_config() {  # dump_config DIR I NAME L NH C V B T maxT: the model, its state (and the derived one)
    local d=$1 i=$2 name=$3 L=$4 NH=$5 C=$6 V=$7 B=$8 T=$9 maxT=${10} t=$SECONDS
    if "$PY" scripts/ref/train_gpt2.py --n-layer "$L" --n-head "$NH" --n-embd "$C" --vocab-size "$V" \
        --block-size "$maxT" -b "$B" -t "$T" --random-biases --seed "$((seed + i))" -l 1e-3 -c 0.1 \
        --device cuda --write-model "$d/model.bin" --write-state "$d/state.bin" >"$d/dump.log" 2>&1; then
        echo 0 >"$d/dump.rc"
        echo "  c$(printf %02d "$i") dumped in $((SECONDS - t)) s"
    else
        echo 1 >"$d/dump.rc"
        echo "  c$(printf %02d "$i") dump FAILED (see $d/dump.log)"
        return
    fi
    if [ "$name" = reviewer_tf32 ]; then
        "$PY" scripts/ref/train_gpt2.py --n-layer "$L" --n-head "$NH" --n-embd "$C" --vocab-size "$V" \
            --block-size "$maxT" -b "$B" -t "$T" --random-biases --seed "$((seed + i))" -l 1e-3 \
            -c 0.1 --device cuda --tf32-baseline none --write-state "$d/state_derived.bin" \
            >"$d/dump_derived.log" 2>&1 && echo 0 >"$d/dump_derived.rc"
    fi
}
i=0
while read -r name L NH C V B T maxT; do
    i=$((i + 1))
    d=$(printf "%s/c%02d" "$out" "$i")
    mkdir -p "$d"
    echo "$name L=$L NH=$NH C=$C V=$V B=$B T=$T maxT=$maxT" >"$d/config.txt"
    while [ "$(jobs -rp | wc -l)" -ge "$DUMP_JOBS" ]; do wait -n; done
    dump_config "$d" "$i" "$name" "$L" "$NH" "$C" "$V" "$B" "$T" "$maxT" &
done <<<"$configs"
wait
i=0
while read -r name L NH C V B T maxT; do
    i=$((i + 1))
    d=$(printf "%s/c%02d" "$out" "$i")
    [ "$(cat "$d/dump.rc" 2>/dev/null)" = 0 ] || continue
    if [ -f "$d/dump_derived.rc" ]; then
        run_job "$d" "test_fp32_tf32-1_graph1_derived" build/fp32/test_gpt2cu --model "$d/model.bin" \
            --state "$d/state_derived.bin" --tf32 1 --graph 1
    fi
    for r in "${RUNS[@]}"; do
        IFS=: read -r p tf32 graph <<<"$r"
        tag="test_${p}_graph$graph"
        [ "$p" = fp32 ] && tag="test_fp32_tf32-$tf32${tag#test_fp32}"
        run_job "$d" "$tag" "build/$p/test_gpt2cu" --model "$d/model.bin" --state "$d/state.bin" \
            --tf32 "$tf32" --graph "$graph"
    done
done <<<"$configs"
wait
echo "dumps and test_gpt2cu: $((SECONDS - T0)) s"
# The CPU's TF32 emulation (inputs rounded to nearest) against cuBLAS's TF32 on the reviewer's
# shape: the two baselines should be alike; if cuBLAS truncated instead, the measured one would be
# ~3x larger, and dumps written on the CPU would need the emulation to truncate.
"$PY" scripts/ref/train_gpt2.py --n-layer 4 --n-head 5 --n-embd 320 --vocab-size 50257 --block-size 1024 \
    -b 3 -t 333 --random-biases --seed "$((seed + 1))" -l 1e-3 -c 0.1 --device cuda \
    --tf32-baseline emulate --write-state "$out/emulated_state.bin" >"$out/emulated.log" 2>&1 &&
    "$PY" - "$out/c01/dump.log" "$out/emulated.log" <<'EOF'
import re, sys
def base(path):  # the "tf32 (...) vs the reference: name value, ..." line as {name: value}
    line = next(l for l in open(path) if l.startswith("tf32"))
    return dict((n.strip(), float(v)) for n, v in
                re.findall(r"([a-z0-9 ]+) ([0-9.e+-]+)(?:,|$)", line.split(": ", 1)[1].strip()))
m, e = base(sys.argv[1]), base(sys.argv[2])
r = {k: m[k] / e[k] for k in m if e.get(k)}
grads = [r[k] for k in r if k.startswith("grad")]
print(f"TF32 baseline, measured (cuBLAS) / emulated (the CPU's rule) on the reviewer's shape: "
      f"logits {r['logits']:.2f}, gradients {min(grads):.2f}-{max(grads):.2f}, loss "
      f"{r['loss']:.2f}, step losses {r['step losses']:.2f}")
EOF
rm -f "$out/emulated_state.bin"

# --- train_gpt2cu: 3 steps, twice, default options ------------------------------------------
t=$SECONDS
for V in 50257 997; do
    "$PY" scripts/ref/train_gpt2.py --random-shards "$out/train_shards_$V" --num-tokens 200000 \
        --vocab-size "$V" --seed "$seed" >"$out/train_shards_$V.log" 2>&1 ||
        echo "  could not write random shards of V=$V (see $out/train_shards_$V.log)"
done
mkdir -p "$out/d48"
echo "d48 (GPT-2 1558M, NH=25) B=1 T=333" >"$out/d48/config.txt"
run_job "$out/d48" train_bf16_run1 build/bf16/train_gpt2cu -i "$out/train_shards_50257/*_train_*.bin" \
    -e d48 -b 1 -t 333 -x 3 --json-summary "$out/d48/train_bf16_run1.json"
trains=$(echo "$configs" | awk '$1 == "reviewer" || $1 ~ /^draw/ { print NR }' | head -n 3)
for k in $trains; do
    d=$(printf "%s/c%02d" "$out" "$k")
    read -r _ _ _ _ V B T _ <<<"$(echo "$configs" | sed -n "${k}p")"
    [ -s "$d/model.bin" ] || continue
    for p in bf16 fp32; do
        for rep in 1 2; do
            run_job "$d" "train_${p}_run$rep" "build/$p/train_gpt2cu" -i "$out/train_shards_$V/*_train_*.bin" \
                -e "$d/model.bin" -b "$B" -t "$T" -x 3 -l 1e-3 --seed 7 --json-summary "$d/train_${p}_run$rep.json"
        done
    done
done
wait
echo "train_gpt2cu runs: $((SECONDS - t)) s"

# --- the table --------------------------------------------------------------------------------
"$PY" - "$out" <<'EOF' | tee "$out/results.txt"
import glob, json, math, os, re, sys
out = sys.argv[1]
rows, passed, failed = [], 0, 0
def rc(path):
    try:
        return int(open(path).read().strip())
    except (OSError, ValueError):
        return None
for d in sorted(glob.glob(f"{out}/c*")) + [f"{out}/d48"]:
    if not os.path.isdir(d):
        continue
    cfg = open(f"{d}/config.txt").read().strip()
    if rc(f"{d}/dump.rc") not in (None, 0):
        rows.append((os.path.basename(d), cfg, "dump", "FAIL (see dump.log)", "", "", "", ""))
        failed += 1
        continue
    for log in sorted(glob.glob(f"{d}/test_*.log")):
        tag = os.path.basename(log)[5:-4]
        code = rc(log[:-4] + ".rc")
        text = open(log, errors="replace").read()
        m = re.search(r"worst err/bound: logits (\S+) loss (\S+) grads (\S+) steps (\S+)", text)
        ratios = [f"{float(x):.3f}" for x in m.groups()] if m else ["-"] * 4
        ok = code == 0 and m is not None  # exit 0 without its summary line: a SKIP, not a pass
        why = "" if ok else f" (exit {code}" + (", timed out" if code == 124 else "") + \
            ("" if m else ", no summary line") + ")"
        if not ok:
            fails = [l.split()[0] for l in text.splitlines() if l.rstrip().endswith("FAIL")]
            last = [l for l in text.splitlines() if l.startswith("error")]
            why += (": " + ", ".join(fails[:4])) if fails else (": " + last[-1][:80] if last else "")
        rows.append((os.path.basename(d), cfg, tag, "PASS" if ok else "FAIL" + why, *ratios))
        passed, failed = passed + ok, failed + (not ok)
    for p in ("bf16", "fp32"):
        runs = sorted(glob.glob(f"{d}/train_{p}_run*.json"))
        codes = [rc(x) for x in sorted(glob.glob(f"{d}/train_{p}_run*.rc"))]
        if not codes:
            continue
        losses = []
        for j in runs:
            try:
                losses.append(json.load(open(j))["losses"])
            except (OSError, ValueError, KeyError):
                pass
        ok = all(c == 0 for c in codes) and len(losses) == len(codes) and \
            all(len(l) == 3 and all(math.isfinite(v) for v in l) for l in losses)
        same = len(losses) < 2 or all(l == losses[0] for l in losses)
        what = f"3 steps, {len(codes)} run(s)" + (", bit-identical" if len(losses) > 1 and same else "")
        if losses:
            what += ": " + " ".join(f"{v:.6f}" for v in losses[0])
        good = ok and same
        if not good:
            what = ("runs differ: " + " / ".join(str(l) for l in losses)) if ok else \
                f"exit codes {codes} (see {d}/train_{p}_run*.log)"
        rows.append((os.path.basename(d), cfg, f"train_gpt2cu {p}", ("PASS " if good else "FAIL ") + what,
                     "-", "-", "-", "-"))
        passed, failed = passed + good, failed + (not good)
print("\n| # | config | run | result | logits | loss | grads | step losses |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
print("\nratios: the worst error / bound of each quantity in that run (a run passes at <= 1); "
      "bf16 bounds are multiples of PyTorch's bf16 autocast error, fp32 --tf32 1 bounds of its "
      "TF32 error, fp32 --tf32 0 bounds fixed (test_gpt2.cu). Every test_gpt2cu run also checks "
      "that fresh contexts (autotune on and off) repeat its step losses and parameters bit for bit.")
print(f"test_shapes: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
st=${PIPESTATUS[0]}
[ "$keep" = 1 ] || rm -f "$out"/c*/state*.bin
echo "test_shapes: $((SECONDS - T0)) s in all; table in $out/results.txt"
exit "$st"
