"""bench_table.py: the multi-GPU table of scripts/bench.sh -g N[,M...] (no torch needed).

Runs are the JSON summaries bench.sh leaves in OUTDIR: ours_TAG[_gN].json (train_gpt2cu, through
scripts/launch.sh when N > 1) and torch_VARIANT_TAG[_gN].json (train_gpt2.py, under torchrun when
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
import datetime
import json
import os
import re

from train_gpt2 import PRESETS, padded_vocab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
          "runs: ours through scripts/launch.sh, PyTorch through torchrun (DDP, NCCL), NVLink "
          "multicast off.")
