"""The Python module used as a hostile user would: every case ends with a clear Python exception
or message and the right exit code, never a segfault, a hang or silently changed state. The
multi-process cases run hostile_cases.py under their own `mpirun -np N` (so this file runs in
one process); the rest run in-process."""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest
import torch
from mpi4py import MPI

import dynatrain
from dynatrain import _abort, _agree, _watchdog
from conftest import fill_oracle, oracle_mismatches

HERE = pathlib.Path(__file__).resolve().parent
TIMEOUT = 60  # seconds per mpirun; every case must end well before it
# In-process cases return early on ranks a config leaves idle, so under mpirun the ranks would
# make different calls; the multi-process cases start their own mpirun.
pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="starts its own mpirun / runs in one process")


def run_case(case, np=2, env=None, *args):
    cmd = ["timeout", str(TIMEOUT), shutil.which("mpirun") or "mpirun", "-np", str(np), sys.executable,
           str(HERE / "hostile_cases.py"), case, *args]
    t0 = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env={**os.environ, **(env or {})})
    seconds = time.monotonic() - t0
    out = run.stdout + run.stderr
    assert run.returncode not in (-11, 139) and "Segmentation fault" not in out and "signal 11" not in out, out
    assert run.returncode != 124 and seconds < TIMEOUT - 10, f"hung ({seconds:.0f} s):\n{out}"
    return run.returncode, out


def assert_ok(case, np=2, *args):
    rc, out = run_case(case, np, None, *args)
    assert rc == 0 and "ok" in out.split(), out
    return out


@pytest.mark.parametrize("case", ["view_outlives_manager", "view_after_switch", "duplicate_names",
                                  "view_read_by_a_thread_during_switches"])
def test_views_and_names_np2(case):
    assert_ok(case)


@pytest.mark.parametrize("np", [2, 4])
def test_different_switch_targets_raise_everywhere_nothing_moved(np):
    out = assert_ok("switch_targets_differ", np)
    assert "switch arguments: not equal on every rank: rank 1 has at ['to_cfg'] 'dp=" in out


@pytest.mark.parametrize("case", ["different_calls", "extras_differ"])
def test_ranks_in_different_calls_or_with_different_extras_raise_on_every_rank_nothing_moved(case):
    assert_ok(case)


def test_models_that_differ_raise_on_every_rank():
    out = assert_ok("models_differ")
    assert "rank 1 has at ['model']['tensors'][0][1][0] 2112 where rank 0 has 2048" in out


def test_exception_in_the_loop_on_one_rank_ends_the_job():
    rc, out = run_case("error_in_loop")
    assert rc == 1 and "dynatrain: error: rank 1: RuntimeError: boom in the training loop" in out, out
    assert "Traceback" in out


def test_getter_raising_on_one_rank_ends_the_job():
    rc, out = run_case("getter_raises")
    assert rc == 1 and "extra state get() failed on rank 1: KeyError: 'data position lost'" in out, out


def test_getter_raising_raises_on_every_rank_before_anything_moves():
    assert_ok("getter_raises", 2, "caught")


def test_silent_peer_is_caught_by_the_watchdog():
    rc, out = run_case("silent_peer", 2, {"DT_WATCHDOG_S": "60"})  # the switch's deadline is 2 s (watchdog_s)
    assert rc == 3 and "dynatrain: error: rank 0: no progress for 2 s in Manager.switch to 'tp=2,dp=1'" in out, out


# ---- in-process ----
def small_manager(world):
    """Fixed processes (elastic=False): a larger layout or a vacate list is refused, never a grow
    that would start copies of pytest."""
    m = dynatrain.Manager(world, "tiny-dense", "tp=1", bucket_elems=5000, states="param,master", elastic=False)
    fill_oracle(m)
    return m


def test_every_use_of_a_stale_view_raises_and_the_new_state_is_intact(world):
    m = small_manager(world)
    if not m.active:
        return
    w = m.tensors("param")["layers.0.mlp.fc1.weight"]
    shape = tuple(w.shape)
    m.switch("tp=1,zero=0")
    uses = [lambda: w.sum(), lambda: w.add_(1), lambda: w.fill_(3.0), lambda: w.copy_(torch.ones(shape)),
            lambda: w.__setitem__((0, 0), 1.0), lambda: w[0], lambda: w.numel(), lambda: w.tolist(),
            lambda: torch.mm(w, w), lambda: torch.ones(shape).copy_(w), lambda: w.view(-1), lambda: bool(w)]
    for use in uses:
        with pytest.raises(dynatrain.StaleTensorError, match=re.escape(f"tensor 'layers.0.mlp.fc1.weight' (param), "
                                                                       f"shape {shape}, float32, is from before switch 1")):
            use()
    assert "StaleTensor" in repr(w) and "from before switch 1" in f"{w}" and hash(w) == hash(w)
    assert oracle_mismatches(m) == []


def test_views_handed_out_are_not_touched_by_a_rejected_switch(world):
    m = small_manager(world)
    w = m.buffers("param")
    with pytest.raises(ValueError, match="needs"):
        m.switch(f"dp={2 * world.size}")
    with pytest.raises(ValueError, match=r"vacate needs a Manager whose processes may change \(elastic=True\)"):
        m.switch("tp=1", vacate=[0])
    assert all(not isinstance(b, dynatrain.StaleTensor) for b in w) and oracle_mismatches(m) == []


def test_derived_views_keep_their_old_bytes_and_warn(world):
    m = small_manager(world)
    if not m.active:
        return
    derived = m.buffers("master")[0][:10]
    old = derived.clone()
    with pytest.warns(RuntimeWarning, match="stay allocated"):
        m.switch("tp=1,zero=0")
    assert torch.equal(derived, old)
    derived.fill_(-1.0)
    assert oracle_mismatches(m) == []
    del derived
    assert m.pool_stats()["deferred_bytes"] == 0 and m.pool_stats()["pinned_buffers"] == len(
        [b for b in m.buffers("param") + m.buffers("master") if b.numel()])


def test_duplicate_names_are_refused_by_python_and_native(world):
    T = dynatrain.Tensor
    dup = dynatrain.Model([T("w", [8], layer=0), T("v", [4], layer=0), T("w", [2], layer=0)], layers=1, name="dup")
    with pytest.raises(ValueError, match="model 'dup' has two tensors named 'w'; tensor names must be unique"):
        dynatrain.Manager(world, dup, "tp=1")
    with pytest.raises(ValueError, match="model 'dup' has two tensors named 'w'"):
        dynatrain.plan(dup, "tp=1", "tp=1")  # vps::Layout refuses it too


class FakeComm:
    """An allgather over simulated ranks: this rank's value plus the others' given ones."""
    def __init__(self, others):
        self.others = list(others)
        self.calls = 0

    def allgather(self, mine):
        self.calls += 1
        other = self.others.pop(0)
        what = mine[0]
        return [mine] + [(what, o) for o in other]


def test_agree_names_what_and_the_ranks_that_differ():
    digest = _agree._digest
    comm = FakeComm([[(digest("tp=2"), None), (digest("tp=4"), None), (digest("tp=4"), None)],
                     ["tp=4", "tp=4", "tp=4"]])
    with pytest.raises(ValueError, match=r"^switch target: not equal on every rank: ranks 2, 3 have 'tp=4' "
                                         r"where rank 0 has 'tp=2'$"):
        _agree.agree(comm, "switch target", "tp=2")
    comm = FakeComm([[(None, "TypeError: cannot pickle 'generator' object")]])
    with pytest.raises(ValueError, match="cannot compare across ranks: rank 1: TypeError: cannot pickle"):
        _agree.agree(comm, "x", 1)
    comm = FakeComm([[(digest({"a": [1, 2]}), None)]])
    _agree.agree(comm, "x", {"a": [1, 2]})
    assert comm.calls == 1  # equal values: one allgather


def test_together_raises_on_every_rank():
    comm = FakeComm([[("KeyError", "'k'", False)]])
    with pytest.raises(dynatrain.PeerError, match=r"step failed on rank 1: KeyError: 'k'"):
        _agree.together(comm, "step", lambda: 1)
    comm = FakeComm([[("ValueError", "bad", True)]])
    with pytest.raises(ValueError, match="step failed on rank 1: ValueError: bad"):
        _agree.together(comm, "step", lambda: 1)
    comm = FakeComm([[None]])
    with pytest.raises(ZeroDivisionError):
        _agree.together(comm, "step", lambda: 1 / 0)


def test_ranks_in_different_calls_raise_on_every_rank():
    class Skewed(FakeComm):
        def allgather(self, mine):
            return [mine, ("gather arguments (name, kind)", (None, None))]
    with pytest.raises(ValueError, match=r"^ranks are in different collective calls: rank 0 in 'switch arguments'; "
                                         r"rank 1 in 'gather arguments \(name, kind\)'; every rank must make the same"):
        _agree.agree(Skewed([]), "switch arguments", "tp=2")


def test_watchdog_and_abort_settings(world, monkeypatch, capfd):
    with pytest.raises(ValueError, match=r"watchdog deadline -1 s; valid: >= 0 seconds \(0 = off\)"):
        dynatrain.Manager(world, "tiny-dense", "tp=1", watchdog_s=-1)
    monkeypatch.delenv("DYNATRAIN_WATCHDOG_S", raising=False)
    monkeypatch.delenv("DT_WATCHDOG_S", raising=False)
    assert _watchdog.base_seconds() == 60  # the CLI's default: one setting
    monkeypatch.setenv("DT_WATCHDOG_S", "soon")
    with pytest.raises(ValueError, match=r"DT_WATCHDOG_S='soon' is not a number of seconds; valid: >= 0 \(0: no"):
        _watchdog.base_seconds()
    monkeypatch.setenv("DT_WATCHDOG_S", "0")
    assert _watchdog.base_seconds() == 0 and _watchdog.base_seconds(7) == 7
    # the former name: read where DT_WATCHDOG_S is unset, saying once that it is deprecated
    monkeypatch.delenv("DT_WATCHDOG_S")
    monkeypatch.setenv("DYNATRAIN_WATCHDOG_S", "5")
    assert _watchdog.base_seconds() == 5 and _watchdog.base_seconds() == 5
    assert capfd.readouterr().err.count("DYNATRAIN_WATCHDOG_S is deprecated; set DT_WATCHDOG_S") == 1
    monkeypatch.setenv("DT_WATCHDOG_S", "9")
    assert _watchdog.base_seconds() == 9
    monkeypatch.setenv("DYNATRAIN_ABORT_ON_ERROR", "0")
    assert not _abort.enabled()
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert _abort.launched_with_peers()
