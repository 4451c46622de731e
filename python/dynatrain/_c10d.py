"""The Manager on the user's torch.distributed (python/README.md, "torch.distributed").

When `torch.distributed.is_initialized()` and no comm is passed, a Manager (and adopt()) runs on
the user's default group instead of MPI:

  * world(): a Gloo group over every rank of the default group (torch.distributed.new_group,
    same ranks, same store, rank r is rank r), built once per Manager. The native transport
    runs on it (comm/c10d, through _native.c10d_world), and so do the Python-side collectives
    (argument agreement, tensor-parallel and data-parallel reductions). Its own group keeps the
    Manager's messages apart from the user's own send/recv tags and works under an NCCL
    default group too (the state is on the CPU).
  * Comm: the subset of an mpi4py communicator the package uses (rank, size, allgather,
    bcast, gather, allreduce of Python values; tensor collectives for tp.py), over one such
    group. Its rank order is the layout's (the key order of the group colors); torch orders a
    group's ranks by their global rank, so gathers are permuted back into the layout's order.
  * groups(): a config's sub-groups by torch.distributed.new_group, which every rank of the
    default group calls for every group, in one order (torch's rule), members or not.
  * Shrinking and vacating run in place (_elastic.switch_in_place): the state moves over the
    current group, then the processes that stay get a group of their own (shrunk_world()), made
    directly over the store (a ProcessGroupGloo under a prefix of its own, not new_group, which
    every process of the default group, gone ones included, would have to call); so are every
    later group's sub-groups. A grow joins new processes through the store (_join.py): their
    groups are made over it the same way, job_store() being their connection to the job's
    store. The store lives in the process of global rank 0, which therefore cannot leave.
  * split(): the same processes in another order (a weights copy's communicator, _refit.py),
    made over the store as well, so only they take part.
  * The connections of every group made here are remembered (job_sockets): a lost process's
    recovery (_recover.py) shuts them down, so that no survivor waits on a peer that gave the
    generation up; the user's own groups and the store's connection are left alone.
  * Every tensor a Comm hands to Gloo stays referenced from Python until two later collectives
    (_handed): a Gloo worker thread drops its reference to an operation's tensors only after
    the caller saw it complete, and a worker that drops the last reference of a tensor Python
    made must take the GIL, which at interpreter exit ends the process with SIGABRT
    ("terminate called without an active exception"). Hence also allgather() pickles by
    itself instead of all_gather_object(), whose tensors it could not hold.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import os
import pickle
import socket
from datetime import timedelta
from typing import Any, Dict, List, Optional, Sequence

import torch

from . import _interrupt, _native

STORE_HOST = "the process of torch.distributed global rank 0 hosts the store and cannot leave"
GROUP_TIMEOUT = timedelta(seconds=300)
_managers = itertools.count()  # names each Manager's key space in the store (equal on every rank)
_joined_store: List[Any] = []  # in a process that joined a job by its store (_join.py): its connection to it
_handed: collections.deque = collections.deque(maxlen=2)  # the tensors of the last collectives (see above)


def job_store():
    """The job's store: the default group's, or in a process that joined a job (_join.py) its
    connection to the job's (the same keys as the job's processes see)."""
    return _joined_store[0] if _joined_store else _dist().distributed_c10d._get_default_store()


def tcp_store(store):
    """The TCPStore under the job's store (processes outside the job reach it by its address),
    None for another kind (a FileStore, a HashStore)."""
    dist = _dist()
    if isinstance(store, dist.PrefixStore) and isinstance(store.underlying_store, dist.TCPStore):
        return store.underlying_store
    return None


_job_sockets: set = set()  # inodes of the sockets the groups made here opened


def _socket_fds() -> Dict[int, int]:
    """This process's sockets: inode -> descriptor (Linux /proc)."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            out[int(target[8:-1])] = int(fd)
    return out


@contextlib.contextmanager
def job_sockets():
    """Remembers the sockets opened inside (a group's connections to its peers)."""
    before = set(_socket_fds())
    try:
        yield
    finally:
        _job_sockets.update(set(_socket_fds()) - before)


def abandon_groups() -> int:
    """Shuts down every connection of the groups made here (the generation is given up): a peer
    waiting on this process in one of them gets an error at once. Returns how many."""
    shut = 0
    for inode, fd in _socket_fds().items():
        if inode not in _job_sockets:
            continue
        try:
            with socket.socket(fileno=os.dup(fd)) as s:
                s.getpeername()  # OSError for a listening socket: it stays (new groups accept on it)
                s.shutdown(socket.SHUT_RDWR)
            shut += 1
        except OSError:  # a listening socket, or one closed already
            pass
    _job_sockets.clear()
    return shut


def _dist():
    import torch.distributed as dist
    return dist


def available() -> bool:
    """Whether the user initialised torch.distributed (then comm=None means its default group)."""
    dist = _dist()
    return dist.is_available() and dist.is_initialized()


def is_c10d(comm) -> bool:
    return isinstance(comm, Comm)


class Comm:
    """mpi4py's communicator calls the package makes, over a torch.distributed group (CPU
    tensors). `ranks`: the global ranks of the members in this communicator's rank order;
    `group`: the torch group (None for a group of one rank, which never communicates)."""

    def __init__(self, group, ranks: Sequence[int], rank: int):
        self.group = group
        self.ranks = list(ranks)
        self.rank, self.size = rank, len(self.ranks)
        order = sorted(self.ranks)
        self._torch_rank = [order.index(g) for g in self.ranks]  # this comm's rank i -> torch's group rank
        self.raw_key: Optional[str] = None  # set: a group made over the store, in this comm's order
        self.groups_made = 0

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    # ---- Python values ----
    @_interrupt.guarded(lambda self, value: [value] * self.size)
    def allgather(self, value: Any) -> List[Any]:
        if self.size == 1:
            return [value]
        data = pickle.dumps(value)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
        self._all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64))
        longest = max(int(s.item()) for s in sizes)
        mine = torch.zeros(longest, dtype=torch.uint8)
        mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        boxes = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.size)]
        self._all_gather(boxes, mine)
        return [pickle.loads(boxes[t][:int(sizes[t].item())].numpy().tobytes()) for t in self._torch_rank]

    def _all_gather(self, by_torch: List[torch.Tensor], local: torch.Tensor) -> None:
        """all_gather in torch's group-rank order, its tensors held (see the module's notes)."""
        _handed.append((by_torch, local))
        _dist().all_gather(by_torch, local, group=self.group)

    @_interrupt.guarded(lambda self, value=None, root=0: value)
    def bcast(self, value: Any = None, root: int = 0) -> Any:
        """By this comm's own rank (not torch's global rank, which differs in a joined process)."""
        if self.size == 1:
            return value
        data = pickle.dumps(value) if self.rank == root else b""
        size = torch.tensor([len(data)], dtype=torch.int64)
        self.broadcast_(size, root)
        box = torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.rank == root else \
            torch.empty(int(size.item()), dtype=torch.uint8)
        self.broadcast_(box, root)
        return value if self.rank == root else pickle.loads(box.numpy().tobytes())

    def gather(self, value: Any, root: int = 0) -> Optional[List[Any]]:
        everyone = self.allgather(value)
        return everyone if self.rank == root else None

    def allreduce(self, value: Any, op: str = "sum") -> Any:
        """`op`: "sum" or "max" (mpi4py's MPI.SUM / MPI.MAX; see all_max / all_sum)."""
        everyone = self.allgather(value)
        return max(everyone) if op == "max" else sum(everyone[1:], everyone[0])

    @_interrupt.guarded(lambda self: None)
    def Barrier(self) -> None:
        if self.size > 1:
            _dist().barrier(group=self.group)

    # ---- tensors (contiguous, CPU; dtypes Gloo reduces: float32) ----
    @_interrupt.guarded(lambda self, t: None)
    def all_reduce_(self, t: torch.Tensor) -> None:
        if self.size > 1:
            _handed.append(t)
            _dist().all_reduce(t, group=self.group)

    @_interrupt.guarded(lambda self, parts, local: None)
    def all_gather_(self, parts: List[torch.Tensor], local: torch.Tensor) -> None:
        """parts[i] = rank i's `local` (parts in this comm's rank order)."""
        if self.size == 1:
            parts[0].copy_(local)
            return
        by_torch: List[torch.Tensor] = list(parts)
        for i, t in enumerate(self._torch_rank):
            by_torch[t] = parts[i]
        self._all_gather(by_torch, local)

    @_interrupt.guarded(lambda self, t, root=0: None)
    def broadcast_(self, t: torch.Tensor, root: int = 0) -> None:
        if self.size > 1:
            _handed.append(t)
            _dist().broadcast(t, src=self.ranks[root], group=self.group)


def all_max(comm, value):
    """The maximum of `value` over `comm` (an mpi4py communicator or a Comm)."""
    if is_c10d(comm):
        return comm.allreduce(value, op="max")
    from mpi4py import MPI
    return comm.allreduce(value, op=MPI.MAX)


def all_sum(comm, value):
    if is_c10d(comm):
        return comm.allreduce(value, op="sum")
    from mpi4py import MPI
    return comm.allreduce(value, op=MPI.SUM)


def resolve(comm):
    """The communicator a Manager or adopt() runs on. None: the torch.distributed world when it
    is initialised, else MPI.COMM_WORLD; torch.distributed's default group itself: its world;
    an mpi4py communicator or a Comm: as given. ValueError for another torch group: the
    Manager's own groups are made by new_group, which every rank of the default group calls."""
    if comm is None and not available():
        from mpi4py import MPI  # here, not at import: `import dynatrain` leaves MPI alone
        return MPI.COMM_WORLD
    if comm is None:
        return world()
    if isinstance(comm, torch._C._distributed_c10d.ProcessGroup):
        if comm is not _dist().distributed_c10d._get_default_group():
            raise ValueError("comm= is a torch.distributed group other than the default one; a Manager runs on "
                             "every process of the default group: pass comm=None (or an mpi4py communicator)")
        return world()
    return comm


def world() -> Comm:
    """Collective over the default group: a Comm over a Gloo group of all its ranks, whose
    native transport c10d_transport() hands to the Manager (once)."""
    dist = _dist()
    size, rank = dist.get_world_size(), dist.get_rank()
    with job_sockets():
        group = dist.new_group(ranks=list(range(size)), backend="gloo")
    comm = Comm(group, range(size), rank)
    comm.manager_serial = next(_managers)
    return comm


def native_world(comm: Comm, timeout_seconds: float = 300.0, store=None):
    """Collective: the native transport over `comm`'s group (_native.C10dWorld, taken by the
    native Manager). Its own sub-groups (none today) would use keys under dynatrain/<serial>
    of `store` (default: job_store())."""
    if not _native.has_c10d:
        raise ValueError("this build of dynatrain has no torch.distributed transport (comm/c10d was not built); "
                         "run under mpirun or pass an mpi4py comm=")
    return _native.c10d_world(comm.group, store or job_store(), f"dynatrain/manager{comm.manager_serial}",
                              timeout_seconds)


def groups(comm: Comm, everyone: List[Dict[str, Any]], sizes: Dict[str, int], cp: int) -> Dict[str, Optional[Comm]]:
    """A config's named sub-groups (Manager._groups_for on torch.distributed) from every rank's
    colors (`everyone[r]`: rank r's, a pure function of the config, computed alike on every rank):
    each group is made with new_group on every rank in one order (none where it is the whole comm
    in its order: _whole); None where this rank is outside the config. Members are ordered by key,
    as MPI_Comm_split orders them."""
    out: Dict[str, Optional[Comm]] = {}
    for name, (color, key) in everyone[comm.rank].items():
        if name == "dp_cp" and cp == 1:
            out[name] = out["dp"]
        elif sizes[name] == 1:
            out[name] = Comm(None, [comm.ranks[comm.rank]], 0) if color >= 0 else None
        else:
            out[name] = _split(comm, [ranks[name] for ranks in everyone], color)
    return out


def _split(comm: Comm, colors: List[Any], mine: int) -> Optional[Comm]:
    members: Dict[int, List[Any]] = {}
    for rank, (color, key) in enumerate(colors):
        if color >= 0:
            members.setdefault(color, []).append((key, rank))
    if len(members) == 1 and [r for _, r in sorted(next(iter(members.values())))] == list(range(comm.size)):
        return _whole(comm)  # every rank, in comm's order: comm's own group (no group to build)
    made = None
    for color in sorted(members):  # every rank makes every group, in the same order
        ordered = [comm.ranks[r] for _, r in sorted(members[color])]
        if comm.raw_key is not None:  # after a process left: members only, over the store
            comm.groups_made += 1
            if color == mine:
                made = raw_comm(f"{comm.raw_key}/g{comm.groups_made}", ordered, comm.ranks[comm.rank])
            continue
        with job_sockets():
            group = _dist().new_group(ranks=ordered, backend="gloo")
        if color == mine:
            made = Comm(group, ordered, ordered.index(comm.ranks[comm.rank]))
    return made


def _whole(comm: Comm) -> Comm:
    """A sub-group holding every rank of `comm` in its order: a Comm over comm's own Gloo group
    (the package's collectives run on one thread, in one order on every rank, so they may share
    it, as the native transport does)."""
    whole = Comm(comm.group, comm.ranks, comm.rank)
    whole._torch_rank, whole.raw_key = list(comm._torch_rank), comm.raw_key
    return whole


def raw_comm(key: str, ranks: List[int], me: int, store=None) -> Comm:
    """Collective over `ranks` (global ranks, in the order the new group's ranks take): a Comm
    over a Gloo group made over the default store under `key`, known to torch.distributed's
    functions (its rank map registered as new_group would), without the other processes.
    `store`: a connection to the job's store other than job_store() (a thread's own)."""
    dist = _dist()
    c10d = dist.distributed_c10d
    store = dist.PrefixStore(key + "/", store or job_store())
    with job_sockets():
        group = dist.ProcessGroupGloo(store, ranks.index(me), len(ranks), GROUP_TIMEOUT)
    c10d._pg_group_ranks[group] = {g: i for i, g in enumerate(ranks)}
    c10d._pg_map[group] = (dist.Backend.GLOO, store)
    comm = Comm(group, ranks, ranks.index(me))
    comm._torch_rank = list(range(len(ranks)))  # the group's ranks are in this comm's order
    comm.raw_key = key
    return comm


def split(comm: Comm, key: int) -> Comm:
    """Collective over `comm`: a Comm over the same processes ordered by `key` (MPI_Comm_split
    with one color), its group and its own sub-groups made over the store (raw_comm), so no
    other process of the default group takes part."""
    keys = comm.allgather(key)
    comm.splits = getattr(comm, "splits", 0) + 1  # equal on every rank: the calls are collective
    ordered = [comm.ranks[r] for r in sorted(range(comm.size), key=lambda r: (keys[r], r))]
    new = raw_comm(f"dynatrain/manager{comm.manager_serial}/split{comm.splits}", ordered, comm.ranks[comm.rank])
    new.manager_serial = f"{comm.manager_serial}-split{comm.splits}"
    return new


def shrunk_world(comm: Comm, survivors: List[int], generation: int) -> Comm:
    """Collective over `survivors` (global ranks; rank r of the new layout first): the Manager's
    Comm after a shrink or vacate, its groups made over the store from now on."""
    return next_world(comm.manager_serial, survivors, comm.ranks[comm.rank], generation)


def next_world(serial, ranks: List[int], me: int, generation: int, store=None) -> Comm:
    """Collective over `ranks`: the Manager's Comm of generation `generation` (after a shrink,
    vacate or grow) of the Manager of key space `serial`."""
    new = raw_comm(f"dynatrain/manager{serial}/gen{generation}", ranks, me, store)
    new.manager_serial = f"{serial}-gen{generation}"
    return new


def refuse_process_change(m, to_cfg: str, vacate) -> None:
    """ValueError (before anything moves) for a switch of a Manager on torch.distributed that would
    change its processes and cannot (a grow: _join.refuse); none for one within them (elastic=False
    leaves the surplus ranks idle)."""
    if not is_c10d(m.comm):
        return
    needed = _native.world_size_of(to_cfg)
    if needed > m.comm.size and m._options["elastic"]:
        from . import _join
        _join.refuse(m, to_cfg, vacate)
        return
    if vacate and m._options["elastic"]:
        if any(isinstance(r, int) and 0 <= r < m.comm.size and m.comm.ranks[r] == 0 for r in vacate):
            raise ValueError(f"switch to {to_cfg!r} with vacate={list(vacate)}: {STORE_HOST}")
        _native.in_place_placement(needed, m.comm.size, list(vacate))  # ValueError naming a bad list
    elif needed < m.comm.size and m._options["elastic"] and m.comm.ranks[needed:].count(0):
        raise ValueError(f"switch to {to_cfg!r} uses {needed} of the {m.comm.size} processes: {STORE_HOST}; "
                         f"vacate others instead")
