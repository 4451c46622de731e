"""Collective agreement on arguments: every rank must pass the same value."""
from __future__ import annotations

import hashlib
import pickle
from typing import Any


def agree(comm, what: str, value: Any) -> None:
    """Collective over `comm`: ValueError on every rank when `value` (picklable) differs between
    ranks, naming `what` and the ranks whose value differs from rank 0's."""
    digest = hashlib.sha256(pickle.dumps(value, protocol=4)).hexdigest()
    digests = comm.allgather(digest)
    differ = [r for r, d in enumerate(digests) if d != digests[0]]
    if differ:
        raise ValueError(f"{what} differs between ranks: rank(s) {', '.join(map(str, differ))} disagree with rank 0")
