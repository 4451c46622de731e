"""Agreement before a collective call: every rank must pass equal arguments to the Manager's
collectives, and an exception on one rank must not leave the others waiting in the next
collective.

    agree(comm, "switch target", (to_cfg, vacate))   # ValueError on EVERY rank when they differ
    value = together(comm, "extra state get()", fn)   # fn() raised on one rank -> raises on all

Both are collective over `comm` (an mpi4py communicator) and never raise before their
allgather, so a rank whose own value is bad still meets its peers there. Every allgather carries
its `what`: ranks that meet in different calls raise ValueError on every rank.
"""
from __future__ import annotations

import hashlib
import pickle
from typing import Any, Callable, List, Optional, Tuple

from . import _watchdog

_SHOWN = 160  # characters of a value shown in a mismatch message


class PeerError(RuntimeError):
    """Raised on the ranks where a collective step succeeded when it failed on another rank."""


PeerError.__module__ = "dynatrain"  # printed as dynatrain.PeerError


def _digest(value: Any) -> str:
    return hashlib.sha256(pickle.dumps(value, protocol=4)).hexdigest()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _rank_list(ranks: List[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _first_difference(a: Any, b: Any, path: str = "") -> Optional[Tuple[str, Any, Any]]:
    """(where, a's part, b's part) of the first place two nested values differ, None if equal."""
    if type(a) is type(b) and isinstance(a, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                return f"{path}[{key!r}]", a.get(key, "<absent>"), b.get(key, "<absent>")
            found = _first_difference(a[key], b[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if type(a) is type(b) and isinstance(a, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None if len(a) == len(b) else (path, a, b)  # one is a prefix of the other: show both
    try:
        return None if _digest(a) == _digest(b) else (path, a, b)
    except Exception:  # noqa: BLE001 - unpicklable parts compare by repr
        return None if repr(a) == repr(b) else (path, a, b)


def _mismatch_message(what: str, values: List[Any], digests: List[str]) -> str:
    groups: dict = {}
    for rank, d in enumerate(digests):
        groups.setdefault(d, []).append(rank)
    ranks = list(groups.values())
    parts = []
    for group in ranks[1:]:
        found = _first_difference(values[0], values[group[0]])
        where, mine, theirs = found if found else ("", values[0], values[group[0]])
        at = f" at {where}" if where else ""
        verb = "has" if len(group) == 1 else "have"
        parts.append(f"{_rank_list(group)} {verb}{at} {_short(theirs)} where rank 0 has {_short(mine)}")
    return f"{what}: not equal on every rank: " + "; ".join(parts)


def _gather(comm, what: str, payload: Any) -> List[Any]:
    """allgather of `payload`, tagged with `what`: when ranks are in different calls (a rank
    skipped a collective or called another one), ValueError on every rank naming each call."""
    everyone = comm.allgather((what, payload))
    calls = [w for w, _ in everyone]
    if len(set(calls)) > 1:
        by_call: dict = {}
        for rank, w in enumerate(calls):
            by_call.setdefault(w, []).append(rank)
        raise ValueError("ranks are in different collective calls: " +
                         "; ".join(f"{_rank_list(r)} in {w!r}" for w, r in by_call.items()) +
                         "; every rank must make the same Manager calls in the same order")
    return [p for _, p in everyone]


def agree(comm, what: str, value: Any) -> None:
    """Collective: returns when every rank of `comm` passed an equal `value` (compared by a hash
    of its pickle), else raises ValueError on every rank naming `what`, the ranks that differ
    and where. A value that does not pickle raises ValueError on every rank too."""
    try:
        mine: Tuple[Optional[str], Optional[str]] = (_digest(value), None)
    except Exception as e:  # noqa: BLE001 - reported on every rank below
        mine = (None, f"{type(e).__name__}: {e}")
    everyone = _gather(comm, what, mine)
    failed = [(r, err) for r, (_, err) in enumerate(everyone) if err is not None]
    if failed:
        raise ValueError(f"{what}: cannot compare across ranks: " +
                         "; ".join(f"rank {r}: {err}" for r, err in failed))
    digests = [d for d, _ in everyone]
    if len(set(digests)) == 1:
        return
    values = _gather(comm, what, value)  # every rank takes this path: the digests are the same everywhere
    raise ValueError(_mismatch_message(what, values, digests))


def together(comm, what: str, fn: Callable[[], Any]) -> Any:
    """Collective: runs fn() on every rank and returns its result when it succeeded on every
    rank. When it raised on some rank, that rank re-raises its own exception and every other
    rank raises one naming it (ValueError when the failure was a ValueError, else PeerError),
    so no rank goes on to a collective its peers will never reach."""
    error: Optional[BaseException] = None
    result = None
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - re-raised below, after the peers know
        error = e
    status = None if error is None else (type(error).__name__, str(error), isinstance(error, ValueError))
    _raise_failed(what, error, _gather(comm, what, status))
    return result


def agree_together(comm, what: str, value: Any, checked: str, fn: Callable[[], Any], gather: bool = False) -> Any:
    """agree(comm, what, value), then together(comm, checked, fn), in one allgather: the same
    errors on every rank (a value that differs first, then a check that failed). Returns fn()'s
    result, or with `gather` every rank's, by rank (carried in the same allgather)."""
    try:
        digest: Tuple[Optional[str], Optional[str]] = (_digest(value), None)
    except Exception as e:  # noqa: BLE001 - reported on every rank below
        digest = (None, f"{type(e).__name__}: {e}")
    error: Optional[BaseException] = None
    result = None
    if digest[1] is None:
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - re-raised below, after the peers know
            error = e
    status = None if error is None else (type(error).__name__, str(error), isinstance(error, ValueError))
    # tagged by `what` alone: `checked` may name unequal values
    everyone = _gather(comm, what, (digest, status, result if gather else None))
    failed = [(r, err) for r, ((_, err), _, _) in enumerate(everyone) if err is not None]
    if failed:
        raise ValueError(f"{what}: cannot compare across ranks: " +
                         "; ".join(f"rank {r}: {err}" for r, err in failed))
    digests = [d for (d, _), _, _ in everyone]
    if len(set(digests)) > 1:
        raise ValueError(_mismatch_message(what, _gather(comm, what, value), digests))
    _raise_failed(checked, error, [s for _, s, _ in everyone])
    return [r for _, _, r in everyone] if gather else result


def together_max(comm, what: str, fn: Callable[[], Any], measures: Callable[[], dict]) -> dict:
    """together(comm, what, fn), then each of measures()'s values (taken after fn, the same keys on
    every rank) as its maximum over `comm`, in one allgather."""
    error: Optional[BaseException] = None
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - re-raised below, after the peers know
        error = e
    status = None if error is None else (type(error).__name__, str(error), isinstance(error, ValueError))
    everyone = _gather(comm, what, (status, measures()))
    _raise_failed(what, error, [s for s, _ in everyone])
    return {k: max(m[k] for _, m in everyone) for k in everyone[0][1]}


def _raise_failed(what: str, error: Optional[BaseException], everyone: List[Any]) -> None:
    """together()'s ending: this rank's own exception, else one naming the first rank that failed."""
    if error is not None:
        raise error
    failed = [(r, s) for r, s in enumerate(everyone) if s is not None]
    if failed:
        rank, (name, message, bad_input) = failed[0]
        others = f" (and {_rank_list([r for r, _ in failed[1:]])})" if len(failed) > 1 else ""
        text = f"{what} failed on rank {rank}{others}: {name}: {message}"
        raise ValueError(text) if bad_input else PeerError(text)


def manager_arguments(model, config, states, bucket_elems, param_dtype, mem_budget, gpus_per_node,
                      watchdog_s) -> dict:
    """What every rank must pass alike to a Manager (ValueError for a bad model or watchdog_s)."""
    return {"model": model_description(model), "config": config, "states": states, "bucket_elems": bucket_elems,
            "param_dtype": str(param_dtype), "mem_budget": mem_budget, "gpus_per_node": gpus_per_node,
            "watchdog_s": _watchdog.base_seconds(watchdog_s)}


def model_description(model: Any) -> Any:
    """What every rank must agree on about a model argument: a preset name; the hash of a
    config.json's bytes (ranks may read different copies); or a dynatrain.Model's fields and
    tensors. ValueError for a Model with two tensors of one name."""
    import os
    if isinstance(model, str):
        if os.path.isfile(model):
            with open(model, "rb") as f:
                return {"config.json sha256": hashlib.sha256(f.read()).hexdigest()}  # paths may differ
        return {"preset": model}
    names = [t.name for t in model.tensors]
    seen: set = set()
    for name in names:
        if name in seen:
            raise ValueError(f"model '{model.name}' has two tensors named '{name}'; tensor names must be unique")
        seen.add(name)
    return {"name": model.name, "layers": model.layers, "vocab_divisible_by": model.vocab_divisible_by,
            "tensors": [(t.name, tuple(t.shape), t.split, t.dim, t.stage, t.layer, t.expert, t.also_on_last_stage)
                        for t in model.tensors]}
