"""Manager.save() and Manager(..., resume=): checkpoints of a Manager's whole state.

A checkpoint is the one `dynatrain train --save` writes (ckpt/README.md): DIR/latest names the
last complete DIR/step-NNNNNNNN/, which holds one safetensors file per rank of the saved layout
(every state kind, each entry a VPS box, checksummed in chunks), index.json and, as an
attachment listed in the index with its size and checksum, `python-state.pkl`: the step and
every registered extra's value. Loading plans from the saved layout into the manager's, so any
config and process count can resume it.

Every phase runs on the ranks it needs, then every rank learns whether any failed and raises
(_on_every_rank): nothing waits in a later collective, and every rank names the failing file.
A save publishes nothing until its last step (the pointer switch), so one that fails or dies
leaves the previous checkpoint as the latest.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import time
from typing import Any, Callable, Dict

from . import _native
from ._agree import agree
from ._c10d import all_max, all_sum
from ._native import CommError, InternalError

STATE_FILE = "python-state.pkl"
_RAISED = {cls.__name__: cls for cls in (ValueError, OSError, CommError, InternalError, TypeError)}


def _on_every_rank(comm, what: str, work: Callable[[], Any], *, io: bool = False) -> Any:
    """Collective: runs work() here and returns its result when it succeeded on every rank of
    `comm`; otherwise raises on every rank: this rank's own exception, or, where it succeeded,
    the first failing rank's exception type with its message. io=True: a phase that writes
    files, whose ValueErrors (ckpt/'s failed calls, naming the path) are raised as OSError."""
    result, error = None, None
    try:
        result = work()
    except Exception as e:  # noqa: BLE001 (re-raised below, on every rank)
        error = OSError(str(e)) if io and isinstance(e, ValueError) else e
        if error is not e:
            error.__cause__ = e
    described = None if error is None else (type(error).__name__, str(error))
    failed = [(r, d) for r, d in enumerate(comm.allgather(described)) if d is not None]
    if not failed:
        return result
    if error is not None:
        raise error
    rank, (kind, message) = failed[0]
    raise _RAISED.get(kind, RuntimeError)(f"{what} failed on rank {rank}: {message}")


def _extras_to_save(m) -> Dict[str, Any]:
    """Collective: every registered extra's value, as switch() hands them over: rank 0's get()
    (default) or the list of every rank's get() (per_rank); and, as they are, the values a
    resume loaded that are not registered yet (so a save does not drop them). On rank 0 only."""
    mine = _on_every_rank(m.comm, "extra state get()", lambda: {
        name: get() for name, (get, _, per_rank) in m._extra.items() if per_rank or m.comm.rank == 0})
    ranks = m.comm.gather({name: v for name, v in mine.items() if m._extra[name][2]}, root=0)
    if m.comm.rank != 0:
        return {}
    registered = {name: [r[name] for r in ranks] if per_rank else mine[name]
                  for name, (_, _, per_rank) in m._extra.items()}
    return {**m._pending_extra, **registered}


def _pickled(step: int, extras: Dict[str, Any]) -> bytes:
    for name, value in extras.items():
        try:
            pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 (any pickling failure is the caller's value)
            raise ValueError(f"extra state '{name}' cannot be saved: its value does not pickle ({e})") from e
    return pickle.dumps({"step": step, "extras": extras}, protocol=pickle.HIGHEST_PROTOCOL)


def save(m, directory) -> Dict[str, Any]:
    """Collective: checkpoint m.step of the manager into `directory` (see the module doc).
    Returns path (the new step directory), seconds (max over ranks) and bytes (all files)."""
    t0 = time.perf_counter()
    comm, mgr, root = m.comm, m._native, m.comm.rank == 0
    directory = os.fspath(directory)
    agree(comm, "save directory", os.path.abspath(directory))
    step = comm.bcast(m.step if root else None, root=0)
    extras = _extras_to_save(m)
    payload = _on_every_rank(comm, "checkpoint save", lambda: _pickled(step, extras) if root else b"")
    _on_every_rank(comm, "checkpoint save", lambda: _native.ckpt_check_target(mgr, directory, step) if root else None)
    step_dir = os.path.join(directory, _native.ckpt_step_dir_name(step))
    try:
        _on_every_rank(comm, "checkpoint save", lambda: _native.ckpt_begin(directory, step) if root else None, io=True)
        written = _on_every_rank(comm, "checkpoint save", lambda: _native.ckpt_write_rank(mgr, step_dir), io=True)
    except Exception:
        if root:  # unpublished: `latest` never named it (check_target refused that)
            shutil.rmtree(step_dir, ignore_errors=True)
        raise
    state = {"step": step, "python": {"state_file": STATE_FILE, "extras": sorted(extras), "processes": comm.size}}
    _on_every_rank(comm, "checkpoint save", lambda: _native.ckpt_commit(
        mgr, directory, step, json.dumps(state), [(STATE_FILE, payload)]) if root else None, io=True)
    return {"path": step_dir, "seconds": all_max(comm, time.perf_counter() - t0),
            "bytes": all_sum(comm, written + len(payload))}


def _open(m, directory: str):
    if not os.path.isdir(directory):
        raise ValueError(f"checkpoint directory '{directory}' does not exist")
    return _native.ckpt_open(m._native, directory)


def _saved_state(ckpt) -> Dict[str, Any]:
    """The step and extras of `ckpt` (none in a checkpoint `dynatrain train` wrote)."""
    if STATE_FILE not in ckpt.attachments:
        return {"step": ckpt.step, "extras": {}}
    path = os.path.join(ckpt.step_dir, STATE_FILE)
    data = _native.ckpt_read_attachment(ckpt, STATE_FILE)  # size and checksum checked
    try:
        state = pickle.loads(data)
        step, extras = int(state["step"]), dict(state["extras"])
    except Exception as e:  # noqa: BLE001 (whatever unpickling raises: the file is unusable)
        raise ValueError(f"checkpoint file '{path}' does not unpickle into the saved state: {e}") from e
    if step != ckpt.step:
        raise ValueError(f"checkpoint file '{path}' holds step {step}, its index says {ckpt.step}: corrupted")
    return {"step": step, "extras": extras}


def resume(m, directory) -> None:
    """Collective, from the Manager's constructor: fills the zeroed state from the latest
    checkpoint of `directory`, sets m.step and leaves the saved extras in m._pending_extra for
    register() to hand over. Raises ValueError on every rank (naming the file) when the
    checkpoint is missing, of another model or damaged; the Manager is then not built."""
    comm = m.comm
    directory = os.fspath(directory)
    agree(comm, "resume directory", os.path.abspath(directory))
    t0 = time.perf_counter()
    ckpt = _on_every_rank(comm, "checkpoint resume", lambda: _open(m, directory))
    stats = _on_every_rank(comm, "checkpoint resume", lambda: _native.ckpt_load(m._native, ckpt))
    state = _on_every_rank(comm, "checkpoint resume", lambda: _saved_state(ckpt))
    stats["seconds"] = all_max(comm, time.perf_counter() - t0)
    for key in ("bytes_read", "bytes_loaded"):
        stats[key] = all_sum(comm, stats[key])
    stats.update(path=ckpt.step_dir, saved_config=ckpt.config, saved_files=ckpt.files)
    m.step = state["step"]
    m._pending_extra.update(state["extras"])
    m._resume_stats = stats
    m.resumed = True
