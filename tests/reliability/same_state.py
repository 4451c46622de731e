#!/usr/bin/env python3
"""Compares two checkpoints (step directories, any layouts) bit for bit: for every state kind
both hold, every tensor is assembled from the rank files' entries ("<kind>/<tensor>/<lo>-<hi>",
the VPS box) and compared element by element as raw bits. Every element must be covered.

Usage: same_state.py STEP_DIR_A STEP_DIR_B    (exit 0 when every tensor of every kind is equal)
"""
import json
import os
import struct
import sys

import numpy as np

BITS = {"F32": np.uint32, "BF16": np.uint16, "F16": np.uint16, "F64": np.uint64}


def assemble(step_dir):
    index = json.load(open(os.path.join(step_dir, "index.json")))
    shapes = {name: shape for name, shape in index["tensors"]}
    full, covered = {}, {}
    for f in index["files"]:
        blob = open(os.path.join(step_dir, f["name"]), "rb").read()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        data = blob[8 + n:]
        for key, e in header.items():
            if key == "__metadata__":
                continue
            kind, tensor, box = key.split("/")
            lo, hi = ([int(x) for x in part.split(",")] for part in box.split("-"))
            b, end = e["data_offsets"]
            arr = np.frombuffer(data[b:end], dtype=BITS[e["dtype"]]).reshape(e["shape"])
            k = (kind, tensor)
            if k not in full:
                full[k] = np.zeros(shapes[tensor], dtype=arr.dtype)
                covered[k] = np.zeros(shapes[tensor], dtype=bool)
            where = tuple(slice(a, z) for a, z in zip(lo, hi))
            full[k][where] = arr
            covered[k][where] = True
    for k, c in covered.items():
        if not c.all():
            sys.exit(f"{step_dir}: {k} not covered by its rank files")
    return index, full


def main():
    ia, a = assemble(sys.argv[1])
    ib, b = assemble(sys.argv[2])
    kinds = sorted(set(ia["kinds"]) & set(ib["kinds"]))
    keys = sorted(k for k in a if k[0] in kinds)
    if keys != sorted(k for k in b if k[0] in kinds):
        sys.exit("the checkpoints hold different tensors")
    for k in keys:
        if not np.array_equal(a[k], b[k]):
            diff = int(np.count_nonzero(a[k] != b[k]))
            sys.exit(f"{k}: {diff} of {a[k].size} elements differ")
    elements = sum(a[k].size for k in keys)
    print(f"same state: {len(keys)} tensors of {', '.join(kinds)}, {elements} elements, "
          f"{ia['config']} vs {ib['config']}")


main()
