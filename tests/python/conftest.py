"""Shared helpers for the dynatrain Python tests. They run in one process (pytest) and under
`mpirun -np N python3 -m pytest` (every rank runs the same tests in the same order, so the
collective calls match). PYTHONPATH must reach build/python (tests/python/CMakeLists.txt sets it)."""
import os
import pathlib
import sys

import pytest
import torch
from mpi4py import MPI

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.append(str(REPO / "build" / "python"))  # when PYTHONPATH does not reach the package


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


def pytest_runtest_logreport(report):
    """Under mpirun a failure on one rank would leave the others waiting in the next collective:
    print it and abort the whole job (non-zero exit) instead."""
    if report.failed and MPI.COMM_WORLD.size > 1:
        print(f"\nrank {MPI.COMM_WORLD.rank}: {report.nodeid} failed:\n{report.longreprtext}", flush=True)
        MPI.COMM_WORLD.Abort(1)


@pytest.fixture
def world():
    return MPI.COMM_WORLD


def cli_path() -> pathlib.Path:
    return pathlib.Path(os.environ.get("DYNATRAIN_CLI", REPO / "build" / "dynatrain"))
