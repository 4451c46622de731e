"""Where autograd accumulates an adopted model's grads, and how they become the dp mean.

zero <= 1: the Manager's grad state is whole local tensors; autograd accumulates into it and
the mean is an all-reduce over dp in place. zero >= 2: the Manager keeps only this rank's ZeRO
shard of each grad bucket, so autograd accumulates into job-owned buckets of the same layout
(one per Manager bucket, every tensor at its offset in the param bucket) and the mean is a
reduce-scatter from them into the Manager's shards (zero=3 too: p.grad is the whole local
grad while p holds its shard between steps, _zero3.py). Either way the Manager's grad state holds
the mean after reduce(), and grads() is what each p.grad is bound to.
"""
from __future__ import annotations

from typing import Dict, List

import numpy
import torch

from . import tp


def _lazy_zeros(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """Zeros whose pages the OS supplies on first touch (numpy's calloc): the switch does not
    pay for writing them, the next backward touches them anyway."""
    if dtype == torch.bfloat16:
        return torch.from_numpy(numpy.zeros(numel, dtype=numpy.int16)).view(torch.bfloat16)
    return torch.from_numpy(numpy.zeros(numel, dtype=numpy.float32))


def _group(m, info):
    return m.group("edp" if info["expert"] else "dp_cp")


class GradBuffers:
    """Built per layout (after every switch), from the Manager's current views."""

    def __init__(self, manager):
        self.manager = manager
        self.sharded = manager.config["zero"] >= 2
        self._buckets: List[torch.Tensor] = []
        self._views: Dict[str, torch.Tensor] = {}
        if not manager.active:
            return
        if not self.sharded:
            self._buckets, self._views = manager.buffers("grad"), manager.tensors("grad")
            return
        # one whole bucket each (zero=3 keeps only a shard of the param buckets), every tensor at its place
        self._buckets = [_lazy_zeros(info["bucket_numel"], b.dtype) for info, b in zip(manager.buckets,
                                                                                          manager.buffers("grad"))]
        for name in manager.tensors("grad"):
            bucket, offset, numel, shape = manager._placement(name)
            self._views[name] = self._buckets[bucket][offset:offset + numel].view(shape)

    def grads(self) -> Dict[str, torch.Tensor]:
        """name -> the local-shape tensor p.grad is bound to."""
        return self._views

    def zero(self) -> None:
        for b in self._buckets:
            b.zero_()

    def reduce(self) -> None:
        """Collective: the Manager's grad state becomes the mean over dp of every rank's grads."""
        m = self.manager
        for info, own, state in zip(m.buckets, self._buckets, m.buffers("grad")):
            group = _group(m, info)
            size = group.size if group is not None else 1
            if not self.sharded:
                if size > 1:
                    tp.all_reduce_(own, group).div_(size)
            elif size == 1:
                state.copy_(own[info["shard_lo"]:info["shard_hi"]])
            else:
                tp.reduce_scatter_(own, state, group).div_(size)


class JobGrads:
    """The Job's binding of each p.grad to its GradBuffers view (a base class of dynatrain.Job):
    zeroing, the views put back after a replaced or dropped p.grad, the dp mean, and the grads a
    step-boundary switch left unset (_grads_unset: p.grad None until the next zero_grad(),
    grad-enabled forward or step zeroes and binds them)."""

    def _settle_grads(self) -> None:
        """Zeroes and binds the grads a step-boundary switch left unset (Manager.switch
        fill_grads=False: no zeroing inside the switch's pause; p.grad is None meanwhile, as after
        zero_grad(set_to_none=True))."""
        if not self._grads_unset:
            return
        self._grads_unset = False
        if self.manager.active:
            self._grads.zero()
            grads = self._local(self._grads.grads())
            for name, p in self._params:
                self._set_grad(p, grads[name])

    def _bound_grads(self) -> None:
        """Puts back any grad that is not the Manager's view (zero_grad(set_to_none=True), a
        replaced p.grad): its values are copied into the view, never dropped."""
        if self._grads_unset:
            return self._settle_grads()
        grads = self._local(self._grads.grads())
        for name, p in self._params:
            view, g = grads[name], p.grad
            if g is not None and g.data_ptr() == view.data_ptr() and g.shape == view.shape:
                continue
            if g is None:
                view.zero_()
            else:
                view.copy_(g)
            self._set_grad(p, view)

    def _set_grad(self, p: torch.Tensor, grad: torch.Tensor) -> None:
        if self._zero3 is not None:
            self._zero3.bind(p, grad)  # the whole local grad of a parameter that holds its shard
        else:
            p.grad = grad

    def sync_grads(self) -> None:
        """Collective: the Manager's grads become their mean over dp (dense buckets over dp_cp,
        expert ones over edp); at zero>=2 only this rank's shard of that mean is kept, and p.grad
        keeps this rank's own grads. optimizer.step() runs it unless it ran since the last step."""
        if not self.manager.active:
            return
        self._bound_grads()
        self._grads.reduce()
        self._synced = True

    def _zero_grad(self) -> None:
        if self._grads_unset:
            self._settle_grads()  # zeroes them
        elif self.manager.active:
            self._grads.zero()
            self._bound_grads()
        self._synced = False
        self.backward_ran = False
