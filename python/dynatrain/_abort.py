"""One failure path for a multi-process job: an exception on one rank ends the whole job within
seconds, with that rank's message, instead of leaving its peers waiting in a collective.

install() (called at `import dynatrain` under mpirun, and by every Manager on a communicator of
more than one rank) chains sys.excepthook: an uncaught exception prints the previous hook's
output (the traceback), then one line `dynatrain: error: rank R: <type>: <message>`, and calls
MPI.COMM_WORLD.Abort(1), as `python -m mpi4py` does. A rank other than 0 waits a grace period
first, so an error every rank raises alike (a disagreement) is printed by rank 0 alone.
Opt out with DYNATRAIN_ABORT_ON_ERROR=0.

Under `dynatrain launch` without --keep-going (DYNATRAIN_LAUNCH=end) the launcher ends the job
when a rank fails; a survivor's own error from that loss (Gloo's "Connection closed by peer")
would be a second, misleading end. Such an error waits up to LAUNCHER_WAIT_S for the launcher's
SIGKILL, silent, and is printed only if none comes.
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from typing import List

GRACE_SECONDS = 1.0
LAUNCHER_WAIT_S = 10.0
# what Gloo's errors say when the peer's process ended (its connections closed)
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
_installed = False
_MPI_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS")


def enabled() -> bool:
    return os.environ.get("DYNATRAIN_ABORT_ON_ERROR", "1") != "0"


def launched_with_peers() -> bool:
    """True when the environment says this process is one of several of an MPI job."""
    for var in _MPI_SIZE_VARS:
        try:
            if int(os.environ.get(var, "1")) > 1:
                return True
        except ValueError:
            pass
    return False


def launcher_ends_job() -> bool:
    """Whether `dynatrain launch` (without --keep-going) ends this job when one of its ranks fails."""
    return os.environ.get("DYNATRAIN_LAUNCH") == "end"


def peer_gone(error: BaseException) -> bool:
    """Whether `error` is a collective's error for a peer whose process ended."""
    return isinstance(error, RuntimeError) and any(m in str(error) for m in PEER_GONE)


JOB_RANK: List[int] = []  # a process that joined a job by its store (_join.py): its global rank there


def _world():
    """(rank, size, COMM_WORLD) when MPI is up, else (env rank or -1, 1, None); in a process that
    joined a job by its store, its rank in the job (not in its own torch.distributed world)."""
    if JOB_RANK:
        return JOB_RANK[0], 1, None
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.rank, mpi.COMM_WORLD.size, mpi.COMM_WORLD
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", os.environ.get("RANK", "-1")))
    return int(rank) if rank.lstrip("-").isdigit() else -1, 1, None


def abort_job(line: str, exit_code: int) -> None:
    """Prints `dynatrain: error: rank R: <line>` on stderr and ends the whole job with `exit_code`."""
    rank, _, world = _world()
    sys.stderr.write(f"dynatrain: error: rank {rank}: {line}\n")
    sys.stderr.flush()
    if world is not None:
        world.Abort(exit_code)
    os._exit(exit_code)


def _hook(previous):
    def hook(kind, value, tb):
        rank, _, _ = _world()
        if launcher_ends_job() and peer_gone(value):
            time.sleep(LAUNCHER_WAIT_S)  # the launcher's SIGKILL ends this process: the failed rank's is the line
        elif rank > 0:
            time.sleep(GRACE_SECONDS)  # let rank 0 report an error that every rank raised alike
        try:
            previous(kind, value, tb)
        except Exception:  # noqa: BLE001 - a broken hook must not keep the job alive
            traceback.print_exception(kind, value, tb)
        sys.stdout.flush()
        abort_job(f"{kind.__name__}: {value}", 1)
    hook.dynatrain_previous = previous
    return hook


def install() -> bool:
    """Chains the aborting excepthook once (unless DYNATRAIN_ABORT_ON_ERROR=0); True if installed."""
    global _installed
    if _installed or not enabled():
        return _installed
    sys.excepthook = _hook(sys.excepthook)
    _installed = True
    return True
