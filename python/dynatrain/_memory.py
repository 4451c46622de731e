"""The Manager's up-front memory check: the state a config puts on this host's ranks (their
buffers, computed from the layout without allocating, plus each rank's prefaulted budget)
against the host's available memory, before any buffer is allocated. Without it a model too
large for the machine fails with std::bad_alloc after faulting in gigabytes.
"""
from __future__ import annotations

import socket
from typing import Optional

from . import _native


def available_bytes() -> Optional[int]:
    """MemAvailable of /proc/meminfo in bytes (None where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gib(n: int) -> str:
    return f"{n} bytes ({n / 2**30:.1f} GiB)"


def check(comm, model, config: str, states: str, bucket_elems: int, param_bytes: int, mem_budget: int) -> None:
    """Collective over `comm`: ValueError on every rank, naming the bytes, when the ranks of some
    host would hold more state than that host has available."""
    try:
        need, error = _native.rank_state_bytes(model, config, states, bucket_elems, param_bytes, comm.rank), None
        need += min(mem_budget, need)  # the pool prefaults up to mem_budget beyond the state
    except ValueError as e:  # the same on every rank (the arguments are agreed): raised below
        need, error = 0, str(e)
    host = socket.gethostname()
    everyone = comm.allgather((host, need, error, available_bytes()))
    errors = [e for _, _, e, _ in everyone if e is not None]
    if errors:
        raise ValueError(errors[0])
    for name in dict.fromkeys(h for h, _, _, _ in everyone):
        ranks = [(r, n, avail) for r, (h, n, _, avail) in enumerate(everyone) if h == name]
        total, avail = sum(n for _, n, _ in ranks), ranks[0][2]
        if avail is not None and total > avail:
            model_name = model if isinstance(model, str) else getattr(model, "name", "custom")
            raise ValueError(f"Manager: model '{model_name}' in config '{config}' needs {_gib(total)} of state on "
                             f"host {name} ({len(ranks)} rank(s), the largest {_gib(max(n for _, n, _ in ranks))} "
                             f"with its {mem_budget}-byte switch budget), more than its {_gib(avail)} available "
                             f"(MemAvailable); valid: a config that spreads the state over more ranks or hosts "
                             f"(larger tp, pp, or dp with zero), or fewer state kinds")
