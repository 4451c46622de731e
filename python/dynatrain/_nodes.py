"""Which node each process of a job on torch.distributed runs on, for the recovery from a lost
process (_recover.py): its messages name the lost ranks with their node, a survivor reports the
processes of its own node that ended, and when the store's node is lost, one survivor of each
node says why the job ends.

A process's node is `DYNATRAIN_NODE` when set (tests fake nodes on one machine with it), else
its hostname. Every process writes `NODE PID` under `{prefix}/pid/{global rank}` at adoption
(_recover.announce); table() reads them back once per world and keeps them, so that they are
known after the store is gone. A pid is only looked at on its own node (pids are per node)."""
from __future__ import annotations

import os
import socket
from typing import Dict, List, Optional, Tuple

Where = Dict[int, Tuple[str, int]]  # global rank -> (node, pid)

_kept: Dict[Tuple[str, Tuple[int, ...]], Where] = {}  # (store prefix, ranks) -> table


def name() -> str:
    """This process's node."""
    return os.environ.get("DYNATRAIN_NODE") or socket.gethostname()


def record(store, prefix: str, rank: int) -> None:
    """At adoption: this process's node and pid under the store key of its global rank."""
    store.set(f"{prefix}/pid/{rank}", f"{name()} {os.getpid()}")


def table(store, prefix: str, ranks: List[int]) -> Where:
    """Every rank's (node, pid), read from the store the first time for these ranks, then kept."""
    key = (prefix, tuple(ranks))
    if key not in _kept:
        rows = {r: store.get(f"{prefix}/pid/{r}").decode().rsplit(" ", 1) for r in ranks}
        _kept[key] = {r: (node, int(pid)) for r, (node, pid) in rows.items()}
    return _kept[key]


def kept(prefix: str, ranks: List[int]) -> Optional[Where]:
    """The table read before for these ranks, None if none was (the store may be gone)."""
    return _kept.get((prefix, tuple(ranks)))


def gone(pid: int) -> bool:
    """Whether process `pid` of this node has ended (missing, or a zombie not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def gone_here(where: Where) -> List[int]:
    """The ranks of this node whose process has ended."""
    here = name()
    return [r for r, (node, pid) in where.items() if node == here and gone(pid)]


def reports(where: Where, me: int) -> bool:
    """Whether `me` prints its node's line when the store is lost: it is the lowest rank of this
    node other than global rank 0 (the store's, lost). Fixed by ranks, not by what still runs: a
    survivor that printed and ended must not make another one print. (When that process was
    lost too, the node's line is its launcher's.)"""
    here = name()
    return me == min([r for r, (node, _) in where.items() if node == here and r != 0] or [me])


def lost_text(ranks: List[int], lost: List[int], where: Optional[Where]) -> str:
    """'rank 3 (global 3) on node b' or 'rank 2 (global 2), rank 3 (global 3) on node b (the
    whole node)', nodes joined by ' and '; `ranks` the world's global ranks in layout order."""
    def one(r: int) -> str:
        return f"rank {ranks.index(r)} (global {r})"
    if where is None:
        return ", ".join(one(r) for r in lost)
    nodes: Dict[str, List[int]] = {}
    for r in lost:
        nodes.setdefault(where[r][0], []).append(r)
    parts = []
    for node, on in nodes.items():
        whole = " (the whole node)" if len(on) == sum(1 for n, _ in where.values() if n == node) else ""
        parts.append(f"{', '.join(one(r) for r in on)} on node {node}{whole}")
    return " and ".join(parts)
