"""A small mixture-of-experts decoder in plain torch.nn: the Llama-style attention of
llama_model.py, and in every block an MoE layer written the common way: a router nn.Linear,
top-2 softmax gating, experts in an nn.ModuleList of SwiGLU MLPs (or, stacked=True, two 3-D
parameters [E, hidden, ffn] and [E, ffn, hidden]). A per-sequence load-balancing loss from the
router logits each layer keeps. Nothing here knows about parallelism."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from llama_model import MLP, Attention, Llama, RMSNorm

VOCAB, HIDDEN, HEADS, EXPERTS, TOP_K, FFN, LAYERS, SEQ = 96, 64, 4, 4, 2, 64, 2, 32


class MoE(nn.Module):
    def __init__(self, hidden, ffn, experts, top_k, stacked=False):
        super().__init__()
        self.top_k, self.norm_topk_prob = top_k, True
        self.router = nn.Linear(hidden, experts, bias=False)
        if stacked:
            self.w1 = nn.Parameter(torch.randn(experts, hidden, ffn) * hidden ** -0.5)
            self.w2 = nn.Parameter(torch.randn(experts, ffn, hidden) * ffn ** -0.5)
            self.activation = F.gelu
        else:
            self.experts = nn.ModuleList(MLP(hidden, ffn) for _ in range(experts))

    def expert(self, e, x):
        if hasattr(self, "experts"):
            return self.experts[e](x)
        return self.activation(x @ self.w1[e]) @ self.w2[e]

    def forward(self, x):
        logits = self.router(x)
        self.router_logits = logits
        weights, index = logits.softmax(-1).topk(self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(-1, keepdim=True)
        flat, weights, index = x.reshape(-1, x.shape[-1]), weights.reshape(-1, self.top_k), index.reshape(-1, self.top_k)
        out = torch.zeros_like(flat)
        for e in range(self.router.out_features):
            token, slot = (index == e).nonzero(as_tuple=True)
            out = out.index_add(0, token, self.expert(e, flat[token]) * weights[token, slot, None])
        return out.view(x.shape)


class Block(nn.Module):
    def __init__(self, hidden, heads, ffn, experts, top_k, seq, stacked):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(hidden), Attention(hidden, heads, seq)
        self.moe_norm, self.moe = RMSNorm(hidden), MoE(hidden, ffn, experts, top_k, stacked)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.moe(self.moe_norm(x))


class MoEModel(Llama):
    """Llama's embedding, head and forward; MoE blocks."""

    def __init__(self, vocab=VOCAB, hidden=HIDDEN, heads=HEADS, ffn=FFN, experts=EXPERTS, top_k=TOP_K, layers=LAYERS,
                 seq=SEQ, stacked=False):
        nn.Module.__init__(self)
        self.tok = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(Block(hidden, heads, ffn, experts, top_k, seq, stacked) for _ in range(layers))
        self.norm, self.head = RMSNorm(hidden), nn.Linear(hidden, vocab, bias=False)

    def aux_loss(self):
        """Load balancing per sequence (mean over sequences and layers): E * sum_e f_e * P_e, f_e
        the share of the sequence's top-k picks that went to expert e, P_e its mean probability."""
        total = 0.0
        for layer in self.layers:
            logits = layer.moe.router_logits  # [batch, seq, E]
            probs, experts = logits.softmax(-1), logits.shape[-1]
            picks = F.one_hot(probs.topk(layer.moe.top_k, dim=-1).indices, experts).sum(-2).float()
            share = picks.mean(1) / layer.moe.top_k
            total = total + experts * (share * probs.mean(1)).sum(-1).mean()
        return total / len(self.layers)


def arguments(description, schedule=None):
    """The example scripts' options (--schedule only for the adopted one: step:layout;...)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--global-batch", type=int, default=8, help="sequences per step, over all processes")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--stacked", action="store_true", help="the experts as 3-D parameters")
    if schedule is not None:
        ap.add_argument("--schedule", default=schedule, help="step:layout;... (the first one adopts)")
    return ap.parse_args()
