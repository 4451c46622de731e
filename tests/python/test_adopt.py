"""dynatrain.adopt: an ordinary nn.Module and torch.optim optimizer on the Manager's state. The
model is described from its parameters and the plan; every switch keeps the same Parameter
objects and optimizer.state entries holding exactly the values from before; training equals a
plain single-process torch run (computed on each rank) within fp32 noise. Any world size."""
import copy
import math
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mpi4py import MPI

import dynatrain
from conftest import REPO

sys.path.append(str(REPO / "examples"))
from gpt_model import GPT, batch  # noqa: E402

PLAN = {"tok": "vocab", "head": "vocab", "*.[qkv]": "column", "*.fc1": "column", "*.proj": "row", "*.fc2": "row"}
DIMS = dict(vocab=50, hidden=16, heads=4, ffn=32, layers=2, seq=8)  # vocab 50: padded rows at every tp
DIV = 8
# Layouts visited in order; only those using exactly the job's ranks.
LAYOUTS = ["tp=1,zero=0", "tp=1,zero=2", "tp=1", "dp=2,zero=0", "tp=2", "dp=2,zero=2", "dp=2", "tp=2,zero=0",
           "tp=2,dp=2", "dp=4,zero=2", "dp=4", "tp=4", "tp=2,dp=2,zero=2", "tp=2,dp=2,zero=0", "dp=4,zero=0",
           "tp=4,zero=0"]


def layouts(size):
    def ranks(cfg):
        sizes = dict(kv.split("=") for kv in cfg.split(","))
        return int(sizes.get("tp", 1)) * int(sizes.get("dp", 1))
    return [c for c in LAYOUTS if ranks(c) == size]


def small_gpt(dtype=torch.float32):
    torch.manual_seed(0)
    return GPT(**DIMS).to(dtype)


def local_piece(full, tensor, cfg):
    """This rank's local shard of a whole tensor, computed here from the description alone."""
    tp, r = cfg["tp"], cfg["tp_rank"]
    if tensor.split == "replicated":
        return full
    if tensor.split == "dim":
        return full.chunk(tp, tensor.dim)[r]
    rows = -(-full.shape[0] // (DIV * tp)) * DIV * tp  # vocab: padded to a multiple of DIV * tp
    padded = torch.cat([full, torch.zeros((rows - full.shape[0],) + tuple(full.shape[1:]), dtype=full.dtype)])
    return padded.chunk(tp)[r]


def adopt(model, optimizer, layout, **kw):
    return dynatrain.adopt(model, optimizer, PLAN, layout, pipeline="blocks", vocab_divisible_by=DIV,
                           bucket_elems=3000, **kw)


def train_step(job, model, optimizer, step, global_batch=8):
    data = job.local_batch(batch(step, global_batch, DIMS["vocab"], DIMS["seq"]))
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1).float(), data[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    return job.average(loss).item()


# ---- description and refusals ----
def test_describe_reads_names_shapes_splits_and_stages():
    model = small_gpt()
    d = dynatrain.describe(model, PLAN, "blocks", vocab_divisible_by=DIV).model
    t = {x.name: x for x in d.tensors}
    assert [x.name for x in d.tensors] == [n for n, _ in model.named_parameters()] and d.layers == 2
    assert (t["tok.weight"].split, t["head.weight"].split) == ("vocab", "vocab")
    assert (t["blocks.1.attn.k.weight"].split, t["blocks.1.attn.k.weight"].dim) == ("dim", 0)
    assert (t["blocks.1.attn.k.bias"].split, t["blocks.0.fc1.bias"].dim) == ("dim", 0)
    assert (t["blocks.0.attn.proj.weight"].split, t["blocks.0.attn.proj.weight"].dim) == ("dim", 1)
    assert t["blocks.0.attn.proj.bias"].split == "replicated" and t["blocks.0.ln1.weight"].split == "replicated"
    assert [(t[n].stage, t[n].layer) for n in ("pos.weight", "blocks.1.fc2.bias", "lnf.bias")] == \
        [("pre", -1), ("layer", 1), ("post", -1)]
    assert t["blocks.0.fc1.weight"].shape == [32, 16] and t["tok.weight"].shape == [50, 16]


class Megatron(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4, 6))
        self.w.tensor_model_parallel, self.w.partition_dim = True, 1
        self.extra = nn.Parameter(torch.ones(8, 2))
        self.experts = nn.Parameter(torch.ones(4, 8, 2))


def test_describe_honours_megatron_attributes_and_parameter_keys():
    d = dynatrain.describe(Megatron(), {"extra": "column", "exp*": "expert"}).model
    t = {x.name: x for x in d.tensors}
    assert (t["w"].split, t["w"].dim) == ("dim", 1)
    assert (t["extra"].split, t["extra"].dim) == ("dim", 0)
    assert t["experts"].expert and t["experts"].split == "replicated"
    m = Megatron()
    m.w.partition_dim = 2
    with pytest.raises(ValueError, match=r"parameter 'w' has tensor_model_parallel=True and partition_dim=2; "
                                         r"valid partition_dim: 0..1"):
        dynatrain.describe(m, {})


def test_describe_refuses_bad_plans():
    model = small_gpt()
    with pytest.raises(ValueError, match="plan key 'blocks.*.mlp' matches no module or parameter of GPT"):
        dynatrain.describe(model, {"blocks.*.mlp": "column"})
    with pytest.raises(ValueError, match="plan key 'head': unknown style 'diagonal'; valid: column, row, vocab"):
        dynatrain.describe(model, {"head": "diagonal"})
    with pytest.raises(ValueError, match="plan style 'column' on module 'lnf' needs Linear, got LayerNorm"):
        dynatrain.describe(model, {"lnf": "column"})
    with pytest.raises(ValueError, match="give 'head' different styles"):
        dynatrain.describe(model, {"head": "vocab", "h*": "column"})
    with pytest.raises(ValueError, match="pipeline='lnf' must name a non-empty nn.ModuleList, got LayerNorm"):
        dynatrain.describe(model, {}, "lnf")
    model.head.weight = model.tok.weight  # tied, but only one of the two modules is styled
    with pytest.raises(ValueError, match="is shared by modules 'tok' \\(no style\\) and 'head' \\(vocab\\)"):
        dynatrain.describe(model, {"head": "vocab"})
    mixed = small_gpt()
    mixed.lnf.to(torch.bfloat16)
    with pytest.raises(ValueError, match="parameters must all be float32 or all bfloat16"):
        dynatrain.describe(mixed, {})


def test_adopt_refuses_optimizers_and_layouts(world):
    model = small_gpt()
    with pytest.raises(ValueError, match="optimizer torch.optim.rmsprop.RMSprop is not supported; valid: "
                                         "torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD"):
        adopt(model, torch.optim.RMSprop(model.parameters()), "tp=1")
    with pytest.raises(ValueError, match=r"torch.optim.Adam\(amsgrad=True\) is not supported"):
        adopt(model, torch.optim.Adam(model.parameters(), amsgrad=True), "tp=1")
    for layout, bad in (("pp=2", "pp=2"), ("tp=1,cp=2", "cp=2")):
        with pytest.raises(ValueError, match=f"layout '{layout}': an adopted model does not run {bad}; "
                                             "valid: tp, dp and zero=0/1/2/3"):
            adopt(model, torch.optim.AdamW(model.parameters()), layout)
    with pytest.raises(ValueError, match="layout 'ep=2': ep=2, etp=1 need an MoE block under the plan style 'experts'"):
        adopt(model, torch.optim.AdamW(model.parameters()), "ep=2")
    with pytest.raises(ValueError, match="tp=3"):  # the Manager's own check, on every rank
        adopt(model, torch.optim.AdamW(model.parameters()), "tp=3")
    other = small_gpt()
    with pytest.raises(ValueError, match="the optimizer holds a parameter of shape"):
        adopt(model, torch.optim.AdamW(other.parameters()), "tp=1")
    assert all(p.numel() > 0 for p in model.parameters())  # refused before anything was bound
    assert "forward" not in model.head.__dict__


@pytest.mark.skipif(MPI.COMM_WORLD.size == 1, reason="needs ranks that disagree")
def test_adopt_refuses_descriptions_that_differ_between_ranks(world):
    model = small_gpt()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3 * (1 + (world.rank == 1)))
    with pytest.raises(ValueError, match=r"the optimizer \(class, hyperparameters, parameter groups\)"):
        adopt(model, optimizer, "tp=1")
    other = small_gpt()
    with pytest.raises(ValueError, match="model description"):
        dynatrain.adopt(other, torch.optim.AdamW(other.parameters()), {} if world.rank else PLAN, "tp=1")
    with pytest.raises(ValueError, match="plan key 'nope' matches no module"):  # refused on one rank: on all
        dynatrain.adopt(other, torch.optim.AdamW(other.parameters()), {"nope": "row"} if world.rank else {}, "tp=1")


# ---- switches keep the same objects and every value ----
def snapshot(job, model, optimizer):
    """Whole tensors of every parameter and optimizer state entry, and the state's objects."""
    params = {n: job.full(n) for n, _ in model.named_parameters()}
    kinds = {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}
    state = {(n, k): job.full(n, kind) for n, _ in model.named_parameters() for k, kind in kinds.items()}
    steps = {n: float(optimizer.state[p]["step"]) for n, p in model.named_parameters()}
    return params, state, steps


def check_bound(job, model, optimizer, before, objects):
    params, state, steps = before
    cfg, tensors = job.config, {t.name: t for t in dynatrain.describe(model, PLAN, vocab_divisible_by=DIV).model.tensors}
    named = list(model.named_parameters())
    assert [id(p) for _, p in named] == objects[0]
    assert [id(s) for s in optimizer.state.values()] == objects[1]
    assert [id(p) for p in optimizer.state] == objects[0]
    zero_group = job.manager.group("dp_cp")
    for name, p in named:
        assert torch.equal(p.data, local_piece(params[name], tensors[name], cfg)), (cfg["config"], name)
        assert p.grad is not None and p.grad.shape == p.shape
        for key in ("exp_avg", "exp_avg_sq"):
            want = local_piece(state[(name, key)], tensors[name], cfg)
            got = optimizer.state[p][key]
            if cfg["zero"] >= 1:  # this rank's 1-D shard; the dp_cp group's shards in order make the whole
                got = torch.cat(zero_group.allgather(got))
                want = want.reshape(-1)
            assert torch.equal(got, want), (cfg["config"], name, key)
        assert float(optimizer.state[p]["step"]) == steps[name]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_switches_rebind_the_same_objects_to_the_same_values(world, dtype):
    cfgs = layouts(world.size)[:None if dtype == torch.float32 else 4]  # bf16: the first few kinds
    model = small_gpt(dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    job = adopt(model, optimizer, cfgs[0])
    for step in range(2):
        train_step(job, model, optimizer, step)
    objects = ([id(p) for p in model.parameters()], [id(s) for s in optimizer.state.values()])
    before = snapshot(job, model, optimizer)
    check_bound(job, model, optimizer, before, objects)
    for cfg in cfgs[1:] + cfgs[:1]:
        stats = job.switch(cfg)
        assert stats["config"] == job.config["config"]
        check_bound(job, model, optimizer, before, objects)
    assert job.step == 2
    losses = [train_step(job, model, optimizer, step) for step in (2, 3)]
    assert losses[1] < losses[0]


# ---- training equals plain torch ----
OPTIMIZERS = {
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=3e-3, weight_decay=0.05),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=3e-3, betas=(0.8, 0.9)),
    "SGD-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1),
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1),
}


def run_step(model, optimizer, data, replace_grads):
    """zero_grad(set_to_none=True), or grads replaced by new tensors behind the optimizer's back
    (the adopted step must keep them and add the backward's grads)."""
    if replace_grads:
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.01)
    else:
        optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    return loss


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_training_equals_plain_torch_across_switches(world, name):
    cfgs = layouts(world.size)
    model = small_gpt()
    plain = copy.deepcopy(model)
    plain_opt = OPTIMIZERS[name](plain.parameters())
    optimizer = OPTIMIZERS[name](model.parameters())
    job = adopt(model, optimizer, cfgs[-1])
    schedulers = [torch.optim.lr_scheduler.StepLR(o, 3, 0.5) for o in (plain_opt, optimizer)]  # built after adopt
    schedule = {2 * (i + 1): cfg for i, cfg in enumerate(cfgs)}
    worst = 0.0
    for step in range(2 * len(cfgs) + 2):
        if step in schedule:
            job.switch(schedule[step])
        data = batch(step, 8, DIMS["vocab"], DIMS["seq"])
        want = run_step(plain, plain_opt, data, step == 3).item()
        got = job.average(run_step(model, optimizer, job.local_batch(data), step == 3)).item()
        assert math.isfinite(want) and math.isfinite(got)
        for s in schedulers:
            s.step()
        worst = max(worst, abs(got - want) / abs(want))
    assert worst <= 1e-5, (name, worst)
    first_lr = OPTIMIZERS[name]([nn.Parameter(torch.zeros(1))]).defaults["lr"]
    assert optimizer.param_groups[0]["lr"] == plain_opt.param_groups[0]["lr"] < first_lr  # the schedulers stepped
    for (n, p), q in zip(model.named_parameters(), plain.parameters()):
        if not n.endswith("attn.k.bias"):  # softmax ignores it: its grad is rounding noise, which Adam scales up
            assert torch.allclose(job.full(n), q.detach(), rtol=1e-3, atol=1e-4), n


def two_steps_in_each_layout(job, model, optimizer, plain, plain_opt, cfgs):
    """Trains the adopted model two steps in each of `cfgs` beside a plain copy on the whole
    batch: every step's loss equal within 1e-5 relative."""
    for step in range(2 * len(cfgs)):
        if step % 2 == 0:
            job.switch(cfgs[step // 2])
        data = batch(step, 8, DIMS["vocab"], DIMS["seq"])
        want = run_step(plain, plain_opt, data, False).item()
        got = job.average(run_step(model, optimizer, job.local_batch(data), False)).item()
        assert abs(got - want) <= 1e-5 * abs(want), (job.config["config"], step, got, want)


def test_tied_embedding_and_head_train_like_plain_torch(world):
    model = small_gpt()
    model.head.weight = model.tok.weight
    plain = copy.deepcopy(model)
    plain_opt, optimizer = torch.optim.AdamW(plain.parameters(), lr=3e-3), torch.optim.AdamW(model.parameters(), lr=3e-3)
    cfgs = layouts(world.size)
    job = adopt(model, optimizer, cfgs[0])
    assert "head.weight" not in job.manager.names and model.head.weight is model.tok.weight
    two_steps_in_each_layout(job, model, optimizer, plain, plain_opt, cfgs)


class DenseMixture(nn.Module):
    """Every token through every expert, mixed by a gate: expert weights [experts, in, out]."""

    def __init__(self, vocab=50, hidden=16, experts=4):
        super().__init__()
        torch.manual_seed(1)
        self.embed, self.gate, self.head = nn.Embedding(vocab, hidden), nn.Linear(hidden, experts), nn.Linear(hidden, vocab)
        self.experts = nn.Parameter(torch.randn(experts, hidden, hidden) * 0.1)

    def forward(self, tokens):
        x = self.embed(tokens)
        mix = torch.einsum("bse,bsh,ehk->bsk", self.gate(x).softmax(-1), x, self.experts)
        return self.head(x + mix)


def test_expert_parameters_train_like_plain_torch(world):
    model = DenseMixture()
    plain = copy.deepcopy(model)
    plain_opt, optimizer = torch.optim.Adam(plain.parameters(), lr=1e-2), torch.optim.Adam(model.parameters(), lr=1e-2)
    cfgs = layouts(world.size)
    job = dynatrain.adopt(model, optimizer, {"embed": "vocab", "head": "vocab", "experts": "expert"}, cfgs[0],
                          vocab_divisible_by=DIV, bucket_elems=1000)
    assert any(b["expert"] for b in job.manager.buckets)
    two_steps_in_each_layout(job, model, optimizer, plain, plain_opt, cfgs)


def test_clip_grad_norm_equals_torch_on_the_whole_model(world):
    model = small_gpt()
    plain = copy.deepcopy(model)
    plain_opt, optimizer = torch.optim.SGD(plain.parameters(), lr=0.5), torch.optim.SGD(model.parameters(), lr=0.5)
    cfgs = layouts(world.size)
    job = adopt(model, optimizer, cfgs[0])
    for step, cfg in enumerate(cfgs + cfgs[:1]):
        job.switch(cfg)
        data = batch(step, 8, DIMS["vocab"], DIMS["seq"])
        norms = []
        for m, o, d, clip in ((plain, plain_opt, data, lambda: nn.utils.clip_grad_norm_(plain.parameters(), 0.5)),
                              (model, optimizer, job.local_batch(data), lambda: job.clip_grad_norm_(0.5))):
            o.zero_grad()
            F.cross_entropy(m(d[:, :-1]).flatten(0, 1), d[:, 1:].flatten()).backward()
            norms.append(float(clip()))
            o.step()
        assert norms[0] > 0.5 and abs(norms[1] - norms[0]) <= 1e-5 * norms[0], (cfg, norms)  # it clipped
    for (n, _), q in zip(model.named_parameters(), plain.parameters()):
        assert torch.allclose(job.full(n), q.detach(), rtol=1e-4, atol=1e-6), n


def test_zero_grad_set_to_none_keeps_the_managers_grads(world):
    model = small_gpt()
    optimizer = torch.optim.AdamW(model.parameters())
    job = adopt(model, optimizer, layouts(world.size)[-1])
    train_step(job, model, optimizer, 0)
    buffers = [(b.data_ptr(), b.data_ptr() + b.numel() * b.element_size()) for b in job.manager.buffers("grad")]

    def in_manager(t):
        return any(lo <= t.data_ptr() < hi for lo, hi in buffers) or t.numel() == 0
    for zero_grad in (optimizer.zero_grad, model.zero_grad):
        zero_grad(set_to_none=True)
        assert all(p.grad is not None and in_manager(p.grad) and not p.grad.any() for p in model.parameters())
    data = job.local_batch(batch(1, 8, DIMS["vocab"], DIMS["seq"]))
    F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten()).backward()
    assert all(in_manager(p.grad) for p in model.parameters())
    assert any(p.grad.any() for p in model.parameters())


def test_joined_process_switch_to_its_layout_is_local(world):
    model = small_gpt()
    job = adopt(model, torch.optim.SGD(model.parameters(), lr=0.1), layouts(world.size)[0])
    job._joined_pending = True  # as in a process that joined the job in this layout
    if world.rank == 0:  # no other rank takes part: a collective would hang here
        assert job.switch(job.config["config"])["joined"] is True


@pytest.mark.skipif(hasattr(dynatrain.Manager, "save"), reason="the Manager has checkpoints")
def test_save_without_checkpoint_support_says_so(world, tmp_path):
    model = small_gpt()
    job = adopt(model, torch.optim.SGD(model.parameters(), lr=0.1), "tp=1")
    with pytest.raises(NotImplementedError, match="has no save"):
        job.save(tmp_path)
    other = small_gpt()
    with pytest.raises(ValueError, match="resume= needs checkpoint support"):
        adopt(other, torch.optim.SGD(other.parameters(), lr=0.1), "tp=1", resume=tmp_path)
