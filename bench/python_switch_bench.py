"""Switch overhead of the Python binding vs the same switch driven from C++ alone.

    PYTHONPATH=build/python mpirun -np 4 python3 bench/python_switch_bench.py [--layers 8] [--rounds 5]

One process, one manager, one model (the transition benchmark's dense model, bf16 weights and
grads, fp32 optimizer: ~2.5 GB of state at 8 layers). Each round switches A -> B -> A, one
switch through Manager.switch() (plan + engine + rebinding every torch view + carried state +
stats), timed in Python between barriers, the other through the C++ Manager alone, timed in C++.
The two paths alternate switch by switch, so both see the same machine load. Prints the median of each, their ratio, and
the binding's share of the very same Python call (its wall time over the native switch inside
it, slowest rank each): that last figure is free of run-to-run noise.
Figures come from a shared 2-core machine: the ratio is the figure, not the seconds.

    PYTHONPATH=build/python mpirun -np 2 python3 bench/python_switch_bench.py --adopted [--hidden 1024 --blocks 4]

--adopted: the same comparison for an adopted torch.nn model and torch.optim.AdamW (fp32: param,
grad and both moments, 16 bytes a parameter), column/row-parallel MLP blocks: job.switch()
(unbind, Manager.switch, rebinding every Parameter, grad and optimizer.state entry) against the
same switch timed in C++.
"""
import argparse
import json
import resource
import statistics
import sys
import tempfile
import time

import torch
from mpi4py import MPI

import dynatrain


def shared_config(config: dict) -> str:
    """Rank 0 writes a Hugging Face config.json to a temporary file; every rank gets its path."""
    path = None
    if MPI.COMM_WORLD.rank == 0:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(config, f)
            path = f.name
    return MPI.COMM_WORLD.bcast(path, root=0)


def bench_model(layers: int) -> str:
    return shared_config({"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": layers,
                          "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64,
                          "intermediate_size": 2816, "vocab_size": 16000, "tie_word_embeddings": False})


def python_switch(m, cfg, inside):
    """Seconds of Manager.switch() (slowest rank); appends to `inside` the native part of the
    same call, so pause / native - 1 is the binding's own share of that very switch."""
    MPI.COMM_WORLD.Barrier()
    t0 = time.perf_counter()
    stats = m.switch(cfg)
    inside.append(stats["seconds"])
    return MPI.COMM_WORLD.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def p2p_rate(world, nbytes=64 << 20, iters=3):
    """Bytes/s into one rank when every pair (r, r^1) exchanges `nbytes` both ways at once, plain
    MPI messages between warm buffers, `iters` times after one warm-up (comm/probe.h's measure,
    here through mpi4py): the link the lower bound divides by; the highest over ranks, 0 without a
    partner. The buffers are numpy arrays (transparent huge pages where numpy asks for them)."""
    import numpy as np
    partner = world.rank ^ 1
    send, recv = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
    rate = 0.0
    if partner < world.size:
        world.Sendrecv(send, dest=partner, recvbuf=recv, source=partner)  # warm-up
    world.Barrier()
    if partner < world.size:
        t0 = time.perf_counter()
        for _ in range(iters):
            world.Sendrecv(send, dest=partner, recvbuf=recv, source=partner)
        rate = nbytes * iters / (time.perf_counter() - t0)
    return world.allreduce(rate, op=MPI.MAX)


def lower_bound_line(src, dst, rate, first, first_in, py, received):
    """job.switch() against its lower bound (bytes into the busiest rank / `rate`): the pair's
    first switch src -> dst, then per direction (the timed switches alternate src -> dst and
    back) the median and best of those that moved bytes."""
    def ratio(seconds, into):
        return f"{seconds:.3f} s, LB {into / rate:.3f} s, {seconds * rate / into:.2f}x" if into else "no bytes moved"
    text = (f"{src} <-> {dst}: point-to-point {rate / 1e9:.2f} GB/s (same run); first {src} -> {dst}: "
            f"{ratio(first, first_in)}")
    for name, start in ((f"{src} -> {dst}", 0), (f"{dst} -> {src}", 1)):
        moved = [(p, b) for p, b in zip(py[start::2], received[start::2]) if b > 0]
        if not moved:
            text += f"; {name}: no bytes moved"
            continue
        rs = sorted(p * rate / b for p, b in moved)
        text += (f"; {name}: {len(moved)} timed, median {statistics.median(rs):.2f}x, best {rs[0]:.2f}x the LB "
                 f"({max(b for _, b in moved) / 1e6:.0f} MB into the busiest rank, job.switch median "
                 f"{statistics.median(p for p, _ in moved):.3f} s)")
    return text


def job_switch(job, cfg, inside, rebinding, received=None, usage=None):
    """Seconds of job.switch() (slowest rank); appends the native switch inside it to `inside`,
    the bytes into the busiest rank to `received`, to `usage` what the call cost the kernel
    (system seconds, page faults: getrusage of this process, the most over ranks), and to
    `rebinding` the job's own part (unbind + rebind every parameter and state entry), timed
    again on its own right after."""
    MPI.COMM_WORLD.Barrier()
    u0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    stats = job.switch(cfg)
    u1 = resource.getrusage(resource.RUSAGE_SELF)
    if usage is not None:
        usage.append((MPI.COMM_WORLD.allreduce(u1.ru_stime - u0.ru_stime, op=MPI.MAX),
                      MPI.COMM_WORLD.allreduce(u1.ru_minflt + u1.ru_majflt - u0.ru_minflt - u0.ru_majflt, op=MPI.MAX)))
    inside.append(stats["seconds"])
    if received is not None:
        received.append(stats["max_rank_bytes_received"])
    seconds = MPI.COMM_WORLD.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    t1 = time.perf_counter()
    job._unbind()
    job._bind()
    rebinding.append(MPI.COMM_WORLD.allreduce(time.perf_counter() - t1, op=MPI.MAX))
    return seconds


def reference_switch(job, cfg):
    """The same switch timed in C++; the job's bindings are dropped and rebuilt outside the timing."""
    job._unbind()
    seconds = job.manager._reference_switch(cfg)
    job._bind()
    return seconds


def adopted_rows(a, world):
    """(src, dst, state bytes, C++ median, job.switch median, job's own share) per pair."""
    import torch.nn as nn
    layers = [nn.Sequential(nn.Linear(a.hidden, 4 * a.hidden), nn.GELU(), nn.Linear(4 * a.hidden, a.hidden))
              for _ in range(a.blocks)]
    model = nn.Sequential(*layers)
    optimizer = torch.optim.AdamW(model.parameters())
    plan = {"*.0": "column", "*.2": "row"}
    pairs = [pair.split(">") for pair in a.adopted_pairs.split(";")]
    job = dynatrain.adopt(model, optimizer, plan, pairs[0][0], bucket_elems=4_000_000)
    rows = []
    for src, dst in pairs:
        job.switch(src)
        rate = p2p_rate(world)
        first, first_native, first_in = [], [], []  # the pair's first switch: the pool not yet warm for it
        first.append(job_switch(job, dst, first_native, [], first_in))
        job.switch(src)  # warm the pool: both paths then run warm
        py, cpp, native, rebinding, received, usage = [], [], [], [], [], []
        for r in range(2 * a.rounds):  # switch by switch, the paths alternate; both go both ways
            if r % 2 == 0:
                py.append(job_switch(job, dst, native, rebinding, received, usage))
                cpp.append(reference_switch(job, src))
            else:
                cpp.append(reference_switch(job, dst))
                py.append(job_switch(job, src, native, rebinding, received, usage))
        if world.rank == 0 and rate > 0:
            print(lower_bound_line(src, dst, rate, first[0], first_in[0], py, received))
        pool = job.manager.pool_stats()  # rank 0's: the same policy on every rank
        if world.rank == 0:
            share = pool["huge_page_bytes"] / pool["mapped_bytes"] if pool["mapped_bytes"] else 0.0
            print(f"{src} <-> {dst}: huge pages {'on' if pool['huge_pages'] else 'off'} (THP {pool['thp_mode']}), "
                  f"{100 * share:.0f} % of the pool's blocks in 2 MiB pages; per job.switch() median "
                  f"{statistics.median(u[0] for u in usage):.3f} s system time, "
                  f"{statistics.median(u[1] for u in usage):.0f} page faults (most over ranks)")
        m = job.manager
        state = world.allreduce(sum(b.numel() * b.element_size() for k in m._kinds for b in m.buffers(k)))
        share = statistics.median(p / n - 1 for p, n in zip(py, native))
        rows.append((src, dst, state, statistics.median(cpp), statistics.median(py), share,
                     statistics.median(p - n for p, n in zip(py, native))))
        if world.rank == 0:
            print(f"{src} <-> {dst}: the job's own unbind + rebind, median {statistics.median(rebinding) * 1e3:.2f} ms")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pairs", default="tp=2,dp=2>tp=4;pp=2,dp=2>dp=4", help="A>B;... switched A->B->A")
    ap.add_argument("--adopted", action="store_true", help="an adopted nn.Module + AdamW, switched by job.switch()")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--adopted-pairs", default="tp=2>dp=2;dp=2,zero=0>tp=2")
    a = ap.parse_args()
    world = MPI.COMM_WORLD
    rows = adopted_rows(a, world) if a.adopted else switch_rows(a, world)
    if world.rank == 0:
        what = "adopted job.switch()" if a.adopted else "binding"
        print(f"{what} vs C++ switch, {world.size} ranks, {a.rounds * 2} switches each path, median seconds")
        print("| switch (there and back) | state | C++ alone | Python | Python / C++ - 1 | Python's own time in the call | its share |")
        print("|---|---|---|---|---|---|---|")
        for src, dst, state, c, p, share, extra in rows:
            print(f"| `{src}` <-> `{dst}` | {state / 1e9:.2f} GB | {c:.3f} s | {p:.3f} s | {100 * (p / c - 1):+.1f} % "
                  f"| {extra * 1e3:.1f} ms | {100 * share:+.2f} % |")
    return 0


def switch_rows(a, world):
    model = bench_model(a.layers)
    rows = []
    for pair in a.pairs.split(";"):
        src, dst = pair.split(">")
        m = dynatrain.Manager(world, model, src, bucket_elems=4_000_000, param_dtype=torch.bfloat16, elastic=False)
        m.switch(dst), m.switch(src)  # warm the pool once: both paths then run warm
        py, cpp, native = [], [], []
        for r in range(2 * a.rounds):  # switch by switch, the paths alternate; both go both ways
            if r % 2 == 0:
                py.append(python_switch(m, dst, native))
                cpp.append(m._reference_switch(src))
            else:
                cpp.append(m._reference_switch(dst))
                py.append(python_switch(m, src, native))
        state = world.allreduce(sum(b.numel() * b.element_size() for k in m._kinds for b in m.buffers(k)))
        share = statistics.median(p / n - 1 for p, n in zip(py, native))
        extra = statistics.median(p - n for p, n in zip(py, native))
        rows.append((src, dst, state, statistics.median(cpp), statistics.median(py), share, extra))
        del m
    return rows


if __name__ == "__main__":
    sys.exit(main())
