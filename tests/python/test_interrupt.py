"""A lost peer met between two steps (_interrupt.py): armed, the package's collectives on
torch.distributed keep the first error and return at once; the next optimizer.step() raises it
(raise_kept) for the recovery; unarmed, they raise. And what `dynatrain launch` tells a rank."""
import types

import pytest
import torch

from dynatrain import _abort, _c10d, _interrupt

GLOO = "[../gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:29500"


@pytest.fixture
def lost_peer(monkeypatch):
    """A Comm of 2 ranks whose every torch.distributed call fails as Gloo's does for a lost peer."""
    calls = []

    def fail(*args, **kwargs):
        calls.append(args)
        raise RuntimeError(GLOO)
    fake = types.SimpleNamespace(all_reduce=fail, all_gather=fail, broadcast=fail, barrier=fail,
                                 all_gather_object=fail, broadcast_object_list=fail)
    monkeypatch.setattr(_c10d, "_dist", lambda: fake)
    monkeypatch.setattr(_c10d, "abandon_groups", lambda: calls.append("abandon") or 0)  # this process's groups stay
    yield _c10d.Comm(object(), [0, 1], 0), calls
    _interrupt.arm(False)


def test_armed_collectives_keep_the_first_error_and_return_at_once(lost_peer):
    comm, calls = lost_peer
    t = torch.ones(3)
    _interrupt.arm(True)
    comm.all_reduce_(t)
    assert _interrupt.interrupted() and len(calls) == 2 and calls[1] == "abandon"  # the generation given up
    assert torch.equal(t, torch.ones(3))  # left as it was
    assert comm.allgather(5) == [5, 5] and comm.bcast("x") == "x" and comm.Barrier() is None
    assert len(calls) == 2  # after the first error no collective is tried
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        _interrupt.raise_kept()
    assert not _interrupt.interrupted()
    with pytest.raises(RuntimeError, match="Connection closed by peer"):  # disarmed by the step
        comm.all_reduce_(t)


def test_unarmed_collectives_raise(lost_peer):
    comm, _ = lost_peer
    _interrupt.arm(False)
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        comm.allgather(1)
    _interrupt.raise_kept()  # nothing kept: no error


def test_what_the_launcher_tells_a_rank(monkeypatch):
    monkeypatch.setenv("DYNATRAIN_LAUNCH", "end")
    assert _abort.launcher_ends_job()
    monkeypatch.setenv("DYNATRAIN_LAUNCH", "keep-going")
    assert not _abort.launcher_ends_job()
    assert _abort.peer_gone(RuntimeError(GLOO))
    assert not _abort.peer_gone(RuntimeError("boom")) and not _abort.peer_gone(ValueError(GLOO))
