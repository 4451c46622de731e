"""The adopted job of the Python chaos run (scripts/chaos_python.py): notice_job.py's GPT trained
for STEPS steps under mpirun, or under `dynatrain launch` on torch.distributed, while a driver
sends notices (SIGTERM: vacated live) and kills (SIGKILL: the job ends, the driver starts it again).

  chaos_job.py DIR STEPS LAYOUT

Starts from DIR's checkpoint when there is one (adopt(resume=DIR), in LAYOUT), and saves into DIR
after every optimizer.step(), before rank 0 prints `done step S loss V config C processes N`:
a step printed is a step saved, so a restart after a kill loses none (it re-runs the step that
was in flight). The last step's line travels in the checkpoint (an extra): a restart prints it
again, marked `restored` (a kill may come after a save and before its line). Every process prints `start pid P rank R`; a vacated process `left pid P`.
plain_losses(STEPS) (notice_job.py) is the uninterrupted run: one process, plain torch, the same batches."""
import os
import sys

import torch  # noqa: F401  (before dynatrain)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(HERE)
from notice_job import DIMS, GLOBAL_BATCH, PLAN, batch, loss_of, model_and_optimizer, plain_losses, start_pids  # noqa: E402,F401


def main(directory, steps, layout):
    start_pids()
    import dynatrain
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    print(f"start pid {os.getpid()} rank {rank}", flush=True)
    model, optimizer = model_and_optimizer()
    resume = directory if os.path.exists(os.path.join(directory, "latest")) else None
    job = dynatrain.adopt(model, optimizer, PLAN, layout, pipeline="blocks", vocab_divisible_by=8,
                          bucket_elems=3000, resume=resume, notice_s=30.0)
    # The last step done and its loss travel in the checkpoint: a kill after a save and before
    # its line leaves the line to the restart, which prints it from there, marked restored.
    last = {"done": None}
    job.register("last_done", lambda: last["done"], lambda v: last.update(done=v))
    if last["done"] is not None and job.rank == 0:
        print(f"done step {last['done'][0]} loss {last['done'][1]:.9f} config {job.config['config']} "
              f"processes {job.manager.comm.size} restored", flush=True)
    try:
        while job.step < steps:
            optimizer.zero_grad()
            loss = loss_of(model, job.local_batch(batch(job.step, GLOBAL_BATCH, DIMS["vocab"], DIMS["seq"])))
            loss.backward()
            mean = job.average(loss).item()
            step = job.step
            optimizer.step()  # may vacate processes (a notice), or raise Leaving on this one
            last["done"] = (step, mean)
            job.save(directory)
            if job.rank == 0:
                print(f"done step {step} loss {mean:.9f} config {job.config['config']} "
                      f"processes {job.manager.comm.size}", flush=True)
    except dynatrain.Leaving:
        print(f"left pid {os.getpid()}", flush=True)
        raise
    job.manager.comm.Barrier()  # every process that stays ends together


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
