"""An adopted GPT on torch.distributed (run under `dynatrain launch --np 2`), grown from dp=2 to
dp=4 by processes that join through the job's store, prepared at step 2 and committed at step 4,
then shrunk back to dp=2 in place at step 6. AdamW with decay / no-decay param groups and a
registered warmup + cosine scheduler. The joining processes run this script from the top: their
init_process_group is a world of their own, their adopt() joins. Every process replays plain
single-process torch from step 0 and prints, for each step it trains:
    step S rank R of N joined J pid P lr_ok B loss_ok B
and world rank 0 the grow's statistics:
    grow waited_for W wait_s X startup_s Y pause_s Z
Argument `direct`: no prepare; the switch at step 4 starts the joiners and waits for them.
Argument `die`: the joining processes end (status 3) before they join; the commit raises ValueError
on every process of the job, which trains on in dp=2 (`grow refused on rank R: ...`).
Argument `lost` (under `dynatrain launch --keep-going`): grown to dp=4,zero=0, the joined processes
kill themselves at step 5; the job's two recover in place and redo it (no scheduler here).
Argument `external`: the job starts no process (DT_JOIN_EXTERNAL=1) and prints `store HOST:PORT`;
the test starts the joining processes with `dynatrain launch --join HOST:PORT`.
"""
import copy
import os
import pathlib
import signal
import sys

import torch
import torch.distributed as dist

HERE = pathlib.Path(__file__).resolve().parent
sys.path.append(str(HERE.parents[1] / "examples"))
sys.path.append(str(HERE))
import dynatrain  # noqa: E402
from adopt_grow_job import DIMS, PLAN, STEPS, beside_plain, decay_groups, train, warmup_cosine  # noqa: E402
from gpt_model import GPT, batch  # noqa: E402

PREPARE, GROW, SHRINK = 2, 4, 6
MODE = sys.argv[1] if len(sys.argv) > 1 else "grow"


def boundary(job, step: int) -> bool:
    """The schedule's switch at `step` (before its training)."""
    if step == PREPARE and MODE != "direct":
        job.manager.prepare("dp=4")  # the joining processes start while steps 2 and 3 train
    elif step == GROW and MODE in ("die", "die-registered"):
        try:
            job.switch("dp=4")
        except ValueError as e:  # the joiners ended before they joined: the job trains on in dp=2
            print(f"grow refused on rank {job.rank}: {e}", flush=True)
    elif step == GROW:
        stats = job.switch("dp=4")
        if job.rank == 0 and not job.manager.joined:
            print(f"grow waited_for {stats['waited_for'].replace(' ', '_')} wait_s {stats['join_wait_seconds']:.3f} "
                  f"startup_s {stats['join_startup_seconds']:.3f} pause_s {stats['pause_seconds']:.3f}", flush=True)
    elif step == SHRINK:
        job.switch("dp=2")  # Leaving ends the joined processes (status 0)
    return True


def lost(job, model, optimizer, want) -> None:
    """Mode `lost`: grown to dp=4,zero=0, the two joined processes SIGKILL themselves at step 5; the
    job's processes recover in place over groups made after the grow and redo step 5."""
    while job.step < STEPS:
        step = job.step
        if step == PREPARE and not job.manager.joined:
            job.manager.prepare("dp=4,zero=0")
        elif step == GROW:
            job.switch("dp=4,zero=0")  # in a joined process: the switch it joined in, a no-op
        if step == 5 and job.manager.joined:
            os.kill(os.getpid(), signal.SIGKILL)
        loss = train(model, optimizer, job.local_batch(batch(step, 8, DIMS["vocab"], DIMS["seq"])))
        if job.step == step:  # recovered from the lost processes: the step was not applied, do it again
            continue
        got = job.average(loss).item()
        print(f"step {step} rank {job.rank} of {job.manager.comm.size} joined {job.manager.joined} pid {os.getpid()} "
              f"lr_ok True loss_ok {abs(got - want[step]) <= 1e-5 * abs(want[step])}", flush=True)


def main():
    if MODE == "die" and "DYNATRAIN_JOIN" in os.environ:
        os._exit(3)  # a joining process that ends while it starts
    if MODE == "die-registered" and "DYNATRAIN_JOIN" in os.environ:
        dynatrain._join._arrive = lambda *args, **kwargs: os._exit(3)  # ends once it took its slot
    dist.init_process_group("gloo")
    if MODE == "external":
        os.environ["DT_JOIN_EXTERNAL"] = "1"
        if dist.get_rank() == 0 and "DYNATRAIN_JOIN" not in os.environ:
            print(f"store {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
    torch.manual_seed(0)
    model = GPT(**DIMS)
    plain = copy.deepcopy(model)
    optimizer, plain_opt = decay_groups(model), decay_groups(plain)
    job = dynatrain.adopt(model, optimizer, PLAN, "dp=2", pipeline="blocks", vocab_divisible_by=8, bucket_elems=3000)
    scheduler, plain_sched = warmup_cosine(optimizer), warmup_cosine(plain_opt)
    if MODE == "lost":
        return lost(job, model, optimizer, [train(plain, plain_opt, batch(s, 8, DIMS["vocab"], DIMS["seq"])).item()
                                            for s in range(STEPS)])
    job.register_scheduler(scheduler)  # in a joined process: the job's scheduler state and lr, now
    joined = bool(job.manager.joined)
    for step, lr_ok, loss_ok in beside_plain(job, model, optimizer, plain, plain_opt, scheduler, plain_sched,
                                             lambda step: boundary(job, step)):
        print(f"step {step} rank {job.rank} of {job.manager.comm.size} joined {joined} pid {os.getpid()} "
              f"lr_ok {lr_ok} loss_ok {loss_ok}", flush=True)


if __name__ == "__main__":
    main()
