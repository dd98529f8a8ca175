#!/usr/bin/env python3
"""test_compare_losses.py: scripts/test/compare_losses.py (the multi-GPU test's loss comparisons)
on synthetic train_gpt2cu logs, through its command line as test_multi_gpu.sh calls it.

Cases: identical runs; runs that differ by rounding noise only; a run with a spike (the
comparison stops before it, and diff shows the parting it avoids); a 6% rise that is not a spike;
a wrong gradient reduction (a steady offset) that must exceed the test's tolerance floor of 0.01
under "near" too; a missing step; a resumed log whose reference spiked before the resume.
Usage: test_compare_losses.py [WORK_DIR] (default build/testdata/compare_losses). Exit 0 when all
pass.
"""
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "scripts", "test", "compare_losses.py")
if sys.argv[1:2] in (["-h"], ["--help"]):
    print(__doc__)
    sys.exit(0)
WORK = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "testdata", "compare_losses")
os.makedirs(WORK, exist_ok=True)
failed = 0


def check(name, ok, detail):
    global failed
    print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail))
    failed += 0 if ok else 1


def write_log(name, curve, vals=()):
    path = os.path.join(WORK, name + ".log")
    last = max(curve)
    with open(path, "w") as f:
        f.write("config           L=12 NH=12 C=768\n")
        for s in sorted(curve):
            f.write("step %5d/%d | loss %.6f | norm 1.0000 | lr 3.00e-04 | 30.00 ms\n"
                    % (s, last, curve[s]))
        for v in vals:
            f.write("val loss %.6f\n" % v)
    return path


def tool(*args):
    out = subprocess.run([sys.executable, TOOL] + [str(a) for a in args], capture_output=True,
                         text=True)
    return out.returncode, out.stdout.split()


def base_curve(n=50, first=1):
    # a falling curve with batch-to-batch wiggle of up to ~6% (as tiny Shakespeare's)
    return {s: 4.0 + 7.0 * math.exp(-s / 8.0) + 0.2 * math.sin(1.7 * s) for s in
            range(first, n + 1)}


ref = base_curve()
rc, r = tool("diff", write_log("same_a", ref), write_log("same_b", ref), 1, 50)
check("identical runs", rc == 0 and r[2] == "1" and float(r[0]) == 0 and r[3] == "50",
      "diff -> %s" % " ".join(r))

noisy = {s: v + (1e-5 if s % 2 else -1e-5) * (1 + s / 50) for s, v in ref.items()}
rc, r = tool("near", write_log("ref", ref), write_log("noisy", noisy), 1, 50)
check("rounding noise: every step compared, no spike",
      rc == 0 and r[2] == "50" and r[3] == "50" and r[5] == "0" and float(r[0]) < 1e-4,
      "near -> %s" % " ".join(r))

rise = dict(ref)
rise[30] = min(ref[s] for s in range(1, 30)) * 1.06
rc, r = tool("near", write_log("ref", ref), write_log("rise", rise), 1, 50)
check("a 6% rise is not a spike", rc == 0 and r[5] == "0" and r[2] == "50",
      "near -> %s" % " ".join(r))

spiky = dict(noisy)
spiky[27] = 18.0
for s in range(28, 51):
    spiky[s] = ref[s] + 0.02 * (s - 27)  # the curves part after the spike
rc, r = tool("near", write_log("ref", ref), write_log("spiky", spiky), 1, 50)
check("a spike stops the comparison before it",
      rc == 0 and r[5] == "27" and r[2] == "26" and float(r[0]) < 1e-4 and r[3] == "50",
      "near -> %s" % " ".join(r))
rc, r = tool("diff", write_log("ref", ref), write_log("spiky", spiky), 1, 50)
check("diff past the spike sees the parting", rc == 0 and float(r[0]) > 0.1,
      "diff -> %s" % " ".join(r))

# A reduction that sums instead of averaging, or drops a rank's rows, trains on another gradient:
# a difference from step 2 on that grows with the steps.
wrong = {s: v + (0.0 if s == 1 else 0.004 * s) for s, v in ref.items()}
rc, r = tool("near", write_log("ref", ref), write_log("wrong", wrong), 1, 50)
check("a wrong reduction exceeds the tolerance floor 0.01",
      rc == 0 and r[2] == "50" and float(r[0]) > 0.0101, "near -> %s" % " ".join(r))

gap = {s: v for s, v in ref.items() if s != 33}
rc, r = tool("near", write_log("ref", ref), write_log("gap", gap), 1, 50)
check("a missing step gives nan and the count present",
      rc == 0 and r[0] == "nan" and r[3] == "49", "near -> %s" % " ".join(r))
rc, r = tool("diff", write_log("ref", ref), write_log("gap", gap), 1, 50)
check("diff: a missing step gives nan", rc == 0 and r[0] == "nan" and r[3] == "49",
      "diff -> %s" % " ".join(r))

ref_spiked_early = dict(ref)
ref_spiked_early[15] = 30.0
resumed = {s: ref[s] + 2e-5 for s in range(21, 31)}
rc, r = tool("near", write_log("resumed", resumed), write_log("ref_early", ref_spiked_early), 21, 30)
check("a spike before the compared steps does not stop them",
      rc == 0 and r[2] == "10" and r[5] == "0" and float(r[1]) < 1e-4,
      "near -> %s" % " ".join(r))

rc, r = tool("table", "a=" + write_log("t_a", ref, [5.5, 5.1]), "b=" + write_log("t_b", spiky))
check("table: a row per step and the validation losses",
      rc == 0 and "val" in r and "5.500000" in r and r.count("-") == 0,
      "%d fields" % len(r))

rc, _ = tool("nonsense")
check("an unknown mode exits 2", rc == 2, "exit %d" % rc)
rc, out = tool("--help")
check("--help prints the usage and exits 0", rc == 0 and "near" in out, "exit %d" % rc)

print("test_compare_losses: %d failed" % failed)
sys.exit(1 if failed else 0)
