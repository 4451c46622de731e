"""Full state dicts of an adopted model and optimizer, as PyTorch lays them out: plain names and
the unsharded shapes (no vocab padding), so they load into the plain model and optimizer; and
optimizer.load_state_dict() of such a dict after adoption, into the Manager's state.

model() and optimizer() are collective over the job (Manager.gather, one tensor at a time);
every rank gets the whole dict. load_optimizer() is local: every rank passes the same dict and
writes its own elements. model.state_dict() / optimizer.state_dict() themselves stay torch's:
this rank's local views (the next switch invalidates them).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, List, Tuple

import torch

from . import _experts


class StateDicts:
    def __init__(self, job) -> None:
        self.job = job

    def _names(self) -> Dict[int, str]:
        return {id(p): name for name, p in self.job._params}

    def _experts(self) -> Dict[int, Tuple[str, int]]:
        """id(an nn.ModuleList expert's own parameter) -> (its stacked tensor, its index there)."""
        return {i: (name, index) for i, (name, _, index) in _experts.aliases(self.job._blocks).items()}

    def model(self) -> Dict[str, torch.Tensor]:
        """Collective: every entry of model.state_dict(), parameters whole (tied ones under each
        of their names; an expert's own from its stacked tensor), buffers as this rank holds them
        (equal on every rank after adoption)."""
        names, experts, gathered = self._names(), self._experts(), {}
        out: Dict[str, torch.Tensor] = OrderedDict()
        for key, t in self.job.model.state_dict(keep_vars=True).items():
            name, index = experts.get(id(t), (names.get(id(t)), None))
            if name is None:
                out[key] = t.detach().clone()
                continue
            if name not in gathered:
                gathered[name] = self.job.full(name)
            out[key] = gathered[name] if index is None else gathered[name][index].clone()
        return out

    def _plain_groups(self) -> List[List[torch.Tensor]]:
        """The param groups' parameters as the plain optimizer holds them (an nn.ModuleList
        expert's own parameters, not the stacked tensor that replaced them)."""
        return self.job._plain_groups or [list(g["params"]) for g in self.job.optimizer.param_groups]

    def _index(self) -> List[List[Any]]:
        """torch's numbering: the parameters of every group in order, from 0."""
        index: Dict[int, int] = {}
        return [[index.setdefault(id(p), len(index)) for p in params] for params in self._plain_groups()]

    def _where(self, p) -> Tuple[Any, Any]:
        """(Manager name, expert index or None) of a parameter of the plain optimizer."""
        return self._experts().get(id(p), (self._names().get(id(p)), None))

    def optimizer(self) -> Dict[str, Any]:
        """Collective: {"state": {index: {key: whole tensor, "step": ...}}, "param_groups": [...]}
        as torch's optimizer.state_dict() of the plain model would be."""
        job = self.job
        m, opt = job.manager, job.optimizer
        numbers = self._index()
        groups = [dict({k: v for k, v in g.items() if k != "params"}, params=ids)
                  for g, ids in zip(opt.param_groups, numbers)]
        steps = m.comm.bcast(job._carried()["steps"] if m.comm.rank == 0 else None, root=0)
        bound = job._lazy_started or not job._spec.lazy  # alike on every rank
        gathered: Dict[Tuple[str, str], torch.Tensor] = {}
        state: Dict[int, Dict[str, Any]] = {}
        for params, ids in zip(self._plain_groups(), numbers):
            for p, i in zip(params, ids):
                name, index = self._where(p)
                if name is None:
                    continue
                entry = {}
                for key, kind in job._spec.keys.items() if bound else ():
                    if (name, kind) not in gathered:
                        gathered[(name, kind)] = job.full(name, kind)
                    whole = gathered[(name, kind)]
                    entry[key] = whole if index is None else whole[index].clone()
                if name in steps:
                    entry["step"] = torch.tensor(steps[name])
                if entry:
                    state[i] = entry
        return {"state": state, "param_groups": groups}

    def load_optimizer(self, state_dict: Dict[str, Any]) -> None:
        """optimizer.load_state_dict() after adoption: a full state dict (job.optimizer_state_dict(),
        or the plain optimizer's) goes into the Manager's state; the param groups' options are
        taken as torch takes them. ValueError for a dict of another shape (a local one)."""
        job = self.job
        opt, plain = job.optimizer, self._plain_groups()
        groups = state_dict.get("param_groups", [])
        if len(groups) != len(plain) or any(len(g["params"]) != len(mine) for g, mine in zip(groups, plain)):
            raise ValueError("optimizer.load_state_dict(): its param groups differ in number or size from this "
                             "optimizer's")
        params = {i: p for g, mine in zip(groups, plain) for i, p in zip(g["params"], mine)}
        bound = dict(job._params)
        writes, steps, stacks = [], {}, {}
        for i, entry in state_dict.get("state", {}).items():
            if i not in params:
                raise ValueError(f"optimizer.load_state_dict(): state of parameter {i}, which no param group lists")
            name, index = self._where(params[i])
            for key, value in entry.items():
                if key == "step" or value is None:
                    continue
                checked = self._checked(name, key, value, index is not None)
                if index is None:
                    writes.append(checked)
                else:
                    stacks.setdefault(checked[:2], {})[index] = value.detach()
            if "step" in entry and job._spec.per_param_step:
                steps[name] = float(entry["step"])
        for (name, kind), parts in stacks.items():
            writes.append((name, kind, self._whole(name, kind, parts)))
        for name, kind, value in writes:  # all checked first: a refused dict changes nothing
            job.load(name, kind, value.detach().float())
        for name, step in steps.items():
            opt.state[bound[name]]["step"] = torch.tensor(step)
        for mine, g in zip(opt.param_groups, groups):
            mine.update({k: v for k, v in g.items() if k != "params"})
        if writes and job._spec.lazy:
            job._lazy_started = True
        job._bind_state()

    def _checked(self, name: str, key: str, value: torch.Tensor, expert: bool = False):
        """(name, Manager kind, value) of one state entry; ValueError unless it is whole (one
        expert's slice of a stacked tensor when `expert`)."""
        job = self.job
        kind = job._spec.keys.get(key)
        if kind is None:
            raise ValueError(f"optimizer.load_state_dict(): state '{key}' of parameter '{name}' is not one "
                             f"{job._spec.name} keeps; valid: {', '.join(job._spec.keys) or 'none'}, step")
        shape = job.global_shape(name)[1:] if expert else job.global_shape(name)
        if tuple(value.shape) != shape:
            raise ValueError(f"optimizer.load_state_dict(): state '{key}' of parameter '{name}' has shape "
                             f"{tuple(value.shape)}, the whole tensor's is {shape}: pass a full state dict "
                             f"(job.optimizer_state_dict(), or the plain optimizer's), not a rank's local one")
        return name, kind, value

    def load_model(self, state_dict: Dict[str, torch.Tensor], strict: bool = True):
        """model.load_state_dict() after adoption: a full state dict (the plain model's, or
        job.state_dict()) goes into the Manager's parameters (and fp32 master) and the buffers;
        every rank passes the same dict. A local (sharded or padded) one is a ValueError, and
        strict key checking is torch's; nothing is written unless all of it is right."""
        from torch.nn.modules.module import _IncompatibleKeys
        job = self.job
        names, experts = self._names(), self._experts()
        mine = job.model.state_dict(keep_vars=True)
        missing = [k for k in mine if k not in state_dict]
        unexpected = [k for k in state_dict if k not in mine]
        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading state_dict for {type(job.model).__name__}: missing keys "
                               f"{missing}, unexpected keys {unexpected}")
        writes: List[Tuple[Any, Any, torch.Tensor]] = []
        stacks: Dict[str, Dict[int, torch.Tensor]] = {}
        for key, t in mine.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            if id(t) in experts:
                name, index = experts[id(t)]
                want = job.global_shape(name)[1:]
            else:
                want = job.global_shape(names[id(t)]) if id(t) in names else tuple(t.shape)
            if tuple(value.shape) != want:
                raise ValueError(f"model.load_state_dict(): '{key}' has shape {tuple(value.shape)}, the whole "
                                 f"tensor's is {want}: pass a full state dict (job.state_dict(), or the plain "
                                 f"model's), not a rank's local one")
            if id(t) in experts:
                stacks.setdefault(name, {})[index] = value.detach()
                continue
            writes.append((names.get(id(t)), t, value.detach()))
        params = dict(job._params)
        writes += [(name, params[name], self._whole(name, "param", parts)) for name, parts in stacks.items()]
        with torch.no_grad():
            for name, t, value in writes:
                if name is None:
                    t.copy_(value)
                    continue
                job.load(name, "param", value.to(t.dtype))
                if job._bf16:
                    job.load(name, "master", value.float())
        return _IncompatibleKeys(missing, unexpected)

    def _whole(self, name: str, kind: str, parts: Dict[int, torch.Tensor]) -> torch.Tensor:
        """The whole stacked tensor `name` of state `kind` from the experts' entries of a state
        dict; experts it lacks keep their values (then collective: job.full)."""
        count = self.job.global_shape(name)[0]
        if len(parts) == count:
            return torch.stack([parts[i] for i in range(count)])
        whole = self.job.full(name, kind).clone()
        for index, value in parts.items():
            whole[index] = value
        return whole


def persistent_buffers(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module, str]]:
    """(state_dict name, module, key) of every persistent buffer (register_buffer), once each."""
    seen, out = set(), []
    for prefix, module in model.named_modules():
        for key, b in module._buffers.items():
            if b is not None and key not in module._non_persistent_buffers_set and id(b) not in seen:
                seen.add(id(b))
                out.append((f"{prefix}.{key}" if prefix else key, module, key))
    return out


def put_buffers(model: torch.nn.Module, buffers: Dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, module, key in persistent_buffers(model):
            value, mine = buffers.get(name), module._buffers[key]
            if value is None:
                continue
            if value.shape == mine.shape and value.dtype == mine.dtype:
                mine.copy_(value)
            else:
                module._buffers[key] = value.clone()
