#!/usr/bin/env bash
# bench.sh: our trainer against the PyTorch reference (torch.compile), side by side, in one
# invocation on the same GPU: same model, random init, data, B, T and precision per config.
# Prints one table at the end (device, date, commit): median step time (warm-up steps
# discarded), tok/s, MFU, device memory, and our speed as a ratio of PyTorch's tok/s (> 1 means
# we are faster; the fastest PyTorch row of each config, over its attention backends and
# torch.compile modes, is the baseline of every ratio).
#
#   scripts/bench/bench.sh [-s STEPS] [-d DATA_GLOB] [-o OUTDIR] [-a BACKENDS] [-M MODES] [-g GPUS] [-k]
#                    [CONFIG ...]
#
# CONFIG is preset:B:T:precision[:rN][:ours], e.g. d12:64:1024:bf16. Default set:
#   d12:64:1024:bf16 d12:4:1024:bf16 d12:4:1024:fp32 d24:16:1024:bf16
# :rN runs ours with --recompute N (0-2; PyTorch keeps every activation either way) and :ours
# runs ours alone (for a B where PyTorch is known not to fit), e.g. d48:33:1024:bf16:r2:ours.
# Each config runs build/<precision>/train_gpt2cu (built with `make PRECISION=...` when missing)
# and scripts/ref/train_gpt2.py --compile --fused-adamw --tf32 (TF32 on for both in fp32) once per
# SDPA backend in BACKENDS (comma-separated from auto,flash,cudnn,efficient,math) and
# torch.compile mode in MODES. Default backends: flash and cudnn for bf16 (PyTorch's two fastest
# on Hopper), efficient for fp32 (flash and cudnn take only 16-bit inputs). Every row is listed;
# the fastest is the baseline.
#   -M MODES   torch.compile modes, comma-separated from default, reduce-overhead, max-autotune,
#              max-autotune-no-cudagraphs (default: default,reduce-overhead,max-autotune-no-cudagraphs,
#              and max-autotune too for configs with B <= 16).
#              reduce-overhead and max-autotune replay the step as CUDA graphs (the fair opponent
#              at small B, where launch overhead shows); the max-autotune modes also time Triton
#              and cuBLAS kernels at compile time (about 3-5 minutes a config on an H200, less
#              from the inductor's cache on the same machine). On an H200 the one without graphs
#              ran 0.8% faster than the default mode at d12 B=64, and max-autotune 3.4% faster
#              than reduce-overhead at d12 B=4; at d12 B=64 max-autotune's one run failed
#              (docs/results.md), hence the B <= 16 rule. Their logs show inductor's "out of
#              resource" rejections of Triton configs: not failures.
# Step time, both sides: wall clock from the start of a step (after the previous one finished)
# to its end, synchronized: PyTorch's loop times its whole step (loading the batch, the
# compiled forward and backward, clipping, AdamW) with perf_counter around torch.cuda.synchronize;
# ours is train_gpt2cu's "wall clock" (filling the batch, launching the step's CUDA graph,
# waiting for it), not its GPU-only time between CUDA events, which leaves out the host's part.
#   -s STEPS   steps per run (default 30). Ours discards its first 2 (plan building, graph
#              capture), PyTorch its first 5 (compilation); the median of the rest is reported.
#   -d GLOB    train shards; default: random-token shards written to OUTDIR/shards. The step
#              time depends on the tokens only through the embedding's backward, which sums
#              each token's rows; it splits long runs (real text repeats a newline thousands of
#              times a batch), so random and real tokens time alike: compare_binaries.sh -d
#              checks that.
#   -o OUTDIR  logs and JSON summaries (default $OUT or build/bench).
#   -g GPUS    GPUs per run (default 1), or a comma-separated list of counts run in turn (-g 1,2).
#              With N > 1 ours runs as scripts/run/launch.sh -n N build/<prec>/train_gpt2cu and
#              PyTorch under torchrun (DDP over NCCL), B being the micro-batch per GPU on both
#              sides; the table then gives total tok/s (all GPUs), MFU and memory per GPU, and
#              for N > 1 when the list holds 1, each system's scaling efficiency
#              eff = tok/s(N) / (N x tok/s(1)). NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
#              TORCH_SYMM_MEM_DISABLE_MULTICAST=1 unless set). -g 1 is the one-GPU table as before.
#   -k         keep: reuse the results of runs that already succeeded in OUTDIR (to finish a
#              benchmark that an outer time limit cut short; the table covers every config).
# A config that fails or runs out of memory gets a row saying so; the others still run. Each
# run is limited to LLMC_BENCH_TIMEOUT seconds (default 420). Exit code 1 when any run failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
steps=30
data=""
outdir=${OUT:-build/bench}
backends=""
modes=""  # without -M: the default list, per config (below)
modes_given=0
keep=0
gpus=1
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
[ "${1:-}" = --help ] && { usage; exit 0; }
while getopts "s:d:o:a:M:g:kh" opt; do
    case $opt in
        s) steps=$OPTARG ;;
        d) data=$OPTARG ;;
        o) outdir=$OPTARG ;;
        a) backends=$OPTARG ;;
        M) modes=$OPTARG modes_given=1 ;;
        g) gpus=$OPTARG ;;
        k) keep=1 ;;
        h) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -gt 0 ]; then configs=("$@"); else
    configs=(d12:64:1024:bf16 d12:4:1024:bf16 d12:4:1024:fp32 d24:16:1024:bf16)
fi
if ! [[ "$steps" =~ ^[0-9]+$ ]] || [ "$steps" -lt 8 ]; then
    echo "error: -s must be a number >= 8 (PyTorch discards 5 warm-up steps), got '$steps'" >&2
    exit 2
fi
for c in "${configs[@]}"; do
    if ! [[ "$c" =~ ^d(12|24|36|48):[0-9]+:[0-9]+:(bf16|fp32)(:r[0-2])?(:ours)?$ ]]; then
        echo "error: config '$c' is not preset:B:T:precision[:rN][:ours] (e.g. d12:64:1024:bf16)" >&2
        exit 2
    fi
done
for b in ${backends//,/ }; do
    case $b in auto | flash | cudnn | efficient | math) ;; *)
        echo "error: -a takes auto,flash,cudnn,efficient,math; got '$b'" >&2
        exit 2
        ;;
    esac
done
for m in ${modes//,/ }; do
    case $m in default | reduce-overhead | max-autotune | max-autotune-no-cudagraphs) ;; *)
        echo "error: -M takes default,reduce-overhead,max-autotune,max-autotune-no-cudagraphs; got '$m'" >&2
        exit 2
        ;;
    esac
done
[ $modes_given = 0 ] || [ -n "${modes//,/}" ] || { echo "error: -M needs at least one mode" >&2; exit 2; }
if ! [[ "$gpus" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; then
    echo "error: -g takes GPU counts, e.g. 2 or 1,2; got '$gpus'" >&2
    exit 2
fi
multi=0
have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
for n in ${gpus//,/ }; do
    [ "$n" -gt 1 ] && multi=1
    if [ "$n" -gt 1 ] && [ "$have" -gt 0 ] && [ "$n" -gt "$have" ]; then
        echo "error: -g asks for $n GPUs, nvidia-smi lists $have" >&2
        exit 2
    fi
done
if [ $multi = 1 ]; then  # NVLink multicast can take a shared host's GPUs down: keep it off
    export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
    export TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
    export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
fi
# The PyTorch that runs the reference: LLMC_PYTHON, else the first python3 with torch.
PY=${LLMC_PYTHON:-}
if [ -z "$PY" ]; then
    PY=$(python3 -c 'import torch' >/dev/null 2>&1 && command -v python3 || bash scripts/deps/find_python.sh) || {
        echo "error: no python3 here can import torch; set LLMC_PYTHON to one that can" >&2
        exit 1
    }
fi
TIMEOUT=${LLMC_BENCH_TIMEOUT:-420}
mkdir -p "$outdir"
export PYTHONUNBUFFERED=1
if [ -z "$data" ]; then
    if ! ls "$outdir"/shards/*_train_*.bin >/dev/null 2>&1; then
        "$PY" scripts/ref/train_gpt2.py --random-shards "$outdir/shards" --num-tokens 4000000 --seed 7 \
            >/dev/null || { echo "error: could not write random shards to $outdir/shards" >&2; exit 1; }
    fi
    data="$outdir/shards/*_train_*.bin"
fi

# The trainer of one precision: build/<prec>/train_gpt2cu, built here when missing.
trainer() {
    local prec=$1 bin="build/$1/train_gpt2cu"
    if [ ! -x "$bin" ]; then
        echo "== building $bin (make PRECISION=${prec^^})" >&2
        make -j"$(nproc)" PRECISION="${prec^^}" "$bin" >"$outdir/build_$prec.log" 2>&1 ||
            echo "   build failed: see $outdir/build_$prec.log" >&2
    fi
    [ -x "$bin" ] && echo "$bin"
}

# run TAG COMMAND...: one benchmark run, its log in OUTDIR/TAG.log and summary in TAG.json.
# With -k a run whose summary exists is not repeated.
run() {
    local tag=$1 rc=0
    shift
    if [ "$keep" = 1 ] && [ -s "$outdir/$tag.json" ]; then
        echo "   $tag: kept from an earlier run"
        return
    fi
    rm -f "$outdir/$tag.json"
    local t0=$SECONDS
    timeout "$TIMEOUT" "$@" --json-summary "$outdir/$tag.json" >"$outdir/$tag.log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        rm -f "$outdir/$tag.json"
        local why="exit code $rc"
        [ $rc = 124 ] && why="timed out after ${TIMEOUT}s"
        local msg
        msg=$(grep -E "^(error|[A-Za-z.]*Error)" "$outdir/$tag.log" | tail -n 1 | cut -c1-160)
        [ -n "$msg" ] && why="$why: $msg"
        # Inductor's autotuning logs a Triton config that asks for too much shared memory as
        # "OutOfMemoryError: out of resource" and goes on: not the device memory running out.
        # (Read whole, not by grep -q: under pipefail its early exit would fail the pipeline.)
        [ -n "$(grep -iE "out of memory|cudaErrorMemoryAllocation|OutOfMemoryError" "$outdir/$tag.log" |
            grep -viE "out of resource")" ] && why="out of memory"
        echo "$why" >"$outdir/$tag.err"
        nfail=$((nfail + 1))
        echo "   $tag: FAILED ($why); last lines of $outdir/$tag.log:"
        tail -n 4 "$outdir/$tag.log" | sed 's/^/     /'
    else
        rm -f "$outdir/$tag.err"
        echo "   $tag: $(grep -E '^summary' "$outdir/$tag.log" | tail -n 1) ($((SECONDS - t0)) s)"
    fi
}

# not_run TAG WHY: a run that could not start; its row says why.
not_run() {
    echo "$2" >"$outdir/$1.err"
    rm -f "$outdir/$1.json"
    echo "   ours: $2"
    nfail=$((nfail + 1))
}

tags=()
nfail=0
for c in "${configs[@]}"; do
    IFS=: read -r model B T prec opt1 opt2 <<<"$c"
    rec="" only=0
    for o in $opt1 $opt2; do
        case $o in r?) rec=${o#r} ;; ours) only=1 ;; esac
    done
    tag="${model}_b${B}_t${T}_${prec}${rec:+_r$rec}"
    dtype=float32
    [ "$prec" = bf16 ] && dtype=bfloat16
    list=$backends
    [ -z "$list" ] && { [ "$prec" = bf16 ] && list=flash,cudnn || list=efficient; }
    # One PyTorch variant per backend and mode: "BACKEND" (mode default, the tags of earlier
    # runs) or "BACKEND+MODE".
    variants=""
    [ $only = 1 ] && list=""
    config_modes=$modes
    if [ -z "$config_modes" ]; then
        config_modes=default,reduce-overhead,max-autotune-no-cudagraphs
        [ "$B" -le 16 ] && config_modes+=,max-autotune
    fi
    for b in ${list//,/ }; do
        for m in ${config_modes//,/ }; do
            v=$b
            [ "$m" = default ] || v="$b+$m"
            variants+="${variants:+,}$v"
        done
    done
    echo "== $c"
    bin=$(trainer "$prec")
    for n in ${gpus//,/ }; do
        sfx=""  # one GPU keeps the tags of the one-GPU table (-k finds earlier runs)
        [ "$n" -gt 1 ] && sfx="_g$n"
        ours=("$bin")
        [ "$n" -gt 1 ] && ours=(bash scripts/run/launch.sh -n "$n" "$bin")
        torch=("$PY" scripts/ref/train_gpt2.py)
        [ "$n" -gt 1 ] && torch=("$PY" -m torch.distributed.run --standalone --nproc_per_node "$n"
                                 scripts/ref/train_gpt2.py)
        if [ -z "$bin" ]; then
            not_run "ours_$tag$sfx" "build/$prec/train_gpt2cu is missing and could not be built (make PRECISION=${prec^^} build/$prec/train_gpt2cu)"
        elif [ "$n" -gt 1 ] && [ ! -f scripts/run/launch.sh ]; then
            not_run "ours_$tag$sfx" "scripts/run/launch.sh (train_gpt2cu's multi-GPU launcher) is missing"
        else
            run "ours_$tag$sfx" "${ours[@]}" -i "$data" -e "$model" -b "$B" -t "$T" -x "$steps" \
                -l 1e-4 --tf32 1 ${rec:+--recompute "$rec"}
        fi
        for v in ${variants//,/ }; do
            b=${v%%+*} m=default
            [ "$v" = "$b" ] || m=${v#*+}
            run "torch_${v}_$tag$sfx" "${torch[@]}" -i "$data" -e "$model" -b "$B" -t "$T" \
                -x "$steps" -l 1e-4 --dtype "$dtype" --tf32 --compile --compile-mode "$m" \
                --fused-adamw --sdpa-backend "$b"
        done
    done
    tags+=("$tag:$variants")
done

# .carry/commit.txt first: on a machine that receives a copy of the working tree, git's HEAD
# can be older than the files (seen on the device machines: a tree reported an older commit).
commit=$(cat .carry/commit.txt 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
BENCH_GPUS=$gpus "$PY" - "$outdir" "$commit" "${tags[@]}" <<'EOF'
import datetime, json, os, sys
outdir, commit, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
if os.environ["BENCH_GPUS"] != "1":
    sys.path.insert(0, "scripts/bench")
    from bench_table import multi_gpu_table
    multi_gpu_table(outdir, commit, specs, [int(n) for n in os.environ["BENCH_GPUS"].split(",")])
    sys.exit(0)

sys.path.insert(0, "scripts/bench")
from bench_table import step_ms, variant_label

def load(name):
    try:
        r = json.load(open(f"{outdir}/{name}.json"))
        r["ms"] = step_ms(r)
        r["tok_s"] = r["B"] * r["T"] * 1000.0 / r["ms"]  # both sides: tokens / median step
        return r
    except (OSError, ValueError, KeyError, ZeroDivisionError):
        return None

def error(name):
    try:
        return "FAILED: " + open(f"{outdir}/{name}.err").read().strip()
    except OSError:
        return "FAILED: no summary"

device, lines, verdicts = None, [], []
for spec in specs:
    tag, variants = spec.split(":")
    ours = load(f"ours_{tag}")
    torch = {v: load(f"torch_{v}_{tag}") for v in variants.split(",") if v}
    ok = {v: r for v, r in torch.items() if r}
    best = max(ok, key=lambda v: ok[v]["tok_s"]) if ok else None
    base = ok[best] if best else None
    device = device or (ours or base or {}).get("device_name")
    ratio = ours["tok_s"] / base["tok_s"] if ours and base else None
    def row(system, r, name, extra):
        if r is None:
            lines.append(f"| {tag} | {system} | {error(name)} | | | | |")
            return
        mfu = ours["mfu"] * ours["median_ms"] / r["ms"] if ours and ours.get("mfu") else None
        mfu = f"{100 * mfu:.1f}%" if mfu else "-"
        ms = f"{r['ms']:.2f}" + (f" ({r['median_ms']:.2f} GPU)" if r.get("wall_ms") else "")
        lines.append(f"| {tag} | {system} | {ms} | {r['tok_s']:,.0f} | {mfu} | "
                     f"{r.get('peak_mem_mib', 0):,.0f} | {extra} |")
    row("train_gpt2cu", ours, f"ours_{tag}", f"**{ratio:.3f}**" if ratio else "n/a")
    for v, r in torch.items():
        extra = "1 (baseline)" if v == best else (f"{r['tok_s'] / base['tok_s']:.3f}" if r and base else "")
        row(f"PyTorch {variant_label(v)}", r, f"torch_{v}_{tag}", extra)
    verdicts.append(f"{tag}: ours / PyTorch tok/s = " + (f"{ratio:.3f}x (baseline {variant_label(best)})" if ratio else "n/a (ours alone)" if not torch else "n/a"))

date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
print(f"\n## bench.sh: {device or 'unknown device'}, {date}, commit {commit}\n")
print("| config | system | median ms/step | tok/s | MFU | memory MiB | tok/s vs PyTorch |")
print("|---|---|---|---|---|---|---|")
print("\n".join(lines))
print()
print("\n".join(verdicts))
print("\nms/step: the median wall-clock step after warm-up (ours: steps 3.., PyTorch: steps 6..), "
      "from the start of a step to its end, synchronized, on both sides (ours: batch fill, graph "
      "launch and the wait; its GPU-only time between CUDA events in brackets); tok/s = B*T over "
      "it. Ratio: our tok/s over the fastest PyTorch row of the config (> 1: we are faster). "
      "MFU: our FLOPs per step (6N + 12LCT per token) over the device's dense peak of that "
      "precision. Memory: ours is all device memory in use (cudaMemGetInfo, CUDA context "
      "included); PyTorch's is torch.cuda.max_memory_allocated (tensors only).")
EOF
[ $nfail -eq 0 ] || { echo "$nfail run(s) failed: their rows say why"; exit 1; }
