#!/usr/bin/env python3
"""test_export_hf.py: scripts/hf/export_hf.py, checked on the CPU without transformers.

For an awkward small model (L=2, NH=4, C=128, V=1000 so wte has 24 padding rows, maxT=96, random
biases and LayerNorm weights), written by scripts/ref/train_gpt2.py --write-model as fp32 and as bf16:
  1. export_hf.py MODEL OUT writes OUT/config.json and OUT/model.safetensors;
  2. model.safetensors is checked against the format by an independent strict reader (header
     length, 8-byte alignment, F32 tensors back to back from offset 0 to the end of the file,
     GPT2LMHeadModel's names and Conv1D shapes, wte unpadded) and config.json's GPT2Config fields;
  3. OUT is loaded back through train_gpt2.py's --hf-dir loader (load_hf) and MODEL through
     check_hf_logits.py's reference loader, and the logits of a seeded random batch (B=3, T=77)
     are compared: max abs diff printed; the bound is 1e-6 (both sides hold the same fp32
     weights bit for bit -- the two transposes are exact -- and run the same module on the
     same device, so any difference at all means a weight moved);
  4. a truncated model file and a wrong magic get one line on stderr naming the file, exit 1;
  5. the export is atomic: a failed export (a bad model file, or a write that fails halfway,
     injected by replacing write_safetensors in-process) leaves an earlier export in OUT byte
     for byte and no temporary folder beside it; a good export replaces it whole; a folder
     holding other files is refused and left alone.
Usage: test_export_hf.py [WORK_DIR] (default build/testdata/export_hf). Exit 0 when all pass.
"""
import json
import os
import struct
import subprocess
import sys

if sys.argv[1:2] in (["-h"], ["--help"]):
    print(__doc__)
    sys.exit(0)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "scripts", room) for room in ("deps", "hf", "ref")]
from pydeps import require  # noqa: E402 (after the path)

np = require("numpy")
require("torch")
import check_hf_logits  # noqa: E402
import train_gpt2  # noqa: E402

L, NH, C, V, MAXT = 2, 4, 128, 1000, 96
from pycheck import check, failures  # noqa: E402


def strict_safetensors(path):
    """{name: (dtype, shape, bytes)} after checking the layout; raises on any violation."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    assert 8 + n <= len(data), "header runs past the file"
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    meta = header.pop("__metadata__", None)
    assert meta is not None and meta.get("format") == "pt", "no __metadata__ format pt"
    spans, out = [], {}
    for name, m in header.items():
        assert set(m) == {"dtype", "shape", "data_offsets"}, f"{name}: keys {set(m)}"
        assert m["dtype"] == "F32", f"{name}: dtype {m['dtype']}"
        begin, end = m["data_offsets"]
        assert end - begin == 4 * int(np.prod(m["shape"])), f"{name}: size vs shape"
        spans.append((begin, end))
        out[name] = (m["dtype"], tuple(m["shape"]), body[begin:end])
    spans.sort()
    at = 0
    for begin, end in spans:  # back to back, no gap, no overlap, up to the end of the file
        assert begin == at, f"tensor data at {begin}, expected {at}"
        at = end
    assert at == len(body), f"tensors end at {at}, the file's data at {len(body)}"
    return out


def expected_shapes():
    shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (MAXT, C),
              "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    per_layer = {"ln_1.weight": (C,), "ln_1.bias": (C,), "attn.c_attn.weight": (C, 3 * C),
                 "attn.c_attn.bias": (3 * C,), "attn.c_proj.weight": (C, C),
                 "attn.c_proj.bias": (C,), "ln_2.weight": (C,), "ln_2.bias": (C,),
                 "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,),
                 "mlp.c_proj.weight": (4 * C, C), "mlp.c_proj.bias": (C,)}
    for i in range(L):
        shapes.update({f"transformer.h.{i}.{k}": s for k, s in per_layer.items()})
    return shapes


def run_export(model, out):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "hf", "export_hf.py"), model,
                           out], capture_output=True, text=True)


def check_one(work, dtype):
    import torch
    model_path = os.path.join(work, f"model_{dtype}.bin")
    out_dir = os.path.join(work, f"hf_{dtype}")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ref", "train_gpt2.py"),
                    "--n-layer", str(L), "--n-head", str(NH), "--n-embd", str(C),
                    "--vocab-size", str(V), "--block-size", str(MAXT), "--random-biases",
                    "--seed", "77", "--device", "cpu", "--write-model", model_path,
                    "--model-dtype", dtype], check=True, capture_output=True)
    r = run_export(model_path, out_dir)
    if not check(r.returncode == 0, f"[{dtype}] export_hf.py exits 0 ({r.stderr.strip()})"):
        return
    try:
        tensors = strict_safetensors(os.path.join(out_dir, "model.safetensors"))
        check(True, f"[{dtype}] model.safetensors follows the format ({len(tensors)} tensors)")
    except (AssertionError, ValueError) as e:
        check(False, f"[{dtype}] model.safetensors follows the format: {e}")
        return
    got = {k: v[1] for k, v in tensors.items()}
    check(got == expected_shapes(), f"[{dtype}] GPT2LMHeadModel names and Conv1D (in, out) "
          "shapes, wte unpadded, no lm_head")
    cfg = json.load(open(os.path.join(out_dir, "config.json")))
    want = {"model_type": "gpt2", "n_layer": L, "n_head": NH, "n_embd": C, "vocab_size": V,
            "n_positions": MAXT, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": True}
    check(all(cfg.get(k) == v for k, v in want.items()),
          f"[{dtype}] config.json: {', '.join(f'{k}={cfg.get(k)}' for k in want)}")

    ref_cfg, ref = check_hf_logits.load_reference(model_path)
    hf_cfg, state = train_gpt2.load_hf(out_dir)
    back = train_gpt2.build_model_classes()(hf_cfg, False)
    back.load_state_dict(state)
    back.eval()
    check(hf_cfg == {k: ref_cfg[k] for k in hf_cfg}, f"[{dtype}] --hf-dir reads the same shape")
    x, y = check_hf_logits.random_batch(ref_cfg, 3, 77, seed=5)
    with torch.no_grad():
        ref_logits, ref_loss = ref(x, y)
        back_logits, back_loss = back(x, y)
    diff = (ref_logits - back_logits).abs().max().item()
    check(diff <= 1e-6, f"[{dtype}] logits through export + --hf-dir vs the model file: max abs "
          f"diff {diff:.3e} (bound 1e-6; max |logit| {ref_logits.abs().max().item():.3f}), "
          f"loss {back_loss.item():.6f} vs {ref_loss.item():.6f}")
    if dtype == "float32":  # and against the model as train_gpt2.py built it, not via a reader
        built = train_gpt2.build_model_classes()(
            dict(n_layer=L, n_head=NH, n_embd=C, vocab_size=V, block_size=MAXT), False)
        train_gpt2.init_weights(built, 77, True)
        with torch.no_grad():
            built_logits, _ = built.eval()(x, y)
        diff = (built_logits - back_logits).abs().max().item()
        check(diff <= 1e-6, f"[{dtype}] logits through export + --hf-dir vs the model "
              f"train_gpt2.py built (seed 77): max abs diff {diff:.3e} (bound 1e-6, as above)")
    # The padding rows must be gone, not shifted in: the first V rows are wte itself.
    _, tensors_in_file = check_hf_logits.export_hf.read_model_file(model_path)
    wte = np.frombuffer(tensors["transformer.wte.weight"][2], dtype="<f4").reshape(V, C)
    check(np.array_equal(wte, tensors_in_file["wte"][:V]),
          f"[{dtype}] wte = the file's first V rows")


def check_errors(work):
    good = os.path.join(work, "model_float32.bin")
    data = open(good, "rb").read()
    for name, content in (("truncated.bin", data[:-4]), ("badmagic.bin", b"\0" * 4 + data[4:])):
        path = os.path.join(work, name)
        open(path, "wb").write(content)
        r = run_export(path, os.path.join(work, "hf_bad"))
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and path in lines[0],
              f"{name}: exit {r.returncode}, one line naming the file: {r.stderr.strip()}")


def folder_bytes(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)}


def leftovers(work, out):
    """Temporary folders of export_hf.py beside out (hidden, named after it)."""
    return [n for n in os.listdir(work) if n.startswith(f".{os.path.basename(out)}.")]


def check_atomic(work):
    import errno
    import shutil
    export_hf = check_hf_logits.export_hf
    fp32, bf16 = (os.path.join(work, f"model_{d}.bin") for d in ("float32", "bfloat16"))
    out = os.path.join(work, "hf_atomic")
    shutil.rmtree(out, ignore_errors=True)
    r = run_export(fp32, out)
    before = folder_bytes(out)
    check(r.returncode == 0 and sorted(before) == ["config.json", "model.safetensors"],
          f"atomic: a first export writes {sorted(before)}")

    r = run_export(os.path.join(work, "truncated.bin"), out)
    check(r.returncode == 1 and folder_bytes(out) == before and not leftovers(work, out),
          "atomic: a bad model file leaves the earlier export byte for byte, no temporary folder")

    real = export_hf.write_safetensors

    def fail_halfway(path, tensors, metadata):
        with open(path, "wb") as f:
            f.write(b"\0" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")
    export_hf.write_safetensors = fail_halfway
    try:
        export_hf.export(bf16, out)
        raised = None
    except export_hf.ExportError as e:
        raised = str(e)
    finally:
        export_hf.write_safetensors = real
    check(raised is not None and "No space left" in raised and folder_bytes(out) == before
          and not leftovers(work, out),
          f"atomic: a write failing halfway raises ({raised}) and leaves the earlier export "
          "byte for byte, no temporary folder")

    r = run_export(bf16, out)
    check(r.returncode == 0 and folder_bytes(out) == folder_bytes(os.path.join(work, "hf_bfloat16"))
          and folder_bytes(out) != before and not leftovers(work, out),
          "atomic: a good export replaces the earlier one whole (= a fresh export of the same "
          "file), no temporary folder")
    umask = os.umask(0)
    os.umask(umask)
    mode = os.stat(out).st_mode & 0o777
    check(mode == 0o777 & ~umask, f"atomic: the export folder's mode is {oct(mode)}, what "
          f"mkdir gives under umask {oct(umask)} (not mkdtemp's 0700)")

    mixed = os.path.join(work, "hf_mixed")
    shutil.rmtree(mixed, ignore_errors=True)
    os.makedirs(mixed)
    open(os.path.join(mixed, "notes.txt"), "w").write("mine\n")
    r = run_export(fp32, mixed)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(lines) == 1 and "notes.txt" in lines[0]
          and folder_bytes(mixed) == {"notes.txt": b"mine\n"} and not leftovers(work, mixed),
          f"atomic: a folder holding other files is refused and left alone: {r.stderr.strip()}")


def main():
    work = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "testdata",
                                                                 "export_hf")
    os.makedirs(work, exist_ok=True)
    for dtype in ("float32", "bfloat16"):
        check_one(work, dtype)
    check_errors(work)
    check_atomic(work)
    print(f"test_export_hf: {'all passed' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
