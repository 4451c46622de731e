"""RL phase shifts of an adopted job: lend / refit / reclaim pauses against the lower bound of
the bytes each moves, the refit against the full-weights broadcast from rank 0 that OpenRLHF
and verl do, and lend / reclaim against the same resizes done by checkpoint and restart, all
measured in one run; the script rewrites bench/results/rl-phase-shift.md (python_rl_report.py).

    PYTHONPATH=build/python python3 bench/python_rl_bench.py [--hidden 512 --layers 6 --rounds 5]

It starts the jobs itself (mpirun, on the same machine):
  * `mpirun -np 4 python_rl_bench.py --worker`: examples/gpt_model.py's GPT (fp32, AdamW: param,
    grad and both moments) adopted at tp=2,dp=2, zero=1. Each round: job.lend(2) (the state onto
    processes 0 and 1 at tp=2,dp=1), job.refit("tp=2") onto the lent processes 2 and 3, the
    baseline (every full weight broadcast from rank 0 to processes 2 and 3: the weights rank 0
    holds after a gather, the gather not counted), weights.release(), job.reclaim(). The first
    round builds the groups and the copy's Manager: reported apart (first) from the median of the
    others (steady). After the rounds, three refits with dtype=torch.bfloat16 (cast by the
    senders). Each phase's pause is split into its parts (Manager.switch's stats: Python
    agreement, plan, the engine's agreement, dry run, allocation, pack, unpack, keeps, wait on
    the link, rebinding; system time and page faults), each the slowest process's. The link
    rate is measured in the same job before and after the rounds (link_rates: 64 MiB plain
    messages between the phase's pairs at once, one way, best of 5, the faster of the two probes);
    a phase's lower bound is the most bytes any process receives in it over the rate of its
    direction. Peak memory: each process's maximum resident size
    (ru_maxrss: Python and torch included), and the state the job and the copy hold there.
  * The checkpoint-restart baseline (python_rl_restart.py): a chain of jobs 4, 2, 4, ... processes
    at tp=2,dp=2 / tp=2,dp=1 / ..., each loading the previous one's checkpoint (real files, fsync)
    and saving its own before it ends. A resize's pause runs from the old job's save to the new
    job holding its state: save, the processes ending, new ones starting (Python, torch, MPI),
    adopt and load.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent / "examples"))
from gpt_model import GPT  # noqa: E402
from python_rl_restart import PLAN, dims_of  # noqa: E402


def link_rates(world, best=None) -> dict:
    """Bytes/s into each receiver of 64 MiB plain messages, both pairs of a phase at once, best of 5
    after a warm-up: "down" 2 -> 0 and 3 -> 1 (as a lend moves), "up" 0 -> 2 and 1 -> 3 (as a refit
    and a reclaim move). The senders wait in a sleeping poll, as the engine's senders yield their
    core (a busy MPI wait would take the receivers' cores on a machine with fewer cores than
    processes). `best`: the rates of an earlier probe, kept where faster (the bound uses the most
    the link did in the run). Equal on every rank."""
    from mpi4py import MPI
    buf, got = np.ones(64 << 18, dtype=np.float32), np.empty(64 << 18, dtype=np.float32)
    rates = dict(best or {})
    for name, senders in (("down", (2, 3)), ("up", (0, 1))):
        fastest = float("inf")
        for rep in range(6):
            world.Barrier()
            t0 = time.perf_counter()
            peer = world.rank ^ 2
            if world.rank in senders:
                req = world.Isend(buf, dest=peer)
                while not req.Test():
                    time.sleep(0.0002)
                took = 0.0
            else:
                world.Recv(got, source=peer)
                took = time.perf_counter() - t0
            slowest = world.allreduce(took, op=MPI.MAX)
            if rep > 0:
                fastest = min(fastest, slowest)
        rates[name] = max(rates.get(name, 0.0), buf.nbytes / fastest)
        rates["zero " + name] = max(rates.get("zero " + name, 0.0), zero_rate(world, senders, got))
    return rates


def zero_rate(world, idle, buf) -> float:
    """Bytes/s at which each process not in `idle` zeroes the warm `buf` (as a zero_grads switch
    zeroes the grads), all at once, the idle ones in a sleeping poll; best of 5 after a warm-up."""
    from mpi4py import MPI
    fastest = float("inf")
    for rep in range(6):
        world.Barrier()
        t0 = time.perf_counter()
        if world.rank in idle:
            took = 0.0
        else:
            buf.fill(0)
            took = time.perf_counter() - t0
        req = world.Iallreduce(np.array([took]), result := np.empty(1), op=MPI.MAX)
        while not req.Test():
            time.sleep(0.0002)
        if rep > 0:
            fastest = min(fastest, float(result[0]))
    return buf.nbytes / fastest


def broadcast_full(world, bcast_comm, full):
    """Seconds (slowest process) of broadcasting every full weight from rank 0 to the lent ones."""
    from mpi4py import MPI
    world.Barrier()
    t0 = time.perf_counter()
    if bcast_comm != MPI.COMM_NULL:
        for t in full:
            bcast_comm.Bcast(t.numpy(), root=0)
    return world.allreduce(time.perf_counter() - t0, op=MPI.MAX)


# The parts of a phase's pause the report shows (python/manager.h SwitchStats, Manager.switch):
# each the slowest process's; call is the whole Python call from a barrier (slowest process).
PARTS = ("call_seconds", "pause_seconds", "args_seconds", "plan_seconds", "agree_seconds", "dry_seconds",
         "alloc_seconds", "pack_seconds", "unpack_seconds", "keep_seconds", "wait_seconds", "rebind_seconds",
         "system_seconds", "page_faults", "max_rank_bytes_received", "max_rank_bytes_zeroed", "plan_cached")


def timed(world, fn, stats_of=lambda r: r):
    """fn() after a barrier: (its result, its stats' PARTS with call_seconds: the slowest process's wall time)."""
    from mpi4py import MPI
    world.Barrier()
    t0 = time.perf_counter()
    result = fn()
    call = world.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    stats = stats_of(result)
    return result, {k: float(stats.get(k, float("nan"))) if k != "call_seconds" else call for k in PARTS}


def rounds(world, job, a, dims, full, bcast_comm):
    """The measured rounds: each phase's parts per round (round 0 first: it builds the groups
    and the copy's Manager), bytes per phase, groups and processes made, memory."""
    rows = {k: [] for k in ("lend", "refit", "bcast", "reclaim")}
    out = {"received": {}, "groups": [], "processes": [], "held": {}}
    generator, held = GPT(**dims), out["held"]
    for r in range(a.rounds + 1):
        lent, lend_parts = timed(world, lambda: job.lend(2))
        held["job while lent"] = job.manager.pool_stats()["live_bytes"]
        weights, refit_parts = timed(world, lambda: job.refit("tp=2", generator), lambda w: w.last_stats)
        held["copy"] = weights.manager._state_bytes()
        bcast = broadcast_full(world, bcast_comm, full)
        weights.release()  # generation done: the copy's memory back to the pool the reclaim fills
        back, reclaim_parts = timed(world, job.reclaim)
        out["groups"].append(lent["new_groups"] + weights.last_stats["new_groups"] + back["new_groups"])
        out["processes"].append(lent["new_processes"] + back["new_processes"])
        for key, parts in (("lend", lend_parts), ("refit", refit_parts), ("reclaim", reclaim_parts)):
            rows[key].append(parts)
            out["received"][key] = parts["max_rank_bytes_received"]
        rows["bcast"].append({"pause_seconds": bcast, "call_seconds": bcast})
    out["rows"] = rows
    out["pause"] = {k: statistics.median(p["pause_seconds"] for p in v[1:]) for k, v in rows.items()}
    return out


def bf16_refits(world, job, dims, count=3):
    """bf16 refits of the fp32 job onto the lent processes: each one's parts (the first builds the copy)."""
    job.lend(2)
    half, parts = GPT(**dims), []
    for _ in range(count):
        weights, got = timed(world, lambda: job.refit("tp=2", half, dtype=torch.bfloat16), lambda w: w.last_stats)
        weights.release()
        parts.append(got)
    job.reclaim()
    return parts


def worker(a):
    from mpi4py import MPI
    import dynatrain
    world = MPI.COMM_WORLD
    assert world.size == 4, "the worker runs under mpirun -np 4"
    dims = dims_of(a)
    torch.manual_seed(0)
    model = GPT(**dims)
    job = dynatrain.adopt(model, torch.optim.AdamW(model.parameters()), PLAN, "tp=2,dp=2", vocab_divisible_by=128)
    full = [job.full(n) for n, _ in model.named_parameters()]  # rank 0 sends these; the others receive into theirs
    bcast_comm = world.Split(0 if world.rank in (0, 2, 3) else MPI.UNDEFINED, world.rank)
    rates = link_rates(world)
    out = dict(weight_bytes=sum(t.numel() * 4 for t in full), dims=dims)
    out.update(rounds(world, job, a, dims, full, bcast_comm))
    out["rates"] = link_rates(world, rates)
    out["received"]["bcast"] = out["weight_bytes"]
    out["rows"]["refit bf16"] = bf16_refits(world, job, dims)
    out["bf16"] = {"received": out["rows"]["refit bf16"][-1]["max_rank_bytes_received"]}
    held = out.pop("held")
    pool = job.manager.pool_stats()
    held.update(job=pool["live_bytes"], peak_live=pool["peak_live_bytes"],
                peak_reserved=pool["peak_reserved_bytes"], budget=job.manager._options["mem_budget"])
    out["peak"] = world.gather((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, held), root=0)
    if world.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def mpirun(np_, script, args):
    """Runs `script` under mpirun -np np_; its rank 0's RESULT line, parsed."""
    cmd = [shutil.which("mpirun") or "mpirun", "-np", str(np_), sys.executable, str(HERE / script), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def restarts(a, size):
    """The checkpoint-restart chain: 4, 2, 4, ... processes, each job loading the last one's
    checkpoint. Per resize: its pause and the parts of it (save, processes, adopt and load)."""
    base = Path(a.ckpt_dir).resolve()
    shutil.rmtree(base, ignore_errors=True)
    chain = [(4, "tp=2,dp=2"), (2, "tp=2,dp=1")] * a.restart_rounds + [(4, "tp=2,dp=2")]
    jobs, resizes = [], []
    for i, (np_, layout) in enumerate(chain):
        save = str(base / f"job{i}") if i + 1 < len(chain) else ""
        args = [*size, "--layout", layout, "--save", save, "--resume", str(base / f"job{i - 1}") if i else ""]
        jobs.append(mpirun(np_, "python_rl_restart.py", args))
        if i:
            old, new = jobs[-2], jobs[-1]
            resizes.append(dict(kind="shrink (as lend)" if np_ == 2 else "grow (as reclaim)",
                                pause=new["loaded"] - old["save_begin"], save=old["saved"] - old["save_begin"],
                                restart=new["adopt_begin"] - old["saved"], load=new["loaded"] - new["adopt_begin"],
                                bytes=old["bytes"]))
            shutil.rmtree(base / f"job{i - 1}", ignore_errors=True)
    return resizes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--restart-rounds", type=int, default=2, help="shrink-and-grow pairs by checkpoint and restart")
    ap.add_argument("--ckpt-dir", default=str(HERE.parent / "build" / "bench-rl-ckpt"))
    ap.add_argument("--out", default=str(HERE / "results" / "rl-phase-shift.md"))
    ap.add_argument("--worker", action="store_true", help="(internal) the in-memory job, under mpirun -np 4")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    from python_rl_report import commit, write
    code = commit()
    size = ["--hidden", str(a.hidden), "--layers", str(a.layers), "--vocab", str(a.vocab)]
    load = [os.getloadavg()[0]]
    shifts = mpirun(4, "python_rl_bench.py", [*size, "--rounds", str(a.rounds), "--worker"])
    resizes = restarts(a, size)
    load.append(os.getloadavg()[0])
    text = write(a, shifts, resizes, load, code)
    Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
