"""A small GPT in plain torch.nn, and deterministic data for it. Nothing here knows about
parallelism: the head count per forward comes from the projections' output width, so the same
code runs on whole tensors and on tensor-parallel shards."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, HIDDEN, HEADS, FFN, LAYERS, SEQ = 64, 64, 4, 256, 2, 32


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.head_dim = hidden // heads
        self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        B, S, _ = x.shape
        q, k, v = (f(x).view(B, S, -1, self.head_dim).transpose(1, 2) for f in (self.q, self.k, self.v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, -1))


class Block(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(hidden), Attention(hidden, heads), nn.LayerNorm(hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=VOCAB, hidden=HIDDEN, heads=HEADS, ffn=FFN, layers=LAYERS, seq=SEQ):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, ffn) for _ in range(layers))
        self.lnf, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.lnf(x))


def batch(step, size, vocab=VOCAB, seq=SEQ):
    """Deterministic from the step: sequences of a random sparse Markov chain over the vocab."""
    g = torch.Generator().manual_seed(1000 + step)
    succ = torch.randint(0, vocab, (vocab, 2), generator=torch.Generator().manual_seed(7))
    tokens = torch.empty(size, seq + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (size,), generator=g)
    for i in range(seq):
        tokens[:, i + 1] = succ[tokens[:, i], torch.randint(0, 2, (size,), generator=g)]
    return tokens


def next_token_loss(model, data):
    """Cross-entropy of each next token, the examples' and tests' loss."""
    return F.cross_entropy(model(data[:, :-1]).flatten(0, 1), data[:, 1:].flatten())


def plain_step(model, optimizer, data):
    """One step of a plain (not adopted) model on the whole batch; returns its loss."""
    optimizer.zero_grad()
    loss = next_token_loss(model, data)
    loss.backward()
    optimizer.step()
    return loss
