#!/usr/bin/env bash
# test_py_tools.sh PYTHON [WORK_DIR]: the Python tools of scripts/ meet a user's mistakes and a
# missing module with one sentence, never a traceback.
#
# Missing modules are simulated with any interpreter: WORK/hide/X/__init__.py raises
# ModuleNotFoundError for X, and PYTHONPATH=WORK/hide/X puts it before site-packages.
#   1. every documented script answers --help with exit 0 while numpy, torch, matplotlib,
#      transformers, regex and tiktoken are all hidden;
#   2. each script run without one module it needs exits 1 with one line on stderr that names
#      the module and how to install it, and no traceback;
#   3. plot.py: a missing log, an -o in a missing folder, an -o that is a folder and an -o that
#      cannot be written each get one line and exit 1, leaving no temporary file; a good run
#      writes a PNG (PYTHON must have matplotlib: `make deps`);
#   4. bench_table.py --check runs on the standard library alone.
# Ends with "test_py_tools: N passed, M failed"; exits 1 on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${1:?usage: dev/test/test_py_tools.sh PYTHON [WORK_DIR]}
WORK=${2:-build/testdata/py_tools}
rm -rf "$WORK"
mkdir -p "$WORK"
ok=0 bad=0
pass() { echo "PASS $*"; ok=$((ok + 1)); }
fail() { echo "FAIL $*"; bad=$((bad + 1)); }

MODULES=(numpy torch matplotlib transformers regex tiktoken)
for m in "${MODULES[@]}"; do
    mkdir -p "$WORK/hide/$m/$m"
    echo "raise ModuleNotFoundError(\"No module named '$m'\", name='$m')" \
        >"$WORK/hide/$m/$m/__init__.py"
done
hide() {  # hide MODULE...: the PYTHONPATH that hides them
    local m path=""
    for m in "$@"; do path+="${path:+:}$WORK/hide/$m"; done
    echo "$path"
}

# one_sentence NAME MODULE EXPECTED_EXIT CMD...: exit code, one stderr line naming MODULE (or the
# given text), no traceback.
one_sentence() {
    local name=$1 want=$2 code=$3
    shift 3
    "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$? lines
    lines=$(wc -l <"$WORK/err")
    if [ "$rc" = "$code" ] && [ "$lines" = 1 ] && grep -q -- "$want" "$WORK/err" &&
        ! grep -q Traceback "$WORK/err" "$WORK/out"; then
        pass "$name: exit $rc, $(cat "$WORK/err")"
    else
        fail "$name: exit $rc (want $code), $lines stderr lines (want 1 holding '$want'):"
        sed 's/^/    /' "$WORK/err" | head -n 20
    fi
}

# --- 1. --help without any dependency --------------------------------------------------------
ALL=$(hide "${MODULES[@]}")
for s in run/plot.py hf/export_hf.py hf/check_hf_logits.py ref/train_gpt2.py \
    bench/bench_attention.py bench/bench_tokenizer.py data/gen_unicode_tables.py \
    bench/bench_table.py bench/ncu_hotspots.py; do
    if PYTHONPATH=$ALL "$PY" "scripts/$s" --help >"$WORK/out" 2>"$WORK/err" &&
        grep -q "usage:" "$WORK/out" && [ ! -s "$WORK/err" ]; then
        pass "$s --help exits 0 with every optional module hidden"
    else
        fail "$s --help with every optional module hidden:"
        sed 's/^/    /' "$WORK/err" | tail -n 5
    fi
done

# --- 2. a missing module: one sentence, exit 1 -----------------------------------------------
"$PY" scripts/ref/train_gpt2.py --n-layer 1 --n-head 2 --n-embd 64 --vocab-size 300 --block-size 64 \
    --device cpu --write-model "$WORK/model.bin" >/dev/null 2>&1 ||
    fail "could not write a small model with $PY scripts/ref/train_gpt2.py"
printf 'Hello world. A second line.\n' >"$WORK/text.txt"
printf '{"step": %d, "loss": %s, "lr": 0.001, "tok_s": %d}\n' 1 5.0 1000 2 4.0 1100 >"$WORK/log.jsonl"
HOW="install it with"
one_sentence "plot.py without matplotlib" "module matplotlib.*$HOW.*python3-matplotlib" 1 \
    env PYTHONPATH="$(hide matplotlib)" "$PY" scripts/run/plot.py "$WORK/log.jsonl" -o "$WORK/x.png"
one_sentence "export_hf.py without numpy" "module numpy.*$HOW.*python3-numpy" 1 \
    env PYTHONPATH="$(hide numpy)" "$PY" scripts/hf/export_hf.py "$WORK/model.bin" "$WORK/hf"
[ ! -e "$WORK/hf" ] && pass "export_hf.py without numpy wrote nothing" ||
    fail "export_hf.py without numpy left $WORK/hf"
one_sentence "check_hf_logits.py without numpy" "module numpy.*$HOW" 1 \
    env PYTHONPATH="$(hide numpy)" "$PY" scripts/hf/check_hf_logits.py "$WORK/model.bin" "$WORK/hf"
one_sentence "check_hf_logits.py without transformers" "module transformers.*pip install" 1 \
    env PYTHONPATH="$(hide transformers)" "$PY" scripts/hf/check_hf_logits.py "$WORK/model.bin" \
    "$WORK/hf"
one_sentence "train_gpt2.py without numpy" "module numpy.*$HOW" 1 \
    env PYTHONPATH="$(hide numpy)" "$PY" scripts/ref/train_gpt2.py -e d12 --write-model "$WORK/m.bin"
one_sentence "train_gpt2.py without torch" "module torch.*$HOW.*python3-torch" 1 \
    env PYTHONPATH="$(hide torch)" "$PY" scripts/ref/train_gpt2.py --n-layer 1 --n-head 2 \
    --n-embd 64 --vocab-size 300 --block-size 64 --device cpu --write-model "$WORK/m.bin"
one_sentence "train_gpt2.py --tokenize without regex" "module regex.*$HOW.*python3-regex" 1 \
    env PYTHONPATH="$(hide regex)" "$PY" scripts/ref/train_gpt2.py --tokenize "$WORK/text.txt" \
    --encoder-dir "$WORK" --out-dir "$WORK/shards"
one_sentence "bench_attention.py without torch" "module torch.*$HOW" 1 \
    env PYTHONPATH="$(hide torch)" "$PY" scripts/bench/bench_attention.py
one_sentence "bench_tokenizer.py without tiktoken" "module tiktoken.*pip install tiktoken" 1 \
    env PYTHONPATH="$(hide tiktoken)" "$PY" scripts/bench/bench_tokenizer.py --text "$WORK/text.txt"

# --- 3. plot.py's own errors, and a good run --------------------------------------------------
leftover() { find "$WORK" -name '.*.tmp' | head -n 1; }
one_sentence "plot.py, a missing log" "no training log at $WORK/none " 1 \
    "$PY" scripts/run/plot.py "$WORK/none"
one_sentence "plot.py, -o in a missing folder" "the folder .* does not exist" 1 \
    "$PY" scripts/run/plot.py "$WORK/log.jsonl" -o "$WORK/no/such/dir/x.png"
one_sentence "plot.py, -o a folder" "is a directory" 1 \
    "$PY" scripts/run/plot.py "$WORK/log.jsonl" -o "$WORK"
echo "not json" >"$WORK/bad.jsonl"
one_sentence "plot.py, a log that is not JSON" "line 1 is not JSON" 1 \
    "$PY" scripts/run/plot.py "$WORK/bad.jsonl" -o "$WORK/x.png"
if "$PY" -c 'import matplotlib' >/dev/null 2>&1; then
    # A folder that cannot take a new file: read-only for a user; /proc refuses even root.
    ro=$WORK/readonly
    mkdir -p "$ro" && chmod 555 "$ro"
    target=$ro/x.png
    [ "$(id -u)" = 0 ] && target=/proc/llmc_plot_test.png
    one_sentence "plot.py, an -o that cannot be written" "cannot write -o $target" 1 \
        "$PY" scripts/run/plot.py "$WORK/log.jsonl" -o "$target"
    chmod 755 "$ro"
    [ -z "$(leftover)" ] && pass "plot.py left no temporary file" ||
        fail "plot.py left $(leftover)"
    if "$PY" scripts/run/plot.py "$WORK/log.jsonl" -o "$WORK/plot.png" >"$WORK/out" 2>"$WORK/err" &&
        [ "$(head -c 8 "$WORK/plot.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
        pass "plot.py writes a PNG: $(cat "$WORK/out")"
    else
        fail "plot.py on a good log did not write a PNG:"
        sed 's/^/    /' "$WORK/err" | tail -n 5
    fi
else
    fail "$PY has no matplotlib, so plot.py's write checks cannot run (make deps installs it)"
fi

# --- 4. bench_table.py on the standard library alone -----------------------------------------
out=$(PYTHONPATH=$ALL "$PY" scripts/bench/bench_table.py --check 2>&1)
rc=$?
[ "$rc" = 0 ] && pass "bench_table.py --check with every optional module hidden: $out" ||
    fail "bench_table.py --check with every optional module hidden: exit $rc:" \
        "$(echo "$out" | tail -n 3)"

echo "test_py_tools: $ok passed, $bad failed"
[ "$bad" = 0 ]
