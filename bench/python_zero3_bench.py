"""zero=3 on an adopted model: parameter bytes held per rank between steps, and the loss against
plain single-process torch through switches into and out of zero=3.

    source scripts/mpi-env.sh
    PYTHONPATH=build/python mpirun -np 2 python3 bench/python_zero3_bench.py [--hidden 256 --layers 4]

Every rank trains the adopted GPT (examples/gpt_model.py, AdamW) and the same model in plain
torch on the whole batch, through dp,zero=0 -> dp,zero=3 -> tp=2,zero=2 -> tp=2,zero=3 ->
dp,zero=3. After each step it sums p.numel() * p.element_size() over model.parameters() (the
bytes the module's parameters hold between steps) and takes the largest over the ranks. Rank 0
prints one row per layout: that figure, the plain model's bytes / dp, their ratio, the largest
relative loss difference and the median step time.
"""
import argparse
import copy
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from mpi4py import MPI

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import dynatrain  # noqa: E402
from gpt_model import GPT, batch, plain_step  # noqa: E402

PLAN = {"tok": "vocab", "head": "vocab", "*.[qkv]": "column", "*.fc1": "column", "*.proj": "row", "*.fc2": "row"}


def loss_of(model, data):
    return F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=3, help="steps per layout")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    n = world.size
    torch.manual_seed(0)
    dims = dict(vocab=args.vocab, hidden=args.hidden, heads=4, ffn=4 * args.hidden, layers=args.layers, seq=16)
    model = GPT(**dims)
    plain = copy.deepcopy(model)
    opt, plain_opt = torch.optim.AdamW(model.parameters(), lr=1e-3), torch.optim.AdamW(plain.parameters(), lr=1e-3)
    tp_dp = f"tp=2,dp={n // 2}"
    cfgs = [f"dp={n},zero=0", f"dp={n},zero=3", f"{tp_dp},zero=2", f"{tp_dp},zero=3", f"dp={n},zero=3"]
    job = dynatrain.adopt(model, opt, PLAN, cfgs[0], pipeline="blocks", bucket_elems=1 << 20)
    whole = sum(p.numel() * p.element_size() for p in plain.parameters())
    step = 0
    if world.rank == 0:
        print(f"model: {whole} bytes of parameters, {n} processes")
        print("| layout | bytes held per rank between steps (max) | plain model / dp | ratio | max rel. loss diff "
              "| step (median) |")
        print("|---|---|---|---|---|---|")
    for cfg in cfgs:
        if job.config["config"] != cfg:
            job.switch(cfg)
        held, diffs, times = 0, [], []
        for _ in range(args.steps):
            data = batch(step, 8, dims["vocab"], dims["seq"])
            want = plain_step(plain, plain_opt, data)
            world.Barrier()
            t0 = time.perf_counter()
            opt.zero_grad()
            got = loss_of(model, job.local_batch(data))
            got.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            got = job.average(got).item()
            diffs.append(abs(got - want.item()) / abs(want.item()))
            held = max(held, sum(p.numel() * p.element_size() for p in model.parameters()))
            step += 1
        held = world.allreduce(held, op=MPI.MAX)
        if world.rank == 0:
            print(f"| `{cfg}` | {held} | {whole / n:.0f} | {held / (whole / n):.3f} | {max(diffs):.2e} "
                  f"| {statistics.median(times) * 1e3:.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
