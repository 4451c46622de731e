"""job.lend() / job.reclaim() on the user's torch.distributed, no MPI: every rank of
`dynatrain launch --np 4 -- python3 c10d_lend_job.py` adopts the example GPT at tp=2,dp=2 over
init_process_group("gloo"), then three rounds of: a step, lend 2 (tp=2,dp=1 on processes 0, 1;
every byte of every parameter where it was), job.refit("tp=2") onto the lent processes (every
byte of the copy equals the job's weights; the user's GPT runs tensor-parallel over the copy and
gives a plain GPT's logits), a step while lent, reclaim. Every step's loss equals a plain
single-process copy's within 1e-5 relative; the lent processes hold no state; from the second
round on a lend, refit or reclaim creates no group and no process; job.refit()'s refusals are
ValueErrors on every rank; a bf16 refit of the fp32 job holds the weights cast to bf16, every
element, and moves half the bytes. Prints `c10d_lend_job ok`."""
import pytest
import torch
import torch.distributed as dist

from lend_common import DIMS, GPT, adopted, batch, train_step, whole


def refit_checked(job, module, before, round_):
    """job.refit("tp=2") onto the lent processes, checked byte by byte and by the module's logits."""
    weights = job.refit("tp=2", module)
    expect(weights.ranks == job.lent == [2, 3] and weights.active == (dist.get_rank() >= 2), "refit ranks")
    for name, full in before.items():
        expect(torch.equal(weights.manager.gather(name, "param"), full), f"the copy's {name}")
    made = weights.last_stats["new_groups"]
    expect(made == 0 if round_ else made > 0, f"refit new groups {made} in round {round_}")
    if weights.active:
        reader, tokens = GPT(**DIMS), batch(5, 4, DIMS["vocab"], DIMS["seq"])[:, :-1]
        reader.load_state_dict(before)
        with torch.no_grad():
            expect(torch.allclose(weights.module(tokens), reader(tokens), rtol=1e-5, atol=1e-6), "tp logits")
    if round_ == 0:  # a bf16 copy of the fp32 job: cast by the senders, half the bytes on the link
        half = job.refit("tp=2", GPT(**DIMS), dtype=torch.bfloat16)
        for name, full in before.items():
            expect(torch.equal(half.manager.gather(name, "param"), full.to(torch.bfloat16)), f"the bf16 copy's {name}")
        got, fp32 = half.last_stats["max_rank_bytes_received"], weights.last_stats["max_rank_bytes_received"]
        expect(2 * got == fp32 > 0, f"bf16 refit bytes {got}, fp32 {fp32}")
        half.release()
    weights.release()
    return weights.module


def refusals(job, model) -> None:
    for bad, match in [(dict(module=GPT(**dict(DIMS, ffn=64))), "differ from the job's model"),
                       (dict(module=GPT(**DIMS), ranks=[0, 0]), "distinct world ranks"),
                       (dict(module=model), "an adopted model")]:
        with pytest.raises(ValueError, match=match):
            job.refit("tp=2", **bad)


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def main() -> None:
    dist.init_process_group("gloo")
    size, rank = dist.get_world_size(), dist.get_rank()
    job, model, optimizer, plain, plain_opt = adopted(size)
    expect(type(job.manager.comm).__name__ == "Comm", "the job runs on torch.distributed")
    worst, step, module = 0.0, 0, GPT(**DIMS)
    for round_ in range(3):
        worst = max(worst, train_step(job, model, optimizer, plain, plain_opt, step))
        before = whole(job)
        lent = job.lend(2)
        expect(lent["lent"] == [2, 3] and lent["new_processes"] == 0 and job.active == (rank < 2), f"lend: {lent}")
        expect(rank < 2 or job.manager.pool_stats()["live_bytes"] == 0, "a lent process holds no state")
        expect(all(torch.equal(before[k], v) for k, v in whole(job).items()), "every byte where it was")
        module = refit_checked(job, module, before, round_)  # the same module: a refresh
        if round_ == 0:
            refusals(job, model)
        worst = max(worst, train_step(job, model, optimizer, plain, plain_opt, step + 1))
        back = job.reclaim()
        expect(job.active and job.manager.comm.size == size and back["new_processes"] == 0, f"reclaim: {back}")
        expect(round_ == 0 or lent["new_groups"] == back["new_groups"] == 0, f"new groups: {lent} {back}")
        step += 2
    expect(worst <= 1e-5, f"largest relative loss difference {worst}")
    print("c10d_lend_job ok", flush=True)


if __name__ == "__main__":
    main()
