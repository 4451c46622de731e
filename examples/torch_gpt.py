"""A small GPT in torch.nn, trained with tensor + data parallelism on DynaTrain's state, switching
layouts mid-run. Runs twice: static (the first layout throughout) and switching; same data, same
global batch. Prints both losses and the largest difference.

    mpirun -np 4 python3 examples/torch_gpt.py --schedule "0:tp=2,dp=2;20:dp=4;40:tp=4"

Everything the training touches (weights, grads, Adam moments, fp32 master) lives in the
manager's buffers; the modules' parameters and the optimizer's state are views of them.
"""
import argparse
import math
import sys

import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from mpi4py import MPI

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1] / "build" / "python"))  # if PYTHONPATH lacks it
import dynatrain  # noqa: E402

V, H, HEADS, FFN, LAYERS, SEQ = 64, 64, 4, 256, 2, 32


def gpt_tensors():
    """The model for DynaTrain: each logical tensor, its global shape and how TP splits it."""
    T = dynatrain.Tensor
    t = [T("embed", [V, H], stage="pre"), T("pos", [SEQ, H], stage="pre")]
    for l in range(LAYERS):
        t += [T(f"{l}.ln1.w", [H], layer=l), T(f"{l}.ln1.b", [H], layer=l),
              T(f"{l}.qkv.w", [3, H, H], split="dim", dim=1, layer=l), T(f"{l}.qkv.b", [3, H], split="dim", dim=1, layer=l),
              T(f"{l}.proj.w", [H, H], split="dim", dim=1, layer=l), T(f"{l}.proj.b", [H], layer=l),
              T(f"{l}.ln2.w", [H], layer=l), T(f"{l}.ln2.b", [H], layer=l),
              T(f"{l}.fc1.w", [FFN, H], split="dim", dim=0, layer=l), T(f"{l}.fc1.b", [FFN], split="dim", dim=0, layer=l),
              T(f"{l}.fc2.w", [H, FFN], split="dim", dim=1, layer=l), T(f"{l}.fc2.b", [H], layer=l)]
    t += [T("lnf.w", [H], stage="post"), T("lnf.b", [H], stage="post"), T("head", [V, H], stage="post")]
    return dynatrain.Model(t, layers=LAYERS, name="torch-gpt")


def all_reduce(x, comm):
    if comm is not None and comm.size > 1:
        comm.Allreduce(MPI.IN_PLACE, x.detach().numpy())
    return x


class CopyToTP(torch.autograd.Function):  # identity forward, sum of input grads over tp backward
    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x

    @staticmethod
    def backward(ctx, g):
        return all_reduce(g.contiguous(), ctx.tp), None


class ReduceFromTP(torch.autograd.Function):  # sum of partial outputs over tp forward
    @staticmethod
    def forward(ctx, x, tp):
        return all_reduce(x.contiguous(), tp)

    @staticmethod
    def backward(ctx, g):
        return g, None


class ColumnLinear(nn.Module):  # output features split over tp: y_local = x W_local^T + b_local
    def __init__(self, w, b, tp):
        super().__init__()
        self.w, self.b, self.tp = nn.Parameter(w), nn.Parameter(b), tp

    def forward(self, x):
        return F.linear(CopyToTP.apply(x, self.tp), self.w, self.b)


class RowLinear(nn.Module):  # input features split over tp: y = sum_tp(x_local W_local^T) + b
    def __init__(self, w, b, tp):
        super().__init__()
        self.w, self.b, self.tp = nn.Parameter(w), nn.Parameter(b), tp

    def forward(self, x):
        return ReduceFromTP.apply(F.linear(x, self.w), self.tp) + self.b


class Block(nn.Module):
    def __init__(self, p, l, tp):
        super().__init__()
        size = tp.size if tp else 1
        self.heads = HEADS // size
        self.ln1, self.ln2 = nn.LayerNorm(H), nn.LayerNorm(H)
        self.ln1.weight, self.ln1.bias = nn.Parameter(p[f"{l}.ln1.w"]), nn.Parameter(p[f"{l}.ln1.b"])
        self.ln2.weight, self.ln2.bias = nn.Parameter(p[f"{l}.ln2.w"]), nn.Parameter(p[f"{l}.ln2.b"])
        self.qkv = ColumnLinear(p[f"{l}.qkv.w"].view(-1, H), p[f"{l}.qkv.b"].view(-1), tp)
        self.proj = RowLinear(p[f"{l}.proj.w"], p[f"{l}.proj.b"], tp)
        self.fc1 = ColumnLinear(p[f"{l}.fc1.w"], p[f"{l}.fc1.b"], tp)
        self.fc2 = RowLinear(p[f"{l}.fc2.w"], p[f"{l}.fc2.b"], tp)

    def forward(self, x):
        B, S, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, 3, self.heads, H // HEADS).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(H // HEADS)
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        x = x + self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, -1))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, p, tp):
        super().__init__()
        self.embed, self.pos, self.head = nn.Parameter(p["embed"]), nn.Parameter(p["pos"]), nn.Parameter(p["head"])
        self.blocks = nn.ModuleList(Block(p, l, tp) for l in range(LAYERS))
        self.lnf = nn.LayerNorm(H)
        self.lnf.weight, self.lnf.bias = nn.Parameter(p["lnf.w"]), nn.Parameter(p["lnf.b"])

    def forward(self, tokens):
        x = self.embed[tokens] + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return F.linear(self.lnf(x), self.head)


def batch(step, global_batch):
    """Deterministic data: a random sparse Markov chain over V tokens (learnable, not trivial)."""
    g = torch.Generator().manual_seed(1000 + step)
    succ = torch.randint(0, V, (V, 2), generator=torch.Generator().manual_seed(7))
    seq = torch.empty(global_batch, SEQ + 1, dtype=torch.long)
    seq[:, 0] = torch.randint(0, V, (global_batch,), generator=g)
    for i in range(SEQ):
        seq[:, i + 1] = succ[seq[:, i], torch.randint(0, 2, (global_batch,), generator=g)]
    return seq


def bind(m, lr):
    """Modules and a torch.optim.Adam whose parameters, grads and moments view the manager's buffers."""
    c = m.config
    if c["pp"] > 1 or c["cp"] > 1 or c["zero"] >= 2:
        raise SystemExit(f"this example runs tp, dp and zero 0/1 only, not {c['config']}")
    if not c["active"]:  # this rank holds nothing in this layout: it waits for the next switch
        return None, None
    params, grads = m.tensors("param"), m.tensors("grad")
    model = GPT(params, m.group("tp"))
    grad_at = {params[n].data_ptr(): grads[n] for n in params}
    for p in model.parameters():  # autograd accumulates into these views (no copy)
        p.grad = grad_at[p.data_ptr()].view_as(p)
    model.grad_views = [(p, p.grad.data_ptr()) for p in model.parameters()]
    masters = [nn.Parameter(b) for b in m.buffers("master")]
    opt = torch.optim.Adam(masters, lr=lr)
    for p, b, ea, eas, info in zip(masters, m.buffers("grad"), m.buffers("exp_avg"), m.buffers("exp_avg_sq"), m.buckets):
        p.grad = b[info["shard_lo"]:info["shard_hi"]] if m.config["zero"] >= 1 else b
        opt.state[p] = {"step": torch.tensor(float(m.step)), "exp_avg": ea, "exp_avg_sq": eas}
    return model, opt


def train(schedule, steps, global_batch, lr):
    world = MPI.COMM_WORLD
    # Fixed processes: layouts smaller than the job leave ranks idle until the next switch.
    m = dynatrain.Manager(world, gpt_tensors(), schedule[0], bucket_elems=20_000, elastic=False)
    for name in m.names:  # the same initial model in every layout: a function of the name only
        g = torch.Generator().manual_seed(sum(map(ord, name)))
        full = torch.ones(m.global_shape(name)) if name.endswith("ln1.w") or name.endswith("ln2.w") or name == "lnf.w" \
            else torch.randn(m.global_shape(name), generator=g) * 0.02
        m.load(name, "param", full)
        m.load(name, "master", full)
    m.register("torch_rng", torch.get_rng_state, torch.set_rng_state)  # carried by every switch
    losses, switches = [], []
    model, opt = bind(m, lr)
    for step in range(steps):
        if step > 0 and step in schedule:
            switches.append(m.switch(schedule[step]))
            model, opt = bind(m, lr)
        c = m.config
        loss = torch.zeros(1)
        if c["active"]:
            for b in m.buffers("grad"):
                b.zero_()
            data = batch(step, global_batch).chunk(c["dp"])[c["dp_rank"]]
            local = F.cross_entropy(model(data[:, :-1]).reshape(-1, V), data[:, 1:].reshape(-1))
            local.backward()
            assert all(p.grad.data_ptr() == ptr for p, ptr in model.grad_views), "autograd replaced a grad view"
            loss = all_reduce(local.detach().reshape(1), m.group("dp")) / c["dp"]
            for b in m.buffers("grad"):  # data parallel: mean gradient over the dp group
                all_reduce(b, m.group("dp")).div_(c["dp"])
            opt.step()
            for p, b, info in zip(m.buffers("master"), m.buffers("param"), m.buckets):
                if c["zero"] >= 1:  # ZeRO-1: each dp rank updated its shard; share the new weights
                    b[info["shard_lo"]:info["shard_hi"]] = p
                    if c["dp"] > 1:  # dp_cp: the group ZeRO shards over, in shard order
                        m.group("dp_cp").Allgather(MPI.IN_PLACE, b.numpy())
                else:
                    b.copy_(p)
        m.step += 1
        losses.append(world.bcast(loss.item(), root=0))
    return losses, switches


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedule", default="0:tp=2,dp=2;20:dp=4;40:tp=4")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--tolerance", type=float, default=1e-3, help="exit 1 if the losses differ by more")
    a = ap.parse_args()
    torch.set_num_threads(1)
    schedule = dict((int(s), cfg) for s, cfg in (item.split(":", 1) for item in a.schedule.split(";")))
    if 0 not in schedule:
        raise SystemExit("--schedule must start at step 0")
    static, _ = train({0: schedule[0]}, a.steps, a.global_batch, a.lr)
    switching, switches = train(schedule, a.steps, a.global_batch, a.lr)
    diff = max(abs(x - y) for x, y in zip(static, switching))
    if MPI.COMM_WORLD.rank == 0:
        for s in switches:
            print(f"switch to {s['config']}: pause {s['pause_seconds'] * 1e3:.1f} ms, "
                  f"{s['bytes_sent'] / 1e6:.2f} MB sent, {s['bytes_kept'] / 1e6:.2f} MB kept")
        for step in sorted(set(range(0, a.steps, 10)) | {a.steps - 1}):
            print(f"step {step:3d}  static {static[step]:.6f}  switching {switching[step]:.6f}")
        print(f"largest loss difference: {diff:.3g} (tolerance {a.tolerance:g})")
    sys.exit(0 if diff <= a.tolerance else 1)


if __name__ == "__main__":
    main()
