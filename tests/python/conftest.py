"""Shared helpers for the dynatrain Python tests. They run in one process (pytest) and under
`mpirun -np N python3 -m pytest` (every rank runs the same tests in the same order, so the
collective calls match). PYTHONPATH must reach build/python (tests/python/CMakeLists.txt sets it)."""
import os
import pathlib
import subprocess
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


def run_example(cmd, timeout: float) -> str:
    """stdout of an examples/ script (or an mpirun of one) that must succeed."""
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", PMIX_MCA_gds="hash",
               OMPI_MCA_orte_allowed_exit_without_sync="1")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO / "examples")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RuntimeWarning" not in done.stderr, done.stderr  # e.g. memory of a layout pinned past its switch
    return done.stdout


def cli_path() -> pathlib.Path:
    return pathlib.Path(os.environ.get("DYNATRAIN_CLI", REPO / "build" / "dynatrain"))
