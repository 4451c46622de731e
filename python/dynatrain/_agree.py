"""Agreement of a collective call's arguments across ranks (minimal version)."""
import hashlib
import pickle
from typing import Any


def agree(comm, what: str, value: Any) -> None:
    """Collective: raises ValueError on every rank when `value` (any picklable) differs between
    the ranks of `comm`, naming `what`, rank 0's value and the ranks that differ from it."""
    digest = hashlib.sha256(pickle.dumps(value, protocol=4)).hexdigest()
    digests = comm.allgather(digest)
    differ = [r for r, d in enumerate(digests) if d != digests[0]]
    if differ:
        first = comm.bcast(value if comm.rank == 0 else None, root=0)
        raise ValueError(f"{what} differs between ranks: rank 0 gives {first!r}, ranks {differ} give another value")
