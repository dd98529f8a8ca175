#!/usr/bin/env bash
# step_profile.sh: where the time of a GPT-2 training step goes, without nsys: profile_gpt2cu
# --trace (CUPTI activity records of CUDA-graph replays of the real step, random tokens, no data
# files) at d12 T=1024, B=64 and B=4. For each run: the step's wall time (CUDA events, as the
# trainer times it), the busy time (union of the kernels, memcpys and memsets), the idle time,
# the largest gaps with the kernels on each side, the per-family table, the largest kernels, and
# the share of the GEMM-bound limit (the step's model FLOPs at cuBLASLt's peak, measured in the
# first run by a large square GEMM). A summary table of every run ends the output.
#
#   scripts/bench/step_profile.sh [--ab] [--steps N] [-o DIR] [-e d12] [-t 1024] [-b "64 4"]
#
#   (default)  one run per B with the switches of the environment; both reports printed
#   --ab       the defaults (base), then each step switch of llmc/context.cuh alone away from
#              them, per B: no branches and PDL (LLMC_BRANCHES=0 LLMC_PDL=0), only one kind of
#              branch (gemms / reduces / zeroing, PDL on), LLMC_PDL=0,
#              LLMC_LAYERNORM_BACKWARD_VARIANT=0 and =1, LLMC_CLASSIFIER_VARIANT=0, none (every
#              switch off, layernorm backward variant 0, classifier variant 0);
#              the base reports are printed whole, the others as summary rows (their reports
#              are in DIR)
#   --steps N  steps timed untraced, then traced (default 10; 5 with --ab)
#   -o DIR     every run's report (LABEL_bB.txt) and its records (LABEL_bB.csv: one line per
#              kernel, memcpy or memset; columns in llmc/step_timeline.h); default a new
#              directory under /tmp
#
# Needs ./profile_gpt2cu (make profile_gpt2cu) and CUPTI (libcupti.so; LLMC_CUPTI_LIB names it
# when the usual places lack it). Expected runtime on one H100 (estimated from the step times,
# not yet measured): each run spends ~10 s creating the model and autotuning cuBLASLt's plans,
# then 2 x (2 + N) steps (120 ms each at B=64, 9 ms at B=4); the first also times the peak GEMM
# (~3 s). Default: ~35 s; --ab (20 runs): ~4 minutes. The script prints its elapsed time.
set -uo pipefail
cd "$(dirname "$0")/../.."

ab=0 steps="" outdir="" preset=d12 T=1024 batches="64 4"
while [ $# -gt 0 ]; do
    case "$1" in
        --ab) ab=1; shift ;;
        --steps) steps=$2; shift 2 ;;
        -o) outdir=$2; shift 2 ;;
        -e) preset=$2; shift 2 ;;
        -t) T=$2; shift 2 ;;
        -b) batches=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "step_profile.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$steps" ] || steps=$([ "$ab" = 1 ] && echo 5 || echo 10)
[ -x ./profile_gpt2cu ] || { echo "step_profile.sh: ./profile_gpt2cu is missing: run make profile_gpt2cu first" >&2; exit 1; }
outdir=${outdir:-$(mktemp -d /tmp/step_profile.XXXXXX)}
mkdir -p "$outdir" || exit 1
SWITCHES="LLMC_BRANCHES LLMC_PDL LLMC_LAYERNORM_BACKWARD_VARIANT LLMC_CLASSIFIER_VARIANT"

# The configurations: LABEL and its environment (VAR=VALUE ...; "-" for none).
if [ "$ab" = 1 ]; then
    configs=(
        "base|-"
        "no-overlap|LLMC_BRANCHES=0 LLMC_PDL=0"
        "branches-gemms|LLMC_BRANCHES=gemms"
        "branches-reduces|LLMC_BRANCHES=reduces"
        "branches-zeroing|LLMC_BRANCHES=zeroing"
        "pdl-off|LLMC_PDL=0"
        "ln-bwd-variant0|LLMC_LAYERNORM_BACKWARD_VARIANT=0"
        "ln-bwd-variant1|LLMC_LAYERNORM_BACKWARD_VARIANT=1"
        "classifier-variant0|LLMC_CLASSIFIER_VARIANT=0"
        "none|LLMC_BRANCHES=0 LLMC_PDL=0 LLMC_LAYERNORM_BACKWARD_VARIANT=0 LLMC_CLASSIFIER_VARIANT=0"
    )
else
    env_now=""
    for v in $SWITCHES; do [ -n "${!v:-}" ] && env_now="$env_now $v=${!v}"; done
    configs=("env|${env_now:--}")
fi

start=$SECONDS
peak=0
results=()
failed=0
for B in $batches; do
    for c in "${configs[@]}"; do
        label=${c%%|*} envs=${c#*|}
        log="$outdir/${label}_b$B.txt" csv="$outdir/${label}_b$B.csv"
        # --ab: each configuration alone, whatever the caller's environment holds.
        cmd=(env)
        [ "$ab" = 1 ] && for v in $SWITCHES; do cmd+=(-u "$v"); done
        [ "$envs" != "-" ] && for e in $envs; do cmd+=("$e"); done
        cmd+=(./profile_gpt2cu -e "$preset" -b "$B" -t "$T" --graph 1 --trace "$steps"
              --csv "$csv" --label "$label" --peak-tflops "$peak")
        echo "== $label, B=$B: ${envs/#-/(no switches)}"
        if ! timeout 300 "${cmd[@]}" >"$log" 2>&1; then
            echo "FAILED (exit $?); last lines of $log:"
            tail -n 15 "$log" | sed 's/^/    /'
            failed=$((failed + 1))
            continue
        fi
        row=$(grep '^result |' "$log" | tail -n 1)
        results+=("$row")
        # The first run measured cuBLASLt's peak; the others reuse it (column 10 of the row).
        [ "$peak" = 0 ] && peak=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $10); print $10}')
        if [ "$label" = base ] || [ "$ab" = 0 ]; then
            sed -n '/^untraced steps/,/^result |/p' "$log" | grep -v '^result |'
        else
            grep '^untraced steps\|^traced steps' "$log"
        fi
        echo
    done
done

echo "## summary ($preset T=$T, $steps steps each; reports and CSVs in $outdir)"
echo
echo "| config | shape | untraced ms | vs base | traced ms | busy ms | idle ms | idle % | records | peak TFLOP/s | % of GEMM-bound limit |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for row in "${results[@]}"; do
    # Columns: 2 label, 3 shape, 4 untraced, 5 traced, 6 busy, 7 idle, 8 idle %, 9 records,
    # 10 peak, 11 share. "vs base": against the base row of the same shape.
    base=$(printf '%s\n' "${results[@]}" | awk -F'|' -v shape="$(echo "$row" | cut -d'|' -f3)" \
        '$2 ~ /^ base $/ && $3 == shape {print $4}')
    echo "$row" | awk -F'|' -v base="$base" '{
        delta = (base != "" && base + 0 > 0) ? sprintf("%+.2f%%", 100 * ($4 / base - 1)) : "-";
        printf "|%s|%s|%s| %s |%s|%s|%s|%s|%s|%s|%s|\n", $2, $3, $4, delta, $5, $6, $7, $8, $9, $10, $11
    }'
done
echo
echo "step_profile.sh: ${#results[@]} runs, $failed failed, $((SECONDS - start)) s"
[ "$failed" = 0 ]
