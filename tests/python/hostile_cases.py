"""The hostile-use cases of test_hostile.py, one per function: `mpirun -np N python3
hostile_cases.py CASE`. Each prints `ok` (rank 0) when the Manager behaved; the cases that must
end the job do so through dynatrain's excepthook or watchdog, and test_hostile.py checks the
exit code and the message."""
import gc
import sys
import time
import warnings

import torch
from mpi4py import MPI

import dynatrain
from conftest import box_indices, fill_oracle, oracle, oracle_mismatches

WORLD = MPI.COMM_WORLD
BIG = (2048, 1024)  # 8 MiB of float32 per state kind: page-mapped pool blocks


def model(extra_rows=0, duplicate=False):
    T = dynatrain.Tensor
    tensors = [T("big", [BIG[0] + extra_rows, BIG[1]], split="dim", dim=0, layer=0), T("norm", [1024], layer=0),
               T("head", [64, 1024], split="dim", dim=0, stage="post")]
    if duplicate:
        tensors.append(T("norm", [8], layer=0))
    return dynatrain.Model(tensors, layers=1)


def configs():
    n = WORLD.size
    return f"dp={n}", f"tp=2,dp={n // 2}"


def manager(**kw):
    m = dynatrain.Manager(WORLD, model(), configs()[0], states="param,master", **kw)
    fill_oracle(m)
    return m


def expected(m, name, kind):
    """What tensors(kind)[name] must hold on this rank (unsharded kinds)."""
    (lo, hi), = [(lo, hi) for n, _, lo, hi in m.segments(kind) if n == name]
    return oracle(m._ids[name], kind, box_indices(m.global_shape(name), lo, hi)).view(m.tensors(kind)[name].shape)


def expect_raise(kind, fn, *needles):
    try:
        fn()
    except kind as e:
        for needle in needles:
            assert needle in str(e), (needle, str(e))
        return str(e)
    raise AssertionError(f"expected {kind.__name__}")


def report_ok():
    WORLD.Barrier()
    if WORLD.rank == 0:
        print("ok", flush=True)


def view_outlives_manager():
    m = manager()
    w = m.tensors("param")["big"]
    want = expected(m, "big", "param")
    part = w[1:3]
    del m
    gc.collect()
    assert torch.equal(w, want)        # the lease keeps the native Manager and its pool alive
    w.add_(1.0)
    assert torch.equal(part, want[1:3] + 1.0)
    report_ok()


def view_after_switch():
    m = manager()
    w = m.tensors("param")["big"]
    flat = m.buffers("master")[0]
    seg = m.segments("param")[0][1]
    derived = w[:4].view(-1)           # the user's own view: a switch cannot reach its header
    old = derived.clone()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m.switch(configs()[1])
    assert any("stay allocated" in str(c.message) for c in caught), [str(c.message) for c in caught]
    msg = expect_raise(dynatrain.StaleTensorError, lambda: w.sum(), "tensor 'big' (param)", "from before switch 1")
    assert f"shape {BIG}, float32" in msg, msg  # dp: every rank holds all of it
    for use in (lambda: w.add_(1.0), lambda: w.__setitem__(0, 5.0), lambda: w.copy_(torch.zeros(3)),
                lambda: float(w[0, 0]), lambda: w.numpy(), lambda: torch.ones(1) + w, lambda: flat.fill_(7.0),
                lambda: seg.zero_(), lambda: w.shape):
        expect_raise(dynatrain.StaleTensorError, use, "from before switch 1")
    assert torch.equal(derived, old)   # the old bytes, pinned; not the new layout's
    derived.fill_(-12345.0)            # writes into the pinned old buffer only
    assert oracle_mismatches(m) == []  # the new state is untouched, every element
    assert torch.equal(m.tensors("param")["big"], expected(m, "big", "param"))
    report_ok()


def view_read_by_a_thread_during_switches():
    """A thread sums a view in a loop while the main thread switches: it must see the old values
    or StaleTensorError, never crash (torch computes without the GIL, so an op may be inside the
    view's memory when the switch invalidates it)."""
    import threading
    m = manager()
    holder, seen, stop = [m.tensors("param")["big"]], {"ok": 0, "stale": 0}, threading.Event()

    def reader():
        while not stop.is_set():
            try:
                holder[0].sum()
                seen["ok"] += 1
            except dynatrain.StaleTensorError:
                seen["stale"] += 1
    thread = threading.Thread(target=reader)
    thread.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the stale views the thread holds keep the old memory: it says so
        for i in range(30):
            m.switch(configs()[(i + 1) % 2])
            holder[0] = m.tensors("param")["big"]
    stop.set()
    thread.join()
    assert seen["ok"] > 0 and oracle_mismatches(m) == [], seen
    report_ok()


def switch_targets_differ():
    m = manager()
    w, before = m.tensors("param")["big"], m.config["config"]
    target = configs()[1] if WORLD.rank != 1 else configs()[0]
    msg = expect_raise(ValueError, lambda: m.switch(target), "switch arguments", "not equal on every rank", "rank 1 has")
    assert m.config["config"] == before
    assert torch.equal(w, expected(m, "big", "param"))  # nothing moved, the old views still valid
    assert oracle_mismatches(m) == []
    if WORLD.rank == 0:
        print(msg, flush=True)
    m.switch(configs()[1])             # and the Manager still works
    assert oracle_mismatches(m) == []
    report_ok()


def extras_differ():
    m = manager()
    if WORLD.rank == 1:
        m.register("rng", lambda: 0, lambda v: None)
    expect_raise(ValueError, lambda: m.switch(configs()[1]), "switch arguments: not equal on every rank",
                 "rank 1 has at ['registered extra state'] [('rng', False)] where rank 0 has []")
    assert oracle_mismatches(m) == []
    report_ok()


def different_calls():
    m = manager()
    call = (lambda: m.switch(configs()[1])) if WORLD.rank != 1 else (lambda: m.gather("norm", "param"))
    expect_raise(ValueError, call, "ranks are in different collective calls", "rank 1 in 'gather arguments")
    assert oracle_mismatches(m) == []  # nothing moved
    report_ok()


def models_differ():
    msg = expect_raise(ValueError, lambda: dynatrain.Manager(WORLD, model(extra_rows=64 * (WORLD.rank == 1)), "dp=1"),
                       "Manager arguments", "not equal on every rank", "rank 1 has at ['model']['tensors'][0]")
    if WORLD.rank == 0:
        print(msg, flush=True)
    report_ok()


def duplicate_names():
    expect_raise(ValueError, lambda: dynatrain.Manager(WORLD, model(duplicate=True), "dp=1"),
                 "two tensors named 'norm'")
    report_ok()


def error_in_loop():
    m = manager()
    if WORLD.rank == 1:
        raise RuntimeError("boom in the training loop")
    m.switch(configs()[1])             # the others wait here for rank 1: the excepthook ends the job
    time.sleep(60)


def getter_raises():
    m = manager()
    state = {"pos": 3}
    def get():
        if WORLD.rank == 1:
            raise KeyError("data position lost")
        return state["pos"]
    m.register("data_position", get, lambda v: state.update(pos=v))
    if len(sys.argv) > 2 and sys.argv[2] == "caught":
        w = m.tensors("param")["big"]
        expect_raise(KeyError if WORLD.rank == 1 else dynatrain.PeerError, lambda: m.switch(configs()[1]),
                     "data position lost")
        assert torch.equal(w, expected(m, "big", "param")) and oracle_mismatches(m) == []  # nothing moved
        report_ok()
        return
    m.switch(configs()[1])
    time.sleep(60)


def silent_peer():
    # The 2 s deadline from the switch on: the construction keeps DT_WATCHDOG_S's (test_hostile.py
    # sets 60 s), so that processes started seconds apart on a loaded machine do not trip it there.
    m = manager(watchdog_s=2.0)
    if WORLD.rank == 1:
        time.sleep(60)                 # never joins the switch
    m.switch(configs()[1])
    time.sleep(60)


if __name__ == "__main__":
    globals()[sys.argv[1]]()
