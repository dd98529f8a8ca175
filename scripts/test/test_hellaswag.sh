#!/usr/bin/env bash
# test_hellaswag.sh: the GPU checks of --hellaswag, --gpu-log, --llmc-log and --model-dtype bf16 in
# one call (needs a GPU; ~5 min on an H100, most of it building). Run from the repository root:
#
#   scripts/test/test_hellaswag.sh [OUT_DIR]        (default out/test_hellaswag; kept for inspection)
#   LLMC_PREBUILT=1 uses the binaries as they are instead of running make first.
#
# Model: test_hellaswag's fixed small model (L=2, NH=4, C=64, V=1000, maxT=96, weights large
# enough that endings' losses differ well beyond rounding). Each trainer run evaluates before its
# first step (--eval-every 1), so the loaded model is scored, and LLMC_HELLASWAG_LOSSES dumps each
# example's ending losses, compared with scripts/ref/hellaswag_ref.py (PyTorch, fp32, TF32 off):
#  1. fp32 build, --tf32 0: the 50-example checked-in file at B=3 T=77 and 300 generated examples
#     at B=4 T=64: mean losses within 1e-4 (relative to max(1, |ref|)) and identical predictions.
#  2. bf16 build, same files: the worst mean-loss error at most 4x (test_gpt2cu's bf16 factor) that
#     of PyTorch's own bf16 autocast run against its fp32 run, plus 1e-3; differing predictions
#     are reported, not failed (near-ties flip under bf16).
#  3. Model file version 5: the fixed model rounded to bf16 (train_gpt2.py's to_bf16_bits) scored
#     by the fp32 build equals PyTorch on the same file (1e-4): a v5 file's logits are the fp32
#     file's within bf16 rounding of the weights. And the trainer's --model-dtype bf16 writes
#     DIR/model.bin as version 5 holding the final checkpoint's weights rounded to nearest-even.
#  4. d12 timing: 10,042 synthetic HellaSwag-shaped examples (scripts/test/hellaswag_synthetic.py,
#     contexts 16-112 tokens, endings 8-48) scored by a random-init d12 at B=64 T=1024 and at
#     B=16, bf16: the "hellaswag ... s" line of each is the time the evaluation adds per call.
#  5. Telemetry and llm.c's log: 20 steps with --gpu-log 5 --llmc-log: gpu_* fields on steps 5,
#     10, 15, 20 of log.jsonl, "s:S trl" lines in main.log, scripts/run/plot.py draws the run.
# Ends with "test_hellaswag: N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
out=${1:-out/test_hellaswag}
mkdir -p "$out"
PY=$(bash scripts/deps/find_python.sh) || { echo "FAIL: no python3 with torch and numpy"; exit 1; }
nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP test_hellaswag: no GPU (nvidia-smi lists none)"; exit 77; }
ok=0 bad=0
pass() { ok=$((ok + 1)); echo "ok   $*"; }
fail() { bad=$((bad + 1)); echo "FAIL $*"; }
log() { echo "== $*"; }

# LLMC_PREBUILT=1: use the binaries as they are (built on another machine and copied in).
if [ -z "${LLMC_PREBUILT:-}" ]; then
    log "building (bf16 and fp32 trainers, host test)"
    make -j"$(nproc)" train_gpt2cu build/host/dev/test/test_hellaswag >"$out/build.log" 2>&1 &&
        make -j"$(nproc)" PRECISION=FP32 build/fp32/train_gpt2cu >>"$out/build.log" 2>&1 ||
        { echo "FAIL build (see $out/build.log)"; exit 1; }
fi
build/host/dev/test/test_hellaswag --write-model "$out/small.bin"
"$PY" scripts/test/hellaswag_synthetic.py -n 300 --vocab 1000 --seed 3 --ctx 1:70 --ending 1:30 \
    -o "$out/synth300.bin" >/dev/null
"$PY" scripts/ref/train_gpt2.py --random-shards "$out/data_small" --num-tokens 200000 --vocab-size 1000 \
    >/dev/null
"$PY" scripts/ref/train_gpt2.py --random-shards "$out/data_d12" --num-tokens 2000000 >/dev/null
"$PY" - "$out/small.bin" "$out/small_v5.bin" <<'PYEOF'
import sys
import numpy as np
sys.path.insert(0, "scripts/ref")
from train_gpt2 import to_bf16_bits
raw = open(sys.argv[1], "rb").read()
h = np.frombuffer(raw[:1024], dtype="<i4").copy()
h[1] = 5
body = np.frombuffer(raw[1024:], dtype="<f4")
open(sys.argv[2], "wb").write(h.tobytes() + to_bf16_bits(body).tobytes())
PYEOF

# score BIN MODEL EVAL B T TAG: runs the trainer one step with an evaluation before it.
score() {
    local bin=$1 model=$2 eval=$3 B=$4 T=$5 tag=$6
    LLMC_HELLASWAG_LOSSES="$out/$tag" "$bin" -i "$out/data_small/*train*.bin" -e "$model" -b "$B" \
        -t "$T" -x 1 --hellaswag "$eval" --eval-every 1 --tf32 0 >"$out/$tag.log" 2>&1
}
# compare OURS REF [AUTOCAST]: prints "worst_err auto_err differing_predictions".
compare() {
    "$PY" - "$@" <<'PYEOF'
import sys
def load(p):
    out = {}
    for line in open(p):
        f = line.split()
        k = (len(f) - 4) // 2
        out[int(f[0])] = (int(f[2]), [float(x) for x in f[4:4 + k]])
    return out
ours, ref = load(sys.argv[1]), load(sys.argv[2])
assert ours.keys() == ref.keys(), "not the same examples"
err = lambda a, b: max(abs(x - y) / max(1.0, abs(y)) for i in b for x, y in zip(a[i][1], b[i][1]))
auto = err(load(sys.argv[3]), ref) if len(sys.argv) > 3 else 0.0
print(f"{err(ours, ref):.3g} {auto:.3g} {sum(ours[i][0] != ref[i][0] for i in ref)}")
PYEOF
}

for case in "dev/test/data/hellaswag_synth50.bin 3 77 s50" "$out/synth300.bin 4 64 s300"; do
    read -r eval B T tag <<<"$case"
    "$PY" scripts/ref/hellaswag_ref.py --model "$out/small.bin" --eval "$eval" -t "$T" \
        --losses "$out/ref_$tag.txt" >/dev/null &&
        "$PY" scripts/ref/hellaswag_ref.py --model "$out/small.bin" --eval "$eval" -t "$T" --autocast \
            --losses "$out/auto_$tag.txt" >/dev/null || { fail "PyTorch reference on $eval"; continue; }
    if score build/fp32/train_gpt2cu "$out/small.bin" "$eval" "$B" "$T" "fp32_$tag"; then
        read -r e _ d <<<"$(compare "$out/fp32_${tag}_00000000.txt" "$out/ref_$tag.txt")"
        "$PY" -c "import sys; sys.exit(not ($e <= 1e-4 and $d == 0))" &&
            pass "fp32 $tag: worst mean-loss error $e, $d predictions differ" ||
            fail "fp32 $tag: worst mean-loss error $e (bound 1e-4), $d predictions differ (want 0)"
    else
        fail "fp32 trainer on $tag (see $out/fp32_$tag.log)"
    fi
    if score ./train_gpt2cu "$out/small.bin" "$eval" "$B" "$T" "bf16_$tag"; then
        read -r e a d <<<"$(compare "$out/bf16_${tag}_00000000.txt" "$out/ref_$tag.txt" "$out/auto_$tag.txt")"
        "$PY" -c "import sys; sys.exit(not ($e <= 4 * $a + 1e-3))" &&
            pass "bf16 $tag: worst mean-loss error $e, autocast's $a (bound 4x + 1e-3), $d predictions differ" ||
            fail "bf16 $tag: worst mean-loss error $e above 4 x autocast's $a + 1e-3"
    else
        fail "bf16 trainer on $tag (see $out/bf16_$tag.log)"
    fi
done

log "model file version 5"
"$PY" scripts/ref/hellaswag_ref.py --model "$out/small_v5.bin" --eval "$out/synth300.bin" -t 64 \
    --losses "$out/ref_v5.txt" >/dev/null
if score build/fp32/train_gpt2cu "$out/small_v5.bin" "$out/synth300.bin" 4 64 fp32_v5; then
    read -r e _ d <<<"$(compare "$out/fp32_v5_00000000.txt" "$out/ref_v5.txt")"
    "$PY" -c "import sys; sys.exit(not ($e <= 1e-4))" &&
        pass "v5 file: ours $e from PyTorch on the same bf16 weights ($d predictions differ)" ||
        fail "v5 file: worst error $e (bound 1e-4)"
else
    fail "trainer on the v5 file (see $out/fp32_v5.log)"
fi
rm -rf "$out/run_v5"
./train_gpt2cu -i "$out/data_small/*train*.bin" -e "$out/small.bin" -b 3 -t 77 -x 2 \
    -o "$out/run_v5" --model-dtype bf16 >"$out/run_v5.log" 2>&1 &&
"$PY" - "$out/run_v5/model.bin" "$out/run_v5/model_00000002.bin" <<'PYEOF' && pass "--model-dtype bf16: model.bin is version 5, the checkpoint's weights rounded" || fail "--model-dtype bf16 (see $out/run_v5.log)"
import sys
import numpy as np
sys.path.insert(0, "scripts/ref")
from train_gpt2 import to_bf16_bits
v5, v3 = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
h5, h3 = np.frombuffer(v5[:1024], "<i4"), np.frombuffer(v3[:1024], "<i4")
assert h5[1] == 5 and h3[1] == 3 and (h5[2:8] == h3[2:8]).all()
assert (np.frombuffer(v5[1024:], "<u2") == to_bf16_bits(np.frombuffer(v3[1024:], "<f4"))).all()
PYEOF

log "d12: 10,042 synthetic examples"
"$PY" scripts/test/hellaswag_synthetic.py -n 10042 -o "$out/synth10042.bin" >/dev/null
for B in 64 16; do
    if ./train_gpt2cu -i "$out/data_d12/*train*.bin" -e d12 -b "$B" -t 1024 -x 1 \
        --hellaswag "$out/synth10042.bin" --eval-every 1 >"$out/d12_b$B.log" 2>&1; then
        pass "d12 B=$B: $(grep -m 1 '^hellaswag .*step 0' "$out/d12_b$B.log")"
    else
        fail "d12 B=$B (see $out/d12_b$B.log)"
    fi
done

log "telemetry and llm.c's main.log"
rm -rf "$out/run_tel" "$out/llmc"
./train_gpt2cu -i "$out/data_d12/*train*.bin" -j "$out/data_d12/*val*.bin" -e d12 -b 8 -t 1024 \
    -x 20 -v 10 -m 2 --gpu-log 5 --hellaswag dev/test/data/hellaswag_synth50.bin --eval-every 10 \
    --llmc-log "$out/llmc" -o "$out/run_tel" >"$out/run_tel.log" 2>&1 || fail "telemetry run (see $out/run_tel.log)"
n=$(grep -c '"gpu_sm_mhz"' "$out/run_tel/log.jsonl" 2>/dev/null)
[ "$n" = 4 ] && pass "log.jsonl: gpu_* fields on 4 steps: $(grep -m 1 -o '"gpu_sm_mhz.*throttle": [0-9]*' "$out/run_tel/log.jsonl")" ||
    fail "log.jsonl has gpu_* fields on $n steps (want 4; $(grep -m 1 'gpu log' "$out/run_tel.log"))"
[ "$(grep -c ' trl:' "$out/llmc/main.log" 2>/dev/null)" = 20 ] && grep -q '^s:10 tel:' "$out/llmc/main.log" &&
    grep -q '^s:20 eval:' "$out/llmc/main.log" && pass "main.log: 20 trl lines, tel and eval at s:10/20" ||
    fail "main.log lines (see $out/llmc/main.log)"
"$PY" scripts/run/plot.py "$out/run_tel" -o "$out/run_tel.png" >/dev/null 2>&1 &&
    pass "plot.py drew $out/run_tel.png" || fail "plot.py on the telemetry run"
echo "test_hellaswag: $ok passed, $bad failed"
[ "$bad" = 0 ]
