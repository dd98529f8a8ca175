#!/usr/bin/env bash
# test_datasets.sh: scripts/data/datasets.sh fineweb / fineweb-edu / tinystories on the small fixtures
# of dev/test/data/ (made by dev/test/data/make_fixtures.mjs; CPU, offline but for npm, ~20 s).
#
# FineWeb: a snappy Parquet file (3-row groups) and FineWeb-Edu: a zstd one (4-row groups), both
# written by parquet-wasm: scripts/data/parquet_to_jsonl.mjs (hyparquet) must give back exactly the
# texts the fixture maker wrote (dev/test/data/*.expected.jsonl), and the shards must hold EOT + each
# text's tiktoken ids (scripts/test/tokenizer_parity.js), in order, split at $LLMC_VAL_TOKENS.
# TinyStories: the JSON-array file and its JSONL twin, prepared with --field story, give the
# same token stream, equal to EOT + tiktoken ids of each story. Also: a Parquet file without the
# column, and --from a missing file, fail with one sentence. Needs ./prepare_data, node, python3
# and GPT-2's tokenizer files (SKIP without them).
set -u
cd "$(dirname "$0")/../.." || exit 1
tokdir=${LLMC_TOKENIZER_DIR:-build/tokenizer}
if ! why=$(bash scripts/data/tokenizer_files.sh "$tokdir" 2>&1 >/dev/null); then
    echo "SKIP test_datasets: no GPT-2 tokenizer files: $why"
    exit 0
fi
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
ok=0 bad=0
pass() { ok=$((ok + 1)); }
fail() { bad=$((bad + 1)); echo "FAIL: $*"; }
export LLMC_TOKENIZER_DIR=$tokdir

# check_shards DIR NAME JSONL VAL_TOKENS FIELD: the shards of DIR are EOT + tiktoken(FIELD) of
# each JSONL object in order, the first VAL_TOKENS of them in val and the rest in train.
check_shards() {
    python3 - "$@" <<'PYEOF'
import glob, json, os, struct, subprocess, sys
d, name, jsonl, val_tokens, field = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
texts = [json.loads(l)[field] for l in open(jsonl, encoding="utf-8") if l.strip()]
rec = os.path.join(d, ".records")
with open(rec, "wb") as f:
    for t in texts:
        b = t.encode("utf-8")
        f.write(struct.pack("<I", len(b)) + b)
subprocess.run(["node", "scripts/test/tokenizer_parity.js", rec, rec + ".ids", "--records"], check=True)
data, docs, p = open(rec + ".ids", "rb").read(), [], 0
while p < len(data):
    n = struct.unpack_from("<I", data, p)[0]
    docs.append([50256] + list(struct.unpack_from(f"<{n}I", data, p + 4)))
    p += 4 + 4 * n
def read(split):
    toks = []
    for path in sorted(glob.glob(os.path.join(d, f"{name}_{split}_*.bin"))):
        raw = open(path, "rb").read()
        magic, version, n = struct.unpack_from("<3i", raw, 0)
        assert magic == 20240520 and version == 1 and len(raw) == 1024 + 2 * n, path
        toks += struct.unpack_from(f"<{n}H", raw, 1024)
    return toks
train, val = read("train"), read("val")
stream = [t for doc in docs for t in doc]
assert val == stream[:val_tokens] and train == stream[val_tokens:], "split or tokens differ"
print(f"{name}: {len(docs)} documents, {len(stream)} tokens ({len(val)} val) match tiktoken")
PYEOF
}

for ds in fineweb fineweb-edu; do
    fixture=dev/test/data/fineweb_sample
    name=fineweb
    [ "$ds" = fineweb-edu ] && fixture=dev/test/data/fineweb_edu_sample && name=edu_fineweb
    if node scripts/data/parquet_to_jsonl.mjs "$fixture.parquet" >"$w/$ds.jsonl" 2>"$w/$ds.err" &&
        python3 -c 'import json,sys; a=[json.loads(l) for l in open(sys.argv[1])]; b=[json.loads(l) for l in open(sys.argv[2])]; sys.exit(a != b)' \
            "$w/$ds.jsonl" "$fixture.expected.jsonl"; then
        pass
    else
        fail "$ds: parquet_to_jsonl does not give back the fixture's texts ($(cat "$w/$ds.err"))"
    fi
    if out=$(LLMC_VAL_TOKENS=40 bash scripts/data/datasets.sh "$ds" --from "$fixture.parquet" "$w/$ds" 2>&1) &&
        check_shards "$w/$ds" "$name" "$fixture.expected.jsonl" 40 text; then
        pass
    else
        fail "$ds: datasets.sh --from the fixture: $out"
    fi
    [ ! -e "$w/$ds/jsonl" ] && pass || fail "$ds: the intermediate JSONL was not removed"
done

for f in json jsonl; do
    if out=$(LLMC_VAL_FRACTION=0 bash scripts/data/datasets.sh tinystories --from "dev/test/data/tinystories_sample.$f" "$w/ts_$f" 2>&1) &&
        check_shards "$w/ts_$f" tinystories dev/test/data/tinystories_sample.jsonl 0 story; then
        pass
    else
        fail "tinystories from .$f: $out"
    fi
done
if cmp -s "$w/ts_json/tinystories_train_000000.bin" "$w/ts_jsonl/tinystories_train_000000.bin"; then
    pass
else
    fail "the JSON array and the JSONL give different shards"
fi

out=$(node scripts/data/parquet_to_jsonl.mjs --column story dev/test/data/fineweb_sample.parquet 2>&1)
[ $? = 1 ] && grep -q "has no column 'story'" <<<"$out" && pass || fail "a missing column: $out"
out=$(bash scripts/data/datasets.sh fineweb --from "$w/missing.parquet" "$w/x" 2>&1)
[ $? = 1 ] && grep -q "no .parquet file there\|no such file" <<<"$out" && pass || fail "--from a missing file: $out"
echo "test_datasets: $ok passed, $bad failed"
[ "$bad" = 0 ]
