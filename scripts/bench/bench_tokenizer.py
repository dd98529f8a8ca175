#!/usr/bin/env python3
"""bench_tokenizer.py: llmc/tokenizer against native tiktoken (Python), same text, same
documents, same thread counts; prints one table.

  scripts/bench/bench_tokenizer.py --text FILE [--dir build/tokenizer] [--threads 1,N]
      [--doc-bytes 65536] [--repeat 5] [--bench build/host/dev/bench/bench_tokenizer]

Needs tiktoken (any recent version) but no network: the "gpt2" encoding is built from DIR's
encoder.json and vocab.bpe (scripts/data/tokenizer_files.sh DIR fetches them) with tiktoken's rank
rule (the 256 bytes in alphabet order, then one rank per merge) and GPT-2's pattern.
The text is cut into documents exactly as dev/bench/bench_tokenizer.cpp cuts it (each ends at the
first newline at or after --doc-bytes from its start), each decoded as UTF-8 with U+FFFD for
ill-formed bytes. tiktoken runs encode_ordinary per document on one thread, and
encode_ordinary_batch(num_threads=N) for N > 1. Both sides: one warm-up run, then --repeat runs;
MB/s is text bytes / median time. tiktoken's ids are handed to the bench binary, which checks
that its own are identical (column "ids"). Default threads: 1 and every core.
"""
import argparse
import array
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

# The rooms of scripts/ this module imports from.
SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(SCRIPTS, room) for room in ("deps",)]
from pydeps import require  # noqa: E402 (after the path)

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def gpt2_ranks(folder):
    """tiktoken's mergeable ranks of GPT-2 from encoder.json + vocab.bpe (checked to agree)."""
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
    byte_to_char, extra = {}, 0
    for b in range(256):
        if b in printable:
            byte_to_char[b] = chr(b)
        else:
            byte_to_char[b] = chr(256 + extra)
            extra += 1
    char_to_byte = {c: b for b, c in byte_to_char.items()}

    def to_bytes(token):
        return bytes(char_to_byte[c] for c in token)

    ranks = {}
    for c in sorted(char_to_byte, key=ord):
        ranks[bytes([char_to_byte[c]])] = len(ranks)
    try:
        with open(os.path.join(folder, "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        with open(os.path.join(folder, "encoder.json"), encoding="utf-8") as f:
            encoder = json.load(f)
    except OSError as e:
        fail(f"cannot read GPT-2's tokenizer files ({e}); run scripts/data/tokenizer_files.sh {folder}")
    for line in lines[1:]:
        if line:
            left, right = line.split()
            ranks[to_bytes(left) + to_bytes(right)] = len(ranks)
    from_json = {to_bytes(k): v for k, v in encoder.items() if k != EOT}
    if from_json != ranks or encoder.get(EOT) != len(ranks):
        fail(f"encoder.json and vocab.bpe in {folder} disagree")
    return ranks


def split_documents(data, doc_bytes):
    docs, at = [], 0
    while at < len(data):
        end = data.find(b"\n", at + doc_bytes) if at + doc_bytes < len(data) else -1
        end = len(data) if end < 0 else end + 1
        docs.append(data[at:end])
        at = end
    return docs


def time_tiktoken(enc, texts, threads, repeat):
    def run():
        if threads == 1:
            return [enc.encode_ordinary(t) for t in texts]
        return enc.encode_ordinary_batch(texts, num_threads=threads)

    ids = run()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), ids


def run_ours(args, threads, ids_path):
    cmd = [args.bench, "--text", args.text, "--dir", args.dir, "--threads",
           ",".join(map(str, threads)), "--doc-bytes", str(args.doc_bytes), "--repeat",
           str(args.repeat), "--check", ids_path]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"{args.bench} failed ({e}); build it first (make build/host/dev/bench/bench_tokenizer)")
    rows = {}
    for line in out.splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split())
        rows[int(fields["threads"])] = fields
    return rows


def unicode_probe(enc):
    """Whether tiktoken's regex takes U+1C89 (a letter since Unicode 16.0) and U+323B0 (17.0) as
    letters: after a letter "'s" stays one token (338). llmc's tables are Unicode 16.0."""
    return [enc.encode_ordinary(ch + "'s")[-1] == 338 for ch in ("\u1c89", "\U000323b0")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", required=True)
    ap.add_argument("--dir", default="build/tokenizer")
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}")
    ap.add_argument("--doc-bytes", type=int, default=65536)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--bench", default="build/host/dev/bench/bench_tokenizer")
    args = ap.parse_args()
    tiktoken = require("tiktoken", "the native tokenizer it compares against")
    threads = sorted({int(t) for t in args.threads.split(",")})
    enc = tiktoken.Encoding(name="gpt2_local", pat_str=GPT2_PATTERN,
                            mergeable_ranks=gpt2_ranks(args.dir), special_tokens={EOT: 50256},
                            explicit_n_vocab=50257)
    with open(args.text, "rb") as f:
        data = f.read()
    texts = [d.decode("utf-8", "replace") for d in split_documents(data, args.doc_bytes)]
    reference, rows = None, []
    for t in threads:
        seconds, ids = time_tiktoken(enc, texts, t, args.repeat)
        reference = reference or ids
        rows.append((t, len(data) / 1e6 / seconds, sum(map(len, ids))))
    with tempfile.NamedTemporaryFile(suffix=".ids", delete=False) as f:
        f.write(array.array("I", [i for doc in reference for i in doc]).tobytes())
        ids_path = f.name
    try:
        ours = run_ours(args, threads, ids_path)
    finally:
        os.unlink(ids_path)
    v16, v17 = unicode_probe(enc)
    print(f"text {args.text}: {len(data) / 1e6:.1f} MB in {len(texts)} documents; "
          f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}); "
          f"tiktoken {getattr(tiktoken, '__version__', '?')}; its regex takes Unicode 16.0 "
          f"letters: {'yes' if v16 else 'no'}, 17.0: {'yes' if v17 else 'no'} (llmc: yes, no)")
    print("| threads | tiktoken MB/s | llmc MB/s | llmc / tiktoken | tokens | ids |")
    print("|---|---|---|---|---|---|")
    for t, mbps, tokens in rows:
        o = ours[t]
        print(f"| {t} | {mbps:.2f} | {float(o['MB/s']):.2f} | {float(o['MB/s']) / mbps:.2f}x | "
              f"{tokens} | {'same' if o['check'] == 'ok' else 'DIFFER'} |")


if __name__ == "__main__":
    main()
