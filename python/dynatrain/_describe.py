"""The logical tensors of an ordinary torch.nn.Module, read from its parameters and a plan.

A plan maps fnmatch globs over module names and/or parameter names to a split style (tp.py):
a module style ("column", "row", "vocab" on nn.Linear / nn.Embedding) says how its parameters
split and which collectives its forward needs; a style on a parameter name, or Megatron's
`tensor_model_parallel` / `partition_dim` attributes, say only how that parameter splits (its
module then does its own communication). "replicated" and "expert" on a module reach every
parameter below it. "attention" (nn.MultiheadAttention) and "qkv" (a fused [q; k; v] nn.Linear)
split by heads; their fused tensors get a logical shape of their own (_attention.py). Precedence: parameter key, nearest styled module, Megatron attributes,
replicated. Shapes are the module's, unsharded (the module is built as for one process).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from . import _attention, _experts, tp

STYLES = ("column", "row", "vocab", "replicated", "expert", "attention", "qkv", "experts")
DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}


@dataclass
class Description:
    """What adoption knows of a model: its dynatrain.Model, its parameters in model order
    (named as named_parameters() names them), and the modules whose forward gets collectives."""
    model: "object"                               # dynatrain.Model
    params: List[Tuple[str, nn.Parameter]]
    styled: List[Tuple[str, nn.Module, str]]      # (module name, module, column|row|vocab|attention|qkv)
    dtype: torch.dtype
    folds: _attention.Folds                       # fused tensors: logical <-> the module's shape
    attrs: list                                   # (module name, module, attributes) read per tp rank
    blocks: list = field(default_factory=list)    # MoE blocks under "experts" (_experts.Block)
    plain_groups: list = field(default_factory=list)  # the optimizer's params before experts were stacked

    def names_of(self) -> Dict[int, str]:
        """id(parameter) -> its logical name, an expert's own parameter its stacked tensor's."""
        out = {id(p): n for n, p in self.params}
        out.update({i: name for i, (name, _, _) in _experts.aliases(self.blocks).items()})
        return out

    def summary(self) -> list:
        """A picklable digest every rank must agree on."""
        return [(t.name, tuple(t.shape), t.split, t.dim, t.stage, t.layer, t.expert) for t in self.model.tensors] + \
            [DTYPES[self.dtype], [(n, s) for n, _, s in self.styled], [(n, a) for n, _, a in self.attrs]]


def _matches(plan: Dict[str, str], name: str) -> Optional[Tuple[str, str]]:
    """(key, style) of the plan entry matching `name`; ValueError when two keys disagree."""
    found = [(k, s) for k, s in plan.items() if fnmatch.fnmatchcase(name, k)]
    if len({s for _, s in found}) > 1:
        raise ValueError(f"plan keys {', '.join(repr(k) for k, _ in found)} give '{name}' different styles "
                         f"({', '.join(s for _, s in found)})")
    return found[0] if found else None


def _check_plan(plan: Dict[str, str]) -> None:
    if not isinstance(plan, dict):
        raise ValueError(f"plan must be a dict of glob -> style, got {type(plan).__name__}")
    for key, style in plan.items():
        if style not in STYLES:
            raise ValueError(f"plan key '{key}': unknown style '{style}'; valid: {', '.join(STYLES)}")


def _module_styles(model: nn.Module, plan: Dict[str, str], used: set) -> Dict[str, str]:
    styles = {}
    modules = dict(model.named_modules())
    for name, module in modules.items():
        hit = _matches(plan, name) if name else None
        if hit:
            used.add(hit[0])
            tp.check_style(name, module, hit[1])
            _attention.check(name, module, hit[1], styles)
            _attention.refuse_inner(name, module, _parents(name, modules), hit[1])
            styles[name] = hit[1]
    return styles


def _parents(name: str, modules: Dict[str, nn.Module]) -> List[Tuple[str, nn.Module]]:
    """The modules above `name`, outermost first (the model itself as '')."""
    parts = name.split(".")
    return [(".".join(parts[:i]), modules[".".join(parts[:i])]) for i in range(len(parts))]


def _fused_shape(name: str, p: nn.Parameter, owner: Optional[Tuple[str, str]], modules: Dict[str, nn.Module]):
    """The logical shape of a fused q/k/v parameter under "qkv" / "attention", else None."""
    if owner is None or owner[1] not in ("qkv", "attention"):
        return None
    attr = name.rsplit(".", 1)[-1]
    if name != f"{owner[0]}.{attr}" or (owner[1] == "attention" and not attr.startswith("in_proj")):
        return None
    heads = _attention.head_count(owner[0], modules[owner[0]], _parents(owner[0], modules))
    return _attention.fused_shape(name, tuple(p.shape), heads)


def _split(name: str, p: nn.Parameter, param_style: Optional[str], owner: Optional[Tuple[str, str]]):
    """(split, dim, expert) of parameter `name` (see the module docstring for precedence)."""
    attr = name.rsplit(".", 1)[-1]
    if param_style in ("attention", "qkv"):
        raise ValueError(f"plan style '{param_style}' on parameter '{name}': it splits a module (its fused "
                         f"q, k, v by heads); name the module")
    if param_style == "experts":
        raise ValueError(f"plan style 'experts' on parameter '{name}': it names an MoE block module")
    if param_style is not None:
        return tp.split_of(param_style, attr, False) + (param_style == "expert",)
    if owner is not None:
        module_name, style = owner
        direct = name == f"{module_name}.{attr}"
        if style in ("column", "row", "vocab") and not direct:
            return "replicated", 0, False
        return tp.split_of(style, attr, True) + (style == "expert",)
    if getattr(p, "tensor_model_parallel", False):
        dim = getattr(p, "partition_dim", None)
        if not isinstance(dim, int) or not 0 <= dim < p.dim():
            raise ValueError(f"parameter '{name}' has tensor_model_parallel=True and partition_dim={dim!r}; "
                             f"valid partition_dim: 0..{p.dim() - 1}")
        return "dim", dim, False
    return "replicated", 0, False


def _owner(name: str, styles: Dict[str, str]) -> Optional[Tuple[str, str]]:
    """The nearest styled module above parameter `name`: (module name, style)."""
    parts = name.split(".")[:-1]
    while parts:
        module = ".".join(parts)
        if module in styles:
            return module, styles[module]
        parts.pop()
    return None


def _check_shared(model: nn.Module, styles: Dict[str, str]) -> None:
    """A parameter shared by several modules (tied weights) must get one style from all of them."""
    seen: Dict[int, Tuple[str, Optional[str]]] = {}
    for module_name, module in model.named_modules():
        for attr, p in module._parameters.items():
            if p is None:
                continue
            style = styles.get(module_name)
            prev = seen.setdefault(id(p), (module_name, style))
            if prev[1] != style:
                raise ValueError(f"parameter '{attr}' is shared by modules '{prev[0]}' ({prev[1] or 'no style'}) and "
                                 f"'{module_name}' ({style or 'no style'}); give both the same plan style")


def _stages(model: nn.Module, names: List[str], pipeline: Optional[str]) -> Tuple[int, List[Tuple[str, int]]]:
    """(layer count, (stage, layer) per parameter): pipeline's i-th entry is layer i, parameters
    registered before it "pre", after it "post". Without a pipeline: one layer holds everything."""
    if pipeline is None:
        return 1, [("layer", 0)] * len(names)
    try:
        layers = model.get_submodule(pipeline)
    except AttributeError:
        raise ValueError(f"pipeline='{pipeline}' names no submodule of {type(model).__name__}") from None
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"pipeline='{pipeline}' must name a non-empty nn.ModuleList, got {type(layers).__name__}")
    out, after = [], False
    for name in names:
        if name.startswith(pipeline + "."):
            out.append(("layer", int(name[len(pipeline) + 1:].split(".", 1)[0])))
            after = True
        else:
            out.append(("post" if after else "pre", -1))
    return len(layers), out


def describe(model: nn.Module, plan: Dict[str, str], pipeline: Optional[str] = None, *,
             vocab_divisible_by: int = 128, tp_attrs: Optional[Dict[str, List[str]]] = None) -> Description:
    """The dynatrain.Model of `model` under `plan` (pure: reads the module, changes nothing);
    tp_attrs: module glob -> integer attributes its forward reads per tp rank (_attention.py)."""
    from . import Model, Tensor
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check_plan(plan)
    used: set = set()
    styles = _module_styles(model, plan, used)
    _check_shared(model, styles)
    params = list(model.named_parameters())
    if not params:
        raise ValueError(f"{type(model).__name__} has no parameters")
    names = [n for n, _ in params]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"{type(model).__name__} names two parameters '{twice}'; names must be unique")
    param_styles = {}
    modules = dict(model.named_modules())
    for name, _ in params:
        hit = _matches(plan, name)
        if hit:
            used.add(hit[0])
            _attention.refuse_param_style(name, hit[1], modules)
            param_styles[name] = hit[1]
    unused = [k for k in plan if k not in used]
    if unused:
        raise ValueError(f"plan key '{unused[0]}' matches no module or parameter of {type(model).__name__} "
                         f"(names look like '{params[0][0]}')")
    devices = {str(p.device) for _, p in params}
    if devices != {"cpu"}:
        raise ValueError(f"parameters must be on the cpu (the Manager's memory is host memory), got {sorted(devices)}")
    dtypes = {p.dtype for _, p in params}
    if len(dtypes) != 1 or next(iter(dtypes)) not in DTYPES:
        raise ValueError(f"parameters must all be float32 or all bfloat16, got {sorted(map(str, dtypes))}")
    layers, stages = _stages(model, [n for n, _ in params], pipeline)
    blocks = _experts.find(model, styles)
    tensors, logical, user, bound = [], {}, {}, []
    for (name, p), (stage, layer) in zip(params, stages):
        hit = _experts.entries(blocks, name, p) if name not in param_styles else None
        if hit is not None:
            if hit:
                tensors.append(Tensor(hit[0], list(hit[1].shape), split=hit[2], dim=hit[3], stage=stage, layer=layer,
                                      expert=True))
                bound.append(hit[:2])
            continue
        bound.append((name, p))
        owner = _owner(name, styles) if name not in param_styles else None
        split, dim, expert = _split(name, p, param_styles.get(name), owner)
        if expert and p.dim() < 2:
            raise ValueError(f"expert parameter '{name}' needs dim 0 = expert index, got shape {tuple(p.shape)}")
        shape = _fused_shape(name, p, owner, modules)
        if shape is not None:
            logical[name], user[name] = shape, tuple(p.shape)
        tensors.append(Tensor(name, list(shape or p.shape), split=split, dim=dim, stage=stage, layer=layer,
                              expert=expert))
    described = Model(tensors, layers=layers, name=type(model).__name__, vocab_divisible_by=vocab_divisible_by)
    styled = [(n, m, styles[n]) for n, m in model.named_modules() if styles.get(n) in tp.MODULE_STYLES]
    return Description(described, bound, styled, next(iter(dtypes)), _attention.Folds(logical, user),
                       _attention.tp_attr_targets(model, tp_attrs), blocks)
