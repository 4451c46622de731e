"""Trains the small GPT of gpt_model.py with torch.optim.AdamW.

    mpirun -np 2 python3 examples/torch_gpt.py   # adopted by DynaTrain: switches dp -> tp -> zero
"""
import argparse

import torch
import torch.nn.functional as F

import dynatrain
from gpt_model import GPT, batch
PLAN = {"tok": "vocab", "head": "vocab", "*.[qkv]": "column", "*.fc1": "column", "*.proj": "row", "*.fc2": "row"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--schedule", default="0:dp=2,zero=0;6:tp=2;12:dp=2;18:dp=2,zero=2", help="step:layout;...")
    a = ap.parse_args()
    schedule = dict((int(s), layout) for s, layout in (item.split(":", 1) for item in a.schedule.split(";")))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr)
    job = dynatrain.adopt(model, optimizer, PLAN, schedule.pop(0))
    for step in range(job.step, a.steps):
        if step in schedule:
            job.switch(schedule[step])
        data = batch(step, a.global_batch)
        data = job.local_batch(data)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        loss = job.average(loss)
        if job.rank == 0: print(f"step {step:3d}  loss {loss.item():.8f}", flush=True)  # noqa: E701


if __name__ == "__main__":
    main()
