#!/usr/bin/env python3
"""hellaswag_ref.py: the PyTorch reference of train_gpt2cu --hellaswag: per-example ending losses
and accuracy of a model file on an eval file (llm.c's format, e.g. hellaswag_val.bin).

    python3 scripts/ref/hellaswag_ref.py --model m.bin --eval hellaswag_val.bin [-t 1024] \\
        [--device cpu|cuda] [--losses out.txt]

The model is scripts/ref/train_gpt2.py's (read from the model file, version 3 or 5), run in fp32
with TF32 off. For each example and ending: the row context + ending, with context tokens
dropped from the left when it is longer than T + 1 tokens (train_gpt2cu's rule), then the
cross-entropy of each ending token given everything before it. The prediction is the ending of
lowest mean loss ("acc"); the lowest summed loss gives "acc_sum"; ties go to the lower index.
Rows are run in batches of --batch rows, padded on the right (positions after a row's end
cannot change its losses under causal attention).

--losses writes one line per example: index, label, the mean-loss and summed-loss predictions,
then the K mean losses and the K summed losses (%.9g). The file reader here is written from the
format's description, independently of llmc/hellaswag.cpp.
"""
import argparse
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_gpt2 import build_model_classes, fail, read_model_file, set_precision  # noqa: E402


def read_evalfile(path):
    """[(label, ctx, [ending, ...]), ...] from an eval file; exits with a sentence if malformed."""
    try:
        data = open(path, "rb").read()
    except OSError as e:
        fail(f"cannot read the eval file {path}: {e.strerror}")
    if len(data) < 1024:
        fail(f"{path} is too short for an eval file's header")
    magic, version, n, longest = struct.unpack_from("<4i", data, 0)
    if magic != 20240522 or version != 1:
        fail(f"{path} is not an eval file (magic {magic}, version {version})")
    words = struct.unpack_from(f"<{(len(data) - 1024) // 2}H", data, 1024)
    examples, pos = [], 0
    for i in range(n):
        start, nbytes, index, label, k, clen = words[pos:pos + 6]
        if start != 65535 or index != i or nbytes > longest:
            fail(f"{path}: example {i} is malformed")
        end = pos + nbytes // 2
        p = pos + 6
        ctx = list(words[p:p + clen])
        p += clen
        endings = []
        for _ in range(k):
            elen = words[p]
            endings.append(list(words[p + 1:p + 1 + elen]))
            p += 1 + elen
        if p != end:
            fail(f"{path}: example {i}'s fields do not add up to its {nbytes} bytes")
        examples.append((label, ctx, endings))
        pos = end
    if pos != len(words):
        fail(f"{path} has bytes after its {n} examples")
    return examples


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="model file (version 3 or 5)")
    p.add_argument("--eval", required=True, help="eval file (llm.c's format)")
    p.add_argument("-t", "--seq-len", type=int, help="T of train_gpt2cu -t (default: maxT)")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--batch", type=int, default=32, help="rows per forward (32)")
    p.add_argument("--losses", help="write the per-example losses here")
    p.add_argument("--autocast", action="store_true",
                   help="run under torch.autocast(bfloat16): PyTorch's own bf16 error, the "
                   "baseline of the bf16 build's bound (scripts/test/test_hellaswag.sh)")
    a = p.parse_args()
    import torch
    import torch.nn.functional as F
    device = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    set_precision(tf32=False, deterministic=True)
    model, cfg = read_model_file(a.model, build_model_classes(), device)
    model.eval()
    T = a.seq_len or cfg["block_size"]
    if not 1 <= T <= cfg["block_size"]:
        fail(f"-t must be in 1..{cfg['block_size']} (the model's maxT), got {T}")
    examples = read_evalfile(a.eval)
    rows = []  # (example, ending, tokens, first ending position, ending length)
    for i, (label, ctx, endings) in enumerate(examples):
        for j, e in enumerate(endings):
            if len(e) > T:
                fail(f"example {i}'s ending {j} has {len(e)} tokens, more than T = {T}")
            if max(ctx + e) >= cfg["vocab_size"]:
                fail(f"example {i} has a token id outside the model's vocabulary")
            skip = max(0, len(ctx) + len(e) - 1 - T)
            toks = ctx[skip:] + e
            rows.append((i, j, toks, len(ctx) - skip - 1, len(e)))
    sums = {}
    t0 = time.time()
    with torch.no_grad():
        for b in range(0, len(rows), a.batch):
            chunk = rows[b:b + a.batch]
            width = max(len(r[2]) for r in chunk) - 1
            x = torch.zeros((len(chunk), width), dtype=torch.long)
            y = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, (_, _, toks, _, _) in enumerate(chunk):
                x[r, :len(toks) - 1] = torch.tensor(toks[:-1])
                y[r, :len(toks) - 1] = torch.tensor(toks[1:])
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                                enabled=a.autocast):
                logits, _ = model(x.to(device))
            losses = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                                     y.to(device).reshape(-1), reduction="none")
            losses = losses.view(len(chunk), width).double().cpu()
            for r, (i, j, _, first, n) in enumerate(chunk):
                sums[(i, j)] = (float(losses[r, first:first + n].sum()), n)
    seconds = time.time() - t0
    correct = correct_sum = 0
    lines = []
    for i, (label, ctx, endings) in enumerate(examples):
        total = [sums[(i, j)][0] for j in range(len(endings))]
        mean = [total[j] / sums[(i, j)][1] for j in range(len(endings))]
        pred = min(range(len(mean)), key=lambda j: (mean[j], j))
        pred_sum = min(range(len(total)), key=lambda j: (total[j], j))
        correct += pred == label
        correct_sum += pred_sum == label
        lines.append(" ".join([str(i), str(label), str(pred), str(pred_sum)] +
                              [f"{v:.9g}" for v in mean + total]))
    if a.losses:
        with open(a.losses, "w") as f:
            f.write("\n".join(lines) + "\n")
    n = len(examples)
    print(f"hellaswag {correct}/{n} = {correct / n:.4f} (lowest summed loss: {correct_sum} = "
          f"{correct_sum / n:.4f}); {len(rows)} rows on {device} in {seconds:.2f} s")


if __name__ == "__main__":
    main()
