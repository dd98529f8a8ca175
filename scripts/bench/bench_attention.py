#!/usr/bin/env python3
"""PyTorch's causal scaled_dot_product_attention (bf16) on the shapes of dev/bench/bench_attention.cu.

    scripts/bench/bench_attention.py [--iters N]
    scripts/bench/bench_attention.py --profile B,T,NH,HS [--backend cudnn|flash]

Backends FLASH_ATTENTION and CUDNN_ATTENTION (torch.nn.attention.sdpa_kernel), forward and
backward timed separately with CUDA events, median / min / p90 after 5 warm-up runs, the same
table and FLOP convention as bench_attention (forward 4*B*NH*T*T*HS/2, backward 2.5x; % of 800
TFLOP/s). q, k, v are strided views of one (B, T, 3, NH, HS) tensor, the layout llmc's qkv has;
inputs are seeded random values, two sets used in turn.

--profile runs one backend's forward at one shape once inside a CUDA profiler range (after three
warm-up calls), for Nsight Compute to profile that kernel alone beside ours, e.g.:

    ncu --profile-from-start off --set full -o cudnn \
        python3 scripts/bench/bench_attention.py --profile 64,1024,12,64 --backend cudnn
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


def random_qkv(shape, gen, grad=False):
    """qkv (B, T, 3, NH, HS) bf16 of uniform values in [-2, 2) (a leaf that requires its gradient
    with grad, set before the views are taken), and q, k, v: (B, NH, T, HS) views of it."""
    b, t, nh, hs = shape
    qkv = (torch.rand(b, t, 3, nh, hs, device="cuda", generator=gen) * 4 - 2).bfloat16()
    qkv.requires_grad_(grad)
    return (qkv,) + tuple(qkv[:, :, i].transpose(1, 2) for i in range(3))


def bench(backend, name, shape, iters):
    b, t, nh, hs = shape
    gen = torch.Generator(device="cuda").manual_seed(1)
    sets = []
    for _ in range(SETS):
        qkv, q, k, v = random_qkv(shape, gen, grad=True)
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


def parse_shape(text):
    try:
        shape = tuple(int(x) for x in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"takes B,T,NH,HS (four positive integers), not {text!r}")
    return shape


def profile(backend, shape):
    """One causal forward inside cudaProfilerStart/Stop, after three outside it."""
    b, t, nh, hs = shape
    _, q, k, v = random_qkv(shape, torch.Generator(device="cuda").manual_seed(1))
    with sdpa_kernel(backend):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    print(f"profiled one forward at B={b} T={t} NH={nh} HS={hs}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=30, help="timed iterations (>= 20)")
    parser.add_argument("--profile", type=parse_shape, metavar="B,T,NH,HS",
                        help="one forward of --backend inside a profiler range (for ncu)")
    parser.add_argument("--backend", choices=("cudnn", "flash"), default="cudnn",
                        help="the backend --profile runs (default cudnn)")
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
    if args.profile:
        profile(SDPBackend.CUDNN_ATTENTION if args.backend == "cudnn" else
                SDPBackend.FLASH_ATTENTION, args.profile)
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
