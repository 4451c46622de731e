"""An adopted GPT trained on torch.distributed (`dynatrain launch --keep-going`) while one
process is killed (test_notice.py, bench/c10d_recovery.py):

  lost_job.py LAYOUT STEP RANK   the process holding RANK SIGKILLs itself before step STEP
                                 (LOST_HOW=raise: raises RuntimeError instead; RANK may be a
                                 list "2,3"; LOST_WHEN=backward: after the step's backward;
                                 LOST_WHEN=barrier: after the step's commit barrier, before its
                                 update, and the processes holding LOST_MISS (a list) raise a
                                 RuntimeError there, as a barrier that met the loss does;
                                 LOST_WHEN=forward: LOST_AFTER seconds, default 0.03, into the
                                 step, which every process starts from a barrier)

LOST_SLOW=S makes each leaf module's forward of step STEP sleep S seconds on the survivors (a
forward long enough to be stopped: the launcher reports the kill, _stop.py).
LOST_SCHED=1 registers notice_job.decaying_lr and steps it after each optimizer.step() (the
reference: notice_job.plain_losses(scheduled=True)).
LOST_NODES=N fakes N nodes of equal size (DYNATRAIN_NODE from RANK: ranks 0,1 | 2,3 for 4 on 2).

Each process prints `start pid P`; the killed one `kill at T` (wall clock) just before; after
each optimizer.step() that counted its step, every process of tp rank 0 prints `loss step S rank R of D
value V pid P config C` (V: its local batch's loss; the step's loss is the mean over its D
ranks), and after one that recovered, rank 0 prints `resumed at T stopped N met M` (N: the
survivors whose forward the loss stopped; M: when the first survivor met the loss). Each survivor ends with
`end pid P gone G` (G: the start pids whose process is gone). notice_job.plain_losses() is the
uninterrupted run. LOST_DIMS (JSON) changes the model's sizes (bench/c10d_recovery.py), LOST_STEPS
the steps; with
LOST_BENCH=1 rank 0 ends with `bench ...`: the recovery's figures and, measured in the same run,
the bare exchange of the bytes it moved over the survivors' group and a warm copy of this
process's state (what the engine's keeps copy); before it `setup state B {redundancy stats}`
after adoption and `steps S:T ...` (wall clock after each counted step) at the end
(bench/copy_bench.py)."""
import json
import os
import signal
import sys
import time

import torch

from notice_job import (DIMS, GLOBAL_BATCH, PLAN, STEPS, batch, decaying_lr, gone_at_end, loss_of,
                        model_and_optimizer, start_pids)


DIMS.update(json.loads(os.environ.get("LOST_DIMS", "{}")))
STEPS = int(os.environ.get("LOST_STEPS", STEPS))  # bench/copy_bench.py's longer runs
if os.environ.get("LOST_NODES"):
    _per_node = int(os.environ["WORLD_SIZE"]) // int(os.environ["LOST_NODES"])
    os.environ["DYNATRAIN_NODE"] = f"node{int(os.environ['RANK']) // _per_node}"


def kill_here(job, when, step, ranks, recoveries):
    """Whether this process ends itself now (at `when`: before or backward)."""
    return os.environ.get("LOST_WHEN", "before") == when and job.step == int(step) and \
        job.rank in [int(r) for r in ranks.split(",")] and recoveries == 0


def kill_into_forward(job, step, ranks):
    """LOST_WHEN=forward: every process meets the others in a barrier at the start of `step`, and
    the one holding `ranks` is killed LOST_AFTER seconds (default 0.03) after it, in its forward
    (a loss where every survivor is computing the step, none skewed into the step before)."""
    import threading
    import torch.distributed as dist
    dist.barrier()
    if job.rank in [int(r) for r in ranks.split(",")]:
        def kill():
            say(f"kill at {time.time():.6f}")
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Timer(float(os.environ.get("LOST_AFTER", "0.03")), kill).start()


def fail_in_commit(job, step, ranks):
    """LOST_WHEN=barrier: wraps the commit barrier (dynatrain._recover.commit) of step `step`."""
    from dynatrain import _recover
    plain = _recover.commit
    misses = [int(r) for r in os.environ.get("LOST_MISS", "").split(",") if r]

    def commit(m):
        plain(m)
        if job.step != int(step) or getattr(job, "last_recovery", None) is not None:
            return
        if job.rank in [int(r) for r in ranks.split(",")]:
            say(f"kill at {time.time():.6f}")
            os.kill(os.getpid(), signal.SIGKILL)
        if job.rank in misses:
            raise RuntimeError(f"the commit barrier of step {job.step} met the loss (on purpose)")
    _recover.commit = commit


def slow_forward(model, job, step, seconds):
    """LOST_SLOW: each leaf module's forward of `step` sleeps `seconds`, until a recovery."""
    def sleep(module, inputs):
        if job.step == step and getattr(job, "last_recovery", None) is None:
            time.sleep(seconds)
    for module in model.modules():
        if not list(module.children()):
            module.register_forward_pre_hook(sleep)


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
    if job.rank == 0 and job.manager.redundancy_stats()["redundancy"] == 2:
        say(f"copies {job.manager.redundancy_stats()}")
    if os.environ.get("LOST_BENCH") and job.rank == 0:
        say(f"setup state {job.manager._state_bytes()} {json.dumps(job.manager.redundancy_stats())}")
    scheduler = None
    if os.environ.get("LOST_SCHED"):
        scheduler = decaying_lr(optimizer)
        job.register_scheduler(scheduler)
    if os.environ.get("LOST_WHEN") == "barrier":
        fail_in_commit(job, step, rank)
    if os.environ.get("LOST_SLOW"):
        slow_forward(model, job, int(step), float(os.environ["LOST_SLOW"]))
    recoveries, ends = 0, []  # ends: (step, wall seconds) after each counted step (LOST_BENCH)
    while job.step < STEPS:
        if kill_here(job, "forward", step, rank, recoveries) or (os.environ.get("LOST_WHEN") == "forward" and
                                                                job.step == int(step) and recoveries == 0):
            kill_into_forward(job, step, rank)
        if kill_here(job, "before", step, rank, recoveries):
            if os.environ.get("LOST_HOW") == "raise":
                raise RuntimeError(f"failed on purpose before step {job.step}")
            say(f"kill at {time.time():.6f}")
            os.kill(os.getpid(), signal.SIGKILL)
        before = job.step
        optimizer.zero_grad()
        loss = loss_of(model, job.local_batch(batch(job.step, GLOBAL_BATCH, DIMS["vocab"], DIMS["seq"])))
        loss.backward()
        if kill_here(job, "backward", step, rank, recoveries):
            say(f"kill at {time.time():.6f}")
            os.kill(os.getpid(), signal.SIGKILL)
        c = job.config  # the layout the step's loss was computed in
        optimizer.step()
        if scheduler is not None:
            scheduler.step()  # registered: a step a loss interrupted leaves it where it was
        if job.step > before:
            ends.append((before, time.perf_counter()))
        if job.step > before and c["tp_rank"] == 0:  # an interrupted step's loss means nothing
            say(f"loss step {before} rank {c['dp_rank']} of {c['dp']} value {loss.item():.9f} pid {os.getpid()} "
                  f"config {c['config']}")
        elif getattr(job, "last_recovery", None) is not None and recoveries == 0:
            recoveries = 1
            if job.rank == 0:
                r = job.last_recovery
                say(f"resumed at {time.time():.6f} stopped {r['stopped_mid_step']} met {r['met_unix_s']:.6f}")
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
                  f"received {r['max_rank_bytes_received']} bare {bare:.4f} copy {copy:.4f} copies {r['copies']}")
    if os.environ.get("LOST_BENCH") and job.rank == 0:
        say("steps " + " ".join(f"{s}:{t:.4f}" for s, t in ends))
    say(f"end pid {os.getpid()} gone {gone_at_end(job, pids)}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
