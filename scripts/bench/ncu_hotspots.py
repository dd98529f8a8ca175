#!/usr/bin/env python3
"""ncu_hotspots.py: where a kernel's warps wait, instruction by instruction, from Nsight Compute's
source page (warp-stall sampling per SASS instruction) written as CSV.

  ncu_hotspots.py SOURCE_CSV [--kernel N] [--top N] [--range A:B[:NAME]]... [--mix N] [--list]

Make the CSV on the GPU machine (the binaries carry -lineinfo), e.g. for our GELU GEMMs:

  ncu --clock-control none -k regex:gelu_gemm_kernel -c 2 --section WarpStateStats \\
      --section SourceCounters -o gg build/bf16/dev/bench/bench_gelu_gemm --rows 65536
  ncu --import gg.ncu-rep --page source --csv --print-source sass > gg.csv

For each profiled kernel in the file (or only kernel N, counted from 0) it prints: the sampled
warp states over the whole kernel by reason ("selected" is a warp issuing; "dispatch",
"not_selected" and "selected" together mean the schedulers' issue slots are what limits it;
"long_sb" waits on global memory, "short_sb" on shared memory or the special-function unit,
"barrier" and "wait" on synchronization and fixed latencies), then the --top instructions
(default 20) by samples with their executions and leading reasons. Each --range A:B (instruction
indices, B excluded; --list prints every instruction with its index, to find a loop's bounds)
adds its share of the samples, its executed instructions, and those per pass: divided by the
executions of its first instruction, which is once per pass when the range starts a loop body.
--mix N adds the kernel's executed instructions by opcode (the mnemonic before its first '.',
predicates dropped), the N largest: how two kernels of one job differ in what they execute (our
flash forward against cuDNN's, say: profile both, then compare their two lists).
Exit status 2 on a file that is not such a CSV.
"""
import argparse
import csv
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def fail(message):
    print("error: " + message, file=sys.stderr)
    sys.exit(2)


def number(text):
    text = text.strip().replace(",", "")
    if text in ("", "-"):
        return 0
    try:
        return int(float(text))
    except ValueError:
        return 0


def read_kernels(path):
    """[{name, header, rows}] in file order; rows are the CSV rows of SASS instructions."""
    kernels = []
    try:
        with open(path, newline="") as f:
            for row in csv.reader(f):
                if not row:
                    continue
                if row[0] == "Kernel Name":
                    kernels.append({"name": row[1] if len(row) > 1 else "?", "header": None,
                                    "rows": []})
                elif row[0] == "Address":
                    if not kernels:
                        kernels.append({"name": "?", "header": None, "rows": []})
                    kernels[-1]["header"] = row
                elif kernels and kernels[-1]["header"] is not None:
                    kernels[-1]["rows"].append(row)
    except OSError as e:
        fail("cannot read %s: %s" % (path, e.strerror))
    except (csv.Error, UnicodeDecodeError) as e:
        fail("%s is not a CSV file (%s)" % (path, e))
    kernels = [k for k in kernels if k["header"] is not None]
    if not kernels:
        fail("%s holds no source page: write it with ncu --import REPORT --page source --csv "
             "--print-source sass" % path)
    for k in kernels:
        missing = [c for c in ("Source", SAMPLES, EXECUTED) if c not in k["header"]]
        if missing:
            fail("%s: kernel %s has no column %s: profile with --section SourceCounters" %
                 (path, k["name"][:60], missing[0]))
    return kernels


def instructions(kernel):
    """[(index, text, samples, executed, {reason: samples})]."""
    header = kernel["header"]
    col = {name: i for i, name in enumerate(header)}
    reasons = [n for n in header if n.startswith("stall_") and "(Not Issued)" not in n]
    out = []
    for i, row in enumerate(kernel["rows"]):
        cell = lambda name: row[col[name]] if col[name] < len(row) else ""
        out.append((i, cell("Source").strip(), number(cell(SAMPLES)), number(cell(EXECUTED)),
                    {r[len("stall_"):]: number(cell(r)) for r in reasons}))
    return out


def parse_range(text):
    parts = text.split(":")
    try:
        a, b = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        fail("--range takes A:B or A:B:NAME with instruction indices, got %r" % text)
    if not 0 <= a < b:
        fail("--range %s: needs 0 <= A < B" % text)
    return a, b, parts[2] if len(parts) > 2 else "%d:%d" % (a, b)


def opcode(text):
    """The mnemonic of a SASS line: 'FFMA' of 'FFMA R1, ...', 'BRA' of '@!P0 BRA 0x10',
    'HGMMA' of 'HGMMA.64x128x16.F32.BF16 ...'."""
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def print_mix(ins, executed, n):
    by_op = {}
    for x in ins:
        op = opcode(x[1])
        by_op[op] = by_op.get(op, 0) + x[3]
    ranked = sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))
    print("executed by opcode (the %d largest of %d):" % (min(n, len(ranked)), len(ranked)))
    for op, count in ranked[:n]:
        share = 100.0 * count / executed if executed else 0.0
        print("  %-12s %12d %5.1f%%" % (op, count, share))


def report(index, kernel, args):
    ins = instructions(kernel)
    total = sum(x[2] for x in ins)
    executed = sum(x[3] for x in ins)
    print("== kernel %d: %s" % (index, kernel["name"]))
    print("instructions %d, executed %d, stall samples %d" % (len(ins), executed, total))
    if args.mix:
        print_mix(ins, executed, args.mix)
    if total == 0:
        print("(no samples: was it profiled with --section WarpStateStats and SourceCounters?)")
        return
    by_reason = {}
    for x in ins:
        for r, v in x[4].items():
            by_reason[r] = by_reason.get(r, 0) + v
    ranked = sorted(by_reason.items(), key=lambda kv: -kv[1])
    print("by reason: " + ", ".join("%s %.1f%%" % (r, 100.0 * v / total) for r, v in ranked if v))
    for a, b, name in args.range:
        inside = [x for x in ins if a <= x[0] < b]
        if not inside:
            print("range %s: no instructions (the kernel has %d)" % (name, len(ins)))
            continue
        s = sum(x[2] for x in inside)
        e = sum(x[3] for x in inside)
        first = inside[0][3]
        per = "%.1f per pass" % (e / first) if first else "first instruction never executed"
        print("range %s: %.1f%% of the samples, %d instructions executed, %s" %
              (name, 100.0 * s / total, e, per))
    print("top %d instructions by samples (index, share, executions, text, leading reasons):" %
          args.top)
    for x in sorted(ins, key=lambda x: (-x[2], x[0]))[:args.top]:
        lead = sorted(x[4].items(), key=lambda kv: -kv[1])[:3]
        print("%6d %5.1f%% %10d  %-58s %s" % (x[0], 100.0 * x[2] / total, x[3], x[1][:58],
                                             " ".join("%s=%d" % kv for kv in lead if kv[1])))
    if args.list:
        print("every instruction (index, samples, executions, text):")
        for x in ins:
            print("%6d %7d %10d  %s" % (x[0], x[2], x[3], x[1]))


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="See the file's docstring (--help lists the options) for how to write the CSV.")
    p.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    p.add_argument("--kernel", type=int, help="only the N-th kernel of the file (from 0)")
    p.add_argument("--top", type=int, default=20, help="instructions listed (default 20)")
    p.add_argument("--range", action="append", default=[], type=str,
                   help="A:B[:NAME] instruction indices to total (repeatable)")
    p.add_argument("--mix", type=int, default=0,
                   help="executed instructions by opcode, the N largest (default 0: none)")
    p.add_argument("--list", action="store_true", help="print every instruction too")
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        p.print_help()
        return 0
    args = p.parse_args()
    if args.top < 0:
        fail("--top must be >= 0")
    if args.mix < 0:
        fail("--mix must be >= 0")
    args.range = [parse_range(r) for r in args.range]
    kernels = read_kernels(args.csv)
    if args.kernel is not None:
        if not 0 <= args.kernel < len(kernels):
            fail("--kernel %d: the file holds kernels 0 to %d" % (args.kernel, len(kernels) - 1))
        report(args.kernel, kernels[args.kernel], args)
    else:
        for i, k in enumerate(kernels):
            report(i, k, args)
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
