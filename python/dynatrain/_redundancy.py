"""Redundancy 2: a copy of each process's state in the memory of a process on another node
(docs/reliability.md, "A copy on another node"), so that a lost node is recovered in place.

  who       edm/copy_holders.h over every process's node (DYNATRAIN_NODE, else the hostname):
            node k's ranks are copied by node k+1's (cyclically), at the same position
  what      every buffer of the copied rank except its grads and the kinds a rank on another
            node holds the same of (a dp replica: at dp across nodes the params are not
            copied, only the ZeRO shards): native memory from the Manager's pool
            (python/manager.h, hold_copies; edm::kinds_held_on_other_nodes)
  when      refresh(), at the end of every optimizer.step() and at adoption: every process
            sends its buffers to its copy's holder and receives the copies it keeps (Gloo
            isend / irecv over the job's group), then the copies are of step `step`
  recovery  sources(): the copies as extra sources of recover_in_place when every survivor's
            copies are of the step the job stands at; none otherwise (a loss during a refresh)

Invariants:
  * The copies belong to one layout and one group: a switch gives them back (the Manager's
    move_state) and empties the views of them handed out here (Manager._views); the next
    refresh holds them anew. `step` is -1 while no copy is complete.
  * Collective over the Manager's comm, every rank alike: the nodes are gathered, the holders
    computed by the same pure function everywhere.
Only on torch.distributed (a lost process is recovered in place only there) and on two nodes
or more; after a recovery leaves every process on one node, the copies stop (one line) until a
switch or a new group (a grow) brings another node.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import _c10d, _interrupt, _native

VALID = "valid are 1 (no copy) and 2 (each process's state also kept by a process on another node)"


def setting(redundancy) -> int:
    """The redundancy asked for: the argument, else DYNATRAIN_REDUNDANCY, else 1."""
    source = "" if redundancy is not None else " (DYNATRAIN_REDUNDANCY)"
    value = redundancy if redundancy is not None else os.environ.get("DYNATRAIN_REDUNDANCY", "1")
    if isinstance(value, bool) or str(value).strip() not in ("1", "2"):
        raise ValueError(f"redundancy {value!r}{source}: {VALID}")
    return int(value)


def node_name() -> str:
    return os.environ.get("DYNATRAIN_NODE") or socket.gethostname()


class Copies:
    """The copies one Manager keeps (Manager._copies), and where its own state is copied."""

    def __init__(self, m, lazy: bool = False):
        self.on = True
        self.step = -1  # the step the copies hold; -1 while none is complete
        self.key: Optional[Tuple[int, int]] = None  # (views generation, comm) the copies were held for
        self.holders: List[int] = []  # holders[r]: the rank keeping rank r's copy
        self.kept: List[int] = []  # the ranks whose copies this process keeps
        self.ranks: List[int] = []  # the comm's global ranks the holders speak of
        self.nodes: List[str] = []  # the node of each of them
        self.sends: List[Tuple[int, int, torch.Tensor]] = []  # (global rank, tag, bytes)
        self.recvs: List[Tuple[int, int, torch.Tensor]] = []
        self.refresh_seconds = 0.0
        if not lazy:  # a joined process places them at its first refresh, with the job's others
            self._place(m)  # ValueError on one node, before anything is held

    def _place(self, m) -> None:
        self.nodes = list(m.comm.allgather(node_name()))
        self.holders = list(_native.copy_holders(self.nodes))
        self.ranks = list(m.comm.ranks)
        self.kept = list(_native.copies_kept_by(self.holders, m.comm.rank))

    def _hold(self, m) -> None:
        """The copies of the current layout, zeroed, and the views this process sends and fills."""
        self._place(m)
        _native.hold_copies(m._native, self.kept, self.nodes)
        self.step = -1
        holder = self.ranks[self.holders[m.comm.rank]]
        absent = set(_native.copy_absent_kinds(m._native, m.comm.rank, self.nodes))  # what the holder keeps not
        self.sends = [(holder, i, m._views.hand_out(torch.frombuffer(lease, dtype=torch.uint8), "own buffer sent"))
                      for i, (lease, kind, _, _) in enumerate(m._native.buffers())
                      if lease is not None and kind not in absent]
        self.recvs = [(self.ranks[rank], i, m._views.hand_out(torch.frombuffer(lease, dtype=torch.uint8), "copy"))
                      for rank, buffers in _native.copy_buffers(m._native)
                      for i, (lease, _) in enumerate(buffers) if lease is not None]
        self.key = (m._views.switches, id(m.comm))
        self.on = True

    def refresh(self, m) -> None:
        """Collective: the copies become those of the state now (step m.step)."""
        if self.key != (m._views.switches, id(m.comm)):
            try:
                self._hold(m)
            except ValueError as e:  # every process on one node now (after a recovery)
                self._stop(m, str(e))
        if not self.on:  # until the next switch or new group (a grow may bring another node)
            return
        import torch.distributed as dist
        t0 = time.perf_counter()
        works = [dist.isend(t, peer, group=m.comm.group, tag=tag) for peer, tag, t in self.sends]
        works += [dist.irecv(t, peer, group=m.comm.group, tag=tag) for peer, tag, t in self.recvs]
        for w in works:
            w.wait()
        self.step = m.step
        self.refresh_seconds = time.perf_counter() - t0

    def _stop(self, m, why: str) -> None:
        _native.drop_copies(m._native)
        self.on, self.sends, self.recvs, self.step = False, [], [], -1
        self.key = (m._views.switches, id(m.comm))
        if m.comm.rank == 0:
            sys.stdout.write(f"redundancy: off from step {m.step}: {why.split(';')[0]}\n")
            sys.stdout.flush()

    def stats(self, m) -> Dict[str, Any]:
        return dict(redundancy=2 if self.on else 1, copy_bytes=_native.copy_bytes(m._native), copy_step=self.step,
                    copies_of=[self.ranks[r] for r in self.kept] if self.on else [],
                    refresh_seconds=self.refresh_seconds)


def make(m, redundancy, joined: bool = False) -> Optional[Copies]:
    """At the Manager's construction (collective, except in a process a grow joined): the Copies
    for redundancy 2, else None."""
    if setting(redundancy) == 1:
        return None
    if not _c10d.is_c10d(m.comm):
        raise ValueError("redundancy=2 needs torch.distributed (a lost process is recovered in place only there); "
                         "this Manager runs on MPI")
    return Copies(m, lazy=joined)


def refresh(m) -> None:
    """After a step's update (adopt.py) and at adoption. A lost peer met here is kept for the next
    optimizer.step() (_interrupt.keep), which recovers without these copies (they are not complete)."""
    copies = getattr(m, "_copies", None)
    if copies is None or m.comm is None:
        return
    if m.config["world_size"] != m.comm.size:  # idle processes (a lend): no copies until all hold a rank
        copies.step = -1
        return
    try:
        copies.refresh(m)
    except RuntimeError as error:
        _interrupt.keep(error)


def sources(m, ranks_before: List[int], members: List[int]) -> List[Tuple[int, int, List[str]]]:
    """In a recovery, on the survivors' comm (collective): (rank before, survivor process, the
    kinds the copy does not keep) of every copy the survivors keep, sorted by rank, when every
    survivor's copies hold the state at m.step; else [] (recover_in_place then drops them).
    Called before the switch: m's layout is still the one the copies were held in."""
    copies = getattr(m, "_copies", None)
    if copies is None:  # redundancy 1, alike on every process (agreed at construction)
        return []
    complete = copies.on and copies.step == m.step and copies.ranks == ranks_before
    if _c10d.all_max(m.comm, 0.0 if complete else 1.0) > 0:
        return []
    out = [(r, members.index(ranks_before[h]), list(_native.copy_absent_kinds(m._native, r, copies.nodes)))
           for r, h in enumerate(copies.holders) if ranks_before[h] in members]
    copies.step = -1  # the recovery consumes them
    return out
