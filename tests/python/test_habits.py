"""PyTorch habits on an adopted model, against plain single-process torch computed on each rank:
a graph held across a switch, param groups and LR schedulers as job state, torch's clipping,
buffers, frozen parameters, full state dicts, and the misuses that must be clear errors on every
rank (a switch inside a step, a skipped step, adopting twice, model.to(), idle ranks)."""
import argparse
import copy
import math
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mpi4py import MPI

import dynatrain
from test_adopt import DIMS, DIV, PLAN, adopt, batch, layouts, small_gpt

SIZE = MPI.COMM_WORLD.size
needs_peers = pytest.mark.skipif(SIZE == 1, reason="needs more than one process")


def loss_of(model, data):
    return F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())


def data_at(step):
    return batch(step, 8, DIMS["vocab"], DIMS["seq"])


def step_both(job, pair, step, clip=None):
    """One step of the plain and the adopted (model, optimizer): (plain loss, adopted mean loss)."""
    losses = []
    for (model, optimizer), data in zip(pair, (data_at(step), job.local_batch(data_at(step)))):
        optimizer.zero_grad()
        loss = loss_of(model, data)
        loss.backward()
        if clip is not None:
            clip(model)
        optimizer.step()
        losses.append(loss)
    return losses[0].item(), job.average(losses[1]).item()


def close(a, b, tol=1e-5):
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-12)


# ---- a graph held across a switch ----
@needs_peers
def test_next_backward_works_with_the_previous_steps_graph_alive_and_an_old_one_is_stale(world):
    model = small_gpt()
    plain = copy.deepcopy(model)
    pair = ((plain, torch.optim.AdamW(plain.parameters(), lr=3e-3)), (model, torch.optim.AdamW(model.parameters(), lr=3e-3)))
    cfgs = layouts(SIZE)
    job = adopt(model, pair[1][1], cfgs[0])
    held = loss_of(model, job.local_batch(data_at(0)))  # the previous step's loss, kept as loops keep it
    held.backward(retain_graph=True)
    pair[1][1].step()
    pair[0][1].zero_grad()
    loss_of(plain, data_at(0)).backward()
    pair[0][1].step()
    target = next(c for c in cfgs if c.startswith("tp="))  # local shapes change
    job.switch(target)
    want, got = step_both(job, pair, 1)  # its backward runs while `held` is alive
    assert close(want, got), (want, got)
    with pytest.raises(dynatrain.StaleTensorError, match=rf"backward through a graph built before job.switch 1 "
                                                         rf"\(.* -> {target}\): a loss or output computed before"):
        held.backward()
    optimizer = pair[1][1]
    optimizer.zero_grad()  # the refused backward may have added to some grads
    want, got = step_both(job, pair, 2)
    assert close(want, got), (want, got)


# ---- param groups and LR schedulers are job state ----
def decay_groups(model, lr=3e-3):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=lr)


def warmup_cosine(optimizer):
    warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=2)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6)
    return torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cos], milestones=[2])


@pytest.mark.parametrize("how", ["register", "adopt"])  # job.register_scheduler() or adopt(scheduler=)
def test_param_groups_and_a_registered_scheduler_survive_a_resume_in_another_layout(world, tmp_path, how):
    path = world.bcast(str(tmp_path) if world.rank == 0 else None, root=0)
    cfgs = layouts(SIZE)
    model = small_gpt()
    plain = copy.deepcopy(model)
    plain_opt, optimizer = decay_groups(plain), decay_groups(model)
    plain_sched = warmup_cosine(plain_opt)
    if how == "adopt":
        sched = warmup_cosine(optimizer)
        job = adopt(model, optimizer, cfgs[0], scheduler=sched)
    else:
        job = adopt(model, optimizer, cfgs[0])
        sched = warmup_cosine(optimizer)
        job.register_scheduler(sched)
    for step in range(3):
        want, got = step_both(job, ((plain, plain_opt), (model, optimizer)), step)
        plain_sched.step()
        sched.step()
        assert close(want, got)
    optimizer.param_groups[1]["weight_decay"] = 0.01  # a hand-set option is carried too
    plain_opt.param_groups[1]["weight_decay"] = 0.01
    job.save(path)
    resumed = small_gpt()
    torch.manual_seed(5)
    for p in resumed.parameters():  # other values: the checkpoint must replace them
        p.data.normal_()
    opt2 = decay_groups(resumed, lr=1.0)
    if how == "adopt":
        sched2 = warmup_cosine(opt2)  # built as a restarted script builds it: from epoch 0
        job2 = adopt(resumed, opt2, cfgs[-1], resume=path, scheduler=[sched2])
    else:
        job2 = adopt(resumed, opt2, cfgs[-1], resume=path)
        sched2 = warmup_cosine(opt2)
        job2.register_scheduler(sched2)
    for step in range(3, 7):
        assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in plain_opt.param_groups], step
        assert opt2.param_groups[1]["weight_decay"] == 0.01
        want, got = step_both(job2, ((plain, plain_opt), (resumed, opt2)), step)
        plain_sched.step()
        sched2.step()
        assert close(want, got), (step, want, got)


@pytest.mark.parametrize("then", ["step", "save"])
def test_a_scheduler_step_after_a_step_that_did_not_count_is_undone(world, tmp_path, then):
    # A lost process's recovery returns from optimizer.step() without the step (_recover.py) and
    # holds the schedules as they stand; the loop's scheduler.step() after it is undone before
    # the next update and before a switch or a save reads the scheduler.
    from dynatrain import _habits
    path = world.bcast(str(tmp_path) if world.rank == 0 else None, root=0)
    model = small_gpt()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    job = adopt(model, optimizer, layouts(SIZE)[0], scheduler=sched)
    optimizer.step()
    sched.step()
    _habits.hold_schedules(job)  # as a recovered optimizer.step() leaves it
    sched.step()  # the loop's habit after every optimizer.step()
    assert optimizer.param_groups[0]["lr"] == 0.25 and sched.last_epoch == 2
    if then == "step":
        optimizer.step()  # the step done again: at the lr of the applied steps
        assert optimizer.param_groups[0]["lr"] == 0.5 and sched.last_epoch == 1
        sched.step()
        assert optimizer.param_groups[0]["lr"] == 0.25 and sched.last_epoch == 2
    else:
        job.save(path)  # reads the registered scheduler: the undone step is not saved
        assert optimizer.param_groups[0]["lr"] == 0.5 and sched.last_epoch == 1
        optimizer.step()  # nothing held any more: the lr stays
        assert optimizer.param_groups[0]["lr"] == 0.5


@needs_peers
def test_hyperparameters_that_differ_between_ranks_are_refused_at_adopt_and_at_a_switch(world):
    model = small_gpt()
    optimizer = decay_groups(model)
    optimizer.param_groups[1]["weight_decay"] = 0.0 if world.rank == 0 else 0.5
    with pytest.raises(ValueError, match=r"adopt\(\): the optimizer .* not equal on every rank: rank"):
        adopt(model, optimizer, layouts(SIZE)[0])
    model = small_gpt()
    optimizer = decay_groups(model)
    job = adopt(model, optimizer, layouts(SIZE)[0])
    optimizer.param_groups[0]["lr"] = 1e-3 * (1 + world.rank)
    with pytest.raises(ValueError, match=r"job.switch\(\): the optimizer's hyperparameters .* not equal"):
        job.switch(layouts(SIZE)[-1])


# ---- torch's clipping on adopted parameters ----
@pytest.mark.parametrize("how", ["norm2", "norm_inf", "value"])
def test_torch_clipping_on_adopted_parameters_clips_the_whole_model(world, how):
    clip = {"norm2": lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5),
            "norm_inf": lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.01, norm_type=math.inf),
            "value": lambda m: torch.nn.utils.clip_grad_value_(m.parameters(), 0.005)}[how]
    model = small_gpt()
    plain = copy.deepcopy(model)
    pair = ((plain, torch.optim.SGD(plain.parameters(), lr=0.5)), (model, torch.optim.SGD(model.parameters(), lr=0.5)))
    cfgs = layouts(SIZE)
    job = adopt(model, pair[1][1], cfgs[0])
    norms = []
    for step, cfg in enumerate(cfgs):
        job.switch(cfg)
        want, got = step_both(job, pair, step, clip=lambda m: norms.append(clip(m)))
        assert close(want, got), (cfg, want, got)
    if how != "value":
        for plain_norm, norm in zip(norms[0::2], norms[1::2]):
            assert float(plain_norm) > 0.01 and close(float(plain_norm), float(norm)), (plain_norm, norm)
    for (n, _), q in zip(model.named_parameters(), plain.parameters()):
        assert torch.allclose(job.full(n), q.detach(), rtol=1e-4, atol=1e-6), n
    with pytest.raises(ValueError, match="over parameters of 1 adopted job.s. and plain tensors"):
        torch.nn.utils.clip_grad_norm_(list(model.parameters()) + [nn.Parameter(torch.ones(2))], 1.0)


# ---- buffers, frozen parameters, a switch inside a step ----
class WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.gpt = small_gpt()
        self.register_buffer("scale", torch.ones(DIMS["vocab"]))
        self.register_buffer("cache", torch.zeros(3), persistent=False)

    def forward(self, tokens):
        return self.gpt(tokens) * self.scale


def adopt_wrapped(model, optimizer, layout, **kw):
    plan = {k if k.startswith("*") else "gpt." + k: style for k, style in PLAN.items()}
    return dynatrain.adopt(model, optimizer, plan, layout, vocab_divisible_by=DIV, bucket_elems=3000, **kw)


def test_buffers_are_synchronised_at_adopt_saved_and_carried(world, tmp_path):
    path = world.bcast(str(tmp_path) if world.rank == 0 else None, root=0)
    model = WithBuffers()
    model.scale.fill_(2.0 + world.rank)  # differs per rank: rank 0's wins, as with DDP
    plain = copy.deepcopy(model)
    plain.scale.fill_(2.0)
    pair = ((plain, torch.optim.Adam(plain.parameters(), lr=1e-2)), (model, torch.optim.Adam(model.parameters(), lr=1e-2)))
    job = adopt_wrapped(model, pair[1][1], layouts(SIZE)[0])
    assert torch.equal(model.scale, torch.full((DIMS["vocab"],), 2.0))
    model.scale[:5] = 3.0
    plain.scale[:5] = 3.0
    job.switch(layouts(SIZE)[-1])
    want, got = step_both(job, pair, 0)
    assert close(want, got) and model.scale[0] == 3.0
    job.save(path)
    again = WithBuffers()
    job2 = adopt_wrapped(again, torch.optim.Adam(again.parameters(), lr=1e-2), layouts(SIZE)[0], resume=path)
    assert torch.equal(again.scale, plain.scale)
    assert job2.state_dict()["scale"].equal(plain.scale)


def test_a_parameter_frozen_after_adoption_is_not_decayed(world):
    model = small_gpt()
    plain = copy.deepcopy(model)
    pair = ((plain, torch.optim.AdamW(plain.parameters(), lr=1e-2, weight_decay=0.5)),
            (model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.5)))
    cfgs = layouts(SIZE)
    job = adopt(model, pair[1][1], cfgs[0])
    for m in (plain, model):
        m.lnf.weight.requires_grad_(False)
        m.blocks[0].fc1.requires_grad_(False)
    before = job.full("blocks.0.fc1.weight")
    for step, cfg in enumerate(cfgs + cfgs):
        job.switch(cfg)
        pair[0][1].zero_grad(set_to_none=True)
        want, got = step_both(job, pair, step)
        assert close(want, got), (cfg, want, got)
    assert torch.equal(job.full("blocks.0.fc1.weight"), before)
    for (n, _), q in zip(model.named_parameters(), plain.parameters()):
        if not n.endswith("attn.k.bias"):  # softmax ignores it: its grad is rounding noise, which Adam scales up
            assert torch.allclose(job.full(n), q.detach(), rtol=1e-3, atol=1e-4), n


def test_a_switch_between_backward_and_step_is_refused_on_every_rank(world):
    model = small_gpt()
    optimizer = torch.optim.AdamW(model.parameters())
    cfgs = [f"dp={SIZE},zero=0", f"dp={SIZE},zero=2"]
    job = adopt(model, optimizer, cfgs[1])
    loss = loss_of(model, job.local_batch(data_at(0)))
    if world.rank == 0:
        loss.backward()  # one rank is enough: every rank refuses (at dp a backward is local)
    with pytest.raises(ValueError, match=r"job.switch\(\) between backward\(\) and optimizer.step\(\) \(layout "
                                         r"'tp=1,pp=1,dp=\d,zero=2'\): the grads of this step would not survive it"):
        job.switch(cfgs[0])
    optimizer.zero_grad()  # drops them: the switch goes ahead
    assert job.switch(cfgs[0])["config"] == job.config["config"]


# ---- misuse: clear errors on every rank ----
@needs_peers
def test_a_rank_that_skips_optimizer_step_is_an_error_on_every_rank(world):
    model = small_gpt()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    job = adopt(model, optimizer, f"dp={SIZE},zero=0")
    for step in range(2):
        optimizer.zero_grad()
        loss_of(model, job.local_batch(data_at(step))).backward()
        if step == 0 and world.rank == 1:
            continue  # skips the step once
        with pytest.raises(ValueError, match=r"optimizer.step\(\): the ranks are not at the same step .*rank 1: "
                                             r"step 0, 2 forward\(s\)"):
            optimizer.step()
        break


def test_adopting_a_model_twice_is_refused_by_name(world):
    model = small_gpt()
    adopt(model, torch.optim.SGD(model.parameters(), lr=0.1), layouts(SIZE)[-1])
    with pytest.raises(ValueError, match=r"GPT is already adopted \(parameter 'tok.weight' is bound"):
        adopt(model, torch.optim.SGD(model.parameters(), lr=0.1), layouts(SIZE)[0])


def test_a_manager_too_large_for_the_host_is_refused_at_once_naming_the_bytes(world):
    with pytest.raises(ValueError, match=r"Manager: model 'llama2-7b' in config 'tp=1' needs \d+ bytes .* GiB\) of "
                                         r"state on host .*MemAvailable"):
        dynatrain.Manager(world, "llama2-7b", "tp=1")


# ---- state dicts the PyTorch way ----
def test_full_state_dicts_load_into_the_plain_model_and_optimizer(world):
    model = small_gpt()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    cfgs = layouts(SIZE)
    job = adopt(model, optimizer, cfgs[-1])
    for step in range(2):
        loss_of(model, job.local_batch(data_at(step))).backward()
        optimizer.step()
        optimizer.zero_grad()
    full, opt_full = job.state_dict(), job.optimizer_state_dict()
    assert full["tok.weight"].shape == (DIMS["vocab"], DIMS["hidden"])  # no padding rows
    plain = small_gpt()
    plain.load_state_dict(full)
    plain_opt = torch.optim.AdamW(plain.parameters(), lr=3e-3)
    plain_opt.load_state_dict(opt_full)
    pair = ((plain, plain_opt), (model, optimizer))
    for step, cfg in enumerate(cfgs, start=2):
        job.switch(cfg)
        want, got = step_both(job, pair, step)
        assert close(want, got), (cfg, want, got)


def plain_run(steps):
    """Plain torch with decay groups and warmup + cosine, after `steps` steps."""
    model = small_gpt()
    optimizer = decay_groups(model)
    sched = warmup_cosine(optimizer)
    for step in range(steps):
        optimizer.zero_grad()
        loss_of(model, data_at(step)).backward()
        optimizer.step()
        sched.step()
    return model, optimizer, sched


def resumed_steps(job, model, optimizer, sched, steps):
    """Continues the job and a plain run from step 3: lr and every loss equal to plain torch."""
    plain, plain_opt, plain_sched = plain_run(3)
    assert job.step == 3
    for step in range(3, 3 + steps):
        assert [g["lr"] for g in optimizer.param_groups] == [g["lr"] for g in plain_opt.param_groups], step
        want, got = step_both(job, ((plain, plain_opt), (model, optimizer)), step)
        plain_sched.step()
        sched.step()
        assert close(want, got), (job.config["config"], step, want, got)


def scrambled(lr=1.0):
    model = small_gpt()
    torch.manual_seed(9)
    for p in model.parameters():  # other values: the load must replace them
        p.data.normal_()
    return model, decay_groups(model, lr=lr)


def test_a_sharded_state_dict_loads_into_another_layout_and_process_count(world, tmp_path):
    path = world.bcast(str(tmp_path) if world.rank == 0 else None, root=0)
    cfgs = layouts(SIZE)
    model, optimizer = scrambled(lr=3e-3)
    model.load_state_dict(small_gpt().state_dict())
    job = adopt(model, optimizer, [c for c in cfgs if "zero=2" in c][-1])  # grads and moments sharded over dp
    sched = warmup_cosine(optimizer)
    job.register_scheduler(sched)
    job.register("seen", lambda: 10 + world.rank, lambda v: None, per_rank=True)  # every rank's value, saved
    for step in range(3):
        step_both(job, (plain_run(0)[:2], (model, optimizer)), step)  # (the plain side is discarded)
        sched.step()
    torch.save(job.sharded_state_dict(), f"{path}/shard-{world.rank}.pt")
    world.Barrier()
    shards = [torch.load(f"{path}/shard-{r}.pt") for r in range(SIZE)]
    saved = sum(p["data"].numel() for s in shards for p in s["pieces"] if p["kind"] == "param")
    assert saved == sum(p.numel() for p in small_gpt().parameters())  # every element once: no replica, no padding
    model2, opt2 = scrambled()
    job2 = adopt(model2, opt2, cfgs[-1])  # another layout (tp=SIZE, zero=0), every process
    sched2 = warmup_cosine(opt2)
    job2.register_scheduler(sched2)  # registered before the load: the load sets it
    seen = []
    job2.register("seen", lambda: None, seen.append, per_rank=True)
    job2.load_sharded_state_dict(shards)
    assert seen == [[10 + r for r in range(SIZE)]]
    resumed_steps(job2, model2, opt2, sched2, 3)
    with pytest.raises(ValueError, match=rf"the shards of one save of {SIZE} processes at step 3 are ranks "
                                         rf"0..{SIZE - 1} once each; got ranks \[0, 0\]"):
        job2.load_sharded_state_dict(shards[:1] * 2)  # rank 0's twice (any other missing)
    if world.rank == 0:  # another process count: this process alone
        model3, opt3 = scrambled()
        job3 = dynatrain.adopt(model3, opt3, PLAN, "tp=1", comm=MPI.COMM_SELF, pipeline="blocks",
                               vocab_divisible_by=DIV, bucket_elems=3000)
        job3.load_sharded_state_dict(shards)
        sched3 = warmup_cosine(opt3)
        job3.register_scheduler(sched3)  # registered after the load: it gets the loaded state then
        resumed_steps(job3, model3, opt3, sched3, 2)
    world.Barrier()


def test_model_load_state_dict_after_adoption_takes_the_plain_models_dict(world):
    plain = small_gpt()
    model = small_gpt()
    torch.manual_seed(9)
    for p in model.parameters():  # other values: the load must replace them
        p.data.normal_()
    cfgs = layouts(SIZE)
    job = adopt(model, torch.optim.SGD(model.parameters(), lr=0.1), cfgs[-1])
    assert model.load_state_dict(plain.state_dict()).missing_keys == []
    for n, q in plain.named_parameters():
        assert torch.equal(job.full(n), q.detach()), n
    with pytest.raises(ValueError, match=r"model.load_state_dict\(\): 'tok.weight' has shape \(3, 16\), the whole "
                                         r"tensor's is \(50, 16\): pass a full state dict"):
        model.load_state_dict(dict(plain.state_dict(), **{"tok.weight": torch.zeros(3, 16)}))
    with pytest.raises(RuntimeError, match="missing keys"):
        model.load_state_dict({})


def test_optimizer_load_state_dict_after_adoption_takes_a_full_dict_and_refuses_a_local_one(world):
    plain = small_gpt()
    plain_opt = torch.optim.Adam(plain.parameters(), lr=1e-2)
    for step in range(2):
        plain_opt.zero_grad()
        loss_of(plain, data_at(step)).backward()
        plain_opt.step()
    model = copy.deepcopy(plain)
    optimizer = torch.optim.Adam(model.parameters(), lr=5.0)
    job = adopt(model, optimizer, layouts(SIZE)[-1])
    optimizer.load_state_dict(plain_opt.state_dict())
    assert optimizer.param_groups[0]["lr"] == 1e-2
    pair = ((plain, plain_opt), (model, optimizer))
    for step, cfg in enumerate(layouts(SIZE), start=2):
        job.switch(cfg)
        want, got = step_both(job, pair, step)
        assert close(want, got), (cfg, want, got)
    local = {"state": {0: {"exp_avg": torch.zeros(3, 3)}}, "param_groups": plain_opt.state_dict()["param_groups"]}
    with pytest.raises(ValueError, match=r"state 'exp_avg' of parameter 'tok.weight' has shape \(3, 3\), the whole "
                                         r"tensor's is \(50, 16\): pass a full state dict"):
        optimizer.load_state_dict(local)


def test_model_to_another_dtype_after_adoption_is_refused_and_a_no_op_is_fine(world):
    model = small_gpt()
    adopt(model, torch.optim.SGD(model.parameters(), lr=0.1), layouts(SIZE)[0])
    assert model.to(torch.float32) is model
    with pytest.raises(ValueError, match=r"GPT: moving or casting an adopted model \(model.to\(torch.bfloat16"):
        model.to(torch.bfloat16)
    with pytest.raises(ValueError, match="casting an adopted model"):
        model.blocks[0].double()
    assert all(p.dtype == torch.float32 for p in model.parameters())


# ---- idle ranks and a forgotten local_batch ----
@needs_peers
def test_an_idle_rank_forward_is_a_clear_error_and_the_rest_of_its_loop_runs(world):
    model = small_gpt()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    job = adopt(model, optimizer, f"dp={SIZE // 2},zero=0")  # the upper half of the processes idle
    assert job.active == (world.rank < SIZE // 2)
    data = data_at(0)
    if job.active:
        loss_of(model, job.local_batch(data)).backward()
    else:
        with pytest.raises(ValueError, match=r"GPT.forward on a process that holds no rank in layout .*skip the "
                                             r"step's compute while job.active is False"):
            model(data[:, :-1])
    optimizer.step()
    job.average(1.0)
    job.switch(f"dp={SIZE},zero=0")
    assert job.active


def forgotten_warnings(job, model, optimizer, data):
    optimizer.zero_grad()
    loss_of(model, data).backward()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizer.step()
    return [str(w.message) for w in caught if "every dp rank fed the model the same input" in str(w.message)]


@needs_peers
def test_a_forgotten_local_batch_warns(world):
    model = small_gpt()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    job = adopt(model, optimizer, f"dp={SIZE},zero=0")
    assert forgotten_warnings(job, model, optimizer, job.local_batch(data_at(0))) == []
    assert len(forgotten_warnings(job, model, optimizer, data_at(1))) == 1  # the whole batch on every dp rank


def test_a_scheduler_of_another_optimizer_is_refused_by_adopt(world):
    model = small_gpt()
    other = decay_groups(small_gpt())
    with pytest.raises(ValueError, match="does not schedule this optimizer"):
        adopt(model, decay_groups(model), layouts(SIZE)[0], scheduler=warmup_cosine(other))


def test_job_print_prints_on_rank_zero_only(world, capsys):
    model = small_gpt()
    job = adopt(model, decay_groups(model), layouts(SIZE)[0])
    job.print("from", "rank", world.rank, sep="-")
    assert capsys.readouterr().out == ("from-rank-0\n" if world.rank == 0 else "")


def test_parse_schedule_orders_steps_and_names_a_bad_entry(capsys):
    assert dynatrain.parse_schedule("6:tp=2; 0:dp=2,zero=0") == {0: "dp=2,zero=0", 6: "tp=2"}
    assert list(dynatrain.parse_schedule("6:tp=2;0:dp=2")) == [0, 6]
    for bad, match in [("0:dp=2;tp=2", "'tp=2': want STEP:LAYOUT"), ("0:dp=2;0:tp=2", "step 0 is given twice"),
                       ("-1:dp=2", "want STEP:LAYOUT"), ("0:tp=0", "'0:tp=0': "), ("", "want STEP:LAYOUT")]:
        with pytest.raises(dynatrain.ScheduleError, match=match):
            dynatrain.parse_schedule(bad)
    assert issubclass(dynatrain.ScheduleError, ValueError)
    ap = argparse.ArgumentParser(prog="train.py")
    ap.add_argument("--schedule", type=dynatrain.parse_schedule)
    with pytest.raises(SystemExit):
        ap.parse_args(["--schedule", "0:dp=2;x:tp=2"])
    assert "--schedule: schedule entry 'x:tp=2': want STEP:LAYOUT" in capsys.readouterr().err
