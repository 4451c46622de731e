"""Preemption notices and lost processes in an adopted job: each test starts `mpirun -np N
python3 notice_job.py ...` under the quiet Open MPI setting (scripts/mpi-env.sh's
orte_execute_quiet=1) and reads the lines every process prints. A notice to one process vacates
it live: it exits 0 and is gone, the others keep their pids and go on in a layout without it,
every step is done once, every loss equals the uninterrupted run's within 1e-5. A notice to every
process saves and ends the job with one line; a killed process ends it with one line naming it."""
import os
import re
import shutil
import subprocess
import sys

import pytest
from mpi4py import MPI

from conftest import REPO, cli_path

HERE = REPO / "tests" / "python"
sys.path.append(str(HERE))
import notice_job  # noqa: E402

LOSS = re.compile(r"loss step (\d+) value (\S+) pid (\d+) config (\S+)")
START = re.compile(r"start pid (\d+)")
END = re.compile(r"end pid (\d+) gone \[([\d, ]*)\]")
LEFT = re.compile(r"left pid (\d+) active False")

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="starts its own mpirun")


def job(np, *args, c10d=False, notice_s=30, script="notice_job.py", launch=(), prefix=()):
    """notice_job.py (or `script`) under mpirun, or with c10d under `dynatrain launch [launch...]`
    (torch.distributed, gloo); each process started through `prefix` (a command) when given."""
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", PMIX_MCA_gds="hash",
               OMPI_MCA_orte_allowed_exit_without_sync="1", OMPI_MCA_orte_execute_quiet="1", NOTICE_S=str(notice_s))
    start = [str(cli_path()), "launch", "--port", "0", "--np", str(np), *launch, "--"] if c10d else \
        [shutil.which("mpirun") or "mpirun", "-np", str(np)]
    cmd = [*start, *prefix, sys.executable, str(HERE / script), *args]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=200, env=env, cwd=HERE)
    return run.returncode, run.stdout, run.stderr


def losses(out):
    """step -> (loss, pid, config), each step exactly once."""
    seen = {}
    for step, value, pid, config in LOSS.findall(out):
        assert int(step) not in seen, f"step {step} twice\n{out}"
        seen[int(step)] = (float(value), int(pid), config)
    return seen


def assert_losses_match(seen, steps):
    reference = notice_job.plain_losses()
    assert sorted(seen) == list(range(steps))
    for step in range(steps):
        assert abs(seen[step][0] - reference[step]) <= 1e-5, (step, seen[step][0], reference[step])


def test_notice_to_rank_0_of_2_vacates_it_live():
    notice_vacates_live(2, "tp=2", [0], "tp=1,pp=1,dp=1,zero=1")  # rank 0 moves to the other process


def test_notice_to_rank_1_of_4_vacates_it_live():
    # the 3 others go on in the layout of 3 that the batch of 12 allows (tp=3 cannot split the model)
    notice_vacates_live(4, "tp=2,dp=2", [1], "tp=1,pp=1,dp=3,zero=1")


def test_notices_to_two_of_4_at_once_are_one_switch():
    notice_vacates_live(4, "tp=2,dp=2", [1, 3], "tp=2,pp=1,dp=1,zero=1")  # the same tp first


def test_notice_to_an_idle_process_vacates_it_live():
    # tp=2 on 4 processes: world ranks 2 and 3 hold no rank; rank 3 leaves, the 3 others go on
    notice_vacates_live(4, "tp=2", [3], "tp=1,pp=1,dp=3,zero=1")


def test_notice_on_torch_distributed_vacates_rank_1_of_4_live():
    notice_vacates_live(4, "tp=2,dp=2", [1], "tp=1,pp=1,dp=3,zero=1", c10d=True)


def test_notices_on_torch_distributed_to_two_of_4_at_once():
    notice_vacates_live(4, "tp=2,dp=2", [1, 3], "tp=2,pp=1,dp=1,zero=1", c10d=True)


def notice_vacates_live(np, layout, noticed, into=r"\S+", c10d=False):
    rc, out, err = job(np, layout, "one", "3", ",".join(map(str, noticed)), c10d=c10d)
    assert rc == 0, out + err
    seen = losses(out)
    assert_losses_match(seen, notice_job.STEPS)
    starts = [int(p) for p in START.findall(out)]
    ends = {int(p): gone for p, gone in END.findall(out)}
    left = sorted(int(p) for p in LEFT.findall(out))
    assert len(starts) == np and len(left) == len(noticed), out
    # the noticed processes held ranks `noticed` at step 3; they left, and only they are gone
    assert sorted(ends) == sorted(set(starts) - set(left)), out
    for pid, gone in ends.items():
        assert [int(g) for g in gone.split(",") if g.strip()] == left, (pid, gone, out)
    named = ", ".join(f"{r} \\(pid \\d+\\)" for r in noticed)
    them = "it" if len(noticed) == 1 else "them"
    assert re.search(rf"notice: ranks? {named} will be gone in 30 s \(SIGTERM\): vacating {them} into {into} "
                     rf"before step 4\n", out), out
    assert out.count("will be gone") == 1, out
    assert re.search(rf"notice: vacated; {into} on {np - len(noticed)} processes after a \S+ s pause\n", out), out
    after = {config for step, (_, _, config) in seen.items() if step >= 4}
    assert len(after) == 1 and all(seen[s][1] not in left for s in range(4, notice_job.STEPS)), seen
    assert "dynatrain:" not in err, err


def test_notice_settings_are_checked():
    import dynatrain._native as native
    with pytest.raises(ValueError, match=r"'KILL' is not a notice signal; valid: TERM, USR1, USR2, HUP"):
        native.enable_notices("KILL", 30.0)
    with pytest.raises(ValueError, match=r"notice_s=0: valid: seconds > 0"):
        native.enable_notices("TERM", 0.0)


def test_notice_to_every_process_saves_and_ends_with_one_line(tmp_path):
    every_process_noticed(tmp_path, c10d=False)


def test_notice_to_every_process_on_torch_distributed_saves_and_ends_with_one_line(tmp_path):
    every_process_noticed(tmp_path, c10d=True)


def every_process_noticed(tmp_path, c10d):
    rc, out, err = job(2, "tp=2", "all", "3", str(tmp_path / "ckpt"), c10d=c10d)
    assert rc == 128 + 15, out + err
    assert_losses_match(losses(out), 4)
    assert out.count("notice: every process has notice; the job ends (SIGTERM)") == 1, out
    lines = [line for line in err.splitlines() if line.startswith("dynatrain:")]
    assert lines == [f"dynatrain: error: rank 0 of 2: stopped by SIGTERM to every process: saved checkpoint of step 4 in "
                     f"{tmp_path / 'ckpt'}"], err
    assert (tmp_path / "ckpt" / "latest").exists()


def test_killed_process_ends_the_job_with_one_line_naming_it():
    rc, out, err = job(2, "tp=2", "kill", "3", "1")
    assert rc != 0, out + err
    starts = [int(p) for p in START.findall(out)]
    lines = [line for line in err.splitlines() if line.startswith("dynatrain:")]
    assert len(lines) == 1, err
    m = re.fullmatch(r"dynatrain: error: rank 0 of 2: stopped by SIGTERM after rank 1 \(pid (\d+)\) ended without a "
                     r"word \(killed\?\) on node (\S+)", lines[0])
    assert m and int(m.group(1)) in starts and m.group(2) == os.uname().nodename, lines


def test_killed_process_on_torch_distributed_ends_the_job_with_a_line_naming_it():
    rc, out, err = job(2, "tp=2", "kill", "3", "1", c10d=True)
    assert rc == 128 + 9, out + err
    starts = [int(p) for p in START.findall(out)]
    lines = [line for line in err.splitlines() if "ended by" in line]
    assert len(lines) == 1, err
    m = re.fullmatch(r"dynatrain: error: launch: rank 1 \(pid (\d+)\) on node (\S+) ended by SIGKILL \(killed\?\); "
                     r"ending the other ranks", lines[0])
    assert m and int(m.group(1)) in starts and m.group(2) == os.uname().nodename, lines


def test_notice_to_the_store_host_on_torch_distributed_ends_the_job_at_its_deadline():
    rc, out, err = job(2, "tp=2", "one", "3", "0", c10d=True, notice_s=4)
    assert rc == 3, out + err
    assert re.search(r"notice: rank 0 \(pid \d+\) will be gone in 4 s \(SIGTERM\), but the process of "
                     r"torch.distributed global rank 0 hosts the store and cannot leave", out), out
    first = err.splitlines()[0]
    assert first.startswith("dynatrain: error: rank 0 of 2: this process had notice (SIGTERM) 4 s ago"), err
    assert first.endswith("resume it from its newest checkpoint with adopt(..., resume=DIR) (notice_save=DIR or "
                          "Manager.save writes one)") and "--max-restarts" not in first, err


LOCAL_LOSS = re.compile(r"loss step (\d+) rank (\d+) of (\d+) value (\S+) pid (\d+) config (\S+)")


def lost(layout, rank, launch=("--keep-going",), prefix=()):
    """lost_job.py: 4 processes, the one holding `rank` killed before step 3."""
    return job(4, layout, "3", str(rank), c10d=True, script="lost_job.py", launch=launch, prefix=prefix)


def test_exception_on_one_rank_under_plain_launch_ends_with_its_one_line(monkeypatch):
    monkeypatch.setenv("LOST_HOW", "raise")  # rank 2 raises before step 3; no --keep-going
    rc, out, err = lost("tp=1,dp=4,zero=0", 2, launch=())
    assert rc == 1, out + err
    lines = [line for line in err.splitlines() if line.startswith("dynatrain:")]
    assert lines == ["dynatrain: error: rank 2: RuntimeError: failed on purpose before step 3"], err
    assert err.count("Traceback") == 1, err  # the failed rank's; the others were ended, silent
    assert "recovery:" not in out and "notice:" not in out and "end pid" not in out, out
    assert sorted(int(s) for s, *_ in LOCAL_LOSS.findall(out)) == sorted(list(range(3)) * 4), out


def test_lost_process_on_torch_distributed_is_recovered_in_place():
    recovered_in_place("tp=1,dp=4,zero=0", 2, "tp=1,pp=1,dp=3,zero=0")


def test_lost_process_seen_first_in_a_tensor_parallel_forward_is_recovered_in_place():
    # tp=2,dp=2: rank 3's tp peer (rank 2) meets the loss in the forward's collective, not in a step
    recovered_in_place("tp=2,dp=2,zero=0", 3, r"\S+")


def test_survivors_stop_their_forward_as_soon_as_the_launcher_reports_the_loss(monkeypatch):
    # Every leaf module of step 3's forward sleeps 0.2 s (about 3 s a forward): the launcher
    # reports the kill through its pipe, the loss watch raises the mark, and each survivor's
    # forward stops at its next module; the losses are those of the uninterrupted run.
    monkeypatch.setenv("LOST_SLOW", "0.2")
    out = recovered_in_place("tp=1,dp=4,zero=0", 2, "tp=1,pp=1,dp=3,zero=0")
    assert re.search(r"resumed at \S+ stopped 3 met \S+\n", out), out


def test_survivors_stop_their_forward_without_the_launchers_pipe(monkeypatch):
    # The same without the launcher's report, each process the child of a parent that looks at
    # it once a second (as torchrun's agent): each survivor's loss watch sees the killed process
    # of its node in /proc and raises the mark itself.
    monkeypatch.setenv("LOST_SLOW", "0.2")
    lazy = HERE.parent / "reliability" / "lazy_parent.py"
    out = recovered_in_place("tp=1,dp=4,zero=0", 2, "tp=1,pp=1,dp=3,zero=0", prefix=(sys.executable, str(lazy)))
    assert re.search(r"resumed at \S+ stopped 3 met \S+\n", out), out


def recovered_in_place(layout, rank, into, prefix=()):
    rc, out, err = lost(layout, rank, prefix=prefix)
    assert rc == 0, out + err
    steps = {}
    for step, dp_rank, of, value, pid, config in LOCAL_LOSS.findall(out):
        steps.setdefault(int(step), []).append((int(dp_rank), int(of), float(value), int(pid), config))
    reference = notice_job.plain_losses()
    assert sorted(steps) == list(range(notice_job.STEPS)), out
    for step, lines in steps.items():  # every step once: one line from each of its dp ranks
        dp = lines[0][1]
        assert sorted(r for r, *_ in lines) == list(range(dp)) and {of for _, of, *_ in lines} == {dp}, (step, out)
        assert step >= 3 or dp == int(layout.split("dp=")[1].split(",")[0]), (step, out)
        mean = sum(v for _, _, v, _, _ in lines) / dp
        assert abs(mean - reference[step]) <= 1e-5, (step, mean, reference[step])
    starts = [int(p) for p in START.findall(out)]
    killed = set(starts) - {pid for s in range(3, notice_job.STEPS) for _, _, _, pid, _ in steps[s]}
    ends = {int(p): g for p, g in END.findall(out)}
    assert len(starts) == 4 and len(killed) == 1 and sorted(ends) == sorted(set(starts) - killed), out
    for gone in ends.values():  # the survivors kept their pids; only the killed process is gone
        assert [int(g) for g in gone.split(",") if g.strip()] == sorted(killed), out
    node = re.escape(os.uname().nodename)  # one machine: a process of its node, not the whole node
    assert re.search(rf"recovery: lost rank {rank} \(global {rank}\) on node {node} of 4; {into} on 3 processes "
                     r"after a \S+ s pause; step 3 again\n", out), out
    assert out.count("recovery:") == 1, out
    lines = [line for line in err.splitlines() if line.startswith("dynatrain:")]
    assert len(lines) == 1 and "ended by SIGKILL (killed?); the other ranks go on (--keep-going)" in lines[0], err
    return out


def assert_ends_with_one_line(lost_args, pattern):
    """lost(*lost_args) ends with exit 1 and one error line (the launcher's aside) matching pattern."""
    rc, out, err = lost(*lost_args)
    assert rc == 1, out + err
    lines = [line for line in err.splitlines() if line.startswith("dynatrain: error:") and "launch:" not in line]
    assert len(lines) == 1 and re.fullmatch(pattern, lines[0]), err
    assert "Traceback" not in err and "recovery:" not in out, out + err


@pytest.mark.parametrize("missed", ["1", "0,3"])
def test_loss_inside_a_commit_barrier_completes_the_step_where_the_barrier_failed(monkeypatch, missed):
    # Rank 2 dies after step 3's commit barrier; on the ranks `missed` the barrier met the loss
    # (they raise there), the others passed it, applied step 3 and meet the loss in step 4. The
    # missed ones apply step 3 in the recovery (rank 0, the line's writer, among them in the
    # second case); every survivor does step 4 again; a registered LR schedule stays in step.
    for name, value in (("LOST_WHEN", "barrier"), ("LOST_MISS", missed), ("LOST_SCHED", "1")):
        monkeypatch.setenv(name, value)
    rc, out, err = lost("tp=1,dp=4,zero=0", 2)
    assert rc == 0, out + err
    steps = {}
    for step, dp_rank, of, value, pid, config in LOCAL_LOSS.findall(out):
        steps.setdefault(int(step), []).append((int(dp_rank), int(of), float(value)))
    assert sorted(steps) == list(range(notice_job.STEPS)), out
    reference = notice_job.plain_losses(scheduled=True)
    for step, lines in steps.items():
        ranks, of = sorted(r for r, _, _ in lines), {of for _, of, _ in lines}
        if step == 3:  # computed at dp=4; rank 2 died before its line
            assert ranks == [0, 1, 3] and of == {4}, (step, out)
            continue
        assert ranks == list(range(4 if step < 3 else 3)) and of == {len(ranks)}, (step, out)
        mean = sum(v for _, _, v in lines) / len(ranks)
        assert abs(mean - reference[step]) <= 1e-5, (step, mean, reference[step])
    n = len(missed.split(","))
    assert re.search(r"recovery: lost rank 2 \(global 2\) on node \S+ of 4; tp=1,pp=1,dp=3,zero=0 on 3 processes after "
                     rf"a \S+ s pause; step 3's update completed on {n} survivors? whose barrier met the loss; step 4 "
                     r"again\n", out), out
    assert out.count("recovery:") == 1, out


def test_loss_inside_a_zero_update_is_refused_with_one_line(monkeypatch):
    # zero=1: after step 3's barrier the survivors update their shards and meet the loss in the
    # shards' gather; the lost rank's shard of that update is gone.
    monkeypatch.setenv("LOST_WHEN", "barrier")
    assert_ends_with_one_line(("tp=1,dp=4,zero=1", 2), r"dynatrain: error: lost rank 2 \(global 2\) on node \S+ of 4 "
                              r"while step 3's update gathered its ZeRO shards: the survivors applied their shards of "
                              r"it and the lost processes' are gone; resume from a checkpoint")


def test_lost_process_whose_state_no_survivor_holds_is_refused_with_one_line():
    rc, out, err = lost("tp=1,dp=4,zero=1", 2)  # ZeRO-1: rank 2 held the only copy of its optimizer shard
    assert rc == 1, out + err
    lines = [line for line in err.splitlines() if line.startswith("dynatrain: error:") and "launch:" not in line]
    assert len(lines) == 1, err
    assert re.fullmatch(r"dynatrain: error: lost rank 2 \(global 2\) on node \S+ of 4: no surviving process holds \S+ "
                        r"exp_avg/exp_avg_sq \[.* of tp=1,pp=1,dp=4,zero=1: the lost processes held the "
                        r"only copy; resume from a checkpoint", lines[0]), lines[0]
    assert "Traceback" not in err, err


def test_lost_store_host_on_torch_distributed_ends_with_one_line():
    assert_ends_with_one_line(  # global rank 0's process hosts the store
        ("tp=1,dp=4,zero=0", 0), r"dynatrain: error: the survivors on node \S+ could not agree through the store "
        r"\(.*\): it lives in the process of torch.distributed global rank 0 on node \S+, whose loss cannot be "
        r"recovered; resume from a checkpoint")
