"""One job of the checkpoint-restart baseline of bench/python_rl_bench.py: the resize a job without
in-memory phase shifts does. Started by that script under `mpirun -np N`; it adopts the bench's
GPT at `--layout`, loading `--resume` (a checkpoint directory) when given, then saves the whole
state to `--save` (Manager.save: safetensors files, fsync of every file and directory) and ends.

Rank 0 prints one line `RESULT {json}` of wall-clock times (time.time(), after a barrier, so the
slowest process): adopt_begin (every process started, Python and torch imported, MPI up), loaded
(the adopted job holds its state), save_begin, saved, and the checkpoint's bytes.
"""
import time

STARTED = time.time()  # noqa: E402 - before the imports, which are part of a restart's cost

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

import dynatrain  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parents[1] / "examples"))
from gpt_model import GPT  # noqa: E402

PLAN = {"tok": "vocab", "head": "vocab", "*.[qkv]": "column", "*.fc1": "column", "*.proj": "row", "*.fc2": "row"}


def dims_of(a) -> dict:
    return dict(vocab=a.vocab, hidden=a.hidden, heads=8, ffn=4 * a.hidden, layers=a.layers, seq=64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", required=True)
    ap.add_argument("--resume", default="")
    ap.add_argument("--save", default="")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=8192)
    a = ap.parse_args()
    from mpi4py import MPI  # here: python_rl_bench.py imports this module without MPI
    world = MPI.COMM_WORLD
    world.Barrier()
    out = {"started": world.allreduce(STARTED, op=MPI.MAX), "adopt_begin": time.time(), "processes": world.size}
    torch.manual_seed(0)
    model = GPT(**dims_of(a))
    job = dynatrain.adopt(model, torch.optim.AdamW(model.parameters()), PLAN, a.layout, vocab_divisible_by=128,
                          resume=a.resume or None)
    world.Barrier()
    out["loaded"] = time.time()
    if a.save:
        world.Barrier()
        out["save_begin"] = time.time()
        saved = job.manager.save(a.save)
        world.Barrier()
        out.update(saved=time.time(), bytes=saved["bytes"])
    if world.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
