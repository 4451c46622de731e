"""zero=3 for an adopted model: between steps every parameter holds only this rank's ZeRO shard
(p.data is the Manager's 1-D piece of the flattened local tensor, possibly empty), and it is whole
only while a module that holds it computes:

  forward    a pre-hook on each module holding adopted parameters gathers them (every owner of
             a piece broadcasts it over the bucket's ZeRO group into one buffer per module and
             bucket); a post-hook puts the shards back and hooks the module's outputs, so that
  backward   the first grad reaching an output gathers them again before the module's own
             backward; a parameter goes back to its shard once autograd has accumulated its grad
             (a post-hook on its grad accumulator), any left whole at the end of the backward then.
  grads      p.grad stays the whole local grad in job-owned buckets (_grads.py), reduce-scattered
             into the Manager's shard by optimizer.step(), as at zero=2; the step runs on shards.

Invariants: the grad accumulator of each parameter is made while the parameter is whole (torch
checks every incoming grad against the shape the parameter had then) and held here until the
next switch; a Zero3 belongs to one layout (the Job builds a new one at every bind), and hooks
that outlive it (outputs of a graph from before a switch) do nothing.
nn.MultiheadAttention reads its out_proj's weight itself: its whole subtree is gathered with it.
A forward that reads another module's parameter directly (not through that module's forward)
sees the shard.
"""
from __future__ import annotations

import weakref
from typing import Any, Dict, List, Tuple

import torch
import torch.nn as nn

from . import tp


def _gathered_with(module: nn.Module):
    """The parameters a module's forward reads: its own, or its subtree's for modules that read
    their children's parameters themselves."""
    return module.parameters() if isinstance(module, nn.MultiheadAttention) else module._parameters.values()


class Zero3:
    """The current layout's shards and gathers of one Job's parameters (built by Job._bind)."""

    def __init__(self, manager, params: List[Tuple[str, torch.Tensor]], local):
        self.manager = manager
        self._shards = {name: local(name, t) for name, t in manager.tensors("param").items()}
        self._buffers = manager.buffers("param")
        self._names = {id(p): name for name, p in params}
        self._local = local  # Manager view -> the module's shape (fused q/k/v folded back)
        self._whole: Dict[int, torch.Tensor] = {}  # id(p) -> p while it is whole
        self._accumulators: Dict[int, Any] = {}  # id(p) -> its grad accumulator (made while whole)
        self._callback_queued = False

    def shard(self, name: str) -> torch.Tensor:
        return self._shards[name]

    def bind(self, p: torch.Tensor, grad: torch.Tensor) -> None:
        """p.grad = grad (the whole local shape) while p holds its shard: torch allows a grad of
        another shape only when it is set while p has that shape."""
        if p.grad is not None and p.grad.data_ptr() == grad.data_ptr() and p.grad.shape == grad.shape:
            return
        shard = p.data
        p.data = grad
        p.grad = grad
        p.data = shard

    # ---- gathering ----
    def gather(self, params) -> None:
        """Makes every parameter of `params` whole (collective over each bucket's ZeRO group)."""
        todo = [p for p in params if id(p) in self._names and id(p) not in self._whole]
        by_bucket: Dict[int, List[Tuple[torch.Tensor, int, int, Tuple[int, ...]]]] = {}
        for p in todo:
            bucket, offset, numel, shape = self.manager._placement(self._names[id(p)])
            by_bucket.setdefault(bucket, []).append((p, offset, numel, shape))
        for bucket, items in sorted(by_bucket.items()):
            lo = min(offset for _, offset, _, _ in items)
            hi = max(offset + numel for _, offset, numel, _ in items)
            whole = self._range(bucket, lo, hi)
            for p, offset, numel, shape in items:
                self._make_whole(p, self._local(self._names[id(p)], whole[offset - lo:offset - lo + numel].view(shape)))

    def _range(self, bucket: int, lo: int, hi: int) -> torch.Tensor:
        """Elements [lo, hi) of the whole param bucket `bucket`, from the ranks that hold them."""
        m = self.manager
        info = m.buckets[bucket]
        group = m.group("edp" if info["expert"] else "dp_cp")
        shard = self._buffers[bucket]
        size = shard.numel()
        out = torch.empty(hi - lo, dtype=shard.dtype)
        me = group.rank if group is not None else 0
        for owner in range(lo // size, (hi - 1) // size + 1) if hi > lo else ():
            a, z = max(lo, owner * size), min(hi, (owner + 1) * size)
            piece = out[a - lo:z - lo]
            if owner == me:
                piece.copy_(shard[a - owner * size:z - owner * size])
            if group is not None and group.size > 1:
                tp.broadcast_(piece, group, root=owner)
        return out

    def _make_whole(self, p: torch.Tensor, whole: torch.Tensor) -> None:
        p.data = whole  # same dtype: torch keeps p's grad accumulator
        self._whole[id(p)] = p
        if not p.requires_grad or id(p) in self._accumulators:
            return
        with torch.enable_grad():
            p.data = torch.empty(0, dtype=torch.float64 if p.dtype != torch.float64 else torch.float32)
            p.data = whole  # a dtype change first: torch drops an accumulator made for another shape
            node = p.view_as(p).grad_fn.next_functions[0][0]
        node.register_hook(_released_after_grad(weakref.ref(self), weakref.ref(p)))
        self._accumulators[id(p)] = node

    def release(self, params) -> None:
        """Puts the shard back into every whole parameter of `params`."""
        for p in params:
            if self._whole.pop(id(p), None) is not None:
                p.data = self._shards[self._names[id(p)]]

    def release_all(self) -> None:
        self.release(list(self._whole.values()))

    def regather_for_backward(self, params) -> None:
        """From a grad hook on a module's output: whole again before that module's backward; the
        backward's end puts back what is still whole."""
        self.gather(params)
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)

    def _after_backward(self) -> None:
        self._callback_queued = False
        self.release_all()

    def held_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self._whole.values())


def _released_after_grad(zero_ref, p_ref):
    def hook(grad_inputs, grad_outputs):
        zero, p = zero_ref(), p_ref()
        if zero is not None and p is not None:
            zero.release([p])
    return hook


# ---- the module hooks (installed once at adoption; they act while the Job runs zero=3) ----
def _tensors(value):
    if torch.is_tensor(value):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _pre_hook(job_ref, params):
    def hook(module, args):
        job = job_ref()
        zero = job._zero3 if job is not None else None
        if zero is not None:
            zero.gather(params)
    return hook


def _post_hook(job_ref, params):
    def hook(module, args, output):
        job = job_ref()
        zero = job._zero3 if job is not None else None
        if zero is None:
            return None
        if torch.is_grad_enabled() and any(p.requires_grad for p in params):
            ref = weakref.ref(zero)
            for t in _tensors(output):
                if t.requires_grad and t.grad_fn is not None:  # a leaf returned as it is would keep the hook
                    t.register_hook(_regather(ref, params))
        zero.release(params)
        return None
    return hook


def _regather(zero_ref, params):
    def hook(grad):
        zero = zero_ref()
        if zero is not None:  # None: the graph is from before a switch (StaleTensorError follows)
            zero.regather_for_backward(params)
        return None
    return hook


def _named_failure(job_ref, forward):
    """The model's forward: a RuntimeError inside it at zero=3 says where shards are whole."""
    def wrapped(*args, **kwargs):
        try:
            return forward(*args, **kwargs)
        except RuntimeError as e:
            job = job_ref()
            if job is None or job._zero3 is None:
                raise
            raise ValueError(f"{type(e).__name__} in the forward at zero=3 (layout '{job.config['config']}'): {e}; "
                             f"at zero=3 a parameter is whole only inside the forward of a module that holds it, "
                             f"so a forward that reads another module's parameter directly (e.g. F.linear(x, "
                             f"self.emb.weight)) sees this rank's 1-D shard: call that module, share the Parameter "
                             f"between the two modules, or train at zero<=2") from e
    return wrapped


def install(job, model: nn.Module, adopted) -> None:
    """Gather hooks on every module holding adopted parameters (`adopted`: their ids)."""
    ref = weakref.ref(job)
    for module in model.modules():
        params = [p for p in _gathered_with(module) if id(p) in adopted]
        if params:
            module.register_forward_pre_hook(_pre_hook(ref, params))
            module.register_forward_hook(_post_hook(ref, params))
    model.forward = _named_failure(ref, model.forward)
