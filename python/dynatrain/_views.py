"""Stale-view invalidation: every tensor a Manager hands out is registered here, and at the next
switch each one is emptied (set_() to an empty storage) and turned into a StaleTensor, whose
every torch operation raises StaleTensorError naming the tensor, its old shape and the switch.
So a stale view can neither read the new layout's memory nor write into it.

Views the user derives from a handed-out tensor (slices, .view(), nn.Parameter(view)) have
tensor headers of their own that a switch cannot reach; they keep the storage, and with it the
old buffer's memory (a pin, python/keep_alive.h), so they hold the old bytes, never another
tensor's state, and never point at freed memory.

While another Python thread is alive, a handed-out tensor is not emptied at a switch, only made
a StaleTensor: that thread may be inside a torch op on it (torch computes without the GIL), and
emptying the tensor under the op would make it read unmapped memory. The tensor then keeps its
old storage, pinned like a derived view's, until the last reference to it goes.
"""
from __future__ import annotations

import threading
import warnings
import weakref
from typing import List, Tuple

import torch


class StaleTensorError(RuntimeError):
    """A tensor handed out by a Manager was used after the switch that ended its layout."""


StaleTensorError.__module__ = "dynatrain"  # printed as dynatrain.StaleTensorError


def _stale_message(t: torch.Tensor) -> str:
    return getattr(t, "_dynatrain_stale", "this tensor is from before a Manager switch")


class StaleTensor(torch.Tensor):
    """What a handed-out tensor becomes at the switch after it: empty, and every operation on
    it (reads, in-place writes, indexing, .shape, .numpy(), passing it to torch functions)
    raises StaleTensorError. repr(), format() and hash() still work."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__repr__, torch.Tensor.__hash__):
            with torch._C.DisableTorchFunction():
                return func(*args, **(kwargs or {}))
        stale = next((a for a in list(args) + list((kwargs or {}).values()) if isinstance(a, StaleTensor)), None)
        raise StaleTensorError(_stale_message(stale) if stale is not None else "a tensor is from before a Manager switch")

    def __repr__(self) -> str:  # noqa: D105
        return f"<StaleTensor: {_stale_message(self)}>"

    def __format__(self, spec: str) -> str:  # noqa: D105 - f"{t}" in a log line still works
        return repr(self)


def warn_if_pinned(deferred_bytes: int) -> None:
    """After a switch: a RuntimeWarning when derived views kept `deferred_bytes` of the old
    layout allocated (python/keep_alive.h)."""
    if deferred_bytes:
        warnings.warn(f"dynatrain: {deferred_bytes} bytes of the layout before this switch stay allocated: tensors "
                      f"derived from views handed out before it (slices, .view(), nn.Parameter(view), p.data = view) "
                      f"still reference them and hold the old bytes, not the new state; drop them before switching "
                      f"and re-derive them afterwards", RuntimeWarning, stacklevel=3)


class ViewRegistry:
    """The tensors one Manager handed out since its last switch (weakly held)."""

    def __init__(self) -> None:
        self._views: List[Tuple["weakref.ref", str]] = []
        self._prune_at = 4096  # entries; dead ones are dropped when the list reaches it
        self.switches = 0  # switches that invalidated views so far

    @staticmethod
    def _other_threads() -> bool:
        """Whether a Python thread besides this one and the watchdog is alive."""
        me = threading.current_thread()
        return any(t is not me and t.name != "dynatrain-watchdog" for t in threading.enumerate())

    def hand_out(self, t: torch.Tensor, what: str) -> torch.Tensor:
        """Registers `t` (described by `what`, e.g. "tensor 'w' (param)") and returns it."""
        if len(self._views) >= self._prune_at:
            self._views = [(r, w) for r, w in self._views if r() is not None]
            self._prune_at = max(4096, 2 * len(self._views))
        self._views.append((weakref.ref(t), what))
        return t

    def invalidate(self, why: str) -> int:
        """Empties every registered tensor still alive and makes it a StaleTensor whose errors
        say `why` (e.g. "from before switch 2 (tp=2 -> tp=4)"); returns how many."""
        self.switches += 1
        count = 0
        empty = not self._other_threads()  # else an op another thread runs on it keeps its memory
        with torch.no_grad():
            for ref, what in self._views:
                t = ref()
                if t is None or isinstance(t, StaleTensor):
                    continue
                message = (f"{what}, shape {tuple(t.shape)}, {str(t.dtype).replace('torch.', '')}, is {why}: "
                           f"its memory belongs to the new layout, so it was emptied; re-fetch it from the Manager")
                if empty:
                    t.set_()
                t.__class__ = StaleTensor
                t._dynatrain_stale = message
                count += 1
        self._views = []
        return count
