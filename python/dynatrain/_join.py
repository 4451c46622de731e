"""A grow on torch.distributed: new processes join the running job through its rendezvous store
(docs/python.md, "Changing the process count" and "On torch.distributed").

Job side (Manager.prepare / Manager.switch to a config of more processes than the world):
  1. world rank 0 publishes the grow's offer in the job's store (OFFER names this grow's key
     space `dynatrain/manager<serial>/grow<generation>`; under it: the current and next config,
     rank 0's model and options, the job's command line, the global ranks of the next world) and
     starts the missing processes in the background: the same command line (executable(), the
     interpreter's arguments as this process got them), with the torchrun variables of a small
     world of their own (RANK, WORLD_SIZE among them, MASTER_ADDR 127.0.0.1, a MASTER_PORT of
     their own) and DYNATRAIN_JOIN=HOST:PORT, the job's store. With DT_JOIN_EXTERNAL=1 it
     starts none: `dynatrain launch --join HOST:PORT --np K -- CMD` starts them from outside.
  2. A thread on every process of the job waits for the decision of world rank 0's thread: every
     joiner registered (`arrived`), or one it started ended first, or DT_RENDEZVOUS_S passed;
     on `go`, once every process of the next world came to build its group (_arrive: a
     joiner rank 0 started that ends first calls the grow off), it makes the next generation's
     group over the store (old processes first, in their order, then the joiners:
     _c10d.next_world) and the native transport over it, while the loop trains.
  3. The commit (Manager.switch): waits for that thread (only for what is not ready: `waited_for`
     in the statistics), agrees on its outcome over the current world, tells the joiners `go`
     or why not (the job then stays in its layout: ValueError on every rank, nothing moved),
     then over the new world: the agreement on the command line and the Manager's arguments
     (a joiner that differs: ValueError on every process, nothing moved), the carried step and
     extras, the state (the native switch over the new world, the joiners holding nothing of
     the current layout), and the groups anew.
Joiner side (the first Manager(...) of a process with DYNATRAIN_JOIN set, join()): connects to
the job's store (deadline DT_RENDEZVOUS_S), reads the offer, takes a slot, builds the same group
and its native manager (holding nothing), waits for the commit and takes part in it; the
Manager then holds its state, `joined` True, `step` and extras from the job.
Invariants: every group made afterwards, on every process, is made over the job's store
(_c10d.job_store); a joined process's torch.distributed default group stays its joiners' own
world (dist.get_rank() there is its rank among the joiners: the job's rank is job.rank).
"""
from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Dict, List, Optional

from . import _abort, _agree, _c10d, _elastic, _native

ENV = "DYNATRAIN_JOIN"
OFFER = "dynatrain/join/offer"  # the key of the grow being prepared (absent: none)
POLL_S = 0.01
GO = "go"
_checked: List[bool] = []


class JoinError(RuntimeError):
    """A process started to join a job by its store (DYNATRAIN_JOIN) could not join it."""


JoinError.__module__ = "dynatrain"


class _Lost(RuntimeError):
    """The next world of a grow will never be whole (its message says why)."""


def rendezvous_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get("DT_RENDEZVOUS_S", "300")))
    except ValueError:
        raise ValueError(f"DT_RENDEZVOUS_S={os.environ['DT_RENDEZVOUS_S']!r}; valid: a number of seconds") from None


def command() -> List[str]:
    """This process's command line after the interpreter (what a joiner runs, and must run)."""
    return list(getattr(sys, "orig_argv", [sys.executable] + sys.argv)[1:])


def refuse(m, to_cfg: str, vacate) -> None:
    """ValueError (before anything moves) for a grow this job cannot run on torch.distributed."""
    if vacate:
        raise ValueError(f"switch to {to_cfg!r} with vacate={list(vacate)}: on torch.distributed a switch either "
                         f"grows (joins processes) or vacates; do one after the other")
    if _c10d.tcp_store(_c10d.job_store()) is None:
        raise ValueError(f"switch to {to_cfg!r} needs {_native.world_size_of(to_cfg)} processes, the torch.distributed "
                         f"world has {m.comm.size}: joining processes needs the TCPStore that init_process_group "
                         f"makes for env:// or tcp:// (torchrun, dynatrain launch); this job's store is "
                         f"{_store_name(_c10d.job_store())}")
    rendezvous_seconds()


def _store_name(store) -> str:
    under = getattr(store, "underlying_store", None)
    return type(under if under is not None else store).__name__


def _client(host: str, port: int, seconds: float):
    """A connection of its own to the job's store, with the keys the job's processes see."""
    dist = _c10d._dist()
    tcp = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=seconds))
    return dist.PrefixStore("default_pg", tcp)


class Grow:
    """One grow being prepared, on a process of the job (steps 1 and 2)."""

    def __init__(self, m, to_cfg: str):
        comm = m.comm
        self.to_cfg, self.config = to_cfg, m.config["config"]
        self.count = _native.world_size_of(to_cfg) - comm.size
        self.generation = getattr(m, "_generation", 0) + 1
        self.serial = comm.manager_serial
        self.key = f"dynatrain/manager{self.serial}/grow{self.generation}"
        self.ranks = comm.ranks + [max(comm.ranks) + 1 + i for i in range(self.count)]
        self.me = comm.ranks[comm.rank]
        tcp = _c10d.tcp_store(_c10d.job_store())
        self.where = (tcp.host, tcp.port)
        self.started = time.perf_counter()
        self.ready_at: Optional[float] = None
        self.error: Optional[str] = None
        self.comm = self.world = None
        self.processes: List[subprocess.Popen] = []
        if comm.rank == 0:
            self._offer(m)
        self.thread = threading.Thread(target=self._run, name="dynatrain-grow", daemon=True)
        self.thread.start()

    def _offer(self, m) -> None:
        store = _c10d.job_store()
        offer = {"key": self.key, "count": self.count, "ranks": self.ranks, "size": len(self.ranks) - self.count,
                 "serial": self.serial, "generation": self.generation, "config": self.config, "to": self.to_cfg,
                 "payload": _elastic._payload(m), "command": command(), "where": self.where}
        store.set(f"{self.key}/offer", pickle.dumps(offer))
        store.set(OFFER, self.key)
        if os.environ.get("DT_JOIN_EXTERNAL", "0") != "1":
            self.processes = start(self.count, self.where)

    def _run(self) -> None:
        try:
            store = _client(*self.where, rendezvous_seconds() + 60)
            if self.me == self.ranks[0]:
                store.set(f"{self.key}/decided", self._decide(store))
            store.wait([f"{self.key}/decided"], timedelta(seconds=rendezvous_seconds() + 60))
            verdict = store.get(f"{self.key}/decided").decode()
            if verdict != GO:
                self.error = verdict
                if self.me == self.ranks[0]:
                    _tell_lost(store, self.key, verdict)  # joiners that registered stop waiting
                return
            _arrive(store, self.key, len(self.ranks), self._lost)
            self.comm = _next(self.serial, self.ranks, self.me, self.generation, self.count, store)
            self.world = _c10d.native_world(self.comm, store=store)
            _c10d._dist().barrier(group=self.comm.group)  # the joiners' managers are built: nothing left to wait for
        except _Lost as e:
            self.error = str(e)
        except Exception as e:  # noqa: BLE001 - agreed on and raised by the commit
            self.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        finally:
            self.ready_at = time.perf_counter()

    def _decide(self, store) -> str:
        """On world rank 0: GO once every joiner registered, else why not."""
        deadline = time.monotonic() + rendezvous_seconds()
        while True:
            arrived = store.add(f"{self.key}/arrived", 0)
            if arrived >= self.count:
                return GO
            ended = self._ended(f"before it joined ({arrived} of {self.count} joined)")
            if ended:
                return ended
            if time.monotonic() > deadline:
                return (f"{arrived} of the {self.count} joining process(es) registered at the job's store "
                        f"{self.where[0]}:{self.where[1]} within {rendezvous_seconds():.0f} s (DT_RENDEZVOUS_S)")
            time.sleep(POLL_S)

    def _ended(self, when: str) -> Optional[str]:
        """Why the grow cannot go on when a process this one started has ended, else None."""
        for p in self.processes:
            if p.poll() is not None:
                return f"process {p.pid}, started to join the job, ended with status {p.returncode} {when}"
        return None

    def _lost(self) -> Optional[str]:
        """Why the next world will never be whole, once world rank 0 saw a joining process it
        started end (it tells every process through the store: _lost_of), else None."""
        if self.processes:
            ended = self._ended("after it registered, before the new world's group was built")
            if ended:
                _tell_lost(_c10d.job_store(), self.key, ended)
        return _lost_of(_c10d.job_store(), self.key)

    def wait(self) -> Dict[str, Any]:
        """Joins the thread; what the commit waited for."""
        t0 = time.perf_counter()
        pending = self.ready_at is None
        self.thread.join()
        waited = time.perf_counter() - t0
        what = "nothing" if not pending else f"the {self.count} joining process(es) and the new world's group"
        return {"join_wait_seconds": waited, "waited_for": what,
                "join_startup_seconds": self.ready_at - self.started}


def _tell_lost(store, key: str, why: str) -> None:
    store.set(f"{key}/lost", why)
    store.add(f"{key}/lost/count", 1)


def _lost_of(store, key: str) -> Optional[str]:
    return store.get(f"{key}/lost").decode() if store.add(f"{key}/lost/count", 0) else None


def _arrive(store, key: str, size: int, lost) -> None:
    """Waits until the `size` processes of the next world arrived at its group build, so that
    Gloo's connect, which waits for every peer until its timeout, starts with all of them alive;
    _Lost naming why once `lost()` does first (a process ended, or the grow was called off)."""
    store.add(f"{key}/building", 1)
    deadline = time.monotonic() + rendezvous_seconds()
    while store.add(f"{key}/building", 0) < size:
        why = lost()
        if why:
            raise _Lost(why)
        if time.monotonic() > deadline:
            raise _Lost(f"{store.add(f'{key}/building', 0)} of the {size} processes of the next world came to "
                               f"build its group within {rendezvous_seconds():.0f} s (DT_RENDEZVOUS_S)")
        time.sleep(POLL_S)


def start(count: int, where) -> List[subprocess.Popen]:
    """The joining processes, on this host: this command line, a small torch.distributed world
    of their own, DYNATRAIN_JOIN naming the job's store."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = []
    for i in range(count):
        env = dict(os.environ, RANK=str(i), LOCAL_RANK=str(i), WORLD_SIZE=str(count), LOCAL_WORLD_SIZE=str(count),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env[ENV] = f"{where[0]}:{where[1]}"
        out.append(subprocess.Popen([_elastic.executable()] + command(), env=env))
    return out


def prepare(m, to_cfg: str) -> None:
    m._grow = Grow(m, to_cfg)
    m._prepared = (to_cfg, [])


def commit(m, to_cfg: str) -> Dict[str, Any]:
    """Step 3 on a process of the job (collective over m.comm)."""
    t0 = time.perf_counter()
    if getattr(m, "_grow", None) is None:
        prepare(m, to_cfg)
    grow, m._grow, m._prepared = m._grow, None, None
    waits = grow.wait()  # first: the thread sets grow.error
    everyone = m.comm.allgather((grow.error, waits))
    bad = next((e for e, _ in everyone if e), None)
    waits = max((w for _, w in everyone), key=lambda w: w["join_wait_seconds"])  # the slowest process's
    if m.comm.rank == 0:
        store = _c10d.job_store()
        store.set(f"{grow.key}/commit", bad or GO)
        store.delete_key(OFFER)
    if bad:
        raise ValueError(f"switch to {to_cfg!r} refused: {bad}; nothing moved, the job goes on in {grow.config}")
    job, mine = _elastic._outgoing(m)
    stats = _over(m, grow.comm, grow.world, to_cfg, m._arguments, job, mine, t0)
    stats.update(waits)
    return stats


def _over(m, new, world, to_cfg: str, arguments, job: bytes, mine: bytes, t0: Optional[float]) -> Dict[str, Any]:
    """The commit over the new world, on every process of it (the module's step 3); `t0`: when
    the commit began on a process of the job, None on a joiner."""
    joiner = t0 is None
    same = {"command": command(), "arguments": arguments}
    gathered = new.allgather((_agree._digest(same), job if new.rank == 0 else None, mine))  # one collective for three
    if len({d for d, _, _ in gathered}) > 1:  # every process sees it: the agreement's message on every one
        _agree.agree(new, "the joining processes' command line and Manager arguments", same)
    head, everyone = gathered[0][1], [blob for _, _, blob in gathered]
    if not joiner:
        _native.use_world(m._native, world)
    m._drop_views()
    _elastic._ending.after_world_change()
    stats = m._native.switch(to_cfg)
    m._world_keep = world  # the transport lives as long as this reference
    m._generation = new.generation
    m.comm = new
    _native.watch_world(m._native)
    m._group_cache = {}
    _elastic._deliver(m, pickle.loads(head), everyone)
    m._bind()
    stats.update(config=m._config["config"], world_before=new.size - new.joined, world_after=new.size)
    stats["pause_seconds"] = _c10d.all_max(new, 0.0 if joiner else time.perf_counter() - t0)
    return stats


def _next(serial, ranks: List[int], me: int, generation: int, joined: int, store=None):
    """The next generation's Comm (old processes first, then `joined` joiners)."""
    new = _c10d.next_world(serial, ranks, me, generation, store)
    new.generation, new.joined = generation, joined
    return new


# ---- the joining process ----
def join(m, arguments) -> bool:
    """In the first Manager of a process with DYNATRAIN_JOIN set: joins the job (True)."""
    where = os.environ.get(ENV)
    if _checked or not where:
        return False
    _checked.append(True)
    t0 = time.perf_counter()
    mine = arguments()  # ValueError for a bad model or watchdog_s, before the job hears of this process
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{ENV}={where!r}; valid: HOST:PORT of the job's store (its MASTER_ADDR:MASTER_PORT)")
    store, offer = _offer_of(host, int(port))
    key = offer["key"]
    slot = store.add(f"{key}/arrived", 1) - 1
    if slot >= offer["count"]:
        raise JoinError(f"the job at {where} grows to {offer['to']} with {offer['count']} joining process(es), "
                        f"which had all joined; this one is one too many")
    _c10d._joined_store.append(store)
    me = offer["ranks"][offer["size"] + slot]
    _abort.JOB_RANK[:] = [me]  # its one-line error reports name its rank in the job
    try:
        _arrive(store, key, len(offer["ranks"]), lambda: _lost_of(store, key))
    except _Lost as e:
        raise JoinError(f"the job at {where} called its grow to {offer['to']} off: {e}") from None
    new = _next(offer["serial"], offer["ranks"], me, offer["generation"], offer["count"])
    world = _native_world_at(new, host)
    m._options = pickle.loads(offer["payload"])
    o = m._options
    m._kind_dtype = m._kind_dtypes(o["param_bytes"])
    m._native = _native.Manager(world, o["model"], offer["config"], o["states"], o["bucket_elems"],
                                o["param_bytes"], o["mem_budget"], o["gpus_per_node"])
    m._native.prefault(_native.rank_state_bytes(o["model"], offer["to"], o["states"], o["bucket_elems"],
                                                o["param_bytes"], new.rank))  # the state it receives: warm pages
    _c10d._dist().barrier(group=new.group)  # with the job's threads: this process is ready for the commit
    store.wait([f"{key}/commit"], timedelta(days=365))
    verdict = store.get(f"{key}/commit").decode()
    if verdict != GO:
        raise JoinError(f"the job at {where} called its grow to {offer['to']} off: {verdict}")
    m._arguments = mine
    m.join_stats = _over(m, new, world, offer["to"], mine, b"", pickle.dumps({}), None)
    m.join_stats["join_seconds"] = time.perf_counter() - t0
    m.joined = True
    return True


def _offer_of(host: str, port: int):
    """The job's store and its grow's offer (JoinError naming the store after DT_RENDEZVOUS_S)."""
    seconds = rendezvous_seconds()
    deadline = time.monotonic() + seconds
    try:
        store = _client(host, port, seconds)
    except (RuntimeError, TimeoutError) as e:
        raise JoinError(f"no job's store answered at {host}:{port} ({ENV}) within {seconds:.0f} s (DT_RENDEZVOUS_S): "
                        f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    while time.monotonic() < deadline:
        try:
            store.wait([OFFER], timedelta(seconds=max(0.1, deadline - time.monotonic())))
            key = store.get(OFFER).decode()
            return store, pickle.loads(store.get(f"{key}/offer"))
        except RuntimeError:  # no offer yet, or withdrawn meanwhile
            time.sleep(POLL_S)
    raise JoinError(f"the job's store at {host}:{port} ({ENV}) offered no grow within {seconds:.0f} s "
                    f"(DT_RENDEZVOUS_S): the job must prepare or switch to a config of more processes")


def _native_world_at(new, host: str):
    """The native transport over the new world, its address the job's host (not the joiners')."""
    before = os.environ.get("MASTER_ADDR")
    os.environ["MASTER_ADDR"] = host
    try:
        return _c10d.native_world(new)
    finally:
        if before is None:
            del os.environ["MASTER_ADDR"]
        else:
            os.environ["MASTER_ADDR"] = before
