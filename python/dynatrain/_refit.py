"""Weights-only copies of an adopted job's model in an inference layout (docs/python.md, "RL
phase shifts"), for generation on lent processes or on all of them.

    weights = job.refit("tp=2", GPT(**dims), ranks=job.lent)   # collective over the job
    if weights.active:
        logits = weights.module(tokens)                          # the user's model, tp forward

job.refit() places a copy of the current weights (the param kind alone: no grads, fp32 master or
moments) in `layout` on the processes `ranks`, planned by the planner and moved by the engine
(python/refit.cc) from wherever the training layout holds them; the training state is read,
never changed. The receiving processes get `module` (an instance of the user's model class with
the same parameter names and shapes) whose parameters are views of the copy (requires_grad False)
and whose styled modules (the job's plan) run the tensor-parallel forward over the copy's tp
group. A later job.refit() with the same layout, ranks and module refreshes the same copy: the
same Manager, communicator and groups (no group created), the memory of the previous copy.

Invariants:
  * The copy's Manager runs over a communicator of every process of the job, split once per
    (layout, ranks) and ordered so that rank r of `layout` is process ranks[r] (on
    torch.distributed a Gloo group over the store, _c10d.split, its sub-groups alike); the
    job's failure path stays on the job's world. The copy's world rank q is the job's rank
    _members[q], which places the training layout's ranks in the copy's world without
    communication.
  * The copy's buffers live in the training Manager's pool from the first refit on (refit.cc),
    so `job.manager.pool_stats()` counts them there and weights.manager's own pool is empty.
  * Between refits the module's parameters view the copy; a job.refit() rebinds them (the same
    Parameter objects). weights.release() gives the copy's memory back; the module's
    parameters are empty until the next refit.
  * dtype other than the training dtype: the weights move in the narrower one. A bf16 copy of
    an fp32 job is cast by each sender before sending (refit.cc; the module's parameters view the
    bf16 copy); an fp32 copy of a bf16 job moves bf16 and each receiver casts its shard on
    arrival (the module's parameters then own their memory).
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence

import torch

from ._agree import agree, together
from . import Manager, _c10d, _lend, _native, tp


class Weights:
    """A weights-only copy of a job's model in one inference layout (job.refit() returns it)."""

    def __init__(self, job, layout: str, ranks: List[int], module: torch.nn.Module, dtype: torch.dtype):
        m = job.manager
        o = m._options
        self.layout, self.ranks, self.module, self.dtype = layout, list(ranks), module, dtype
        self._members = list(ranks) + [r for r in range(m.comm.size) if r not in ranks]  # the copy's order
        order = self._members.index(m.comm.rank)
        self.comm = _c10d.split(m.comm, order) if _c10d.is_c10d(m.comm) else m.comm.Split(0, order)
        self.manager = Manager(self.comm, o["model"], layout, states="param", bucket_elems=o["bucket_elems"],
                               param_dtype=_moved_dtype(m._dtype_of("param"), dtype), mem_budget=o["mem_budget"],
                               gpus_per_node=o["gpus_per_node"], elastic=False)
        _native.watch_world(m._native)  # the job's lines keep naming the job's ranks
        self._params = [(name, p) for name, p in module.named_parameters()]
        module._dynatrain_weights = self
        for name, _, style in job._styled:
            target = dict(module.named_modules())[name]
            vocab = getattr(target, "out_features", 0)
            tp.install(target, style, lambda v=vocab: (self.manager.group("tp"), v))

    @property
    def active(self) -> bool:
        """Whether this process holds a rank of the copy's layout (it can run the module)."""
        return self.manager.active

    def group(self, name: str):
        """The copy's communicator `name` (tp, dp, ...) on this process; None outside the layout."""
        return self.manager.group(name)

    def receive(self, job) -> Dict[str, Any]:
        """Collective over the job: the job's current weights into the copy, parameters rebound."""
        m, t0 = self.manager, time.perf_counter()
        self._unbind()
        m._drop_views("from before a refit")
        stats = m._native.receive_weights(job.manager._native, self._members)
        m._bind()
        self._bind()
        stats["pause_seconds"] = _c10d.all_max(job.manager.comm, time.perf_counter() - t0)
        return stats

    def release(self) -> None:
        """On this process, no communication: the copy's memory goes back to its pool (the module's parameters empty)."""
        self._unbind()
        self.manager._drop_views("from before weights.release()")
        self.manager._native.release_weights()  # no views until the next receive()

    def _bind(self) -> None:
        views = self.manager.tensors("param") if self.active else {}
        with torch.no_grad():
            for name, p in self._params:
                view = views.get(name)
                if view is None:
                    p.data = torch.empty(0, dtype=self.dtype)
                else:
                    p.data = view if view.dtype == self.dtype else view.to(self.dtype)
                p.requires_grad_(False)

    def _unbind(self) -> None:
        for _, p in self._params:
            p.data = torch.empty(0, dtype=self.dtype)


def _moved_dtype(training: torch.dtype, wanted: torch.dtype) -> torch.dtype:
    """The dtype the copy's weights move and sit in: bf16 when either is (an fp32 job's bf16 copy
    is cast by the senders, so the link carries half the bytes; a bf16 job's fp32 copy is cast
    on arrival), else fp32."""
    return torch.bfloat16 if torch.bfloat16 in (training, wanted) else torch.float32


def _check_module(job, module: torch.nn.Module) -> None:
    if any(hasattr(p, "_dynatrain_job") for _, p in module.named_parameters()):
        raise ValueError("job.refit(): the module is an adopted model; pass another instance of its class")
    if isinstance(getattr(module, "_dynatrain_weights", None), Weights):
        return  # a copy's module already: its parameters view that copy (checked when it was made)
    mine = [(n, tuple(p.shape)) for n, p in module.named_parameters()]
    want = [(n, tuple(p)) for n, p in zip(job.manager.names, (job.manager.global_shape(n) for n in job.manager.names))]
    if mine != want:
        diff = next((f"{a} vs the job's {b}" for a, b in zip(mine, want) if a != b), f"{len(mine)} vs {len(want)} parameters")
        raise ValueError(f"job.refit(): the module's parameters (names, shapes) differ from the job's model: {diff}")


def _refuse_other_copy(bound, mine) -> None:
    if bound is not None and bound is not mine:
        raise ValueError(f"job.refit(): this module views another copy (layout {bound.layout!r}, ranks "
                         f"{bound.ranks}, {bound.dtype}); a module serves one copy: pass another instance")


def _ranks(job, layout: str, ranks: Optional[Sequence[int]]) -> List[int]:
    size, world = _native.world_size_of(layout), job.manager.comm.size
    if ranks is None:
        lent = _lend.lent(job)
        return list(lent) if len(lent) == size else list(range(size))
    ranks = list(ranks)
    if len(ranks) != size or len(set(ranks)) != size or not all(isinstance(r, int) and 0 <= r < world for r in ranks):
        raise ValueError(f"job.refit({layout!r}, ranks={ranks}): {size} distinct world ranks of 0..{world - 1} "
                         f"needed, one per rank of the layout")
    return ranks


def _arguments(job, layout: str, module: torch.nn.Module, ranks, dtype, cache) -> tuple:
    """This process's checks of job.refit()'s arguments: (the ranks chosen, the copy's cache key)."""
    _check_module(job, module)
    chosen = _ranks(job, layout, ranks)
    key = (layout, tuple(chosen), id(module), dtype)
    _refuse_other_copy(getattr(module, "_dynatrain_weights", None), cache.get(key))
    return chosen, key


def refit(job, layout: str, module: torch.nn.Module, ranks: Optional[Sequence[int]] = None,
          dtype: Optional[torch.dtype] = None) -> Weights:
    """job.refit(): collective over the job's processes with equal arguments (module: each
    process's own instance). Returns the Weights, refreshed with the job's current weights."""
    m = job.manager
    if m.comm is None:
        raise ValueError("job.refit() on a process that left the job; it holds no state")
    dtype = dtype or m._dtype_of("param")
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"job.refit(dtype={dtype}); valid: torch.float32, torch.bfloat16")
    cache = job.__dict__.setdefault("_refits", {})
    chosen, key = together(m.comm, "job.refit() arguments", lambda: _arguments(job, layout, module, ranks, dtype, cache))
    new = key not in cache
    agree(m.comm, "job.refit() arguments (layout, ranks, dtype; a new copy or a refresh of the last one: the "
          "same module object)", [layout, chosen, str(dtype), new])
    with m._collective(f"job.refit({layout!r})", m._state_bytes()):
        if new:
            cache[key] = Weights(job, layout, chosen, module, dtype)  # collective; refusals on every rank
        weights = cache[key]
        weights.last_stats = weights.receive(job)
    made = 1 + _lend._groups_made(weights.manager) if new else 0  # the copy's communicator and its groups
    weights.last_stats["new_groups"] = int(_c10d.all_max(m.comm, float(made))) if new else 0
    return weights
