"""Attention as torch ships it and as people write it, tensor-parallel by heads (docs/python.md,
"Attention at tp > 1"):

    "attention"  nn.MultiheadAttention: the fused in_proj_weight / in_proj_bias split on head
                 boundaries for q, k and v alike; out_proj row-parallel (weight columns split,
                 bias replicated). Its forward runs this rank's num_heads / tp heads: torch's
                 math (masks, key_padding_mask, need_weights, batch_first, unbatched input),
                 the per-head attn_mask sliced to this rank's heads, the output all-reduced.
    "qkv"        nn.Linear whose output rows are [q; k; v] (3 * heads * head_dim): split on head
                 boundaries like in_proj_weight; forward as "column". The head count is read from
                 the nearest module above it with one of HEAD_ATTRS.

A fused tensor's logical (VPS) shape makes its head split a box: in_proj_weight [3E, E] is
[3, heads, head_dim, E] split along dim 1, so this rank's rows, flattened back, are q, k and v of
its own heads in order. `Folds` maps between the two: the leading logical dims fold into the
module's dim 0, in the whole shape and in every local one.

`tp_attrs` (adopt()): integer attributes a module reads in its forward that count heads or
width per rank (an HF-style `view(B, S, self.n_heads, head_dim)`): inside that module's forward
each reads value // tp, and a layout whose tp does not divide it is refused before anything moves.
"""
from __future__ import annotations

import fnmatch
import math
import types
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

HEAD_ATTRS = ("num_heads", "n_heads", "n_head", "num_attention_heads")


class Folds:
    """name -> the module's own (whole) shape, for tensors whose logical shape differs."""

    def __init__(self, logical: Dict[str, Tuple[int, ...]], user: Dict[str, Tuple[int, ...]]) -> None:
        self.logical, self.user = logical, user

    def shape(self, name: str, logical: Tuple[int, ...]) -> Tuple[int, ...]:
        """The module's whole shape of `name` (its logical one when not folded)."""
        return self.user.get(name, tuple(logical))

    def local(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """A Manager view of `name` in the module's local shape (1-D ZeRO shards as they are)."""
        user = self.user.get(name)
        if user is None or t.dim() != len(self.logical[name]):
            return t
        lead = len(self.logical[name]) - len(user) + 1
        return t.view((math.prod(t.shape[:lead]),) + tuple(t.shape[lead:]))

    def to_logical(self, name: str, full: torch.Tensor) -> torch.Tensor:
        return full.reshape(self.logical[name]) if name in self.user else full

    def to_user(self, name: str, full: torch.Tensor) -> torch.Tensor:
        return full.reshape(self.user[name]) if name in self.user else full


def head_count(name: str, module: nn.Module, parents: Sequence[Tuple[str, nn.Module]]) -> int:
    """The head count a "qkv" / "attention" module (named `name`) splits by."""
    if isinstance(module, nn.MultiheadAttention):
        return module.num_heads
    for _, parent in reversed(parents):
        for attr in HEAD_ATTRS:
            value = getattr(parent, attr, None)
            if isinstance(value, int) and value > 0:
                return value
    raise ValueError(f"plan style 'qkv' on module '{name}' needs the head count: no module above it has an integer "
                     f"attribute {', '.join(HEAD_ATTRS)}")


def fused_shape(name: str, shape: Tuple[int, ...], heads: int) -> Tuple[int, ...]:
    """The logical shape of a fused [q; k; v] weight or bias of `shape` with `heads` heads."""
    rows = shape[0]
    if rows % (3 * heads):
        raise ValueError(f"'{name}' has {rows} rows, not 3 x {heads} heads x head_dim: a fused qkv split by heads "
                         f"needs q, k and v of equal width (for fewer kv heads, use separate q/k/v Linears, 'column')")
    return (3, heads, rows // (3 * heads)) + tuple(shape[1:])


def check(name: str, module: nn.Module, style: str, styles: Dict[str, str]) -> None:
    """ValueError when `style` on `module` cannot run at tp > 1 (called by tp.check_style)."""
    parent = name.rsplit(".", 1)[0] if "." in name else ""
    if styles.get(parent) == "attention":
        raise ValueError(f"module '{name}' lies inside '{parent}', styled 'attention', which splits it already; "
                         f"drop the plan entry for '{name}'")
    if style != "attention":
        return
    if not module._qkv_same_embed_dim or module.bias_k is not None or module.add_zero_attn:
        raise ValueError(f"nn.MultiheadAttention '{name}': tensor parallelism needs the fused in_proj_weight "
                         f"(kdim = vdim = embed_dim), no add_bias_kv and no add_zero_attn")


def refuse_inner(name: str, module: nn.Module, parents: Sequence[Tuple[str, nn.Module]], style: str) -> None:
    """A column / row / vocab module that an nn.MultiheadAttention reads itself (its out_proj)."""
    if style in ("column", "row", "vocab") and parents and isinstance(parents[-1][1], nn.MultiheadAttention):
        owner = parents[-1][0]
        raise ValueError(f"plan style '{style}' on '{name}': nn.MultiheadAttention '{owner}' reads its weights "
                         f"itself, so its forward would not split; style the attention module instead: "
                         f"{{'{owner}': 'attention'}}")


def refuse_param_style(name: str, style: str, modules: Dict[str, nn.Module]) -> None:
    """A split on a parameter an nn.MultiheadAttention reads itself (in_proj_weight, out_proj's),
    named by a plan key: its forward would run the whole head count on a shard."""
    if style not in ("column", "row", "vocab"):
        return
    parts = name.split(".")[:-1]
    for depth in (len(parts), len(parts) - 1):
        owner = ".".join(parts[:depth]) if depth >= 0 else None
        if owner is not None and isinstance(modules.get(owner), nn.MultiheadAttention):
            raise ValueError(f"plan style '{style}' on parameter '{name}': nn.MultiheadAttention '{owner}' reads it "
                             f"itself, with all its heads; style the attention module instead: "
                             f"{{'{owner or '<model>'}': 'attention'}}")


# ---- nn.MultiheadAttention's forward on this rank's heads ----
def _local_mask(attn_mask, key_padding_mask, n: int, heads: int, first: int, all_heads: int, dtype):
    """torch's merged float mask (multi_head_attention_forward) for this rank's heads."""
    if attn_mask is not None:
        if attn_mask.dtype == torch.uint8:
            attn_mask = attn_mask.to(torch.bool)
        if attn_mask.dim() == 2:
            attn_mask = attn_mask.unsqueeze(0)
        elif attn_mask.dim() == 3:
            if attn_mask.shape[0] != n * all_heads:
                raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                   f"({n * all_heads}, L, S).")
            attn_mask = attn_mask.view((n, all_heads) + tuple(attn_mask.shape[1:]))[:, first:first + heads]
            attn_mask = attn_mask.reshape((n * heads,) + tuple(attn_mask.shape[2:]))
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")
    if key_padding_mask is not None:
        src = key_padding_mask.shape[-1]
        key_padding_mask = key_padding_mask.view(n, 1, 1, src).expand(-1, heads, -1, -1).reshape(n * heads, 1, src)
        if attn_mask is None:
            attn_mask = key_padding_mask
        elif attn_mask.dtype == torch.bool:
            attn_mask = attn_mask.logical_or(key_padding_mask)
        else:
            attn_mask = attn_mask.masked_fill(key_padding_mask, float("-inf"))
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros_like(attn_mask, dtype=dtype).masked_fill_(attn_mask, float("-inf"))
    return attn_mask


def _inputs(self, query, key, value, batched: bool, comm):
    """query, key, value as (L, N, E), each copied into the tp region once ("is" kept)."""
    from .tp import copy_to_tp

    def prep(x):
        x = x.unsqueeze(1) if not batched else (x.transpose(0, 1) if self.batch_first else x)
        return copy_to_tp(x, comm)
    q = prep(query)
    k = q if key is query else prep(key)
    v = k if value is key else (q if value is query else prep(value))
    return q, k, v


def mha_forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True):
    from .tp import gather_last_from_tp, reduce_from_tp
    comm, _ = self._dynatrain_tp()
    size, rank = (comm.size, comm.rank) if comm is not None else (1, 0)
    heads, hd = self.num_heads // size, self.head_dim
    batched = query.dim() == 3
    qx, kx, vx = _inputs(self, query, key, value, batched, comm)
    w, b = self.in_proj_weight, self.in_proj_bias
    if kx is qx and vx is qx:
        q, k, v = F.linear(qx, w, b).chunk(3, dim=-1)
    else:
        bs = b.chunk(3) if b is not None else (None,) * 3
        q, k, v = (F.linear(x, wi, bi) for x, wi, bi in zip((qx, kx, vx), w.chunk(3), bs))
    tgt, n, src = q.shape[0], q.shape[1], k.shape[0]
    if key_padding_mask is not None and not batched:
        key_padding_mask = key_padding_mask.unsqueeze(0)
    mask = _local_mask(attn_mask, key_padding_mask, n, heads, rank * heads, self.num_heads, q.dtype)
    q, k, v = (x.contiguous().view(x.shape[0], n * heads, hd).transpose(0, 1) for x in (q, k, v))
    q = q / math.sqrt(hd)
    scores = torch.baddbmm(mask, q, k.transpose(-2, -1)) if mask is not None else torch.bmm(q, k.transpose(-2, -1))
    weights = scores.softmax(dim=-1)
    if self.training and self.dropout > 0.0:
        weights = F.dropout(weights, p=self.dropout)
    out = torch.bmm(weights, v).transpose(0, 1).contiguous().view(tgt * n, heads * hd)
    out = reduce_from_tp(F.linear(out, self.out_proj.weight), comm)
    out = (out if self.out_proj.bias is None else out + self.out_proj.bias).view(tgt, n, -1)
    out = out.squeeze(1) if not batched else (out.transpose(0, 1) if self.batch_first else out)
    if not need_weights:
        return out, None
    weights = weights.view(n, heads, tgt, src)
    if average_attn_weights:
        weights = reduce_from_tp(weights.sum(dim=1).contiguous(), comm) / self.num_heads
    else:
        weights = gather_last_from_tp(weights.permute(0, 2, 3, 1), comm).permute(0, 3, 1, 2)
    return out, (weights if batched else weights.squeeze(0))


def install_attention(module: nn.MultiheadAttention) -> None:
    module.forward = types.MethodType(mha_forward, module)
    # TransformerEncoder(Layer)'s fused inference path reads in_proj_weight itself; this flag is
    # one of its conditions (the forward above does not read it).
    module._qkv_same_embed_dim = False


# ---- integer attributes read as this rank's share inside a module's forward ----
def tp_attr_targets(model: nn.Module, tp_attrs: Optional[Dict[str, Sequence[str]]]) -> List[Tuple[str, nn.Module,
                                                                                                   List[str]]]:
    """(module name, module, attributes) of every module a `tp_attrs` glob matches that has all
    of its attributes (a glob like "blocks.*" also matches the Linears inside); ValueError for a
    glob that finds none, or an attribute that is not a positive int."""
    if not tp_attrs:
        return []
    if not isinstance(tp_attrs, dict):
        raise ValueError(f"tp_attrs must be a dict of module glob -> attribute names, got {type(tp_attrs).__name__}")
    out = []
    for glob, attrs in tp_attrs.items():
        attrs = [attrs] if isinstance(attrs, str) else list(attrs)
        hits = [(n, m) for n, m in model.named_modules() if n and fnmatch.fnmatchcase(n, glob) and
                all(getattr(m, a, None) is not None for a in attrs)]
        if not hits:
            raise ValueError(f"tp_attrs key '{glob}' matches no module of {type(model).__name__} with the "
                             f"attributes {', '.join(attrs)}")
        for name, module in hits:
            for attr in attrs:
                value = getattr(module, attr, None)
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ValueError(f"tp_attrs: '{name}.{attr}' is {value!r}; valid: a positive int attribute "
                                     f"(a head count or a width the forward reads)")
            out.append((name, module, attrs))
    return out


def check_tp_attrs(targets, tp: int, layout: str) -> None:
    for name, module, attrs in targets:
        for attr in attrs:
            value = module._dynatrain_attrs[attr] if hasattr(module, "_dynatrain_attrs") else getattr(module, attr)
            if value % tp:
                raise ValueError(f"layout '{layout}': tp={tp} does not divide '{name}.{attr}' = {value} "
                                 f"(tp_attrs); valid tp: divisors of {value}")


def install_tp_attrs(targets, tp_size) -> None:
    """Inside each target's forward its attributes read value // tp_size() (restored after)."""
    for _, module, attrs in targets:
        module._dynatrain_attrs = {a: getattr(module, a) for a in attrs}
        inner = module.forward

        def forward(*args, _m=module, _inner=inner, **kwargs):
            size = tp_size()
            for a, whole in _m._dynatrain_attrs.items():
                object.__setattr__(_m, a, whole // size)
            try:
                return _inner(*args, **kwargs)
            finally:
                for a, whole in _m._dynatrain_attrs.items():
                    object.__setattr__(_m, a, whole)
        module.forward = forward
