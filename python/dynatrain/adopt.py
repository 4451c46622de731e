"""Adoption: an ordinary torch.nn.Module and torch.optim optimizer trained on DynaTrain's state.

    job = dynatrain.adopt(model, optimizer, {"*.q": "column", "*.proj": "row"}, "tp=2")
    ... the user's loop, unchanged: zero_grad(), forward, backward(), optimizer.step() ...
    job.switch("dp=2")                     # collective: same model, same optimizer afterwards

Invariants between calls:
  * every parameter p is bound to the Manager: p.data is this rank's local shard (tensors("param")),
    p.grad its grad (tensors("grad"); at zero>=2 a job-owned buffer, _grads.py); at zero=3 p.data
    is this rank's 1-D shard between steps, whole only inside its module's forward and backward
    (_zero3.py),
    optimizer.state[p] holds the Manager's moment views
    (local shape at zero=0, this rank's 1-D ZeRO shard at zero>=1). A switch rebinds the same
    Parameter objects and the same state dicts; nothing else holds Manager views across a switch.
  * optimizer.step() reduces the grads over dp first (unless sync_grads() already did since the
    last step), updates, then all-gathers the ZeRO shards; zero_grad() zeroes the bound grads in
    place (set_to_none is honoured as zeroing: the grads live in the Manager's memory).
"""
from __future__ import annotations

import inspect
import types
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import (Manager, _attention, _c10d, _clip, _experts, _habits, _interrupt, _lend, _notice, _recover, _redundancy,
               _sharded, _zero3, tp)
from ._agree import agree, agree_together, together
from ._describe import Description, describe
from ._grads import GradBuffers, JobGrads
from ._step import ShardedStep
from ._optim import OptimizerSpec, hyperparameters, spec_of
from ._state_dict import StateDicts, persistent_buffers, put_buffers

__all__ = ["adopt", "describe", "Job", "SUPPORTED_LAYOUT"]

SUPPORTED_LAYOUT = ("tp, dp and zero=0/1/2/3 in any combination, ep and etp (dividing tp) with an 'experts' "
                    "MoE block (pp=1, cp=1)")
_DEFAULTS = {"tp": 1, "cp": 1, "dp": 1, "pp": 1, "ep": 1, "etp": 1, "zero": 1}
_EXTRA = "dynatrain.adopt.optimizer"  # carried optimizer state outside the VPS
_habits.patch_clipping()  # torch.nn.utils.clip_grad_norm_ / clip_grad_value_ on adopted parameters
_habits.patch_backward()  # a backward through a graph from before a switch: StaleTensorError naming it


def _sizes(layout: str) -> Dict[str, int]:
    """The sizes a config string sets, defaults for the others (bad syntax is left to the native
    parser, which names it)."""
    sizes = dict(_DEFAULTS)
    for item in str(layout).split(","):
        key, _, value = item.partition("=")
        if key.strip() in sizes and value.strip().isdigit():
            sizes[key.strip()] = int(value)
    return sizes


def check_layout(layout: str, sizes: Optional[Dict[str, int]] = None) -> None:
    """ValueError naming `layout` when adoption cannot run it."""
    s = sizes or _sizes(layout)
    bad = [f"{k}={s[k]}" for k in ("pp", "cp") if s[k] > 1]
    if bad:
        raise ValueError(f"layout '{layout}': an adopted model does not run {', '.join(bad)}; valid: {SUPPORTED_LAYOUT}")


def _check_layout_for(layout: str, attrs, blocks) -> None:
    """check_layout(), this model's tp_attrs (each divisible by the layout's tp) and MoE blocks."""
    check_layout(layout)
    _attention.check_tp_attrs(attrs, _sizes(layout)["tp"], layout)
    _experts.check_layout(layout, _sizes(layout), blocks)


def _broadcast(comm, t: torch.Tensor) -> torch.Tensor:
    """Rank 0's values of `t` on every rank (a contiguous copy; shapes agreed beforehand)."""
    out = t.detach().contiguous().clone()
    tp.broadcast_(out, comm)
    return out


class Job(_lend.PhaseShifts, ShardedStep, JobGrads):
    """An adopted model and optimizer on a Manager. Collective calls: switch, sync_grads (also
    run by optimizer.step), save, average, lend, reclaim, refit; every rank calls them together."""

    def __init__(self, manager: Manager, model: torch.nn.Module, optimizer, described: Description,
                 spec: OptimizerSpec, notices: Optional[_notice.Notices] = None):
        self.manager, self.model, self.optimizer = manager, model, optimizer
        self._params = described.params
        self._styled = described.styled
        self._split = {t.name: t.split for t in described.model.tensors}
        self._expert = {t.name: t.expert for t in described.model.tensors}
        self._spec = spec
        self._bf16 = described.dtype == torch.bfloat16
        self._optimized = {id(p) for g in optimizer.param_groups for p in g["params"]}
        self._grads: Optional[GradBuffers] = None
        self._zero3: Optional[_zero3.Zero3] = None  # the current layout's, at zero=3
        self._synced = False
        self._stage = "done"  # how far the current optimizer.step() got (_recover.py reads it after a loss)
        self._held_schedules = None  # the schedules as they stood after a step that did not count (_habits)
        self._lazy_started = False
        self._joined_pending = bool(getattr(manager, "joined", False))
        self._step_fn = optimizer.step
        self._notices = notices  # preemption notices, acted on after each step (_notice.py)
        self._global_batch: Optional[int] = None  # the last local_batch()'s, which a survivors' dp must divide
        self._groups: List[Dict[str, Any]] = []  # the param groups' options last carried in (_receive)
        self._schedulers: List[Any] = []
        self._warned: set = set()
        self._switches = 0
        self._last_config = manager.config["config"]
        self._ended: Dict[str, List[Tuple[Tuple[int, ...], str]]] = {}  # name -> (local shape, switch that ended it)
        self.backward_ran = False  # a backward since the last step or zero_grad (the grad hooks set it)
        # A step-boundary switch (job.lend, job.reclaim) left the grads unset: p.grad is None until
        # _settle_grads() zeroes and binds them (zero_grad(), a grad-enabled forward, the step).
        self._grads_unset = False
        self.forwards, self.first_input = 0, None  # grad-enabled forwards since the last step; a digest of the first's input
        self.state_dicts = StateDicts(self)
        optimizer._dynatrain_job = weakref.ref(self)
        # Methods of the optimizer (not of the Job), so that an LR scheduler built afterwards
        # wraps them as it wraps any optimizer's step (it counts on method.__self__).
        optimizer.step = types.MethodType(lambda _, closure=None: self._optimizer_step(closure), optimizer)
        optimizer.zero_grad = types.MethodType(lambda _, set_to_none=False: self._zero_grad(), optimizer)
        model.zero_grad = types.MethodType(lambda _, set_to_none=False: self._zero_grad(), model)
        for _, module, style in self._styled:
            vocab = getattr(module, "out_features", 0)  # a head's logits keep the width it was built with
            tp.install(module, style, lambda v=vocab: (self.manager.group("tp"), v))
        self._folds, self._attrs = described.folds, described.attrs  # fused q/k/v shapes; tp_attrs
        self._blocks, self._names_of = described.blocks, described.names_of()  # MoE blocks (_experts.py)
        self._plain_groups = described.plain_groups  # the param groups as the plain optimizer holds them
        _experts.install(self._blocks, self)
        _attention.install_tp_attrs(self._attrs, lambda: self.manager.config["tp"])
        _habits.install_grad_hooks(self, self._params)
        _habits.install_forward_hook(self, model)
        _zero3.install(self, model, {id(p) for _, p in self._params})
        _habits.refuse_moves(model)
        optimizer.load_state_dict = types.MethodType(lambda _, sd: self.state_dicts.load_optimizer(sd), optimizer)
        model.load_state_dict = types.MethodType(lambda _, sd, strict=True: self.state_dicts.load_model(sd, strict),
                                                 model)
        manager.register(_EXTRA, self._carried, self._receive)

    # ---- the current layout ----
    @property
    def step(self) -> int:
        """Optimizer steps taken (carried by switches, joins and checkpoints)."""
        return self.manager.step

    @property
    def config(self) -> Dict[str, Any]:
        return self.manager.config

    @property
    def active(self) -> bool:
        """False on a process that holds no rank in the current layout (it must skip compute)."""
        return self.manager.active

    @property
    def rank(self) -> int:
        return self.manager.comm.rank

    def local_batch(self, batch: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous slice (dim 0) of the global batch: dp equal parts, in dp order."""
        c = self.manager.config
        self._global_batch = batch.shape[0]
        if batch.shape[0] % c["dp"]:
            raise ValueError(f"global batch of {batch.shape[0]} does not split into dp={c['dp']} equal parts")
        return batch.chunk(c["dp"])[c["dp_rank"]]

    def average(self, value) -> torch.Tensor:
        """Collective over dp: the mean of a scalar (e.g. each rank's loss on its slice) as a
        0-d float tensor, detached."""
        x = float(value.detach()) if torch.is_tensor(value) else float(value)
        dp = self.manager.group("dp")
        with self.manager._collective("job.average()"):
            return torch.tensor(dp.allreduce(x) / dp.size if dp is not None else x)

    def print(self, *args, **kwargs) -> None:
        """print() on the job's rank 0 only (not collective: arguments that are, such as
        job.average(loss), are evaluated on every rank before the call)."""
        if self.rank == 0:
            print(*args, **kwargs)

    def register(self, name, get, set, *, per_rank: bool = False) -> None:
        """Extra state carried by switches and checkpoints (Manager.register)."""
        self.manager.register(name, get, set, per_rank=per_rank)

    def register_scheduler(self, scheduler, name: str = "lr_scheduler") -> None:
        """An LR scheduler of this optimizer becomes job state: its state_dict() is carried by
        switches, to processes a grow starts and into checkpoints; where it is loaded (a joined
        or resumed process) the carried param groups (lr included) are put back after it."""
        if getattr(scheduler, "optimizer", None) is not self.optimizer:
            raise ValueError(f"register_scheduler: {type(scheduler).__name__} does not schedule this job's optimizer")

        self._schedulers.append(scheduler)
        self.register(name, *_habits.scheduler_state(self, scheduler))

    # ---- the full state, as PyTorch lays it out (collective; _state_dict.py) ----
    def state_dict(self) -> Dict[str, torch.Tensor]:
        """Collective: model.state_dict() of the whole model: plain names and shapes, no padding."""
        return self.state_dicts.model()

    def optimizer_state_dict(self) -> Dict[str, Any]:
        """Collective: optimizer.state_dict() of the whole model (loads into the plain optimizer)."""
        return self.state_dicts.optimizer()

    def sharded_state_dict(self) -> Dict[str, Any]:
        """Collective: this rank's part of the job's state, as VPS boxes (_sharded.py)."""
        return _sharded.save(self)

    def load_sharded_state_dict(self, shards) -> None:
        """Collective: every rank's sharded_state_dict() of one save, any layout or process count."""
        _sharded.load(self, shards)

    # ---- gradients and the step ----
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0, *, error_if_nonfinite: bool = False,
                        parameters=None) -> torch.Tensor:
        """Collective: torch.nn.utils.clip_grad_norm_ over the whole model (or `parameters` of
        it), whatever the layout, on the dp mean of the grads (_clip.py). Returns the norm.
        torch.nn.utils.clip_grad_norm_ on adopted parameters calls this."""
        with self.manager._collective("clip_grad_norm_"):
            return _clip.clip_grad_norm(self, max_norm, norm_type, error_if_nonfinite=error_if_nonfinite,
                                        parameters=parameters)

    def clip_grad_value_(self, clip_value: float, parameters=None) -> None:
        """Collective: torch.nn.utils.clip_grad_value_ on the dp mean of the grads (_clip.py)."""
        with self.manager._collective("clip_grad_value_"):
            _clip.clip_grad_value(self, clip_value, parameters)

    def _holds_once(self, name: str) -> bool:
        """Whether this rank counts its piece of the reduced grad of `name`, so that over the
        tp x dp ranks every element counts once: split over tp, each tp rank its own; sharded over
        dp (zero>=2; expert shards span tp too), each rank its own; else the replica on rank 0."""
        c = self.manager.config
        if self._expert[name]:  # over etp x ep x edp: etp like tp, edp like dp
            return (self._split[name] != "replicated" or c["etp_rank"] == 0) and (self._grads.sharded or
                                                                                  c["edp_rank"] == 0)
        tp_unique = self._split[name] != "replicated"
        return (tp_unique or c["tp_rank"] == 0) and (self._grads.sharded or c["dp_rank"] == 0)

    def _optimizer_step(self, closure=None):
        if closure is not None:
            raise ValueError("optimizer.step(closure) is not supported on an adopted optimizer; call it without")
        m = self.manager
        _habits.warn_unregistered_scheduler(self)
        _habits.restore_schedules(self)  # a scheduler.step() after a step that did not count is undone
        with m._collective(f"optimizer.step() at step {m.step}", m._state_bytes()):
            self._stage = "collectives"
            try:
                _interrupt.raise_kept()  # a lost peer met since the last step (tp forward, average, ...)
                _habits.check_step(self)  # the step's first collective
                if not self._synced:
                    self.sync_grads()
                self._stage = "ready"  # every collective of the step done: the update waits on the commit only
                _recover.commit(m)  # applied by every process or by none
                self._stage = "update"
                if m.active:
                    self._step_on_shards()
            except RuntimeError as error:  # Gloo's error for a lost peer (dynatrain.CommError too)
                if not _recover.enabled(m):
                    raise
                if _recover.in_job(self, error):  # the step completed in the recovery (others had applied it)
                    return self._step_done(counted=True)
                _habits.hold_schedules(self)
                return _interrupt.arm(True)  # the step is not applied and job.step stays: the loop does it again
        self._step_done()
        if self._notices is not None:
            try:
                self._notices.at_boundary(self, self._runs)
            except RuntimeError as error:  # a lost peer: met again by the next step, which recovers
                _interrupt.keep(error)
        _redundancy.refresh(m)  # the copies of this step's state, held on other nodes

    def _step_done(self, counted: bool = False) -> None:
        """The step counted (job.step on, unless `counted` already), the next step armed against a
        lost peer."""
        m = self.manager
        if not counted:
            m.step += 1
        self._stage = "done"
        self._synced = False
        self.backward_ran = False
        _interrupt.arm(_recover.enabled(m))
        _recover.watch(m)

    def _runs(self, layout: str) -> bool:
        """Whether this job can train in `layout` on its processes (a notice's survivor layout)."""
        try:
            self._check(layout)
            self.manager._native.validate(layout)
        except ValueError:
            return False
        return self._global_batch is None or self._global_batch % _sizes(layout)["dp"] == 0

    # ---- binding to the Manager (views in the module's shapes: fused q/k/v folded back) ----
    def _local(self, views: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return {name: self._folds.local(name, t) for name, t in views.items()}

    def _tensors(self, kind: str) -> Dict[str, torch.Tensor]:
        return self._local(self.manager.tensors(kind))

    def load(self, name: str, kind: str, full: torch.Tensor) -> None:
        """Manager.load of a whole tensor in the module's shape."""
        self.manager.load(name, kind, self._folds.to_logical(name, full))

    def global_shape(self, name: str) -> Tuple[int, ...]:
        return self._folds.shape(name, self.manager.global_shape(name))

    def _bind_params(self) -> None:
        m = self.manager
        if not m.active:
            for _, p in self._params:
                _habits.rebind_data(p, torch.empty(0, dtype=p.dtype))
                p.grad = None
            return
        params, grads = self._tensors("param"), self._local(self._grads.grads())
        for name, p in self._params:
            _habits.rebind_data(p, params[name])
            if self._grads_unset:
                p.grad = None
            else:
                self._set_grad(p, grads[name])

    def _bind(self) -> None:
        """Points every parameter, grad and optimizer state entry at the Manager's current views."""
        self._grads = GradBuffers(self.manager)
        m = self.manager
        self._zero3 = _zero3.Zero3(m, self._params, self._folds.local) if m.active and m.config["zero"] >= 3 else None
        self._bind_params()
        self._bind_state()

    def _bind_state(self) -> None:
        """Points every optimizer state entry adoption keeps at the Manager's current views."""
        m = self.manager
        if not m.active:
            return
        started = self._lazy_started or not self._spec.lazy
        views = {k: self._tensors(kind) for k, kind in self._spec.keys.items()}
        for name, p in self._params:
            if id(p) not in self._optimized:
                continue
            state = self.optimizer.state[p]  # the same dict across switches: keyed by the same p
            for key, view in views.items():
                if started:
                    state[key] = view[name]
            if self._spec.per_param_step and "step" not in state:
                state["step"] = torch.tensor(float(m.step))

    def _unbind(self) -> None:
        """Drops every reference to Manager views before they are invalidated."""
        self._grads = None
        if self._zero3 is not None:
            self._zero3.release_all()
        self._zero3 = None
        for _, p in self._params:
            p.grad = None
            _habits.rebind_data(p, torch.empty(0, dtype=p.dtype))
        for _, p in self._params:
            state = self.optimizer.state.get(p)
            for key in self._spec.keys:
                if state is not None and key in state:
                    state[key] = torch.empty(0)

    def _carried(self) -> Dict[str, Any]:
        steps = {}
        if self._spec.per_param_step:
            steps = {name: float(self.optimizer.state[p]["step"]) for name, p in self._params
                     if id(p) in self._optimized and "step" in self.optimizer.state.get(p, {})}
        groups = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        buffers = {name: module._buffers[key].detach().clone() for name, module, key in persistent_buffers(self.model)}
        return {"steps": steps, "lazy_started": self._lazy_started, "groups": groups, "buffers": buffers}

    def _put_groups(self, groups: List[Dict[str, Any]]) -> None:
        """Every option of every param group (lr included) from `groups` (the carried ones)."""
        if len(groups) == len(self.optimizer.param_groups):
            for group, options in zip(self.optimizer.param_groups, groups):
                group.update(options)

    def _receive(self, value: Dict[str, Any]) -> None:
        self._lazy_started = bool(value["lazy_started"])
        self._groups = value.get("groups", [])
        self._put_groups(self._groups)
        put_buffers(self.model, value.get("buffers", {}))
        names = dict(self._params)
        for name, step in value["steps"].items():
            state = self.optimizer.state[names[name]]
            if "step" in state:
                state["step"].fill_(step)
            else:
                state["step"] = torch.tensor(step)

    def _load_initial(self) -> None:
        """Rank 0's parameters (and optimizer state, when it has stepped) become every rank's."""
        comm = self.manager.comm
        for name, p in self._params:
            full = _broadcast(comm, p)
            self.load(name, "param", full)
            if self._bf16:
                self.load(name, "master", full.float())
        carried = comm.bcast((self._carried(), self._state_keys()) if comm.rank == 0 else None, root=0)
        for name, p in self._params:
            for key in carried[1].get(name, []):
                full = self.optimizer.state[p][key].reshape(p.shape) if comm.rank == 0 else torch.empty(p.shape)
                self.load(name, self._spec.keys[key], _broadcast(comm, full.float()))
        carried[0]["lazy_started"] = self._spec.lazy and any(carried[1].values())
        self._receive(carried[0])

    def _state_keys(self) -> Dict[str, List[str]]:
        """Per parameter name, the optimizer.state keys it already holds (those adoption binds)."""
        return {name: [k for k in self._spec.keys if k in self.optimizer.state.get(p, {})] for name, p in self._params}

    # ---- switching and checkpoints ----
    def switch(self, layout: str, vacate: Optional[List[int]] = None, *, keep_processes: bool = False,
               zero_grads: bool = False) -> Dict[str, Any]:
        """Collective: moves the whole training state to `layout` and rebinds the same parameters
        and optimizer state entries. In a process that joined the job at this step, a switch to
        the layout it joined in is a local no-op (the others ran that switch already).
        keep_processes=True: no process starts or leaves; zero_grads=True: the grads are not moved
        and are zero afterwards (Manager.switch; job.lend and job.reclaim use both)."""
        m = self.manager
        if self._joined_pending:
            self._joined_pending = False
            if _sizes(layout) == {k: m.config[k] for k in _DEFAULTS}:
                return {"config": m.config["config"], "joined": True}
        self._check(layout)
        _lend.refuse_while_lent(self, "job.switch()")
        return self._switch(layout, vacate, keep_processes, zero_grads)

    def _switch(self, layout: str, vacate, keep_processes: bool, zero_grads: bool) -> Dict[str, Any]:
        """switch() past its refusals of a joining process and of lent processes (job.reclaim())."""
        m = self.manager
        agree_together(m.comm, "job.switch(): the optimizer's hyperparameters (param groups)",
                       hyperparameters(self.optimizer, {id(p): n for n, p in self._params}),
                       "job.switch(): no step in progress", self._refuse_unfinished_step)
        before = {name: tuple(p.shape) for name, p in self._params}
        label = f"job.switch {self._switches + 1} ({self._last_config} -> {layout})"
        _habits.retire_accumulators(self._params, label)
        self._unbind()
        try:
            stats = m.switch(layout, vacate=vacate, keep_processes=keep_processes, zero_grads=zero_grads,
                             fill_grads=False)
        except ValueError:
            self._bind()  # rejected on every rank before anything moved
            raise
        self._switches += 1
        # Unset grads stay so through a switch that moves them (their bytes mean nothing).
        self._grads_unset = self._grads_unset or zero_grads
        self._bind()
        self._remember_shapes(before, label)
        self._synced = False
        self.forwards, self.first_input = 0, None
        return stats

    def _check(self, layout: str) -> None:
        _check_layout_for(layout, self._attrs, self._blocks)

    def _refuse_unfinished_step(self) -> None:
        if self.backward_ran:
            raise ValueError(f"job.switch() between backward() and optimizer.step() (layout "
                             f"'{self.manager.config['config']}'): the grads of this step would not survive it; "
                             f"switch after optimizer.step() (or after optimizer.zero_grad() to drop them)")

    def _remember_shapes(self, before: Dict[str, Tuple[int, ...]], label: str) -> None:
        """Which switch ended each parameter's local shape (named by a stale graph's backward)."""
        for name, shape in before.items():
            ended = self._ended.setdefault(name, [])
            ended.append((shape, label))
            del ended[:-8]
        self._last_config = self.manager.config["config"]

    def stale_graph_message(self, name: str, got: Tuple[int, ...], now: Tuple[int, ...]) -> str:
        label = next((lab for shape, lab in reversed(self._ended.get(name, [])) if shape == got), "a job.switch()")
        return (f"backward through a graph built before {label}: parameter '{name}' had local shape {got} there "
                f"and has {now} now; a loss or output computed before a switch cannot be backpropagated after "
                f"it: drop it and run the forward again")

    def save(self, directory) -> None:
        """Collective: a checkpoint of the whole job (Manager.save: every state kind, the step,
        the carried optimizer state and every registered extra)."""
        if not hasattr(self.manager, "save"):
            raise NotImplementedError("this build's dynatrain.Manager has no save(); checkpoints need it")
        _habits.restore_schedules(self)  # on every rank: the saved schedule is the applied steps'
        self._settle_grads()
        self.manager.save(directory)

    def full(self, name: str, kind: str = "param") -> torch.Tensor:
        """Collective: the whole tensor `name` of state `kind` (Manager.gather), e.g. for checks."""
        if kind == "grad":
            self._settle_grads()
        return self._folds.to_user(name, self.manager.gather(name, kind))


def _manager_kwargs(resume, states: str, dtype: torch.dtype, bucket_elems: int, mem_budget: int) -> Dict[str, Any]:
    kwargs = dict(states=states, bucket_elems=bucket_elems, param_dtype=dtype, mem_budget=mem_budget)
    if resume is not None:
        if "resume" not in inspect.signature(Manager.__init__).parameters:
            raise ValueError("resume= needs checkpoint support in dynatrain.Manager, which this build lacks")
        kwargs["resume"] = resume
    return kwargs


def _described_everywhere(comm, model, optimizer, plan, layout, pipeline, vocab_divisible_by, tp_attrs):
    """Describes the model and optimizer on every rank; a refusal on any rank is the same
    ValueError on every rank (no rank is left waiting in a collective)."""
    error, out = None, None
    try:
        _habits.refuse_adopted(model, optimizer)
        described = describe(model, plan, pipeline, vocab_divisible_by=vocab_divisible_by, tp_attrs=tp_attrs)
        spec = spec_of(optimizer)
        _check_layout_for(layout, described.attrs, described.blocks)
        hyperparameters(optimizer, described.names_of())
        _experts.optimizer_groups(optimizer, described.blocks)
        out = described, spec
    except ValueError as e:
        error = str(e)
    errors = comm.allgather(error)
    for rank, e in enumerate(errors):
        if e is not None:
            raise ValueError(e if rank == comm.rank or error == e else f"rank {rank}: {e}")
    return out


def adopt(model: torch.nn.Module, optimizer, plan: Dict[str, str], layout: str, comm=None, *,
          pipeline: Optional[str] = None, resume=None, bucket_elems: int = 40_000_000,
          mem_budget: int = 256 << 20, vocab_divisible_by: int = 128, notice_signal: Optional[str] = "TERM",
          notice_s: float = 30.0, notice_save=None, tp_attrs: Optional[Dict[str, List[str]]] = None,
          redundancy: Optional[int] = None, scheduler=None) -> Job:
    """Collective: trains `model` and `optimizer` (Adam, AdamW or SGD) on DynaTrain's state in
    `layout`, tensor-parallel as `plan` says (glob over module / parameter names -> column, row,
    vocab, replicated, expert, attention, qkv; tp_attrs: module glob -> integer attributes its
    forward reads per tp rank, such as a head count: _attention.py). Rank 0's parameters (and optimizer state) are the initial values,
    unless `resume` names a checkpoint or this process joins a running job. comm=None: the
    torch.distributed default group when it is initialised, else MPI.COMM_WORLD. Returns the Job; the
    model and optimizer objects stay the user's and keep working after every job.switch().
    notice_signal (TERM, USR1, USR2, HUP; None: off) to one process vacates it at the next step
    boundary, notice_s seconds before it is gone; to every process, it saves into notice_save
    (when given) and ends the job (_notice.py, docs/python.md "Notices"). redundancy=2 (default:
    DYNATRAIN_REDUNDANCY, else 1): each process also keeps a copy of a process's state on another
    node, refreshed after every step, so a lost node is recovered in place (_redundancy.py).
    scheduler: an LR scheduler of `optimizer` (or a list of them), made job state as
    Job.register_scheduler() makes it (named lr_scheduler, lr_scheduler_1, ...)."""
    schedulers = scheduler if isinstance(scheduler, (list, tuple)) else [] if scheduler is None else [scheduler]
    for s in schedulers:  # refused before anything is built
        if getattr(s, "optimizer", None) is not optimizer:
            raise ValueError(f"adopt(scheduler=...): {type(s).__name__} does not schedule this optimizer")
    comm = _c10d.resolve(comm)  # None: torch.distributed's default group when initialised, else MPI.COMM_WORLD
    described, spec = _described_everywhere(comm, model, optimizer, plan, layout, pipeline, vocab_divisible_by,
                                            tp_attrs)
    names_of = described.names_of()
    settings = [layout, pipeline, bucket_elems, mem_budget, vocab_divisible_by, resume is not None, notice_signal,
                notice_s, notice_save is not None]
    agree(comm, "adopt(): the model description (names, shapes, dtypes, plan splits)", described.summary())
    agree(comm, "adopt(): the optimizer (class, hyperparameters, parameter groups)",
          hyperparameters(optimizer, names_of))
    agree(comm, "adopt(): layout, pipeline, bucket_elems, mem_budget, vocab_divisible_by, resume, notices", settings)
    kwargs = _manager_kwargs(resume, spec.states(described.dtype == torch.bfloat16), described.dtype, bucket_elems,
                             mem_budget)
    kwargs["redundancy"] = redundancy
    described.plain_groups = _experts.replace_in_optimizer(optimizer, described.blocks)  # stacked expert tensors
    manager = Manager(comm, described.model, layout, **kwargs)
    c = manager.config
    check_layout(c["config"], {k: c[k] for k in _DEFAULTS})  # a resumed or joined job's layout too
    joined = getattr(manager, "joined", False)  # the job's other processes are past adopt(): nothing collective
    with manager._collective("dynatrain.adopt()", manager._state_bytes()):
        def bound() -> Job:
            return Job(manager, model, optimizer, described, spec,
                       _notice.Notices(manager, notice_signal, notice_s, notice_save))
        job = bound() if joined else together(manager.comm, "adopt(): binding the model", bound)
        _recover.announce(manager, model, job)  # where each process runs; the loss watch (_stop.py)
        _interrupt.arm(_recover.enabled(manager))
        if not (joined or getattr(manager, "resumed", False)):
            job._load_initial()
        job._bind()
        for i, s in enumerate(schedulers):
            job.register_scheduler(s, "lr_scheduler" + (f"_{i}" if i else ""))
        if not joined:  # a joined process refreshes with the others at the end of their step
            _redundancy.refresh(manager)  # the copies of the first step's state
    return job
