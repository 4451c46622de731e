"""A mixture-of-experts model trained in one process: AdamW, cross-entropy plus 0.01 times the
load-balancing loss, clipping (--stacked: the experts as 3-D parameters instead of an nn.ModuleList)."""
import torch
import torch.nn.functional as F

from gpt_model import batch
from moe_model import SEQ, VOCAB, MoEModel, arguments


def main():
    a = arguments(__doc__.split("\n")[0])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = MoEModel(stacked=a.stacked)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.1)
    for step in range(a.steps):
        data = batch(step, a.global_batch, VOCAB, SEQ)
        optimizer.zero_grad()
        ce = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
        aux = model.aux_loss()
        (ce + 0.01 * aux).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.9)
        print(f"step {step:3d}  loss {ce.item():.8f}  aux {aux.item():.8f}  norm {norm.item():.8f}", flush=True)
        optimizer.step()


if __name__ == "__main__":
    main()
