"""Preemption notices in an adopted job (docs/python.md, "Notices"), with the CLI trainer's logic
(job/notice.h) and its layout for the processes that stay (job/survivor_layout.h).

A signal (SIGTERM by default; adopt(notice_signal=...), the CLI's --notice-signal) to ONE process
means "this process will be gone in notice_s seconds". The job does not stop: at the next step
boundary (the end of optimizer.step(), the step counted) every process learns which processes
have notice (one all-gather), and the job switches into the layout the survivors can run,
vacating the noticed ones (Job.switch(layout, vacate=[ranks])): their optimizer.step() raises
Leaving (a SystemExit with code 0) after they handed their state over; on the others it returns
in the new layout. A notice to every process saves (adopt(notice_save=DIR)) and ends the job:
rank 0 prints the job's one line, and optimizer.step() raises EveryProcessNoticed (a SystemExit
with code 128 + signal) on every process.

A process that holds no rank (a layout of fewer ranks than processes) calls optimizer.step() at
the same boundaries, so its notice is agreed and acted on the same way: it leaves, and the
layout chosen for the processes that stay may give the other idle ones ranks.

Limits: only with processes that may change (Manager(elastic=True)), and while no switch is
prepared; on torch.distributed the process of global rank 0 hosts the store and cannot be
vacated (_c10d.py) (else the notice waits for a boundary where it can be, and a notice that
cannot be acted on within notice_s ends the job with one line, exit 3: job/notice.h's deadline).
The switch is prepared and committed at the boundary that learns of the notice: a vacate starts
no process, so there is nothing to hide behind a step.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import Callable, List, Optional, Tuple

from . import _c10d, _elastic, _native, _watchdog


class EveryProcessNoticed(SystemExit):
    """Raised by optimizer.step() on every process when every process had notice: the job ends
    (after saving into notice_save, when given). Its code is 128 + the signal, the exit status."""

    def __init__(self, signal: int, step: int, saved: Optional[str]):
        super().__init__(128 + signal)
        self.step, self.saved = step, saved

    def __str__(self) -> str:
        return f"every process had notice after step {self.step}; the job ends"


def watch_world(m) -> None:
    """Collective over an MPI Manager's world of more than one process: the job's failure path
    (job/mpi_world.h) for its ranks, so that a SIGTERM after a lost peer (mpirun's, when a
    process dies) ends this process with one line naming that peer, its rank and node. On
    torch.distributed only the rank and size the job's lines name (`dynatrain launch` names a
    lost process)."""
    if m.comm is not None and m.comm.size > 1:
        _native.watch_world(m._native)


class Notices:
    """One adopted job's notices: enabled at adoption, acted on at each step boundary."""

    def __init__(self, manager, signal: Optional[str], seconds: float, save: Optional[str]):
        usable = manager._options["elastic"]
        self.signal = _native.enable_notices(str(signal), float(seconds)) if usable and signal is not None else 0
        self.seconds, self.save = float(seconds), save
        self.slowest_step = 0.0
        self._last_boundary: Optional[float] = None

    def at_boundary(self, job, runs: Callable[[str], bool]) -> None:
        """After optimizer.step() counted the step (collective): acts on the notices every process
        agrees on. `runs(config)`: whether the job can train in that layout."""
        now = time.perf_counter()
        if self._last_boundary is not None:
            self.slowest_step = max(self.slowest_step, now - self._last_boundary)
        self._last_boundary = now
        m = job.manager
        if not self.signal or m.comm is None or m._prepared is not None:
            return
        base = m._watchdog_base()
        with _watchdog.WATCHDOG.guard(f"the agreement on notices after step {m.step}",
                                      base + 10 * self.slowest_step if base > 0 else 0):
            noticed = _native.agree_on_notices(m._native, self.slowest_step)
        if noticed:
            self._act(job, noticed, runs)
        self._last_boundary = time.perf_counter()  # the switch is no step

    def _act(self, job, noticed: List[Tuple[int, int]], runs: Callable[[str], bool]) -> None:
        m = job.manager
        me = m.comm.rank
        if any(rank == me for rank, _ in noticed):
            _native.notice_taken()
        sig = _native.notice_signal_name(self.signal)
        if len(noticed) < m.comm.size:
            noticed = self._without_store_host(m, noticed, sig)
            if not noticed:
                return
        stay = m.comm.size - len(noticed)
        if stay == 0:
            self._end_everywhere(job, sig)
        to = _native.survivor_layout(m.config["config"], stay, runs)
        if to is None:
            raise ValueError(f"no layout of {stay} or fewer processes can run this model from {m.config['config']}")
        if me == 0:
            them = "it" if len(noticed) == 1 else "them"
            print(f"notice: {_native.describe_noticed(noticed)} will be gone in {self.seconds:g} s ({sig}): "
                  f"vacating {them} into {to} before step {m.step}", flush=True)
        stats = job.switch(to, vacate=[rank for rank, _ in noticed])  # Leaving on the noticed processes
        if m.comm.rank == 0:
            print(f"notice: vacated; {stats['config']} on {m.comm.size} processes after a "
                  f"{stats['pause_seconds']:.3f} s pause", flush=True)

    def _without_store_host(self, m, noticed: List[Tuple[int, int]], sig: str) -> List[Tuple[int, int]]:
        """`noticed` less the process that hosts torch.distributed's store (it cannot leave: its
        notice runs to its deadline, which ends the job), said once by rank 0."""
        host = [(r, pid) for r, pid in noticed if _c10d.is_c10d(m.comm) and m.comm.ranks[r] == 0]
        if host and m.comm.rank == 0:
            print(f"notice: {_native.describe_noticed(host)} will be gone in {self.seconds:g} s ({sig}), but "
                  f"{_c10d.STORE_HOST}: the job ends at the notice's deadline", flush=True)
        return [n for n in noticed if n not in host]

    def _end_everywhere(self, job, sig: str) -> None:
        """Every process had notice: save when asked, rank 0's one line, the same end everywhere."""
        m = job.manager
        if self.save is not None:
            job.save(self.save)
        if m.comm.rank == 0:
            print(f"{_native.EVERY_PROCESS_NOTICED} ({sig})", flush=True)
            saved = f"saved checkpoint of step {m.step} in {self.save}" if self.save is not None else \
                "no notice_save, nothing saved"
            sys.stderr.write(f"dynatrain: error: rank 0 of {m.comm.size}: stopped by {sig} to every process: {saved}\n")
            sys.stderr.flush()
        try:  # the job ends here: mpirun's SIGTERM to processes not yet gone is no new cause
            signal.signal(self.signal, signal.SIG_IGN)
        except ValueError:  # not the main thread: keep the handler
            pass
        _elastic._ending.status = 128 + self.signal  # the exit status also where the job ends without MPI_Finalize
        raise EveryProcessNoticed(self.signal, m.step, None if self.save is None else os.fspath(self.save))
