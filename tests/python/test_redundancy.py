"""Redundancy 2 on torch.distributed: a lost node recovered in place from the copies its ranks'
state had on the other node (_redundancy.py). Four processes under `dynatrain launch
--keep-going`, DYNATRAIN_NODE faking two nodes of two (lost_job.py, LOST_NODES=2); both processes
of node 1 SIGKILL themselves after the backward of step 3."""
import re

import notice_job
from test_notice import END, LOCAL_LOSS, START, job


def lost_node(monkeypatch, layout, redundancy):
    monkeypatch.setenv("LOST_NODES", "2")
    monkeypatch.setenv("LOST_WHEN", "backward")
    monkeypatch.setenv("DYNATRAIN_REDUNDANCY", str(redundancy))
    return job(4, layout, "3", "2,3", c10d=True, script="lost_job.py", launch=("--keep-going",))


def assert_every_step_once_as_the_plain_run(out, layout_dp):
    steps = {}
    for step, dp_rank, of, value, pid, config in LOCAL_LOSS.findall(out):
        steps.setdefault(int(step), []).append((int(dp_rank), int(of), float(value), int(pid)))
    reference = notice_job.plain_losses()
    assert sorted(steps) == list(range(notice_job.STEPS)), out
    for step, lines in steps.items():  # every step once: one line from each of its dp ranks
        dp = lines[0][1]
        assert sorted(r for r, *_ in lines) == list(range(dp)), (step, out)
        assert dp == (layout_dp if step < 3 else 2), (step, out)
        mean = sum(v for _, _, v, _ in lines) / dp
        assert abs(mean - reference[step]) <= 1e-5, (step, mean, reference[step])
    return steps


def test_lost_node_is_recovered_from_the_copies_on_the_other_node(monkeypatch):
    # dp=4 ZeRO-1: the Adam moments of ranks 2 and 3 exist only on node 1 and in its copies.
    rc, out, err = lost_node(monkeypatch, "tp=1,dp=4,zero=1", 2)
    assert rc == 0, out + err
    steps = assert_every_step_once_as_the_plain_run(out, 4)
    starts = [int(p) for p in START.findall(out)]
    survivors = {pid for s in range(3, notice_job.STEPS) for *_, pid in steps[s]}
    assert len(starts) == 4 and len(survivors) == 2 and survivors < set(starts), out
    ends = {int(p): g for p, g in END.findall(out)}
    assert sorted(ends) == sorted(survivors), out  # the survivors kept their pids
    assert re.search(r"copies \{'redundancy': 2, 'copy_bytes': [1-9]\d*, 'copy_step': 0, 'copies_of': \[2\]", out), out
    assert re.search(r"recovery: lost .* of 4; \S+ on 2 processes after a \S+ s pause; step 3 again\n", out), out
    assert out.count("recovery:") == 1, out
    assert re.search(r"redundancy: off from step 4: redundancy=2 needs processes on at least two nodes", out), out


def test_lost_node_with_tensor_parallel_halves_on_each_node_is_recovered(monkeypatch):
    # tp=2,dp=2: node 1 held the second dp replica; zero=1 shards the moments over dp.
    rc, out, err = lost_node(monkeypatch, "tp=2,dp=2,zero=1", 2)
    assert rc == 0, out + err
    assert re.search(r"recovery: lost .* of 4; \S+ on 2 processes", out), out
    assert_every_step_once_as_the_plain_run_any_dp(out)


def test_lost_node_holding_half_of_every_tensor_parallel_piece_is_recovered(monkeypatch):
    # tp=4 across both nodes: node 1's tp pieces (params too) have no replica but their copies.
    rc, out, err = lost_node(monkeypatch, "tp=4,dp=1,zero=1", 2)
    assert rc == 0, out + err
    assert re.search(r"recovery: lost .* of 4; \S+ on 2 processes", out), out
    assert_every_step_once_as_the_plain_run_any_dp(out)


def assert_every_step_once_as_the_plain_run_any_dp(out):
    reference = notice_job.plain_losses()
    steps = {}
    for step, dp_rank, of, value, pid, config in LOCAL_LOSS.findall(out):
        steps.setdefault(int(step), []).append((int(of), float(value)))
    assert sorted(steps) == list(range(notice_job.STEPS)), out
    for step, lines in steps.items():
        assert len(lines) == lines[0][0], (step, out)
        assert abs(sum(v for _, v in lines) / len(lines) - reference[step]) <= 1e-5, (step, out)


def test_lost_node_without_redundancy_ends_with_the_line_naming_the_boxes(monkeypatch):
    rc, out, err = lost_node(monkeypatch, "tp=1,dp=4,zero=1", 1)
    assert rc == 1, out + err
    lines = [line for line in err.splitlines() if line.startswith("dynatrain: error:") and "launch:" not in line]
    assert len(lines) == 1, err
    assert re.fullmatch(r"dynatrain: error: lost .* of 4: no surviving process holds \S+ exp_avg/exp_avg_sq \[.* "
                        r"of tp=1,pp=1,dp=4,zero=1: the lost processes held the only copy; resume from a checkpoint",
                        lines[0]), lines[0]


def test_refusals_name_the_value_and_what_is_valid(monkeypatch):
    monkeypatch.delenv("DYNATRAIN_REDUNDANCY", raising=False)
    rc, out, err = job(2, c10d=True, script="redundancy_refusals.py")
    assert rc == 0, out + err
    assert out.count("refused ") == 8 and out.count("refusals ok") == 2, out
