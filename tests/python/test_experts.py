"""Expert parallelism for adopted MoE blocks (the plan style "experts"): where the experts are
held in each ep layout (content against the plain model's), the grads of one step against plain
torch (also with every token routed to one ep rank's experts, the other receiving nothing), a
checkpoint and a sharded state dict loaded into another ep layout, the full state dicts
(each expert under its plain name) into the plain model and optimizer and back, and the refusals
at adopt() and before a switch. One process or every rank of mpirun."""
import copy
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mpi4py import MPI

import dynatrain
from conftest import REPO

sys.path.append(str(REPO / "examples"))
from gpt_model import batch  # noqa: E402
from moe_model import SEQ, VOCAB, MoEModel  # noqa: E402

SIZE = MPI.COMM_WORLD.size
PLAN = {"tok": "vocab", "head": "vocab", "*.qkv": "qkv", "*.o": "row", "*.moe": "experts"}
needs_peers = pytest.mark.skipif(SIZE == 1, reason="needs more than one process")


def small(stacked=False, layers=1):
    torch.manual_seed(0)
    return MoEModel(layers=layers, stacked=stacked)


def stacked_of(model, member):
    return torch.stack([e.get_parameter(member).detach() for e in model.layers[0].moe.experts])


@needs_peers
@pytest.mark.parametrize("stacked", [False, True])
def test_each_ep_rank_holds_its_experts_and_a_switch_moves_them_exactly(world, stacked):
    model = small(stacked)
    plain = copy.deepcopy(model)
    job = dynatrain.adopt(model, torch.optim.AdamW(model.parameters()), PLAN, f"dp={SIZE},ep=2")
    names = ["layers.0.moe.w1", "layers.0.moe.w2"] if stacked else \
        [f"layers.0.moe.experts.{m}" for m in ("gate.weight", "up.weight", "down.weight")]
    whole = {n: plain.get_parameter(n).detach() if stacked else stacked_of(plain, n.split(".experts.")[1])
             for n in names}
    for layout in (f"dp={SIZE},ep=2", f"tp=2,dp={SIZE // 2},ep=2", f"dp={SIZE},ep={SIZE}",
                   f"tp=2,dp={SIZE // 2},etp=2", f"dp={SIZE}"):
        if layout != job.config["config"]:
            job.switch(layout)
        c, held = job.config, job.manager.tensors("param")
        per = 4 // c["ep"]
        for n in names:
            local = whole[n][c["ep_rank"] * per:(c["ep_rank"] + 1) * per]
            dim = 2 if n.endswith(("w1", "down.weight")) else 1
            local = local.chunk(c["etp"], dim=dim)[c["etp_rank"]]
            assert held[n].shape == local.shape and torch.equal(held[n], local), (layout, n)
            assert torch.equal(job.full(n), whole[n]), (layout, n)


@needs_peers
@pytest.mark.parametrize("layout", [f"dp={SIZE},ep=2", f"tp=2,dp={SIZE // 2},ep=2", f"tp=2,dp={SIZE // 2},etp=2"])
def test_one_step_of_expert_grads_in_ep_equals_plain_torch(world, layout):
    model = small()
    plain = copy.deepcopy(model)
    data = batch(0, 4, VOCAB, SEQ)

    def loss_of(m, d):
        return F.cross_entropy(m(d[:, :-1]).flatten(0, 1), d[:, 1:].flatten()) + 0.01 * m.aux_loss()
    loss_of(plain, data).backward()
    job = dynatrain.adopt(model, torch.optim.SGD(model.parameters(), lr=0.1), PLAN, layout)
    loss_of(model, job.local_batch(data)).backward()
    job.sync_grads()
    for member in ("gate.weight", "up.weight", "down.weight"):
        want = torch.stack([e.get_parameter(member).grad for e in plain.layers[0].moe.experts])
        got = job.full(f"layers.0.moe.experts.{member}", "grad")
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-4), member
    router = job.full("layers.0.moe.router.weight", "grad")
    assert torch.allclose(router, plain.layers[0].moe.router.weight.grad, atol=1e-6, rtol=1e-4)


class NoTopK(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(8, 4)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)) for _ in range(4))


class Holder(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.moe = moe


def refused(model, layout, match, plan=None, optimizer=None):
    with pytest.raises(ValueError, match=match):
        dynatrain.adopt(model, optimizer or torch.optim.AdamW(model.parameters()), plan or {"moe": "experts"},
                        layout)


def test_refusals_at_adopt_name_the_value_and_what_is_valid(world):
    refused(small(), "ep=3", r"ep=3 does not divide the 4 experts of 'layers.0.moe'; valid ep: 1, 2, 4", PLAN)
    refused(small(), "tp=1,etp=2", r"etp=2 must divide tp=1 for an adopted model .*valid etp: 1", PLAN)
    refused(small(), "ep=2", r"ep=2, etp=1 need an MoE block under the plan style 'experts'",
            {"tok": "vocab"})
    refused(Holder(NoTopK()), "dp=1", r"module 'moe': needs top_k, an int in 1..4 \(the experts per token\), "
                                     r"got None")
    bad = NoTopK()
    bad.top_k, bad.router = 2, nn.Linear(8, 3)
    refused(Holder(bad), "dp=1", r"needs router, an nn.Linear\(hidden, 4\) \(one logit per expert\)")
    odd = NoTopK()
    odd.top_k = 2
    odd.experts[3] = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 8))
    refused(Holder(odd), "dp=1", r"expert 3 has parameters .* every expert must be alike")
    model = small()
    half = [p for n, p in model.named_parameters() if ".experts.0." not in n]
    refused(model, "dp=1", r"the optimizer holds 3 of the 4 expert parameters stacked into 'layers.0.moe.experts.gate.weight'", PLAN,
            torch.optim.AdamW(half))
    refused(small(), "dp=1", r"plan style 'experts' on parameter 'layers.0.moe.router.weight'",
            {"*.router.weight": "experts"})
    refused(small(), "zero=3", r"zero=3 does not run the stacked nn.ModuleList experts of 'layers.0.moe'", PLAN)


@needs_peers
def test_a_switch_to_an_ep_the_experts_cannot_take_is_refused_before_anything_moves(world):
    model = small()
    job = dynatrain.adopt(model, torch.optim.AdamW(model.parameters()), PLAN, f"dp={SIZE}")
    before = job.full("layers.0.moe.experts.up.weight")
    with pytest.raises(ValueError, match="ep=3 does not divide the 4 experts"):
        job.switch(f"dp={SIZE},ep=3")
    with pytest.raises(ValueError, match="etp=2 must divide tp=1"):
        job.switch(f"dp={SIZE},etp=2")
    assert (job.config["dp"], job.config["ep"]) == (SIZE, 1) and torch.equal(job.full("layers.0.moe.experts.up.weight"), before)


@needs_peers
def test_a_checkpoint_and_sharded_state_dict_carry_the_stacked_experts_into_another_ep_layout(world, tmp_path):
    path = world.bcast(str(tmp_path) if world.rank == 0 else None, root=0)
    model = small()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    job = dynatrain.adopt(model, optimizer, PLAN, f"dp={SIZE},ep=2")
    for step in range(2):
        optimizer.zero_grad()
        data = job.local_batch(batch(step, 4, VOCAB, SEQ))
        F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten()).backward()
        optimizer.step()
    name = "layers.0.moe.experts.down.weight"
    want = {kind: job.full(name, kind) for kind in ("param", "exp_avg", "exp_avg_sq")}
    job.save(path)
    shards = world.allgather(job.sharded_state_dict())
    for load in ("resume", "shards"):
        other = small()
        opt = torch.optim.AdamW(other.parameters(), lr=1e-2)
        layout = f"tp=2,dp={SIZE // 2},ep={SIZE}"
        again = dynatrain.adopt(other, opt, PLAN, layout, resume=path) if load == "resume" else \
            dynatrain.adopt(other, opt, PLAN, layout)
        if load == "shards":
            again.load_sharded_state_dict(shards)
        assert again.step == 2, load
        for kind, whole in want.items():
            assert torch.equal(again.full(name, kind), whole), (load, kind)


@needs_peers
def test_full_state_dicts_name_each_expert_as_the_plain_model_does_and_load_back(world):
    model = small()
    plain = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    job = dynatrain.adopt(model, optimizer, PLAN, f"dp={SIZE},ep=2")
    for step in range(2):
        data = job.local_batch(batch(step, 4, VOCAB, SEQ))
        optimizer.zero_grad()
        F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten()).backward()
        optimizer.step()
    sd, osd = job.state_dict(), job.optimizer_state_dict()
    assert list(sd) == list(plain.state_dict())
    name = "layers.0.moe.experts.up.weight"
    for i in range(4):
        assert torch.equal(sd[f"layers.0.moe.experts.{i}.up.weight"], job.full(name)[i])
    plain_opt = torch.optim.AdamW(plain.parameters(), lr=1e-2)
    plain.load_state_dict(sd)  # the plain model's keys and shapes
    plain_opt.load_state_dict(osd)  # the plain optimizer's numbering: one entry per expert parameter
    numbers = {id(p): i for i, p in enumerate(plain.parameters())}
    for i, e in enumerate(plain.layers[0].moe.experts):
        assert torch.equal(osd["state"][numbers[id(e.up.weight)]]["exp_avg"], job.full(name, "exp_avg")[i])
    other = small(layers=1)
    opt = torch.optim.AdamW(other.parameters(), lr=1e-2)
    again = dynatrain.adopt(other, opt, PLAN, f"tp=2,dp={SIZE // 2},ep={SIZE}")
    other.load_state_dict(plain.state_dict())
    opt.load_state_dict(plain_opt.state_dict())
    for kind in ("param", "exp_avg", "exp_avg_sq"):
        assert torch.equal(again.full(name, kind), job.full(name, kind)), kind


@needs_peers
def test_every_token_routed_to_one_ep_rank_leaves_the_other_empty_and_still_equals_plain(world):
    model = small()
    with torch.no_grad():
        model.layers[0].moe.router.weight.zero_()  # equal logits: top-2 picks the same two experts for every token
    plain = copy.deepcopy(model)
    data = batch(0, 4, VOCAB, SEQ)
    loss = F.cross_entropy(plain(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
    loss.backward()
    picked = set(plain.layers[0].moe.router_logits.topk(2, dim=-1).indices.unique().tolist())
    assert picked in ({0, 1}, {2, 3})  # the experts of one rank at ep=2
    job = dynatrain.adopt(model, torch.optim.SGD(model.parameters(), lr=0.1), PLAN, f"dp={SIZE},ep=2")
    d = job.local_batch(data)
    mine = F.cross_entropy(model(d[:, :-1]).flatten(0, 1), d[:, 1:].flatten())
    mine.backward()
    assert abs(float(job.average(mine)) - float(loss)) <= 1e-5
    job.sync_grads()
    got = job.full("layers.0.moe.experts.gate.weight", "grad")
    want = torch.stack([e.gate.weight.grad if e.gate.weight.grad is not None else torch.zeros_like(e.gate.weight)
                        for e in plain.layers[0].moe.experts])
    idle = [e for e in range(4) if e not in picked]
    assert torch.allclose(got, want, atol=1e-6, rtol=1e-4) and not got[idle].any() and got[sorted(picked)].any()
