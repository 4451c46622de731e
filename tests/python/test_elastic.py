"""Process-count changes from Python: each test starts `mpirun -np N python3 elastic_job.py` (the
way a user runs an elastic script: processes a grow starts run it again and join) and reads the
lines every process prints. After every switch, every process of the job must hold exactly its
state of the new layout (every element checked against the oracle), the step and the extras;
processes that leave exit 0; refusals raise ValueError on every rank and move nothing."""
import os
import re
import shutil
import subprocess
import sys

import pytest
from mpi4py import MPI

from conftest import REPO

HERE = REPO / "tests" / "python"
CHECK = re.compile(r"check step (\d+) config (\S+) rank (\d+) of (\d+) pid (\d+) joined (\w+) mismatches (\d+) "
                   r"extras (\w+) stale (\w+)")
BEFORE = re.compile(r"before step (\d+) rank (\d+) pid (\d+)")
LEAVING = re.compile(r"leaving step (\d+) pid (\d+) stale True")

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="starts its own mpirun")


def job(np, *args, leaving_allowed=True, extra_env=None):
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", PMIX_MCA_gds="hash",
               OMPI_MCA_orte_allowed_exit_without_sync="1" if leaving_allowed else "0", **(extra_env or {}))
    cmd = [shutil.which("mpirun") or "mpirun", "-np", str(np), sys.executable, str(HERE / "elastic_job.py"), *args]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=HERE)
    return run.returncode, run.stdout + run.stderr


def checks_by_step(out):
    """step -> {rank: (config, world, pid, joined)}; asserts every check passed."""
    steps = {}
    for step, cfg, rank, size, pid, joined, bad, extras, stale in CHECK.findall(out):
        assert (bad, extras, stale) == ("0", "True", "True"), \
            f"step {step} rank {rank}: {bad} mismatches, extras {extras}, stale views raise: {stale}\n{out}"
        assert int(rank) not in steps.setdefault(int(step), {}), f"rank {rank} twice at step {step}\n{out}"
        steps[int(step)][int(rank)] = (cfg, int(size), int(pid), joined == "True")
    return steps


def pids_before(out, step):
    """rank -> pid of the processes that entered the switch to `step`."""
    return {int(r): int(p) for s, r, p in BEFORE.findall(out) if int(s) == step}


def assert_world(steps, step, config, size):
    ranks = steps[step]
    assert sorted(ranks) == list(range(size)), ranks
    assert {(c, w) for c, w, _, _ in ranks.values()} == {(config, size)}, ranks


def test_grow_two_to_four_then_shrink_to_two():
    rc, out = job(2, "--schedule", "tp=2;tp=2,dp=2;pp=2")
    assert rc == 0, out
    steps = checks_by_step(out)
    assert_world(steps, 1, "tp=2,pp=1,dp=2,zero=1", 4)
    starters = pids_before(out, 1)
    grown = steps[1]
    assert {r: grown[r][2] for r in (0, 1)} == starters  # the starters keep their ranks
    assert [grown[r][3] for r in range(4)] == [False, False, True, True]  # ranks 2, 3 joined
    assert_world(steps, 2, "tp=1,pp=2,dp=1,zero=1", 2)
    assert {r: steps[2][r][2] for r in (0, 1)} == starters
    assert sorted(int(p) for s, p in LEAVING.findall(out) if s == "2") == sorted(grown[r][2] for r in (2, 3))
    assert out.count("done rank") == 2


def test_prepared_ahead_grow_and_shrink():
    # Manager.prepare() starts the processes while the loop goes on; switch() commits.
    rc, out = job(2, "--ahead", "--schedule", "dp=2;tp=2,dp=2;dp=2@0")
    assert rc == 0, out
    steps = checks_by_step(out)
    assert_world(steps, 1, "tp=2,pp=1,dp=2,zero=1", 4)
    assert [steps[1][r][3] for r in range(4)] == [False, False, True, True]
    assert_world(steps, 2, "tp=1,pp=1,dp=2,zero=1", 2)
    first = pids_before(out, 2)
    assert [steps[2][r][2] for r in (0, 1)] == [first[2], first[1]]  # rank 0 vacated: rank 2 takes it
    assert sorted(int(p) for _, p in LEAVING.findall(out)) == sorted([first[0], first[3]])


def test_two_to_three_to_one():
    rc, out = job(2, "--schedule", "dp=2;dp=3,zero=0;tp=1")
    assert rc == 0, out
    steps = checks_by_step(out)
    assert_world(steps, 1, "tp=1,pp=1,dp=3,zero=0", 3)
    assert steps[1][2][3]  # rank 2 joined
    assert_world(steps, 2, "tp=1,pp=1,dp=1,zero=1", 1)
    assert len(LEAVING.findall(out)) == 2 and out.count("done rank") == 1


def test_vacate_named_ranks_and_migrate_rank_zero():
    # 3 -> 2 with process 1 vacated; then rank 0 vacated at the same size: a new process takes
    # it (rank 1 stays); then rank 1 vacated: every process of the job is new.
    rc, out = job(3, "--schedule", "dp=3;tp=2@1;dp=2@0;tp=2,zero=0@1")
    assert rc == 0, out
    steps = checks_by_step(out)
    first = pids_before(out, 1)
    assert_world(steps, 1, "tp=2,pp=1,dp=1,zero=1", 2)
    assert [steps[1][r][2] for r in (0, 1)] == [first[0], first[2]]
    assert [int(p) for s, p in LEAVING.findall(out) if s == "1"] == [first[1]]
    assert_world(steps, 2, "tp=1,pp=1,dp=2,zero=1", 2)
    assert steps[2][0][3] and steps[2][1][2] == first[2]  # rank 0 on a new process
    assert [int(p) for s, p in LEAVING.findall(out) if s == "2"] == [first[0]]
    assert_world(steps, 3, "tp=2,pp=1,dp=1,zero=0", 2)
    assert not set(first.values()) & {steps[3][r][2] for r in (0, 1)}
    assert out.count("done rank") == 2


def test_vacate_the_last_rank_keeps_the_others_in_place():
    # No rank moves (rank r stays on process r): the vacated process alone leaves.
    rc, out = job(3, "--schedule", "dp=3;tp=2@2")
    assert rc == 0, out
    steps = checks_by_step(out)
    first = pids_before(out, 1)
    assert_world(steps, 1, "tp=2,pp=1,dp=1,zero=1", 2)
    assert [steps[1][r][2] for r in (0, 1)] == [first[0], first[1]]
    assert [int(p) for _, p in LEAVING.findall(out)] == [first[2]]


def refusals(out, attempts):
    for cfg, why in attempts:
        said = re.findall(rf"refusal {re.escape(cfg)} rank (\d): (.*)", out)
        assert sorted(r for r, _ in said) == ["0", "1"], f"{cfg}\n{out}"
        assert all(why in msg for _, msg in said), f"{cfg}: {said}"
        intact = re.findall(rf"intact {re.escape(cfg)} rank \d mismatches (\d+) world (\d+)", out)
        assert intact == [("0", "2")] * 2, f"{cfg}\n{out}"
    assert re.findall(r"after refusals rank \d mismatches (\d+)", out) == ["0", "0"], out


def test_refusals_move_nothing():
    rc, out = job(2, "--refusals", "dp=2@5;dp=1@1,1;dp=2@-1;dp=4;dp=2@0,1",
                  extra_env={"DT_EDM_EXECUTABLE": "/nonexistent/python3"})
    assert rc == 0, out
    cannot_start = "cannot start 2 process(es): executable '/nonexistent/python3' is missing or not executable"
    refusals(out, [("dp=2@[5]", "cannot vacate rank 5: valid ranks are 0..1"),
                   ("dp=1@[1, 1]", "rank 1 is named twice in vacate"),
                   ("dp=2@[-1]", "cannot vacate rank -1"),
                   ("dp=4@None", cannot_start), ("dp=2@[0, 1]", cannot_start),
                   ("dp=2@['1']", "vacate must be a list of world ranks (ints)"),
                   ("tp=3,dp=2@None", "tp=3 does not divide 8 attention heads"),
                   ("prepared dp=4", cannot_start)])


def test_without_leaving_allowed_nothing_changes():
    rc, out = job(2, "--refusals", "dp=1;dp=4;dp=2@1", leaving_allowed=False)
    assert rc == 0, out
    why = "OMPI_MCA_orte_allowed_exit_without_sync=1"
    refusals(out, [("dp=1@None", why), ("dp=4@None", why), ("dp=2@[1]", why)])


ADOPTED = re.compile(r"step (\d+) rank (\d+) of (\d+) joined (True|False) lr_ok (True|False) loss_ok (True|False)")


def test_adopted_param_groups_and_scheduler_reach_grown_processes():
    """adopt_grow_job.py: AdamW decay groups and a registered warmup + cosine scheduler, grown
    2 -> 4 at step 3 and shrunk back at 6: every process, joined ones included, has plain torch's
    lr at every step it trains, and the job's loss equals plain torch's."""
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", PMIX_MCA_gds="hash",
               OMPI_MCA_orte_allowed_exit_without_sync="1")
    cmd = [shutil.which("mpirun") or "mpirun", "-np", "2", sys.executable, str(HERE / "adopt_grow_job.py")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=HERE)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    lines = ADOPTED.findall(out)
    ranks = {}
    for step, rank, size, joined, lr_ok, loss_ok in lines:
        assert (lr_ok, loss_ok) == ("True", "True"), f"step {step} rank {rank} joined {joined}\n{out}"
        ranks.setdefault(int(step), set()).add((int(rank), int(size), joined == "True"))
    assert sorted(ranks) == list(range(8)), out
    assert ranks[3] == {(0, 4, False), (1, 4, False), (2, 4, True), (3, 4, True)}, out
    assert ranks[7] == {(0, 2, False), (1, 2, False)}, out
