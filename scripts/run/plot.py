#!/usr/bin/env python3
"""plot.py: draw one or more training logs (DIR/log.jsonl of train_gpt2cu) into one PNG.

    python3 scripts/run/plot.py out/run_a/log.jsonl out/run_b/log.jsonl -o compare.png
    python3 scripts/run/plot.py out/run_a out/run_b            # a directory means DIR/log.jsonl

Four panels against the optimizer step: train loss (with its moving average when the log is
long), validation loss (the steps that validated), throughput in tokens/s, and the learning rate;
a third row when the logs have them (scripts/run/plot_extras.py): GPU clocks and power (--gpu-log) and
HellaSwag accuracy (--hellaswag), or the GPU temperature.
Each run is one colour in every panel, labelled by its directory (or --labels). Skipped
(non-finite) steps are marked with an x on the train-loss panel. Needs matplotlib only
(Debian: python3-matplotlib; `make deps`). A missing or malformed log, or an -o that cannot be
written, gets one sentence and exit code 1; the PNG is written under a temporary name and
renamed, so a failed run leaves no partial file.
"""
import argparse
import json
import math
import os
import sys

# The rooms of scripts/ this module imports from.
SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(SCRIPTS, room) for room in ("deps",)]
from pydeps import require  # noqa: E402 (after the path)


def log_path(path):
    """The log.jsonl a command-line argument names; one sentence and exit 1 when there is none."""
    if os.path.isdir(path):
        path = os.path.join(path, "log.jsonl")
    if not os.path.isfile(path):
        sys.exit(f"error: there is no training log at {path} (give a log.jsonl file or a run "
                 "directory of train_gpt2cu -o DIR that holds one)")
    return path


def check_output(path):
    """One sentence and exit 1 when the PNG cannot be written to path."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        sys.exit(f"error: -o {path} is a directory; give a file name such as {path}/plot.png")
    if not os.path.isdir(folder):
        sys.exit(f"error: cannot write -o {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        sys.exit(f"error: cannot write -o {path}: permission denied")


def load(path):
    rows = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"error: {path} line {n} is not JSON ({e.msg})")
                if not isinstance(rows[-1], dict) or not isinstance(rows[-1].get("step"), int):
                    sys.exit(f"error: {path} line {n} has no integer \"step\"; is it a "
                             "train_gpt2cu log.jsonl?")
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e.strerror}")
    except UnicodeDecodeError:
        sys.exit(f"error: {path} is not a text file; is it a train_gpt2cu log.jsonl?")
    # Sample records ({"step", "sample"}) share a step with its record; keep step records only.
    rows = [r for r in rows if "sample" not in r]
    if not rows:
        sys.exit(f"error: {path} holds no steps")
    # A resumed run may have re-logged steps: the last record of a step wins.
    by_step = {r["step"]: r for r in rows}
    return path, [by_step[s] for s in sorted(by_step)]


def series(rows, key):
    pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def moving_average(xs, ys, window):
    out_x, out_y, acc = [], [], []
    for x, y in zip(xs, ys):
        if not math.isfinite(y):
            continue
        acc.append(y)
        if len(acc) > window:
            acc.pop(0)
        if len(acc) == window:
            out_x.append(x)
            out_y.append(sum(acc) / window)
    return out_x, out_y


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="+", help="log.jsonl files, or run directories holding one")
    p.add_argument("-o", "--output", default="training.png", help="PNG to write (training.png)")
    p.add_argument("--labels", help="comma-separated names for the runs (default: directories)")
    p.add_argument("--title", default="", help="figure title")
    args = p.parse_args()
    paths = [log_path(path) for path in args.logs]
    check_output(args.output)
    runs = [load(path) for path in paths]
    labels = args.labels.split(",") if args.labels else [
        os.path.basename(os.path.dirname(os.path.abspath(path))) or path for path, _ in runs]
    if len(labels) != len(runs):
        sys.exit(f"error: {len(labels)} labels for {len(runs)} logs")
    matplotlib = require("matplotlib", "to draw the plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from plot_extras import draw_extras, has_extras
    extra = has_extras(runs)
    fig, axes = plt.subplots(3 if extra else 2, 2, figsize=(13, 12 if extra else 8), sharex=True)
    (ax_loss, ax_val), (ax_tok, ax_lr) = axes[:2]
    for i, ((path, rows), label) in enumerate(zip(runs, labels)):
        colour = f"C{i % 10}"
        xs, ys = series(rows, "loss")
        window = max(1, len(xs) // 50)
        ax_loss.plot(xs, ys, color=colour, alpha=0.3 if window > 1 else 1.0, lw=0.8,
                     label=None if window > 1 else label)
        if window > 1:
            mx, my = moving_average(xs, ys, window)
            ax_loss.plot(mx, my, color=colour, lw=1.6, label=f"{label} (mean of {window})")
        bad = [r["step"] for r in rows if r.get("skipped")]
        if bad:
            lo = min((y for y in ys if math.isfinite(y)), default=0)
            ax_loss.plot(bad, [lo] * len(bad), "x", color=colour, label=f"{label}: skipped")
        vx, vy = series(rows, "val_loss")
        if vx:
            ax_val.plot(vx, vy, "o-", color=colour, ms=3, label=label)
        tx, ty = series(rows, "tok_s")
        ax_tok.plot(tx, ty, color=colour, lw=0.8, label=label)
        lx, ly = series(rows, "lr")
        ax_lr.plot(lx, ly, color=colour, lw=1.2, label=label)
    ax_loss.set_title("train loss")
    ax_val.set_title("validation loss")
    ax_tok.set_title("throughput (tokens/s)")
    ax_lr.set_title("learning rate")
    if extra:
        draw_extras(axes[2], runs, labels, series)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    tmp = os.path.join(os.path.dirname(os.path.abspath(args.output)),
                       f".{os.path.basename(args.output)}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, dpi=110, format=os.path.splitext(args.output)[1][1:] or "png")
        os.replace(tmp, args.output)
    except (OSError, ValueError) as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        sys.exit(f"error: cannot write -o {args.output}: {getattr(e, 'strerror', None) or e}")
    print(f"wrote {args.output} ({len(runs)} run{'s' if len(runs) > 1 else ''}, "
          f"{sum(len(r) for _, r in runs)} steps)")


if __name__ == "__main__":
    main()
