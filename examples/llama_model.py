"""A small Llama-style decoder in plain torch.nn: RMSNorm, rotary position embeddings, a fused qkv
projection viewed Hugging Face-style (heads = -1, so the same code runs on tensor-parallel
shards), SwiGLU MLP, untied output head. Nothing here knows about parallelism."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, HIDDEN, HEADS, FFN, LAYERS, SEQ = 96, 64, 4, 128, 2, 32


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.n_heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = torch.outer(torch.arange(seq).float(), inv).repeat(1, 2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x):
        B, S, _ = x.shape
        q, k, v = (t.view(B, S, -1, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        q, k = rotate(q, self.cos[:S], self.sin[:S]), rotate(k, self.cos[:S], self.sin[:S])
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, -1))


class MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.gate, self.up = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, hidden, heads, ffn, seq):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(hidden), Attention(hidden, heads, seq)
        self.mlp_norm, self.mlp = RMSNorm(hidden), MLP(hidden, ffn)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, vocab=VOCAB, hidden=HIDDEN, heads=HEADS, ffn=FFN, layers=LAYERS, seq=SEQ):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(Block(hidden, heads, ffn, seq) for _ in range(layers))
        self.norm, self.head = RMSNorm(hidden), nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens):
        x = self.tok(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))

    def configure_optimizers(self, weight_decay, lr, betas=(0.9, 0.95)):
        """AdamW with weight decay on the matrices only (norms and biases in a no-decay group)."""
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=betas)


def warmup_cosine(optimizer, warmup, steps, min_lr):
    """Linear warmup for `warmup` steps, then cosine decay to `min_lr` at `steps`: a SequentialLR."""
    start = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=warmup)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps - warmup, eta_min=min_lr)
    return torch.optim.lr_scheduler.SequentialLR(optimizer, [start, cosine], milestones=[warmup])
