#!/usr/bin/env bash
# device_check.sh: the whole GPU check in one call, for a machine with an NVIDIA GPU.
#
#   scripts/test/device_check.sh [--only STAGE,...] [--skip STAGE,...] [--resume] [--bench-args "ARGS"]
#
# Stages, in this order (default: all):
#   build     builds only what is missing (binaries carried in from a build machine for sm_90
#             are used as they are): the default precision's test_gpt2cu and per-op tests,
#             build/{bf16,fp32}/train_gpt2cu, build/{bf16,fp32}/dev/bench/bench_ops,
#             build/bf16/dev/bench/bench_attention (when dev/bench/bench_attention.cu exists). Always runs.
#   dumps     PyTorch reference dumps: the small awkward config and GPT-2 d12 (B=4 T=64)
#   tests     every per-op test of the default build; test_gpt2cu on both dumps, graphs on/off
#   shapes    scripts/test/test_shapes.sh: 12 seeded shapes in both precisions, TF32 and graphs on and
#             off, train_gpt2cu twice at three of them (its own table; about 3-5 minutes)
#   sanitize  compute-sanitizer memcheck and synccheck on test_gpt2cu (small config), racecheck
#             on test_wgmma_tiles (the reason is at the stage)
#   benchops  dev/bench/bench_ops of both precisions, dev/bench/bench_attention if present
#   hotspots  on sm_90 with ncu: warp-stall samples per SASS instruction of our Hopper kernels
#             (the GELU GEMMs in bench_gelu_gemm at 65536 rows, the flash attention forward,
#             fused backward and dq / dk/dv kernels in bench_attention at B=64 T=1024), summed by
#             scripts/bench/ncu_hotspots.py (about a minute; the CSVs stay in the logs)
#   bench     scripts/bench/bench.sh with its four default configs (ours vs PyTorch compile)
#   compare   scripts/bench/compare_precision.sh -p 1 (fp32 vs bf16 loss curves, 200 steps; PyTorch's own
#             bf16 autocast gap for scale)
#   pipeline  loader cost (prefetch / sync / no loading) and tokenizer vs tiktoken
#   runs      scripts/test/test_resume.sh and scripts/test/test_generate.sh; a real d12 run on tiny
#             Shakespeare (300 steps, cosine, validation every 50, samples) plotted by
#             scripts/run/plot.py into $OUT/run.png; the largest B the trainer prints for d24, d36
#             and d48 (no recompute), each trained for 4 steps
#   multigpu  scripts/test/test_multi_gpu.sh (data parallel, ZeRO-1, resume across GPU counts, scaling,
#             failure paths; about 4 minutes on 2 H200s) when 2 or more GPUs are visible, else SKIP
# A stage that needs the dumps or the tinyshakespeare shards makes them when they are missing.
# The whole set takes longer than one 10-minute device call: split it, e.g. (times are
# estimates, not yet measured; each stage prints its own)
#   --only dumps,tests,sanitize,benchops   builds nothing when the binaries are carried in
#   --only shapes                          the shape sweep alone
#   --only bench                           PyTorch compiles once per config and SDPA backend
#   --only compare,pipeline
# --bench-args "ARGS" is passed to bench.sh (options, then configs), e.g. --bench-args "-a flash d12:64:1024:bf16"
# when the four default configs with two backends do not fit in one call.
# --resume passes -k to bench.sh: runs that already succeeded on this machine (in
# build/device_check/bench) are kept, so a bench cut short by the time limit can be finished.
# Logs go to build/device_check/ (kept between calls on a warm machine); at the end they are
# packed into $OUT/device_check_logs.tar.gz next to $OUT/device_check.txt (this output), and
# the loss plot and CSV of `compare`. Each stage's time is printed; a PASS/FAIL table is last.
# Inputs the caller may carry in: .carry/tinyshakespeare.txt and .carry/encoder.json +
# .carry/vocab.bpe (tiny Shakespeare tokenized here), .carry/commit.txt (the commit id).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ALL="build dumps tests shapes sanitize benchops hotspots bench compare pipeline runs multigpu"
only="" skip="" resume=0 bench_args=""
while [ $# -gt 0 ]; do
    case $1 in
        --only) only=${2:-}; shift 2 ;;
        --skip) skip=${2:-}; shift 2 ;;
        --resume) resume=1; shift ;;
        --bench-args) bench_args=${2:-}; shift 2 ;;
        --quick) skip="dumps_d12,bench,compare,pipeline"; shift ;;  # the old --quick
        -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for s in ${only//,/ } ${skip//,/ }; do
    [[ " $ALL dumps_d12 " == *" $s "* ]] || { echo "error: unknown stage '$s'; stages: $ALL" >&2; exit 2; }
done
want_d12() { [[ ",$skip," != *",dumps_d12,"* ]]; }  # the d12 dump and its parity tests
want() {  # want STAGE: is this stage selected?
    [ "$1" = build ] && return 0
    [[ ",$skip," == *",$1,"* ]] && return 1
    [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]
}

LOGS=build/device_check
OUT=${OUT:-build/device_check_out}
mkdir -p "$LOGS" "$OUT"
exec > >(tee "$OUT/device_check.txt") 2>&1
tee_pid=$!
PY=${LLMC_PYTHON:-python3}
export PYTHONUNBUFFERED=1
DEF=$(sed -n 's/^PRECISION ?= *//p' Makefile | tr A-Z a-z)
D=build/device_data
mkdir -p "$D"
results=()
T_START=$SECONDS

step() {  # step NAME COMMAND...: run, log to $LOGS/NAME.log, remember PASS/FAIL/SKIP and time
    local name=$1 t0=$SECONDS rc=0
    shift
    "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
    if [ $rc -eq 77 ]; then  # a test that cannot run here: exit 77 and "SKIP <reason>"
        results+=("SKIP     $name: $(grep -m1 '^SKIP' "$LOGS/$name.log" | sed -E 's/^SKIP:? *//')")
    elif [ $rc -eq 0 ]; then
        results+=("PASS     $name $((SECONDS - t0))s")
    else
        results+=("FAIL($rc) $name $((SECONDS - t0))s")
        tail -n 15 "$LOGS/$name.log" | sed "s/^/  [$name] /"
    fi
    echo "${results[-1]}"
}
# Logs packed for $OUT after every stage, so a call cut off by its time limit still returns them.
pack() {
    tar czf "$OUT/device_check_logs.tar.gz" --exclude='*.bin' --exclude='*.ncu-rep' -C build \
        device_check 2>/dev/null
}
stage_times="" cur_stage="" cur_t0=0
end_stage() {  # the running stage's duration into stage_times
    [ -n "$cur_stage" ] && stage_times+="$cur_stage $((SECONDS - cur_t0))s, "
    cur_stage=""
}
stage() {  # stage NAME: start of a stage (the logs of the last one packed), with the time so far
    end_stage
    cur_stage=$1 cur_t0=$SECONDS
    pack
    echo
    echo "== stage $1 (at $((SECONDS - T_START)) s)"
}
skip_result() { results+=("SKIP     $1 ($2)"); echo "${results[-1]}"; }

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv >"$LOGS/gpu.txt" 2>&1 ||
    echo "nvidia-smi failed or is missing: no GPU visible here" >>"$LOGS/gpu.txt"
cat "$LOGS/gpu.txt"
# .carry/commit.txt first: on a machine that receives a copy of the working tree, git's HEAD
# can be older than the files (seen on the device machines: a tree reported an older commit).
commit=$(cat .carry/commit.txt 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "$commit" >"$LOGS/commit.txt"
echo "commit $commit, default precision $DEF, stages: ${only:-all}${skip:+ minus $skip}"

# --- build: only what is missing.
stage build
missing=()
need() { [ -x "$1" ] || missing+=("$1"); }
if want tests || want sanitize; then
    need test_gpt2cu
    for src in dev/test/test_*.cu; do need "build/$DEF/dev/test/$(basename "$src" .cu)"; done
fi
if want bench || want compare || want pipeline; then
    need build/bf16/train_gpt2cu
    need build/fp32/train_gpt2cu
fi
if want benchops; then
    need build/bf16/dev/bench/bench_ops
    need build/fp32/dev/bench/bench_ops
    [ -f dev/bench/bench_attention.cu ] && need build/bf16/dev/bench/bench_attention
fi
if want hotspots; then
    need build/bf16/dev/bench/bench_gelu_gemm
    need build/bf16/dev/bench/bench_attention
fi
want pipeline && { need train_gpt2cu; [ -f dev/bench/bench_tokenizer.cpp ] && need build/host/dev/bench/bench_tokenizer; }
if [ ${#missing[@]} -gt 0 ]; then
    echo "building: ${missing[*]}"
    # Targets under build/bf16 need PRECISION=BF16, under build/fp32 FP32; the rest the default.
    bf=() fp=() other=()
    for t in "${missing[@]}"; do
        case $t in build/bf16/*) bf+=("$t") ;; build/fp32/*) fp+=("$t") ;; *) other+=("$t") ;; esac
    done
    build_all() {
        local rc=0 j
        j=$(nproc)
        [ ${#other[@]} -eq 0 ] || make -j"$j" "${other[@]}" || rc=1
        [ ${#bf[@]} -eq 0 ] || make -j"$j" PRECISION=BF16 "${bf[@]}" || rc=1
        [ ${#fp[@]} -eq 0 ] || make -j"$j" PRECISION=FP32 "${fp[@]}" || rc=1
        return $rc
    }
    step build build_all
else
    echo "nothing to build: every binary the selected stages need is here"
fi

# --- dumps (made by any stage that needs them).
SMALL=(--n-layer 2 --n-head 4 --n-embd 128 --vocab-size 1000 --block-size 96 -b 3 -t 77 --random-biases --seed 1234 -l 1e-3 -c 0.1)
dump_small() {
    [ -s "$D/small_state.bin" ] && [ "${1:-}" != force ] && return
    step dump_small "$PY" scripts/ref/train_gpt2.py "${SMALL[@]}" --device cpu \
        --write-model "$D/small_model.bin" --write-state "$D/small_state.bin"
}
# Heads of 64 and T=128: the fused Hopper attention backward's shape class (run_tests.sh's HS64).
HS64=(--n-layer 2 --n-head 2 --n-embd 128 --vocab-size 997 --block-size 128 -b 2 -t 128 --random-biases --seed 4321 -l 1e-3 -c 0.1)
dump_hs64() {
    [ -s "$D/hs64_state.bin" ] && [ "${1:-}" != force ] && return
    step dump_hs64 "$PY" scripts/ref/train_gpt2.py "${HS64[@]}" --device cpu \
        --write-model "$D/hs64_model.bin" --write-state "$D/hs64_state.bin"
}
dump_d12() {
    [ -s "$D/d12_state.bin" ] && [ "${1:-}" != force ] && return
    step dump_d12 "$PY" scripts/ref/train_gpt2.py -e d12 -b 4 -t 64 --random-biases --seed 1234 --device cuda \
        --write-model "$D/d12_model.bin" --write-state "$D/d12_state.bin"
}
if want dumps; then
    stage dumps
    dump_small force
    want_d12 && dump_d12 force
fi

# --- tests.
if want tests; then
    stage tests
    for t in build/"$DEF"/dev/test/test_*; do
        [[ "$t" == *.o || "$t" == *.d ]] || step "$(basename "$t")" "$t"
    done
    dump_small
    for g in 1 0; do
        step "test_gpt2cu_small_graph$g" ./test_gpt2cu --model "$D/small_model.bin" --state "$D/small_state.bin" --graph $g
    done
    # The fused Hopper attention backward, which the defaults take on large grids only.
    step test_gpt2cu_small_fused env LLMC_FLASH_FUSED_BACKWARD=2 ./test_gpt2cu --model "$D/small_model.bin" --state "$D/small_state.bin"
    if want_d12; then
        dump_d12
        for g in 1 0; do
            step "test_gpt2cu_d12_graph$g" ./test_gpt2cu --model "$D/d12_model.bin" --state "$D/d12_state.bin" --graph $g
        done
        step test_gpt2cu_d12_fused env LLMC_FLASH_FUSED_BACKWARD=2 ./test_gpt2cu --model "$D/d12_model.bin" --state "$D/d12_state.bin"
        # The fused backward's row statistics in their own pass instead of the attproj product's epilogue.
        step test_gpt2cu_d12_fused_row_stats_pass env LLMC_FLASH_FUSED_BACKWARD=2 LLMC_ROW_STATS_GEMM=0 ./test_gpt2cu --model "$D/d12_model.bin" --state "$D/d12_state.bin"
        # The attention projection's weight gradient beside the dq conversion (off by default).
        step test_gpt2cu_d12_fused_attproj_late env LLMC_FLASH_FUSED_BACKWARD=2 LLMC_ATTPROJ_WEIGHT_LATE=1 ./test_gpt2cu --model "$D/d12_model.bin" --state "$D/d12_state.bin"
    fi
fi

# --- shapes: the shape sweep (it builds the fp32 and bf16 binaries it needs when missing).
if want shapes; then
    stage shapes
    step test_shapes bash scripts/test/test_shapes.sh -o "$LOGS/shapes"
    sed -n '/^| # /,$p' "$LOGS/test_shapes.log"
fi

# --- sanitize.
if want sanitize; then
    stage sanitize
    dump_small
    CS=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
    if [ -x "$CS" ]; then
        # memcheck and synccheck see every kernel of test_gpt2cu (cuBLASLt's included). The other
        # two tools do not follow cuBLASLt's Hopper GEMMs (nvjet_*, TMA and mbarriers): racecheck
        # reports hazards inside them, and with them left out (--kernel-name-exclude kns=nvjet)
        # it stops at the first GEMM with "failed to handle a hardware exception"; initcheck
        # counts every read of a GEMM's output (flash attention's loads of qkv, the autotune's
        # hash of D) as uninitialized, hundreds of thousands in two steps. So racecheck runs on
        # test_wgmma_tiles (our TMA / mbarrier / wgmma tile kernels, no cuBLAS), and initcheck
        # is not run.
        for tool in memcheck synccheck; do
            step "sanitize_$tool" timeout 400 "$CS" --error-exitcode 9 --tool $tool \
                ./test_gpt2cu --model "$D/small_model.bin" --state "$D/small_state.bin" --graph 0
        done
        # The fused Hopper attention backward with its row statistics from the attproj product.
        dump_hs64
        step sanitize_memcheck_hs64_fused env LLMC_FLASH_FUSED_BACKWARD=2 timeout 400 "$CS" \
            --error-exitcode 9 --tool memcheck ./test_gpt2cu --model "$D/hs64_model.bin" \
            --state "$D/hs64_state.bin" --graph 0
        step sanitize_racecheck timeout 400 "$CS" --error-exitcode 9 --tool racecheck \
            "build/$DEF/dev/test/test_wgmma_tiles"
    else
        skip_result sanitize "no compute-sanitizer on the PATH or in CUDA_HOME/bin"
    fi
fi

# --- benchops: memory-bound kernels against the copy bandwidth, attention.
if want benchops; then
    stage benchops
    for p in bf16 fp32; do
        if [ -x "build/$p/dev/bench/bench_ops" ]; then
            step "bench_ops_$p" "build/$p/dev/bench/bench_ops"
            sed -n '/^| op/,$p' "$LOGS/bench_ops_$p.log"
        else
            skip_result "bench_ops_$p" "build/$p/dev/bench/bench_ops did not build"
        fi
    done
    if [ -x build/bf16/dev/bench/bench_attention ]; then
        step bench_attention build/bf16/dev/bench/bench_attention
        tail -n 25 "$LOGS/bench_attention.log"
    else
        skip_result bench_attention "no build/bf16/dev/bench/bench_attention"
    fi
fi

# --- hotspots: where our Hopper kernels' warps wait, instruction by instruction.
if want hotspots; then
    stage hotspots
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
    if ! command -v ncu >/dev/null; then
        skip_result hotspots "no ncu on the PATH"
    elif [ "$cc" != 9.0 ]; then
        skip_result hotspots "our Hopper kernels need sm_90 (compute capability here: ${cc:-none})"
    else
        hot() {  # hot NAME KERNEL_REGEX COUNT COMMAND...: the first COUNT launches that match
            local name=$1 regex=$2 count=$3
            shift 3
            ncu --clock-control none -k "regex:$regex" -c "$count" --section WarpStateStats \
                --section SourceCounters -f -o "$LOGS/$name" "$@" &&
                ncu --import "$LOGS/$name.ncu-rep" --page source --csv --print-source sass \
                    >"$LOGS/$name.csv" &&
                "$PY" scripts/bench/ncu_hotspots.py "$LOGS/$name.csv" --top 25
        }
        # bench_gelu_gemm checks the forward, then the DGELU product: one launch of each.
        step hotspots_gelu_gemm hot hot_gelu_gemm gelu_gemm_kernel 2 \
            build/bf16/dev/bench/bench_gelu_gemm --rows 65536
        step hotspots_flash_forward hot hot_flash_forward flash_attention_sm90_forward 1 \
            build/bf16/dev/bench/bench_attention --shape 64,1024,12,64
        # The fused backward (the trainer's at B=64), then the dq and dk/dv kernels (its B=4 one);
        # bench_attention times the two kernels first.
        step hotspots_flash_fused hot hot_flash_fused flash_attention_sm90_fused 1 \
            build/bf16/dev/bench/bench_attention --shape 64,1024,12,64
        step hotspots_flash_backward hot hot_flash_backward 'flash_attention_sm90_(dq|dkdv)' \
            2 build/bf16/dev/bench/bench_attention --shape 64,1024,12,64
        grep -hE "^== kernel|^instructions|^by reason" "$LOGS"/hotspots_*.log
    fi
fi

# --- bench: ours vs PyTorch.
if want bench; then
    stage bench
    keep=()
    [ $resume = 1 ] && keep=(-k)
    # shellcheck disable=SC2086 # bench_args is a list of words on purpose
    step bench bash scripts/bench/bench.sh "${keep[@]}" -o "$LOGS/bench" $bench_args
    sed -n '/^## bench.sh/,$p' "$LOGS/bench.log"
fi

# Tiny Shakespeare shards for compare and pipeline, in $TS: data/tinyshakespeare if prepared,
# else tokenized here from the carried text; empty when neither is here.
TS=""
ts_data() {
    [ -n "$TS" ] && return
    if ls data/tinyshakespeare/*_train_*.bin >/dev/null 2>&1; then
        TS="data/tinyshakespeare/*_train_*.bin"
        return
    fi
    if ! ls "$D"/tinyshakespeare/*_train_*.bin >/dev/null 2>&1 && [ -f .carry/tinyshakespeare.txt ] &&
        [ -f .carry/encoder.json ]; then
        step tokenize "$PY" scripts/ref/train_gpt2.py --tokenize .carry/tinyshakespeare.txt \
            --encoder-dir .carry --out-dir "$D/tinyshakespeare"
    fi
    if ls "$D"/tinyshakespeare/*_train_*.bin >/dev/null 2>&1; then TS="$D/tinyshakespeare/*_train_*.bin"; fi
}

# --- compare: bf16 vs fp32 loss curves.
if want compare; then
    stage compare
    ts_data
    [ -n "$TS" ] || echo "no tiny Shakespeare here (.carry/tinyshakespeare.txt + encoder.json): random tokens"
    step compare_precision bash scripts/bench/compare_precision.sh -p 1 ${TS:+-d "$TS"} -o "$LOGS/compare"
    sed -n '/^data:/,$p' "$LOGS/compare_precision.log"
    cp "$LOGS"/compare/losses.csv "$LOGS"/compare/losses.png "$OUT"/ 2>/dev/null
fi

# --- pipeline: the loader's cost (wall-clock step with prefetch, without, and with no loading
# at all), and the tokenizer's throughput against native tiktoken.
if want pipeline; then
    stage pipeline
    ts_data
    if [ -n "$TS" ]; then
        for mode in "--prefetch 1" "--prefetch 0" "--overfit-batch 1"; do
            tag=$(echo "$mode" | tr -d ' -')
            step "loader_$tag" ./train_gpt2cu -i "$TS" -e d12 -b 4 -t 1024 -x 80 -l 1e-4 $mode
            grep -E "wall clock|data wait" "$LOGS/loader_$tag.log" | sed "s/^/  [$tag] /"
        done
    else
        skip_result loader "no tiny Shakespeare shards"
    fi
    tokdir=.carry
    [ -f build/tokenizer/encoder.json ] && tokdir=build/tokenizer
    if [ -x build/host/dev/bench/bench_tokenizer ] && [ -f .carry/tinyshakespeare.txt ] && [ -f $tokdir/encoder.json ]; then
        for _ in 1 2 3 4 5 6 7 8 9 10; do cat .carry/tinyshakespeare.txt; done >"$D/ts10.txt"
        step tokenizer_bench "$PY" scripts/bench/bench_tokenizer.py --text "$D/ts10.txt" --dir $tokdir \
            --threads 1,16 --bench build/host/dev/bench/bench_tokenizer
        tail -n 8 "$LOGS/tokenizer_bench.log"
    else
        skip_result tokenizer_bench "needs build/host/dev/bench/bench_tokenizer and .carry/{tinyshakespeare.txt,encoder.json}"
    fi
fi

# --- runs: resume and generation tests, a real logged run and its plot, the largest batches.
if want runs; then
    stage runs
    step test_resume bash scripts/test/test_resume.sh
    [ -f scripts/test/test_generate.sh ] && step test_generate bash scripts/test/test_generate.sh
    ts_data
    if [ -n "$TS" ]; then
        rm -rf "$LOGS/run"
        step run_d12 ./train_gpt2cu -i "$TS" -j "${TS/_train_/_val_}" -e d12 -b 8 -t 1024 -x 300 \
            -l 6e-4 -u 30 --lr-schedule cosine -c 0.1 -v 25 -m 4 --sample-every 100 -o "$LOGS/run"
        step plot_run "$PY" scripts/run/plot.py "$LOGS/run" -o "$OUT/run.png"
        cp "$LOGS/run/log.jsonl" "$OUT/run_log.jsonl" 2>/dev/null
    else
        skip_result run_d12 "no tiny Shakespeare shards"
    fi
    data=${TS:-}
    [ -n "$data" ] || { "$PY" scripts/ref/train_gpt2.py --random-shards "$D/rand" --num-tokens 3000000 \
        --seed 7 >/dev/null && data="$D/rand/*_train_*.bin"; }
    for m in d24 d36 d48; do
        b=$(./train_gpt2cu -i "$data" -e $m -b 1 -t 1024 -x 1 2>&1 | grep 'largest B' |
            sed 's/.*free: \([0-9]*\) (--recompute 0).*/\1/')
        echo "  $m: largest B printed (recompute 0): ${b:-?}"
        [ -n "$b" ] && step "largest_$m" ./train_gpt2cu -i "$data" -e $m -b "$b" -t 1024 -x 4
    done
fi

# --- multigpu: the multi-GPU trainer (needs 2+ GPUs; scripts/test/test_multi_gpu.sh has its own table).
if want multigpu; then
    stage multigpu
    ngpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
    if [ "$ngpu" -ge 2 ]; then
        step test_multi_gpu env OUT="$LOGS" bash scripts/test/test_multi_gpu.sh
    else
        skip_result test_multi_gpu "$ngpu GPU(s) visible, 2 needed"
    fi
fi

end_stage
pack
echo
echo "== device check, commit $commit, $(sed -n 2p "$LOGS/gpu.txt"), $((SECONDS - T_START)) s"
echo "stage times: ${stage_times%, }"
printf '%s\n' "${results[@]}"
fails=$(printf '%s\n' "${results[@]}" | grep -c '^FAIL')
echo "$fails failed; logs: $OUT/device_check_logs.tar.gz"
# Let tee write the last lines before the script exits.
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
[ "$fails" -eq 0 ]
