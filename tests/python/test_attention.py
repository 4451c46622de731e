"""Attention at tp > 1 as people write it, against plain single-process torch computed on each
rank: nn.MultiheadAttention inside nn.TransformerEncoderLayer (training, eval through torch's
fused inference path, masks, need_weights), a fused qkv nn.Linear with a module that reads its
head count (tp_attrs), and the plans that cannot run at tp > 1, refused at adopt() or before a
switch moves anything."""
import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mpi4py import MPI

import dynatrain

SIZE = MPI.COMM_WORLD.size
VOCAB, HIDDEN, HEADS, SEQ = 40, 16, 4, 6
needs_peers = pytest.mark.skipif(SIZE == 1, reason="needs more than one process")


def close(a, b, tol=1e-5):
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-12)


def tokens(step, n=4):
    return torch.randint(0, VOCAB, (n, SEQ + 1), generator=torch.Generator().manual_seed(100 + step))


def layouts():
    """tp over every process first (heads split), then dp, then a mix where there is room."""
    return [f"tp={SIZE}", f"dp={SIZE}"] + (["tp=2,dp=2,zero=2"] if SIZE == 4 else [])


class EncoderLM(nn.Module):
    """A language model on torch's own TransformerEncoderLayer (nn.MultiheadAttention inside)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x, padding=None):
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
        return self.head(self.enc(self.tok(x), mask=None if padding is not None else causal,
                                  src_key_padding_mask=padding))


ENCODER_PLAN = {"tok": "vocab", "head": "vocab", "enc.layers.*.self_attn": "attention",
                "enc.layers.*.linear1": "column", "enc.layers.*.linear2": "row"}


def lm_loss(model, data, padding=None):
    return F.cross_entropy(model(data[:, :-1], padding).flatten(0, 1), data[:, 1:].flatten())


def train_both(job, plain, model, steps, start=0):
    """Plain and adopted steps on the same global batch; every loss equal within 1e-5."""
    for step in range(start, start + steps):
        data = tokens(step)
        for m, d in ((plain, data), (model, job.local_batch(data))):
            opt = m.opt
            opt.zero_grad()
            loss = lm_loss(m, d)
            loss.backward()
            opt.step()
            m.last = loss
        want, got = plain.last.item(), job.average(model.last).item()
        assert close(want, got), (job.config["config"], step, want, got)


def with_adamw(model):
    model.opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    return model


@needs_peers
def test_transformer_encoder_layer_at_tp_trains_as_plain_torch_through_switches():
    model = with_adamw(EncoderLM())
    plain = with_adamw(copy.deepcopy(model))
    cfgs = layouts()
    job = dynatrain.adopt(model, model.opt, ENCODER_PLAN, cfgs[0], vocab_divisible_by=2)
    assert model.enc.layers[0].self_attn.in_proj_weight.shape == (3 * HIDDEN // SIZE, HIDDEN)
    assert model.enc.layers[0].self_attn.out_proj.weight.shape == (HIDDEN, HIDDEN // SIZE)
    train_both(job, plain, model, 2)
    for i, cfg in enumerate(cfgs[1:] + cfgs[:1]):
        job.switch(cfg)
        train_both(job, plain, model, 2, start=2 + 2 * i)
    full = job.state_dict()
    assert full["enc.layers.1.self_attn.in_proj_weight"].shape == (3 * HIDDEN, HIDDEN)
    for name, p in plain.named_parameters():  # the k part of in_proj_bias has no gradient: Adam's noise
        if not name.endswith("in_proj_bias"):
            assert torch.allclose(full[name], p.detach(), rtol=1e-4, atol=1e-5), name
    # eval: torch's fused inference path (it reads in_proj_weight itself) is not taken at tp
    model.eval()
    plain.eval()
    data = tokens(50)
    padding = torch.zeros(4, SEQ, dtype=torch.bool)
    padding[1, 4:] = True
    with torch.no_grad():
        for pad in (None, padding):
            got, want = model(data[:, :-1], pad), plain(data[:, :-1], pad)
            keep = ~pad if pad is not None else torch.ones(4, SEQ, dtype=torch.bool)
            assert torch.allclose(got[keep], want[keep], rtol=1e-4, atol=1e-4)


class Attend(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        torch.manual_seed(1)
        self.attn = nn.MultiheadAttention(HIDDEN, HEADS, **kw)


@needs_peers
@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_masks_weights_and_cross_attention_match_torch(batch_first):
    model = Attend(batch_first=batch_first)
    plain = copy.deepcopy(model)
    opt, plain_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(plain.parameters(), lr=0.1)
    job = dynatrain.adopt(model, opt, {"attn": "attention"}, f"tp={SIZE}")
    g = torch.Generator().manual_seed(3)
    q, kv = torch.randn(5, 3, HIDDEN, generator=g), torch.randn(7, 3, HIDDEN, generator=g)
    if batch_first:
        q, kv = q.transpose(0, 1).contiguous(), kv.transpose(0, 1).contiguous()
    per_head = torch.randn(3 * HEADS, 5, 7, generator=g)  # a 3-D float mask: one per (batch, head)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[2, 5:] = True
    for step, kw in enumerate([dict(attn_mask=per_head, key_padding_mask=padding),
                               dict(attn_mask=per_head > 1.0, average_attn_weights=False), dict()]):
        outs = []
        for m, o in ((plain, plain_opt), (model, opt)):
            o.zero_grad()
            out, weights = m.attn(q, kv, kv, **kw)
            (out.square().mean() + weights.mean()).backward()
            o.step()
            outs.append((out.detach(), weights.detach()))
        assert torch.allclose(outs[0][0], outs[1][0], rtol=1e-5, atol=1e-6), step
        assert torch.allclose(outs[0][1], outs[1][1], rtol=1e-5, atol=1e-6), step
    single = (q[0] if batch_first else q[:, 0]), (kv[0] if batch_first else kv[:, 0])  # unbatched input
    want, got = plain.attn(single[0], single[1], single[1]), model.attn(single[0], single[1], single[1])
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(want, got))
    for name, p in plain.named_parameters():
        assert torch.allclose(job.full(name), p.detach(), rtol=1e-5, atol=1e-6), name


class HFAttention(nn.Module):
    """Written the Hugging Face way: a fused qkv Linear, heads from its own attributes."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.n_heads, self.hidden, self.head_dim = heads, hidden, hidden // heads
        self.qkv, self.o = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)

    def forward(self, x):
        B, S, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(B, S, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
            else ((q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)).masked_fill(
                torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf")).softmax(-1) @ v)
        return self.o(y.transpose(1, 2).reshape(B, S, self.hidden))


class HFLM(nn.Module):
    def __init__(self, heads=HEADS, hidden=HIDDEN):
        super().__init__()
        torch.manual_seed(2)
        self.tok = nn.Embedding(VOCAB, hidden)
        self.blocks = nn.ModuleList(HFAttention(hidden, heads) for _ in range(2))
        self.head = nn.Linear(hidden, VOCAB, bias=False)

    def forward(self, x, padding=None):
        h = self.tok(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


HF_PLAN = {"*.qkv": "qkv", "*.o": "row", "head": "vocab"}
HF_ATTRS = {"blocks.*": ["n_heads", "hidden"]}


@needs_peers
def test_fused_qkv_linear_and_a_module_reading_its_head_count_match_plain_torch():
    model = with_adamw(HFLM())
    plain = with_adamw(copy.deepcopy(model))
    cfgs = layouts()
    job = dynatrain.adopt(model, model.opt, HF_PLAN, cfgs[0], vocab_divisible_by=2, tp_attrs=HF_ATTRS)
    assert model.blocks[0].n_heads == HEADS  # the whole count outside its forward
    train_both(job, plain, model, 2)
    for i, cfg in enumerate(cfgs[1:] + cfgs[:1]):
        job.switch(cfg)
        train_both(job, plain, model, 2, start=2 + 2 * i)
    full = job.state_dict()
    for name, p in plain.named_parameters():
        if not name.endswith("qkv.bias"):
            assert torch.allclose(full[name], p.detach(), rtol=1e-4, atol=1e-5), name
    sd = job.optimizer_state_dict()  # whole moments, the module's shapes
    assert sd["state"][1]["exp_avg"].shape == (3 * HIDDEN, HIDDEN)
    fresh = HFLM()
    fresh.load_state_dict(full)  # the full state dict loads into the plain model
    model.load_state_dict(fresh.state_dict())  # and a plain one into the adopted model
    assert torch.equal(job.full("blocks.1.qkv.weight"), fresh.blocks[1].qkv.weight)


@needs_peers
def test_a_layout_whose_tp_does_not_divide_the_heads_is_refused_before_anything_moves():
    model = with_adamw(HFLM(heads=3, hidden=12))
    with pytest.raises(ValueError, match=r"layout 'tp=2.*': tp=2 does not divide 'blocks.0.n_heads' = 3 "
                                         r"\(tp_attrs\); valid tp: divisors of 3"):
        dynatrain.adopt(model, model.opt, HF_PLAN, "tp=2" + (",dp=2" if SIZE == 4 else ""), vocab_divisible_by=2,
                        tp_attrs=HF_ATTRS)
    model = with_adamw(HFLM(heads=3, hidden=12))
    job = dynatrain.adopt(model, model.opt, HF_PLAN, f"dp={SIZE}", vocab_divisible_by=2, tp_attrs=HF_ATTRS)
    before = job.full("blocks.0.qkv.weight")
    with pytest.raises(ValueError, match="tp=2 does not divide 'blocks.0.n_heads' = 3"):
        job.switch("tp=2" + (",dp=2" if SIZE == 4 else ""))
    assert job.config["dp"] == SIZE and torch.equal(job.full("blocks.0.qkv.weight"), before)
    model = with_adamw(HFLM(heads=3, hidden=12))  # without tp_attrs: the VPS refuses the head split itself
    with pytest.raises(ValueError, match="blocks.0.qkv.weight"):
        dynatrain.adopt(model, model.opt, HF_PLAN, "tp=2" + (",dp=2" if SIZE == 4 else ""), vocab_divisible_by=2)


def test_plans_that_cannot_run_at_tp_are_refused_by_describe():
    lm = EncoderLM()
    with pytest.raises(ValueError, match=r"plan style 'row' on 'enc.layers.0.self_attn.out_proj': "
                                         r"nn.MultiheadAttention 'enc.layers.0.self_attn' reads its weights itself"):
        dynatrain.describe(lm, {"enc.layers.*.self_attn.out_proj": "row"})
    with pytest.raises(ValueError, match=r"plan style 'column' on parameter 'attn.in_proj_weight': "
                                         r"nn.MultiheadAttention 'attn' reads it itself, with all its heads"):
        dynatrain.describe(Attend(), {"attn.in_proj_weight": "column"})
    with pytest.raises(ValueError, match=r"on parameter 'attn.out_proj.weight': nn.MultiheadAttention 'attn'"):
        dynatrain.describe(Attend(), {"attn.out_proj.weight": "row"})
    with pytest.raises(ValueError, match=r"module 'attn.out_proj' lies inside 'attn', styled 'attention'"):
        dynatrain.describe(Attend(), {"attn": "attention", "attn.out_proj": "row"})
    with pytest.raises(ValueError, match=r"nn.MultiheadAttention 'attn': tensor parallelism needs the fused "
                                         r"in_proj_weight \(kdim = vdim = embed_dim\)"):
        dynatrain.describe(Attend(kdim=8), {"attn": "attention"})
    with pytest.raises(ValueError, match=r"plan style 'attention' on module 'head' needs MultiheadAttention"):
        dynatrain.describe(lm, {"head": "attention"})
    gqa = HFLM()
    gqa.blocks[0].qkv = nn.Linear(HIDDEN, HIDDEN + 4)  # q plus 2 kv heads of 4 (k and v: 2 wide each)
    with pytest.raises(ValueError, match=r"'blocks.0.qkv.weight' has 20 rows, not 3 x 4 heads x head_dim"):
        dynatrain.describe(gqa, HF_PLAN)
    bare = nn.Sequential(nn.Linear(4, 12))
    with pytest.raises(ValueError, match=r"plan style 'qkv' on module '0' needs the head count"):
        dynatrain.describe(bare, {"0": "qkv"})
    with pytest.raises(ValueError, match=r"tp_attrs: 'blocks.0.head_dim' is 4.0; valid: a positive int"):
        model = HFLM()
        model.blocks[0].head_dim = 4.0
        dynatrain.describe(model, HF_PLAN, tp_attrs={"blocks.*": ["head_dim"]})
    d = dynatrain.describe(HFLM(), HF_PLAN).model
    t = {x.name: x for x in d.tensors}
    assert (tuple(t["blocks.0.qkv.weight"].shape), t["blocks.0.qkv.weight"].dim) == ((3, HEADS, 4, HIDDEN), 1)
    assert tuple(t["blocks.0.qkv.bias"].shape) == (3, HEADS, 4)
