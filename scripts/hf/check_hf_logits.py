#!/usr/bin/env python3
"""check_hf_logits.py MODEL_FILE HF_DIR: do transformers and our PyTorch reference agree?

Loads HF_DIR (e.g. written by scripts/hf/export_hf.py MODEL_FILE HF_DIR) with transformers'
GPT2LMHeadModel.from_pretrained in fp32, and MODEL_FILE into the PyTorch reference model of
scripts/ref/train_gpt2.py, runs both on the same seeded random batch and prints the max abs
difference of the logits (and of the mean loss). Exits 0 when the logits agree within
--tol * max(1, max |logit|) (tol 1e-3, see below), 1 when not or when a file is bad, 2 on a
usage error.
Needs torch and transformers (the GPU machine has both); --device cpu|cuda (default: cuda when
available).

  python3 scripts/hf/export_hf.py model.bin out/hf
  python3 scripts/hf/check_hf_logits.py model.bin out/hf
"""
import argparse
import os
import sys

# The rooms of scripts/ this module imports from.
SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(SCRIPTS, room) for room in ("hf", "deps", "ref")]
import export_hf  # noqa: E402 (after the path)
from pydeps import optional, require  # noqa: E402

np = optional("numpy")  # main() requires it after parsing, so --help runs without it


def reference_state_dict(cfg, t):
    """The 16 file tensors as scripts/ref/train_gpt2.py's GPT2 state dict (wte without padding)."""
    import torch
    sd = {"wte.weight": t["wte"][:cfg["vocab_size"]], "wpe.weight": t["wpe"],
          "lnf.weight": t["lnfw"], "lnf.bias": t["lnfb"]}
    per_layer = [("ln1.weight", "ln1w"), ("ln1.bias", "ln1b"), ("qkv.weight", "qkvw"),
                 ("qkv.bias", "qkvb"), ("attn_proj.weight", "attprojw"),
                 ("attn_proj.bias", "attprojb"), ("ln2.weight", "ln2w"), ("ln2.bias", "ln2b"),
                 ("fc.weight", "fcw"), ("fc.bias", "fcb"), ("fc_proj.weight", "fcprojw"),
                 ("fc_proj.bias", "fcprojb")]
    for i in range(cfg["n_layer"]):
        sd.update({f"blocks.{i}.{ours}": t[name][i] for ours, name in per_layer})
    return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in sd.items()}


def load_reference(model_path):
    """(cfg, the train_gpt2.py GPT2 module in eval mode) from a model file."""
    import train_gpt2
    cfg, tensors = export_hf.read_model_file(model_path)
    model_cfg = {k: cfg[k] for k in ("n_layer", "n_head", "n_embd", "vocab_size", "block_size")}
    model = train_gpt2.build_model_classes()(model_cfg, False)
    model.load_state_dict(reference_state_dict(cfg, tensors))
    return cfg, model.eval()


def random_batch(cfg, B, T, seed):
    import torch
    rng = np.random.RandomState(seed)
    toks = rng.randint(0, cfg["vocab_size"], size=(B, T + 1))
    return torch.from_numpy(toks[:, :-1].copy()), torch.from_numpy(toks[:, 1:].copy())


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_file")
    p.add_argument("hf_dir")
    p.add_argument("-b", "--batch", type=int, default=4, help="B of the random batch (4)")
    p.add_argument("-t", "--seq-len", type=int, default=64, help="T (64, at most maxT)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    # 1e-3 relative to the largest logit: both sides compute in fp32, but HF's attention (sdpa
    # or eager) and ours order their sums differently, so the logits differ by rounding that
    # grows with their size (measured on an H100: 6.2e-6 for a random d12 at T=1024, max |logit|
    # 3.1). 1e-3 leaves two orders of margin and still catches any wrong tensor (a transposed
    # weight moved the logits of the CI model by 0.75).
    p.add_argument("--tol", type=float, default=1e-3,
                   help="max abs logit difference, times max(1, max |logit|) (1e-3)")
    args = p.parse_args(argv)
    global np
    np = require("numpy")
    torch = require("torch")
    GPT2LMHeadModel = require("transformers", "Hugging Face's GPT-2").GPT2LMHeadModel
    try:
        cfg, ref = load_reference(args.model_file)
    except export_hf.ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not 1 <= args.seq_len <= cfg["block_size"] or args.batch < 1:
        print(f"error: need -b >= 1 and 1 <= -t <= maxT ({cfg['block_size']})", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":  # plain fp32 matmuls on both sides
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    try:  # transformers 5 names it dtype; 4.x torch_dtype (and refuses dtype)
        hf = GPT2LMHeadModel.from_pretrained(args.hf_dir, dtype=torch.float32)
    except TypeError:
        hf = GPT2LMHeadModel.from_pretrained(args.hf_dir, torch_dtype=torch.float32)
    hf.eval()
    if next(hf.parameters()).dtype != torch.float32:
        print(f"error: transformers loaded {args.hf_dir} as {next(hf.parameters()).dtype}, "
              "not float32", file=sys.stderr)
        return 1
    ref, hf = ref.to(device), hf.to(device)
    x, y = (a.to(device) for a in random_batch(cfg, args.batch, args.seq_len, args.seed))
    with torch.no_grad():
        ref_logits, ref_loss = ref(x, y)
        out = hf(input_ids=x, labels=None)
        hf_logits = out.logits.float()
        hf_loss = torch.nn.functional.cross_entropy(
            hf_logits.reshape(-1, hf_logits.size(-1)), y.reshape(-1))
    if hf_logits.shape != ref_logits.shape:
        print(f"error: transformers gives logits of shape {tuple(hf_logits.shape)}, the reference "
              f"{tuple(ref_logits.shape)}", file=sys.stderr)
        return 1
    diff = (hf_logits - ref_logits).abs().max().item()
    scale = ref_logits.abs().max().item()
    print(f"model {args.model_file}: L={cfg['n_layer']} NH={cfg['n_head']} C={cfg['n_embd']} "
          f"V={cfg['vocab_size']}; batch B={args.batch} T={args.seq_len} on {device}")
    bound = args.tol * max(1.0, scale)
    print(f"max |logits| {scale:.4f}; max abs diff transformers vs reference {diff:.3e} "
          f"(bound {bound:.3e}); loss {hf_loss.item():.6f} vs {ref_loss.item():.6f}")
    ok = diff <= bound
    print("OK: transformers and the reference agree" if ok else "FAIL: the logits differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
