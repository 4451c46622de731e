"""examples/rl_sort.py under mpirun -np 4 (MPI) and under `dynatrain launch --np 4` (torch.distributed,
Gloo): REINFORCE with DynaTrain's phase shifts each iteration
(lend 2 processes, refit the weights onto them at tp=2, generate there, reclaim, train) against the
same loop on a static trainer whose generator gathers the full weights (same seeds): every
iteration's loss and mean reward agree within 1e-5, and from the second iteration on a phase
shift creates no process group."""
import os
import re
import shutil
import subprocess
import sys

import pytest
from mpi4py import MPI

from conftest import REPO, cli_path

LAUNCHERS = {"mpirun": lambda: [shutil.which("mpirun") or "mpirun", "-np", "4"],
             "launch": lambda: [str(cli_path()), "launch", "--port", "0", "--np", "4", "--"]}


def run(launcher, mode):
    cmd = LAUNCHERS[launcher]() + [sys.executable, "rl_sort.py", "--mode", mode, "--iters", "4", "--batch", "16"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=dict(os.environ), cwd=REPO / "examples")
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="starts its own jobs")
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_rl_example_with_phase_shifts_equals_the_static_loop(launcher):
    shift, static = run(launcher, "shift"), run(launcher, "static")
    line = r"^iter +\d+  loss (\S+)  reward (\S+)"
    got, want = re.findall(line, shift, re.M), re.findall(line, static, re.M)
    assert len(got) == len(want) == 4, shift + static
    for (loss, r), (loss0, r0) in zip(got, want):
        assert abs(float(loss) - float(loss0)) <= 1e-5 * max(1.0, abs(float(loss0))) and r == r0, (got, want)
    groups = [int(g) for g in re.findall(r"new groups (\d+)$", shift, re.M)]
    assert len(groups) == 4 and groups[0] > 0 and groups[1:] == [0, 0, 0], groups
