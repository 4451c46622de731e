"""A lost process recovered in place on torch.distributed (docs/python.md, "A lost process").

When a process of an adopted job dies (SIGKILL, the OOM killer, a crash), its connections
close and Gloo raises in the survivors' collective of that step: in optimizer.step(), or in one
of the package's collectives before it, kept there until the step (_interrupt.py).
optimizer.step() catches it (only on torch.distributed, with processes that may change, over
more than one process, and not under `dynatrain launch` without --keep-going) and:

  1. raises the world's loss mark in the store, so that a survivor still in its forward stops
     there (_stop.py; the launcher's report of a killed process raises it sooner), and abandons
     the generation: shuts down every connection of the job's groups
     (_c10d.abandon_groups), so that a survivor waiting on another survivor gets its error too;
  2. agrees who survived through the rendezvous store, under a key prefix of this recovery, by
     the protocol `dynatrain train` runs too (job/lost_peer.h, agree_survivors, through the
     binding; on a connection to the store made at adoption): each survivor counts itself
     arrived and reports the processes of its own node that ended (_nodes.py: node and pid of
     every process); the process of global rank 0 (the store's host) decides once every process
     has either arrived or is known gone, or, for the others, SETTLE_S after the last arrival;
     the members' list is then read by every survivor (deadline: the watchdog's);
  3. builds the survivors' groups over the store (as a shrink does, _c10d.raw_comm);
  4. rebuilds the lost ranks' state from the replicas the survivors hold (the planner takes the
     lost processes to hold nothing), and with redundancy 2 from the copies of the lost ranks'
     state they keep (_redundancy.py), in the layout job/survivor_layout.h picks, with one
     planned switch (python/elastic.h, recover_in_place);
  5. returns from optimizer.step() without the step: the interrupted step is not applied, and
     `job.step` stays, so a loop `while job.step < steps:` does it again.

The step's update is applied only after a barrier over every process (COMMIT), so a step is
applied by every survivor or by none: a loss inside the barrier that let some survivors pass it
has the others complete the step in the recovery (_complete_split_step). A loss the job cannot recover from ends every survivor
with one line (rank 0's) and ProcessLost: the process of global rank 0 (it hosts the store), a
box of state no survivor holds (ZeRO shards, tensor-parallel pieces without a dp replica: a
checkpoint is needed), or no layout for the survivors. When the store's node is lost (the whole
node of global rank 0), the lowest rank but 0 of each node prints the line.
"""
from __future__ import annotations

import sys
import time
import weakref
from typing import Dict, List

from . import _abort, _c10d, _elastic, _native, _nodes, _redundancy, _stop, _watchdog

SETTLE_S = 1.0  # how long the decision waits for a process of another node after the last arrival
_connection: List = []  # this process's own connection to the job's store (_native.connect_store)


class ProcessLost(SystemExit):
    """Raised by optimizer.step() on every survivor when a lost process cannot be recovered in
    place; its one line is printed by the survivors' first rank. Exit status 1."""

    def __init__(self, why: str):
        super().__init__(1)
        self.why = why

    def __str__(self) -> str:
        return self.why


def enabled(m) -> bool:
    """Whether a lost peer is recovered (torch.distributed, elastic, more than one process, and not
    under a launcher that ends the job when a rank fails: `dynatrain launch` without --keep-going)."""
    return m.comm is not None and _c10d.is_c10d(m.comm) and m._options["elastic"] and m.comm.size > 1 and \
        not _abort.launcher_ends_job() and _c10d.tcp_store(_store()) is not None


def announce(m, model=None, job=None) -> None:
    """At adoption, on every process: its node and pid in the store, for the decision; the loss
    watch started and the model's forward made to stop on it (_stop.py)."""
    if enabled(m):
        _nodes.record(_store(), _prefix(m), m.comm.ranks[m.comm.rank])
        if not _connection:  # while the store's host runs: a recovery learns at once when it is gone
            tcp = _c10d.tcp_store(_store())
            _connection.append(_native.connect_store(f"{tcp.host}:{tcp.port}", _deadline(m)))
            _stop.start(f"{tcp.host}:{tcp.port}", _deadline(m))
        # Also on that connection, unprefixed, where the loss watch reads it (job/lost_peer.h).
        _native.announce_place(_connection[0], f"{_prefix(m)}/places", m.comm.ranks[m.comm.rank])
        if model is not None:
            _stop.install(model, lambda: watch(m), weakref.ref(job))
        watch(m)


def watch(m) -> None:
    """After adoption, a step, a recovery, and before each forward: the loss watch on the world
    the job runs in now (its mark lowered when the world is new)."""
    if enabled(m):
        _stop.watch(_mark_key(m), lambda: [f"{_prefix(m)}/places/place/{r}" for r in m.comm.ranks])


def commit(m) -> None:
    """The step's commit point, before the update: a barrier over every process (after which
    every process has announced itself: the nodes are read, once per world)."""
    if enabled(m):
        m.comm.Barrier()
        _nodes.table(_store(), _prefix(m), m.comm.ranks)


def in_job(job, error: BaseException) -> bool:
    """Job side (adopt.py's optimizer.step()): recover() with the same parameters and optimizer
    state entries unbound before the move and bound again after, as job.switch() does. Returns
    whether this process's step was completed in the recovery (its commit met the loss after
    other survivors had passed it and applied the step)."""
    from . import _habits
    t0 = time.perf_counter()
    world = _survivors(job, error)
    completed = _complete_split_step(job, world)  # with the old layout's views still bound
    before = {name: tuple(p.shape) for name, p in job._params}
    label = f"the recovery from a lost process ({job._last_config} -> fewer processes)"
    _habits.retire_accumulators(job._params, label)
    job._unbind()
    recover(job, world, t0)
    job._switches += 1
    job._bind()
    job._remember_shapes(before, label)
    job._synced = False
    job.backward_ran = False
    job.forwards, job.first_input = 0, None
    return completed


class _World:
    """Steps 1-3 of a recovery, done: who survived and their own world (the old one still m.comm)."""

    def __init__(self, comm, new, members: List[int], lost: List[int], lost_text: str, generation: int, t1: float):
        self.comm, self.new, self.members, self.lost, self.lost_text = comm, new, members, lost, lost_text
        self.generation, self.t1 = generation, t1
        self.first = new.rank == 0
        self.completed = 0  # survivors that applied their step in the recovery (_complete_split_step)


def _survivors(job, error: BaseException) -> _World:
    """Steps 1-3: abandon the generation, agree who survived, build their world. Re-raises `error`
    when no process was lost."""
    m = job.manager
    _raise_mark(m)  # the survivors still computing stop (_stop.py)
    _c10d.abandon_groups()
    comm, before = m.comm, m.comm.size
    me = comm.ranks[comm.rank]
    generation = _generation(m) + 1
    prefix = f"{_prefix(m)}/recovery{generation}"
    members = _agree(m, me, prefix)
    if len(members) == before:
        raise error
    lost = [r for r in comm.ranks if r not in members]
    t1 = time.perf_counter()
    new = _c10d.raw_comm(f"{prefix}/world", members, me)
    new.manager_serial = f"{comm.manager_serial}-gen{generation}"
    lost_text = _nodes.lost_text(comm.ranks, lost, _nodes.table(_store(), _prefix(m), comm.ranks))
    return _World(comm, new, members, lost, lost_text, generation, t1)


def _complete_split_step(job, world: _World) -> bool:
    """A loss met inside a step's commit barrier can leave it passed on some survivors (they
    applied the step and met the loss in the next one) and not on others. Passing Gloo's
    barrier means every process entered it, so those others did every collective of the step
    ("ready"): where the update is local (no ZeRO shard), they apply it now and every survivor
    goes on from the same step (job.step counted on). Any other mix of steps ends the job with
    one line. Returns whether this process completed its step (world.completed: how many did)."""
    m = job.manager
    seen = world.new.allgather((m.step, job._stage))
    steps = sorted({step for step, _ in seen})
    behind = [stage for step, stage in seen if step == steps[0]]
    partial = [step for step, stage in seen if stage == "update"]
    head = f"lost {world.lost_text} of {world.comm.size}"
    if partial:
        _end(world.first, f"{head} while step {partial[0]}'s update gathered its ZeRO shards: the survivors applied "
                          f"their shards of it and the lost processes' are gone; resume from a checkpoint")
    if len(steps) == 1:
        return False
    local = job._sharded_kind() is None  # the layout's, alike on every survivor
    if len(steps) > 2 or steps[1] != steps[0] + 1 or any(s != "ready" for s in behind) or not local:
        _end(world.first, f"{head}: the survivors stand at steps {', '.join(map(str, steps))} (step {steps[0]} "
                          f"applied by some and not by others, and its update cannot be completed here: "
                          f"{'ZeRO shards' if not local else 'not every collective done'}); resume from a checkpoint")
    world.completed = len(behind)
    if m.step != steps[0]:
        return False
    job.complete_ready_update()
    m.step += 1
    return True


def recover(job, world: _World, t0: float) -> Dict:
    """Steps 4-5, on the survivors' world: the layout for them, the planned switch, the line.
    Returns the recovery's statistics (also job.last_recovery)."""
    m = job.manager
    comm, new, members, first = world.comm, world.new, world.members, world.first
    before = comm.size
    m._generation = world.generation
    to = _native.survivor_layout(m.config["config"], len(members), job._runs)
    if to is None:
        _end(first, f"lost {world.lost_text} of {before}: no layout of {len(members)} or fewer processes runs this model")
    m._drop_views("from before the recovery from a lost process")
    m.comm = new
    m._world_keep = _c10d.native_world(new)
    _native.use_world(m._native, m._world_keep)
    copies = _redundancy.sources(m, comm.ranks, members)  # redundancy 2: the lost ranks' copies
    t2 = time.perf_counter()
    try:
        out = _native.recover_in_place(m._native, to, [comm.ranks.index(r) for r in members], before, copies)
    except ValueError as e:
        _end(first, f"lost {world.lost_text} of {before}: {e}")
    _native.watch_world(m._native)
    watch(m)  # the survivors' world: its own mark
    m._group_cache = {}
    m._bind()
    _elastic._ending.after_world_change()  # the abandoned groups' threads must not hold the exit
    stats = {k: v for k, v in out.items() if k not in ("job", "mine", "left")}
    parts = new.allgather((world.t1 - t0, t2 - world.t1, time.perf_counter() - t0, _stop.take_stopped(),
                           time.time()))  # one collective for the figures
    stats.update(config=to, lost=world.lost, copies=len(copies), completed_step=world.completed,
                 agree_seconds=max(p[0] for p in parts), groups_seconds=max(p[1] for p in parts),
                 pause_seconds=max(p[2] for p in parts), stopped_mid_step=sum(p[3] for p in parts),
                 met_unix_s=min(p[4] - p[2] for p in parts), resumed_unix_s=max(p[4] for p in parts))
    if first:
        done = f"step {m.step - 1}'s update completed on {world.completed} survivor" \
               f"{'s' if world.completed != 1 else ''} whose barrier met the loss; " if world.completed else ""
        sys.stdout.write(f"recovery: lost {world.lost_text} of {before}; {to} on {len(members)} processes after a "
                         f"{stats['pause_seconds']:.3f} s pause; {done}step {m.step} again\n")  # one write: one line
        sys.stdout.flush()
    job.last_recovery = stats
    return stats


# ---- internals ----
def _store():
    return _c10d.job_store()


def _prefix(m) -> str:
    serial = m.comm.manager_serial
    return f"dynatrain/manager{str(serial).split('-')[0]}"


def _mark_key(m) -> str:
    """The loss mark of the world the job runs in (a new one with every change of processes)."""
    return f"dynatrain/manager{m.comm.manager_serial}/loss_met"


def _raise_mark(m) -> None:
    try:
        _native.raise_loss_mark(_connection[0], _mark_key(m))
    except RuntimeError:  # the store is gone with its host: the agreement says so
        pass


def _generation(m) -> int:
    return getattr(m, "_generation", 0)


def _deadline(m) -> float:
    base = m._watchdog_base()
    return base if base > 0 else _watchdog.DEFAULT_SECONDS


def _agree(m, me: int, prefix: str) -> List[int]:
    """Step 2: the surviving global ranks, in the current layout's order (every survivor alike),
    agreed under the store keys `prefix` (this recovery's); global rank 0 decides."""
    ranks = m.comm.ranks
    order = sorted(ranks, key=lambda r: r != 0)  # global rank 0 first: the store's host decides
    try:
        where = _nodes.table(_store(), _prefix(m), ranks)
        got = _native.agree_survivors(_connection[0], prefix, [where[r] for r in order], order.index(me),
                                      _deadline(m), SETTLE_S)
    except RuntimeError as e:  # the store is gone with its host, or the deadline passed
        _store_lost(m, me, str(e).splitlines()[0])
    if got is None:
        _end(True, f"global rank {me} reached the survivors' agreement after it was decided; it leaves")
    return sorted((order[i] for i in got), key=ranks.index)


def _store_lost(m, me: int, error: str):
    """The store did not answer: global rank 0 (its host) is lost, maybe with its node. One line
    from the lowest rank but 0 of each node (_nodes.reports), ProcessLost on all."""
    where = _nodes.kept(_prefix(m), m.comm.ranks)
    if where is None:  # lost before the first step's commit: no nodes known
        first, on, at = me == min(r for r in m.comm.ranks if r != 0), "", ""
    else:
        first, on, at = _nodes.reports(where, me), f" on node {_nodes.name()}", f" on node {where[0][0]}" \
            if 0 in where else ""
    _end(first, f"the survivors{on} could not agree through the store ({error}): it lives in the process of "
                f"torch.distributed global rank 0{at}, whose loss cannot be recovered; resume from a checkpoint")


def _end(first: bool, why: str):
    """An unrecoverable loss: the one line (from the survivors' first rank), ProcessLost."""
    if first:
        sys.stderr.write(f"dynatrain: error: {why}\n")
        sys.stderr.flush()
    _elastic._ending.after_world_change()
    _elastic._ending.status = 1
    raise ProcessLost(why)
