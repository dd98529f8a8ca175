#!/usr/bin/env python3
"""export_hf.py MODEL_FILE OUT_DIR: a model file of this project -> a Hugging Face GPT-2 directory.

OUT_DIR gets config.json (a GPT2Config: GPT-2's architecture with gelu_new, the tanh GELU we
train with, LayerNorm eps 1e-5, no dropout, the LM head tied to wte) and model.safetensors (fp32),
which transformers' GPT2LMHeadModel.from_pretrained(OUT_DIR) loads, and so does
scripts/ref/train_gpt2.py --hf-dir OUT_DIR. Only numpy is needed: safetensors is written by hand
(u64 little-endian header length, a JSON header of dtype / shape / data_offsets per tensor,
padded with spaces to 8 bytes, then the raw little-endian tensors back to back).

What changes on the way: HF's GPT-2 uses Conv1D layers whose weights are (in, out), so c_attn,
c_proj and c_fc weights are our (out, in) matrices transposed; wte loses the padding rows past
the vocabulary (Vp -> V); bf16 model files (version 5) are widened to fp32 exactly. The tensor
names are GPT2LMHeadModel's ("transformer.h.0.attn.c_attn.weight", ...); lm_head.weight is
left out because it is wte (tie_word_embeddings).

The export is atomic: both files are written into a temporary folder beside OUT_DIR, which
then takes OUT_DIR's place, so a failed export leaves an earlier export in OUT_DIR untouched and
no half-written folder. OUT_DIR may be new, empty or an earlier export (config.json and
model.safetensors only); a folder holding other files is refused rather than replaced.

A bad model file (missing, wrong magic or version, a size that does not match its header), an
OUT_DIR that cannot be written or a missing numpy get one sentence and exit code 1; a usage
error exit code 2. scripts/hf/check_hf_logits.py compares the export's logits, through
transformers, with the PyTorch reference; dev/test/test_export_hf.py is the CPU test.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

# The rooms of scripts/ this module imports from.
SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(SCRIPTS, room) for room in ("deps",)]
from pydeps import optional, require  # noqa: E402 (after the path)

np = optional("numpy")  # main() requires it after parsing, so --help runs without it

MODEL_MAGIC = 20240326
HEADER_INTS = 256
# The 16 tensors of a model file, in order (llmc/model_file.h), with their shapes.
FILE_TENSORS = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


class ExportError(Exception):
    pass


def tensor_shapes(maxT, V, Vp, L, C):
    del V  # the file holds Vp rows of wte
    return {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
            "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C),
            "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C),
            "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,),
            "lnfb": (C,)}


def read_model_file(path):
    """(config dict, {name: float32 array}) of a model file; ExportError on a bad one."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ExportError(f"cannot read the model file {path}: {e.strerror}")
    if len(data) < HEADER_INTS * 4:
        raise ExportError(f"the model file {path} is {len(data)} bytes, too short for its "
                          f"{HEADER_INTS * 4}-byte header")
    h = np.frombuffer(data, dtype="<i4", count=HEADER_INTS)
    if h[0] != MODEL_MAGIC:
        raise ExportError(f"{path} has magic {h[0]}, not {MODEL_MAGIC}; it is not a model file")
    version = int(h[1])
    if version not in (3, 5):
        raise ExportError(f"the model file {path} has version {version}; only 3 (fp32) and 5 "
                          "(bf16) are supported")
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    if min(maxT, V, L, NH, C, Vp) < 1 or V > Vp or C % NH:
        raise ExportError(f"the model file {path} has a bad header: maxT={maxT}, V={V}, L={L}, "
                          f"NH={NH}, C={C}, Vp={Vp}")
    shapes = tensor_shapes(maxT, V, Vp, L, C)
    count = sum(int(np.prod(s)) for s in shapes.values())
    elem = 4 if version == 3 else 2
    if len(data) != HEADER_INTS * 4 + count * elem:
        raise ExportError(f"the model file {path} is {len(data)} bytes but its header needs "
                          f"{HEADER_INTS * 4 + count * elem}; it is truncated or corrupt")
    if version == 3:
        flat = np.frombuffer(data, dtype="<f4", offset=HEADER_INTS * 4)
    else:  # bf16 bits are the high half of a float32
        bits = np.frombuffer(data, dtype="<u2", offset=HEADER_INTS * 4)
        flat = (bits.astype(np.uint32) << 16).view(np.float32)
    tensors, at = {}, 0
    for name in FILE_TENSORS:
        n = int(np.prod(shapes[name]))
        tensors[name] = flat[at:at + n].reshape(shapes[name]).astype(np.float32)
        at += n
    cfg = dict(block_size=maxT, vocab_size=V, padded_vocab_size=Vp, n_layer=L, n_head=NH,
               n_embd=C, version=version)
    return cfg, tensors


def hf_tensors(cfg, t):
    """GPT2LMHeadModel's state dict (without the tied lm_head) as {name: float32 array}."""
    V = cfg["vocab_size"]
    out = {"transformer.wte.weight": t["wte"][:V], "transformer.wpe.weight": t["wpe"]}
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        out.update({
            p + "ln_1.weight": t["ln1w"][i], p + "ln_1.bias": t["ln1b"][i],
            p + "attn.c_attn.weight": t["qkvw"][i].T, p + "attn.c_attn.bias": t["qkvb"][i],
            p + "attn.c_proj.weight": t["attprojw"][i].T, p + "attn.c_proj.bias": t["attprojb"][i],
            p + "ln_2.weight": t["ln2w"][i], p + "ln_2.bias": t["ln2b"][i],
            p + "mlp.c_fc.weight": t["fcw"][i].T, p + "mlp.c_fc.bias": t["fcb"][i],
            p + "mlp.c_proj.weight": t["fcprojw"][i].T, p + "mlp.c_proj.bias": t["fcprojb"][i],
        })
    out["transformer.ln_f.weight"] = t["lnfw"]
    out["transformer.ln_f.bias"] = t["lnfb"]
    return {k: np.ascontiguousarray(v, dtype="<f4") for k, v in out.items()}


def write_safetensors(path, tensors, metadata):
    header, offset = {"__metadata__": metadata}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the tensors start 8-byte aligned, as the library writes
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for a in tensors.values():
            f.write(a.tobytes())
        f.flush()
        os.fsync(f.fileno())


def hf_config(cfg):
    V = cfg["vocab_size"]
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": V, "n_positions": cfg["block_size"], "n_ctx": cfg["block_size"],
        "n_embd": cfg["n_embd"], "n_layer": cfg["n_layer"], "n_head": cfg["n_head"],
        "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "initializer_range": 0.02,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False, "use_cache": True, "tie_word_embeddings": True,
        "bos_token_id": V - 1, "eos_token_id": V - 1,  # <|endoftext|>, the last id in GPT-2
        "torch_dtype": "float32",
    }


EXPORT_FILES = ("config.json", "model.safetensors")


def check_out_dir(out_dir):
    """ExportError unless out_dir is absent, empty or holds only an earlier export."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ExportError(f"the output {out_dir} exists and is not a directory")
    if os.path.isdir(out_dir):
        others = sorted(set(os.listdir(out_dir)) - set(EXPORT_FILES))
        if others:
            names = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise ExportError(f"{out_dir} holds files that are not an export ({names}); give a "
                              "new or empty folder")
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        raise ExportError(f"cannot write {out_dir}: the folder {parent} does not exist")


def write_export(folder, cfg, tensors):
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf_config(cfg), f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(folder, "model.safetensors"), hf_tensors(cfg, tensors),
                      {"format": "pt"})


def replace_dir(new, out_dir):
    """Puts the finished folder `new` at out_dir; an earlier out_dir is moved aside first and
    removed only after the swap, and restored if the swap fails."""
    old = None
    if os.path.isdir(out_dir):
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out_dir))}.old.",
                               dir=os.path.dirname(os.path.abspath(out_dir)))
        os.rename(out_dir, os.path.join(old, "export"))
    try:
        os.rename(new, out_dir)
    except OSError:
        if old:
            os.rename(os.path.join(old, "export"), out_dir)
        raise
    finally:
        if old:
            shutil.rmtree(old, ignore_errors=True)


def export(model_path, out_dir):
    cfg, tensors = read_model_file(model_path)
    check_out_dir(out_dir)
    new = None
    try:
        new = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out_dir))}.new.",
                               dir=os.path.dirname(os.path.abspath(out_dir)))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(new, 0o777 & ~umask)  # mkdtemp makes it 0700; an export is an ordinary folder
        write_export(new, cfg, tensors)
        replace_dir(new, out_dir)
        new = None
    except OSError as e:
        raise ExportError(f"cannot write the export into {out_dir}: {e.strerror or e}")
    finally:
        if new:
            shutil.rmtree(new, ignore_errors=True)
    return cfg


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_file", help="a model file of this project (version 3 fp32 or 5 bf16)")
    p.add_argument("out_dir", help="the Hugging Face folder to write (new, empty or an earlier "
                   "export)")
    args = p.parse_args(argv)
    global np
    np = require("numpy")
    try:
        cfg = export(args.model_file, args.out_dir)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out_dir}: config.json and model.safetensors (L={cfg['n_layer']}, "
          f"NH={cfg['n_head']}, C={cfg['n_embd']}, V={cfg['vocab_size']}, "
          f"maxT={cfg['block_size']}, fp32 from model file version {cfg['version']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
