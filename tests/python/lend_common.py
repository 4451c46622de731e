"""What the lend / refit tests share (test_lend.py under mpirun, c10d_lend_job.py under
`dynatrain launch`): the example GPT, its plan, one training step beside a plain copy, and the
whole of every parameter. No mpi4py here: the c10d job runs without MPI."""
import pathlib
import sys

import torch
import torch.nn.functional as F

import dynatrain

sys.path.append(str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from gpt_model import GPT, batch, plain_step  # noqa: E402

PLAN = {"tok": "vocab", "head": "vocab", "*.[qkv]": "column", "*.fc1": "column", "*.proj": "row", "*.fc2": "row"}
DIMS = dict(vocab=50, hidden=16, heads=4, ffn=32, layers=2, seq=8)


def adopted(size):
    torch.manual_seed(0)
    model, plain = GPT(**DIMS), GPT(**DIMS)
    plain.load_state_dict(model.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    layout = "tp=2,dp=2" if size == 4 else "dp=2"
    job = dynatrain.adopt(model, optimizer, PLAN, layout, vocab_divisible_by=8, bucket_elems=3000)
    return job, model, optimizer, plain, torch.optim.AdamW(plain.parameters(), lr=1e-2)


def loss_of(model, data):
    return F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())


def train_step(job, model, optimizer, plain, plain_opt, step, zero_grad=True):
    """One step of the job (lent processes: the step's collective part only) and of the plain
    copy on the whole batch; the relative difference of the losses (0 on a lent process).
    zero_grad=False: no optimizer.zero_grad() first (right after a lend or reclaim, whose grads
    the forward zeroes)."""
    data = batch(step, 8, DIMS["vocab"], DIMS["seq"])
    want = plain_step(plain, plain_opt, data)
    if zero_grad:
        optimizer.zero_grad()
    if not job.active:
        optimizer.step()
        return 0.0
    loss = loss_of(model, job.local_batch(data))
    loss.backward()
    optimizer.step()
    return abs(job.average(loss).item() - want.item()) / want.item()


def whole(job):
    return {name: job.full(name) for name, _ in job.model.named_parameters()}
