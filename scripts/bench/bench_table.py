#!/usr/bin/env python3
"""bench_table.py: the docs' benchmark figures from one source; bench.sh's multi-GPU table.

    scripts/bench/bench_table.py --check    # exit 1 when README.md or docs/results.md disagree
    scripts/bench/bench_table.py --write    # rewrite their generated blocks from docs/bench.csv

docs/bench.csv holds the side-by-side runs of scripts/bench/bench.sh (one row per config and system:
GPU count, ms/step, tok/s, MFU, memory, GPU, date, commit). The README's headline sentence, its
results table and the speed table of docs/results.md are generated from it between marker lines
(<!-- bench-NAME ... --> and <!-- /bench-NAME -->), so no figure is typed twice; `make test`
runs --check. Ratios are our tok/s over the fastest PyTorch row of the same config and run.
Needs only the Python standard library.

multi_gpu_table() is the multi-GPU table of scripts/bench/bench.sh -g N[,M...] (no torch needed).

Runs are the JSON summaries bench.sh leaves in OUTDIR: ours_TAG[_gN].json (train_gpt2cu, through
scripts/run/launch.sh when N > 1) and torch_VARIANT_TAG[_gN].json (train_gpt2.py, under torchrun when
N > 1), where TAG = MODEL_bB_tT_PREC, B is the micro-batch per GPU and VARIANT is an SDPA backend,
or BACKEND+MODE for a torch.compile mode other than the default. Per run:
  step            the median wall-clock step (step_ms: ours from train_gpt2cu's wall clock,
                  PyTorch's from its synchronized perf_counter timing; the same span on both)
  total tok/s     N * B * T / median step (every GPU's tokens; both sides the same formula)
  MFU per GPU     FLOPs per token (6 x parameters, wte padded to Vp, + 12LCT: train_gpt2cu's
                  gpt2_flops_per_token) x tok/s per GPU over the device's dense peak of the
                  matmul precision (bf16, or TF32 for fp32 runs) in llmc/mfu.h's table: the same
                  figure as train_gpt2cu's own MFU on one GPU, whatever its multi-GPU convention
  memory per GPU  ours: rank 0's device memory in use; PyTorch: the largest rank's
                  max_memory_allocated
  eff             tok/s(N) / (N x tok/s(1)) of the same system, when 1 is among the counts
"""
import argparse
import csv
import datetime
import difflib
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def step_ms(r):
    """A run's median step in ms, wall clock on both sides: train_gpt2cu's summary has wall_ms
    (batch fill, graph launch, wait) beside median_ms (GPU time between CUDA events, which leaves
    the host's part out); train_gpt2.py's median_ms is its wall clock already."""
    return r.get("wall_ms") or r["median_ms"]


def variant_label(v):
    """'cudnn' -> 'compile, sdpa=cudnn'; 'cudnn+reduce-overhead' -> '..., mode=reduce-overhead'."""
    backend, _, mode = v.partition("+")
    return f"compile, sdpa={backend}" + (f", mode={mode}" if mode else "")


def flops_per_token(preset, T):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "ref"))
    from train_gpt2 import PRESETS, padded_vocab
    L, _, C = PRESETS[preset]
    params = padded_vocab(50257) * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C
    return 6.0 * params + 12.0 * L * C * T


def device_peak_tflops(device_name, precision):
    """llmc/mfu.h's kDevicePeaks, first name part found in the device name; None if unknown."""
    with open(os.path.join(ROOT, "llmc", "mfu.h")) as f:
        rows = re.findall(r'\{"([^"]+)",\s*([\d.]+),\s*([\d.]+),\s*([\d.]+)\}', f.read())
    for name, bf16, tf32, _ in rows:
        if name in (device_name or ""):
            return float(bf16 if precision == "bf16" else tf32)  # bench runs fp32 with TF32
    return None


def multi_gpu_table(outdir, commit, specs, counts):
    def load(name, B, T, n):
        try:
            with open(f"{outdir}/{name}.json") as f:
                r = json.load(f)
            r["tok_s"] = n * B * T * 1000.0 / step_ms(r)
            return r
        except (OSError, ValueError, KeyError, ZeroDivisionError):
            return None

    def error(name):
        try:
            with open(f"{outdir}/{name}.err") as f:
                return "FAILED: " + f.read().strip()
        except OSError:
            return "FAILED: no summary"

    device, lines, verdicts = None, [], []
    for spec in specs:
        tag, backends = spec.split(":")
        preset, B, T, prec = re.fullmatch(r"(d\d+)_b(\d+)_t(\d+)_(\w+)", tag).groups()
        B, T = int(B), int(T)
        sfx = {n: "" if n == 1 else f"_g{n}" for n in counts}
        ours = {n: load(f"ours_{tag}{sfx[n]}", B, T, n) for n in counts}
        torch = {(b, n): load(f"torch_{b}_{tag}{sfx[n]}", B, T, n)
                 for b in backends.split(",") for n in counts}
        name = next((r["device_name"] for r in list(ours.values()) + list(torch.values())
                     if r and r.get("device_name")), None)
        peak = device_peak_tflops(name, prec)
        k = flops_per_token(preset, T) / (peak * 1e12) if peak else None  # s per token per GPU

        def eff(runs, key, n):
            r, one = runs.get(key(n)), runs.get(key(1))
            return f"{r['tok_s'] / (n * one['tok_s']):.3f}" if n > 1 and r and one else "-"

        for n in counts:
            ok = {b: torch[(b, n)] for b in backends.split(",") if torch[(b, n)]}
            best = max(ok, key=lambda b: ok[b]["tok_s"]) if ok else None
            base = ok[best] if best else None
            device = device or (ours[n] or base or {}).get("device_name")
            ratio = ours[n]["tok_s"] / base["tok_s"] if ours[n] and base else None

            def row(system, r, name, vs, e):
                if r is None:
                    lines.append(f"| {tag} | {n} | {system} | {error(name)} | | | | | |")
                    return
                mfu = f"{100 * k * r['tok_s'] / n:.1f}%" if k else "-"
                lines.append(f"| {tag} | {n} | {system} | {step_ms(r):.2f} | "
                             f"{r['tok_s']:,.0f} | {mfu} | {r.get('peak_mem_mib', 0):,.0f} | "
                             f"{vs} | {e} |")

            row("train_gpt2cu", ours[n], f"ours_{tag}{sfx[n]}",
                f"**{ratio:.3f}**" if ratio else "n/a", eff(ours, lambda m: m, n))
            for b in backends.split(","):
                r = torch[(b, n)]
                vs = "1 (baseline)" if b == best else (
                    f"{r['tok_s'] / base['tok_s']:.3f}" if r and base else "")
                row(f"PyTorch {variant_label(b)}", r, f"torch_{b}_{tag}{sfx[n]}", vs,
                    eff(torch, lambda m, b=b: (b, m), n))
            v = (f"{ratio:.3f}x (baseline {variant_label(best)})" if ratio else "n/a")
            if n > 1 and 1 in counts:
                v += (f"; scaling eff. ours {eff(ours, lambda m: m, n)}, PyTorch "
                      f"{variant_label(best)} {eff(torch, lambda m: (best, m), n)}")
            verdicts.append(f"{tag} on {n} GPU{'s' if n > 1 else ''}: ours / PyTorch tok/s = {v}")

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n## bench.sh -g {','.join(map(str, counts))}: {device or 'unknown device'}, {date}, "
          f"commit {commit}\n")
    print("| config (B per GPU) | GPUs | system | median ms/step | total tok/s | MFU per GPU | "
          "memory MiB per GPU | tok/s vs PyTorch | scaling eff. |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    print()
    print("\n".join(verdicts))
    print("\ntotal tok/s = GPUs * B*T / median wall-clock step time (from a step's start to its "
          "end, synchronized, on both sides), after warm-up (ours: steps 3.., PyTorch: steps "
          "6..); B is per GPU. Ratio: our tok/s over the fastest PyTorch row (backend and "
          "compile mode) at the same GPU count. MFU per GPU: 6N + 12LCT FLOPs per token times one "
          "GPU's tok/s over the device's dense peak of that precision. Memory per GPU: ours is "
          "rank 0's device memory in use (cudaMemGetInfo, CUDA context included); PyTorch's is "
          "the largest rank's torch.cuda.max_memory_allocated (tensors only). Scaling eff. = "
          "tok/s(N) / (N x tok/s(1)) of the same system and backend (1 = perfect). Multi-GPU "
          "runs: ours through scripts/run/launch.sh, PyTorch through torchrun (DDP, NCCL), NVLink "
          "multicast off.")


# ---- The docs' benchmark figures, generated from docs/bench.csv ------------------------------

CSV_PATH = os.path.join(ROOT, "docs", "bench.csv")
COLUMNS = ["config", "gpus", "system", "ms_step", "tok_s", "mfu_pct", "memory_mib", "gpu", "date",
           "commit"]
OURS = "train_gpt2cu"
# The headline's configs: (config, GPU count, how the sentence names it).
HEADLINE = [("d12 B=64 T=1024 bf16", 1, "B=64"), ("d12 B=4 T=1024 bf16", 1, "B=4")]
HEADLINE_MULTI = ("d12 B=64 T=1024 bf16", 2)


class TableError(Exception):
    pass


def read_runs(path=CSV_PATH):
    """The CSV's rows grouped into runs: {(config, gpus, gpu, date, commit): {system: row}}."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
            header = rows[0].keys() if rows else []
    except OSError as e:
        raise TableError(f"cannot read {path}: {e.strerror}")
    if list(header) != COLUMNS:
        raise TableError(f"{path} must have the columns {','.join(COLUMNS)}")
    runs = {}
    for n, r in enumerate(rows, 2):
        try:
            r["gpus"] = int(r["gpus"])
            r["ms_step"], r["tok_s"] = float(r["ms_step"]), float(r["tok_s"])
            r["mfu_pct"] = float(r["mfu_pct"]) if r["mfu_pct"] else None
            r["memory_mib"] = float(r["memory_mib"])
        except (TypeError, ValueError):
            raise TableError(f"{path} line {n}: gpus, ms_step, tok_s, memory_mib must be numbers "
                             "and mfu_pct a number or empty")
        if not re.fullmatch(r"\d{4}-\d\d-\d\d", r["date"] or "") or \
                not re.fullmatch(r"[0-9a-f]{7,40}", r["commit"] or ""):
            raise TableError(f"{path} line {n}: date must be YYYY-MM-DD and commit a git hash")
        key = (r["config"], r["gpus"], r["gpu"], r["date"], r["commit"])
        if r["system"] in runs.setdefault(key, {}):
            raise TableError(f"{path} line {n}: a second '{r['system']}' row for {key}")
        runs[key][r["system"]] = r
    for key, systems in runs.items():
        if OURS not in systems or len(systems) < 2:
            raise TableError(f"{path}: the run {key} needs a {OURS} row and at least one "
                             "PyTorch row")
    configs = [(k[0], k[1]) for k in runs]
    for c in set(configs):
        if configs.count(c) > 1:
            raise TableError(f"{path}: {c[0]} on {c[1]} GPU(s) appears in two runs; keep the "
                             "current one and move the other to docs/results.md's history")
    return runs


def baseline(systems):
    """The fastest PyTorch row of a run (highest tok/s)."""
    return max((r for s, r in systems.items() if s != OURS), key=lambda r: r["tok_s"])


def ratio(systems):
    return systems[OURS]["tok_s"] / baseline(systems)["tok_s"]


def gpu_words(key):
    return f"{key[1]} x {key[2]}" if key[1] > 1 else key[2]


def find_run(runs, config, gpus):
    for key, systems in runs.items():
        if key[0] == config and key[1] == gpus:
            return key, systems
    raise TableError(f"{CSV_PATH} has no run of {config} on {gpus} GPU(s), which the README's "
                     "headline names")


def compile_mode(system):
    """How a PyTorch row's system name says torch.compile ran."""
    if "reduce-overhead" in system:
        return "reduce-overhead mode (CUDA graphs)"
    if "max-autotune-no-cudagraphs" in system:
        return "max-autotune-no-cudagraphs mode"
    if "max-autotune" in system:
        return "max-autotune mode (CUDA graphs)"
    return "default mode"


def headline(runs):
    parts = [find_run(runs, c, g) + (label,) for c, g, label in HEADLINE]
    (k0, s0, l0), (k1, s1, l1) = parts
    mk, ms = find_run(runs, *HEADLINE_MULTI)
    commits = (f"commit {k0[4]}" if k0[4] == k1[4] else
               f"commits {k0[4]} ({l0}, {k0[3]}) and {k1[4]} ({l1}, {k1[3]})")
    return (f"In bf16 it trains GPT-2 d12 at **{ratio(s0):.3f}x** ({l0}) and **{ratio(s1):.3f}x** "
            f"({l1}) the tokens/s of PyTorch on the same {k0[2]} (scripts/ref/train_gpt2.py with "
            f"fused AdamW and {baseline(s0)['system'].split(', ')[-1]}, torch.compile in its "
            f"{compile_mode(baseline(s0)['system'])} at {l0} and its "
            f"{compile_mode(baseline(s1)['system'])} at {l1}, the fastest PyTorch measured; "
            f"{commits}), and at **{ratio(ms):.3f}x** PyTorch DDP on {gpu_words(mk)} "
            f"(commit {mk[4]}).")


def num(x, digits=0):
    return f"{x:,.{digits}f}"


def summary_table(runs):
    lines = ["| config | GPUs | ours ms/step | PyTorch ms/step | tok/s, ours / PyTorch | "
             "memory MiB, ours / PyTorch | GPU, date, commit |",
             "|---|---|---|---|---|---|---|"]
    for key, systems in runs.items():
        ours, base = systems[OURS], baseline(systems)
        lines.append(f"| {key[0]} | {key[1]} | {ours['ms_step']:.2f} | {base['ms_step']:.2f} | "
                     f"**{ratio(systems):.3f}** | {num(ours['memory_mib'])} / "
                     f"{num(base['memory_mib'])} | {gpu_words(key)}, {key[3]}, {key[4]} |")
    return "\n".join(lines)


def full_table(runs):
    lines = ["| config | GPUs | GPU | date | commit | system | ms/step | tok/s | MFU | memory MiB "
             "| tok/s vs PyTorch |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, systems in runs.items():
        base = baseline(systems)
        for name, r in sorted(systems.items(), key=lambda x: x[0] != OURS):
            vs = f"**{ratio(systems):.3f}**" if name == OURS else (
                "1" if r is base else f"{r['tok_s'] / base['tok_s']:.3f}")
            mfu = f"{r['mfu_pct']:.1f}%" if r["mfu_pct"] is not None else "-"
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | {name} | "
                         f"{r['ms_step']:.2f} | {num(r['tok_s'])} | {mfu} | "
                         f"{num(r['memory_mib'])} | {vs} |")
    return "\n".join(lines)


# file (relative to the repository) -> the blocks it holds, each generated by a function of runs
BLOCKS = {"README.md": {"bench-headline": headline, "bench-summary": summary_table},
          "docs/results.md": {"bench-full": full_table}}


def marker(name):
    return (f"<!-- {name}: generated from docs/bench.csv by scripts/bench/bench_table.py --write; "
            "edit the CSV, not this block -->")


def render(text, path, blocks, runs):
    """text with each block's lines between its markers replaced by the generated ones."""
    for name, make in blocks.items():
        pattern = re.compile(r"(<!-- %s:[^\n]*-->\n)(.*?)(<!-- /%s -->)" % (name, name), re.S)
        found = pattern.findall(text)
        if len(found) != 1:
            raise TableError(f"{path} must hold the block {name} once, between a line starting "
                             f"'<!-- {name}:' and a line '<!-- /{name} -->' (found {len(found)})")
        body = make(runs) + "\n"
        text = pattern.sub(lambda m: marker(name) + "\n" + body + m.group(3), text)
    return text


def check_or_write(write, root=ROOT):
    runs = read_runs(os.path.join(root, "docs", "bench.csv"))
    stale = []
    for rel, blocks in BLOCKS.items():
        path = os.path.join(root, rel)
        with open(path) as f:
            old = f.read()
        new = render(old, rel, blocks, runs)
        if new == old:
            continue
        if write:
            with open(path + ".tmp", "w") as f:
                f.write(new)
            os.replace(path + ".tmp", path)
            print(f"rewrote the generated blocks of {rel}")
        else:
            stale.append(rel)
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), f"{rel} (as it is)",
                f"{rel} (from docs/bench.csv)", n=1))
    if stale:
        print(f"error: the benchmark figures of {' and '.join(stale)} disagree with "
              "docs/bench.csv (diff above); edit the CSV and run scripts/bench/bench_table.py --write",
              file=sys.stderr)
        return 1
    if not write:
        print(f"bench_table: README.md and docs/results.md agree with docs/bench.csv "
              f"({len(runs)} runs)")
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a generated block "
                      "of README.md or docs/results.md differs from what docs/bench.csv gives")
    mode.add_argument("--write", action="store_true", help="rewrite those blocks")
    p.add_argument("--root", default=ROOT, help=argparse.SUPPRESS)  # for the test
    args = p.parse_args(argv)
    try:
        return check_or_write(args.write, args.root)
    except (TableError, OSError) as e:
        print(f"error: {getattr(e, 'strerror', None) and f'{e.filename}: {e.strerror}' or e}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
