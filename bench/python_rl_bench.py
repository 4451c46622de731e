"""RL phase shifts of an adopted job: lend / refit / reclaim pauses against the lower bound of
the bytes each moves, and the refit against the full-weights broadcast from rank 0 that OpenRLHF
and verl do, all measured in one run (bench/results/rl-phase-shift.md).

    PYTHONPATH=build/python mpirun -np 4 python3 bench/python_rl_bench.py [--hidden 512 --layers 6 --rounds 5]

The job: examples/gpt_model.py's GPT (fp32, AdamW: param, grad and both moments) adopted at
tp=2,dp=2, zero=1. Each round: job.lend(2) (the state onto processes 0 and 1 at tp=2,dp=1),
job.refit("tp=2") onto the lent processes 2 and 3, the baseline (every full weight broadcast from
rank 0 to processes 2 and 3: the weights rank 0 holds after a gather, the gather not counted),
weights.release(), job.reclaim(). The first round builds the groups and the copy's Manager and is not counted.
The link rate is a 64 MiB MPI_Sendrecv between processes 0 and 2, best of 5, in the same run; a
phase's lower bound is the most bytes any process receives in it over that rate.
Peak memory: each process's maximum resident size (ru_maxrss: Python and torch included), and
the state the job and the copy hold there.
"""
import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import dynatrain

sys.path.append(str(Path(__file__).resolve().parents[1] / "examples"))
from gpt_model import GPT  # noqa: E402

PLAN = {"tok": "vocab", "head": "vocab", "*.[qkv]": "column", "*.fc1": "column", "*.proj": "row", "*.fc2": "row"}


def link_rate(world) -> float:
    """Bytes/s of a 64 MiB MPI_Sendrecv between processes 0 and 2 (best of 5), on every rank."""
    buf, got = np.ones(64 << 18, dtype=np.float32), np.empty(64 << 18, dtype=np.float32)
    best = float("inf")
    for _ in range(5):
        world.Barrier()
        t0 = time.perf_counter()
        if world.rank in (0, 2):
            world.Sendrecv(buf, dest=2 - world.rank, recvbuf=got, source=2 - world.rank)
        best = min(best, time.perf_counter() - t0)
    return world.bcast(buf.nbytes / best, root=0)


def broadcast_full(world, bcast_comm, full):
    """Seconds (slowest process) of broadcasting every full weight from rank 0 to the lent ones."""
    world.Barrier()
    t0 = time.perf_counter()
    if bcast_comm != MPI.COMM_NULL:
        for t in full:
            bcast_comm.Bcast(t.numpy(), root=0)
    return world.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def timed(world, fn):
    world.Barrier()
    return fn()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    world = MPI.COMM_WORLD
    assert world.size == 4, "run under mpirun -np 4"
    dims = dict(vocab=a.vocab, hidden=a.hidden, heads=8, ffn=4 * a.hidden, layers=a.layers, seq=64)
    torch.manual_seed(0)
    model = GPT(**dims)
    job = dynatrain.adopt(model, torch.optim.AdamW(model.parameters()), PLAN, "tp=2,dp=2", vocab_divisible_by=128)
    names = [n for n, _ in model.named_parameters()]
    full = [job.full(n) for n in names]  # rank 0 sends these; the others receive into theirs
    weight_bytes = sum(t.numel() * 4 for t in full)
    bcast_comm = world.Split(0 if world.rank in (0, 2, 3) else MPI.UNDEFINED, world.rank)
    rate = link_rate(world)
    rows = {k: [] for k in ("lend", "refit", "bcast", "reclaim")}
    received = {}
    groups, held = [], {}
    generator = GPT(**dims)
    for r in range(a.rounds + 1):
        lent = timed(world, lambda: job.lend(2))
        held["job while lent"] = job.manager.pool_stats()["live_bytes"]
        weights = timed(world, lambda: job.refit("tp=2", generator))
        held["copy"] = weights.manager._state_bytes()
        held["pool with the copy"] = job.manager.pool_stats()["live_bytes"]
        bcast = broadcast_full(world, bcast_comm, full)
        weights.release()  # generation done: the copy's memory back to the pool the reclaim fills
        back = timed(world, job.reclaim)
        groups.append(lent["new_groups"] + weights.last_stats["new_groups"] + back["new_groups"])
        if r == 0:
            continue  # groups and the copy's Manager are built here
        for key, stats in (("lend", lent), ("refit", weights.last_stats), ("reclaim", back)):
            rows[key].append(stats["pause_seconds"])
            received[key] = stats["max_rank_bytes_received"]
        rows["bcast"].append(bcast)
    received["bcast"] = weight_bytes
    held["job"] = job.manager.pool_stats()["live_bytes"]
    held["reserved"] = job.manager.pool_stats()["reserved_bytes"]
    held["budget"] = job.manager._options["mem_budget"]
    peak = world.gather((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, held), root=0)
    if world.rank == 0:
        report(a, dims, rate, rows, received, groups, peak, weight_bytes)


def report(a, dims, rate, rows, received, groups, peak, weight_bytes):
    print(f"model: GPT {dims}, {weight_bytes / 1e6:.1f} MB of fp32 weights; job tp=2,dp=2 (zero=1, AdamW) on 4 "
          f"processes; lend 2 -> tp=2,dp=1; refit tp=2 onto the lent processes 2, 3; {a.rounds} rounds (median)")
    print(f"link: MPI_Sendrecv 64 MiB between processes 0 and 2: {rate / 1e9:.2f} GB/s\n")
    print("| phase | pause (s) | max bytes into a process (MB) | lower bound (s) | pause / bound |")
    print("|---|---|---|---|---|")
    pause = {k: statistics.median(v) for k, v in rows.items()}
    for key in ("lend", "refit", "bcast", "reclaim"):
        bound = received[key] / rate
        label = "full-weights broadcast from rank 0" if key == "bcast" else key
        print(f"| {label} | {pause[key]:.4f} | {received[key] / 1e6:.1f} | {bound:.4f} | {pause[key] / bound:.2f}x |")
    print(f"\nrefit vs broadcast: {pause['bcast'] / pause['refit']:.2f}x faster; bytes into a receiver "
          f"{received['bcast'] / received['refit']:.2f}x fewer")
    print(f"new process groups per round: {groups} (round 0 builds them)")
    print("\n| process | peak RSS (MB) | job state (MB) | while lent (MB) | copy (MB) | pool live with the copy (MB) "
          "| pool reserved at the end (MB) | max(training, copy) + budget (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    for rank, (rss, h) in enumerate(peak):
        bound = max(h["job"], h["job while lent"], h["copy"]) + h["budget"]
        print(f"| {rank} | {rss / 1e6:.0f} | {h['job'] / 1e6:.1f} | {h['job while lent'] / 1e6:.1f} | "
              f"{h['copy'] / 1e6:.1f} | {h['pool with the copy'] / 1e6:.1f} | {h['reserved'] / 1e6:.1f} | "
              f"{bound / 1e6:.1f} |")


if __name__ == "__main__":
    main()
