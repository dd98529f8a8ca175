#!/usr/bin/env python3
"""hellaswag_synthetic.py: a HellaSwag-shaped eval file of random tokens, in llm.c's format.

    python3 scripts/test/hellaswag_synthetic.py -n 10042 -o hellaswag_synth.bin        # d12 timing
    python3 scripts/test/hellaswag_synthetic.py -n 50 --vocab 1000 --seed 50 \\
        --ctx 4:60 --ending 2:24 -o dev/test/data/hellaswag_synth50.bin                 # the CI file

Each example: a context of --ctx MIN:MAX random token ids, 4 endings of --ending MIN:MAX ids,
label = index % 4 (fixed, whatever the model). Ids are uniform in [0, --vocab). The generator is
splitmix64 from --seed, so a seed gives the same file on every machine and Python. The file is
written here with Python's own writer (independent of llmc/hellaswag.cpp's), so a test that
reads it with the C++ reader checks the format both ways. Needs no third-party package.
"""
import argparse
import struct
import sys

MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n):  # uniform enough for test data: n is far below 2^64
        return self.next() % n


def span(text):
    lo, _, hi = text.partition(":")
    lo, hi = int(lo), int(hi or lo)
    if not 1 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"need MIN:MAX with 1 <= MIN <= MAX, got '{text}'")
    return lo, hi


def write_evalfile(path, examples):
    """llm.c's eval format: 256 int32 header (magic, version, count, longest example bytes),
    then per example uint16: 65535, bytes, index, label, K, ctx len, ctx, K x (len, ending)."""
    stream, longest = [], 0
    for i, (label, ctx, endings) in enumerate(examples):
        ex = [65535, 0, i, label, len(endings), len(ctx), *ctx]
        for e in endings:
            ex += [len(e), *e]
        ex[1] = 2 * len(ex)
        longest = max(longest, ex[1])
        stream += ex
    header = [20240522, 1, len(examples), longest] + [0] * 252
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(stream)}H", *stream))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--examples", type=int, default=10042, help="examples (10042)")
    p.add_argument("--vocab", type=int, default=50257, help="ids drawn from [0, V) (50257)")
    p.add_argument("--ctx", type=span, default=(16, 112), help="context length MIN:MAX (16:112)")
    p.add_argument("--ending", type=span, default=(8, 48), help="ending length MIN:MAX (8:48)")
    p.add_argument("--seed", type=int, default=1, help="generator seed (1)")
    p.add_argument("-o", "--out", required=True, help="the eval file to write")
    a = p.parse_args()
    if not 1 <= a.examples <= 65535 or not 1 <= a.vocab <= 65535:
        sys.exit("error: need 1..65535 examples and a vocabulary of 1..65535 ids")
    rng = SplitMix64(a.seed)

    def tokens(lo, hi):
        return [rng.below(a.vocab) for _ in range(lo + rng.below(hi - lo + 1))]

    examples = [(i % 4, tokens(*a.ctx), [tokens(*a.ending) for _ in range(4)])
                for i in range(a.examples)]
    write_evalfile(a.out, examples)
    print(f"wrote {a.out}: {a.examples} examples, ids below {a.vocab}")


if __name__ == "__main__":
    main()
