#!/usr/bin/env bash
# test_prepare_data.sh: ./prepare_data end to end on a small corpus built here (CPU, ~35 s).
#
# The corpus: a folder (text files at two depths, a hidden file and an empty one, a JSONL file),
# and a JSONL file with every JSON escape, \u surrogate pairs and lone surrogates, raw UTF-8,
# nested values, a repeated key, an escaped key, CRLF and blank lines. A Python reader (standard
# library only) checks the shards (header, sizes, every shard but the last full), that each
# document is EOT + its tokens, that decoding with OUT/tokenizer.bin gives the input text back,
# and that train and val partition the documents in input order. Then: identical files for
# 1, 2, 3 and 100000 (capped) threads, for threads the system refuses to start (ulimit), and any
# segment size; the same streams for any shard size; the val split unchanged by appending
# documents, changed by the seed; --val-tokens; --doc-sep; stale shards removed; and every bad
# input (missing or unreadable file, broken link, empty corpus, JSON without "text", malformed
# JSON, a failure after shards were written; compressed files, token shards, model, tokenizer
# and checkpoint files, UTF-16, NUL bytes early and late, invalid UTF-8; --val-tokens or
# --val-fraction leaving no train split; more than 10000 shards) exits 1 with its sentence and
# leaves no shard, temporary file or folder of its own, and an earlier output untouched.
# Standard input as text and JSONL gives the shards of the same file; literal <|endoftext|> is
# counted in a warning, and with --special-eot is the EOT token between independently encoded
# pieces. SIGINT, SIGTERM and SIGHUP (blocked on standard input, and while encoding into an
# earlier output) remove the temporaries and new folders, say so in one sentence and kill the
# process by that signal; a SIGINT ignored from the start stays ignored. Bad options exit 2.
# Also the Brown corpus's tag stripping in scripts/data/datasets.sh, on a made-up tagged text.
#
# Needs ./prepare_data (make prepare_data), python3 and GPT-2's tokenizer files in
# $LLMC_TOKENIZER_DIR (default build/tokenizer, fetched by scripts/data/tokenizer_files.sh); prints
# SKIP and exits 77 when the files cannot be had. Ends with "test_prepare_data: N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=./prepare_data
tokdir=${LLMC_TOKENIZER_DIR:-build/tokenizer}
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP test_prepare_data: no python3 to read the shards back"
    exit 77
fi
if ! why=$(bash scripts/data/tokenizer_files.sh "$tokdir" 2>&1 >/dev/null); then
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
    for i in range(1200):  # long enough for many segments at --segment-bytes 64, many shards
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

def cmd_brown(w):  # scripts/data/datasets.sh brown-jsonl on a text in the Brown corpus's form C
    import subprocess
    tagged = ("\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, Jr./np ./.\n\n\n"
              "\tHe/pps left/vbd (/( quickly/rb )/) ;/. ;/.\nIt/pps ended/vbd ./.\n\n\n"
              "Merger/nn-hl proposed/vbn-hl\nA/at b\\c/nn \"x/nn 1-1/2/cd ./.\n")
    open(os.path.join(w, "tiny01"), "w").write(tagged)
    open(os.path.join(w, "cats.txt"), "w").write("tiny01 news\n")
    out = subprocess.run(["bash", "scripts/data/datasets.sh", "brown-jsonl", os.path.join(w, "cats.txt"),
                          os.path.join(w, "tiny01")], capture_output=True, text=True, check=True)
    want = {"id": "tiny01", "genre": "news", "text": 'The jury said "no evidence", Jr.\n\n'
            'He left (quickly); It ended.\n\nMerger proposed\n\nA b\\c "x 1-1/2.\n'}
    got = json.loads(out.stdout)
    assert got == want, f"got {got!r}"

EOT_TEXT = "<|endoftext|>"

def cmd_eot_text(w):  # a text with literal <|endoftext|> in every awkward place, cut into pieces
    lines = [EOT_TEXT + "Start of the text.", "Two in a row" + EOT_TEXT * 2 + "then text."]
    for i in range(300):
        line = f"Line {i}: some words and numbers {i * 37}."
        if i % 7 == 0: line = line.replace("words", "wo" + EOT_TEXT + "rds")
        if i % 11 == 0: line = EOT_TEXT + " " + line
        if i % 13 == 0: line += "\n" + EOT_TEXT
        lines.append(line)
    lines.append("Not one: <|endoftext| and <endoftext|>." + EOT_TEXT)
    text = "\n".join(lines)
    open(os.path.join(w, "eot.txt"), "w").write(text)
    pieces = text.split(EOT_TEXT)
    os.makedirs(os.path.join(w, "eot_pieces"))
    for i, p in enumerate(pieces):  # empty pieces are empty files: empty documents, skipped
        open(os.path.join(w, "eot_pieces", f"p{i:05d}.txt"), "w").write(p)
    json.dump(pieces, open(os.path.join(w, "eot_pieces.json"), "w"))
    print(text.count(EOT_TEXT))

def cmd_special(special_out, pieces_out, name, pieces_json):
    # --special-eot: EOT, then each piece's own tokens, an EOT in place of each literal.
    pieces = json.load(open(pieces_json))
    enc, cur = [], None
    for t in stream(pieces_out, name, "train"):
        if t == EOT:
            if cur is not None: enc.append(cur)
            cur = []
        else:
            cur.append(t)
    enc.append(cur)
    assert len(enc) == sum(1 for p in pieces if p), "the pieces' run has the wrong document count"
    enc = iter(enc)
    want = [EOT]
    for i, p in enumerate(pieces):
        if i > 0: want.append(EOT)
        if p: want += next(enc)
    got = stream(special_out, name, "train")
    assert got == want, f"{len(got)} tokens, want {len(want)}; first difference at " + \
        str(next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want))))
    print(f"{len(pieces) - 1} literals written as EOT, {len(got)} tokens as expected")

def cmd_binary_inputs(w, shard, tokenizer):  # inputs prepare_data must refuse, one per file
    import gzip, random, shutil
    d = os.path.join(w, "notext"); os.makedirs(d)
    text = b"Some plain text for the compressed files.\n" * 50
    open(os.path.join(d, "corpus.txt.gz"), "wb").write(gzip.compress(text))
    open(os.path.join(d, "corpus.jsonl.gz"), "wb").write(gzip.compress(b'{"text": "a"}\n'))
    open(os.path.join(d, "corpus.bz2"), "wb").write(b"BZh91AY&SY" + bytes(range(1, 200)))
    open(os.path.join(d, "corpus.xz"), "wb").write(b"\xfd7zXZ\x00" + bytes(range(1, 200)))
    open(os.path.join(d, "corpus.zst"), "wb").write(b"\x28\xb5\x2f\xfd" + bytes(range(1, 200)))
    open(os.path.join(d, "corpus.zip"), "wb").write(b"PK\x03\x04" + bytes(range(1, 200)))
    shutil.copy(shard, os.path.join(d, "shard.bin"))
    shutil.copy(tokenizer, os.path.join(d, "tokenizer.bin"))
    open(os.path.join(d, "model.bin"), "wb").write(struct.pack("<256i", 20240326, 3, *[0] * 254))
    open(os.path.join(d, "state.bin"), "wb").write(struct.pack("<256i", 20240327, 2, *[0] * 254))
    open(os.path.join(d, "ckpt.bin"), "wb").write(b"LLMCCKPT" + bytes(1016))
    open(os.path.join(d, "utf16.txt"), "wb").write("UTF-16 text, ünï".encode("utf-16"))
    open(os.path.join(d, "nul_head.txt"), "wb").write(b"text, then a NUL\x00 and more text\n")
    # A NUL past the 64 KiB that are checked up front: found when the file is read.
    open(os.path.join(d, "nul_late.txt"), "wb").write(b"a line of text\n" * 5000 + b"\x00 late\n")
    r = random.Random(1)
    open(os.path.join(d, "random.bin"), "wb").write(bytes(r.randrange(256) for _ in range(20000)))
    # No NUL at all: continuation bytes alone, and Russian in Windows-1251.
    open(os.path.join(d, "high.txt"), "wb").write(bytes(r.randrange(0x80, 0xC0) for _ in range(3000)))
    open(os.path.join(d, "cp1251.txt"), "wb").write(("Привет, как дела? " * 50).encode("cp1251"))
    # Latin-1 French dense in accents: a sixth of its bytes are not UTF-8; read, with a warning.
    open(os.path.join(d, "latin1.txt"), "wb").write(
        ("Un café près de la fenêtre, à côté du théâtre. " * 40).encode("latin-1"))

def cmd_gen(path, kind, mb):  # JSONL of about mb MB: "fast" repeats a line, "slow" is random
    import random
    n, r = int(float(mb) * 1e6), random.Random(1)
    with open(path, "w") as f:
        if kind == "fast":
            line = json.dumps({"text": "Some filler text, repeated to fill a few batches. " * 40})
            f.write((line + "\n") * (n // (len(line) + 1) + 1))
        else:
            letters = bytes(range(ord("a"), ord("z") + 1)) * 9 + b" " * 22  # 256 bytes
            table = bytes(letters[i % len(letters)] for i in range(256))
            raw = r.randbytes(n).translate(table).decode()  # letters and spaces: no escapes
            f.write("".join('{"text": "' + raw[i:i + 2000] + '"}\n' for i in range(0, n, 2000)))

def cmd_signal(case, w, *prep):  # prep: the prepare_data command, without -o and inputs
    import signal, subprocess, threading, time
    names = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}

    def start(args, ignore=()):
        def reset():  # whatever this test inherited (a background job ignores SIGINT)
            for sig in names: signal.signal(sig, signal.SIG_IGN if sig in ignore else signal.SIG_DFL)
        return subprocess.Popen(list(prep) + args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, preexec_fn=reset)

    def wait_for(cond, p, seconds):
        end = time.time() + seconds
        while time.time() < end and p.poll() is None:
            if cond(): return True
            time.sleep(0.02)
        return False

    def temps(d):
        return [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs if f.endswith(".tmp")]

    def has_shard_temp(d):
        return os.path.isdir(d) and any("_train_" in f and f.endswith(".bin.tmp") for f in os.listdir(d))

    def feed(p, data):  # in a thread: the pipe holds 64 KB, prepare_data reads the rest
        def run():
            try: p.stdin.write(data); p.stdin.flush()
            except OSError: pass
        threading.Thread(target=run, daemon=True).start()

    def stop(p, sig):  # sends sig; the exit status and the message lines (no progress lines)
        p.send_signal(sig)
        try:
            rc = p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill(); p.wait()
            raise AssertionError(f"still running 60 s after {names[sig]}")
        err = p.stderr.read().decode(errors="replace")
        try: p.stdin.close()
        except OSError: pass
        lines = [l for l in err.splitlines() if not (l.startswith("[") or " MB/s " in l)]
        return rc, lines

    def expect_death(rc, lines, sig, *phrases):
        shown = f"exit {rc if rc >= 0 else 128 - rc} ({'killed by ' + names.get(-rc, str(-rc)) if rc < 0 else 'exited'}), stderr {lines}"
        assert rc == -sig, f"want death by {names[sig]} (a shell shows {128 + sig}); got {shown}"
        assert len(lines) == 1 and lines[0].startswith(f"prepare_data: interrupted by {names[sig]}; "), \
            f"want one sentence; got {lines}"
        for ph in phrases: assert ph in lines[0], f"want '{ph}' in: {lines[0]}"

    def snapshot(d):
        return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}

    base = os.path.join(w, "sig_" + case)
    os.makedirs(base)
    if case == "int_stdin":  # SIGINT while blocked reading a pipe, shard temporaries written
        out = os.path.join(base, "new", "deeper")
        line = json.dumps({"text": "Some filler text, repeated to fill a few batches. " * 40})
        p = start(["-o", out, "--threads", "2", "--format", "jsonl", "-"])
        # Three 16 MB batches: the first is written once the second is read; the pipe stays
        # open, so the run cannot end before the signal.
        feed(p, ((line + "\n") * (40_000_000 // len(line))).encode())
        assert wait_for(lambda: has_shard_temp(out), p, 120), \
            f"no shard temporary within 120 s (exit {p.poll()}: {p.stderr.read().decode() if p.poll() is not None else ''})"
        rc, lines = stop(p, signal.SIGINT)
        expect_death(rc, lines, signal.SIGINT, "temporary files and the folder " +
                     os.path.join(base, "new") + " that it had created")
        assert not os.path.exists(os.path.join(base, "new")), "the folders it created are left"
    elif case == "hup_stdin":  # SIGHUP while waiting for the first byte of standard input
        out = os.path.join(base, "new")
        p = start(["-o", out, "-"])
        assert wait_for(lambda: os.path.exists(os.path.join(out, ".tokenizer.bin.tmp")), p, 60), \
            "the tokenizer temporary never appeared"
        rc, lines = stop(p, signal.SIGHUP)
        expect_death(rc, lines, signal.SIGHUP, "removed its 1 temporary file and the folder " + out)
        assert not os.path.exists(out), "the folder it created is left"
    elif case == "term_file":  # SIGTERM while encoding a file, into an earlier output
        out, src = os.path.join(base, "out"), os.path.join(base, "in.jsonl")
        small = os.path.join(base, "small.txt")
        open(small, "w").write("An earlier output.\n")
        subprocess.run(list(prep) + ["-o", out, small], check=True, capture_output=True)
        # 16 MB batches: the first is written once the second is read, and the second (8 MB of
        # slow text on one thread) is still being encoded when the signal comes.
        before, mb = snapshot(out), 24
        for attempt in range(3):  # a machine fast enough to finish first gets a bigger input
            cmd_gen(src, "slow", mb)
            p = start(["-o", out, "--threads", "1", src])
            if wait_for(lambda: has_shard_temp(out), p, 120):
                rc, lines = stop(p, signal.SIGTERM)
                if rc != 0 and not any("was complete" in l for l in lines): break
                why = f"exit {rc}, {lines}"
            else:
                p.wait()
                why = f"exit {p.returncode} with no shard written: {p.stderr.read().decode()[-300:]}"
            before, mb = snapshot(out), mb * 2  # that run may have replaced the earlier output
        else:
            raise AssertionError(f"three runs ended before SIGTERM, the last on {mb // 2} MB ({why})")
        expect_death(rc, lines, signal.SIGTERM, "removed its", f"{out} holds what it held before")
        assert snapshot(out) == before, "the earlier output changed"
    elif case == "int_ignored":  # SIGINT ignored from the start (nohup, background job): kept so
        out = os.path.join(base, "out")
        p = start(["-o", out, "--format", "jsonl", "-"], ignore=(signal.SIGINT,))
        assert wait_for(lambda: os.path.exists(os.path.join(out, ".tokenizer.bin.tmp")), p, 60), \
            "the tokenizer temporary never appeared"
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert p.poll() is None, f"an ignored SIGINT ended the run (exit {p.poll()})"
        p.stdin.write(b'{"text": "still here"}\n'); p.stdin.close()
        assert p.wait(60) == 0, f"exit {p.returncode}: {p.stderr.read().decode()}"
        assert os.path.exists(os.path.join(out, "tokenizer.bin")), "no output after the run"
    assert not temps(base), f"temporary files left: {temps(base)}"
    print(f"{case}: ok")

def cmd_ntokens(out, name, split):
    print(len(stream(out, name, split)))

cmds = {"brown": cmd_brown, "docs": cmd_docs, "same_streams": cmd_same_streams,
        "prefix": cmd_prefix, "differ": cmd_differ, "val_tokens": cmd_val_tokens,
        "count": cmd_count, "corpus": cmd_corpus, "eot_text": cmd_eot_text,
        "special": cmd_special, "binary_inputs": cmd_binary_inputs, "gen": cmd_gen,
        "signal": cmd_signal, "ntokens": cmd_ntokens}
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
check "prepare (1 thread, 1025-token shards)" prep -o "$w/t1" --name t --threads 1 \
    --shard-tokens 1025 --segment-bytes 64 --val-fraction 0.3 "${inputs[@]}"
check "documents, EOTs, decoding, shard sizes" py docs "$w/t1" t 1025 "$w/listing.json" 1 1
check "summary: 6 files (hidden one skipped), 2 empty documents" grep_out \
    "from 6 files (2 empty documents skipped)" prep -o "$w/sum" "${inputs[@]}"

# --- the output depends on nothing but the inputs and the options ---------------------------
for t in 2 3; do
    check "prepare ($t threads)" prep -o "$w/t$t" --name t --threads "$t" --shard-tokens 1025 \
        --segment-bytes 64 --val-fraction 0.3 "${inputs[@]}"
    check "identical files for 1 and $t threads" diff -r "$w/t1" "$w/t$t"
done
check "prepare (default segments)" prep -o "$w/seg" --name t --shard-tokens 1025 \
    --val-fraction 0.3 "${inputs[@]}"
check "identical files for any segment size" diff -r "$w/t1" "$w/seg"
check "prepare --threads 100000: capped, with a note" grep_out \
    "note: --threads 100000 is more than this machine can use" prep -o "$w/many" --name t \
    --threads 100000 --shard-tokens 1025 --segment-bytes 64 --val-fraction 0.3 "${inputs[@]}"
check "identical files for 1 and 100000 threads" diff -r "$w/t1" "$w/many"
# Threads the system refuses: with 1 GB thread stacks (ulimit -s) in an address space of a few
# GB (ulimit -v), only the first few of 4 threads can start, or none; the run goes on with those
# it has, or on the main thread alone, and writes the same files.
refused() {  # refused WHAT PATTERN VMEM_KB...: the first size that gives PATTERN is checked
    local what=$1 pattern=$2 v out
    shift 2
    for v in "$@"; do
        rm -rf "$w/lim"
        out=$( (ulimit -s 1048576 && ulimit -v "$v" && exec "$bin" --tokenizer "$tokdir" \
            -o "$w/lim" --name t --threads 4 --shard-tokens 1025 --segment-bytes 64 \
            --val-fraction 0.3 "${inputs[@]}") 2>&1) || continue
        if grep -qE -- "$pattern" <<<"$out"; then
            check "$what: identical files" diff -r "$w/t1" "$w/lim"
            return
        fi
    done
    fail "$what: no address space size of $* KB gave '$pattern' (last output: $(tail -n 2 <<<"$out"))"
}
if (ulimit -s 1048576) 2>/dev/null; then
    refused "threads refused past the first" \
        "note: the system refused to start more than [123] of 4 encoding threads" \
        1500000 2600000 3600000 5000000
    refused "every thread refused" \
        "note: the system refused to start more than 0 of 4 .*the main thread alone" \
        500000 700000 900000 1100000
else
    fail "cannot raise ulimit -s to 1 GB (hard limit $(ulimit -Hs)), which the refused-thread checks need"
fi
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
check "--val-fraction 1 warns that there is no train shard" grep_out \
    "warning: --val-fraction 1 put every document in val" prep -o "$w/v1" --name t --val-fraction 1 "${inputs[@]}"
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

# --- the Brown corpus's tag stripping (scripts/data/datasets.sh), on a made-up text --------------
check "Brown tags stripped to plain text" py brown "$w"

# --- bad input: exit 1, one sentence, nothing left behind -----------------------------------
expect_bad() {  # expect_bad WHAT PHRASE ARGS...: exit 1 with PHRASE, its new folder removed
    local what=$1 phrase=$2 out rc
    shift 2
    rm -rf "$w/bad"
    out=$(prep -o "$w/bad" --threads 2 --shard-tokens 1025 "$@" 2>&1); rc=$?
    if [ "$rc" = 1 ] && grep -qF -- "$phrase" <<<"$out" && [ ! -e "$w/bad" ] &&
        [ "$(grep -c '^error: ' <<<"$out")" = 1 ]; then
        pass
    else
        fail "$what: exit $rc (want 1), want '$phrase', folder removed: $([ ! -e "$w/bad" ] && echo yes || echo no)"
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
    "$c/big_then_bad.jsonl" --shard-tokens 100000
# An earlier, good output in the same folder survives a failed run unchanged.
rm -rf "$w/keep"
check "an earlier output" prep -o "$w/keep" --name t --val-fraction 0.3 "${inputs[@]}"
before=$(cd "$w/keep" && ls -A && cat ./* | cksum)
prep -o "$w/keep" --name t --shard-tokens 100000 "$c/big_then_bad.jsonl" >/dev/null 2>&1; rc=$?
after=$(cd "$w/keep" && ls -A && cat ./* | cksum)
if [ "$rc" = 1 ] && [ "$before" = "$after" ]; then
    pass
else
    fail "a failed run changed an earlier output (exit $rc)"
fi

# A failed run removes the folders it created, and only those.
mkdir -p "$w/nest" "$w/empty_out"
jl '{"text": "ok"}' '{"text": 1}'
prep -o "$w/nest/a/b" "$w/bad.jsonl" >/dev/null 2>&1; rc=$?
check "a failed run removes the folders it created (exit $rc)" \
    test "$rc" = 1 -a -d "$w/nest" -a -z "$(ls -A "$w/nest")"
prep -o "$w/empty_out" "$w/bad.jsonl" >/dev/null 2>&1; rc=$?
check "a failed run keeps an empty folder it did not create (exit $rc)" \
    test "$rc" = 1 -a -d "$w/empty_out"

# --- inputs that are not text: one sentence naming the file, nothing written -----------------
py binary_inputs "$w" "$w/big/t_train_000000.bin" "$w/big/tokenizer.bin"
n=$w/notext
expect_bad "gzip" "$n/corpus.txt.gz is gzip-compressed, not text; decompress it on the way in: gunzip -c $n/corpus.txt.gz | prepare_data -o OUT_DIR - " "$n/corpus.txt.gz"
expect_bad "gzip'd JSONL" "gunzip -c $n/corpus.jsonl.gz | prepare_data -o OUT_DIR --format jsonl -" \
    "$n/corpus.jsonl.gz"
expect_bad "bzip2" "$n/corpus.bz2 is bzip2-compressed, not text" "$n/corpus.bz2"
expect_bad "xz" "$n/corpus.xz is xz-compressed, not text" "$n/corpus.xz"
expect_bad "zstd" "$n/corpus.zst is zstd-compressed, not text" "$n/corpus.zst"
expect_bad "zip" "$n/corpus.zip is zip-compressed, not text" "$n/corpus.zip"
expect_bad "token shard" "$n/shard.bin is a token shard, already tokenized" "$n/shard.bin"
expect_bad "tokenizer file" "$n/tokenizer.bin is a tokenizer file, not text" "$n/tokenizer.bin"
expect_bad "model file" "$n/model.bin is a model file, not text" "$n/model.bin"
expect_bad "debug state file" "$n/state.bin is a debug state file, not text" "$n/state.bin"
expect_bad "checkpoint" "$n/ckpt.bin is a training checkpoint, not text" "$n/ckpt.bin"
expect_bad "UTF-16" "$n/utf16.txt is UTF-16 text; convert it to UTF-8 first" "$n/utf16.txt"
expect_bad "NUL in the first 64 KiB" "$n/nul_head.txt holds a NUL byte (at byte 16)" "$n/nul_head.txt"
expect_bad "NUL past the first 64 KiB" "$n/nul_late.txt holds a NUL byte (at byte 75000)" \
    "$n/nul_late.txt"
expect_bad "random bytes" "$n/random.bin holds a NUL byte" "$n/random.bin"
expect_bad "invalid UTF-8 without NUL" "$n/high.txt is not UTF-8 text: 3000 of its first 3000 bytes" \
    "$n/high.txt"
expect_bad "Russian in Windows-1251" "$n/cp1251.txt is not UTF-8 text" "$n/cp1251.txt"
expect_bad "a binary file in a folder, before anything is read" "$n/ckpt.bin is a training checkpoint" \
    "$c/dir" "$n"
check "Latin-1 text (a sixth of its bytes not UTF-8) is read, with a warning" grep_out \
    "warning: 1 file has bytes that are not valid UTF-8 (each becomes U+FFFD), the first $n/latin1.txt (320 in its first 1,880 bytes)" \
    prep -o "$w/latin1" "$n/latin1.txt"

# --- standard input ------------------------------------------------------------------------------
from_pipe() {  # from_pipe FILE ARGS...: prepare_data ARGS with FILE piped into standard input
    local f=$1
    shift
    cat "$f" | prep "$@"
}
check "text on standard input" from_pipe "$c/dir/sub/c.md" -o "$w/in1" --name s --val-fraction 0 -
check "the same text as a file" prep -o "$w/in2" --name s --val-fraction 0 "$c/dir/sub/c.md"
check "standard input gives the file's shards" diff -r "$w/in1" "$w/in2"
check "JSONL on standard input" from_pipe "$c/data.jsonl" -o "$w/in3" --name s --format jsonl -
check "the same JSONL as a file" prep -o "$w/in4" --name s "$c/data.jsonl"
check "standard input gives the JSONL file's shards" diff -r "$w/in3" "$w/in4"
python3 -c 'import gzip, sys; sys.stdout.buffer.write(gzip.compress(open(sys.argv[1], "rb").read()))' \
    "$c/data.jsonl" >"$w/data.jsonl.gz"
check "decompressed on the way in, as the refusal says" bash -c \
    "gunzip -c '$w/data.jsonl.gz' | '$bin' --tokenizer '$tokdir' -o '$w/in5' --name s --format jsonl -"
check "gunzip -c | prepare_data - gives the JSONL file's shards" diff -r "$w/in4" "$w/in5"
expect_bad "gzip on standard input" "standard input is gzip-compressed, not text" - <"$n/corpus.txt.gz"
expect_bad "gzip'd JSONL on standard input" "standard input is gzip-compressed, not text" \
    --format jsonl - <"$n/corpus.jsonl.gz"
expect_bad "NUL on standard input" "standard input holds a NUL byte (at byte 16)" - <"$n/nul_head.txt"
expect_bad "- given twice" "- (standard input) is given twice" - "$c/dir" - </dev/null

# --- <|endoftext|> in the text ---------------------------------------------------------------
nlit=$(py eot_text "$w")
check "a warning counts literal <|endoftext|> ($nlit)" grep_out \
    "warning: the text holds the string <|endoftext|> $nlit times, written as ordinary text" \
    prep -o "$w/lit" --val-fraction 0 "$w/eot.txt"
jl '{"text": "a <|endoftext|> b"}' '{"text": "<|endoftext|><|endoftext|>"}'
check "... in JSONL too" grep_out "the string <|endoftext|> 3 times" prep -o "$w/lit" "$w/bad.jsonl"
check "prepare --special-eot" prep -o "$w/sp1" --name e --special-eot --val-fraction 0 \
    --threads 1 --segment-bytes 64 "$w/eot.txt"
check "prepare the text between the literals, one document each" prep -o "$w/sp_pieces" --name e \
    --val-fraction 0 "$w/eot_pieces"
check "--special-eot: EOT for each literal, the text between encoded on its own" \
    py special "$w/sp1" "$w/sp_pieces" e "$w/eot_pieces.json"
check "prepare --special-eot (3 threads, default segments)" prep -o "$w/sp3" --name e \
    --special-eot --val-fraction 0 --threads 3 "$w/eot.txt"
check "--special-eot: identical files for any thread count and segment size" diff -r "$w/sp1" "$w/sp3"
check "--special-eot: the summary counts them" grep_out \
    "<|endoftext|> found $nlit times in the text, written as the EOT token" \
    prep -o "$w/sp4" --special-eot "$w/eot.txt"

# scripts/data/prepare_data.sh passes the flag, "-" and --key=value through.
check "scripts/data/prepare_data.sh with --special-eot and -" bash -c "cat '$w/eot.txt' | bash \
    scripts/data/prepare_data.sh --tokenizer='$tokdir' --special-eot - '$w/wrap' --name=e --val-fraction 0"
check "... the same files as prepare_data" diff -r "$w/sp1" "$w/wrap"

# --- splits and shard sizes -------------------------------------------------------------------
total=$(py ntokens "$w/v0" t train)
expect_bad "--val-tokens past the corpus" \
    "--val-tokens 1,000,000,000 takes the whole corpus ($(python3 -c "print(f'{$total:,}')") tokens)" \
    --val-tokens 1000000000 "${inputs[@]}"
expect_bad "--val-tokens equal to the corpus" "takes the whole corpus" --val-tokens "$total" "${inputs[@]}"
check "--val-tokens one less than the corpus leaves one train token" \
    prep -o "$w/vt1" --name t --val-tokens $((total - 1)) "${inputs[@]}"
check "... exactly one" py val_tokens "$w/vt1" "$w/v0" t $((total - 1))
expect_bad "every document in val" \
    "the val split took every document (1 document in all) at --val-fraction 0.999, leaving nothing for train" \
    --val-fraction 0.999 "$c/dir/a.txt"
check "an empty val split is a warning" grep_out \
    "warning: the val split is empty: 0 of 1 document fell in it at --val-fraction 0.001" \
    prep -o "$w/noval" --val-fraction 0.001 "$c/dir/a.txt"
check "--shard-tokens below 8193 is a warning" grep_out \
    "warning: --shard-tokens 2000 is less than one batch of B=8, T=1024 (8193 tokens)" \
    prep -o "$w/s2000" --shard-tokens 2000 "${inputs[@]}"
python3 -c 'import sys; open(sys.argv[1], "w").write("a\n" * 5200000)' "$w/a_lines.txt"
expect_bad "more than 10000 shards" \
    "the train split needs more than 10000 shards of --shard-tokens 1025 tokens" \
    --val-fraction 0 "$w/a_lines.txt"

# --- signals: the temporaries and a new folder removed, one sentence, death by the signal -------
for case in int_stdin hup_stdin term_file int_ignored; do
    check "signal: $case" py signal "$case" "$w" "$bin" --tokenizer "$tokdir"
done

# --- bad options: exit 2 --------------------------------------------------------------------
expect_usage() {  # expect_usage PHRASE ARGS...: exit 2 with PHRASE, no folder made
    local phrase=$1 out rc
    shift
    out=$("$bin" "$@" 2>&1); rc=$?
    if [ "$rc" = 2 ] && grep -qF -- "$phrase" <<<"$out" && [ ! -e "$w/x" ]; then
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
expect_usage "--format must be auto, text, jsonl or json" -o "$w/x" --format xml "$c/dir"
expect_usage "--shard-tokens needs a value" -o "$w/x" "$c/dir" --shard-tokens
expect_usage "unknown option --bogus" -o "$w/x" "$c/dir" --bogus
expect_usage "--special-eot takes no value" -o "$w/x" --special-eot=1 "$c/dir"
expect_usage "--shard-tokens must be at least 1025" -o "$w/x" --shard-tokens 10 "$c/dir"
expect_usage "--shard-tokens must be at least 1025" -o "$w/x" --shard-tokens 1024 "$c/dir"
check "--key=value options" prep --out="$w/eq" --name=t --threads=2 --val-fraction=0 "$c/dir/a.txt"
check "... take their values" py count "$w/eq" t train 1

echo "test_prepare_data: $ok passed, $bad failed"
[ "$bad" = 0 ]
