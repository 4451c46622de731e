"""A mixture-of-experts model trained adopted: AdamW, cross-entropy plus 0.01 times the
load-balancing loss, clipping (--stacked: the experts as 3-D parameters instead of an nn.ModuleList), through
expert-parallel layouts (--schedule); moe_plain.py is the same script in one plain process."""
import dynatrain
import torch
import torch.nn.functional as F

from gpt_model import batch
from moe_model import SEQ, VOCAB, MoEModel, arguments
PLAN = {"tok": "vocab", "head": "vocab", "*.qkv": "qkv", "*.o": "row", "*.moe": "experts"}


def main():
    a = arguments(__doc__.split("\n")[0], "0:dp=2;4:dp=2,ep=2;8:tp=2,ep=2")
    schedule = dict((int(s), layout) for s, layout in (item.split(":", 1) for item in a.schedule.split(";")))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = MoEModel(stacked=a.stacked)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.1)
    job = dynatrain.adopt(model, optimizer, PLAN, schedule.pop(min(schedule)))
    for step in range(a.steps):
        if step in schedule: job.switch(schedule[step])  # noqa: E701
        data = job.local_batch(batch(step, a.global_batch, VOCAB, SEQ))
        optimizer.zero_grad()
        ce = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
        aux = model.aux_loss()
        (ce + 0.01 * aux).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.9)
        ce, aux = job.average(ce), job.average(aux)
        if job.rank == 0: print(f"step {step:3d}  loss {ce.item():.8f}  aux {aux.item():.8f}  norm {norm.item():.8f}", flush=True)  # noqa
        optimizer.step()


if __name__ == "__main__":
    main()
