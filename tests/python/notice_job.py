"""An adopted GPT trained under mpirun while a process gets a signal (test_notice.py):

  notice_job.py LAYOUT one STEP RANKS  SIGTERM to the processes of world RANKS (1 or 1,3) before step STEP
                                       (a LAYOUT of fewer ranks than processes leaves the last ones idle)
  notice_job.py LAYOUT all STEP DIR    SIGTERM to every process before step STEP (saved into DIR)
  notice_job.py LAYOUT kill STEP RANK  the process holding RANK SIGKILLs itself before step STEP

Each process prints `start pid P`; the rank 0 of the moment prints `loss step S value V pid P
config C` before each optimizer.step() (whose step may vacate it); a process that leaves prints
`left pid P`; each survivor prints `end pid P gone G` (G: the start pids whose process is gone).
plain_losses() is the uninterrupted run: one process, plain torch, the same batches.
Started by `dynatrain launch` (RANK set, no mpirun) it runs on torch.distributed (gloo).
NOTICE_S: adopt()'s notice_s (default 30)."""
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "examples"))
from gpt_model import GPT, batch  # noqa: E402

PLAN = {"tok": "vocab", "head": "vocab", "*.[qkv]": "column", "*.fc1": "column", "*.proj": "row", "*.fc2": "row"}
DIMS = dict(vocab=50, hidden=16, heads=4, ffn=32, layers=2, seq=8)
STEPS, GLOBAL_BATCH = 8, 12  # 12 splits into dp = 1, 2, 3, 4


def model_and_optimizer():
    torch.manual_seed(0)
    model = GPT(**DIMS)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def loss_of(model, data):
    return F.cross_entropy(model(data[:, :-1]).flatten(0, 1).float(), data[:, 1:].flatten())


def decaying_lr(optimizer):
    """An LR schedule whose every step shows in the losses (lost_job.py's LOST_SCHED=1)."""
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)


def plain_losses(steps=STEPS, scheduled=False):
    model, optimizer = model_and_optimizer()
    scheduler = decaying_lr(optimizer) if scheduled else None
    out = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = loss_of(model, batch(step, GLOBAL_BATCH, DIMS["vocab"], DIMS["seq"]))
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        out.append(loss.item())
    return out


def gone(pid):
    """Whether process `pid` has ended (missing, or a zombie not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def signal_before_step(job, mode, step, target):
    if job.step != step:
        return
    if mode == "all" or str(job.manager.comm.rank) in target.split(","):  # world ranks: idle ones too
        os.kill(os.getpid(), signal.SIGKILL if mode == "kill" else signal.SIGTERM)
        time.sleep(0.2)  # the signal is handled before the step goes on


def start_pids():
    """Every process's pid, by rank (initialises torch.distributed under `dynatrain launch`)."""
    if "RANK" in os.environ and "OMPI_COMM_WORLD_RANK" not in os.environ:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        pids = [None] * dist.get_world_size()
        dist.all_gather_object(pids, os.getpid())
        return pids
    from mpi4py import MPI
    return MPI.COMM_WORLD.allgather(os.getpid())


def main(layout, mode, step, arg):
    pids = start_pids()
    import dynatrain
    print(f"start pid {os.getpid()}", flush=True)
    model, optimizer = model_and_optimizer()
    job = dynatrain.adopt(model, optimizer, PLAN, layout, pipeline="blocks", vocab_divisible_by=8,
                          bucket_elems=3000, notice_save=arg if mode == "all" else None,
                          notice_s=float(os.environ.get("NOTICE_S", "30")))
    try:
        while job.step < STEPS:
            signal_before_step(job, mode, int(step), arg)
            optimizer.zero_grad()
            if job.active:  # a process that holds no rank skips the step's compute
                loss = loss_of(model, job.local_batch(batch(job.step, GLOBAL_BATCH, DIMS["vocab"], DIMS["seq"])))
                loss.backward()
                mean = job.average(loss).item()
                if job.rank == 0:
                    print(f"loss step {job.step} value {mean:.9f} pid {os.getpid()} config {job.config['config']}",
                          flush=True)
            optimizer.step()
    except dynatrain.Leaving:
        print(f"left pid {os.getpid()} active {job.active}", flush=True)
        raise
    print(f"end pid {os.getpid()} gone {gone_at_end(job, pids)}", flush=True)


def gone_at_end(job, pids):
    """Collective over the survivors: the start pids whose process is gone (waits up to 20 s
    for one to go, so that a process that just left is seen gone)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(gone(p) for p in pids):
        time.sleep(0.1)
    job.manager.comm.Barrier()  # every survivor is alive from here to the next barrier
    ended = [p for p in pids if gone(p)]
    job.manager.comm.Barrier()
    return ended


if __name__ == "__main__":
    main(*sys.argv[1:5])
