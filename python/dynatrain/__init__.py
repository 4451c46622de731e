"""DynaTrain from Python: switch the parallel layout of a PyTorch training job in memory.

    import dynatrain
    stats = dynatrain.plan("llama2-70b", "tp=8,pp=4,dp=4", "tp=4,pp=8,dp=4")   # dict, like `dynatrain plan --json`
    m = dynatrain.Manager(MPI.COMM_WORLD, "tiny-dense", "tp=2,dp=2")         # collective
    w = m.tensors("param")            # name -> torch tensor viewing this rank's shard (no copy)
    m.group("dp")                     # mpi4py communicator of this rank's data-parallel group
    m = dynatrain.Manager(None, ...)  # after torch.distributed.init_process_group(): its default group
    stats = m.switch("dp=4")          # collective: moves every state kind; re-read m.tensors()
    m.save("ckpt")                    # collective: checkpoint; Manager(..., resume="ckpt") loads it

Tensors handed out view the manager's memory; switch() empties them (using one then raises
StaleTensorError): re-read them. Every collective agrees its arguments across ranks first
(ValueError on every rank when they differ); under mpirun an uncaught exception on one rank
ends the job (MPI Abort) and a watchdog ends it when a peer stops taking part.
Errors from the library keep its one-line messages: ValueError for bad input, CommError when a
transport fails, InternalError for a broken invariant. docs/python.md has the whole API.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import _abort, _agree, _c10d, _checkpoint, _elastic, _memory, _native, _notice, _redundancy, _views, _watchdog
from ._agree import PeerError
from ._elastic import Leaving
from ._join import JoinError
from ._notice import EveryProcessNoticed
from ._recover import ProcessLost
from ._schedule import ScheduleError, parse_schedule
from ._native import CommError, InternalError
from ._views import StaleTensor, StaleTensorError

__all__ = ["plan", "check", "presets", "Tensor", "Model", "Manager", "Leaving", "CommError", "InternalError",
           "PeerError", "StaleTensor", "StaleTensorError", "adopt", "describe", "Job", "EveryProcessNoticed", "ProcessLost",
           "JoinError", "parse_schedule", "ScheduleError"]

if _abort.launched_with_peers():
    _abort.install()  # an uncaught exception on one rank ends the job (DYNATRAIN_ABORT_ON_ERROR=0: off)

KINDS = tuple(_native.state_kinds())  # vps/state_kind.h, in StateKind order
GROUPS = ("tp", "cp", "dp", "dp_cp", "pp", "ep", "etp", "edp")
_DTYPES = {4: torch.float32, 2: torch.bfloat16}


@dataclass
class Tensor:
    """One logical tensor of a user's model, unsharded, with how tensor parallelism splits it.

    split: "replicated" (every tp rank holds all of it), "dim" (evenly along `dim`), or "vocab"
    (dim 0, padded to a multiple of vocab_divisible_by * tp; padding rows exist only locally).
    stage: "pre" (first pipeline stage), "layer" (the stage holding `layer`), "post" (last stage).
    expert: dim 0 is the expert index, split over ep; `split` then applies with etp.
    also_on_last_stage: a "pre" tensor the last stage holds too (tied output embedding, pp > 1).
    """
    name: str
    shape: Sequence[int]
    split: str = "replicated"
    dim: int = 0
    stage: str = "layer"
    layer: int = -1
    expert: bool = False
    also_on_last_stage: bool = False


@dataclass
class Model:
    """A user's model for the VPS: its logical tensors in model order and its layer count."""
    tensors: List[Tensor]
    layers: int
    name: str = "custom"
    vocab_divisible_by: int = 128


ModelArg = Any  # a preset name, a Hugging Face config.json path, or a Model


def _model_arg(model: ModelArg):
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    if isinstance(model, Model):
        return model
    raise TypeError(f"model must be a preset name, a config.json path or a dynatrain.Model; got {type(model).__name__}")


def presets() -> List[str]:
    """The built-in model names (`dynatrain plan --model`)."""
    return list(_native.preset_names())


def plan(model: ModelArg, from_cfg: str, to_cfg: str, gpus_per_node: int = 8, *, states: str = "all",
         check: bool = False, bucket_elems: int = 40_000_000, intra_bw: float = 150,
         inter_bw: float = 25) -> Dict[str, Any]:
    """The statistics of switching `model` from `from_cfg` to `to_cfg`: the fields of
    `dynatrain plan --json` (total and per_kind bytes, messages, max_in_bytes, max_out_bytes,
    lower_bound_seconds, plan_seconds, rank_plan_seconds, check, check_seconds). Pure
    computation, no communicator; bandwidths in GB/s per rank."""
    return json.loads(_native.plan(_model_arg(model), from_cfg, to_cfg, gpus_per_node, states, bucket_elems, check,
                                   intra_bw, inter_bw))


def check(model: ModelArg, from_cfg: str, to_cfg: str, gpus_per_node: int = 8, *, states: str = "all",
          bucket_elems: int = 40_000_000) -> Tuple[bool, str]:
    """Proves exact cover of the switch's plan: (True, "ok") or (False, first violated element)."""
    result = plan(model, from_cfg, to_cfg, gpus_per_node, states=states, check=True, bucket_elems=bucket_elems)
    return result["check"] == "ok", result["check"]


class Manager:
    """This rank's training state in the Virtual Parameter Space, switchable between layouts.

    Collective: every rank of `comm` (an mpi4py communicator) constructs it with equal
    arguments, and calls switch() together. comm=None: the user's torch.distributed default
    group when torch.distributed is initialised (processes may leave, and join through its store:
    docs/python.md, "On torch.distributed"), else MPI.COMM_WORLD. Ranks beyond a config's world size hold nothing in
    that config (`active` is False) and take part in switches anyway.
    resume=DIR: the state, `step` and the saved extras come from DIR's latest checkpoint
    (Manager.save), saved in any config and process count; `resumed` is then True.

    Process-count changes (docs/python.md): a switch to a config needing more processes than
    `comm` has starts them; they run the same script, whose first Manager(...) joins (`joined`
    True; state, `step` and extras from the job; its `comm` argument is replaced by the job's).
    A switch to fewer makes the processes it does not use leave (Leaving). With elastic=False
    the processes are fixed: a smaller config leaves ranks idle, a larger one is a ValueError.
    """

    def __init__(self, comm, model: ModelArg, config: str, *, states: str = "all",
                 bucket_elems: int = 40_000_000, param_dtype: torch.dtype = torch.float32,
                 mem_budget: int = 256 << 20, gpus_per_node: int = 8, watchdog_s: Optional[float] = None,
                 resume=None, elastic: bool = True, redundancy: Optional[int] = None):
        param_bytes = {torch.float32: 4, torch.bfloat16: 2}.get(param_dtype)
        self._options = dict(model=_model_arg(model), states=states, bucket_elems=bucket_elems, param_bytes=param_bytes,
                             mem_budget=mem_budget, gpus_per_node=gpus_per_node, elastic=bool(elastic))
        self._views = _views.ViewRegistry()
        self._watchdog_s: Optional[float] = None  # agreed below; the environment's until then
        self.step = 0
        self._extra: Dict[str, Tuple[Callable[[], Any], Callable[[Any], None], bool]] = {}
        self._pending_extra: Dict[str, Any] = {}  # loaded or received values awaiting register()
        self.resumed = False
        self._group_cache: Dict[str, Dict[str, Any]] = {}
        self._prepared: Optional[Tuple[str, List[int]]] = None  # a process-count change in flight
        self.joined = False
        self._copies = None  # redundancy 2: the copies this process keeps (_redundancy.py)
        arguments = (lambda: {k: v for k, v in _agree.manager_arguments(
            _model_arg(model), config, states, bucket_elems, param_dtype, mem_budget, gpus_per_node,
            watchdog_s).items() if k != "config"})
        if _elastic.join(self, arguments):  # a process a grow started: its state comes from the running job
            if self.comm.size > 1:
                _abort.install()
            self._copies = _redundancy.make(self, redundancy, joined=True)  # held at the job's next refresh
            return
        comm = _c10d.resolve(comm)
        if comm.size > 1:
            _abort.install()
        self.comm = comm
        with self._collective("Manager construction"):
            args = _agree.together(comm, "Manager arguments", lambda: _agree.manager_arguments(
                _model_arg(model), config, states, bucket_elems, param_dtype, mem_budget, gpus_per_node, watchdog_s))
            _agree.agree(comm, "Manager arguments", dict(args, elastic=bool(elastic)))
            self._watchdog_s = args["watchdog_s"]
            self._arguments = {k: v for k, v in args.items() if k != "config"}  # what a joiner must pass alike
            if param_bytes is None:
                raise ValueError(f"param_dtype {param_dtype}; valid: torch.float32, torch.bfloat16")
            self._kind_dtype = self._kind_dtypes(param_bytes)
            level = _agree.together(comm, "redundancy", lambda: _redundancy.setting(redundancy))
            _agree.agree(comm, "Manager(redundancy=)", level)
            self._copies = _redundancy.make(self, level)  # ValueError on one node, on every rank, nothing built
            _memory.check(comm, self._options["model"], config, states, bucket_elems, param_bytes, mem_budget)
            self._native = _native.Manager(self._native_world(comm), self._options["model"], config, states,
                                           bucket_elems, param_bytes, mem_budget, gpus_per_node)
            _notice.watch_world(self)  # a lost peer's end says so (job/mpi_world.h)
            self._bind()
        if resume is not None:
            with self._collective("checkpoint resume", self._state_bytes()):
                _checkpoint.resume(self, resume)

    # ---- the current layout ----
    @property
    def config(self) -> Dict[str, Any]:
        """Sizes and this rank's coordinates: config, world_size, active, tp, tp_rank, cp, dp, pp,
        ep, etp, edp (each with *_rank), zero."""
        return dict(self._config)

    @property
    def active(self) -> bool:
        return self._config["active"]

    @property
    def names(self) -> List[str]:
        """Every logical tensor's name, in model order."""
        return list(self._names)

    def global_shape(self, name: str) -> Tuple[int, ...]:
        if name not in self._ids:
            raise ValueError(f"unknown tensor '{name}' in model '{self._native.model_name()}'")
        return tuple(self._shapes[self._ids[name]])

    def tensors(self, kind: str = "param") -> Dict[str, torch.Tensor]:
        """name -> this rank's piece of that tensor for state `kind`, viewing the manager's memory.
        Unsharded kinds: the local shard in its local shape (vocab padding rows included).
        ZeRO-sharded kinds: the 1-D part of the flattened local shard in this rank's ZeRO shard
        (elements shard_slice(name, kind) of it; possibly empty). Only tensors this rank holds."""
        return dict(self._tensors[self._check_kind(kind)])

    def shard_slice(self, name: str, kind: str) -> Tuple[int, int]:
        """(start, stop) of tensors(kind)[name] in the flattened local shard (all of it when unsharded)."""
        return self._slices[self._check_kind(kind)][name]

    def buffers(self, kind: str = "param") -> List[torch.Tensor]:
        """This rank's flat buffers of `kind`, one per bucket (dense buckets first), as 1-D tensors.
        buffers(k)[i] holds elements [shard_lo, shard_hi) of bucket i when k is ZeRO-sharded, the
        whole bucket otherwise (buckets()[i])."""
        return list(self._buffers[self._check_kind(kind)])

    @property
    def buckets(self) -> List[Dict[str, Any]]:
        """Per bucket: expert, bucket, bucket_numel, shard_lo, shard_hi, buffers (kind -> id)."""
        return list(self._buckets)

    def group(self, name: str):
        """This rank's mpi4py communicator for `name` (tp, cp, dp, dp_cp, pp, ep, etp, edp) in the
        current config; None on ranks outside it. dp_cp is the dense ZeRO group, edp the expert one."""
        if name not in GROUPS:
            raise ValueError(f"unknown group '{name}'; valid: {', '.join(GROUPS)}")
        return self._groups[name]

    # ---- extra per-job state carried across switches ----
    def register(self, name: str, get: Callable[[], Any], set: Callable[[Any], None], *, per_rank: bool = False) -> None:
        """State outside the VPS that a switch must carry (RNG, scheduler, data position). At each
        switch get() runs and set() receives, on every rank: rank 0's value (default; ranks that
        join a layout receive it), or with per_rank=True the list of every rank's value indexed by
        rank, so each rank can take the one its new role needs (e.g. per-tp-rank RNG streams).
        Values must pickle. `step` is carried like a default one. A value loaded by resume= (or
        received on joining) for `name` is handed to set() at once."""
        if name in self._extra:
            raise ValueError(f"extra state '{name}' is already registered")
        self._extra[name] = (get, set, per_rank)
        if name in self._pending_extra:
            set(self._pending_extra.pop(name))

    # ---- switching ----
    def switch(self, to_cfg: str, *, vacate: Optional[Sequence[int]] = None,
               keep_processes: bool = False, zero_grads: bool = False, fill_grads: bool = True) -> Dict[str, Any]:
        """Collective: moves every state kind to layout `to_cfg` in memory and rebinds.
        Returns max-over-ranks times (seconds: the native switch; plan_seconds; engine_seconds;
        args_seconds: the agreements and checks before the native switch; rebind_seconds: the
        carried step and extras and the new views; pause_seconds: everything) and bytes
        (bytes_sent, max_rank_bytes_received, max_rank_bytes_zeroed, bytes_kept, messages, peak_bytes,
        max_src_bytes, max_dst_bytes); the engine's parts, each the slowest rank's: agree_seconds, dry_seconds,
        alloc_seconds, pack_seconds, unpack_seconds, keep_seconds, wait_seconds (on the link),
        system_seconds, page_faults; plan_cached (no planner run: the plan of this layout pair
        was kept from an earlier switch).
        The arguments are agreed first and the target validated: ValueError on every rank,
        nothing moved, views intact. Tensors handed out before a switch that moves are emptied
        (StaleTensorError when used): re-read tensors()/buffers().
        Elastic managers: a config needing more processes than the job has grows it, fewer
        shrinks it, `vacate` names world ranks that must leave; processes that leave get Leaving
        (exit status 0), `comm` is then the job's new communicator (docs/python.md).
        keep_processes=True: the processes stay, as with elastic=False (a smaller config leaves
        ranks idle, which a later switch takes back; python/dynatrain/_lend.py). zero_grads=True
        (a switch within the processes, at a step boundary): the grads are not moved and are zero
        afterwards; with fill_grads=False they are left unset instead (whatever their memory held:
        no zeroing in the pause), for a caller that zeroes them before any read, as an adopted
        job does (job.lend, job.reclaim)."""
        self._require_member()
        t0 = time.perf_counter()
        with self._collective(f"Manager.switch to {to_cfg!r}", self._state_bytes()):
            # With keep_processes every rank's step and extra state ride in this allgather too.
            extra = _agree.agree_together(self.comm, "switch arguments", {
                    "to_cfg": to_cfg, "vacate": None if vacate is None else list(vacate),
                    "keep": bool(keep_processes), "zero_grads": bool(zero_grads), "fill_grads": bool(fill_grads),
                    "registered extra state": [(name, per_rank) for name, (_, _, per_rank) in self._extra.items()]},
                    f"switch to {to_cfg!r}" + (" (checks, then extra state get())" if keep_processes else ""),
                    lambda: self._check_and_get(to_cfg, vacate, keep_processes), gather=keep_processes)
            if keep_processes:
                everyone = extra
            elif extra is None:
                return _elastic.switch(self, to_cfg, vacate)
            else:
                job, mine = _agree.together(self.comm, "extra state get()", self._get_extra)
            self._drop_views(f"from before switch {self._views.switches + 1} ({self._config['config']} -> {to_cfg})")
            t_native = time.perf_counter()
            stats = self._native.switch(to_cfg, zero_grads=bool(zero_grads), fill_grads=bool(fill_grads))
            t1 = time.perf_counter()
            if not keep_processes:
                everyone = self.comm.allgather((self.step, job, mine) if self.comm.rank == 0 else (None, None, mine))
            self.step, job = everyone[0][0], everyone[0][1]
            ranks = [m for _, _, m in everyone]
            self._bind()
            stats.update(_agree.together_max(
                self.comm, "extra state set()", lambda: self._set_extra(job, ranks),
                lambda: {"args_seconds": t_native - t0, "rebind_seconds": time.perf_counter() - t1,
                         "pause_seconds": time.perf_counter() - t0}))
        stats["config"] = self._config["config"]
        _views.warn_if_pinned(self._native.deferred_bytes())
        return stats

    def _check_and_get(self, to_cfg: str, vacate, keep_processes: bool):
        """None when the switch changes the job's processes (_check_switch), else with
        keep_processes, which never changes them, (step, job, mine): the step and the extras'
        get() (so the checks and the getters share one collective), () without."""
        if self._check_switch(to_cfg, vacate, keep_processes):
            return None
        return (self.step, *self._get_extra()) if keep_processes else ()

    def _check_switch(self, to_cfg: str, vacate, keep_processes: bool = False) -> bool:
        """Whether the switch changes the job's processes (python/dynatrain/_elastic.py, which
        refuses a vacate list on fixed processes; _c10d.py what cannot run on torch.distributed); a
        switch within them is validated here."""
        if keep_processes and (vacate or self._prepared is not None):
            raise ValueError("keep_processes=True keeps every process: no vacate list, no prepared process change")
        if not keep_processes:
            _c10d.refuse_process_change(self, to_cfg, vacate)
            if _elastic.changes_processes(self, to_cfg, vacate):
                return True
        self._native.validate(to_cfg)
        return False

    @staticmethod
    def _native_world(comm):
        """What the native Manager runs on: a transport over a torch.distributed Comm's group, or
        an mpi4py communicator's Fortran handle."""
        return _c10d.native_world(comm) if _c10d.is_c10d(comm) else comm.py2f()

    def _require_member(self) -> None:
        if self.comm is None:
            raise ValueError("this process left the job in an earlier switch; its Manager holds nothing")

    def _get_extra(self):
        job = {name: get() for name, (get, _, per_rank) in self._extra.items() if not per_rank}
        return job, {name: get() for name, (get, _, per_rank) in self._extra.items() if per_rank}

    def _set_extra(self, job, ranks) -> None:
        for name, (_, put, per_rank) in self._extra.items():
            put([r[name] for r in ranks] if per_rank else job[name])

    def save(self, directory) -> Dict[str, Any]:
        """Collective: checkpoints every state kind, `step` and every registered extra's get()
        (rank 0's, or every rank's list with per_rank) into `directory` (docs/python.md,
        "Checkpoints"). Returns path, seconds, bytes. ValueError on every rank for a directory
        of another model's checkpoint or an extra that does not pickle; OSError naming the path
        when a write fails; the previous checkpoint stays the latest in either case."""
        with self._collective("checkpoint save", self._state_bytes()):
            return _checkpoint.save(self, directory)

    def refresh_copies(self) -> None:
        """Collective (redundancy 2): the copies other nodes keep of this state become those of
        the state now; an adopted job's optimizer.step() calls it after each update."""
        _redundancy.refresh(self)

    def redundancy_stats(self) -> Dict[str, Any]:
        """redundancy (1 or 2), copy_bytes (this process's copies of other ranks' state),
        copy_step (the step they hold, -1: none), copies_of (their global ranks), refresh_seconds."""
        return self._copies.stats(self) if self._copies is not None else dict(redundancy=1, copy_bytes=0)

    def _state_bytes(self) -> int:
        return sum(flat.numel() * flat.element_size() for flat in self._flat)

    def prepare(self, to_cfg: str, *, vacate: Optional[Sequence[int]] = None) -> None:
        """Collective: starts ahead what switch(to_cfg, vacate=...) needs, so that it pauses
        less: processes a grow needs start in the background while the loop trains (a switch
        that changes no process needs nothing ahead). Call switch() with the same arguments
        next; ValueError for what switch() would refuse now."""
        self._require_member()
        with self._collective(f"Manager.prepare of {to_cfg!r}"):
            _agree.agree(self.comm, "prepare arguments", {"to_cfg": to_cfg, "vacate": None if vacate is None else list(vacate)})
            _agree.together(self.comm, f"prepare of {to_cfg!r}", lambda: (
                _c10d.refuse_process_change(self, to_cfg, vacate), _elastic.prepare(self, to_cfg, vacate)))

    def _reference_switch(self, to_cfg: str) -> float:
        """Benchmark only: the same switch timed inside C++ (bench/python_switch_bench.py)."""
        self._drop_views("from before a benchmark switch")
        seconds = self._native.timed_switch(to_cfg)
        self._bind()
        return seconds

    # ---- whole tensors (collective; for tests, initialisation and checks) ----
    def segments(self, kind: str) -> List[Tuple[str, torch.Tensor, Tuple[int, ...], Tuple[int, ...]]]:
        """(name, flat view, lo, hi) for every box of `kind` this rank holds: the view holds box
        [lo, hi) of the global tensor, row-major."""
        self._check_kind(kind)
        out = []
        for tensor, k, buf, offset, lo, hi in self._native.segments():
            if k != kind:
                continue
            numel = 1
            for a, b in zip(lo, hi):
                numel *= b - a
            view = self._views.hand_out(self._flat[buf][offset:offset + numel],
                                        f"segment of tensor '{self._names[tensor]}' ({kind})")
            out.append((self._names[tensor], view, tuple(lo), tuple(hi)))
        return out

    def load(self, name: str, kind: str, full: torch.Tensor) -> None:
        """Writes this rank's elements of (name, kind) from the full global tensor `full` (local)."""
        if tuple(full.shape) != self.global_shape(name):
            raise ValueError(f"tensor '{name}' has global shape {self.global_shape(name)}, got {tuple(full.shape)}")
        for seg_name, view, lo, hi in self.segments(kind):
            if seg_name == name:
                view.copy_(full[tuple(slice(a, b) for a, b in zip(lo, hi))].reshape(-1))

    def gather(self, name: str, kind: str) -> torch.Tensor:
        """Collective over the whole communicator: the full global tensor (name, kind) on every
        rank, assembled from the holders' boxes (replicas must agree: ValueError otherwise)."""
        with self._collective(f"Manager.gather({name!r}, {kind!r})"):
            _agree.agree(self.comm, "gather arguments (name, kind)", (name, kind))
            mine = [(lo, hi, view.clone()) for n, view, lo, hi in self.segments(kind) if n == name]
            everyone = self.comm.allgather(mine)
        dtype = self._dtype_of(kind)
        full = torch.zeros(self.global_shape(name), dtype=dtype)
        seen = torch.zeros(self.global_shape(name), dtype=torch.bool)
        for pieces in everyone:
            for lo, hi, data in pieces:
                box = tuple(slice(a, b) for a, b in zip(lo, hi))
                data = data.view([b - a for a, b in zip(lo, hi)])
                if bool(seen[box].any()) and not torch.equal(full[box][seen[box]], data[seen[box]]):
                    raise ValueError(f"replicas of '{name}' ({kind}) disagree")
                full[box] = data
                seen[box] = True
        if not bool(seen.all()):
            raise InternalError(f"no rank holds part of '{name}' ({kind})")
        return full

    def _placement(self, name: str) -> Tuple[int, int, int, Tuple[int, ...]]:
        """(bucket index, offset, numel, local shape) of this rank's local tensor `name`: its
        elements lie at [offset, offset + numel) of the whole bucket buckets[bucket index], of
        which each ZeRO-sharded kind holds [shard_lo, shard_hi) here."""
        return self._placements[name]

    def pool_stats(self) -> Dict[str, Any]:
        """The manager's memory pool on this rank: live_bytes, reserved_bytes, fresh_bytes;
        pinned_buffers and deferred_bytes (memory that tensors still reference, docs/python.md);
        huge_pages (state in 2 MiB pages), thp_mode, mapped_bytes and huge_page_bytes."""
        return dict(self._native.pool_stats())

    # ---- internals ----
    def _check_kind(self, kind: str) -> str:
        if kind not in self._kinds:
            raise ValueError(f"unknown state kind '{kind}'; this manager holds: {', '.join(self._kinds)}")
        return kind

    def _dtype_of(self, kind: str) -> torch.dtype:
        return self._kind_dtype[kind]

    @staticmethod
    def _kind_dtypes(param_bytes: int) -> Dict[str, torch.dtype]:
        return {k: _DTYPES[param_bytes] if k in ("param", "grad") else torch.float32 for k in KINDS}

    def _drop_views(self, why: str = "from before a switch that changed the job's processes") -> None:
        """Empties every tensor handed out so far (StaleTensorError when used, saying `why`)."""
        self._views.invalidate(why)
        self._flat = []
        self._tensors, self._slices, self._buffers = {}, {}, {}

    def _watchdog_base(self) -> float:
        """The watchdog's base seconds: this Manager's watchdog_s, else DT_WATCHDOG_S (0: off)."""
        return self._watchdog_s if self._watchdog_s is not None else _watchdog.base_seconds_or_default()

    def _collective(self, what: str, moved_bytes: int = 0):
        """The watchdog's deadline around one collective call (python/dynatrain/_watchdog.py)."""
        base = self._watchdog_base()
        return _watchdog.WATCHDOG.guard(what, base + moved_bytes / _watchdog.SLOWEST_RATE if base > 0 else 0)

    def _bind(self) -> None:
        """(Re)builds every view from the native layout: no copies, only tensor headers."""
        n = self._native
        self._config = dict(n.config())
        self._names = list(n.tensor_names())
        self._ids = {name: i for i, name in enumerate(self._names)}
        self._shapes = n.tensor_shapes()
        self._kinds = list(n.kinds())
        self._flat = []
        self._buffers = {k: [] for k in self._kinds}
        for view, kind, elem, numel in n.buffers():
            dtype = _DTYPES[elem]
            flat = torch.frombuffer(view, dtype=dtype) if view is not None else torch.empty(0, dtype=dtype)
            self._flat.append(self._views.hand_out(flat, f"buffer {len(self._flat)} ({kind})"))
            self._buffers[kind].append(flat)
        self._tensors = {k: {} for k in self._kinds}
        self._slices = {k: {} for k in self._kinds}
        shapes = {}
        for tensor, kind, buf, offset, length, start, sharded, shape in n.views():
            name = self._names[tensor]
            shapes[name] = tuple(shape)
            piece = self._flat[buf][offset:offset + length]
            self._tensors[kind][name] = self._views.hand_out(piece if sharded else piece.view(shape),
                                                             f"tensor '{name}' ({kind})")
            self._slices[kind][name] = (start, start + length)
        self._buckets = [dict(b) for b in n.buckets()]
        index = {(b["expert"], b["bucket"]): i for i, b in enumerate(self._buckets)}
        self._placements = {self._names[t]: (index[(expert, bucket)], offset, numel, shapes[self._names[t]])
                            for t, expert, bucket, offset, numel in n.placements()}
        self._groups = self._groups_for(self._config["config"])

    def _groups_for(self, config: str) -> Dict[str, Any]:
        """mpi4py sub-communicators of the current config, split once per config (collective;
        torch.distributed groups on a Manager over torch.distributed, _c10d.groups).
        Groups of one rank are duplicates of COMM_SELF and dp_cp is dp where cp is 1: no split
        (each costs collectives over the whole job; the sizes are the config's, equal everywhere)."""
        if config not in self._group_cache:
            c = self._config
            sizes = {"tp": c["tp"], "cp": c["cp"], "dp": c["dp"], "dp_cp": c["dp"] * c["cp"], "pp": c["pp"],
                     "ep": c["ep"], "etp": c["etp"], "edp": c["edp"]}
            if _c10d.is_c10d(self.comm):  # torch.distributed.new_group, not MPI_Comm_split
                everyone = self._native.all_group_colors()  # the layout's rank r is the comm's rank r
                if everyone[self.comm.rank] != self._native.group_colors():
                    raise InternalError(f"rank {self.comm.rank} of the comm holds another layout rank")
                self._group_cache[config] = _c10d.groups(self.comm, everyone, sizes, c["cp"])
                return self._group_cache[config]
            from mpi4py import MPI
            groups = {}
            for name, (color, key) in self._native.group_colors().items():
                if name == "dp_cp" and c["cp"] == 1:
                    groups[name] = groups["dp"]
                elif sizes[name] == 1:
                    groups[name] = MPI.COMM_SELF.Dup() if color >= 0 else None
                else:
                    sub = self.comm.Split(color if color >= 0 else MPI.UNDEFINED, key)
                    groups[name] = None if sub == MPI.COMM_NULL else sub
            self._group_cache[config] = groups
        return self._group_cache[config]


from .adopt import Job, adopt, describe  # noqa: E402  (needs Manager, Tensor, Model above)
