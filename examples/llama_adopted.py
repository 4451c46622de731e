"""A Llama-style model trained the way LLM scripts train: AdamW with decay and no-decay groups,
gradient clipping, warmup + cosine SequentialLR, a checkpoint (--save / --save-at, --resume)."""
import argparse

import dynatrain
import torch
import torch.nn.functional as F

from gpt_model import batch
from llama_model import SEQ, VOCAB, Llama, warmup_cosine
PLAN = {"tok": "vocab", "head": "vocab", "*.qkv": "qkv", "*.o": "row", "*.gate": "column", "*.up": "column", "*.down": "row"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=24, help="optimizer steps (the cosine ends there)")
    ap.add_argument("--global-batch", type=int, default=8, help="sequences per step, over all processes")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--schedule", type=dynatrain.parse_schedule, default="0:dp=2,zero=0;6:tp=2;12:dp=2,zero=2")
    ap.add_argument("--save", help="checkpoint file, written after --save-at steps")
    ap.add_argument("--save-at", type=int, default=-1)
    ap.add_argument("--resume", help="checkpoint file to resume from")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Llama()
    optimizer = model.configure_optimizers(weight_decay=0.1, lr=a.lr)
    scheduler = warmup_cosine(optimizer, warmup=4, steps=a.steps, min_lr=a.lr / 10)
    job = dynatrain.adopt(model, optimizer, PLAN, a.schedule.pop(min(a.schedule)), scheduler=scheduler)
    ckpt = torch.load(a.resume) if a.resume else {"step": job.step}
    for name, state in (("model", model), ("optimizer", optimizer), ("scheduler", scheduler)):
        if name in ckpt: state.load_state_dict(ckpt[name])  # noqa: E701
    for step in range(ckpt["step"], a.steps):
        if step in a.schedule: job.switch(a.schedule[step])  # noqa: E701
        data = job.local_batch(batch(step, a.global_batch, VOCAB, SEQ))
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        job.print(f"step {step:3d}  loss {job.average(loss).item():.8f}  lr {scheduler.get_last_lr()[0]!r}", flush=True)
        optimizer.step()
        scheduler.step()
        if step + 1 == a.save_at:
            ckpt = {"model": job.state_dict(), "optimizer": job.optimizer_state_dict(),
                    "scheduler": scheduler.state_dict(), "step": step + 1}
            if job.rank == 0: torch.save(ckpt, a.save)  # noqa: E701


if __name__ == "__main__":
    main()
