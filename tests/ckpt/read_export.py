#!/usr/bin/env python3
"""Reads a `dynatrain export --hf` file back with nothing but json/struct/numpy and compares it,
bit for bit, with the checkpoint it came from.

The checkpoint's rank files are safetensors too; their entries are named
"<kind>/<tensor>/<lo>-<hi>" (the VPS box). This script assembles the full VPS param tensors from
those boxes itself, splits them into Hugging Face tensors itself (fused QKV -> q/k/v, SwiGLU
fc1 -> gate/up, experts one by one) and compares every exported tensor with them.

With --bf16-of-master (a `train --bf16` checkpoint) every exported tensor must also be BF16 and
equal, bit for bit, to the checkpoint's fp32 master rounded to bf16 (nearest, ties to even),
rounded here by numpy.

Usage: read_export.py EXPORT_DIR CHECKPOINT_DIR [--bf16-of-master]   (exit 0 when every tensor matches)
"""
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "BF16": np.uint16, "F16": np.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        # Compare bit patterns: float32 as uint32 (NaN-safe).
        arr = np.frombuffer(data[b:end], dtype=np.uint32 if e["dtype"] == "F32" else DTYPES[e["dtype"]])
        out[name] = arr.reshape(e["shape"])
    return out


def assemble_params(ckpt_dir, wanted="param"):
    latest = open(os.path.join(ckpt_dir, "latest")).read().strip()
    step_dir = os.path.join(ckpt_dir, latest)
    index = json.load(open(os.path.join(step_dir, "index.json")))
    shapes = {name: shape for name, shape in index["tensors"]}
    full = {name: None for name in shapes}
    for f in index["files"]:
        for key, arr in read_safetensors(os.path.join(step_dir, f["name"])).items():
            kind, tensor, box = key.split("/")
            if kind != wanted:
                continue
            lo, hi = ([int(x) for x in part.split(",")] for part in box.split("-"))
            if full[tensor] is None:
                full[tensor] = np.zeros(shapes[tensor], dtype=arr.dtype)
            full[tensor][tuple(slice(a, b) for a, b in zip(lo, hi))] = arr
    missing = [t for t, v in full.items() if v is None]
    if missing:
        sys.exit(f"checkpoint holds no {wanted} for {missing[:3]}")
    return index, full


def hf_expected(index, full):
    moe = "block_sparse_moe" if index["family"] == "mixtral" else "mlp"
    gate, up, down = ("w1", "w3", "w2") if index["family"] == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    out = {}
    for name, t in full.items():
        if name == "embedding.word.weight":
            out["model.embed_tokens.weight"] = t
        elif name == "final_norm.weight":
            out["model.norm.weight"] = t
        elif name == "output.weight":
            out["lm_head.weight"] = t
        else:
            _, layer, rest = name.split(".", 2)
            p = f"model.layers.{layer}."
            if rest == "input_norm.weight":
                out[p + "input_layernorm.weight"] = t
            elif rest == "post_attn_norm.weight":
                out[p + "post_attention_layernorm.weight"] = t
            elif rest in ("attn.qkv.weight", "attn.qkv.bias"):
                kind = rest.split(".")[-1]
                g, q2 = t.shape[0], t.shape[1]
                q = q2 - 2
                tail = t.shape[3:]
                out[p + f"self_attn.q_proj.{kind}"] = t[:, :q].reshape((-1,) + tail)
                out[p + f"self_attn.k_proj.{kind}"] = t[:, q].reshape((-1,) + tail)
                out[p + f"self_attn.v_proj.{kind}"] = t[:, q + 1].reshape((-1,) + tail)
            elif rest in ("attn.q_norm.weight", "attn.k_norm.weight"):
                out[p + "self_attn." + rest.split(".")[1] + ".weight"] = t
            elif rest == "attn.proj.weight":
                out[p + "self_attn.o_proj.weight"] = t
            elif rest == "mlp.fc1.weight":
                out[p + "mlp.gate_proj.weight"] = t[0]
                out[p + "mlp.up_proj.weight"] = t[1]
            elif rest == "mlp.fc2.weight":
                out[p + "mlp.down_proj.weight"] = t
            elif rest == "mlp.router.weight":
                out[p + f"{moe}.gate.weight"] = t
            elif rest == "mlp.experts.fc1.weight":
                for e in range(t.shape[0]):
                    out[p + f"{moe}.experts.{e}.{gate}.weight"] = t[e, 0]
                    out[p + f"{moe}.experts.{e}.{up}.weight"] = t[e, 1]
            elif rest == "mlp.experts.fc2.weight":
                for e in range(t.shape[0]):
                    out[p + f"{moe}.experts.{e}.{down}.weight"] = t[e]
            else:
                sys.exit(f"no Hugging Face name known here for {name}")
    return out


def bf16_bits(f32):
    """float32 -> bf16 bit patterns (uint16), round to nearest, ties to even (no NaNs here)."""
    u = f32.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def exported_dtypes(export_dir):
    with open(os.path.join(export_dir, "model.safetensors"), "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {name: e["dtype"] for name, e in header.items() if name != "__metadata__"}


def main():
    export_dir, ckpt_dir = sys.argv[1], sys.argv[2]
    of_master = "--bf16-of-master" in sys.argv[3:]
    exported = read_safetensors(os.path.join(export_dir, "model.safetensors"))
    index, full = assemble_params(ckpt_dir)
    expected = hf_expected(index, full)
    if of_master:
        not_bf16 = [n for n, d in exported_dtypes(export_dir).items() if d != "BF16"]
        if not_bf16:
            sys.exit(f"exported tensors not BF16: {not_bf16[:3]}")
        _, master = assemble_params(ckpt_dir, "master")
        rounded = hf_expected(index, {name: bf16_bits(t) for name, t in master.items()})
        for name, want in rounded.items():
            if not np.array_equal(exported[name], want):
                sys.exit(f"{name}: exported bf16 differs from the checkpoint's master rounded to bf16")
    if sorted(exported) != sorted(expected):
        sys.exit(f"tensor names differ: only exported {sorted(set(exported) - set(expected))[:5]}, "
                 f"only expected {sorted(set(expected) - set(exported))[:5]}")
    for name, want in expected.items():
        got = exported[name]
        if got.shape != want.shape or not np.array_equal(got, want):
            sys.exit(f"{name}: exported {got.shape} differs from the checkpoint's {want.shape}")
    nonzero = sum(int(np.count_nonzero(v)) for v in exported.values())
    if nonzero == 0:
        sys.exit("every exported value is zero")
    print(f"export read back: {len(exported)} tensors equal to the checkpoint, bit for bit"
          + (" (BF16, = the fp32 master rounded to bf16)" if of_master else ""))


if __name__ == "__main__":
    main()
