"""An adopted GPT trained as scripts train it: AdamW with decay / no-decay param groups and a
registered warmup + cosine SequentialLR and a counting buffer, grown from 2 to 4 processes at step 3 and shrunk back
at step 6 (run under `mpirun -np 2`; processes the grow starts run this script from the top and
their adopt() joins). Every process replays plain single-process torch from step 0 and prints,
for each step it trains, whether its lr (and buffer) and the job's mean loss equal the plain run's:
    step S rank R of N joined J lr_ok B loss_ok B
"""
import copy
import pathlib
import sys

import torch
import torch.nn.functional as F

import dynatrain

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from gpt_model import GPT, batch  # noqa: E402

DIMS = dict(vocab=50, hidden=16, heads=4, ffn=32, layers=2, seq=8)
PLAN = {"tok": "vocab", "head": "vocab", "*.[qkv]": "column", "*.fc1": "column", "*.proj": "row", "*.fc2": "row"}
SCHEDULE = {3: "dp=4", 6: "dp=2"}
STEPS = 8


def decay_groups(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=3e-3)


def warmup_cosine(optimizer):
    warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=2)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6)
    return torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cos], milestones=[2])


def train(model, optimizer, data):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    return loss


def beside_plain(job, model, optimizer, plain, plain_opt, scheduler, plain_sched, before):
    """Trains the job and the plain copy; yields (step, lr_ok, loss_ok) for every step this process
    trains (a joined process replays only the plain run up to the job's step). before(step), at
    each trained step first (its switch), returns whether its own checks passed."""
    for step in range(STEPS):
        data = batch(step, 8, DIMS["vocab"], DIMS["seq"])
        trains = step >= job.step
        if trains:
            ok = before(step)
            lr_ok = ok and [g["lr"] for g in optimizer.param_groups] == [g["lr"] for g in plain_opt.param_groups]
            got = job.average(train(model, optimizer, job.local_batch(data))).item()
        want = train(plain, plain_opt, data).item()
        plain_sched.step()
        if trains:
            scheduler.step()
            yield step, lr_ok, abs(got - want) <= 1e-5 * abs(want)


def main():
    torch.manual_seed(0)
    model = GPT(**DIMS)
    model.register_buffer("steps_seen", torch.zeros(1))  # module state outside the parameters
    plain = copy.deepcopy(model)
    optimizer, plain_opt = decay_groups(model), decay_groups(plain)
    job = dynatrain.adopt(model, optimizer, PLAN, "dp=2", pipeline="blocks", vocab_divisible_by=8, bucket_elems=3000)
    scheduler, plain_sched = warmup_cosine(optimizer), warmup_cosine(plain_opt)  # from epoch 0, as a script does
    job.register_scheduler(scheduler)  # in a joined process: the job's scheduler state and lr, now
    joined = bool(job.manager.joined)

    def before(step: int) -> bool:
        if step in SCHEDULE:
            job.switch(SCHEDULE[step])  # Leaving ends the processes the shrink lets go
        ok = model.steps_seen.item() == step  # a joined process gets the job's buffer
        model.steps_seen += 1
        return ok
    for step, lr_ok, loss_ok in beside_plain(job, model, optimizer, plain, plain_opt, scheduler, plain_sched, before):
        print(f"step {step} rank {job.rank} of {job.manager.comm.size} joined {joined} lr_ok {lr_ok} "
              f"loss_ok {loss_ok}", flush=True)


if __name__ == "__main__":
    main()
