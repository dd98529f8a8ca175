#!/usr/bin/env python3
"""PyTorch's causal scaled_dot_product_attention (bf16) on the shapes of dev/bench/bench_attention.cu.

    scripts/bench/bench_attention.py [--iters N]

Backends FLASH_ATTENTION and CUDNN_ATTENTION (torch.nn.attention.sdpa_kernel), forward and
backward timed separately with CUDA events, median / min / p90 after 5 warm-up runs, the same
table and FLOP convention as bench_attention (forward 4*B*NH*T*T*HS/2, backward 2.5x; % of 800
TFLOP/s). q, k, v are strided views of one (B, T, 3, NH, HS) tensor, the layout llmc's qkv has;
inputs are seeded random values, two sets used in turn.
"""
import argparse
import os
import sys

# The rooms of scripts/ this module imports from.
SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(SCRIPTS, room) for room in ("deps",)]
from pydeps import optional, require  # noqa: E402 (after the path)

# Set by main() once torch is known to be there (so --help runs without it).
torch = F = SDPBackend = sdpa_kernel = None

CEILING_TFLOPS = 800.0
WARMUP = 5
SETS = 2
SHAPES = [(64, 1024, 12, 64), (4, 1024, 12, 64), (64, 2048, 12, 64), (16, 4096, 12, 64),
          (64, 1024, 12, 128)]


def time_ms(fn, iters):
    for i in range(WARMUP):
        fn(i % SETS)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(iters)]
    for i, (start, end) in enumerate(events):
        start.record()
        fn(i % SETS)
        end.record()
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in events)
    return ms[iters // 2], ms[0], ms[min(iters - 1, int(0.9 * iters))]


def row(impl, pas, shape, gflop, stats):
    b, t, nh, hs = shape
    med, lo, p90 = stats
    tflops = gflop / med
    print(f"| {impl:<12} | {pas:<3} | {b:3d} | {t:5d} | {nh:3d} | {hs:3d} | {med:9.3f} | "
          f"{lo:9.3f} | {p90:9.3f} | {tflops:7.1f} | {100 * tflops / CEILING_TFLOPS:5.1f}% |")


def bench(backend, name, shape, iters):
    b, t, nh, hs = shape
    gen = torch.Generator(device="cuda").manual_seed(1)
    sets = []
    for _ in range(SETS):
        qkv = (torch.rand(b, t, 3, nh, hs, device="cuda", generator=gen) * 4 - 2).bfloat16()
        qkv.requires_grad_(True)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, NH, T, HS) views
        dout = (torch.rand(b, nh, t, hs, device="cuda", generator=gen) * 2 - 1).bfloat16()
        sets.append((qkv, q, k, v, dout))
    gflop = 4.0 * b * nh * t * t * hs / 2 / 1e9
    with sdpa_kernel(backend):
        fwd = time_ms(lambda i: F.scaled_dot_product_attention(*sets[i][1:4], is_causal=True),
                      iters)
        outs = [F.scaled_dot_product_attention(*s[1:4], is_causal=True) for s in sets]
        bwd = time_ms(lambda i: torch.autograd.grad(outs[i], sets[i][0], sets[i][4],
                                                    retain_graph=True), iters)
    row(name, "fwd", shape, gflop, fwd)
    row(name, "bwd", shape, 2.5 * gflop, bwd)
    return fwd[0] + bwd[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=30, help="timed iterations (>= 20)")
    args = parser.parse_args()
    if args.iters < 20:
        parser.error("--iters must be at least 20")
    global torch, F, SDPBackend, sdpa_kernel
    torch = require("torch")
    F = torch.nn.functional
    attention = optional("torch.nn.attention")
    if attention is None:
        sys.exit(f"error: scripts/bench/bench_attention.py needs torch 2.x (torch.nn.attention), and "
                 f"{sys.executable} has torch {torch.__version__}: `pip install 'torch>=2'`")
    SDPBackend, sdpa_kernel = attention.SDPBackend, attention.sdpa_kernel
    if not torch.cuda.is_available():
        print("SKIP no CUDA device visible to PyTorch")
        return
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.iters} "
          "iterations, median/min/p90 in ms")
    print("| impl         | pass|   B |     T |  NH |  HS |    median |       min |       p90 "
          "| TFLOP/s | of 800 |")
    d12 = {}
    for shape in SHAPES:
        for backend, name in ((SDPBackend.FLASH_ATTENTION, "torch-flash"),
                              (SDPBackend.CUDNN_ATTENTION, "torch-cudnn")):
            try:
                ms = bench(backend, name, shape, args.iters)
            except RuntimeError as e:  # a backend that does not take this shape
                print(f"| {name:<12} | skipped: {str(e).splitlines()[0][:80]} |")
                continue
            if shape == (64, 1024, 12, 64):
                d12[name] = ms
    for name, ms in d12.items():
        print(f"{name}, 12 layers fwd+bwd at B=64 T=1024 NH=12 HS=64: {12 * ms:.2f} ms")


if __name__ == "__main__":
    main()
