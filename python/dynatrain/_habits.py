"""Ordinary PyTorch habits on an adopted model, kept right or refused clearly (docs/python.md,
"PyTorch habits"):

  * a graph from before a switch: each parameter's grad hook compares the grad's shape with the
    parameter's current local shape; a mismatch is a StaleTensorError naming the switch (a
    backward through a graph built before it), never torch's "invalid gradient" message. The
    hooks also tell the Job that a backward ran (a switch before optimizer.step() is refused).
  * torch.nn.utils.clip_grad_norm_ / clip_grad_value_ on adopted parameters run the Job's
    whole-model versions (patched into torch.nn.utils at `import dynatrain`); parameters of two
    jobs, or adopted mixed with plain ones, are a ValueError pointing to job.clip_grad_norm_.
  * model.to(dtype) / .half() / .double() / .cuda() after adoption: a ValueError (the
    parameters are views of the Manager's memory); a call that changes nothing is a no-op.
  * the model's forward: a clear ValueError on a process that holds no rank, and a count and
    digest of the inputs that check_step() (run by optimizer.step()) compares across ranks: a
    rank that skipped a step is a ValueError on every rank, a forgotten job.local_batch() a
    warning; an LR scheduler that is not registered, a warning.

Invariant: every adopted nn.Parameter carries `_dynatrain_job`, a weak reference to its Job.
"""
from __future__ import annotations

import atexit
import copy
import hashlib
import warnings
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from ._agree import _gather
from ._views import StaleTensorError

_DIGEST_BYTES = 1 << 16  # bytes of a forward's first input hashed for the forgotten local_batch check


def job_of(p) -> Optional[Any]:
    """The live Job `p` is adopted by, or None."""
    ref = getattr(p, "_dynatrain_job", None)
    return ref() if ref is not None else None


def adopted_by(model: nn.Module) -> Optional[str]:
    """The name of a parameter of `model` that a live Job already holds, or None."""
    return next((name for name, p in model.named_parameters() if job_of(p) is not None), None)


def refuse_adopted(model, optimizer) -> None:
    """ValueError naming the model or optimizer when a Job already holds it."""
    bound = next((name for name, p in model.named_parameters() if hasattr(p, "_dynatrain_job")), None)
    if bound is not None:
        raise ValueError(f"{type(model).__name__} is already adopted (parameter '{bound}' is bound to a dynatrain Job); "
                         f"a model is adopted once: use its job (job.switch() changes the layout)")
    if hasattr(optimizer, "_dynatrain_job"):
        raise ValueError(f"this {type(optimizer).__name__} is already adopted by a dynatrain Job; an optimizer is "
                         f"adopted once, with its model")


# ---- the grad hooks: graphs from before a switch ----
def _grad_hook(job_ref, name: str, p_ref):
    def hook(grad: torch.Tensor):
        job, p = job_ref(), p_ref()
        if job is None or p is None:
            return None
        if grad.shape != p.shape:
            raise StaleTensorError(job.stale_graph_message(name, tuple(grad.shape), tuple(p.shape)))
        job.backward_ran = True
        return None
    return hook


def install_grad_hooks(job, params) -> None:
    ref = weakref.ref(job)
    for name, p in params:
        p._dynatrain_job = ref
        p.register_hook(_grad_hook(ref, name, weakref.ref(p)))


def rebind_data(p: torch.Tensor, t: torch.Tensor) -> None:
    """p.data = t. When the shape changes, torch's cached grad accumulator of `p` (kept alive by
    any graph still referencing it, e.g. the previous step's loss) still expects the old shape,
    and the next backward would fail with "invalid gradient"; setting data of another dtype first
    makes torch drop that cache (torch only drops it on a dtype or device change)."""
    if p.shape != t.shape:
        p.data = torch.empty(0, dtype=torch.float64 if p.dtype != torch.float64 else torch.float32)
    p.data = t


# ---- backward through a graph from before a switch ----
_RETIRED: Dict[int, Tuple[Any, str, int]] = {}  # id(node) -> (grad accumulator node, switch label, serial)
_KEEP_SWITCHES = 8  # the retired accumulators of this many latest switches (of any job) are recognised
_WALK_LIMIT = 1_000_000  # graph nodes a failed backward's walk visits at most
_serial = 0
# The retired nodes hold their parameters, whose data views hold their Manager (and its transport,
# e.g. a torch.distributed group): let them go at exit, before the interpreter tears modules down.
atexit.register(_RETIRED.clear)


def retire_accumulators(params, label: str) -> None:
    """Before a switch: remembers each parameter's grad accumulator (the node a graph built now
    ends in), so that a backward through such a graph that fails afterwards is named."""
    global _serial
    _serial += 1
    with torch.enable_grad():
        for _, p in params:
            if p.requires_grad:
                node = p.view_as(p).grad_fn.next_functions[0][0]
                _RETIRED[id(node)] = (node, label, _serial)
    for key in [k for k, (_, _, n) in _RETIRED.items() if n <= _serial - _KEEP_SWITCHES]:
        del _RETIRED[key]


def retired_switch(root) -> Optional[str]:
    """The switch whose retired accumulator the graph below `root` reaches (None: none does)."""
    stack, seen = [root], {}  # id -> node: holding each visited node keeps its id from being reused
    while stack and len(seen) < _WALK_LIMIT:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        hit = _RETIRED.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        stack.extend(n for n, _ in getattr(node, "next_functions", ()))
    return None


def _backward(original):
    def backward(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        except RuntimeError as e:
            label = None if isinstance(e, StaleTensorError) or not _RETIRED else retired_switch(self.grad_fn)
            if label is None:
                raise
            raise StaleTensorError(f"backward through a graph built before {label}: a loss or output computed "
                                   f"before a switch cannot be backpropagated after it (the parameters it used "
                                   f"are the old layout's); drop it and run the forward again") from e
    backward.__doc__ = original.__doc__
    backward._dynatrain = True
    return backward


def patch_backward() -> None:
    """torch.Tensor.backward names a failure in a graph from before a job.switch(); every other
    failure, and every backward that works, is torch's own."""
    if not getattr(torch.Tensor.backward, "_dynatrain", False):
        torch.Tensor.backward = _backward(torch.Tensor.backward)


# ---- the forward: idle processes and inputs ----
def _digest(x: Any) -> Optional[str]:
    """A hash of the first bytes of a tensor input (None for anything else)."""
    if not torch.is_tensor(x) or x.device.type != "cpu" or x.numel() == 0:
        return None
    flat = x.detach().reshape(-1)[: max(1, _DIGEST_BYTES // x.element_size())].contiguous()
    raw = flat.view(torch.int16) if flat.dtype == torch.bfloat16 else flat
    return hashlib.sha1(raw.numpy().tobytes()).hexdigest()


def _forward_pre_hook(job_ref):
    def hook(module, args):
        job = job_ref()
        if job is None:
            return None
        if not job.active:
            raise ValueError(f"{type(module).__name__}.forward on a process that holds no rank in layout "
                             f"'{job.config['config']}' (world rank {job.rank}): skip the step's compute while "
                             f"job.active is False (optimizer.step(), job.switch() and job.average() still take part)")
        if torch.is_grad_enabled():
            job._settle_grads()  # grads a step-boundary switch left unset: zero before the backward
            job.forwards += 1
            if job.first_input is None and args:
                job.first_input = _digest(args[0])
        return None
    return hook


def install_forward_hook(job, model: nn.Module) -> None:
    model.register_forward_pre_hook(_forward_pre_hook(weakref.ref(job)))


# ---- model.to() and friends ----
def _refusing_apply(module: nn.Module, original):
    def _apply(fn, *args, **kwargs):
        probe = next((p for p in module.parameters()), None)
        if probe is not None:
            empty = torch.empty(0, dtype=probe.dtype)
            out = fn(empty)
            if out.dtype == empty.dtype and out.device == empty.device:
                return module  # nothing changes (e.g. model.to(torch.float32) on a float32 model)
            raise ValueError(f"{type(module).__name__}: moving or casting an adopted model (model.to({out.dtype}, "
                             f"{out.device}), .half(), .bfloat16(), .double(), .cuda()) is not supported: its "
                             f"parameters are views of the Manager's {probe.dtype} host memory; build the model in "
                             f"the dtype you train in before dynatrain.adopt()")
        return original(fn, *args, **kwargs)
    return _apply


def refuse_moves(model: nn.Module) -> None:
    for module in model.modules():
        module._apply = _refusing_apply(module, module._apply)


# ---- torch.nn.utils clipping ----
def _job_of_all(params: List[torch.Tensor], what: str):
    """The one Job holding every tensor of `params`; None when none is adopted; ValueError for a
    mix (two jobs, or adopted and plain tensors)."""
    jobs = [job_of(p) for p in params]
    adopted = {id(j): j for j in jobs if j is not None}
    if not adopted:
        return None
    if len(adopted) > 1 or any(j is None for j in jobs):
        raise ValueError(f"{what} over parameters of {len(adopted)} adopted job(s)"
                         f"{' and plain tensors' if any(j is None for j in jobs) else ''}: it cannot see the "
                         f"whole model that way; call job.clip_grad_norm_ / job.clip_grad_value_ of each job")
    return next(iter(adopted.values()))


def _as_list(parameters) -> List[torch.Tensor]:
    return [parameters] if torch.is_tensor(parameters) else list(parameters)


def _clip_grad_norm_(original):
    def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False):
        params = _as_list(parameters)
        job = _job_of_all(params, "torch.nn.utils.clip_grad_norm_")
        if job is None:
            return original(params, max_norm, norm_type, error_if_nonfinite)
        return job.clip_grad_norm_(max_norm, norm_type, error_if_nonfinite=error_if_nonfinite, parameters=params)
    clip_grad_norm_.__doc__ = original.__doc__
    clip_grad_norm_._dynatrain = True
    return clip_grad_norm_


def _clip_grad_value_(original):
    def clip_grad_value_(parameters, clip_value: float) -> None:
        params = _as_list(parameters)
        job = _job_of_all(params, "torch.nn.utils.clip_grad_value_")
        if job is None:
            return original(params, clip_value)
        return job.clip_grad_value_(clip_value, parameters=params)
    clip_grad_value_.__doc__ = original.__doc__
    clip_grad_value_._dynatrain = True
    return clip_grad_value_


def patch_clipping() -> None:
    """torch.nn.utils.clip_grad_norm_ / clip_grad_value_ (and torch.nn.utils.clip_grad's) become
    wrappers that run plain torch on plain tensors and the Job's whole-model clipping on adopted
    parameters. A name imported from torch before `import dynatrain` keeps torch's function."""
    import torch.nn.utils as utils
    import torch.nn.utils.clip_grad as clip_grad
    for name, wrap in (("clip_grad_norm_", _clip_grad_norm_), ("clip_grad_value_", _clip_grad_value_)):
        original = getattr(clip_grad, name)
        if getattr(original, "_dynatrain", False):
            continue
        wrapped = wrap(original)
        setattr(clip_grad, name, wrapped)  # clip_grad_norm (deprecated) calls it through this module
        setattr(utils, name, wrapped)


# ---- the step: ranks in step, a forgotten local_batch, an unregistered scheduler ----
def check_step(job) -> None:
    """Collective, at the start of optimizer.step(): every rank is at the same step and every
    active rank ran as many forward passes (with grad) since the previous one; ValueError on
    every rank otherwise (a rank skipped optimizer.step()). Warns once when two dp ranks fed the
    model the same input (the global batch: job.local_batch() forgotten)."""
    m = job.manager
    mine = (m.step, job.forwards if m.active else None, job.first_input, m.config["dp_rank"] if m.active else -1)
    job.forwards, job.first_input = 0, None
    everyone = _gather(m.comm, "optimizer.step()", mine)
    steps = {s for s, _, _, _ in everyone}
    counts = {f for _, f, _, _ in everyone if f is not None}
    if len(steps) > 1 or len(counts) > 1:
        seen = ", ".join(f"rank {r}: step {s}, {f} forward(s)" for r, (s, f, _, _) in enumerate(everyone))
        raise ValueError(f"optimizer.step(): the ranks are not at the same step ({seen}): a rank skipped "
                         f"optimizer.step() or ran extra forward passes with grad; every rank must run the "
                         f"same forwards and call optimizer.step() together")
    dp_of: Dict[str, set] = {}
    for _, _, digest, dp_rank in everyone:
        if digest is not None:
            dp_of.setdefault(digest, set()).add(dp_rank)
    if m.config["dp"] > 1 and any(len(ranks) > 1 for ranks in dp_of.values()):
        warn_once(job, "local_batch", f"every dp rank fed the model the same input at dp={m.config['dp']}: each "
                                      f"computes the whole batch (the grads are right, the work is dp times too "
                                      f"much); pass job.local_batch(batch) to the model")


def warn_once(job, key: str, text: str) -> None:
    if key not in job._warned:
        job._warned.add(key)
        warnings.warn(f"dynatrain: {text}", RuntimeWarning, stacklevel=4)


def warn_unregistered_scheduler(job) -> None:
    """An LR scheduler built over the optimizer (it sets optimizer._step_count) is not job state
    until registered: warn once."""
    if getattr(job.optimizer, "_step_count", None) is not None and not job._schedulers:
        warn_once(job, "scheduler", "an LR scheduler steps this optimizer but is not registered: a process a grow "
                                    "starts, or a resume, would restart it from epoch 0; call "
                                    "job.register_scheduler(scheduler)")


def scheduler_state(job, scheduler):
    """(get, put) of a registered scheduler as job state: a switch or a save carries the schedule
    of the applied steps; where it is loaded the carried param groups (lr included) are put back
    after it."""
    def get():
        restore_schedules(job)
        return scheduler.state_dict()

    def put(value) -> None:
        job._held_schedules = None  # the carried state is the one to go on from
        scheduler.load_state_dict(value)
        job._put_groups(job._groups)
    return get, put


def hold_schedules(job) -> None:
    """After an optimizer.step() that did not count its step (a lost process interrupted it: not
    applied, job.step unchanged, the loop does it again): the registered schedulers' state and
    the param groups' settings as they stand, put back by restore_schedules() at the next
    optimizer.step(), so that `optimizer.step(); scheduler.step()` moves the schedule once per
    applied step, as in a run that lost nothing."""
    job._held_schedules = (copy.deepcopy([s.state_dict() for s in job._schedulers]),
                           [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
                            for g in job.optimizer.param_groups]) if job._schedulers else None


def restore_schedules(job) -> None:
    """At the start of optimizer.step(), and before a switch or a save reads a registered
    scheduler: undoes a scheduler.step() taken after a step that did not count (hold_schedules)."""
    held, job._held_schedules = job._held_schedules, None
    if held is None:
        return
    for scheduler, state in zip(job._schedulers, held[0]):
        scheduler.load_state_dict(state)
    for group, settings in zip(job.optimizer.param_groups, held[1]):
        group.update(settings)
