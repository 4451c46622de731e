"""A grow on torch.distributed: processes join the job through its store (c10d_grow_job.py under
`dynatrain launch --np 2`), started by the job's prepare() or from outside by
`dynatrain launch --join`; and the refusals of a join that cannot happen."""
import os
import re
import subprocess
import sys

import pathlib

from conftest import cli_path

HERE = pathlib.Path(__file__).resolve().parent

STEP = re.compile(r"step (\d+) rank (\d+) of (\d+) joined (True|False) pid (\d+) lr_ok (True|False) loss_ok (True|False)")
GROW = re.compile(r"grow waited_for (\S+) wait_s ([\d.]+) startup_s ([\d.]+) pause_s ([\d.]+)")


def env(**extra):
    return dict(os.environ, **dict(dict(OMP_NUM_THREADS="1", DT_RENDEZVOUS_S="120"), **extra))


def launch(np, *args, join=None):
    where = ["--port", "0"] + (["--join", join] if join else [])
    return [str(cli_path()), "launch", *where, "--np", str(np), "--", sys.executable, str(HERE / "c10d_grow_job.py"),
            *args]


def check_trained(out: str) -> None:
    """Steps 0-7 each trained exactly once by every rank of its layout (dp=2, dp=4 from step 4, dp=2
    from step 6), every loss and lr plain torch's, the job's own processes the same all along."""
    seen = {}
    for step, rank, size, joined, pid, lr_ok, loss_ok in STEP.findall(out):
        assert (lr_ok, loss_ok) == ("True", "True"), f"step {step} rank {rank}\n{out}"
        key = (int(step), int(rank))
        assert key not in seen, f"step {step} rank {rank} trained twice\n{out}"
        seen[key] = (int(size), joined == "True", int(pid))
    sizes = {s: 4 if s in (4, 5) else 2 for s in range(8)}
    assert sorted(seen) == sorted((s, r) for s in range(8) for r in range(sizes[s])), out
    assert all(seen[(s, r)][:2] == (sizes[s], r >= 2) for s, r in seen), out
    for r in (0, 1):
        assert len({seen[(s, r)][2] for s in range(8)}) == 1, f"rank {r} changed process\n{out}"
    joined = {seen[(s, r)][2] for s in (4, 5) for r in (2, 3)}
    assert len(joined) == 2 and not joined & {seen[(0, 0)][2], seen[(0, 1)][2]}, out


def test_grow_2_to_4_by_the_store_prepared_ahead_then_shrink_back():
    run = subprocess.run(launch(2), capture_output=True, text=True, timeout=150, env=env(), cwd=HERE)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    check_trained(out)
    (waited, wait_s, startup_s, _), = GROW.findall(out)
    assert float(startup_s) >= float(wait_s), out  # prepared at step 2: the commit waits for the rest at most


def test_grow_without_prepare_starts_the_joiners_in_the_switch():
    run = subprocess.run(launch(2, "direct"), capture_output=True, text=True, timeout=150, env=env(), cwd=HERE)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    check_trained(out)
    (waited, wait_s, startup_s, _), = GROW.findall(out)
    assert waited == "the_2_joining_process(es)_and_the_new_world's_group" and float(wait_s) > 0.5, out


def test_joiners_that_end_while_starting_leave_the_job_in_its_layout():
    """Both joiners exit 3 before they join: the commit names one, on every process of the job;
    nothing moved, every step trains in dp=2 with plain torch's losses."""
    run = subprocess.run(launch(2, "die"), capture_output=True, text=True, timeout=150, env=env(), cwd=HERE)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    why = (r"grow refused on rank {}: switch to 'dp=4' refused: process \d+, started to join the job, ended with "
           r"status 3 before it joined \(0 of 2 joined\); nothing moved, the job goes on in tp=1,pp=1,dp=2,zero=1")
    assert re.search(why.format(0), out) and re.search(why.format(1), out), out
    seen = {(int(s), int(r)): (int(n), lr, loss) for s, r, n, _, _, lr, loss in STEP.findall(out)}
    assert sorted(seen) == [(s, r) for s in range(8) for r in range(2)], out
    assert all(v == (2, "True", "True") for v in seen.values()), out


def test_joiners_that_end_after_they_registered_leave_the_job_in_its_layout():
    """Both joiners exit 3 once they took their slots, before they build the new world's group: the
    commit names one within seconds (not after the group build's DT_RENDEZVOUS_S, 120 s here), on
    every process of the job; nothing moved, every step in dp=2 with plain torch's losses."""
    run = subprocess.run(launch(2, "die-registered"), capture_output=True, text=True, timeout=100, env=env(),
                         cwd=HERE)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    why = (r"grow refused on rank {}: switch to 'dp=4' refused: process \d+, started to join the job, ended with "
           r"status 3 after it registered, before the new world's group was built; nothing moved, the job goes on "
           r"in tp=1,pp=1,dp=2,zero=1")
    assert re.search(why.format(0), out) and re.search(why.format(1), out), out
    seen = {(int(s), int(r)): (int(n), lr, loss) for s, r, n, _, _, lr, loss in STEP.findall(out)}
    assert sorted(seen) == [(s, r) for s in range(8) for r in range(2)], out
    assert all(v == (2, "True", "True") for v in seen.values()), out


def test_joined_processes_lost_after_the_grow_are_recovered_in_place():
    """Grown to dp=4,zero=0 by the store, the two joined processes are SIGKILLed at step 5: the job's
    two recover in place over groups made after the grow and redo step 5; each step once, every
    loss plain torch's, the job's processes the same all along."""
    cmd = launch(2, "lost")
    cmd[2:2] = ["--keep-going"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env(), cwd=HERE)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert re.search(r"recovery: lost rank 2 \(global 2\), rank 3 \(global 3\) on node \S+ of 4; "
                     r"tp=1,pp=1,dp=2,zero=0 on 2 processes after a [\d.]+ s pause; step 5 again", out), out
    seen = {}
    for step, rank, size, joined, pid, lr_ok, loss_ok in STEP.findall(out):
        assert loss_ok == "True" and (int(step), int(rank)) not in seen, out
        seen[(int(step), int(rank))] = (int(size), joined, int(pid))
    assert sorted(seen) == sorted([(s, r) for s in range(8) for r in range(2)] + [(4, 2), (4, 3)]), out
    assert all(seen[(s, r)][0] == (4 if s == 4 else 2) for s, r in seen), out
    assert all(len({seen[(s, r)][2] for s in range(8)}) == 1 for r in (0, 1)), out


def external(*joiner_args):
    """The job started with `external` (it starts no process, DT_JOIN_EXTERNAL=1) and, once it
    printed its store's address, `dynatrain launch --join HOST:PORT --np 2` with `joiner_args`:
    (job's exit code, joiners' exit code, the output of both)."""
    job = subprocess.Popen(launch(2, "external"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env(), cwd=HERE)
    head = ""
    while not re.search(r"^store \S+$", head, re.M):
        line = job.stdout.readline()
        assert line, head
        head += line
    where = re.search(r"^store (\S+)$", head, re.M).group(1)
    joiners = subprocess.run(launch(2, *joiner_args, join=where), capture_output=True, text=True, timeout=150,
                             env=env(), cwd=HERE)
    out, _ = job.communicate(timeout=150)
    return job.returncode, joiners.returncode, head + out + joiners.stdout + joiners.stderr


def test_external_join_by_launch_join():
    job, joiners, out = external("external")
    assert job == 0 and joiners == 0, out
    check_trained(out)


def test_a_joiner_running_other_arguments_is_refused_on_every_rank():
    job, joiners, out = external("external", "other")
    assert job != 0 and joiners != 0, out
    why = (r"ValueError: the joining processes' command line and Manager arguments: not equal on every rank: "
           r"ranks 2, 3 have at \['command'\] \[.*'external', 'other'\] where rank 0 has \[.*'external'\]")
    assert re.search("dynatrain: error: rank 0: " + why, out), out  # the job's first rank
    # and each joiner's own traceback: the two joiners share one stderr, so their lines may
    # interleave (Python writes a traceback's last line in pieces); its message is one piece
    assert out.count("Manager arguments: not equal on every rank: ranks 2, 3 have") >= 4, out
    assert not re.search(r"step [4-7] ", out), out


def test_joining_where_no_job_listens_names_the_store_and_the_deadline():
    run = subprocess.run(launch(1, join="127.0.0.1:9"), capture_output=True, text=True, timeout=60, cwd=HERE,
                         env=env(DT_RENDEZVOUS_S="2"))
    assert run.returncode != 0
    assert re.search(r"JoinError: no job's store answered at 127\.0\.0\.1:9 \(DYNATRAIN_JOIN\) within 2 s "
                     r"\(DT_RENDEZVOUS_S\)", run.stderr), run.stderr
