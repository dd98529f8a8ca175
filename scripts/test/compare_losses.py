#!/usr/bin/env python3
"""compare_losses.py: the loss comparisons of scripts/test/test_multi_gpu.sh (standard library).

    compare_losses.py diff A.log B.log FIRST LAST
        -> "p90 diff_at_first identical count max" of |loss(A) - loss(B)| over steps FIRST..LAST
    compare_losses.py near A.log B.log FIRST LAST
        -> "p90 diff_at_first compared present max stop": the same up to the first loss spike of
           either run (a loss more than SPIKE x that run's lowest loss before it), the spike's
           step left out; stop is the spike's step, or 0 when there was none in FIRST..LAST
    compare_losses.py table NAME=LOG ...
        -> every step of every run side by side, then each run's validation losses

Logs are train_gpt2cu's output ("step N/M | loss L ..." and "val loss L" lines). When a log lacks
a step of FIRST..LAST, diff and near print nan statistics with the count of steps present, so the
caller's count check fails. "near" exists because on a corpus whose curve spikes, which step
spikes depends on the last bits of the sums, and two runs that differ only in rounding part after
a spike: comparing past it measures chance (test_multi_gpu.sh's header has the figures).
"""
import os
import re
import sys

SPIKE = 1.25


def losses(path):
    """{step: loss} of a train_gpt2cu log; empty when the log does not exist."""
    out = {}
    if not os.path.exists(path):  # a run that failed before its log (its verdict says so)
        return out
    for line in open(path, errors="replace"):
        m = re.match(r"step\s+(\d+)/\d+ \| loss ([-+0-9.eEnaif]+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def val_losses(path):
    if not os.path.exists(path):
        return []
    return [float(m.group(1)) for m in
            (re.match(r"val loss ([-+0-9.eEnaif]+)", l) for l in open(path, errors="replace")) if m]


def p90(d):
    """The 90th percentile of d (nan when any value is nan: nan sorts anywhere)."""
    if any(x != x for x in d):
        return float("nan")
    return sorted(d)[min(len(d) - 1, int(0.9 * len(d)))]


def first_spike(curve, lo, hi):
    """The first step in lo..hi whose loss exceeds SPIKE x the lowest loss before it (steps
    before lo count for the lowest), or hi + 1."""
    low = float("inf")
    for s in sorted(curve):
        if s > hi:
            break
        if s >= lo and curve[s] > SPIKE * low:
            return s
        low = min(low, curve[s])
    return hi + 1


def diff(a, b, lo, hi):
    """(p90, diff at lo, identical, count, max) over lo..hi, or None when a step is missing
    (then count is the number present)."""
    steps = [s for s in range(lo, hi + 1) if s in a and s in b]
    if len(steps) != hi - lo + 1:
        return None, len(steps)
    d = [abs(a[s] - b[s]) for s in steps]
    return (p90(d), d[0], all(a[s] == b[s] for s in steps), len(steps), max(d)), len(steps)


def near(a, b, lo, hi):
    """(p90, diff at lo, compared, present, max, stop) over lo..hi up to the first spike."""
    steps = [s for s in range(lo, hi + 1) if s in a and s in b]
    if len(steps) != hi - lo + 1:
        return None, len(steps), 0
    stop = min(first_spike(a, lo, hi), first_spike(b, lo, hi))
    d = [abs(a[s] - b[s]) for s in steps if s < stop]
    stop = stop if stop <= hi else 0
    if not d:
        return None, len(steps), stop
    return (p90(d), d[0], len(d), len(steps), max(d), stop), len(steps), stop


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode in ("-h", "--help"):
        print(__doc__)
        return 0
    if mode == "diff" and len(argv) == 6:
        r, n = diff(losses(argv[2]), losses(argv[3]), int(argv[4]), int(argv[5]))
        if r is None:
            print("nan nan 0 %d nan" % n)
        else:
            print("%.6g %.6g %d %d %.6g" % (r[0], r[1], int(r[2]), r[3], r[4]))
    elif mode == "near" and len(argv) == 6:
        r, n, stop = near(losses(argv[2]), losses(argv[3]), int(argv[4]), int(argv[5]))
        if r is None:
            print("nan nan 0 %d nan %d" % (n, stop))
        else:
            print("%.6g %.6g %d %d %.6g %d" % r)
    elif mode == "table" and len(argv) > 2:
        cols = [(kv.split("=", 1)[0], kv.split("=", 1)[1]) for kv in argv[2:]]
        curves = [(name, losses(path)) for name, path in cols]
        print("step " + " ".join("%12s" % n for n, _ in curves))
        for s in sorted(set().union(*[set(c) for _, c in curves])):
            print("%4d " % s + " ".join("%12s" % ("%.6f" % c[s] if s in c else "-")
                                        for _, c in curves))
        for name, path in cols:
            print("val losses %-10s %s" % (name, " ".join("%.6f" % v for v in val_losses(path))))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
