#!/usr/bin/env bash
# bench.sh: our trainer against the PyTorch reference (torch.compile), side by side, in one
# invocation on the same GPU, same model, data, B, T and precision. Prints one table: median
# step time (warm-up steps discarded), tok/s, MFU, device memory, and our time as a ratio of
# PyTorch's (< 1 means we are faster).
#
#   scripts/bench.sh [-s STEPS] [-d DATA_GLOB] [-o OUTDIR] [CONFIG ...]
#
# CONFIG is "d12:B:T:fp32" style (preset:B:T:precision); default: d12:4:1024:fp32 (TF32 on for
# both, PyTorch with --compile --flash --tf32). Our binary must be built with the precision the
# config names (make PRECISION=FP32|BF16); configs of the other precision are skipped.
# Without -d, random-token shards are written to OUTDIR/shards (step time does not depend on
# the token values).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=40
data=""
outdir=${OUT:-build/bench}
while getopts "s:d:o:h" opt; do
    case $opt in
        s) steps=$OPTARG ;;
        d) data=$OPTARG ;;
        o) outdir=$OPTARG ;;
        *) sed -n '2,14p' "$0"; exit 0 ;;
    esac
done
shift $((OPTIND - 1))
configs=("${@:-d12:4:1024:fp32}")
PY=${LLMC_PYTHON:-python3}
mkdir -p "$outdir"
if [ -z "$data" ]; then
    "$PY" scripts/train_gpt2.py --random-shards "$outdir/shards" --num-tokens 2000000 --seed 7 >/dev/null
    data="$outdir/shards/*_train_*.bin"
fi
built=$(./train_gpt2cu --help >/dev/null 2>&1 && strings train_gpt2cu | grep -q 'bf16 build' && echo bf16 || echo fp32)

rows=()
for c in "${configs[@]}"; do
    IFS=: read -r model B T prec <<<"$c"
    tag="${model}_b${B}_t${T}_${prec}"
    if [ "$prec" != "$built" ]; then
        echo "skip $c: train_gpt2cu is the $built build"
        continue
    fi
    dtype=float32; [ "$prec" = bf16 ] && dtype=bfloat16
    echo "== ours: $c"
    ./train_gpt2cu -i "$data" -e "$model" -b "$B" -t "$T" -x "$steps" -l 1e-4 --tf32 1 \
        --json-summary "$outdir/ours_$tag.json" >"$outdir/ours_$tag.log" 2>&1 \
        || { tail -5 "$outdir/ours_$tag.log"; echo "ours failed on $c"; }
    tail -n 1 "$outdir/ours_$tag.log"
    echo "== pytorch: $c"
    "$PY" scripts/train_gpt2.py -i "$data" -e "$model" -b "$B" -t "$T" -x "$steps" -l 1e-4 \
        --dtype "$dtype" --tf32 --compile --flash --json-summary "$outdir/torch_$tag.json" \
        >"$outdir/torch_$tag.log" 2>&1 || { tail -5 "$outdir/torch_$tag.log"; echo "pytorch failed on $c"; }
    tail -n 1 "$outdir/torch_$tag.log"
    rows+=("$tag")
done

"$PY" - "$outdir" "${rows[@]}" <<'EOF'
import json, os, sys
outdir, tags = sys.argv[1], sys.argv[2:]
def load(p):
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
print()
print("| config | system | median ms/step | tok/s | MFU | device memory MiB | ratio (ours/PyTorch time) |")
print("|---|---|---|---|---|---|---|")
for t in tags:
    o, p = load(f"{outdir}/ours_{t}.json"), load(f"{outdir}/torch_{t}.json")
    ratio = f"{o['median_ms'] / p['median_ms']:.3f}" if o and p else "n/a"
    if o and p and o.get("mfu") and not p.get("mfu"):  # same FLOPs per step for both
        p["mfu"] = o["mfu"] * o["median_ms"] / p["median_ms"]
    for name, r in (("train_gpt2cu", o), ("PyTorch compile", p)):
        if r is None:
            print(f"| {t} | {name} | failed | | | | |")
            continue
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
        print(f"| {t} | {name} | {r['median_ms']:.2f} | {r['tok_per_s']:.0f} | {mfu} | "
              f"{r.get('peak_mem_mib', 0):.0f} | {ratio if name == 'train_gpt2cu' else ''} |")
dev = (load(f"{outdir}/ours_{tags[0]}.json") or {}).get("device_name", "?") if tags else "?"
print(f"\ndevice: {dev}. Memory: ours is all device memory in use (cudaMemGetInfo, CUDA context "
      "included); PyTorch's is torch.cuda.max_memory_allocated (tensors only).")
EOF
