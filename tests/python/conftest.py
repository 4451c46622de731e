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

from oracle import box_indices, fill_oracle, oracle, oracle_mismatches  # noqa: E402,F401  (the tests import them from here)


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
