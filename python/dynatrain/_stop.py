"""A survivor's forward stopped as soon as the job knows a process is lost (docs/python.md,
"Notices and lost processes").

A process killed mid-step is met by the survivors only at their next collective with it; at dp
alone that is the gradient sync in optimizer.step(), after the whole forward and backward. The
job's loss watch (job/loss_watch.h, through the binding: a thread of its own, on a store
connection of its own) looks every PERIOD_S at the world's loss mark in the store and at the
/proc line of the world's other processes on its node, and waits between its looks on the pipe
of `dynatrain launch --keep-going`, which reports a killed process at once: a process of its
node that a signal is ending raises the mark for every survivor, on every node; the first
survivor to meet a loss in a collective raises the mark too (_recover.py). Once it is raised:

- the adopted model's forward stops at its next submodule: a pre-hook on each submodule raises
  _Stopped, which the model's own forward (wrapped at adoption) catches. It keeps the loss for
  optimizer.step() (_interrupt.keep: the generation's connections are shut) and returns
  stand-ins for the outputs of the model's last forward: zeros of the same shapes and dtypes,
  requiring grad where those did. The user's loss and backward() run on them at next to no
  cost, and the next optimizer.step() recovers without applying the step (job.step stays; the
  loss of that step means nothing, as for a loss met in a collective: _interrupt.py);
- a backward in progress runs to its end (autograd cannot be left without raising into the
  user's loop), its collectives returning at once;
- the model's first forward has no outputs to stand in for: it runs to its end, as does every
  forward of a model whose outputs hide tensors from torch's pytree (a dict subclass, an
  object of its own).
"""
from __future__ import annotations

import os
from typing import Any, Callable, List, Optional

import torch
from torch import nn
from torch.utils import _pytree

from . import _interrupt, _native

PERIOD_S = 0.02  # between two looks at the mark (one store query each); the pipe is read when it has a report

_watch: List = []  # this process's loss watch (_native.LossWatch), made at adoption
_watched: List[str] = [""]  # the mark key being watched
_stopped: List[bool] = [False]  # a forward stood in since the last recovery


class _Stopped(Exception):
    """Raised by a submodule's pre-hook once the loss is known; caught by the model's forward."""


def start(address: str, timeout_s: float) -> None:
    """At adoption, once per process (a job that recovers a lost peer in place)."""
    if not _watch:
        _watch.append(_native.loss_watch(address, timeout_s, PERIOD_S))
        os.register_at_fork(after_in_child=_watch[0].forget_in_child)  # (a DataLoader's workers)


def watch(mark_key: str, place_keys: Callable[[], List[str]]) -> None:
    """The world the job runs in now: its loss mark, and the store keys where its processes
    announced their places (the watch looks at those of this node; a reported pid counts only
    when one of them names it). Nothing when that world is watched already."""
    if _watch and _watched[0] != mark_key:
        _watch[0].watch(mark_key, place_keys())
        _watched[0] = mark_key


def take_stopped() -> bool:
    """Whether a forward of this process was stopped since the last call (the recovery's count)."""
    stopped, _stopped[0] = _stopped[0], False
    return stopped


def running() -> bool:
    return bool(_watch)


def raised() -> bool:
    return bool(_watch) and _watch[0].raised()


def install(model: nn.Module, follow_world: Callable[[], None], job_ref) -> None:
    """At adoption: the submodules' pre-hooks and the model's forward that catches them.
    `follow_world()`, at the start of each forward, watches the world the job runs in now (a
    switch may have changed its processes since the last step); `job_ref()`: the job, whose
    ZeRO-3 parameters a stopped forward leaves whole are put back into their shards."""
    last: List[Optional[Any]] = [None]  # the last forward's outputs, for the stand-ins

    def stopping() -> bool:
        return last[0] is not None and _interrupt.armed() and raised()

    def pre_hook(module, inputs):
        if stopping():
            raise _Stopped()

    for sub in model.modules():
        if sub is not model:
            sub.register_forward_pre_hook(pre_hook)
    original = model.forward

    def forward(*args, **kwargs):
        follow_world()
        if stopping():
            return _stand_in(last[0])
        try:
            out = original(*args, **kwargs)
        except _Stopped:
            job = job_ref()
            if job is not None and job._zero3 is not None:
                job._zero3.release_all()  # the modules entered gathered theirs; none will release them
            return _stand_in(last[0])
        last[0] = _shapes(out)
        return out

    model.forward = forward


def _shapes(out):
    """What stands in for `out` once the loss is known, or None (never stood in for) when its
    structure hides tensors from torch's pytree (a dict subclass, an object): those would be
    the last step's tensors, whose graph is gone."""
    plain = (torch.Tensor, int, float, bool, str, type(None))
    if not all(isinstance(leaf, plain) for leaf in _pytree.tree_flatten(out)[0]):
        return None
    return _pytree.tree_map(_shape_of, out)


class _Shape:
    """What a stand-in needs of one output tensor."""

    def __init__(self, t: torch.Tensor):
        self.shape, self.dtype, self.grad = t.shape, t.dtype, t.requires_grad


def _shape_of(x):
    return _Shape(x) if isinstance(x, torch.Tensor) else x


def _stand_in(shapes):
    """The loss kept for optimizer.step() (once), and zeros shaped as the last forward's outputs."""
    _stopped[0] = True
    if not _interrupt.interrupted():
        _interrupt.keep(RuntimeError("a process of the job was lost (its launcher or another survivor said so)"))

    def make(x):
        if isinstance(x, _Shape):
            t = torch.zeros(x.shape, dtype=x.dtype)
            return t.requires_grad_() if x.grad else t
        return x
    return _pytree.tree_map(make, shapes)
