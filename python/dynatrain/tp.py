"""Tensor-parallel module styles for adopted models: the collectives a split needs, installed on
the user's own nn.Linear / nn.Embedding modules so that their forward code does not change.

    "column"  nn.Linear, weight rows and bias split over tp: input copied (grad all-reduced),
              output stays sharded on its last dim.
    "row"     nn.Linear, weight columns split over tp: local matmul, all-reduce over tp, then
              the (replicated) bias once.
    "vocab"   nn.Embedding: vocab-parallel lookup (rows outside this rank's range masked) and an
              all-reduce. nn.Linear output head: output rows split (Megatron vocab padding),
              gathered along the last dim and the padding stripped, so the logits keep the
              user's vocab size.
    "attention", "qkv"  nn.MultiheadAttention and fused [q; k; v] nn.Linear, split on head
              boundaries (_attention.py).

Every collective reads the tp communicator and this rank's tp coordinate from `tp_of()` when it
runs, not when it is installed: the group changes at each switch. Tensors are on the CPU and
reduced through mpi4py, or through torch.distributed when the group is a _c10d.Comm (a Manager on
torch.distributed); bfloat16 is reduced in float32 (numpy has no bfloat16) and gathered as bytes.
"""
from __future__ import annotations

import types
from typing import Any, Callable, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _attention
from ._c10d import is_c10d

TpOf = Callable[[], Tuple[Any, int]]  # () -> (tp communicator or None, vocab size or 0)

MODULE_STYLES = {"column": nn.Linear, "row": nn.Linear, "vocab": (nn.Embedding, nn.Linear), "qkv": nn.Linear,
                 "attention": nn.MultiheadAttention}


def _sum_in_place(t: torch.Tensor, comm) -> None:
    """float32 `t` summed over `comm` in place."""
    if is_c10d(comm):
        comm.all_reduce_(t)
    else:
        from mpi4py import MPI
        comm.Allreduce(MPI.IN_PLACE, t.numpy())


def all_reduce_(t: torch.Tensor, comm) -> torch.Tensor:
    """Sums `t` (contiguous, CPU) over `comm` in place; a no-op for no group or one rank."""
    if comm is None or comm.size == 1:
        return t
    if t.dtype == torch.float32:
        _sum_in_place(t, comm)
    else:
        wide = t.float()
        _sum_in_place(wide, comm)
        t.copy_(wide)
    return t


def reduce_scatter_(src: torch.Tensor, dst: torch.Tensor, comm) -> torch.Tensor:
    """dst = this rank's part (rank order, equal parts) of the sum of every rank's `src`.
    On torch.distributed (Gloo has no reduce-scatter): an all-reduce of a float32 copy."""
    if is_c10d(comm):
        wide = src.float().clone() if src.dtype == torch.float32 else src.float()
        comm.all_reduce_(wide)
        dst.copy_(wide.view(comm.size, -1)[comm.rank].view(dst.shape))
        return dst
    from mpi4py import MPI
    if src.dtype == torch.float32:
        comm.Reduce_scatter_block(src.numpy(), dst.numpy(), op=MPI.SUM)
    else:
        wide = torch.empty(dst.shape, dtype=torch.float32)
        comm.Reduce_scatter_block(src.float().numpy(), wide.numpy(), op=MPI.SUM)
        dst.copy_(wide)
    return dst


def all_gather_last(t: torch.Tensor, comm) -> torch.Tensor:
    """Concatenation over `comm` (in rank order) along the last dim of every rank's `t`."""
    if comm is None or comm.size == 1:
        return t
    local = t.contiguous()
    parts = torch.empty((comm.size,) + tuple(local.shape), dtype=local.dtype)
    _gather(comm, parts, local)
    return torch.cat(list(parts.unbind(0)), dim=-1)


def all_gather_in_place_(flat: torch.Tensor, comm) -> None:
    """Every rank's part (rank order, equal parts) of 1-D `flat` from its owner, in place."""
    if is_c10d(comm):
        parts = flat.view(comm.size, -1)
        _gather(comm, parts, parts[comm.rank].clone())
    else:
        from mpi4py import MPI
        comm.Allgather(MPI.IN_PLACE, _raw(flat))


def broadcast_(t: torch.Tensor, comm, root: int = 0) -> None:
    """Rank `root`'s values of contiguous `t` on every rank of `comm`, in place."""
    if is_c10d(comm):
        comm.broadcast_(_bytes(t), root=root)
    else:
        comm.Bcast(_raw(t), root=root)


def _gather(comm, parts: torch.Tensor, local: torch.Tensor) -> None:
    """parts[i] = rank i's `local` (parts: (comm.size,) + local.shape, contiguous)."""
    if is_c10d(comm):
        comm.all_gather_(list(_bytes(parts).unbind(0)), _bytes(local))
    else:
        comm.Allgather(_raw(local), _raw(parts))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """`t` as a type Gloo moves (bfloat16 as bytes, the last dim twice as long)."""
    return t.view(torch.uint8) if t.dtype == torch.bfloat16 else t


def _raw(t: torch.Tensor):
    """A numpy view of `t`'s bytes (bfloat16 as int16: moving bytes needs no arithmetic)."""
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


class _CopyToTp(torch.autograd.Function):
    """Identity forward; backward sums the input grads over tp (each rank saw a part)."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return all_reduce_(g.contiguous().clone(), ctx.comm), None


class _ReduceFromTp(torch.autograd.Function):
    """Sum of the partial outputs over tp forward; identity backward."""

    @staticmethod
    def forward(ctx, x, comm):
        return all_reduce_(x.contiguous().clone(), comm)

    @staticmethod
    def backward(ctx, g):
        return g, None


class _GatherLastFromTp(torch.autograd.Function):
    """All-gather along the last dim forward; backward keeps this rank's slice of the grad."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm, ctx.width = comm, x.shape[-1]
        return all_gather_last(x, comm)

    @staticmethod
    def backward(ctx, g):
        rank = ctx.comm.rank if ctx.comm is not None else 0
        return g.narrow(-1, rank * ctx.width, ctx.width).contiguous(), None


def copy_to_tp(x, comm):
    return _CopyToTp.apply(x, comm)


def reduce_from_tp(x, comm):
    return _ReduceFromTp.apply(x, comm)


def gather_last_from_tp(x, comm):
    return _GatherLastFromTp.apply(x, comm)


def _column_forward(self, x):
    comm, _ = self._dynatrain_tp()
    return F.linear(copy_to_tp(x, comm), self.weight, self.bias)


def _row_forward(self, x):
    comm, _ = self._dynatrain_tp()
    y = reduce_from_tp(F.linear(x, self.weight), comm)
    return y if self.bias is None else y + self.bias


def _vocab_embedding_forward(self, tokens):
    comm, _ = self._dynatrain_tp()
    rows = self.weight.shape[0]
    first = (comm.rank if comm is not None else 0) * rows
    outside = (tokens < first) | (tokens >= first + rows)
    local = (tokens - first).masked_fill(outside, 0)
    out = F.embedding(local, self.weight, scale_grad_by_freq=self.scale_grad_by_freq)
    return reduce_from_tp(out.masked_fill(outside.unsqueeze(-1), 0.0), comm)


def _vocab_head_forward(self, x):
    comm, vocab = self._dynatrain_tp()
    logits = gather_last_from_tp(F.linear(copy_to_tp(x, comm), self.weight, self.bias), comm)
    return logits[..., :vocab]


_FORWARDS = {("column", nn.Linear): _column_forward, ("row", nn.Linear): _row_forward,
             ("vocab", nn.Embedding): _vocab_embedding_forward, ("vocab", nn.Linear): _vocab_head_forward,
             ("qkv", nn.Linear): _column_forward}


def check_style(name: str, module: nn.Module, style: str) -> None:
    """ValueError unless `style` can be installed on `module` (named `name`)."""
    kinds = MODULE_STYLES.get(style)
    if kinds is None:
        return
    if not isinstance(module, kinds):
        want = " or ".join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
        raise ValueError(f"plan style '{style}' on module '{name}' needs {want}, got {type(module).__name__}")
    if style == "vocab" and isinstance(module, nn.Embedding) and (module.max_norm is not None or module.padding_idx
                                                                   is not None or module.sparse):
        raise ValueError(f"module '{name}': a vocab-parallel nn.Embedding takes no max_norm, padding_idx or sparse")


def install(module: nn.Module, style: str, tp_of: TpOf) -> None:
    """Replaces `module`'s forward with the tensor-parallel one of `style` (an instance attribute:
    the class and every other module are untouched)."""
    module._dynatrain_tp = tp_of
    if style == "attention":
        _attention.install_attention(module)
        return
    kind = nn.Embedding if isinstance(module, nn.Embedding) else nn.Linear
    module.forward = types.MethodType(_FORWARDS[(style, kind)], module)


def split_of(style: str, attr: str, on_module: bool) -> Tuple[str, int]:
    """(dynatrain.Tensor split, dim) of parameter `attr` under `style`: on a module's own
    parameter (on_module), or on a parameter the plan names itself (the style then says only
    how it is split)."""
    if style == "column":
        return "dim", 0
    if style == "qkv" or (style == "attention" and attr.startswith("in_proj")):
        return "dim", 1  # the logical [3, heads, head_dim, ...] (_attention.fused_shape)
    if style == "row" or (style == "attention" and attr == "weight"):  # attention: out_proj's
        return ("replicated", 0) if attr == "bias" and on_module else ("dim", 1)
    if style == "vocab":
        return "vocab", 0
    return "replicated", 0
