"""An adopted GPT trained on torch.distributed (`dynatrain launch --keep-going`) while one
process is killed (test_notice.py, bench/c10d_recovery.py):

  lost_job.py LAYOUT STEP RANK   the process holding RANK SIGKILLs itself before step STEP

Each process prints `start pid P`; the killed one `kill at T` (wall clock) just before; after
each optimizer.step() that counted its step, every process prints `loss step S rank R of D
value V pid P config C` (V: its local batch's loss; the step's loss is the mean over its D
ranks), and after one that recovered, rank 0 prints `resumed at T`. Each survivor ends with
`end pid P gone G` (G: the start pids whose process is gone). notice_job.plain_losses() is the
uninterrupted run. LOST_DIMS (JSON) changes the model's sizes (bench/c10d_recovery.py); with
LOST_BENCH=1 rank 0 ends with `bench ...`: the recovery's figures and, measured in the same run,
the bare exchange of the bytes it moved over the survivors' group and a warm copy of this
process's state (what the engine's keeps copy)."""
import json
import os
import signal
import sys
import time

import torch

from notice_job import (DIMS, GLOBAL_BATCH, PLAN, STEPS, batch, gone_at_end, loss_of, model_and_optimizer,
                        start_pids)


DIMS.update(json.loads(os.environ.get("LOST_DIMS", "{}")))


def say(line):
    """One line in one write: the processes share the output, a line must not be split."""
    os.write(1, (line + "\n").encode())


def bare_exchange(comm, nbytes):
    """Seconds (slowest survivor) to send `nbytes` to the next survivor and receive as many from
    the previous one over the group (the rebuilt bytes' lower bound on this link)."""
    import torch.distributed as dist
    out, into = torch.ones(max(nbytes, 1), dtype=torch.uint8), torch.empty(max(nbytes, 1), dtype=torch.uint8)
    comm.Barrier()
    t0 = time.perf_counter()
    send = dist.isend(out, comm.ranks[(comm.rank + 1) % comm.size], group=comm.group)
    dist.recv(into, comm.ranks[(comm.rank - 1) % comm.size], group=comm.group)
    send.wait()
    return comm.allreduce(time.perf_counter() - t0, op="max")


def main(layout, step, rank):
    pids = start_pids()
    import dynatrain
    say(f"start pid {os.getpid()}")
    model, optimizer = model_and_optimizer()
    job = dynatrain.adopt(model, optimizer, PLAN, layout, pipeline="blocks", vocab_divisible_by=8, bucket_elems=3000)
    recoveries = 0
    while job.step < STEPS:
        if job.step == int(step) and job.rank == int(rank) and recoveries == 0:
            say(f"kill at {time.time():.6f}")
            os.kill(os.getpid(), signal.SIGKILL)
        before = job.step
        optimizer.zero_grad()
        loss = loss_of(model, job.local_batch(batch(job.step, GLOBAL_BATCH, DIMS["vocab"], DIMS["seq"])))
        loss.backward()
        optimizer.step()
        if job.step > before:
            c = job.config
            say(f"loss step {before} rank {c['dp_rank']} of {c['dp']} value {loss.item():.9f} pid {os.getpid()} "
                  f"config {c['config']}")
        elif getattr(job, "last_recovery", None) is not None and recoveries == 0:
            recoveries = 1
            if job.rank == 0:
                say(f"resumed at {time.time():.6f}")
    if os.environ.get("LOST_BENCH") and getattr(job, "last_recovery", None) is not None:
        r = job.last_recovery
        bare = bare_exchange(job.manager.comm, r["max_rank_bytes_received"])
        state = torch.ones(job.manager._state_bytes(), dtype=torch.uint8)
        into = torch.empty_like(state).fill_(0)  # written before: a warm copy, as the engine's keeps
        t0 = time.perf_counter()
        into.copy_(state)
        copy = job.manager.comm.allreduce(time.perf_counter() - t0, op="max")
        if job.rank == 0:
            say(f"bench state {job.manager._state_bytes()} pause {r['pause_seconds']:.4f} agree "
                  f"{r['agree_seconds']:.4f} groups {r['groups_seconds']:.4f} engine {r['engine_seconds']:.4f} "
                  f"received {r['max_rank_bytes_received']} bare {bare:.4f} copy {copy:.4f}")
    say(f"end pid {os.getpid()} gone {gone_at_end(job, pids)}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
