"""job.lend(n) / job.reclaim() under mpirun -np 2 and 4: the training state leaves the last n
processes and comes back in planned switches over the same processes. Every byte of every
parameter is the same after each phase shift; training across them equals a plain
single-process torch run within fp32 noise; the lent processes hold no state; from the second
round on a lend or reclaim creates no process group and no process. job.refit(): every byte of
the weights-only copy, the user's module's tensor-parallel forward on it, the refusals."""
import os

import pytest
import torch
from mpi4py import MPI

from lend_common import DIMS, GPT, batch, loss_of, train_step, whole
from lend_common import adopted as adopted_on

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.size not in (2, 4), reason="runs under mpirun -np 2 and 4")


def adopted(world):
    return adopted_on(world.size)


def test_lend_and_reclaim_move_every_byte_and_training_equals_plain_torch(world):
    job, model, optimizer, plain, plain_opt = adopted(world)
    first, pid, n = job.config["config"], os.getpid(), world.size // 2
    worst, step = 0.0, 0
    for round_ in range(3):
        worst = max(worst, train_step(job, model, optimizer, plain, plain_opt, step))
        step += 1
        before = whole(job)
        lent = job.lend(n)
        assert lent["lent"] == list(range(world.size - n, world.size)) and lent["new_processes"] == 0
        assert job.config["world_size"] == world.size - n and job.manager.comm.size == world.size
        mine = world.rank >= world.size - n
        assert job.active is not mine
        if mine:  # no training state left here: nothing in the pool, empty parameters
            assert job.manager.pool_stats()["live_bytes"] == 0
            assert all(p.numel() == 0 for p in model.parameters())
        after = whole(job)
        assert all(torch.equal(before[k], after[k]) for k in before)  # every byte where it was
        # Grads not moved and not zeroed in the pause: None (as after zero_grad(set_to_none=True))
        # until the next forward or zero_grad() zeroes them; a rank that kept its grads buffer
        # still holds the last step's there, so a step accumulating into them would differ.
        assert all(p.grad is None for p in model.parameters()) and lent["max_rank_bytes_zeroed"] == 0
        assert isinstance(lent["committed_ahead_bytes"], int)  # the engine's commits before the exchange
        worst = max(worst, train_step(job, model, optimizer, plain, plain_opt, step, zero_grad=False))  # lent
        step += 1
        back = job.reclaim()
        assert back["reclaimed"] == lent["lent"] and back["new_processes"] == 0
        assert job.config["config"] == first and job.active and os.getpid() == pid
        assert all(p.grad is None for p in model.parameters()) and back["max_rank_bytes_zeroed"] == 0
        optimizer.zero_grad()  # zeroes and binds them
        assert all(p.grad is not None and not bool(p.grad.any()) for p in model.parameters())
        if round_ > 0:  # the groups of both layouts come from the cache
            assert lent["new_groups"] == 0 and back["new_groups"] == 0, (lent["new_groups"], back["new_groups"])
    assert worst <= 1e-5, worst
    for name, p in plain.named_parameters():
        if name.endswith("attn.k.bias"):  # softmax ignores it: its grad is rounding noise, which Adam scales up
            continue
        assert torch.allclose(job.full(name), p.detach(), rtol=1e-3, atol=1e-4), name


def test_lend_refusals_move_nothing(world):
    job, model, optimizer, _, _ = adopted(world)
    size = world.size
    for bad, text in [(0, "valid: an int from 1"), (size, "valid: an int from 1"), (True, "valid: an int")]:
        with pytest.raises(ValueError, match=text):
            job.lend(bad)
    if size == 4:
        with pytest.raises(ValueError, match="3 processes stay .* not a multiple of tp=2"):
            job.lend(1)
        with pytest.raises(ValueError, match="that layout has 1 ranks"):
            job.lend(2, "tp=1")
    with pytest.raises(ValueError, match="no process is lent"):
        job.reclaim()
    assert job.config["world_size"] == size and job.active
    job.lend(size // 2)
    with pytest.raises(ValueError, match=r"job.switch\(\) while processes .* are lent .*job.reclaim\(\) first"):
        job.switch("tp=1")
    with pytest.raises(ValueError, match=r"job.lend\(\) while processes"):
        job.lend(1)
    if job.active:  # a reclaim refused between backward() and the step leaves the processes lent
        loss_of(model, job.local_batch(batch(0, 8, DIMS["vocab"], DIMS["seq"]))).backward()
    with pytest.raises(ValueError, match=r"between backward\(\) and optimizer.step\(\)"):
        job.reclaim()
    assert job.lent == list(range(size - size // 2, size)) and job.config["world_size"] == size - size // 2
    optimizer.step()
    job.reclaim()
    assert job.config["world_size"] == size and job.active and job.lent == []


def holds(extra, weights):
    """Whether `extra` pool bytes are the copy's rounding: under a page per buffer."""
    return 0 <= extra < 4096 * len(weights.manager.buffers("param"))


def test_refit_copies_the_weights_into_an_inference_layout_on_the_lent_processes(world):
    job, model, optimizer, plain, plain_opt = adopted(world)
    train_step(job, model, optimizer, plain, plain_opt, 0)
    n = world.size // 2
    infer = "tp=2" if world.size == 4 else "tp=1"
    tokens = batch(5, 4, DIMS["vocab"], DIMS["seq"])[:, :-1]
    reader, module = GPT(**DIMS), GPT(**DIMS)
    for round_ in range(2):
        job.lend(n)
        before = whole(job)
        weights = job.refit(infer, module)  # round 1: the same module, a refresh of the copy
        assert weights.ranks == job.lent == list(range(world.size - n, world.size))
        assert weights.active == (world.rank >= world.size - n)
        assert all(torch.equal(before[k], v) for k, v in whole(job).items())  # the training state is only read
        for name, full in before.items():  # every byte of the copy, gathered over the copy's layout
            assert torch.equal(weights.manager.gather(name, "param"), full), name
        stats = weights.last_stats
        assert stats["new_groups"] == (0 if round_ else stats["new_groups"]) and (round_ or stats["new_groups"] > 0)
        if weights.active:  # the copy sits in the memory the lent training state gave back
            assert holds(job.manager.pool_stats()["live_bytes"] - weights.manager._state_bytes(), weights)
            assert weights.manager.pool_stats()["reserved_bytes"] == 0
        if weights.active:  # the user's model class, tensor-parallel over the copy's tp group
            reader.load_state_dict(before)
            with torch.no_grad():
                assert torch.allclose(weights.module(tokens), reader(tokens), rtol=1e-5, atol=1e-6)
            assert all(not p.requires_grad for p in weights.module.parameters())
        if round_ == 0:  # a bf16 copy onto the lent processes: cast by the senders, bf16 on the link
            half = job.refit(infer, GPT(**DIMS), dtype=torch.bfloat16)
            assert_bf16_copy(half, before, stats)
            half.release()
        job.reclaim()
        train_step(job, model, optimizer, plain, plain_opt, 1 + round_)


def assert_bf16_copy(half, full, fp32_stats, moved="max_rank_bytes_received"):
    """A bf16 copy of the fp32 weights `full`: every element is its fp32 value cast to bf16 (round to
    nearest even, as torch), the module's parameters view the copy, half the fp32 copy's bytes
    `moved` (received, or kept where every process holds its part already)."""
    for name, value in full.items():
        assert torch.equal(half.manager.gather(name, "param"), value.to(torch.bfloat16)), name
    views = half.manager.tensors("param") if half.active else {}
    for name, p in half.module.named_parameters():
        assert p.dtype == torch.bfloat16, name
        if half.active:
            assert p.data_ptr() == views[name].data_ptr(), name  # no cast on arrival: the copy itself
    got, fp32 = half.last_stats[moved], fp32_stats[moved]
    assert 2 * got == fp32 > 0, (got, fp32)


def test_refit_onto_every_process_and_its_refusals(world):
    job, model, optimizer, plain, plain_opt = adopted(world)
    infer = "tp=2,dp=2" if world.size == 4 else "tp=2"
    training = job.manager.pool_stats()["live_bytes"]
    weights = job.refit(infer, GPT(**DIMS))
    assert weights.ranks == list(range(world.size)) and weights.active
    assert holds(job.manager.pool_stats()["live_bytes"] - training - weights.manager._state_bytes(), weights)
    for name, full in whole(job).items():
        assert torch.equal(weights.manager.gather(name, "param"), full), name
    half = job.refit(infer, GPT(**DIMS), dtype=torch.bfloat16)  # each process casts its own part
    assert_bf16_copy(half, whole(job), weights.last_stats, "bytes_kept")
    with pytest.raises(ValueError, match="differ from the job's model"):
        job.refit(infer, GPT(**dict(DIMS, ffn=64)))
    with pytest.raises(ValueError, match="distinct world ranks"):
        job.refit("tp=2", GPT(**DIMS), ranks=[0, 0])
    with pytest.raises(ValueError, match="an adopted model"):
        job.refit(infer, model)
    with pytest.raises(ValueError, match="this module views another copy"):
        job.refit(infer, weights.module, dtype=torch.bfloat16)
    weights.release()
    assert holds(job.manager.pool_stats()["live_bytes"] - training - half.manager._state_bytes(), half)  # half stays
    assert all(p.numel() == 0 for p in weights.module.parameters())
