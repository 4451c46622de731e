"""REINFORCE on examples/gpt_model.py: the model learns to write a prompt's digits in sorted order
(the reward, computed by code, is the fraction of positions right). Each iteration, with
--mode shift (DynaTrain's RL phase shifts):

    job.lend(n)         the training state leaves n processes (they stay in the job)
    job.refit(...)      a weights-only copy in an inference layout lands on them
    generate            they sample completions with the user's own GPT, tensor-parallel
    weights.release()   the copy's memory goes back to the pool
    job.reclaim()       they take their training state back (no new process, groups cached)
    train               one REINFORCE step of the whole job on the samples

--mode static is the same loop on a fixed trainer whose generator gathers the full weights on
every process (job.full, the OpenRLHF / verl pattern); same seeds, so the losses agree.

    mpirun -np 4 python3 examples/rl_sort.py                 # tp=2,dp=2; lends 2; generates at tp=2
    mpirun -np 4 python3 examples/rl_sort.py --mode static
    dynatrain launch --np 4 -- python3 examples/rl_sort.py   # the same on torch.distributed (Gloo)
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import dynatrain
from gpt_model import GPT

PLAN = {"tok": "vocab", "head": "vocab", "*.[qkv]": "column", "*.fc1": "column", "*.proj": "row", "*.fc2": "row"}
DIGITS, SEP = 4, 10  # a prompt is DIGITS digits and SEP; the completion is DIGITS digits
DIMS = dict(vocab=11, hidden=32, heads=4, ffn=64, layers=2, seq=2 * DIGITS)


class TorchWorld:
    """The two calls the loop makes of its world (rank, bcast), on torch.distributed."""

    def __init__(self):
        dist.init_process_group("gloo")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def bcast(self, value, root=0):
        box = [value]
        dist.broadcast_object_list(box, src=root)
        return box[0]


def world_of():
    """Under `dynatrain launch` (MASTER_ADDR and WORLD_SIZE set, no mpirun): torch.distributed,
    which the job then runs on; else MPI.COMM_WORLD."""
    if "MASTER_ADDR" in os.environ and "WORLD_SIZE" in os.environ and "OMPI_COMM_WORLD_SIZE" not in os.environ:
        return TorchWorld()
    from mpi4py import MPI
    return MPI.COMM_WORLD


def prompts(it, size):
    g = torch.Generator().manual_seed(500 + it)
    return torch.cat([torch.randint(0, 10, (size, DIGITS), generator=g), torch.full((size, 1), SEP)], 1)


@torch.no_grad()
def generate(model, start, it):
    """Samples DIGITS tokens after each prompt (temperature 1, seeded by the iteration)."""
    g, tokens = torch.Generator().manual_seed(900 + it), start
    for _ in range(DIGITS):
        probs = model(tokens)[:, -1].float().softmax(-1)
        tokens = torch.cat([tokens, torch.multinomial(probs, 1, generator=g)], 1)
    return tokens


def reward(tokens):
    want = tokens[:, :DIGITS].sort(1).values
    return (tokens[:, DIGITS + 1:] == want).float().mean(1)


def reinforce_step(job, model, optimizer, samples):
    """One step on the global batch: loss = -(reward - mean reward) * log p(completion)."""
    r = reward(samples)
    advantage = job.local_batch(r - r.mean())
    tokens = job.local_batch(samples)
    optimizer.zero_grad()
    logp = F.log_softmax(model(tokens[:, :-1]).float(), -1).gather(-1, tokens[:, 1:, None])[..., 0]
    loss = -(advantage * logp[:, DIGITS:].sum(1)).mean()
    loss.backward()
    optimizer.step()
    return job.average(loss).item(), r.mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["shift", "static"], default="shift")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    world = world_of()
    layout, lend, infer = ("tp=2,dp=2", 2, "tp=2") if world.size == 4 else ("dp=2", 1, "tp=1")
    torch.manual_seed(0)
    model, generator = GPT(**DIMS), GPT(**DIMS)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    job = dynatrain.adopt(model, optimizer, PLAN, layout, vocab_divisible_by=1, bucket_elems=20_000)
    for it in range(a.iters):
        start, t0 = prompts(it, a.batch), time.perf_counter()
        if a.mode == "shift":
            lent = job.lend(lend)
            weights = job.refit(infer, generator)
            samples = generate(weights.module, start, it) if weights.active else None
            weights.release()  # the copy's memory goes back for the training state
            back = job.reclaim()
            samples = world.bcast(samples, root=weights.ranks[0])
            shifts = (lent["pause_seconds"], weights.last_stats["pause_seconds"], back["pause_seconds"],
                      lent["new_groups"] + weights.last_stats["new_groups"] + back["new_groups"])
        else:
            generator.load_state_dict({name: job.full(name) for name, _ in model.named_parameters()})
            samples, shifts = generate(generator, start, it), None
        loss, mean_reward = reinforce_step(job, model, optimizer, samples)
        if world.rank == 0:
            print(f"iter {it:3d}  loss {loss:.8f}  reward {mean_reward:.4f}  seconds {time.perf_counter() - t0:.3f}",
                  flush=True)
            if shifts:
                print("  lend %.4f s  refit %.4f s  reclaim %.4f s  new groups %d" % shifts, flush=True)


if __name__ == "__main__":
    main()
