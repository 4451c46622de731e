"""Manager.save() and Manager(..., resume=) against this disk's fsync'd write and cold read rate,
measured in the same run.

    PYTHONPATH=build/python mpirun -np 2 python3 bench/python_checkpoint_bench.py [--mb 500] [--rounds 2] [--dir DIR]

State: a user model of `layers` tensors [1024, 1024] split over tp, fp32 in all five kinds
(param, grad, master, exp_avg, exp_avg_sq: 20 bytes an element), sized to --mb in all; saved
at tp=2 (each rank writes half), loaded at tp=2 (the saved layout) and at dp=2 (each rank reads
every param and grad, half of the ZeRO-1 optimizer state).
    write limit  every rank writes as many random bytes as its rank file holds to a new plain
                 file from one buffer, 16 MiB a write, and fsyncs it, all ranks at once: bytes /
                 slowest (the state is random too: a disk that compresses favours neither);
                 after an untimed write and removal of the same size, as the save too reuses
                 blocks freed before it
    read limit   every rank reads that file back, 16 MiB a read into one buffer (no page
                 faults: a resume also backs its fresh memory, which this limit does not count),
                 after dropping it from the page cache (fsync, posix_fadvise DONTNEED), all at once
    save         Manager.save: rank files with checksums, pickle attachment, index, pointer switch
    load cold    Manager(..., resume=) after dropping the checkpoint's files from the page cache
                 (seconds of the load itself: open, plan, read, verify every chunk's checksum)
    load warm    the same with the files still cached
GB/s is the checkpoint's bytes over the seconds (at dp=2 the two ranks read every param and
grad between them twice, the second time mostly from the page cache). Each round measures the
limits and then the checkpoint, so both see the same machine load; each row prints its fastest
round with the ratio to that round's limit.
"""
import argparse
import os
import shutil
import tempfile
import time

import torch
from mpi4py import MPI

import dynatrain

BLOCK = 16 << 20


def bench_model(total_bytes: int) -> dynatrain.Model:
    layers = max(2, total_bytes // (20 * 1024 * 1024))
    tensors = [dynatrain.Tensor(f"l{l}.w", [1024, 1024], split="dim", dim=0, layer=l) for l in range(layers)]
    return dynatrain.Model(tensors, layers=layers, name="bench")


def slowest(comm, t0: float) -> float:
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def drop_cached(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def write_fsynced(path: str, nbytes: int, block: memoryview) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    left = nbytes
    while left > 0:
        left -= os.write(fd, block[:min(left, BLOCK)])
    os.fsync(fd)
    os.close(fd)


def probe(comm, directory: str, nbytes: int):
    """(write GB/s, read GB/s) of all ranks at once, `nbytes` each: fsync'd writes of a new file
    (after one untimed write and removal of the same size, so that both the probe and the save
    reuse freed blocks: this virtual disk writes blocks it never held ~6x slower), and cold
    reads into one 16 MiB buffer."""
    path = os.path.join(directory, f"probe-{comm.rank}")
    block = memoryview(os.urandom(1 << 20) * (BLOCK >> 20))
    write_fsynced(path, nbytes, block)
    os.remove(path)
    comm.Barrier()
    t0 = time.perf_counter()
    write_fsynced(path, nbytes, block)
    write_s = slowest(comm, t0)
    drop_cached(path)
    into = bytearray(BLOCK)  # one buffer, its pages backed: the disk's rate, no page faults
    comm.Barrier()
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(into) > 0:
            pass
    read_s = slowest(comm, t0)
    os.remove(path)
    total = comm.allreduce(nbytes, op=MPI.SUM)
    return total / write_s / 1e9, total / read_s / 1e9


def drop_checkpoint(comm, step_dir: str) -> None:
    if comm.rank == 0:
        for name in os.listdir(step_dir):
            drop_cached(os.path.join(step_dir, name))
    comm.Barrier()


def load_seconds(comm, model, cfg, directory) -> float:
    """Seconds of the load inside Manager(..., resume=) (slowest rank)."""
    m = dynatrain.Manager(comm, model, cfg, resume=directory)
    seconds = m._resume_stats["seconds"]
    del m
    return seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=500, help="state bytes in all, every kind (MB)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", default=None, help="where to write (default: a new directory under /tmp)")
    ap.add_argument("--verbose", action="store_true", help="print every round")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit("run with mpirun -np 2")
    root = comm.bcast(tempfile.mkdtemp(prefix="dt-ckpt-bench-", dir=a.dir) if comm.rank == 0 else None, root=0)
    model = bench_model(a.mb * 1_000_000)
    m = dynatrain.Manager(comm, model, "tp=2")
    torch.manual_seed(comm.rank)
    for kind in m._kinds:  # random, as trained state is: a disk that compresses gains nothing
        for buf in m.buffers(kind):
            buf.uniform_()
    gb = 0.0
    rows = {name: [] for name in ("save", "load cold tp=2", "load warm tp=2", "load cold dp=2")}
    try:
        for r in range(a.rounds):
            mine = sum(b.numel() * b.element_size() for k in m._kinds for b in m.buffers(k))
            write_gbps, read_gbps = probe(comm, root, mine)
            m.step = r + 1
            s = m.save(root)
            gb = s["bytes"] / 1e9
            rows["save"].append((s["seconds"], write_gbps))
            drop_checkpoint(comm, s["path"])
            rows["load cold tp=2"].append((load_seconds(comm, model, "tp=2", root), read_gbps))
            rows["load warm tp=2"].append((load_seconds(comm, model, "tp=2", root), read_gbps))
            drop_checkpoint(comm, s["path"])
            rows["load cold dp=2"].append((load_seconds(comm, model, "dp=2", root), read_gbps))
            if comm.rank == 0 and a.verbose:
                print(f"round {r}: write {write_gbps:.2f} GB/s, read {read_gbps:.2f} GB/s, "
                      + ", ".join(f"{name} {got[-1][0]:.3f} s" for name, got in rows.items()), flush=True)
    finally:
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(root, ignore_errors=True)
    if comm.rank == 0:
        print(f"checkpoint {gb:.3f} GB on 2 processes, {a.rounds} rounds; per row the fastest round, "
              f"GB/s = checkpoint bytes / seconds, limit of the same round")
        print(f"{'':16} {'seconds':>8} {'GB/s':>6} {'limit':>6} {'ratio':>6}   limit = fsync'd write (save) / cold read (loads)")
        for name, got in rows.items():
            seconds, limit = min(got)
            print(f"{name:16} {seconds:8.3f} {gb / seconds:6.2f} {limit:6.2f} {gb / seconds / limit:6.2f}")


if __name__ == "__main__":
    main()
