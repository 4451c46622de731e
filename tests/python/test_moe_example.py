"""examples/moe_adopted.py (a mixture-of-experts model: router, top-2 gating, experts in an
nn.ModuleList or as 3-D parameters, a load-balancing loss) against examples/moe_plain.py (the same
script in one plain process), through switches between expert-parallel layouts: dp -> ep=2 ->
tp=2,ep=2 -> etp -> zero=2 / zero=3. Every loss, aux loss and clipped grad norm within 1e-5 of plain
torch (the norm relative to its size)."""
import re
import shutil
import sys

import pytest
from mpi4py import MPI

from conftest import run_example

STEP = re.compile(r"^step +(\d+) +loss (\S+) +aux (\S+) +norm (\S+)$", re.M)
STEPS = 12
pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="starts its own mpirun")


def run(cmd):
    return {int(s): (float(loss), float(aux), float(norm)) for s, loss, aux, norm in STEP.findall(run_example(cmd, 150))}


def against_plain(np, schedule, *flags):
    plain = run([sys.executable, "moe_plain.py", "--steps", str(STEPS), *flags])
    got = run([shutil.which("mpirun") or "mpirun", "-np", str(np), sys.executable, "moe_adopted.py", "--steps",
               str(STEPS), "--schedule", schedule, *flags])
    assert sorted(plain) == sorted(got) == list(range(STEPS))
    worst = [max(abs(got[s][i] - plain[s][i]) for s in plain) for i in range(3)]
    print(f"np={np} {' '.join(flags)} {schedule}: largest |loss - plain| {worst[0]:.1e}, |aux - plain| "
          f"{worst[1]:.1e}, |grad norm - plain| {worst[2]:.1e}")
    for step in plain:
        for got_value, plain_value in zip(got[step], plain[step]):
            assert abs(got_value - plain_value) <= 1e-5 * max(1.0, plain_value), (step, got[step], plain[step])
    assert plain[STEPS - 1][0] < plain[0][0] - 1.0  # it learns


def test_moe_modulelist_on_2_processes_dp_then_ep_then_tp_ep_then_etp_equals_plain_torch():
    against_plain(2, "0:dp=2;3:dp=2,ep=2;6:tp=2,ep=2;9:tp=2,etp=2,zero=2")


def test_moe_modulelist_on_4_processes_through_ep_tp_etp_and_zero_equals_plain_torch():
    against_plain(4, "0:dp=4;2:dp=4,ep=2;4:tp=2,dp=2,ep=2;6:tp=4,etp=2;8:dp=4,ep=4,zero=2;10:tp=4,ep=2,etp=2,zero=0")


def test_moe_stacked_experts_on_4_processes_through_ep_tp_etp_and_zero3_equals_plain_torch():
    against_plain(4, "0:dp=4;2:dp=4,ep=2;4:tp=2,dp=2,ep=2;6:tp=2,dp=2,ep=2,etp=2;8:dp=4,ep=4,zero=3;"
                     "10:tp=2,dp=2,etp=2,zero=0", "--stacked")
