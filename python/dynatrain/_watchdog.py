"""A deadline around every collective of a Manager: a peer that never calls it (a rank looping,
sleeping or waiting in another collective) would leave the others waiting in MPI forever.

    with watchdog.guard("Manager.switch to 'tp=4'", seconds):
        ...collective calls...

One daemon thread per process, idle until armed. On expiry it prints `dynatrain: error: rank R: no
progress for T s in <what>; ...` and ends the job with MPI.COMM_WORLD.Abort(3). Guards nest:
the outermost one's deadline applies. The thread needs the GIL only at expiry; every blocking
call it watches (mpi4py's, the native switch) releases it.

The deadline: DT_WATCHDOG_S (seconds, default 60: the CLI's setting, job/watchdog.h; the former
DYNATRAIN_WATCHDOG_S is read when it is unset, with a note that it is deprecated) or
Manager(..., watchdog_s=...), plus the bytes a switch moves at 50 MB/s (far below any link, so a
slow but working peer never trips it). watchdog_s=0 (or DT_WATCHDOG_S=0) turns it off.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Optional

from . import _abort, _native

DEFAULT_SECONDS = _native.DEFAULT_WATCHDOG_SECONDS
SLOWEST_RATE = 50e6  # bytes per second a switch's deadline allows for


def base_seconds(override: Optional[float] = None) -> float:
    """The deadline before size allowances: `override`, else the job's one watchdog setting
    (DT_WATCHDOG_S, default 60; job/watchdog.h reads it for the CLI and this module alike).
    ValueError for a negative or unparsable value; 0 turns the watchdog off."""
    if override is None:
        return _native.watchdog_seconds()
    if not override >= 0:
        raise ValueError(f"watchdog deadline {override} s; valid: >= 0 seconds (0 = off)")
    return float(override)


def base_seconds_or_default() -> float:
    """base_seconds(), or the default where DT_WATCHDOG_S does not parse (the Manager reports
    that on every rank when it agrees its arguments)."""
    try:
        return base_seconds()
    except ValueError:
        return DEFAULT_SECONDS


class Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._what: Optional[str] = None
        self._seconds = 0.0
        self._deadline = 0.0
        self._depth = 0
        self._thread: Optional[threading.Thread] = None

    @contextlib.contextmanager
    def guard(self, what: str, seconds: float):
        """Arms the deadline `seconds` from now for the body (no-op when seconds <= 0 or an outer
        guard is armed)."""
        outer = self._depth > 0
        if seconds > 0 and not outer:
            self._arm(what, seconds)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not outer:
                self._disarm()

    def _arm(self, what: str, seconds: float) -> None:
        with self._cond:
            self._what, self._seconds = what, seconds
            self._deadline = time.monotonic() + seconds
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="dynatrain-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _disarm(self) -> None:
        with self._cond:
            self._what = None
            self._cond.notify_all()

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._what is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                _abort.abort_job(f"no progress for {self._seconds:.0f} s in {self._what}; a peer did not take part "
                                 f"(stopped, looping, or in another collective); raise DT_WATCHDOG_S or "
                                 f"Manager(watchdog_s=...) if it is only slow", 3)


WATCHDOG = Watchdog()  # one per process: collectives of one process run one at a time
