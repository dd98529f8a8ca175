#!/usr/bin/env bash
# test_resume.sh: GPU test that a training run can be trusted across interruptions.
#
#   scripts/test/test_resume.sh            # uses ./train_gpt2cu (fp32 or bf16 build, whichever it is)
#   BIN=path/to/train_gpt2cu WORK=dir scripts/test/test_resume.sh
#
# A small GPT-2 (L=2, NH=4, C=128, V=50257, maxT=128) trains 100 steps on random-token shards
# (3 train shards, shuffled, so the run crosses shard and epoch boundaries), cosine schedule with
# warmup, weight decay, validation every 25 steps, and the trainer's default options otherwise
# (CUDA graphs, autotuning on: each process times cuBLASLt's kernels anew, and only kernels
# whose results are bitwise the untuned choice's may win, so timing cannot change the bits).
#   1. reference: 100 steps uninterrupted; and the same with --autotune 0: bit-identical to it.
#   2. --stop-after 50, then --resume to 100: every logged loss, norm, lr and val loss of steps
#      1..100 equals the reference's bit for bit, and the final model and state files are
#      byte-identical to the reference's. Again with the resumed half under --autotune 0.
#   3. SIGINT mid-run: exit 0 with a checkpoint; --resume to 100: same comparison.
#   4. kill -9 at random moments (3 times, checkpoints every 5 steps, keep last 3 + every 20):
#      after each kill every checkpoint file under its final name is whole (sizes and checksums,
#      recomputed here in numpy), each state file has its model file, temporary files are never
#      taken for checkpoints, and --resume continues from the newest one; the finished run
#      equals the reference bit for bit.
#   5. a resume with another batch shape is refused with one sentence.
#   6. non-finite steps: a model whose final layernorm weights are NaN stops after
#      --max-bad-steps 3 with exit 1 and writes no checkpoint.
#   7. --skip-outliers 1 on a shard whose every 4th batch is one repeated (unseen) token: some
#      steps after the 20th are skipped, each leaves every array of its checkpoint equal to the previous
#      step's; a stop at 35 and resume repeats every decision.
#   8. a --json-summary whose directory vanishes during the run: the run exits 1 naming the
#      summary file, with its final model.bin written (the model comes before the summary).
# Prints PASS or FAIL per check and exits 1 if any failed; exits 77 with "SKIP <reason>" when
# nvidia-smi lists no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-./train_gpt2cu}
WORK=${WORK:-build/test_resume}
PY=$(bash scripts/deps/find_python.sh) || { echo "FAIL: no python with torch and numpy (scripts/deps/find_python.sh)"; exit 1; }
[ -x "$BIN" ] || { echo "FAIL: $BIN is not built (make train_gpt2cu)"; exit 1; }
nvidia-smi -L 2>/dev/null | grep -q '^GPU' || { echo "SKIP no NVIDIA GPU visible (nvidia-smi lists none)"; exit 77; }
rm -rf "$WORK"
mkdir -p "$WORK"
passed=0 failed=0
verdict() {  # verdict NAME STATUS [DETAIL]
    if [ "$2" = 0 ]; then echo "PASS $1"; passed=$((passed + 1)); else echo "FAIL $1 ${3:-}"; failed=$((failed + 1)); fi
}

# --- data and model -------------------------------------------------------------------------
"$PY" - "$WORK/data" <<'EOF'
import os, sys
import numpy as np
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.RandomState(7)
def shard(path, n):
    header = np.zeros(256, dtype="<i4"); header[:3] = (20240520, 1, n)
    with open(path, "wb") as f:
        f.write(header.tobytes()); f.write(rng.randint(0, 50257, size=n).astype("<u2").tobytes())
for i in range(3):
    shard(f"{out}/rand_train_{i:06d}.bin", 9000)  # 17 batches of 4 x 128 each
shard(f"{out}/rand_val_000000.bin", 8192)
EOF
"$PY" scripts/ref/train_gpt2.py --n-layer 2 --n-head 4 --n-embd 128 --block-size 128 --seed 3 \
    --device cpu --write-model "$WORK/model.bin" >"$WORK/make_model.log" 2>&1 \
    || { echo "FAIL: could not write the test model (see $WORK/make_model.log)"; exit 1; }

COMMON=(-i "$WORK/data/rand_train_*.bin" -j "$WORK/data/rand_val_*.bin" -e "$WORK/model.bin"
        -b 4 -t 128 -x 100 -l 1e-3 -u 10 --lr-schedule cosine --lr-final-frac 0.1 -c 0.1
        -v 25 -m 4 --seed 1234)

# Verifies every checkpoint in a run directory; prints the newest complete step (or -1).
verify_dir() {
    "$PY" - "$1" <<'EOF'
import glob, os, re, sys
import numpy as np
d = sys.argv[1]
M64 = (1 << 64) - 1
G, C1, C2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
def mix(z):  # splitmix64 on numpy uint64 arrays (wrapping) or python ints
    if isinstance(z, int):
        z = (z + G) & M64; z = ((z ^ (z >> 30)) * C1) & M64; z = ((z ^ (z >> 27)) * C2) & M64
        return z ^ (z >> 31)
    z = z + np.uint64(G); z = (z ^ (z >> np.uint64(30))) * np.uint64(C1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(C2); return z ^ (z >> np.uint64(31))
def checksum(b):
    n = len(b)
    w = np.frombuffer(b + b"\0" * ((-n) % 8), dtype="<u8")
    s = int(mix(w + np.arange(w.size, dtype=np.uint64) * np.uint64(G)).sum(dtype=np.uint64))
    return mix(s ^ n)
bad, newest = [], -1
for path in sorted(glob.glob(os.path.join(d, "state_*.bin"))):
    m = re.fullmatch(r"state_(\d+)\.bin", os.path.basename(path))
    if not m:
        continue
    step = int(m.group(1))
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:4096], dtype="<i8") if len(raw) >= 4096 else None
    if h is None or h[0] != 0x54504B43434D4C4C or h[1] != 1 or h[3] != step:
        bad.append(f"{path}: bad header"); continue
    n, pb = int(h[5]), int(h[6])
    want = 4096 + 8 * n + (n * pb if pb != 4 else 0)
    if len(raw) != want:
        bad.append(f"{path}: {len(raw)} bytes, want {want}"); continue
    sums = [int(x) & M64 for x in h[36:40]]  # model, m, v, params
    arrays = [raw[4096:4096 + 4 * n], raw[4096 + 4 * n:4096 + 8 * n], raw[4096 + 8 * n:]]
    for name, arr, s in zip(("m", "v", "params"), arrays, sums[1:]):
        if (name != "params" or pb != 4) and checksum(arr) != s:
            bad.append(f"{path}: {name} checksum")
    mpath = os.path.join(d, f"model_{step:08d}.bin")
    if not os.path.exists(mpath):
        bad.append(f"{path}: its model file is missing"); continue
    mraw = open(mpath, "rb").read()
    if len(mraw) != 1024 + 4 * n or checksum(mraw[1024:]) != sums[0]:
        bad.append(f"{mpath}: size or checksum")
    newest = max(newest, step)
for b in bad:
    print("corrupt:", b, file=sys.stderr)
print(newest)
sys.exit(1 if bad else 0)
EOF
}

# Compares the per-step records of two log.jsonl files over steps FROM..TO.
compare_logs() {  # compare_logs REF RUN FROM TO
    "$PY" - "$@" <<'EOF'
import json, sys
ref, run, lo, hi = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def load(p):
    return {r["step"]: r for r in map(json.loads, open(p))}
a, b = load(ref), load(run)
steps = list(range(lo, hi + 1))
bad = [s for s in steps if s not in a or s not in b or
       any(a[s].get(k) != b[s].get(k) for k in ("loss", "norm", "lr", "val_loss", "skipped"))]
with open(run) as f:
    seen = [json.loads(l)["step"] for l in f]
if seen != sorted(set(seen)):
    print("a step is logged twice or out of order", file=sys.stderr); sys.exit(1)
for s in bad[:5]:
    print(f"step {s}: ref {a.get(s)} run {b.get(s)}", file=sys.stderr)
print(f"steps {lo}..{hi}: {len(steps) - len(bad)} equal, {len(bad)} differ; "
      f"loss at {hi}: {a[hi]['loss'] if hi in a else None}")
sys.exit(1 if bad else 0)
EOF
}

same_files() {  # same_files DIR_A DIR_B STEP: model and state files byte-identical
    cmp -s "$1/model_$(printf %08d "$3").bin" "$2/model_$(printf %08d "$3").bin" &&
        cmp -s "$1/state_$(printf %08d "$3").bin" "$2/state_$(printf %08d "$3").bin"
}

# --- 1. reference -----------------------------------------------------------------------------
"$BIN" "${COMMON[@]}" -o "$WORK/ref" >"$WORK/ref.log" 2>&1
verdict "reference run (100 steps)" $? "(see $WORK/ref.log)"
grep -o 'build, [a-z0-9]* matmuls' "$WORK/ref.log" | head -1
"$BIN" "${COMMON[@]}" --autotune 0 -o "$WORK/untuned" >"$WORK/untuned.log" 2>&1
rc=$?
out=$(compare_logs "$WORK/ref/log.jsonl" "$WORK/untuned/log.jsonl" 1 100 2>&1)
st=$?  # before the message: a command substitution in it would reset $?
[ $rc = 0 ] && [ $st = 0 ] && same_files "$WORK/ref" "$WORK/untuned" 100
verdict "--autotune 0 against the default (autotuned) run: bit-identical: $(tail -1 <<<"$out")" $? "(exit $rc) $out"

# --- 2. stop at 50, resume ---------------------------------------------------------------------
"$BIN" "${COMMON[@]}" -o "$WORK/split" --stop-after 50 >"$WORK/split1.log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "stopped after step 50; checkpoint" "$WORK/split1.log" && [ -f "$WORK/split/state_00000050.bin" ]
verdict "--stop-after 50 exits 0 with a checkpoint" $? "(exit $rc, see $WORK/split1.log)"
"$BIN" "${COMMON[@]}" -o "$WORK/split" --resume >"$WORK/split2.log" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "resume  *from .*state_00000050.bin: step 50" "$WORK/split2.log"
verdict "--resume continues from step 50" $? "(exit $rc, see $WORK/split2.log)"
out=$(compare_logs "$WORK/ref/log.jsonl" "$WORK/split/log.jsonl" 1 100 2>&1)
st=$?  # before the message: a command substitution in it would reset $?
verdict "stop/resume: losses of steps 1..100 bit-identical: $(tail -1 <<<"$out")" $st "$out"
same_files "$WORK/ref" "$WORK/split" 100
verdict "stop/resume: final model and state files byte-identical" $?

"$BIN" "${COMMON[@]}" -o "$WORK/split_untuned" --stop-after 50 >"$WORK/split_untuned1.log" 2>&1 &&
    "$BIN" "${COMMON[@]}" --autotune 0 -o "$WORK/split_untuned" --resume >"$WORK/split_untuned2.log" 2>&1
rc=$?
out=$(compare_logs "$WORK/ref/log.jsonl" "$WORK/split_untuned/log.jsonl" 1 100 2>&1)
st=$?  # before the message: a command substitution in it would reset $?
[ $rc = 0 ] && [ $st = 0 ] && same_files "$WORK/ref" "$WORK/split_untuned" 100
verdict "stop at 50, resumed with --autotune 0: bit-identical: $(tail -1 <<<"$out")" $? "(exit $rc) $out"

# --- 3. SIGINT --------------------------------------------------------------------------------
"$BIN" "${COMMON[@]}" -o "$WORK/sig" >"$WORK/sig1.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
    [ "$(wc -l 2>/dev/null <"$WORK/sig/log.jsonl" || echo 0)" -ge 30 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.02
done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
stop_step=$(grep -o 'stopped after step [0-9]*' "$WORK/sig1.log" | grep -o '[0-9]*$')
[ $rc = 0 ] && [ -n "$stop_step" ] && [ -f "$WORK/sig/state_$(printf %08d "$stop_step").bin" ]
verdict "SIGINT: exit 0 after step ${stop_step:-?} with its checkpoint" $? "(exit $rc, see $WORK/sig1.log)"
"$BIN" "${COMMON[@]}" -o "$WORK/sig" --resume >"$WORK/sig2.log" 2>&1
verdict "SIGINT: --resume runs to the end" $? "(see $WORK/sig2.log)"
out=$(compare_logs "$WORK/ref/log.jsonl" "$WORK/sig/log.jsonl" 1 100 2>&1)
st=$?  # before the message: a command substitution in it would reset $?
verdict "SIGINT: losses of steps 1..100 bit-identical: $(tail -1 <<<"$out")" $st "$out"
same_files "$WORK/ref" "$WORK/sig" 100
verdict "SIGINT: final model and state files byte-identical" $?

# --- 4. kill -9 -------------------------------------------------------------------------------
KILL=("${COMMON[@]}" -o "$WORK/kill" --checkpoint-every 5 --keep-last 3 --keep-every 20 --resume)
last=-1
for round in 1 2 3; do
    "$BIN" "${KILL[@]}" >"$WORK/kill$round.log" 2>&1 &
    pid=$!
    # Wait for this process's first step (by then it has cut the log back to its checkpoint),
    # then for a few steps past the last checkpoint, then a random 0-0.4 s more.
    for _ in $(seq 1 1000); do
        grep -q '^step ' "$WORK/kill$round.log" 2>/dev/null && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.01
    done
    for _ in $(seq 1 1000); do
        [ "$(wc -l 2>/dev/null <"$WORK/kill/log.jsonl" || echo 0)" -ge $((last + 8)) ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.01
    done
    sleep "0.$(printf %03d $((RANDOM % 400)))"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    newest=$(verify_dir "$WORK/kill" 2>"$WORK/verify$round.err")
    rc=$?
    temps=$(find "$WORK/kill" -name '.*.tmp' | wc -l)
    verdict "kill -9 round $round: every checkpoint whole, newest step $newest ($temps temp files left)" $rc "$(cat "$WORK/verify$round.err")"
    if [ "$round" -gt 1 ] && [ "$last" -ge 0 ]; then
        grep -q "resume  *from .*state_$(printf %08d "$last").bin" "$WORK/kill$round.log"
        verdict "kill -9 round $round: --resume started from the newest checkpoint (step $last)" $?
    fi
    last=$newest
done
"$BIN" "${KILL[@]}" >"$WORK/kill_final.log" 2>&1
rc=$?
[ $rc = 0 ] && { [ "$last" -lt 0 ] || grep -q "resume  *from .*state_$(printf %08d "$last").bin" "$WORK/kill_final.log"; }
verdict "kill -9: the last --resume continues from step $last and finishes" $? "(exit $rc, see $WORK/kill_final.log)"
out=$(compare_logs "$WORK/ref/log.jsonl" "$WORK/kill/log.jsonl" 1 100 2>&1)
st=$?  # before the message: a command substitution in it would reset $?
verdict "kill -9: losses of steps 1..100 bit-identical: $(tail -1 <<<"$out")" $st "$out"
same_files "$WORK/ref" "$WORK/kill" 100
verdict "kill -9: final model and state files byte-identical" $?
kept=$(cd "$WORK/kill" && ls state_*.bin | tr '\n' ' ')
[ "$kept" = "state_00000020.bin state_00000040.bin state_00000060.bin state_00000080.bin state_00000090.bin state_00000095.bin state_00000100.bin " ]
verdict "kill -9: pruning kept the last 3 and every 20th: $kept" $?

# --- 5. mismatch ------------------------------------------------------------------------------
out=$("$BIN" "${COMMON[@]}" -b 2 -o "$WORK/split" --resume 2>&1)
rc=$?
[ $rc = 1 ] && grep -q "resume with the same batch shape" <<<"$out"
st=$?  # before the message: a command substitution in it would reset $?
verdict "a resume with -b 2 is refused: $(grep error <<<"$out" | head -1)" $st

# --- 6. non-finite steps ----------------------------------------------------------------------
"$PY" - "$WORK/model.bin" "$WORK/nan_model.bin" <<'EOF'
import sys
import numpy as np
raw = bytearray(open(sys.argv[1], "rb").read())
h = np.frombuffer(bytes(raw[:1024]), dtype="<i4")
C = int(h[6])
lnf = len(raw) - 8 * C  # lnfw, then lnfb: the last 2C floats
raw[lnf:lnf + 4 * C] = np.full(C, np.nan, dtype="<f4").tobytes()
open(sys.argv[2], "wb").write(bytes(raw))
EOF
out=$("$BIN" "${COMMON[@]}" -e "$WORK/nan_model.bin" -o "$WORK/nan" --checkpoint-every 1 --max-bad-steps 3 2>&1)
rc=$?
n_ckpt=$(ls "$WORK/nan"/state_*.bin 2>/dev/null | wc -l)
n_skip=$(grep -c '"skipped": true' "$WORK/nan/log.jsonl" 2>/dev/null)
[ $rc = 1 ] && grep -q "3 steps in a row had a non-finite loss" <<<"$out" && [ "$n_ckpt" = 0 ] && [ "$n_skip" = 3 ]
verdict "NaN weights: stop after 3 bad steps, exit $rc, $n_ckpt checkpoints, $n_skip skipped steps logged" $?

# --- 7. outlier steps (--skip-outliers) --------------------------------------------------------
# On random tokens the gradient norm only drifts down, so nothing is an outlier: this run reads a
# shard in which every 4th batch is one token repeated, a different token each time (a token
# the model has not learned yet: its gradient adds up coherently, a norm well above the
# others'; one repeated token for all of them was learned within the first 20 steps and did
# not spike). The statistics follow the recent steps (--outlier-window 10) and z = 1: steps are
# skipped after the first 20; checkpoints every step show that a skipped step leaves
# parameters, moments and master weights as they were, and a stop/resume across skipped steps
# (the statistics live in the checkpoint) makes the same decisions.
"$PY" - "$WORK/odata" <<'EOF'
import os, sys
import numpy as np
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.RandomState(11)
n = 24 * 512 + 1  # 24 batches of 4 x 128 (+1 for the last target)
tok = rng.randint(0, 50257, size=n)
for b in range(3, 24, 4):
    tok[b * 512:(b + 1) * 512 + 1] = 1000 + 97 * b
header = np.zeros(256, dtype="<i4"); header[:3] = (20240520, 1, n)
with open(f"{out}/spiky_train_000000.bin", "wb") as f:
    f.write(header.tobytes()); f.write(tok.astype("<u2").tobytes())
EOF
OUTL=(-i "$WORK/odata/spiky_train_*.bin" -j "$WORK/data/rand_val_*.bin" -e "$WORK/model.bin"
      -b 4 -t 128 -x 60 -l 1e-3 -u 10 -c 0.1 -v 25 -m 4 --seed 1234
      --skip-outliers 1 --outlier-window 10 --max-bad-steps 0)
"$BIN" "${OUTL[@]}" -o "$WORK/outl" --checkpoint-every 1 --keep-last 100 >"$WORK/outl.log" 2>&1
rc=$?
out=$("$PY" - "$WORK/outl" <<'EOF'
import json, sys
d = sys.argv[1]
recs = [json.loads(l) for l in open(f"{d}/log.jsonl")]
skipped = [r["step"] for r in recs if r.get("skipped")]
print("skipped steps:", skipped)
if not skipped or min(skipped) <= 20:
    print("want at least one skipped step, none of them before step 21"); sys.exit(1)
def arrays(step):
    st = open(f"{d}/state_{step:08d}.bin", "rb").read()[4096:]
    mo = open(f"{d}/model_{step:08d}.bin", "rb").read()[1024:]
    return st, mo
bad = [s for s in skipped if arrays(s) != arrays(s - 1)]
applied = [s for s in range(22, 61) if s not in skipped][:1]
moved = [s for s in applied if arrays(s)[0] != arrays(s - 1)[0]]
print(f"{len(skipped) - len(bad)}/{len(skipped)} skipped steps left every array alone;",
      f"applied step {applied} changed them: {moved == applied}")
sys.exit(1 if bad or moved != applied else 0)
EOF
)
ok=$?
[ $rc = 0 ] && [ $ok = 0 ]
st=$?  # before the message: a command substitution in it would reset $?
verdict "--skip-outliers 1: $(tr '\n' ' ' <<<"$out")" $st "(exit $rc, see $WORK/outl.log)"
"$BIN" "${OUTL[@]}" -o "$WORK/outl_split" --stop-after 35 >"$WORK/outl_split1.log" 2>&1 &&
    "$BIN" "${OUTL[@]}" -o "$WORK/outl_split" --resume >"$WORK/outl_split2.log" 2>&1
rc=$?
out=$(compare_logs "$WORK/outl/log.jsonl" "$WORK/outl_split/log.jsonl" 1 60 2>&1)
same=$?
[ $rc = 0 ] && [ $same = 0 ] && grep -q '"skipped": true' "$WORK/outl_split/log.jsonl"
st=$?  # before the message: a command substitution in it would reset $?
verdict "--skip-outliers stop at 35, resume: steps 1..60 bit-identical, skips included: $(tail -1 <<<"$out")" $st "$out"

# --- 8. the final model before the summary ---------------------------------------------------
# The summary's directory exists at start (checked before the first step) and is removed once
# the first step is logged, so only the summary at the very end can fail.
mkdir -p "$WORK/summ_dir"
"$BIN" "${COMMON[@]}" -x 400 -v 0 -o "$WORK/summ" --json-summary "$WORK/summ_dir/s.json" \
    >"$WORK/summ.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
    grep -q '^step ' "$WORK/summ.log" 2>/dev/null && break
    sleep 0.05
done
rm -rf "$WORK/summ_dir"
wait $pid
rc=$?
[ $rc = 1 ] && grep -q "cannot write the summary file" "$WORK/summ.log" &&
    cmp -s "$WORK/summ/model.bin" "$WORK/summ/model_00000400.bin"
st=$?  # before the message: a command substitution in it would reset $?
verdict "a summary that cannot be written: exit $rc with the final model.bin beside it" $st \
    "(want exit 1, 'cannot write the summary file' and model.bin; see $WORK/summ.log)"

echo "test_resume: $passed passed, $failed failed"
[ "$failed" = 0 ]
