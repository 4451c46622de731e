"""Lending processes out of an adopted job and taking them back (docs/python.md, "RL phase shifts").

    job.lend(2)      # collective: the training state leaves the layout's last 2 processes
    ...              # they return here with job.active False and no training state; the others
                     # hold the whole state in the smaller layout
    job.reclaim()    # collective: the layout from before the lend, on the same processes

Both are planned switches over the job's processes (Manager.switch(keep_processes=True)) at a
step boundary, so they move no grads (zero_grads=True: the step's grads were consumed by
optimizer.step(), and a switch between backward() and the step is refused) and do not zero them
in the pause either: p.grad is None until the next zero_grad(), grad-enabled forward or step
zeroes and binds them (adopt.py, _settle_grads);
no process starts or ends, the world and its communicator stay, and the process groups of a
layout the job ran before come from the Manager's cache (split once per layout), so from the
second lend / reclaim round on a phase shift creates no group.

Invariants:
  * While processes are lent the job runs a layout over the processes that stay (ranks
    0 .. A-n-1 of the A the layout had); the lent ones hold no rank and no state (the Manager's
    live bytes are 0 there) and still take part in the job's collective calls, as idle processes
    do: optimizer.step(), job.average(), job.reclaim().
  * job.switch() while processes are lent is refused (ValueError on every rank, nothing moved):
    job.reclaim() first. A second lend is refused alike.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from . import _c10d, _native


def lent(job) -> List[int]:
    """World ranks of the processes lent now ([] when none)."""
    state = job._lent
    return list(state["ranks"]) if state else []


def refuse_while_lent(job, what: str) -> None:
    if lent(job):
        raise ValueError(f"{what} while processes {lent(job)} are lent (layout before the lend: "
                         f"{job._lent['layout']}): job.reclaim() first")


def _smaller_layout(c: Dict[str, Any], n: int) -> str:
    """The current layout on n processes fewer: the same tp and zero, dp as the rest allows."""
    stay = c["world_size"] - n
    if stay % c["tp"]:
        raise ValueError(f"job.lend({n}): {stay} processes stay of the layout's {c['world_size']}, not a multiple "
                         f"of tp={c['tp']}; lend a multiple of tp or pass layout=")
    return f"tp={c['tp']},dp={stay // c['tp']},zero={c['zero']}"


def _target(job, n, layout: Optional[str]) -> str:
    c = job.manager.config
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n < c["world_size"]:
        raise ValueError(f"job.lend(n): n={n!r}; valid: an int from 1 to {c['world_size'] - 1} (processes of the "
                         f"layout {c['config']}; one must stay)")
    if layout is None:
        return _smaller_layout(c, n)
    needed = _native.world_size_of(layout)
    if needed != c["world_size"] - n:
        raise ValueError(f"job.lend({n}, {layout!r}): that layout has {needed} ranks; lending {n} of "
                         f"{c['world_size']} leaves {c['world_size'] - n}")
    return layout


def _groups_made(m) -> int:
    """Process groups the Manager has split so far on this process (its cache, every layout)."""
    return len({id(g) for groups in m._group_cache.values() for g in groups.values() if g is not None})


def _shift(job, layout: str, refusing: bool = True) -> Dict[str, Any]:
    """The switch of a lend or reclaim, with what it created: new_groups (max over processes)
    and new_processes (the change of the job's process count: 0). refusing=False: the job's
    _switch, past the refusal of a switch while processes are lent (the reclaim's own)."""
    m = job.manager
    groups, processes = _groups_made(m), m.comm.size
    if refusing:
        stats = job.switch(layout, keep_processes=True, zero_grads=True)
    else:
        job._check(layout)
        stats = job._switch(layout, None, True, True)
    stats["new_groups"] = int(_c10d.all_max(m.comm, float(_groups_made(m) - groups)))
    stats["new_processes"] = m.comm.size - processes
    return stats


def lend(job, n: int, layout: Optional[str] = None) -> Dict[str, Any]:
    """job.lend(): collective over the job's processes (equal arguments). The layout's last n
    processes give their training state to the others, which run `layout` (default: the same tp
    and zero, dp from the processes that stay); the lent ones return with job.active False.
    ValueError on every rank, nothing moved, for a bad n or layout or while processes are lent.
    Returns the switch's statistics plus lent (their world ranks), new_groups, new_processes."""
    m = job.manager
    refuse_while_lent(job, "job.lend()")
    c = m.config
    target = _target(job, n, layout)
    stats = _shift(job, target)
    job._lent = {"layout": c["config"], "ranks": list(range(c["world_size"] - n, c["world_size"]))}
    stats["lent"] = lent(job)
    return stats


def reclaim(job) -> Dict[str, Any]:
    """job.reclaim(): collective; the layout from before job.lend() on the same processes (the
    lent ones get their state back, job.active True again). ValueError when nothing is lent.
    Returns the switch's statistics plus reclaimed (world ranks), new_groups, new_processes."""
    state = job._lent
    if not state:
        raise ValueError("job.reclaim(): no process is lent; job.lend(n) lends some")
    stats = _shift(job, state["layout"], refusing=False)  # on any failure the processes stay lent
    job._lent = None
    stats["reclaimed"] = list(state["ranks"])
    return stats


class PhaseShifts:
    """The Job's RL phase shifts (a base class of dynatrain.Job): lend, reclaim, refit."""

    _lent: Optional[Dict[str, Any]] = None

    @property
    def lent(self) -> List[int]:
        """World ranks of the processes lent now ([] when none)."""
        return lent(self)

    def lend(self, n: int, layout: Optional[str] = None) -> Dict[str, Any]:
        """Collective: the training state leaves the layout's last n processes, which stay (lend())."""
        return lend(self, n, layout)

    def reclaim(self) -> Dict[str, Any]:
        """Collective: the lent processes take their training state back (reclaim())."""
        return reclaim(self)

    def refit(self, layout: str, module, *, ranks: Optional[List[int]] = None, dtype=None):
        """Collective: a weights-only copy of the current weights in `layout` on `ranks` (default:
        the lent processes when they are as many as the layout's ranks, else the first ones),
        `module` (another instance of the model's class) viewing it there (_refit.py)."""
        from . import _refit
        return _refit.refit(self, layout, module, ranks, dtype)
