"""Gradient clipping over an adopted model as a whole, in any layout: what
torch.nn.utils.clip_grad_norm_ / clip_grad_value_ compute on one process, on the dp mean of the
grads (the Manager's grad state after sync_grads(), ZeRO shards at zero=2).

Norms count each element once over the job (Job._holds_once: split over tp, sharded over dp,
or the replica of tp rank 0 / dp rank 0); the sum of |g|^p is reduced over dp_cp and tp, the
maximum (norm_type=inf) likewise.
"""
from __future__ import annotations

import math
from typing import List, Optional

import torch

from . import _c10d


def _names(job, parameters: Optional[List[torch.Tensor]]) -> List[str]:
    """The Manager names of `parameters` (all of the job's when None)."""
    if parameters is None:
        return [name for name, _ in job._params]
    wanted = {job._names_of.get(id(p)) for p in parameters}  # an expert's own parameter: its stacked tensor
    return [name for name, _ in job._params if name in wanted]


def _reduced(value: float, m, op: str) -> float:
    for group in ("dp_cp", "tp"):
        comm = m.group(group)
        if comm is not None and comm.size > 1:
            value = _c10d.all_max(comm, value) if op == "max" else _c10d.all_sum(comm, value)
    return value


def total_norm(job, names: List[str], norm_type: float) -> float:
    """Collective over the active ranks: the norm_type-norm of the grads of `names`."""
    m = job.manager
    grads = m.tensors("grad")
    if math.isinf(norm_type):
        local = max((float(grads[n].abs().max()) for n in names if grads[n].numel()), default=0.0)
        return _reduced(local, m, "max")
    local = torch.zeros(1, dtype=torch.float64)
    for name in names:
        if job._holds_once(name):
            local += grads[name].double().abs().pow(norm_type).sum()
    return _reduced(float(local), m, "sum") ** (1.0 / norm_type)


def clip_grad_norm(job, max_norm: float, norm_type: float = 2.0, *, error_if_nonfinite: bool = False,
                   parameters: Optional[List[torch.Tensor]] = None) -> torch.Tensor:
    """Collective: syncs the grads, scales those of `parameters` (default: every one) by
    max_norm / (norm + 1e-6) when that is below 1, as torch does. Returns the norm (0-d)."""
    norm_type = float(norm_type)
    if not norm_type > 0:
        raise ValueError(f"clip_grad_norm_: norm_type {norm_type}; valid: > 0 or inf")
    if not job._synced:
        job.sync_grads()
    m = job.manager
    if not m.active:
        return torch.tensor(0.0)
    names = _names(job, parameters)
    total = total_norm(job, names, norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
                           f"so it cannot be clipped. To disable this error and scale the gradients by the "
                           f"non-finite norm anyway, set `error_if_nonfinite=False`")
    scale = max_norm / (total + 1e-6)
    if scale < 1:
        if len(names) == len(job._params):
            for g in m.buffers("grad"):
                g.mul_(scale)
        else:
            grads = m.tensors("grad")
            for name in names:
                grads[name].mul_(scale)
    return torch.tensor(total, dtype=torch.float32)


def clip_grad_value(job, clip_value: float, parameters: Optional[List[torch.Tensor]] = None) -> None:
    """Collective: syncs the grads, then clamps those of `parameters` (default: every one) to
    [-clip_value, clip_value], element by element, as torch does."""
    if not job._synced:
        job.sync_grads()
    m = job.manager
    if not m.active:
        return
    grads = m.tensors("grad")
    for name in _names(job, parameters):
        grads[name].clamp_(min=-float(clip_value), max=float(clip_value))

