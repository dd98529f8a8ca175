#!/usr/bin/env python3
"""test_ncu_hotspots.py: scripts/bench/ncu_hotspots.py on synthetic ncu source-page CSVs, through
its command line.

Cases: two kernels in one file (totals, the share of each stall reason, a range's executed
instructions per pass, the top list in sample order, --kernel, --mix's opcodes, also for a
kernel without samples); numbers written with thousands separators; a file that is not a source page, one without the sampling columns, a --kernel or
--range out of bounds (each exit 2 with one line on stderr).
Usage: test_ncu_hotspots.py [WORK_DIR] (default build/testdata/ncu_hotspots). Exit 0 when all
pass.
"""
import csv
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pycheck import check, failures  # noqa: E402 (after the path)

TOOL = os.path.join(HERE, "..", "..", "scripts", "bench", "ncu_hotspots.py")
if sys.argv[1:2] in (["-h"], ["--help"]):
    print(__doc__)
    sys.exit(0)
WORK = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "build", "testdata",
                                                           "ncu_hotspots")
os.makedirs(WORK, exist_ok=True)
REASONS = ["barrier", "dispatch", "long_sb", "not_selected", "selected", "wait"]


def expect(name, ok, detail):
    check(ok, "%s: %s" % (name, detail))


def write(path, kernels, header_extra=True, thousands=False):
    """kernels: [(name, [(text, executed, {reason: samples})])]"""
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)",
              "Warp Stall Sampling (Not-issued Samples)", "# Samples", "Instructions Executed"]
    if not header_extra:
        header = ["Address", "Source", "Instructions Executed"]
    reasons = ["stall_" + r for r in REASONS] if header_extra else []
    header += reasons + [r + " (Not Issued)" for r in reasons]
    fmt = (lambda v: "{:,}".format(v)) if thousands else str
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        for name, rows in kernels:
            w.writerow(["Kernel Name", name, ""])
            w.writerow(header)
            for i, (text, executed, st) in enumerate(rows):
                total = sum(st.values())
                cells = ["0x%x" % (0x1000 + 16 * i), "      " + text]
                if header_extra:
                    cells += [fmt(total), fmt(total - st.get("selected", 0)), fmt(total)]
                cells.append(fmt(executed))
                if header_extra:
                    cells += [fmt(st.get(r, 0)) for r in REASONS]
                    cells += ["0"] * len(REASONS)
                w.writerow(cells)


def run(*args):
    p = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


# Kernel A: a loop body (indices 1-3, 4 passes) that waits on memory, then an epilogue (4-5).
A = ("void kernel_a<0>(int)", [
    ("MOV R1, c[0x0][0x28]", 4, {"selected": 2}),
    ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2]", 16, {"long_sb": 40, "selected": 4}),
    ("HGMMA.64x128x16.F32.BF16 R8, gdesc[UR4], R8", 16, {"not_selected": 10, "dispatch": 6}),
    ("@P0 BRA 0x1010", 16, {"wait": 8, "selected": 2}),
    ("MUFU.EX2 R3, R3", 4, {"dispatch": 12, "selected": 8}),
    ("STG.E.128 [R4], R8", 4, {"barrier": 8}),
])
# Kernel B: one instruction, no samples.
B = ("void kernel_b(float*)", [("EXIT", 1, {})])
two = os.path.join(WORK, "two.csv")
write(two, [A, B])
rc, out, err = run(two, "--top", "3", "--range", "1:4:loop", "--range", "4:6")
total = 2 + 44 + 16 + 10 + 20 + 8
expect("two kernels: exit 0", rc == 0, "rc=%d %s" % (rc, err.strip()))
expect("two kernels: both reported", out.count("== kernel ") == 2 and "kernel_b" in out,
      "%d kernel headers" % out.count("== kernel "))
expect("totals", "instructions 6, executed 60, stall samples %d" % total in out,
      [l for l in out.splitlines() if l.startswith("instructions")][:1])
want = "by reason: long_sb %.1f%%, dispatch %.1f%%" % (100.0 * 40 / total, 100.0 * 18 / total)
expect("reason shares, largest first", want in out,
      [l for l in out.splitlines() if l.startswith("by reason")][:1])
expect("range per pass", "range loop: %.1f%% of the samples, 48 instructions executed, 3.0 per pass"
      % (100.0 * 70 / total) in out, [l for l in out.splitlines() if l.startswith("range")])
expect("range with its default name", "range 4:6: %.1f%% of the samples, 8 instructions executed, "
      "2.0 per pass" % (100.0 * 28 / total) in out,
      [l for l in out.splitlines() if l.startswith("range 4")])
top = [l.split()[0] for l in out.split("top 3 instructions")[1].splitlines()[1:4]]
expect("top list in sample order", top == ["1", "4", "2"], top)
expect("a kernel without samples says so", "(no samples" in out, "")
rc, out, err = run(two, "--kernel", "0", "--mix", "3")
mix = out.split("executed by opcode")[1].splitlines()[:4] if "executed by opcode" in out else []
expect("--mix: the largest opcodes, ties by name, predicates dropped",
      rc == 0 and mix[:1] == [" (the 3 largest of 6):"] and
      [l.split()[:3] for l in mix[1:]] == [["BRA", "16", "26.7%"], ["HGMMA", "16", "26.7%"],
                                            ["SYNCS", "16", "26.7%"]], mix)
rc, out, err = run(two, "--kernel", "1", "--mix", "2")
expect("--mix for a kernel without samples", rc == 0 and "EXIT" in out and "(no samples" in out,
      out[-160:])
rc, out, err = run(two, "--mix", "-1")
expect("--mix negative", rc == 2 and "--mix must be" in err, err.strip())
rc, out, err = run(two, "--kernel", "1")
expect("--kernel 1 alone", rc == 0 and out.count("== kernel ") == 1 and "kernel_b" in out, out[:80])

sep = os.path.join(WORK, "thousands.csv")
big = ("void big()", [("FFMA R1, R2, R3, R1", 1234567, {"selected": 2500, "wait": 1500})])
write(sep, [big], thousands=True)
rc, out, err = run(sep)
expect("thousands separators", rc == 0 and "executed 1234567, stall samples 4000" in out,
      [l for l in out.splitlines() if l.startswith("instructions")][:1])

for name, args, needle in [
        ("not a source page", [os.path.join(WORK, "plain.csv")], "holds no source page"),
        ("no sampling columns", [os.path.join(WORK, "nosamples.csv")], "SourceCounters"),
        ("--kernel out of range", [two, "--kernel", "2"], "kernels 0 to 1"),
        ("--range malformed", [two, "--range", "7"], "--range takes"),
        ("missing file", [os.path.join(WORK, "absent.csv")], "cannot read")]:
    if name == "not a source page":
        with open(args[0], "w") as f:
            f.write("a,b,c\n1,2,3\n")
    if name == "no sampling columns":
        write(args[0], [A], header_extra=False)
    rc, out, err = run(*args)
    lines = err.strip().splitlines()
    one_line = len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]
    expect(name, rc == 2 and one_line, "rc=%d stderr=%r" % (rc, err.strip()))

print("test_ncu_hotspots: %s" % ("all passed" if not failures else "%d failed" % len(failures)))
sys.exit(1 if failures else 0)
