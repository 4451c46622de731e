"""Switches that change the job's processes, and the join of a process a grow started
(docs/python.md, "Changing the process count"; the native side is python/elastic.h).

  grow     Manager.switch() to a config needing more processes than the world (on
           torch.distributed: processes join by the store instead, _join.py): world rank 0
           starts the missing ones (MPI_Comm_spawn of sys.executable with this process's own
           command line, so they run the same script from the top), they merge into the world
           and receive their state in the same switch. Their first Manager(...) joins: it takes
           part in the rest of the starters' switch and returns with the state, `joined` True,
           `step` and the job's extras (in `_pending_extra` until register()).
  shrink   fewer processes than the world: the processes beyond the layout hand their state
           over, then switch() raises Leaving on them.
  vacate   switch(cfg, vacate=[ranks]): those processes take no rank and leave; the layout is laid
           on the others (rank r stays where it is unless vacated), processes are started for
           what they cannot hold.
Only in a Manager(..., elastic=True) (the default); with elastic=False its processes are fixed.

A switch may be prepared ahead, Manager.prepare(cfg, vacate=...) a few steps before
Manager.switch(cfg, vacate=...): the processes then start while the loop trains.

Invariants:
  * The carried state travels with the switch, before the state moves, over every process of
    both worlds: rank 0's step and extras, and every process's per-rank extras (a list indexed
    by the rank each process held before the switch; processes started by it add nothing).
  * After a switch that changed the world, `m.comm` is a new mpi4py communicator of the job's
    processes (rank r holds rank r of the layout) and the groups are split anew from it.
  * Such switches need Open MPI's orte_allowed_exit_without_sync=1 (scripts/mpi-env.sh; refused
    with ValueError otherwise), because a process that took part in one ends without
    MPI_Finalize, which would wait for processes that left, or hang after a grow: at exit, after
    every atexit handler registered after `import dynatrain`, with status 0, or 1 after an
    uncaught exception.
"""
from __future__ import annotations

import atexit
import os
import pickle
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from . import _c10d, _native


class Leaving(SystemExit):
    """Raised by Manager.switch() on a process that holds no rank of the new layout, after it
    handed its state over. A SystemExit with code 0: an unchanged training loop ends and the
    process exits with status 0 (without MPI_Finalize). The Manager holds nothing afterwards."""

    def __init__(self, config: str):
        super().__init__(0)
        self.config = config

    def __str__(self) -> str:
        return f"this process holds no rank of {self.config} and leaves the job"


def executable() -> str:
    """What a grow starts: DT_EDM_EXECUTABLE (as for `dynatrain train`), else this interpreter."""
    return os.environ.get("DT_EDM_EXECUTABLE") or sys.executable


def changes_processes(m, to_cfg: str, vacate: Optional[Sequence[int]]) -> bool:
    """Whether switching `m` to `to_cfg` changes the job's processes (ValueError for a config
    that does not parse, or a vacate list on a manager with fixed processes)."""
    needed = _native.world_size_of(to_cfg)
    if m._prepared is not None:
        return True
    if not m._options["elastic"]:
        if vacate:
            raise ValueError("vacate needs a Manager whose processes may change (elastic=True)")
        return False
    return bool(vacate) or needed != m.comm.size


def prepare(m, to_cfg: str, vacate: Optional[Sequence[int]]) -> None:
    """Manager.prepare(): starts a switch that changes the processes in the background (new
    processes start while the caller trains); nothing for a switch that changes none."""
    if m._prepared is not None:
        raise ValueError(f"a switch to {m._prepared[0]} is being prepared already; switch() to it first")
    if not changes_processes(m, to_cfg, vacate):
        return
    if _c10d.is_c10d(m.comm):  # a shrink or vacate starts nothing; a grow joins processes by the store
        if _native.world_size_of(to_cfg) > m.comm.size:
            from . import _join
            _join.prepare(m, to_cfg)
        return
    ranks = _vacate_list(vacate)
    _native.elastic_prepare(m._native, to_cfg, ranks, executable(), _payload(m) if m.comm.rank == 0 else b"")
    m._prepared = (to_cfg, ranks)


def switch(m, to_cfg: str, vacate: Optional[Sequence[int]]) -> Dict[str, Any]:
    """Manager.switch() where the processes change (collective over m.comm): the commit of the
    prepared switch, or prepare and commit at once."""
    ranks = _vacate_list(vacate)
    if m._prepared is not None and m._prepared != (to_cfg, ranks):
        raise ValueError(f"a switch to {m._prepared[0]} (vacate {m._prepared[1]}) is being prepared; "
                         f"switch() to it with the same arguments")
    if _c10d.is_c10d(m.comm) and _native.world_size_of(to_cfg) > m.comm.size:
        from . import _join
        return _join.commit(m, to_cfg)
    if _c10d.is_c10d(m.comm):
        return switch_in_place(m, to_cfg, ranks)
    job, mine = _outgoing(m)

    def native():
        if m._prepared is not None:
            m._prepared = None
            return _native.elastic_commit(m._native, job, mine)
        payload = _payload(m) if m.comm.rank == 0 else b""
        return _native.elastic_switch(m._native, to_cfg, ranks, executable(), payload, job, mine)
    return _adopt(m, _moved(m, to_cfg, native))


def _moved(m, to_cfg: str, native) -> Dict[str, Any]:
    """Runs `native` (the native switch) with the views dropped; Leaving on a process that holds
    nothing afterwards. A ValueError (refused on every rank, nothing moved) rebinds the views."""
    m._drop_views()
    try:
        out = native()
    except ValueError:
        m._bind()
        raise
    _ending.after_world_change()
    if out["left"]:
        _hold_nothing(m)
        raise Leaving(to_cfg)
    return out


def switch_in_place(m, to_cfg: str, ranks: List[int]) -> Dict[str, Any]:
    """A shrink or vacate on torch.distributed (no process starts): the carried values over the
    current group, the state over it, then the group of the processes that stay (rank r of the
    layout is rank r of it; _c10d.shrunk_world) and the Manager's world over that group."""
    t0 = time.perf_counter()
    comm = m.comm
    placement = _native.in_place_placement(_native.world_size_of(to_cfg), comm.size, ranks)  # ValueError: nothing moved
    job, mine = _outgoing(m)
    head = comm.bcast(job if comm.rank == 0 else None, root=0)
    everyone = comm.allgather(mine)
    out = _moved(m, to_cfg, lambda: _native.elastic_in_place(m._native, to_cfg, ranks))
    m._generation = getattr(m, "_generation", 0) + 1
    m.comm = _c10d.shrunk_world(comm, [comm.ranks[p] for p in placement], m._generation)
    m._world_keep = _c10d.native_world(m.comm)  # the transport lives as long as this reference
    _native.use_world(m._native, m._world_keep)
    _native.watch_world(m._native)  # the job's lines name the new world's ranks
    m._group_cache = {}
    _deliver(m, pickle.loads(head), everyone)
    m._bind()
    stats = {k: v for k, v in out.items() if k not in ("job", "mine", "left")}
    stats["pause_seconds"] = _c10d.all_max(m.comm, time.perf_counter() - t0)
    stats["config"] = m._config["config"]
    return stats


def join(m, arguments) -> bool:
    """In the first Manager of a process a grow started: joins the running job's switch and
    fills `m` (True); False in any other process or Manager. `arguments`: the Manager's own
    (_agree.manager_arguments without the config), agreed with the job's on torch.distributed."""
    from . import _join
    if _join.join(m, arguments):
        return True
    ticket = _join_ticket()
    if ticket is None:
        return False
    m._options = pickle.loads(ticket.payload())  # rank 0's: the job's model and options
    o = m._options
    m._kind_dtype = m._kind_dtypes(o["param_bytes"])
    m._native = _native.Manager(ticket, o["model"], ticket.current(), o["states"], o["bucket_elems"],
                                o["param_bytes"], o["mem_budget"], o["gpus_per_node"])
    out = _native.finish_join(m._native)
    _ending.after_world_change()
    m.joined = True
    m.join_stats = _adopt(m, out)
    return True


# ---- internals ----
_join = {"checked": False}


def _join_ticket():
    """The job that started this process, once per process (later Managers are ordinary)."""
    if _join["checked"]:
        return None
    _join["checked"] = True
    return _native.join_job(executable())


def _vacate_list(vacate: Optional[Sequence[int]]) -> List[int]:
    if vacate is None:
        return []
    if isinstance(vacate, (str, bytes)) or not all(isinstance(r, int) and not isinstance(r, bool) for r in vacate):
        raise ValueError(f"vacate must be a list of world ranks (ints); got {vacate!r}")
    return list(vacate)


def _payload(m) -> bytes:
    """Rank 0's model and options for the processes a grow starts (a config.json path made
    absolute: they may start in another directory)."""
    options = dict(m._options)
    if isinstance(options["model"], str) and os.path.isfile(options["model"]):
        options["model"] = os.path.abspath(options["model"])
    return pickle.dumps(options)


def _outgoing(m):
    """(rank 0's step, extras and per-rank names; this rank's per-rank extras), pickled."""
    job = {name: get() for name, (get, _, per_rank) in m._extra.items() if not per_rank}
    mine = {name: get() for name, (get, _, per_rank) in m._extra.items() if per_rank}
    head = pickle.dumps({"step": m.step, "job": job, "per_rank": sorted(mine)}) if m.comm.rank == 0 else b""
    return head, pickle.dumps(mine)


def _deliver(m, head: Dict[str, Any], mine: List[bytes]) -> None:
    """The carried values to their set(), or to `_pending_extra` where not registered (a joiner)."""
    m.step = head["step"]
    ranks = [pickle.loads(b) if b else {} for b in mine]
    values = dict(head["job"])
    values.update({name: [r.get(name) for r in ranks] for name in head["per_rank"]})
    for name, value in values.items():
        if name in m._extra:
            m._extra[name][1](value)
        else:
            m._pending_extra[name] = value


def _adopt(m, out: Dict[str, Any]) -> Dict[str, Any]:
    """After the native switch on a process that stays: the new communicator, groups, carried
    values and views; the switch's statistics."""
    from mpi4py import MPI
    t1 = time.perf_counter()
    m.comm = MPI.Intracomm(MPI.Comm.f2py(_native.world_handle(m._native))).Dup()
    _native.watch_world(m._native)  # the failure path's ranks are the new world's
    m._group_cache = {}
    _deliver(m, pickle.loads(out["job"]), out["mine"])
    m._bind()
    stats = {k: v for k, v in out.items() if k not in ("job", "mine", "left")}
    stats["rebind_seconds"] = m.comm.allreduce(time.perf_counter() - t1, op=MPI.MAX)
    # The native part (`seconds`, slowest process) counts from the commit's start on every
    # process: a joined one waited for the starters before it, while they trained.
    stats["pause_seconds"] = stats["seconds"] + stats["rebind_seconds"]
    stats["config"] = m._config["config"]
    return stats


def _hold_nothing(m) -> None:
    """A process that left: no views, no communicator, inactive."""
    m._drop_views()
    m.comm = None
    m._group_cache = {}
    m._groups = dict.fromkeys(m._groups)
    m._config = dict(m._config, active=False)


class _Ending:
    """How a process that took part in a world change ends (the module's invariant)."""

    def __init__(self):
        self.without_finalize = False
        self.status = 0

    def after_world_change(self) -> None:
        if not self.without_finalize:
            self.without_finalize = True
            hook = sys.excepthook

            def failed(*args):
                self.status = 1
                hook(*args)
            sys.excepthook = failed

    def at_exit(self) -> None:
        if not self.without_finalize:
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed stream: nothing left to flush
                pass
        os._exit(self.status)


_ending = _Ending()
atexit.register(_ending.at_exit)  # at import: runs after the handlers registered later (LIFO)
