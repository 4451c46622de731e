"""zero=3 on an adopted model, against plain single-process torch computed on each rank: the
parameters hold only this rank's shard between steps (bytes measured), are whole inside their
module's forward and backward, and every loss through switches into and out of zero=3 (dp, tp,
zero=2) equals plain torch within 1e-5; grad accumulation, clipping, a no-grad forward and
nn.MultiheadAttention too. Any world size (at one process the shard is the whole tensor)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mpi4py import MPI

import dynatrain
from test_adopt import DIMS, adopt, batch, small_gpt
from test_attention import EncoderLM, ENCODER_PLAN, train_both, with_adamw

SIZE = MPI.COMM_WORLD.size
TP = 2 if SIZE % 2 == 0 else 1


def schedule():
    """dp -> zero=3 -> tp,zero=2 -> tp,zero=3 -> zero=3 -> zero=1, on the job's processes."""
    dp, tp_dp = f"dp={SIZE}", f"tp={TP},dp={SIZE // TP}"
    return [f"{dp},zero=0", f"{dp},zero=3", f"{tp_dp},zero=2", f"{tp_dp},zero=3", f"{dp},zero=3", f"{dp},zero=1"]


def loss_of(model, data):
    return F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())


def data_at(step):
    return batch(step, 8, DIMS["vocab"], DIMS["seq"])


def close(a, b, tol=1e-5):
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-12)


def param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def both(make_optimizer=lambda ps: torch.optim.AdamW(ps, lr=3e-3)):
    model = small_gpt()
    plain = copy.deepcopy(model)
    return (plain, make_optimizer(plain.parameters())), (model, make_optimizer(model.parameters()))


def step_pair(job, pair, step, micro=1, clip=None):
    """One step of the plain and the adopted pair over `micro` micro-batches: (plain, adopted) loss."""
    losses = []
    for (model, optimizer), local in zip(pair, (False, True)):
        optimizer.zero_grad()
        total = 0.0
        for i in range(micro):
            data = data_at(step * micro + i)
            loss = loss_of(model, job.local_batch(data) if local else data) / micro
            loss.backward()
            total += job.average(loss).item() if local else loss.item()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(total)
    return losses


def test_switches_into_and_out_of_zero3_track_plain_torch_and_hold_a_shard_between_steps():
    pair = both()
    model = pair[1][0]
    cfgs = schedule()
    job = adopt(model, pair[1][1], cfgs[0])
    whole = param_bytes(pair[0][0])  # the plain model's parameters
    seen = {}
    def note(module, args):  # runs after the gather (hooks run in the order registered)
        seen["fc1"] = tuple(module.weight.shape)
    model.blocks[0].fc1.register_forward_pre_hook(note)
    for i, cfg in enumerate(cfgs):
        if job.config["config"] != cfg:
            job.switch(cfg)
        for step in (2 * i, 2 * i + 1):
            seen.clear()
            want, got = step_pair(job, pair, step)
            assert close(want, got), (cfg, step, want, got)
            if cfg == f"dp={SIZE},zero=3":
                assert seen["fc1"] == (DIMS["ffn"], DIMS["hidden"])  # whole inside its module's forward
                held = param_bytes(model)
                assert held <= 1.1 * whole / SIZE, (cfg, held, whole)
                assert all(p.dim() == 1 for p in model.parameters())  # this rank's shards
    full = job.state_dict()
    for name, p in pair[0][0].named_parameters():  # the k bias has no gradient (softmax): Adam's noise
        if not name.endswith("k.bias"):
                assert torch.allclose(full[name], p.detach(), rtol=1e-4, atol=1e-5), name


def test_zero3_accumulates_micro_batches_clips_and_keeps_shards_through_a_no_grad_forward():
    pair = both(lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9))
    model = pair[1][0]
    job = adopt(model, pair[1][1], f"dp={SIZE},zero=3")
    for step in range(3):
        want, got = step_pair(job, pair, step, micro=2, clip=0.5)
        assert close(want, got), (step, want, got)
        with torch.no_grad():  # an evaluation between steps gathers and puts the shards back
            got_eval, want_eval = model(data_at(50)[:, :-1]), pair[0][0](data_at(50)[:, :-1])
        assert torch.allclose(got_eval, want_eval, rtol=1e-4, atol=1e-5)
        assert all(p.dim() == 1 for p in model.parameters())
    job.switch(f"tp={TP},dp={SIZE // TP},zero=2")
    want, got = step_pair(job, pair, 3, micro=2, clip=0.5)
    assert close(want, got), (want, got)


def test_zero3_between_backward_and_step_puts_back_every_shard():
    pair = both()
    model = pair[1][0]
    job = adopt(model, pair[1][1], f"dp={SIZE},zero=3")
    loss = loss_of(model, job.local_batch(data_at(0)))
    assert all(p.dim() == 1 for p in model.parameters())  # the forward's post-hooks put them back
    loss.backward()
    assert all(p.dim() == 1 for p in model.parameters())  # so did the backward
    grads = {name: p.grad.shape for name, p in model.named_parameters()}
    assert grads["blocks.0.fc1.weight"] == (DIMS["ffn"], DIMS["hidden"])  # p.grad: this rank's whole local grad
    pair[1][1].step()
    pair[0][1].zero_grad()
    loss_of(pair[0][0], data_at(0)).backward()
    pair[0][1].step()
    want, got = step_pair(job, pair, 1)
    assert close(want, got), (want, got)


def test_multihead_attention_at_zero3_gathers_out_proj_with_it():
    model = with_adamw(EncoderLM())
    plain = with_adamw(copy.deepcopy(model))
    job = dynatrain.adopt(model, model.opt, ENCODER_PLAN, f"dp={SIZE},zero=3", vocab_divisible_by=2)
    train_both(job, plain, model, 2)
    job.switch(f"tp={TP},dp={SIZE // TP},zero=3")
    train_both(job, plain, model, 2, start=2)
    assert all(p.dim() == 1 for p in model.parameters())


def test_a_parameter_read_outside_its_modules_forward_is_a_clear_error():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb = nn.Embedding(10, 8)

        def forward(self, x):
            return F.linear(self.emb(x), self.emb.weight)  # reads emb.weight outside emb's forward

    model = Tied()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    job = dynatrain.adopt(model, opt, {}, f"dp={SIZE},zero=3")
    data = job.local_batch(torch.arange(2 * SIZE).remainder(10))
    with pytest.raises(ValueError, match=r"in the forward at zero=3 \(layout 'tp=1,pp=1,dp=\d,zero=3'\): .*a "
                                         r"parameter is whole only inside the forward of a module that holds it"):
        model(data).sum().backward()
    opt.zero_grad()
    job.switch(f"dp={SIZE},zero=2")
    model(data).sum().backward()
    opt.step()


def test_a_parameter_shared_by_two_modules_is_gathered_for_each():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb, self.head = nn.Embedding(10, 8), nn.Linear(8, 10, bias=False)
            self.head.weight = self.emb.weight  # tied the nn.Module way: one Parameter in both

        def forward(self, x):
            return self.head(torch.tanh(self.emb(x)))

    model = Shared()
    plain = copy.deepcopy(model)
    opt, plain_opt = torch.optim.AdamW(model.parameters(), lr=0.01), torch.optim.AdamW(plain.parameters(), lr=0.01)
    job = dynatrain.adopt(model, opt, {}, f"dp={SIZE},zero=3")
    for step in range(3):
        data = torch.randint(0, 10, (2 * SIZE, 5), generator=torch.Generator().manual_seed(step))
        losses = []
        for m, o, d in ((plain, plain_opt, data), (model, opt, job.local_batch(data))):
            o.zero_grad()
            loss = F.cross_entropy(m(d).flatten(0, 1), d.flatten())
            loss.backward()
            o.step()
            losses.append(loss)
        want, got = losses[0].item(), job.average(losses[1]).item()
        assert close(want, got), (step, want, got)


def test_a_graph_from_before_a_switch_out_of_zero3_is_stale_and_the_next_step_works():
    pair = both()
    model, optimizer = pair[1]
    job = adopt(model, optimizer, f"dp={SIZE},zero=3")
    held = loss_of(model, job.local_batch(data_at(0)))  # the previous step's loss, kept alive
    held.backward(retain_graph=True)
    optimizer.step()
    pair[0][1].zero_grad()
    loss_of(pair[0][0], data_at(0)).backward()
    pair[0][1].step()
    job.switch(f"tp={TP},dp={SIZE // TP},zero=3")
    want, got = step_pair(job, pair, 1)
    assert close(want, got), (want, got)
    if TP > 1:  # local shapes changed: the old graph cannot run
        with pytest.raises(dynatrain.StaleTensorError, match=r"backward through a graph built before job.switch 1"):
            held.backward()
        optimizer.zero_grad()
    want, got = step_pair(job, pair, 2)
    assert close(want, got), (want, got)
