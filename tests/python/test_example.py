"""examples/torch_gpt.py under mpirun -np 4: the switching run's loss tracks the static run, through
a layout that leaves two ranks idle (dp=2) and a ZeRO change."""
import os
import re
import shutil
import subprocess
import sys

import pytest
from mpi4py import MPI

from conftest import REPO


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="starts its own mpirun")
def test_example_loss_tracks_static():
    cmd = [shutil.which("mpirun") or "mpirun", "-np", "4", sys.executable, str(REPO / "examples" / "torch_gpt.py"),
           "--steps", "24", "--schedule", "0:tp=2,dp=2;8:dp=2,zero=0;16:tp=4"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(re.findall(r"^switch to ", run.stdout, re.M)) == 2
    diff = float(re.search(r"largest loss difference: (\S+)", run.stdout).group(1))
    assert diff < 1e-4
    first, last = (float(x) for x in re.findall(r"^step +(?:0|23) +static (\S+)", run.stdout, re.M))
    assert last < first - 1.0  # it learns
