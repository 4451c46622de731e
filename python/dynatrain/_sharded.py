"""Sharded state dicts of an adopted job: each rank's part of the whole training state (weights,
fp32 master, optimizer moments) as boxes of the VPS, with the metadata to load them into any
layout and process count (docs/python.md, "PyTorch habits").

    sd = job.sharded_state_dict()                      # collective; this rank's part
    torch.save(sd, f"ckpt/shard-{rank}.pt")            # each rank saves its own
    ...
    job.load_sharded_state_dict([torch.load(f) for f in sorted(glob("ckpt/shard-*.pt"))])

A shard: {"format", "rank", "processes", "layout", "step", "tensors": name -> logical (VPS)
shape, "pieces": [{"name", "kind", "lo", "hi", "data"}], "extras"}. A piece is box [lo, hi) of
the logical tensor `name` of state `kind` (grads are not saved: they are rebuilt by the next
backward); a box that several ranks hold (dp replicas) is in the lowest rank's shard only, so
the shards of one save hold every element of every kind once. "extras" (rank 0's shard) holds
the registered state outside the VPS, as a checkpoint does: param groups, per-parameter steps,
buffers, LR schedulers registered with job.register_scheduler(); an extra registered with
per_rank=True as the list of every rank's value; values a resume loaded that are not registered
yet, as they are). An extra whose get() fails is the same exception on every rank. Loading checks the whole set
first (every saved rank present once, one save, the same tensors and shapes, every element of
this rank's state covered) and writes nothing unless all of it is right; a refusal is the same
exception on every rank.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Tuple

import torch

from ._checkpoint import _extras_to_save, _on_every_rank

FORMAT = "dynatrain-sharded-1"
Box = Tuple[Tuple[int, ...], Tuple[int, ...]]


def _kinds(m) -> List[str]:
    return [k for k in m._kinds if k != "grad"]


def _segments(m) -> List[Tuple[str, str, Tuple[int, ...], Tuple[int, ...], torch.Tensor]]:
    """(name, kind, lo, hi, view shaped as the box) of every box this rank holds."""
    if not m.active:
        return []
    return [(name, kind, lo, hi, view.view([b - a for a, b in zip(lo, hi)]))
            for kind in _kinds(m) for name, view, lo, hi in m.segments(kind)]


def save(job) -> Dict[str, Any]:
    """Collective: this rank's shard (see the module doc)."""
    m = job.manager
    with m._collective("job.sharded_state_dict()", m._state_bytes()):
        mine = _segments(m)
        everyone = m.comm.allgather([(n, k, lo, hi) for n, k, lo, hi, _ in mine])
        first: Dict[Any, int] = {}
        for rank, boxes in enumerate(everyone):
            for box in boxes:
                first.setdefault(box, rank)
        rank0 = m.comm.rank == 0
        extras = _extras_to_save(m)  # collective; {} off rank 0
        step = m.comm.bcast(m.step if rank0 else None, root=0)
    pieces = [dict(name=n, kind=k, lo=lo, hi=hi, data=v.clone()) for n, k, lo, hi, v in mine
              if first[(n, k, lo, hi)] == m.comm.rank]
    return {"format": FORMAT, "rank": m.comm.rank, "processes": m.comm.size, "layout": m.config["config"],
            "step": step, "tensors": {n: tuple(m.global_shape(n)) for n in m.names}, "pieces": pieces,
            "extras": extras if rank0 else None}


def _checked(m, shards: List[Dict[str, Any]]) -> Dict[str, Any]:
    """ValueError naming what is wrong with the set of shards; else rank 0's shard."""
    if not shards or any(not isinstance(s, dict) or s.get("format") != FORMAT for s in shards):
        raise ValueError(f"load_sharded_state_dict(): pass every rank's job.sharded_state_dict() (format '{FORMAT}'), "
                         f"got {len(shards)} item(s), not all of that format")
    processes, step = shards[0]["processes"], shards[0]["step"]
    ranks = sorted(s["rank"] for s in shards)
    if ranks != list(range(processes)) or any(s["processes"] != processes or s["step"] != step for s in shards):
        raise ValueError(f"load_sharded_state_dict(): the shards of one save of {processes} processes at step {step} "
                         f"are ranks 0..{processes - 1} once each; got ranks {ranks}")
    mine = {n: tuple(m.global_shape(n)) for n in m.names}
    saved = {n: tuple(s) for n, s in shards[0]["tensors"].items()}
    if saved != mine:
        diff = sorted(set(saved.items()) ^ set(mine.items()))[0][0]
        raise ValueError(f"load_sharded_state_dict(): tensor '{diff}' differs between the saved model "
                         f"({saved.get(diff)}) and this one ({mine.get(diff)}): another model")
    return next(s for s in shards if s["rank"] == 0)


def _copies(m, shards: List[Dict[str, Any]]) -> List[Tuple[torch.Tensor, Any, torch.Tensor]]:
    """(destination view, index, source) of every intersection of a saved piece with a box this
    rank holds; ValueError when some element of this rank's state is in no piece."""
    by_key: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for shard in shards:
        for piece in shard["pieces"]:
            by_key.setdefault((piece["name"], piece["kind"]), []).append(piece)
    out = []
    for name, kind, lo, hi, view in _segments(m):
        covered = torch.zeros(view.shape, dtype=torch.bool)
        for piece in by_key.get((name, kind), []):
            a = [max(x, y) for x, y in zip(lo, piece["lo"])]
            b = [min(x, y) for x, y in zip(hi, piece["hi"])]
            if any(x >= y for x, y in zip(a, b)):
                continue
            dst = tuple(slice(x - o, y - o) for x, y, o in zip(a, b, lo))
            src = tuple(slice(x - o, y - o) for x, y, o in zip(a, b, piece["lo"]))
            out.append((view, dst, piece["data"][src]))
            covered[dst] = True
        if not bool(covered.all()):
            raise ValueError(f"load_sharded_state_dict(): no shard holds part of '{name}' ({kind}) box {lo}..{hi}: "
                             f"the saved state lacks that kind (saved with other state kinds?)")
    return out


def load(job, shards: Iterable[Dict[str, Any]]) -> None:
    """Collective: writes this rank's state from the shards of one save (see the module doc)."""
    m = job.manager
    shards = list(shards)
    with m._collective("job.load_sharded_state_dict()", m._state_bytes()):
        rank0 = _on_every_rank(m.comm, "load_sharded_state_dict()", lambda: _checked(m, shards))
        copies = _on_every_rank(m.comm, "load_sharded_state_dict()", lambda: _copies(m, shards))
    with torch.no_grad():
        for view, index, data in copies:
            view[index] = data
    m.step = rank0["step"]
    for name, value in (rank0["extras"] or {}).items():
        if name in m._extra:
            m._extra[name][1](value)
        else:
            m._pending_extra[name] = value  # a scheduler registered after the load gets it then
    job._bind_state()
