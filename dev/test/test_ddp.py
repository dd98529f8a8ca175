#!/usr/bin/env python3
"""test_ddp.py: scripts/ref/train_gpt2.py's data parallel mode (DDP), on the CPU (gloo) or 2 GPUs.

A tiny model (L=2, NH=4, C=64, V=1000, T=32) on random-token shards, 3 AdamW steps, fp32:
  1. torchrun with 2 processes at -b 2 against one plain process at -b 4: the 3 step losses and
     the validation loss agree within 1e-5 (rank r takes rows [2r, 2r+2) of the 4-row batch the
     plain run reads, and DDP averages the gradients: only the summation order differs, ~1e-7);
     the summary counts both ranks' tokens; only rank 0 prints step lines;
  2. the same with gradient accumulation (-d twice the batch: 2 micro-steps, the gradient
     all-reduce after the second only);
  3. negative control: a plain run at -b 2 (rank 0's rows alone, what a rank split that lost
     rank 1's rows would train on) must differ from the -b 4 run by more than 1e-3 at step 1,
     so the comparison above can tell a wrong split.
Usage: test_ddp.py [WORK_DIR] [--device cuda] (default build/testdata/ddp, cpu). Exit 0 when
all pass. With --device cuda the ranks use NCCL on cuda:0 and cuda:1 and the bound is 1e-4:
cuBLAS may pick other kernels (another summation order) for 2 rows than for 4, fp32 without TF32.
torch 1.13's torchrun fails on Python 3.11+ with its defaults --redirects 0 --tee 0 (iterating
over the IntFlag Std no longer yields NONE), so the launches redirect stdout and tee it back.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "ref", "train_gpt2.py")
ARGS = sys.argv[1:]
if ARGS[:1] in (["-h"], ["--help"]):
    print(__doc__)
    sys.exit(0)
DEVICE = "cpu"
if "--device" in ARGS:
    i = ARGS.index("--device")
    DEVICE = ARGS[i + 1] if i + 1 < len(ARGS) else ""
    del ARGS[i:i + 2]
if DEVICE not in ("cpu", "cuda"):
    sys.exit("usage: test_ddp.py [WORK_DIR] [--device cpu|cuda]")
WORK = ARGS[0] if ARGS else os.path.join(ROOT, "build", "testdata", "ddp")
TINY = ["--n-layer", "2", "--n-head", "4", "--n-embd", "64", "--vocab-size", "1000",
        "--block-size", "64", "-t", "32", "--device", DEVICE, "-x", "3", "-l", "1e-3",
        "--warmup-skip", "0", "--val-batches", "2"]
TOL = 1e-5 if DEVICE == "cpu" else 1e-4
from pycheck import check, failures  # noqa: E402


def env():
    e = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    e["OMP_NUM_THREADS"] = "1"  # what torchrun gives each rank; also for the plain runs
    return e


def train(name, B, nproc=1, extra=()):
    """Runs the trainer (under torchrun when nproc > 1); its JSON summary and stdout."""
    summary = os.path.join(WORK, name + ".json")
    args = [SCRIPT, "-i", os.path.join(WORK, "shards", "*_train_*.bin"),
            "-j", os.path.join(WORK, "shards", "*_val_*.bin"), *TINY, "-b", str(B), *extra,
            "--json-summary", summary]
    if nproc > 1:
        args = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
                "--redirects", "1", "--tee", "1", "--log_dir", os.path.join(WORK, "logs_" + name),
                *args]
    if os.path.exists(summary):
        os.remove(summary)
    r = subprocess.run([sys.executable, *args], env=env(), capture_output=True, text=True,
                       timeout=45)
    with open(os.path.join(WORK, name + ".log"), "w") as f:
        f.write(r.stdout + r.stderr)
    if not check(r.returncode == 0 and os.path.exists(summary), f"{name}: runs (exit "
                 f"{r.returncode}; log {os.path.join(WORK, name + '.log')})"):
        print(r.stdout[-2000:] + r.stderr[-2000:])
        return None, r.stdout
    with open(summary) as f:
        return json.load(f), r.stdout


def max_diff(a, b):
    return max(abs(x - y) for x, y in zip(a["losses"] + [a["val_loss"]],
                                          b["losses"] + [b["val_loss"]]))


def compare(one, ddp, stdout, what):
    if not (one and ddp):
        return
    d = max_diff(one, ddp)
    check(len(ddp["losses"]) == 3 and d <= TOL,
          f"{what}: step and val losses within {TOL:g} of one process with twice B "
          f"(max diff {d:.2e}; {one['losses']} vs {ddp['losses']})")
    check(ddp.get("world_size") == 2 and ddp["total_batch"] == one["total_batch"],
          f"{what}: the summary counts both ranks' tokens (world_size {ddp.get('world_size')}, "
          f"total_batch {ddp['total_batch']} = {one['total_batch']})")
    # torchrun's tee prefixes each line with its rank: "[default0]:step 1/3 | loss ..."
    ranks = [int(m.group(1)) for m in re.finditer(r"^\[\D*(\d+)\]:step \d+/\d+ \|", stdout,
                                                  re.MULTILINE)]
    check(ranks == [0, 0, 0], f"{what}: rank 0 alone prints the step lines (ranks of the step "
                              f"lines: {ranks})")


def main():
    os.makedirs(WORK, exist_ok=True)
    r = subprocess.run([sys.executable, SCRIPT, "--random-shards", os.path.join(WORK, "shards"),
                        "--num-tokens", "20000", "--vocab-size", "1000", "--seed", "7"],
                       env=env(), capture_output=True, text=True)
    if not check(r.returncode == 0, "random shards written"):
        print(r.stderr)
        return 1
    one, _ = train("one_b4", 4)
    ddp, out = train("ddp2_b2", 2, nproc=2)
    compare(one, ddp, out, "2 ranks")
    acc = ["-d", str(2 * 4 * 32)]
    one_acc, _ = train("one_b4_accum2", 4, extra=acc)
    ddp_acc, out = train("ddp2_b2_accum2", 2, nproc=2, extra=acc)
    compare(one_acc, ddp_acc, out, "2 ranks, 2 micro-steps")
    half, _ = train("one_b2", 2)
    if one and half:
        d = abs(one["losses"][0] - half["losses"][0])
        check(d > 1e-3, f"negative control: -b 2 (rank 0's rows alone) differs from -b 4 at "
                        f"step 1 by {d:.2e} > 1e-3")
    print(f"test_ddp ({DEVICE}): {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
