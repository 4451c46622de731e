"""examples/torch_gpt.py (the adopted GPT, switching dp -> tp -> zero under mpirun -np 2) against
examples/train_plain.py (the same model, data and loop in one plain process): the losses agree
to fp32 reduction noise at every step, and the adopted script differs from the plain one by a
few lines."""
import os
import re
import shutil
import subprocess
import sys

import pytest
from mpi4py import MPI

from conftest import REPO

EXAMPLES = REPO / "examples"


def losses(cmd):
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ), cwd=EXAMPLES)
    assert run.returncode == 0, run.stdout + run.stderr
    return [float(x) for x in re.findall(r"^step +\d+ +loss (\S+)$", run.stdout, re.M)]


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="starts its own mpirun")
def test_adopted_example_equals_the_plain_run():
    steps = ["--steps", "12"]
    plain = losses([sys.executable, "train_plain.py"] + steps)
    adopted = losses([shutil.which("mpirun") or "mpirun", "-np", "2", sys.executable, "torch_gpt.py", *steps,
                      "--schedule", "0:dp=2,zero=0;3:tp=2;6:dp=2;9:dp=2,zero=2"])
    assert len(plain) == len(adopted) == 12
    assert max(abs(a - p) / abs(p) for a, p in zip(adopted, plain)) <= 1e-5
    assert plain[-1] < plain[0] - 1.0  # it learns


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="reads files; once is enough")
def test_adopted_example_differs_from_the_plain_one_by_few_lines():
    diff = subprocess.run(["diff", str(EXAMPLES / "train_plain.py"), str(EXAMPLES / "torch_gpt.py")],
                          capture_output=True, text=True).stdout
    assert 0 < len(re.findall(r"^[<>]", diff, re.M)) <= 15  # lines removed + added
