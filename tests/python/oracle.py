"""The content oracle of the Python tests: every element of every state kind a pure function of
its global index (no MPI here: jobs on torch.distributed import it too)."""
import torch


def oracle(tensor_id: int, kind: str, index: torch.Tensor) -> torch.Tensor:
    """The content of element `index` (row-major, global) of (tensor, kind): a pure function,
    exact in float32 (below 2**24), different for every tensor and kind."""
    k = ("param", "grad", "master", "exp_avg", "exp_avg_sq").index(kind)
    return ((tensor_id * 1000003 + k * 7919 + index * 31) % 8388593).to(torch.float32)


def box_indices(shape, lo, hi) -> torch.Tensor:
    """Global row-major indices of box [lo, hi) of a tensor of `shape`, in the box's row-major order."""
    full = torch.arange(int(torch.tensor(shape).prod()), dtype=torch.int64).view(*shape)
    return full[tuple(slice(a, b) for a, b in zip(lo, hi))].reshape(-1)


def fill_oracle(m) -> None:
    for kind in m._kinds:
        for name, view, lo, hi in m.segments(kind):
            view.copy_(oracle(m._ids[name], kind, box_indices(m.global_shape(name), lo, hi)))


def oracle_mismatches(m) -> list:
    """Every (name, kind) whose elements on this rank differ from the oracle."""
    bad = []
    for kind in m._kinds:
        for name, view, lo, hi in m.segments(kind):
            if not torch.equal(view, oracle(m._ids[name], kind, box_indices(m.global_shape(name), lo, hi))):
                bad.append((name, kind, lo, hi))
    return bad
