"""A lost process seen outside optimizer.step() (docs/python.md, "A lost process").

Between two optimizer.step() calls of a job that recovers a lost peer in place
(_recover.enabled), the package's own collectives on torch.distributed (a tensor-parallel
forward or backward, job.average(), job.sync_grads(), clip_grad_norm_) are *armed*: Gloo's
error in one of them does not raise. The first error is kept, the generation's connections are
shut (_c10d.abandon_groups: a survivor waiting on this process gets its error too, at once), and
that collective and every later one until the next optimizer.step() return at once: in-place
tensors stay as they were, a gathered value is this process's own. The rest of the forward and
backward runs on garbage without raising; the step's loss and grads mean nothing. The next
optimizer.step() takes the kept error and recovers (_recover.in_job) without applying anything,
job.step unchanged, so a loop `while job.step < steps:` does the step again. An error that was
no lost peer (recover() finds every process alive) is raised there, one step late.
"""
from __future__ import annotations

import functools
from typing import Optional

_armed = False
_error: Optional[RuntimeError] = None


def arm(on: bool) -> None:
    """After adopt() and after each optimizer.step(): `on` for a job that recovers a lost peer."""
    global _armed, _error
    _armed, _error = on, None


def raise_kept() -> None:
    """At the start of optimizer.step(): disarms (the step's own collectives raise as they did)
    and raises the kept error, if any, for the step's handler to recover from."""
    global _armed, _error
    error, _armed, _error = _error, False, None
    if error is not None:
        raise error


def keep(error: RuntimeError) -> None:
    """A lost peer met by the package's own transfer after a step (the copies' refresh,
    _redundancy.py): kept for the next optimizer.step() as a guarded collective keeps it; raised
    when not armed."""
    global _error
    if not _armed:
        raise error
    from . import _c10d
    _error = _error or error
    _c10d.abandon_groups()


def armed() -> bool:
    """Whether a lost peer met now is kept for the next optimizer.step() (between two steps)."""
    return _armed


def interrupted() -> bool:
    """Whether a collective since the last optimizer.step() met a lost peer."""
    return _error is not None


def guarded(fallback):
    """Decorates a Comm collective: armed, Gloo's error (or an earlier one) returns fallback(...)."""
    def wrap(collective):
        @functools.wraps(collective)
        def call(*args, **kwargs):
            global _error
            if _armed and _error is not None:
                return fallback(*args, **kwargs)
            try:
                return collective(*args, **kwargs)
            except RuntimeError as error:
                if not _armed:
                    raise
                from . import _c10d  # (it imports this module)
                _error = error
                _c10d.abandon_groups()
                return fallback(*args, **kwargs)
        return call
    return wrap
