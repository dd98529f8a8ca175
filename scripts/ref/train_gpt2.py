#!/usr/bin/env python3
"""train_gpt2.py: the PyTorch reference of this project.

It holds the same GPT-2 as train_gpt2cu (pre-LN blocks, LayerNorm eps 1e-5, tanh GELU, causal
attention, LM head tied to wte) and writes every file the C++ side reads (formats in
llmc/model_file.h and llmc/dataloader.h):

  model file      --write-model PATH [--model-dtype float32|bfloat16]
  debug state     --write-state PATH  (one batch: logits, loss, all 16 gradients of a float64
                  reference run, then our trailer with the losses of --dump-steps AdamW steps
                  on that batch and the errors of the same run under bf16 autocast and with
                  TF32 products, for the test's thresholds)
  tokenizer file  --write-tokenizer PATH --encoder-dir DIR
  token shards    --tokenize FILE --encoder-dir DIR --out-dir DIR   (GPT-2 byte-level BPE)
                  --random-shards DIR --num-tokens N                (random ids, for tests)
  training        -i GLOB [-j GLOB] ...  (one line per step, a summary, --json-summary PATH);
                  under torchrun data parallel (DDP), -b per rank, rank r reading rows
                  [r*B, (r+1)*B) of the global batch a one-process run with -b world*B reads.
                  The benchmark's settings (--compile [--compile-mode], --fused-adamw, --dtype
                  bfloat16, --sdpa-backend) make it a standard nanoGPT-style PyTorch: on a GPU the
                  head runs on wte padded to Vp rows and the loss takes the autocast logits as
                  they are (no fp32 copy of B*T*V logits), which torch.compile fuses

The shard and tokenizer code is in make_shards.py next to this file (no torch needed there).
Works on torch 1.13 (CPU) and torch 2.x (CUDA); newer features (torch.compile,
scaled_dot_product_attention, fused AdamW) are used only where they exist. Run --help for every
option. A bad value gets one sentence and exit code 2.
"""
import argparse
import glob
import inspect
import json
import math
import os
import re
import statistics
import struct
import sys
import time

# The rooms of scripts/ this module imports from.
SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(SCRIPTS, room) for room in ("deps", "data")]
from pydeps import optional, require  # noqa: E402 (after the path)

np = optional("numpy")  # main() requires it after parsing, so --help runs without it
from make_shards import (HEADER_INTS, UsageError, fail, header,  # noqa: E402 (after the path)
                         random_shards, read_shard_count, tokenize_file, write_tokenizer)

MODEL_MAGIC, STATE_MAGIC = 20240326, 20240327
PRESETS = {  # name -> (n_layer, n_head, n_embd); GPT-2 124M / 350M / 774M / 1558M
    "d12": (12, 12, 768), "d24": (24, 16, 1024), "d36": (36, 20, 1280), "d48": (48, 25, 1600)}


def padded_vocab(v):
    return (v + 127) // 128 * 128


# ------------------------------------------------------------------------------------------
# Token shards for training

class ShardLoader:
    """Batches of B*T+1 tokens from shards in name order, advancing by B*T, wrapping at the end.

    With world > 1 (DDP) each step reads a global batch of world*B rows, exactly the batch of a
    one-process loader with B' = world*B, and this rank keeps rows [rank*B, (rank+1)*B)."""

    def __init__(self, pattern, B, T, vocab_size, rank=0, world=1):
        self.files = sorted(glob.glob(pattern))
        if not self.files:
            fail(f"no file matches the shard pattern '{pattern}'")
        self.B, self.T, self.V, self.rank, self.world = B, T, vocab_size, rank, world
        self.counts = [read_shard_count(p) for p in self.files]
        need = world * B * T + 1
        what = "B*T+1" if world == 1 else f"{world} ranks x B*T + 1"
        for p, n in zip(self.files, self.counts):
            if n < need:
                fail(f"{p} holds {n} tokens, fewer than the {what} = {need} one batch needs; "
                     "use a smaller B or T")
        self.reset()

    def _load(self, i):
        self.shard, self.pos = i, 0
        self.tokens = np.memmap(self.files[i], dtype="<u2", mode="r", offset=4 * HEADER_INTS,
                                shape=(self.counts[i],))
        top = int(self.tokens.max())
        if top >= self.V:
            fail(f"{self.files[i]} has token id {top}, not below the vocabulary size {self.V}")

    def reset(self):
        self._load(0)

    def next_batch(self):
        bt, global_bt = self.B * self.T, self.world * self.B * self.T
        start = self.pos + self.rank * bt
        buf = np.array(self.tokens[start:start + bt + 1], dtype=np.int64)
        self.pos += global_bt
        if self.pos + global_bt + 1 > self.counts[self.shard]:
            self._load((self.shard + 1) % len(self.files))
        return buf[:-1].reshape(self.B, self.T), buf[1:].reshape(self.B, self.T)


# ------------------------------------------------------------------------------------------
# Data parallel under torchrun

# NVLink multicast (NCCL's NVLS, PyTorch's symmetric memory, NVSHMEM) stays off: on our shared
# multi-GPU hosts a program that uses it can put every GPU of the host out of service.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                    "NVSHMEM_DISABLE_NVLS": "1"}


class Dist:
    """This process's place in a torchrun launch (RANK, WORLD_SIZE, LOCAL_RANK in the
    environment); rank 0 of 1, touching nothing in torch.distributed, without one."""

    def __init__(self, env):
        self.on = "RANK" in env and "WORLD_SIZE" in env
        self.rank = int(env["RANK"]) if self.on else 0
        self.world = int(env["WORLD_SIZE"]) if self.on else 1
        self.local_rank = int(env.get("LOCAL_RANK", 0)) if self.on else 0

    def start(self, device):
        """Joins the process group: NCCL for cuda:LOCAL_RANK, gloo on the CPU."""
        import torch.distributed as td
        backend = "nccl" if device.type == "cuda" else "gloo"
        kw = {}
        if device.type == "cuda" and "device_id" in inspect.signature(
                td.init_process_group).parameters:  # torch >= 2.3: binds NCCL to this GPU
            kw["device_id"] = device
        td.init_process_group(backend, **kw)
        print(f"data parallel: {self.world} ranks ({backend}), one per "
              f"{'GPU' if device.type == 'cuda' else 'CPU process'}; B is per rank")

    def stop(self):
        if not self.on:  # a single process may not have torch at all
            return
        import torch.distributed as td
        if td.is_initialized():
            td.destroy_process_group()

    def sum(self, t):
        """t summed over the ranks, in place (gloo has no ReduceOp.AVG); t itself alone."""
        if self.on:
            import torch.distributed as td
            td.all_reduce(t)
        return t

    def gather(self, x, device):
        """[x of rank 0, x of rank 1, ...] as floats."""
        import torch
        t = torch.zeros(self.world, dtype=torch.float64, device=device)
        t[self.rank] = x
        return [float(v) for v in self.sum(t).cpu()]


# ------------------------------------------------------------------------------------------
# The model (torch is imported lazily so that the tokenizer modes work without it)

def tf32_round(t):
    """t (float32) rounded to TF32: fp32's exponent, a 10-bit mantissa (the low 13 bits of the
    pattern dropped after adding half of their range: to nearest, ties away from zero)."""
    import torch
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & -0x2000).view(torch.float32)


def build_model_classes():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    has_sdpa = hasattr(F, "scaled_dot_product_attention")

    class TF32Linear(torch.autograd.Function):
        """x @ w^T + b with x and w rounded to TF32 and fp32 sums, and in backward the same for
        each product (dy and w, dy and x): what cuBLAS does with allow_tf32, emulated on the
        CPU, where TF32 does not exist."""

        @staticmethod
        def forward(ctx, x, w, b):
            xr, wr = tf32_round(x), tf32_round(w)
            ctx.save_for_backward(xr, wr)
            ctx.has_bias = b is not None
            y = xr @ wr.t()
            return y + b if b is not None else y

        @staticmethod
        def backward(ctx, g):
            xr, wr = ctx.saved_tensors
            gr = tf32_round(g)
            gw = gr.reshape(-1, gr.size(-1)).t() @ xr.reshape(-1, xr.size(-1))
            gb = g.reshape(-1, g.size(-1)).sum(0) if ctx.has_bias else None
            return gr @ wr, gw, gb

    class TF32Matmul(torch.autograd.Function):
        """a @ b (batched) with TF32-rounded inputs, forward and backward (see TF32Linear)."""

        @staticmethod
        def forward(ctx, a, b):
            ar, br = tf32_round(a), tf32_round(b)
            ctx.save_for_backward(ar, br)
            return ar @ br

        @staticmethod
        def backward(ctx, g):
            ar, br = ctx.saved_tensors
            gr = tf32_round(g)
            return gr @ br.transpose(-2, -1), ar.transpose(-2, -1) @ gr

    def linear(x, mod, tf32):  # mod: an nn.Linear
        return TF32Linear.apply(x, mod.weight, mod.bias) if tf32 else mod(x)

    class Block(nn.Module):
        def __init__(self, C, n_head, flash):
            super().__init__()
            self.n_head, self.flash = n_head, flash and has_sdpa
            self.tf32 = False  # emulated TF32 products (GPT2.set_tf32_emulation)
            self.ln1, self.ln2 = nn.LayerNorm(C, eps=1e-5), nn.LayerNorm(C, eps=1e-5)
            self.qkv, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def attention(self, x):
            B, T, C = x.shape
            # qkv rows: q, k, v, each split into heads of HS = C / NH consecutive channels
            q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                       for t in linear(x, self.qkv, self.tf32).split(C, dim=2))
            if self.flash and not self.tf32:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                mm = TF32Matmul.apply if self.tf32 else torch.matmul
                att = mm(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                y = mm(att, v)
            return linear(y.transpose(1, 2).contiguous().view(B, T, C), self.attn_proj, self.tf32)

        def forward(self, x):
            x = x + self.attention(self.ln1(x))
            h = F.gelu(linear(self.ln2(x), self.fc, self.tf32), approximate="tanh")
            return x + linear(h, self.fc_proj, self.tf32)

    class GPT2(nn.Module):
        def __init__(self, cfg, flash):
            super().__init__()
            self.cfg = cfg
            self.wte = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
            self.wpe = nn.Embedding(cfg["block_size"], cfg["n_embd"])
            self.blocks = nn.ModuleList(Block(cfg["n_embd"], cfg["n_head"], flash)
                                        for _ in range(cfg["n_layer"]))
            self.lnf = nn.LayerNorm(cfg["n_embd"], eps=1e-5)
            self.tf32 = False
            # The reference and the dumps take the loss of bf16 logits in fp32 explicitly (as
            # the autocast baselines always have); the benchmark (lean_head) leaves that to
            # autocast's own fp32 policy for cross_entropy, which torch.compile fuses into the
            # loss kernel instead of storing an fp32 copy of every logit. lean_head also runs
            # the head on wte padded to Vp rows (a multiple of 128, like train_gpt2cu's GEMM):
            # the padded logits are left out of the loss, so the padding rows get no gradient,
            # and the model is the same as without it.
            self.lean_head = False

        def set_tf32_emulation(self, on):
            self.tf32 = on
            for b in self.blocks:
                b.tf32 = on

        def forward(self, idx, targets=None, return_logits=True):
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            V = self.cfg["vocab_size"]
            w = self.wte.weight  # the LM head is wte (tied)
            if self.lean_head and padded_vocab(V) > V:
                w = F.pad(w, (0, 0, 0, padded_vocab(V) - V))
            x = self.lnf(x)
            logits = TF32Linear.apply(x, w, None) if self.tf32 else F.linear(x, w)
            loss = None
            if targets is not None:
                flat = logits.view(-1, logits.size(-1))[:, :V]  # a view: no copy of the logits
                if not self.lean_head and flat.dtype in (torch.bfloat16, torch.float16):
                    flat = flat.float()
                loss = F.cross_entropy(flat, targets.reshape(-1))
            if not return_logits:
                return None, loss
            return (logits[..., :V] if w.size(0) > V else logits), loss

    return GPT2


def init_weights(model, seed, random_biases):
    import torch
    torch.manual_seed(seed)
    L = model.cfg["n_layer"]
    with torch.no_grad():
        model.wte.weight.normal_(0.0, 0.02)
        model.wpe.weight.normal_(0.0, 0.02)
        for b in model.blocks:
            for lin in (b.qkv, b.attn_proj, b.fc, b.fc_proj):
                residual = lin is b.attn_proj or lin is b.fc_proj
                lin.weight.normal_(0.0, 0.02 / math.sqrt(2 * L) if residual else 0.02)
                lin.bias.zero_()
        if random_biases:  # so that no gradient in a test is checked against zeros
            for b in model.blocks:
                for lin in (b.qkv, b.attn_proj, b.fc, b.fc_proj):
                    lin.bias.normal_(0.0, 0.02)
            for ln in [m for b in model.blocks for m in (b.ln1, b.ln2)] + [model.lnf]:
                ln.weight.copy_(1.0 + 0.1 * torch.randn_like(ln.weight))
                ln.bias.normal_(0.0, 0.02)


HF_MAP = [("ln_1.weight", "ln1.weight", False), ("ln_1.bias", "ln1.bias", False),
          ("attn.c_attn.weight", "qkv.weight", True), ("attn.c_attn.bias", "qkv.bias", False),
          ("attn.c_proj.weight", "attn_proj.weight", True),
          ("attn.c_proj.bias", "attn_proj.bias", False),
          ("ln_2.weight", "ln2.weight", False), ("ln_2.bias", "ln2.bias", False),
          ("mlp.c_fc.weight", "fc.weight", True), ("mlp.c_fc.bias", "fc.bias", False),
          ("mlp.c_proj.weight", "fc_proj.weight", True), ("mlp.c_proj.bias", "fc_proj.bias", False)]


def read_safetensors(path):
    """The safetensors layout: u64 header length, a JSON header, then the raw tensors."""
    kinds = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        meta = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, m in meta.items():
        if name == "__metadata__":
            continue
        if m["dtype"] not in kinds:
            fail(f"{path} holds {name} as {m['dtype']}; only F32, F16 and BF16 are read")
        a = np.frombuffer(data[m["data_offsets"][0]:m["data_offsets"][1]], dtype=kinds[m["dtype"]])
        if m["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.astype(np.float32).reshape(m["shape"])
    return out


def load_hf(hf_dir):
    """Config and state dict (in this model's names) from a local HF GPT-2 directory."""
    import torch
    cfg_path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(cfg_path):
        fail(f"--hf-dir {hf_dir} has no config.json; point it at a Hugging Face GPT-2 directory")
    with open(cfg_path) as f:
        hc = json.load(f)
    keys = ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions")
    missing = [k for k in keys if k not in hc]
    if missing:
        fail(f"{cfg_path} lacks {', '.join(missing)}; is it a GPT-2 config?")
    cfg = dict(n_layer=hc["n_layer"], n_head=hc["n_head"], n_embd=hc["n_embd"],
               vocab_size=hc["vocab_size"], block_size=hc["n_positions"])
    st_path = os.path.join(hf_dir, "model.safetensors")
    bin_path = os.path.join(hf_dir, "pytorch_model.bin")
    if os.path.isfile(st_path):
        sd = {k: torch.from_numpy(np.array(v)) for k, v in read_safetensors(st_path).items()}
    elif os.path.isfile(bin_path):
        sd = torch.load(bin_path, map_location="cpu")
    else:
        fail(f"--hf-dir {hf_dir} has neither model.safetensors nor pytorch_model.bin")
    sd = {(k[len("transformer."):] if k.startswith("transformer.") else k): v.float()
          for k, v in sd.items()}
    names = [("wte.weight", "wte.weight", False), ("wpe.weight", "wpe.weight", False),
             ("ln_f.weight", "lnf.weight", False), ("ln_f.bias", "lnf.bias", False)]
    for i in range(cfg["n_layer"]):
        names += [(f"h.{i}.{h}", f"blocks.{i}.{o}", t) for h, o, t in HF_MAP]
    ours = {}
    for hf_name, name, transpose in names:  # HF's Conv1D stores weights as (in, out)
        if hf_name not in sd:
            fail(f"the checkpoint in {hf_dir} has no tensor {hf_name}")
        ours[name] = sd[hf_name].t().contiguous() if transpose else sd[hf_name]
    return cfg, ours


def file_tensors(model, grads=False, dtype=None):
    """The 16 tensors of llmc/model_file.h as numpy arrays (float32, or dtype), wte padded to Vp
    rows."""
    dtype = np.float32 if dtype is None else dtype

    def get(p):
        t = p.grad if grads else p
        return t.detach().cpu().numpy().astype(dtype)

    def stack(fn):
        return np.stack([get(fn(b)) for b in model.blocks])

    V, C = model.cfg["vocab_size"], model.cfg["n_embd"]
    wte = np.zeros((padded_vocab(V), C), dtype=dtype)
    wte[:V] = get(model.wte.weight)
    yield wte
    yield get(model.wpe.weight)
    for fn in (lambda b: b.ln1.weight, lambda b: b.ln1.bias, lambda b: b.qkv.weight,
               lambda b: b.qkv.bias, lambda b: b.attn_proj.weight, lambda b: b.attn_proj.bias,
               lambda b: b.ln2.weight, lambda b: b.ln2.bias, lambda b: b.fc.weight,
               lambda b: b.fc.bias, lambda b: b.fc_proj.weight, lambda b: b.fc_proj.bias):
        yield stack(fn)
    yield get(model.lnf.weight)
    yield get(model.lnf.bias)


def to_bf16_bits(a):
    """float32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN."""
    bits = a.astype("<f4").view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def write_model(path, model, dtype):
    c = model.cfg
    version = 3 if dtype == "float32" else 5
    with open(path, "wb") as f:
        f.write(header(MODEL_MAGIC, version, c["block_size"], c["vocab_size"], c["n_layer"],
                       c["n_head"], c["n_embd"], padded_vocab(c["vocab_size"])))
        for t in file_tensors(model):
            f.write(t.astype("<f4").tobytes() if version == 3 else to_bf16_bits(t).tobytes())
    print(f"wrote {path}: model file version {version}")


def read_model_file(path, model_classes, device):
    """A model file (version 3 fp32 or 5 bf16) as a GPT2 module: the inverse of write_model."""
    import torch
    if not os.path.isfile(path):
        fail(f"--greedy-from {path}: no such model file")
    data = open(path, "rb").read()
    h = np.frombuffer(data[:HEADER_INTS * 4], dtype="<i4") if len(data) >= HEADER_INTS * 4 else []
    if len(h) == 0 or h[0] != MODEL_MAGIC or h[1] not in (3, 5):
        fail(f"--greedy-from {path}: not a model file of version 3 or 5")
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    cfg = dict(n_layer=L, n_head=NH, n_embd=C, vocab_size=V, block_size=maxT, name="file")
    model = model_classes(cfg, False)
    shapes = [t.shape for t in file_tensors(model)]
    count = sum(int(np.prod(s)) for s in shapes)
    body = data[HEADER_INTS * 4:]
    if h[1] == 3:
        flat = np.frombuffer(body, dtype="<f4", count=count) if len(body) == 4 * count else None
    else:
        bits = np.frombuffer(body, dtype="<u2", count=count) if len(body) == 2 * count else None
        flat = None if bits is None else (bits.astype(np.uint32) << 16).view(np.float32)
    if flat is None:
        fail(f"--greedy-from {path}: the file size does not match its header")
    arrays, off = [], 0
    for shape in shapes:
        n = int(np.prod(shape))
        arrays.append(torch.from_numpy(flat[off:off + n].reshape(shape).copy()))
        off += n
    wte, wpe = arrays[0], arrays[1]
    with torch.no_grad():
        model.wte.weight.copy_(wte[:V])
        model.wpe.weight.copy_(wpe)
        names = [("ln1", "weight"), ("ln1", "bias"), ("qkv", "weight"), ("qkv", "bias"),
                 ("attn_proj", "weight"), ("attn_proj", "bias"), ("ln2", "weight"),
                 ("ln2", "bias"), ("fc", "weight"), ("fc", "bias"), ("fc_proj", "weight"),
                 ("fc_proj", "bias")]
        for (mod, attr), stacked in zip(names, arrays[2:14]):
            for l, block in enumerate(model.blocks):
                getattr(getattr(block, mod), attr).copy_(stacked[l])
        model.lnf.weight.copy_(arrays[14])
        model.lnf.bias.copy_(arrays[15])
    return model.to(device), cfg


def greedy_decode(args):
    """--greedy-from MODEL --prompt-ids IDS: fp32 argmax continuation, printed as 'ids: ...'."""
    torch = require("torch", "for --greedy-from")
    try:
        ids = [int(x) for x in args.prompt_ids.split(",")]
    except ValueError:
        fail(f"--prompt-ids must be comma-separated token ids, got '{args.prompt_ids}'")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    set_precision(tf32=False, deterministic=True)
    model, cfg = read_model_file(args.greedy_from, build_model_classes(), device)
    if not ids or min(ids) < 0 or max(ids) >= cfg["vocab_size"]:
        fail(f"--prompt-ids must be ids in [0, {cfg['vocab_size']}), got '{args.prompt_ids}'")
    model.eval()
    new = []
    with torch.no_grad():
        for _ in range(args.max_tokens):
            window = (ids + new)[-cfg["block_size"]:]
            logits, _ = model(torch.tensor([window], dtype=torch.long, device=device))
            last = logits[0, -1].double()
            top2 = torch.topk(last, 2).values if last.numel() > 1 else last
            new.append(int(torch.argmax(last)))
            # The margin between the two best logits: how far bf16 rounding may move before
            # another build picks a different token.
            print(f"token {len(new)}: {new[-1]} (margin {float(top2[0] - top2[-1]):.6f})")
    print("ids: " + " ".join(str(i) for i in new))


def make_optimizer(model, args, fused=False):
    import torch
    decay = [p for p in model.parameters() if p.dim() >= 2]  # wte, wpe, the four matrices
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)
    if fused and "fused" in inspect.signature(torch.optim.AdamW).parameters:
        kw["fused"] = True
    elif fused:
        print("note: this torch's AdamW has no fused=True; using the default AdamW")
    return torch.optim.AdamW(groups, **kw)


def clip(model, grad_clip):
    """The gradient norm before clipping, as a device tensor (reading it waits for the GPU)."""
    import torch
    # clip_grad_norm_ scales by grad_clip / (norm + 1e-6) when that is below 1; 0 = no clipping
    return torch.nn.utils.clip_grad_norm_(model.parameters(),
                                          grad_clip if grad_clip > 0 else math.inf)


def set_precision(tf32, deterministic):
    import torch
    # The allow_tf32 setters keep the legacy and the new (torch >= 2.9, fp32_precision) flags in
    # agreement; setting only the new ones makes inductor's read of allow_tf32 raise on 2.10.
    torch.backends.cuda.matmul.allow_tf32 = tf32  # = set_float32_matmul_precision high/highest
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(deterministic, warn_only=True)


def rel_err(a, ref):
    """||a - ref|| / ||ref|| in float64 (||a - ref|| when ref is all zeros)."""
    a, ref = a.astype(np.float64), ref.astype(np.float64)
    den = np.linalg.norm(ref)
    err = np.linalg.norm(a - ref)
    return float(err / den) if den > 0 else float(err)


def fwd_bwd_steps(model, x, y, args, autocast):
    """logits and loss of one forward, the 16 gradients, then the loss before each of
    --dump-steps AdamW updates (losses[0] is the first loss). Arrays in float64, whatever the
    model's precision. Mutates model."""
    model.train()
    model.zero_grad(set_to_none=True)
    opt = make_optimizer(model, args)
    with autocast():
        logits, loss = model(x, y)
    loss.backward()
    # Copies: on the CPU .numpy() shares the tensor's memory, and clipping scales grads in place.
    logits = logits.detach().double().cpu().numpy().copy()
    grads = [g.copy() for g in file_tensors(model, grads=True, dtype=np.float64)]
    losses, norms = [loss.item()], []
    for _ in range(1, args.dump_steps):
        norms.append(float(clip(model, args.grad_clip)))
        opt.step()
        opt.zero_grad(set_to_none=True)
        with autocast():
            _, loss = model(x, y)
        loss.backward()
        losses.append(loss.item())
    return logits, losses, grads, norms


def baselines(run, ref):
    """PyTorch's error of one run against the reference, in the trailer's order: logits and the
    16 gradients as relative error norms, the loss and the step losses (the largest over the
    steps, each run taking its own AdamW steps) as absolute differences."""
    (logits, losses, grads, _), (r_logits, r_losses, r_grads, _) = run, ref
    base = [rel_err(logits, r_logits), abs(losses[0] - r_losses[0])]
    base += [rel_err(a, f) for a, f in zip(grads, r_grads)]
    base.append(max(abs(a - f) for a, f in zip(losses, r_losses)))
    return base


TF32_NONE, TF32_MEASURED, TF32_EMULATED = 0, 1, 2


def write_state(path, model, x, y, args):
    """Debug state v2 + trailer (version 3). The reference (logits, loss, gradients, the step
    losses) runs in --state-dtype (float64 by default) with TF32 off and deterministic kernels,
    from model's weights (model itself is left as it is). The trailer's baselines come from the
    same batch and weights in float32: under torch.autocast(bfloat16), and with TF32 products
    (allow_tf32 on a GPU; on the CPU, where TF32 does not exist, emulated by rounding every
    product's inputs to TF32, --tf32-baseline): how far PyTorch's own runs in those precisions
    land from the reference."""
    import contextlib
    import copy
    import torch
    set_precision(tf32=False, deterministic=True)
    B, T = x.shape
    ref_dtype = torch.float64 if args.state_dtype == "float64" else torch.float32
    ref = fwd_bwd_steps(copy.deepcopy(model).to(ref_dtype), x, y, args, contextlib.nullcontext)
    logits, losses, grads, norms = ref
    print(f"state loss {losses[0]:.6f} ({args.state_dtype} reference)")
    for k in range(1, args.dump_steps):
        print(f"state step {k}: grad norm before the update {norms[k - 1]:.6f}, "
              f"loss {losses[k]:.6f}")
    autocast = fwd_bwd_steps(
        copy.deepcopy(model), x, y, args,
        lambda: torch.autocast(device_type=x.device.type, dtype=torch.bfloat16))
    base = baselines(autocast, ref)
    del autocast
    names = ["logits", "loss"] + [f"grad {i}" for i in range(len(grads))] + ["step losses"]
    print("bf16 autocast vs the reference (rel. error norm; loss, step losses: abs): " +
          ", ".join(f"{n} {b:.3e}" for n, b in zip(names, base)))
    mode = args.tf32_baseline
    if mode == "auto":
        mode = "measure" if x.device.type == "cuda" else "emulate"
    tf32_source, tf32_base = TF32_NONE, [0.0] * len(base)
    if mode != "none":
        tf32_model = copy.deepcopy(model)
        if mode == "measure":
            if x.device.type != "cuda":
                fail("--tf32-baseline measure needs --device cuda (TF32 exists on NVIDIA GPUs "
                     "only); use emulate or auto on the CPU")
            set_precision(tf32=True, deterministic=True)
            tf32_source = TF32_MEASURED
        else:
            tf32_model.set_tf32_emulation(True)
            tf32_source = TF32_EMULATED
        tf32_base = baselines(fwd_bwd_steps(tf32_model, x, y, args, contextlib.nullcontext), ref)
        set_precision(tf32=False, deterministic=True)
        del tf32_model
        print(f"tf32 ({'measured' if tf32_source == TF32_MEASURED else 'emulated'}) vs the "
              "reference: " + ", ".join(f"{n} {b:.3e}" for n, b in zip(names, tf32_base)))
    V = model.cfg["vocab_size"]
    with open(path, "wb") as f:
        f.write(header(STATE_MAGIC, 2, B, T))
        f.write(x.cpu().numpy().astype("<i4").tobytes())
        f.write(y.cpu().numpy().astype("<i4").tobytes())
        f.write(logits.reshape(B, T, V).astype("<f4").tobytes())
        f.write(struct.pack("<f", losses[0]))
        for g in grads:
            f.write(g.astype("<f4").tobytes())
        f.write(struct.pack("<i", args.dump_steps))
        f.write(struct.pack("<6f", args.lr, args.beta1, args.beta2, args.eps, args.weight_decay,
                            args.grad_clip))
        f.write(np.array(losses, dtype="<f4").tobytes())
        f.write(struct.pack("<i", 3))  # trailer version 3: llmc/model_file.h
        f.write(np.array(base, dtype="<f4").tobytes())
        f.write(struct.pack("<2i", 64 if ref_dtype == torch.float64 else 32, tf32_source))
        f.write(np.array(tf32_base, dtype="<f4").tobytes())
    print(f"wrote {path}: debug state B={B} T={T}, {args.dump_steps} step losses "
          f"({args.state_dtype} reference), bf16 autocast and "
          f"{['no', 'measured', 'emulated'][tf32_source]} TF32 baselines")


# ------------------------------------------------------------------------------------------
# Training / benchmark

def lr_at(args, step):  # step is 1-based: linear warmup, then constant (as train_gpt2cu)
    if args.warmup > 0 and step <= args.warmup:
        return args.lr * step / args.warmup
    return args.lr


COMPILE_MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]

SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                 "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}


def sdpa_context(name):
    """The context that restricts F.scaled_dot_product_attention to one backend ('auto': none).

    It is entered around the whole training run, so torch.compile traces under it and the
    compiled graph keeps that backend (the choice is made when the graph is traced)."""
    import contextlib
    if name == "auto":
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        fail(f"--sdpa-backend {name} needs torch.nn.attention.sdpa_kernel (torch 2.3 or newer); "
             "use --sdpa-backend auto with this torch")
    backend = getattr(SDPBackend, SDPA_BACKENDS[name], None)
    if backend is None:
        fail(f"--sdpa-backend {name}: this torch has no SDPBackend.{SDPA_BACKENDS[name]}")
    return sdpa_kernel(backend)


def train(args, model, cfg, device, dist):
    with sdpa_context(args.sdpa_backend):
        train_loop(args, model, cfg, device, dist)


def train_loop(args, model, cfg, device, dist):
    """Trains; under torchrun every rank runs this on its rows of each global batch and DDP
    averages the gradients, so the steps match a one-process run with B' = world * B."""
    import torch
    set_precision(tf32=args.tf32, deterministic=False)
    B, T, world = args.batch_size, args.seq_len, dist.world
    accum = args.total_batch // (B * T * world)
    train_loader = ShardLoader(args.input, B, T, cfg["vocab_size"], dist.rank, world)
    val_loader = (ShardLoader(args.val_input, B, T, cfg["vocab_size"], dist.rank, world)
                  if args.val_input else None)
    opt = make_optimizer(model, args, fused=args.fused_adamw)
    cuda = device.type == "cuda"
    if args.dtype == "bfloat16":
        autocast = lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    else:
        import contextlib
        autocast = contextlib.nullcontext
    # The benchmark's head: wte padded to Vp rows, and the loss of bf16 logits left to autocast
    # (GPT2.lean_head): the same model and losses, no fp32 copy of the logits.
    model.lean_head = cuda
    fwd, ddp = model, None
    if dist.on:
        from torch.nn.parallel import DistributedDataParallel
        fwd = ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    mode = args.compile_mode or "default"
    graphs = mode in ("reduce-overhead", "max-autotune")  # the modes that add CUDA graphs
    if args.compile:
        if not hasattr(torch, "compile"):
            fail(f"--compile needs torch 2 or newer; this is torch {torch.__version__}")
        # After the DDP wrap, as PyTorch advises: DDPOptimizer splits the graph at the
        # gradient buckets so that their all-reduces overlap the backward.
        fwd = torch.compile(fwd, mode=None if mode == "default" else mode)
    # A CUDA-graphed forward's outputs live in the graph's memory until the next replay; marking
    # each forward as a new step lets the replay reuse that memory (the loss is copied out first).
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def validate():
        val_loader.reset()
        total = torch.zeros((), dtype=torch.float64, device=device)
        with torch.no_grad(), autocast():
            for _ in range(args.val_batches):
                x, y = (torch.from_numpy(a).to(device) for a in val_loader.next_batch())
                if graphs and mark_step is not None:
                    mark_step()
                total += fwd(x, y, return_logits=False)[1].double()
        return dist.sum(total).item() / (args.val_batches * world)

    model.train()
    times, losses, val_loss = [], [], None
    for step in range(1, args.steps + 1):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=device)
        for micro in range(accum):
            if ddp is not None:  # all-reduce the gradients after the last micro-batch only
                ddp.require_backward_grad_sync = micro == accum - 1
            x, y = (torch.from_numpy(a).to(device, non_blocking=True)
                    for a in train_loader.next_batch())
            if graphs and mark_step is not None:
                mark_step()
            with autocast():
                _, loss = fwd(x, y, return_logits=False)
            (loss / accum).backward()
            loss_sum += loss.detach()
        norm_t = clip(model, args.grad_clip)  # read after the step: no wait for the GPU here
        lr = lr_at(args, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        sync()
        ms = 1000.0 * (time.perf_counter() - t0)
        norm = float(norm_t)
        loss_val = dist.sum(loss_sum).item() / (accum * world)  # the mean over all ranks
        times.append(ms)
        losses.append(loss_val)
        print(f"step {step}/{args.steps} | loss {loss_val:.6f} | norm {norm:.4f} | lr {lr:.2e} | "
              f"ms {ms:.2f} | tok/s {args.total_batch / ms * 1000.0:.0f}", flush=True)
        if val_loader and (step == args.steps or (args.val_every and step % args.val_every == 0)):
            val_loss = validate()
            print(f"val loss {val_loss:.6f}")

    skip = min(args.warmup_skip, len(times) - 1)
    timed = times[skip:]
    median_ms = statistics.median(timed)
    tok_s = args.total_batch * len(timed) / (sum(timed) / 1000.0)  # all ranks' tokens
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else 0.0
    peaks = dist.gather(peak, device)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    peak_txt = f"{max(peaks):.0f} MiB" if cuda else "n/a (cpu)"
    ranks_txt = ""
    if dist.on:
        peak_txt += " per GPU (max over ranks)" if cuda else ""
        ranks_txt = f" x {world} ranks"
        if cuda:
            print("peak memory per GPU, MiB: " +
                  ", ".join(f"rank {r} {m:.0f}" for r, m in enumerate(peaks)))
    compiled = f"compile={args.compile}" + (f" mode={mode}" if args.compile else "")
    print(f"summary: {cfg['name']} B={B}{ranks_txt} T={T} {args.dtype} {compiled} "
          f"flash={args.flash} sdpa={args.sdpa_backend} tf32={args.tf32} on {name} | median {median_ms:.2f} ms/step over "
          f"steps {skip + 1}..{args.steps} | {tok_s:.0f} tok/s | peak memory {peak_txt}")
    if args.json_summary and dist.rank == 0:
        summary = dict(median_ms=median_ms, tok_per_s=tok_s, peak_mem_mib=max(peaks),
                       steps=args.steps, B=B, T=T, config=cfg["name"], model=cfg,
                       dtype=args.dtype, compile=args.compile, compile_mode=mode,
                       flash=args.flash, tf32=args.tf32,
                       sdpa_backend=args.sdpa_backend,
                       device_name=name, torch_version=torch.__version__, losses=losses,
                       val_loss=val_loss, total_batch=args.total_batch, step_ms=times)
        if dist.on:  # B above is per rank; tok_per_s and total_batch count every rank
            summary.update(world_size=world, peak_mem_mib_per_rank=peaks)
        with open(args.json_summary, "w") as f:
            json.dump(summary, f, indent=1)
        print(f"wrote {args.json_summary}")


# ------------------------------------------------------------------------------------------
# Options

EPILOG = """modes (several may be combined; the model is built once for the model modes):
  write a model file and a debug state for one batch (random tokens unless -i is given):
    %(prog)s -e d12 -b 4 -t 64 --random-biases --write-model m.bin --write-state s.bin
    %(prog)s --n-layer 2 --n-head 4 --n-embd 128 --vocab-size 1000 --block-size 96 -b 3 -t 77 \\
        --random-biases --device cpu --write-model m.bin --write-state s.bin
  load a local Hugging Face GPT-2 directory instead of the random init:
    %(prog)s --hf-dir gpt2/ --write-model gpt2_124M.bin --model-dtype bfloat16
  tokenizer file and shards (GPT-2's encoder.json + vocab.bpe, or HF's vocab.json + merges.txt):
    %(prog)s --write-tokenizer gpt2_tokenizer.bin --encoder-dir DIR
    %(prog)s --tokenize input.txt --encoder-dir DIR --out-dir data/tiny [--doc-sep '\\n\\n']
    %(prog)s --random-shards data/random --num-tokens 2000000 [--vocab-size V] [--seed S]
  train / benchmark (when -i is given; with --write-model/--write-state only if --steps N):
    %(prog)s -i 'data/random/*_train_*.bin' -e d12 -b 4 -t 1024 --steps 50 --dtype bfloat16 \\
        --tf32 --compile --flash --fused-adamw --json-summary torch.json
  the same on 2 GPUs (DDP, NCCL; -b per GPU; loss = mean over ranks, tok/s = all ranks' tokens):
    torchrun --standalone --nproc_per_node 2 %(prog)s -i 'data/random/*_train_*.bin' -e d12 -b 4 \\
        -t 1024 --steps 50 --dtype bfloat16 --tf32 --compile --flash --fused-adamw
Training prints 'step N/M | loss L | norm G | lr X | ms D | tok/s R' per step and a summary with
the median step time over the steps after --warmup-skip."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    m = p.add_argument_group("model")
    m.add_argument("-e", "--preset", choices=sorted(PRESETS),
                   help="GPT-2 shape: d12/d24/d36/d48 = 124M/350M/774M/1558M (block 1024, V 50257)")
    m.add_argument("--n-layer", type=int, help="layers L (overrides the preset)")
    m.add_argument("--n-head", type=int, help="attention heads NH")
    m.add_argument("--n-embd", type=int, help="channels C (a multiple of NH)")
    m.add_argument("--vocab-size", type=int, help="vocabulary V (default 50257)")
    m.add_argument("--block-size", type=int, help="max sequence length maxT (default 1024)")
    m.add_argument("--hf-dir", help="load weights and shape from a local HF GPT-2 directory")
    m.add_argument("--seed", type=int, default=42, help="seed of init, random batch, shards (42)")
    m.add_argument("--random-biases", action="store_true",
                   help="biases ~N(0,0.02), LN weights 1+N(0,0.1), LN biases ~N(0,0.02)")
    m.add_argument("--flash", action="store_true",
                   help="attention via F.scaled_dot_product_attention when this torch has it")
    m.add_argument("--sdpa-backend", choices=["auto"] + sorted(SDPA_BACKENDS), default="auto",
                   help="SDPA backend in training (torch.nn.attention.sdpa_kernel); anything but "
                   "auto implies --flash (auto: PyTorch's own choice)")
    m.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    w = p.add_argument_group("files")
    w.add_argument("--write-model", metavar="PATH", help="write the model file")
    w.add_argument("--model-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="model file params: float32 (version 3) or bfloat16 (version 5)")
    w.add_argument("--write-state", metavar="PATH", help="write the debug state for one batch")
    w.add_argument("--dump-steps", type=int, default=10, help="losses in the trailer (10)")
    w.add_argument("--state-dtype", choices=["float64", "float32"], default="float64",
                   help="precision of the debug state's reference run (float64)")
    w.add_argument("--tf32-baseline", choices=["auto", "emulate", "measure", "none"],
                   default="auto",
                   help="PyTorch's TF32 error in the state's trailer: measured with allow_tf32 "
                   "(GPU), emulated by rounding every product's inputs to TF32 (CPU), or none "
                   "(auto: measured on a GPU, emulated on the CPU)")
    w.add_argument("--write-tokenizer", metavar="PATH", help="write the tokenizer file")
    w.add_argument("--encoder-dir", help="dir with encoder.json + vocab.bpe (or HF names)")
    w.add_argument("--tokenize", metavar="FILE", help="BPE-encode a UTF-8 text file to shards")
    w.add_argument("--out-dir", help="where --tokenize writes its shards")
    w.add_argument("--doc-sep", help="split the text into documents at this string")
    w.add_argument("--val-fraction", type=float, default=0.1, help="val share of tokens (0.1)")
    w.add_argument("--prefix", help="shard name prefix (file name / 'random')")
    w.add_argument("--greedy-from", metavar="MODEL",
                   help="greedy (argmax) continuation of --prompt-ids with a model file, in "
                        "fp32; prints 'ids: ...' (scripts/test/test_generate.sh)")
    w.add_argument("--prompt-ids", help="comma-separated token ids of --greedy-from's prompt")
    w.add_argument("--max-tokens", type=int, default=16, help="tokens --greedy-from adds (16)")
    w.add_argument("--random-shards", metavar="DIR", help="write shards of random token ids")
    w.add_argument("--num-tokens", type=int, help="train tokens of --random-shards")
    t = p.add_argument_group("training (also the AdamW of the debug state)")
    t.add_argument("-i", "--input", metavar="GLOB", help="train shards (also the state's batch)")
    t.add_argument("-j", "--val-input", metavar="GLOB", help="val shards")
    t.add_argument("-b", "--batch-size", type=int, default=4, help="micro-batch B (4)")
    t.add_argument("-t", "--seq-len", type=int, default=64, help="sequence length T (64)")
    t.add_argument("-d", "--total-batch", type=int, help="tokens per step (default B*T)")
    t.add_argument("-x", "--steps", type=int, help="optimizer steps (20; 0 when writing files)")
    t.add_argument("-l", "--lr", type=float, default=1e-4, help="peak learning rate (1e-4)")
    t.add_argument("-u", "--warmup", type=int, default=0, help="linear warmup steps (0)")
    t.add_argument("-c", "--weight-decay", type=float, default=0.01, help="2-D weights (0.01)")
    t.add_argument("-g", "--grad-clip", type=float, default=1.0, help="norm clip, 0 = off (1.0)")
    t.add_argument("--beta1", type=float, default=0.9)
    t.add_argument("--beta2", type=float, default=0.95)
    t.add_argument("--eps", type=float, default=1e-8)
    t.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="training compute: bfloat16 = torch.autocast (the state is always fp32)")
    t.add_argument("--tf32", action="store_true", help="TF32 matmuls in training")
    t.add_argument("--compile", action="store_true", help="torch.compile the model (torch 2)")
    t.add_argument("--compile-mode", choices=COMPILE_MODES,
                   help="torch.compile's mode (implies --compile): reduce-overhead and "
                   "max-autotune replay the step's kernels as CUDA graphs")
    t.add_argument("--fused-adamw", action="store_true", help="AdamW(fused=True) if available")
    t.add_argument("--val-every", type=int, default=0, help="validate every N steps (0 = end)")
    t.add_argument("--val-batches", type=int, default=20, help="batches per validation (20)")
    t.add_argument("--warmup-skip", type=int, default=5, help="steps left out of the timing (5)")
    t.add_argument("--json-summary", metavar="PATH", help="write the benchmark summary as JSON")
    return p, p.parse_args(argv)


def resolve_config(args):
    if args.hf_dir:
        return None  # the checkpoint's config.json decides
    base = dict(zip(("n_layer", "n_head", "n_embd"), PRESETS[args.preset or "d12"]))
    base.update(vocab_size=50257, block_size=1024)
    for k in base:
        if getattr(args, k) is not None:
            base[k] = getattr(args, k)
    return base


def check_config(cfg):
    for k, v in cfg.items():
        if k != "name" and (not isinstance(v, int) or v <= 0):
            fail(f"--{k.replace('_', '-')} must be a positive integer, got {v}")
    if cfg["n_embd"] % cfg["n_head"]:
        fail(f"--n-embd {cfg['n_embd']} must be a multiple of --n-head {cfg['n_head']}")


def check_batch(args, cfg, training, world=1):
    B, T = args.batch_size, args.seq_len
    if B <= 0 or T <= 0:
        fail(f"-b and -t must be positive, got B={B}, T={T}")
    if T > cfg["block_size"]:
        fail(f"-t {T} is longer than the block size {cfg['block_size']}; use -t <= block size")
    if args.dump_steps < 1:
        fail(f"--dump-steps must be at least 1, got {args.dump_steps}")
    if args.total_batch is None:
        args.total_batch = B * T * world
    if args.total_batch <= 0 or args.total_batch % (B * T * world):
        what = "B*T" if world == 1 else f"B*T x {world} ranks"
        fail(f"--total-batch {args.total_batch} must be a positive multiple of {what} = "
             f"{B * T * world}")
    if training and (args.steps < 1 or args.val_batches < 1 or args.val_every < 0
                     or args.warmup < 0 or args.warmup_skip < 0):
        fail("--steps and --val-batches must be >= 1; --val-every, --warmup, --warmup-skip >= 0")
    if args.lr < 0 or args.weight_decay < 0 or args.grad_clip < 0 or args.eps <= 0 or not (
            0 <= args.beta1 < 1 and 0 <= args.beta2 < 1):
        fail("AdamW needs lr, weight decay, grad clip >= 0, eps > 0 and betas in [0, 1)")


def main(argv):
    parser, args = parse_args(argv)
    require("numpy")
    dist = Dist(os.environ)
    if dist.on:
        if args.greedy_from or args.tokenize or args.write_tokenizer or args.random_shards or \
                args.write_state:
            fail("under torchrun only training (and --write-model) runs; run the other modes "
                 "as one plain process")
        if not args.input:
            fail("under torchrun give -i GLOB: several processes are for training")
        for k, v in NO_MULTICAST_ENV.items():  # before torch and NCCL start
            os.environ.setdefault(k, v)
        if dist.rank > 0:  # rank 0 alone prints the step lines and writes files
            sys.stdout = open(os.devnull, "w")
    try:
        run_modes(parser, args, dist)
    finally:
        dist.stop()


def run_modes(parser, args, dist):
    if args.compile_mode:
        args.compile = True
    if args.greedy_from:
        if not args.prompt_ids or args.max_tokens < 1:
            fail("--greedy-from needs --prompt-ids IDS and --max-tokens >= 1")
        greedy_decode(args)
        return
    util = args.tokenize or args.write_tokenizer or args.random_shards
    writes = args.write_model or args.write_state
    if not (util or writes or args.input):
        parser.print_usage(sys.stderr)
        fail("nothing to do: give a mode; --help lists them with examples")
    if args.write_tokenizer:
        write_tokenizer(args.write_tokenizer, args.encoder_dir)
    if args.tokenize:
        tokenize_file(args)
    if args.random_shards:
        cfg = resolve_config(args) or {"vocab_size": 50257}
        random_shards(args, cfg["vocab_size"])
    if not (writes or args.input):
        return
    if args.steps is None:
        args.steps = 0 if writes else 20
    if args.steps < 0:
        fail(f"--steps must be >= 0, got {args.steps}")
    if args.write_state:  # cuBLAS needs this before its first call to be deterministic
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch = require("torch", "every mode but the shard and tokenizer writers")
    dev_name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", dev_name):
        fail(f"--device must be cpu, cuda or cuda:N, got '{dev_name}'")
    if dist.on and dev_name.startswith("cuda"):
        if dev_name != "cuda":
            fail(f"under torchrun each rank takes cuda:LOCAL_RANK; give --device cuda, not "
                 f"{dev_name}")
        dev_name = f"cuda:{dist.local_rank}"
    device = torch.device(dev_name)
    if device.type == "cuda" and not torch.cuda.is_available():
        fail("--device cuda was asked for, but this torch sees no CUDA device")
    if dist.on:
        if device.type == "cuda":
            if dist.local_rank >= torch.cuda.device_count():
                fail(f"LOCAL_RANK {dist.local_rank} has no GPU: this machine has "
                     f"{torch.cuda.device_count()}; use --nproc_per_node <= that")
            torch.cuda.set_device(device)
        dist.start(device)
    state = None
    if args.hf_dir:
        if not os.path.isdir(args.hf_dir):
            fail(f"--hf-dir {args.hf_dir} is not a directory")
        cfg, state = load_hf(args.hf_dir)
    else:
        cfg = resolve_config(args)
    check_config(cfg)
    cfg["name"] = args.preset if args.preset and not args.hf_dir else (
        "hf" if args.hf_dir else "L{n_layer}-NH{n_head}-C{n_embd}-V{vocab_size}".format(**cfg))
    check_batch(args, cfg, training=args.input is not None and args.steps > 0, world=dist.world)
    for path in (args.input, args.val_input):
        if path and not glob.glob(path):
            fail(f"no file matches the shard pattern '{path}'")
    if args.sdpa_backend != "auto":
        if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            fail(f"--sdpa-backend {args.sdpa_backend} needs F.scaled_dot_product_attention "
                 f"(torch 2); this is torch {torch.__version__}: use --sdpa-backend auto")
        args.flash = True
    model = build_model_classes()(cfg, args.flash)
    if args.flash and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        print("note: this torch has no scaled_dot_product_attention; --flash uses masked softmax")
    init_weights(model, args.seed, args.random_biases)
    if state is not None:
        model.load_state_dict(state)
    model.to(device)
    print(f"model {cfg['name']}: {sum(p.numel() for p in model.parameters())} parameters "
          f"on {device}")
    if args.write_model and dist.rank == 0:
        write_model(args.write_model, model, args.model_dtype)
    if args.write_state:
        B, T = args.batch_size, args.seq_len
        if args.input:
            x, y = ShardLoader(args.input, B, T, cfg["vocab_size"]).next_batch()
        else:
            toks = np.random.RandomState(args.seed).randint(0, cfg["vocab_size"], B * T + 1)
            x, y = toks[:-1].reshape(B, T), toks[1:].reshape(B, T)
        x, y = (torch.from_numpy(a.astype(np.int64)).to(device) for a in (x, y))
        write_state(args.write_state, model, x, y, args)  # on copies: model stays as it was
    if args.input and args.steps > 0:
        train(args, model, cfg, device, dist)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
