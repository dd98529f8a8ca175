#!/usr/bin/env bash
# test_prepare_data.sh: ./prepare_data end to end on a small corpus built here (CPU, ~15 s).
#
# The corpus: a folder (text files at two depths, a hidden file and an empty one, a JSONL file),
# and a JSONL file with every JSON escape, \u surrogate pairs and lone surrogates, raw UTF-8,
# nested values, a repeated key, an escaped key, CRLF and blank lines. A Python reader (standard
# library only) checks the shards (header, sizes, every shard but the last full), that each
# document is EOT + its tokens, that decoding with OUT/tokenizer.bin gives the input text back,
# and that train and val partition the documents in input order. Then: identical files for
# 1, 2 and 3 threads and any segment size; the same streams for any shard size; the val split
# unchanged by appending documents, changed by the seed; --val-tokens; --doc-sep; stale shards
# removed; and every bad input (missing or unreadable file, broken link, empty corpus, JSON
# without "text", malformed JSON, a failure after shards were written) exits 1 with its
# sentence, leaves no shard or temporary file, and leaves an earlier output untouched. Also the
# Brown corpus's tag stripping in scripts/datasets.sh, on a made-up tagged text.
#
# Needs ./prepare_data (make prepare_data), python3 and GPT-2's tokenizer files in
# $LLMC_TOKENIZER_DIR (default build/tokenizer, fetched by scripts/tokenizer_files.sh); prints
# SKIP and exits 77 when the files cannot be had. Ends with "test_prepare_data: N passed, M failed".
set -u
cd "$(dirname "$0")/.." || exit 1
bin=./prepare_data
tokdir=${LLMC_TOKENIZER_DIR:-build/tokenizer}
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP test_prepare_data: no python3 to read the shards back"
    exit 77
fi
if ! why=$(bash scripts/tokenizer_files.sh "$tokdir" 2>&1 >/dev/null); then
    echo "SKIP test_prepare_data: no GPT-2 tokenizer files: $why"
    exit 77
fi
if [ ! -x "$bin" ]; then
    echo "FAIL: $bin is missing; build it with make prepare_data"
    echo "test_prepare_data: 0 passed, 1 failed"
    exit 1
fi
w=$(mktemp -d)
trap 'chmod -R u+rwx "$w" 2>/dev/null; rm -rf "$w"' EXIT
ok=0 bad=0
pass() { ok=$((ok + 1)); }
fail() { bad=$((bad + 1)); echo "FAIL: $*"; }
check() {  # check WHAT COMMAND...: passes when the command exits 0; shows its output otherwise
    local what=$1 out
    shift
    if out=$("$@" 2>&1); then pass; else fail "$what"; echo "$out" | head -n 15 | sed 's/^/    /'; fi
}
prep() { "$bin" --tokenizer "$tokdir" "$@"; }
grep_out() {  # grep_out PHRASE COMMAND...: the command succeeds and prints PHRASE
    local phrase=$1 out
    shift
    if out=$("$@" 2>&1) && grep -qF -- "$phrase" <<<"$out"; then return 0; fi
    echo "$out"
    return 1
}
py() { python3 "$w/check.py" "$@"; }

cat >"$w/check.py" <<'EOF'
import json, os, struct, sys

EOT = 50256

def read_tokenizer(path):
    b = open(path, "rb").read()
    magic, version, n, eot = struct.unpack_from("<4i", b, 0)
    assert (magic, version, n, eot) == (20240328, 2, 50257, EOT), (magic, version, n, eot)
    table, p = [], 1024
    for _ in range(n):
        table.append(b[p + 1:p + 1 + b[p]]); p += 1 + b[p]
    assert p == len(b), "tokenizer.bin has trailing bytes"
    return table

def shards(out, name, split):
    return sorted(os.path.join(out, f) for f in os.listdir(out)
                  if f.startswith(f"{name}_{split}_") and f.endswith(".bin"))

def stream(out, name, split, cap=None):
    toks, files = [], shards(out, name, split)
    for i, path in enumerate(files):
        b = open(path, "rb").read()
        magic, version, n = struct.unpack_from("<3i", b, 0)
        assert (magic, version) == (20240520, 1), f"{path}: header {magic} {version}"
        assert len(b) == 1024 + 2 * n, f"{path}: {len(b)} bytes for {n} tokens"
        assert os.path.basename(path) == f"{name}_{split}_{i:06d}.bin", f"shard names skip: {path}"
        if cap is not None:
            assert n <= cap and (n == cap or i == len(files) - 1), f"{path}: {n} tokens, cap {cap}"
        toks += struct.unpack_from(f"<{n}H", b, 1024)
    return toks

def documents(toks, table):
    assert not toks or toks[0] == EOT, "a split does not start with EOT"
    docs, cur = [], None
    for t in toks:
        if t == EOT:
            if cur is not None: docs.append(bytes(cur))
            cur = bytearray()
        else:
            cur += table[t]
    if cur is not None: docs.append(bytes(cur))
    return docs

def fix_surrogates(s):  # what prepare_data makes of a lone \uD800-\uDFFF: U+FFFD
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")

def expected(listing):
    docs = []
    for kind, path in json.load(open(listing)):
        if kind == "jsonl":
            for line in open(path, encoding="utf-8-sig", newline="\n"):
                if line.strip(): docs.append(fix_surrogates(json.loads(line)["text"]).encode())
        else:
            docs.append(open(path, "rb").read())
    return [d for d in docs if d]

def cmd_docs(out, name, cap, listing, min_val=0, min_train=1):
    table = read_tokenizer(os.path.join(out, "tokenizer.bin"))
    want = expected(listing)
    tr = documents(stream(out, name, "train", int(cap)), table)
    va = documents(stream(out, name, "val", int(cap)), table)
    assert len(tr) + len(va) == len(want), f"{len(tr)} + {len(va)} documents, want {len(want)}"
    i = j = 0
    for k, d in enumerate(want):  # train and val must interleave back into the input order
        if i < len(tr) and tr[i] == d: i += 1
        elif j < len(va) and va[j] == d: j += 1
        else: raise AssertionError(f"document {k} decodes wrong or out of order: {d[:60]!r}")
    assert len(va) >= int(min_val) and len(tr) >= int(min_train), f"train {len(tr)} val {len(va)}"
    print(f"{len(tr)} train + {len(va)} val documents decode to the input")

def cmd_same_streams(a, b, name):
    for s in ("train", "val"):
        assert stream(a, name, s) == stream(b, name, s), f"{s} streams differ"

def cmd_prefix(a, b, name):  # b's streams extend a's
    for s in ("train", "val"):
        x, y = stream(a, name, s), stream(b, name, s)
        assert y[:len(x)] == x and len(y) >= len(x), f"{s}: the appended run moved documents"

def cmd_differ(a, b, name):
    assert stream(a, name, "val") != stream(b, name, "val"), "another seed gave the same split"

def cmd_val_tokens(split_out, whole_out, name, n):
    n = int(n)
    whole = stream(whole_out, name, "train")  # a run with --val-fraction 0
    val, train = stream(split_out, name, "val"), stream(split_out, name, "train")
    assert len(val) == n, f"val has {len(val)} tokens, want {n}"
    assert val + train == whole, "val + train is not the whole stream in order"

def cmd_count(out, name, split, n):
    got = len(shards(out, name, split))
    assert got == int(n), f"{got} {split} shards, want {n}"

def cmd_corpus(w):
    d = os.path.join(w, "corpus", "dir")
    os.makedirs(os.path.join(d, "sub"))
    files = {
        "a.txt": "First document.\nIt has two lines.\n",
        "sub/b.txt": "Ünïcödé — 日本語 😀 text with  double  spaces\n\n\nand blank lines\n",
        ".hidden.txt": "SHOULD NOT APPEAR",
        "empty.txt": "",
        "z.jsonl": '{"text": "jsonl inside a folder"}\n{"text": "second line"}\n',
    }
    lines = []
    for i in range(400):  # long enough for many segments at --segment-bytes 64
        lines.append(f"Line {i}: the quick brown fox's {i * 7919 % 1000} jumps.\n")
        if i % 37 == 0: lines.append("\n")
        if i % 53 == 0: lines.append("  indented\twith tab\n")
    files["sub/c.md"] = "".join(lines)
    for rel, text in files.items():
        with open(os.path.join(d, rel), "w", encoding="utf-8", newline="") as f: f.write(text)
    jl = [
        '{"text": "plain"}',
        '{"id": 3, "meta": {"text": "nested, not this", "a": [1, 2.5e3, -0.1, true, false, null,'
        ' "s\\"x", {}, []]}, "text": "esc: \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\u20AC'
        ' \\ud83d\\ude00 end"}',
        '',
        '   ',
        '{"text": "lone \\ud800 high, lone \\udc00 low, high then A: \\ud83d\\u0041"}',
        '{"te\\u0078t": "a key written with an escape"}',
        '{"text": "crlf line"}\r',
        '{"text": ""}',
        '{"text": "raw UTF-8: 日本語 ☃ and a tab\\tinside", "x": -0}',
        '{"text": "first", "text": "the last one wins"}',
        '  {  "text"  :  "spaces around"  }  ',
    ]
    with open(os.path.join(w, "corpus", "data.jsonl"), "w", encoding="utf-8", newline="") as f:
        f.write("\ufeff" + "\n".join(jl) + "\n")
    listing = [("text", os.path.join(d, "a.txt")), ("text", os.path.join(d, "empty.txt")),
               ("text", os.path.join(d, "sub/b.txt")), ("text", os.path.join(d, "sub/c.md")),
               ("jsonl", os.path.join(d, "z.jsonl")), ("jsonl", os.path.join(w, "corpus", "data.jsonl"))]
    json.dump(listing, open(os.path.join(w, "listing.json"), "w"))
    extra = listing + [("jsonl", os.path.join(w, "corpus", "extra.jsonl"))]
    with open(os.path.join(w, "corpus", "extra.jsonl"), "w") as f:
        for i in range(6): f.write(json.dumps({"text": f"appended document {i}"}) + "\n")
    json.dump(extra, open(os.path.join(w, "listing_extra.json"), "w"))
    with open(os.path.join(w, "corpus", "sep.txt"), "w") as f:
        f.write("Doc A\n===\nDoc B\n===\n\n===\nDoc C")
    json.dump([["text", os.path.join(w, "corpus", p)] for p in ("sepA", "sepB", "sepC")],
              open(os.path.join(w, "listing_sep.json"), "w"))
    for p, t in (("sepA", "Doc A"), ("sepB", "Doc B"), ("sepC", "Doc C")):
        open(os.path.join(w, "corpus", p), "w").write(t)
    # 37 MB before the bad line: prepare_data reads 16 MB batches, one ahead of the one it encodes,
    # so the error comes in the third batch, after the first was written as shards.
    with open(os.path.join(w, "corpus", "big_then_bad.jsonl"), "w") as f:
        line = json.dumps({"text": "Some filler text, repeated to fill a few batches. " * 40})
        for _ in range(18000): f.write(line + "\n")
        f.write('{"text": "missing its closing brace"\n')

def cmd_brown(w):  # scripts/datasets.sh brown-jsonl on a text in the Brown corpus's form C
    import subprocess
    tagged = ("\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, Jr./np ./.\n\n\n"
              "\tHe/pps left/vbd (/( quickly/rb )/) ;/. ;/.\nIt/pps ended/vbd ./.\n\n\n"
              "Merger/nn-hl proposed/vbn-hl\nA/at b\\c/nn \"x/nn 1-1/2/cd ./.\n")
    open(os.path.join(w, "tiny01"), "w").write(tagged)
    open(os.path.join(w, "cats.txt"), "w").write("tiny01 news\n")
    out = subprocess.run(["bash", "scripts/datasets.sh", "brown-jsonl", os.path.join(w, "cats.txt"),
                          os.path.join(w, "tiny01")], capture_output=True, text=True, check=True)
    want = {"id": "tiny01", "genre": "news", "text": 'The jury said "no evidence", Jr.\n\n'
            'He left (quickly); It ended.\n\nMerger proposed\n\nA b\\c "x 1-1/2.\n'}
    got = json.loads(out.stdout)
    assert got == want, f"got {got!r}"

cmds = {"brown": cmd_brown, "docs": cmd_docs, "same_streams": cmd_same_streams,
        "prefix": cmd_prefix, "differ": cmd_differ, "val_tokens": cmd_val_tokens,
        "count": cmd_count, "corpus": cmd_corpus}
try:
    cmds[sys.argv[1]](*sys.argv[2:])
except AssertionError as e:
    print(f"check failed: {e}")
    sys.exit(1)
EOF

py corpus "$w" || { echo "FAIL: could not build the corpus"; echo "test_prepare_data: 0 passed, 1 failed"; exit 1; }
c=$w/corpus
inputs=("$c/dir" "$c/data.jsonl")

# --- the documents come back ----------------------------------------------------------------
check "--help" bash -c "$bin --help | grep -q 'usage: prepare_data'"
check "prepare (1 thread, 100-token shards)" prep -o "$w/t1" --name t --threads 1 \
    --shard-tokens 100 --segment-bytes 64 --val-fraction 0.3 "${inputs[@]}"
check "documents, EOTs, decoding, shard sizes" py docs "$w/t1" t 100 "$w/listing.json" 1 1
check "summary: 6 files (hidden one skipped), 2 empty documents" grep_out \
    "from 6 files (2 empty documents skipped)" prep -o "$w/sum" "${inputs[@]}"

# --- the output depends on nothing but the inputs and the options ---------------------------
for t in 2 3; do
    check "prepare ($t threads)" prep -o "$w/t$t" --name t --threads "$t" --shard-tokens 100 \
        --segment-bytes 64 --val-fraction 0.3 "${inputs[@]}"
    check "identical files for 1 and $t threads" diff -r "$w/t1" "$w/t$t"
done
check "prepare (default segments)" prep -o "$w/seg" --name t --shard-tokens 100 \
    --val-fraction 0.3 "${inputs[@]}"
check "identical files for any segment size" diff -r "$w/t1" "$w/seg"
check "prepare (one big shard)" prep -o "$w/big" --name t --val-fraction 0.3 "${inputs[@]}"
check "same streams for any shard size" py same_streams "$w/t1" "$w/big" t
check "one shard per split" py count "$w/big" t train 1

# --- validation split ------------------------------------------------------------------------
check "prepare with appended documents" prep -o "$w/app" --name t --val-fraction 0.3 \
    "${inputs[@]}" "$c/extra.jsonl"
check "appended documents decode" py docs "$w/app" t 100000000 "$w/listing_extra.json"
check "appending keeps every earlier document's split" py prefix "$w/big" "$w/app" t
check "prepare with another seed" prep -o "$w/seed" --name t --val-fraction 0.3 --seed 7 \
    "${inputs[@]}"
check "another seed, another split" py differ "$w/big" "$w/seed" t
check "prepare --val-fraction 0" prep -o "$w/v0" --name t --val-fraction 0 "${inputs[@]}"
check "--val-fraction 0: no val shard" py count "$w/v0" t val 0
check "prepare --val-tokens 37" prep -o "$w/vt" --name t --val-tokens 37 "${inputs[@]}"
check "--val-tokens: the first 37 tokens are val" py val_tokens "$w/vt" "$w/v0" t 37
check "prepare --val-fraction 1" prep -o "$w/v1" --name t --val-fraction 1 "${inputs[@]}"
check "--val-fraction 1: no train shard" py count "$w/v1" t train 0

# --- formats, document separator, stale shards ---------------------------------------------
check "--format text reads a .jsonl file as one document" grep_out "1 document," \
    prep -o "$w/fmt" --format text "$c/data.jsonl"
cp "$c/data.jsonl" "$w/jsonl_lines.txt"
check "--format jsonl reads a .txt file as JSONL" grep_out "8 documents," \
    prep -o "$w/fmt" --format jsonl "$w/jsonl_lines.txt"
check "prepare --doc-sep" prep -o "$w/sep" --name t --doc-sep '\n===\n' --val-fraction 0 \
    "$c/sep.txt"
check "--doc-sep cuts documents, drops the separator and empty pieces" \
    py docs "$w/sep" t 100000000 "$w/listing_sep.json"
check "rewrite with one shard" prep -o "$w/t1" --name t --val-fraction 0.3 "${inputs[@]}"
check "stale shards of the earlier run removed" py count "$w/t1" t train 1

# --- the Brown corpus's tag stripping (scripts/datasets.sh), on a made-up text --------------
check "Brown tags stripped to plain text" py brown "$w"

# --- bad input: exit 1, one sentence, nothing left behind -----------------------------------
clean() {  # no shard, tokenizer or temporary file in the folder
    [ -z "$(find "$1" -name '*.bin' -o -name '*.tmp' 2>/dev/null)" ]
}
expect_bad() {  # expect_bad WHAT PHRASE ARGS...: exit 1 with PHRASE, fresh folder left clean
    local what=$1 phrase=$2 out rc
    shift 2
    rm -rf "$w/bad"
    out=$(prep -o "$w/bad" --threads 2 --shard-tokens 1000 "$@" 2>&1); rc=$?
    if [ "$rc" = 1 ] && grep -qF -- "$phrase" <<<"$out" && clean "$w/bad" &&
        [ "$(grep -c '^error: ' <<<"$out")" = 1 ]; then
        pass
    else
        fail "$what: exit $rc (want 1), want '$phrase', clean: $(clean "$w/bad" && echo yes || echo no)"
        echo "$out" | tail -n 5 | sed 's/^/    /'
    fi
}
jl() { printf '%s\n' "$@" >"$w/bad.jsonl"; }
expect_bad "missing file" "cannot read $c/nope.txt" "$c/dir" "$c/nope.txt"
mkdir -p "$w/linkdir" && echo fine >"$w/linkdir/a.txt" && ln -sf "$w/missing" "$w/linkdir/b.txt"
expect_bad "broken link in a folder" "cannot read $w/linkdir/b.txt" "$w/linkdir"
if [ "$(id -u)" != 0 ]; then
    echo secret >"$w/locked.txt" && chmod 000 "$w/locked.txt"
    expect_bad "unreadable file" "cannot read $w/locked.txt" "$w/locked.txt"
fi
mkdir -p "$w/emptydir/sub" && : >"$w/emptydir/sub/e.txt"
expect_bad "empty corpus" "hold no text" "$w/emptydir"
mkdir -p "$w/nothing"
expect_bad "no files at all" "hold no text" "$w/nothing"
jl '{"text": "ok"}' '{"title": "no text here"}'
expect_bad "JSON without text" "bad.jsonl line 2: the JSON object has no \"text\" field" "$w/bad.jsonl"
jl '{"text": 12}'
expect_bad "text not a string" "line 1: \"text\" is a number, not a string" "$w/bad.jsonl"
jl '["text", "x"]'
expect_bad "not an object" "line 1: the line is not a JSON object" "$w/bad.jsonl"
jl '{"text": "ok"}' '' '{"text": "unterminated}'
expect_bad "unterminated string" "line 3: malformed JSON at column 10: unterminated string" "$w/bad.jsonl"
jl '{"text": "bad \x escape"}'
expect_bad "bad escape" "line 1: malformed JSON at column 15: unknown escape \\x" "$w/bad.jsonl"
jl '{"text": "a"} trailing'
expect_bad "trailing text" "unexpected text after the JSON object" "$w/bad.jsonl"
jl $'{"text": "raw\ttab"}'
expect_bad "raw control character" "a control character inside a string must be escaped" "$w/bad.jsonl"
jl '{"n": 01, "text": "x"}'
expect_bad "bad number" "expected ',' or '}'" "$w/bad.jsonl"
jl '{"text": "a",}'
expect_bad "trailing comma" "expected a key in double quotes" "$w/bad.jsonl"
jl '{"text": "\ud83d\udXYZ"}'
expect_bad "bad \\u digits" "\\u needs 4 hex digits" "$w/bad.jsonl"
jl '{"a": [1, 2}, "text": "x"}'
expect_bad "mismatched bracket" "expected ',' or ']'" "$w/bad.jsonl"
expect_bad "failure after shards were written" "big_then_bad.jsonl line 18001: malformed JSON" \
    "$c/big_then_bad.jsonl"
# An earlier, good output in the same folder survives a failed run unchanged.
rm -rf "$w/keep"
check "an earlier output" prep -o "$w/keep" --name t --val-fraction 0.3 "${inputs[@]}"
before=$(cd "$w/keep" && ls -A && cat ./* | cksum)
prep -o "$w/keep" --name t --shard-tokens 1000 "$c/big_then_bad.jsonl" >/dev/null 2>&1; rc=$?
after=$(cd "$w/keep" && ls -A && cat ./* | cksum)
if [ "$rc" = 1 ] && [ "$before" = "$after" ]; then
    pass
else
    fail "a failed run changed an earlier output (exit $rc)"
fi

# --- bad options: exit 2 --------------------------------------------------------------------
expect_usage() {  # expect_usage PHRASE ARGS...
    local phrase=$1 out rc
    shift
    out=$("$bin" "$@" 2>&1); rc=$?
    if [ "$rc" = 2 ] && grep -qF -- "$phrase" <<<"$out"; then
        pass
    else
        fail "prepare_data $*: exit $rc, want 2 and '$phrase'"
    fi
}
expect_usage "output folder is required" "$c/dir"
expect_usage "no input given" -o "$w/x"
expect_usage "unknown option --bogus" -o "$w/x" --bogus 1 "$c/dir"
expect_usage "--threads needs a whole number >= 1" -o "$w/x" --threads 0 "$c/dir"
expect_usage "--val-fraction needs a number in [0, 1]" -o "$w/x" --val-fraction 1.5 "$c/dir"
expect_usage "--format must be auto, text or jsonl" -o "$w/x" --format xml "$c/dir"
expect_usage "--shard-tokens needs a value" -o "$w/x" "$c/dir" --shard-tokens

echo "test_prepare_data: $ok passed, $bad failed"
[ "$bad" = 0 ]
