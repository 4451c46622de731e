"""job.lend() / job.reclaim() on the user's torch.distributed, no MPI: every rank of
`dynatrain launch --np 4 -- python3 c10d_lend_job.py` adopts the example GPT at tp=2,dp=2 over
init_process_group("gloo"), then three rounds of: a step, lend 2 (tp=2,dp=1 on processes 0, 1;
every byte of every parameter where it was), a step while lent, reclaim. Every step's loss equals
a plain single-process copy's within 1e-5 relative; the lent processes hold no state; from the
second round on a lend or reclaim creates no group and no process. Prints `c10d_lend_job ok`."""
import torch
import torch.distributed as dist

from lend_common import adopted, train_step, whole


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def main() -> None:
    dist.init_process_group("gloo")
    size, rank = dist.get_world_size(), dist.get_rank()
    job, model, optimizer, plain, plain_opt = adopted(size)
    expect(type(job.manager.comm).__name__ == "Comm", "the job runs on torch.distributed")
    worst, step = 0.0, 0
    for round_ in range(3):
        worst = max(worst, train_step(job, model, optimizer, plain, plain_opt, step))
        before = whole(job)
        lent = job.lend(2)
        expect(lent["lent"] == [2, 3] and lent["new_processes"] == 0 and job.active == (rank < 2), f"lend: {lent}")
        expect(rank < 2 or job.manager.pool_stats()["live_bytes"] == 0, "a lent process holds no state")
        expect(all(torch.equal(before[k], v) for k, v in whole(job).items()), "every byte where it was")
        worst = max(worst, train_step(job, model, optimizer, plain, plain_opt, step + 1))
        back = job.reclaim()
        expect(job.active and job.manager.comm.size == size and back["new_processes"] == 0, f"reclaim: {back}")
        expect(round_ == 0 or lent["new_groups"] == back["new_groups"] == 0, f"new groups: {lent} {back}")
        step += 2
    expect(worst <= 1e-5, f"largest relative loss difference {worst}")
    print("c10d_lend_job ok", flush=True)


if __name__ == "__main__":
    main()
