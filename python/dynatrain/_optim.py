"""Which torch.optim optimizers adoption runs, and where their state lives in the Manager.

All supported optimizers update every element from that element alone (no norms over a
tensor), so a step over a ZeRO shard equals the step over the whole tensor, element by element.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import torch

SUPPORTED = {"Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW, "SGD": torch.optim.SGD}


@dataclass
class OptimizerSpec:
    """keys: optimizer.state[p] key -> Manager state kind holding it. per_param_step: Adam's
    `step` tensors, carried across switches. lazy: keys torch creates at the first step (SGD's
    momentum buffer starts as a copy of the grad), bound only once that step ran."""
    name: str
    keys: Dict[str, str]
    per_param_step: bool
    lazy: bool

    def states(self, bf16: bool) -> str:
        kinds = ["param", "grad"] + (["master"] if bf16 else []) + sorted(set(self.keys.values()))
        return ",".join(kinds)


def spec_of(optimizer) -> OptimizerSpec:
    """ValueError for an optimizer or option adoption does not run."""
    name = type(optimizer).__name__
    if SUPPORTED.get(name) is not type(optimizer):
        raise ValueError(f"optimizer {type(optimizer).__module__}.{name} is not supported; "
                         f"valid: torch.optim.{', torch.optim.'.join(SUPPORTED)}")
    for group in optimizer.param_groups:
        for option in ("amsgrad", "fused", "capturable", "differentiable"):
            if group.get(option):
                raise ValueError(f"torch.optim.{name}({option}=True) is not supported; valid: {option}=False")
    if name in ("Adam", "AdamW"):
        return OptimizerSpec(name, {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}, True, False)
    momentum = any(g.get("momentum", 0) for g in optimizer.param_groups)
    return OptimizerSpec(name, {"momentum_buffer": "exp_avg"} if momentum else {}, False, momentum)


def hyperparameters(optimizer, names_of: Dict[int, str]) -> list:
    """A picklable digest of the optimizer: class, defaults, and each group's parameter names and
    options (reprs, so tensors and odd values still compare)."""
    groups: List[list] = []
    for group in optimizer.param_groups:
        unknown = [p for p in group["params"] if id(p) not in names_of]
        if unknown:
            raise ValueError(f"the optimizer holds a parameter of shape {tuple(unknown[0].shape)} that is not "
                             f"a parameter of the model")
        options = sorted((k, repr(v)) for k, v in group.items() if k != "params")
        groups.append([[names_of[id(p)] for p in group["params"]], options])
    return [type(optimizer).__name__, sorted((k, repr(v)) for k, v in optimizer.defaults.items()), groups]
