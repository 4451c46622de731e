"""Trains the small GPT of gpt_model.py with torch.optim.AdamW.

    python3 examples/train_plain.py   # one plain process
"""
import argparse

import torch
import torch.nn.functional as F

from gpt_model import GPT, batch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr)
    for step in range(a.steps):
        data = batch(step, a.global_batch)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        print(f"step {step:3d}  loss {loss.item():.8f}", flush=True)


if __name__ == "__main__":
    main()
