"""examples/llama_adopted.py (a Llama-style model with AdamW decay / no-decay groups, clipping,
warmup + cosine SequentialLR and a checkpoint, adopted) against examples/llama_plain.py (the same
script in one plain process): dp -> tp -> zero=2 -> zero=3 -> grown to 4 processes (tp=2,dp=2,zero=3)
-> shrunk to 2 -> saved, then resumed from that checkpoint on 4 processes in another layout (zero=3). Every loss within
1e-5 of plain torch and the learning rate equal at every step; the two scripts differ by the lines
docs/python.md counts."""
import re
import shutil
import subprocess
import sys

import pytest
from mpi4py import MPI

from conftest import REPO, run_example

EXAMPLES = REPO / "examples"
STEP = re.compile(r"^step +(\d+) +loss (\S+) +lr (\S+)$", re.M)
pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="starts its own mpirun")


def run(cmd):
    return {int(s): (float(loss), lr) for s, loss, lr in STEP.findall(run_example(cmd, 240))}


def mpirun(np, *args):
    return run([shutil.which("mpirun") or "mpirun", "-np", str(np), sys.executable, "llama_adopted.py", "--steps",
                "12", *args])


def test_adopted_llama_through_switches_a_grow_a_shrink_and_a_resume_equals_plain_torch(tmp_path):
    plain = run([sys.executable, "llama_plain.py", "--steps", "12"])
    ckpt = str(tmp_path / "llama.pt")
    first = mpirun(2, "--save", ckpt, "--save-at", "9", "--schedule",
                   "0:dp=2,zero=0;2:tp=2;3:dp=2,zero=2;4:dp=2,zero=3;5:tp=2,dp=2,zero=3;7:dp=2")  # 5: grown, 7: shrunk
    resumed = mpirun(4, "--resume", ckpt, "--schedule", "0:tp=2,dp=2,zero=3;10:dp=4,zero=2")
    assert sorted(plain) == sorted(first) == list(range(12)) and sorted(resumed) == list(range(9, 12))
    for got in (first, resumed):
        for step, (loss, lr) in got.items():
            assert abs(loss - plain[step][0]) <= 1e-5 * plain[step][0], (step, loss, plain[step])
            assert lr == plain[step][1], (step, lr, plain[step])  # printed with repr(): equal to the last bit
    assert plain[11][0] < plain[0][0] - 1.0  # it learns


def test_the_adopted_llama_script_differs_from_the_plain_one_by_15_lines():
    diff = subprocess.run(["diff", str(EXAMPLES / "llama_plain.py"), str(EXAMPLES / "llama_adopted.py")],
                          capture_output=True, text=True).stdout
    assert len(re.findall(r"^[<>]", diff, re.M)) == 15  # lines removed + added (docs/python.md)
