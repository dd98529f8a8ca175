#!/usr/bin/env bash
# test_prepare_hellaswag.sh: ./prepare_hellaswag on small HellaSwag-format JSONL (CPU, ~5 s).
#
# Good input (escapes, surrogate pairs, raw UTF-8, extra fields, a blank line, CRLF): the eval
# file is read back by scripts/ref/hellaswag_ref.py's reader (Python, written from the format's
# description), labels and counts checked, and every context and " " + ending's token ids
# compared with tiktoken's (npm, scripts/test/tokenizer_parity.js). Bad input: malformed JSON, a
# missing field, a label out of range, endings that are not strings, an empty context: each
# exits 1 with one sentence naming the file, line and column, and writes nothing (an earlier
# output stays as it was). Needs ./prepare_hellaswag, python3 with numpy, node and GPT-2's
# tokenizer files; prints SKIP when the tokenizer files cannot be had.
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=./prepare_hellaswag
tokdir=${LLMC_TOKENIZER_DIR:-build/tokenizer}
PY=${PY:-$(bash scripts/deps/find_python.sh)}
if ! why=$(bash scripts/data/tokenizer_files.sh "$tokdir" 2>&1 >/dev/null); then
    echo "SKIP test_prepare_hellaswag: no GPT-2 tokenizer files: $why"
    exit 0
fi
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
ok=0 bad=0
pass() { ok=$((ok + 1)); }
fail() { bad=$((bad + 1)); echo "FAIL: $*"; }

printf '%s\n' \
  '{"ind": 24, "ctx": "A man is sitting on a roof. he", "label": 3, "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "is holding a rubik'"'"'s cube.", "starts pulling up roofing on a roof."], "split": "val"}' \
  '' \
  '{"ctx": "Caf\u00e9 \"quoted\" \ud83d\ude00 and na\u00efve\ttabs", "endings": ["\u00fcber", "x", "  two spaces", "ends\n"], "label": 0}' >"$w/good.jsonl"
printf '{"ctx": "Raw UTF-8: Ελληνικά 日本語", "endings": ["a", "b"], "label": 1}\r\n' >>"$w/good.jsonl"

if out=$("$bin" --tokenizer "$tokdir" -o "$w/good.bin" "$w/good.jsonl" 2>&1) && grep -q "3 examples" <<<"$out"; then
    pass
else
    fail "good input: $out"
fi
if "$PY" - "$w/good.jsonl" "$w/good.bin" "$w" <<'PYEOF'
import json, os, struct, subprocess, sys
sys.path.insert(0, "scripts/ref")
from hellaswag_ref import read_evalfile
lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
got = read_evalfile(sys.argv[2])
assert len(got) == len(lines), (len(got), len(lines))
texts = []
for ex in lines:
    texts.append(ex["ctx"])
    texts += [" " + e for e in ex["endings"]]
rec = os.path.join(sys.argv[3], "records")
with open(rec, "wb") as f:
    for t in texts:
        b = t.encode("utf-8")
        f.write(struct.pack("<I", len(b)) + b)
subprocess.run(["node", "scripts/test/tokenizer_parity.js", rec, rec + ".ids", "--records"], check=True)
data = open(rec + ".ids", "rb").read()
ids, p = [], 0
while p < len(data):
    n = struct.unpack_from("<I", data, p)[0]
    ids.append(list(struct.unpack_from(f"<{n}I", data, p + 4)))
    p += 4 + 4 * n
k = 0
for ex, (label, ctx, endings) in zip(lines, got):
    assert label == ex["label"], (label, ex["label"])
    assert ctx == ids[k], ("ctx", ctx, ids[k])
    k += 1
    assert len(endings) == len(ex["endings"])
    for e in endings:
        assert e == ids[k], ("ending", e, ids[k])
        k += 1
print("tokens match tiktoken")
PYEOF
then pass; else fail "the eval file does not hold the JSONL's labels and tiktoken's tokens"; fi

expect_refusal() {  # expect_refusal WHAT LINE_COL_PHRASE JSONL_LINES...
    local what=$1 phrase=$2 out rc
    shift 2
    printf '%s\n' "$@" >"$w/bad.jsonl"
    printf 'earlier output\n' >"$w/bad.bin"
    out=$("$bin" --tokenizer "$tokdir" -o "$w/bad.bin" "$w/bad.jsonl" 2>&1); rc=$?
    if [ "$rc" = 1 ] && grep -qF -- "$w/bad.jsonl $phrase" <<<"$out" && [ "$(cat "$w/bad.bin")" = "earlier output" ] &&
        [ ! -e "$w/bad.bin.tmp" ] && [ "$(wc -l <<<"$out")" = 1 ]; then
        pass
    else
        fail "$what: exit $rc, output: $out"
    fi
}
good='{"ctx": "c", "endings": ["a", "b", "c", "d"], "label": 2}'
expect_refusal "malformed JSON" "line 2 column 28: expected ',' or '}'" "$good" '{"ctx": "c", "endings": [] "label": 1}'
expect_refusal "no label" "line 1 column 1: the object has no \"label\"" '{"ctx": "c", "endings": ["a"]}' "$good"
expect_refusal "label out of range" "line 3 column 53: \"label\" must be a whole number from 0 to 3" "$good" "$good" '{"ctx": "c", "endings": ["a","b","c","d"], "label": 4}'
expect_refusal "an ending not a string" "line 1 column 31: ending 1 must be a non-empty string" '{"ctx": "c", "endings": ["a", 5], "label": 0}'
expect_refusal "empty context" "line 1 column 9: \"ctx\" must be a non-empty string" '{"ctx": "", "endings": ["a"], "label": 0}'
expect_refusal "not an object" "line 1 column 1: the line is an array" '[1, 2]'
echo "test_prepare_hellaswag: $ok passed, $bad failed"
[ "$bad" = 0 ]
