"""A small recurrent-convolutional sequence model for tests/data/seq_<dtype>: a model family unlike the
transformers and the state-space model of the other dumps (issue 47's held-out check).

    DTYPE=fp32|bf16|autocast python seq_dump.py seq_tensor_L1.json

The step, on 2 sequences of 12 tokens (vocabulary 40, width 32): token embeddings by index_select from a
table, plus bigram features by embedding_bag (sum of the token's and the pair's rows, 2 a bag); layer_norm;
a gated convolution (the normalised tokens transposed to channels, padded on the left, a depthwise conv1d
of kernel 3 and dilation 2 (causal), a pointwise conv1d to twice the width, the GLU gate by sigmoid); the
step sizes softplus(linear(x)) of the same normalised tokens (a linear on 3-D tokens); two scans along the
sequence: a running mean weighted by the step sizes (cumsum of dt * u over cumsum of dt) and a decay by
cumprod of sigmoid gates; a GRU over the 12 steps written out (two linears on 2-D rows a step, sigmoid for
the reset and update gates, tanh for the candidate); layer_norm, a linear head on 3-D tokens, log_softmax
and nll_loss (next-token prediction).

Trained first (fp32, AdamW at 1e-2, 400 steps of batch 16 on a synthetic task: sequences that repeat a random
motif of 3 tokens with noise, predict the next token) so that gates and norms are no longer at init, then
dumped for one step (forward and backward, no optimiser) by msprobe 26.2.0 at level L1 with an API list
(seq_tensor_L1.json: views and the transpose that feeds the convolution left out, so that msprobe does not
record every call that reads the first layer_norm's output). bf16: the model cast (model.to(bf16)).
autocast: the fp32 model under torch.autocast("cpu", bfloat16).
"""
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from msprobe.pytorch import PrecisionDebugger, seed_all

t0 = time.time()
cfg = sys.argv[1]
NAME = os.environ.get("DTYPE", "fp32")
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "autocast": torch.float32}[NAME]
VOCAB, D, HIDDEN, SEQ, KERNEL, DILATION, BUCKETS = 40, 32, 32, 12, 3, 2, 97
seed_all(1234, mode=False)
torch.manual_seed(0)


class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(VOCAB, D) * 0.5)
        self.bigrams = nn.Parameter(torch.randn(BUCKETS, D) * 0.1)
        self.norm, self.out_norm = nn.LayerNorm(D), nn.LayerNorm(HIDDEN)
        self.depthwise = nn.Conv1d(D, D, KERNEL, dilation=DILATION, groups=D)
        self.pointwise = nn.Conv1d(D, 2 * D, 1)
        self.dt, self.forget = nn.Linear(D, D), nn.Linear(D, D)
        self.ih, self.hh = nn.Linear(D, 3 * HIDDEN), nn.Linear(HIDDEN, 3 * HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        b, t = tokens.shape
        x = torch.index_select(self.table, 0, tokens.flatten()).reshape(b, t, D)
        previous = torch.cat([torch.zeros_like(tokens[:, :1]), tokens[:, :-1]], dim=1)
        bags = torch.stack([tokens, (tokens * 31 + previous * 7) % BUCKETS], dim=-1).reshape(b * t, 2) % BUCKETS
        x = x + F.embedding_bag(bags, self.bigrams, mode="sum").reshape(b, t, D)
        x = self.norm(x)
        c = F.pad(x.transpose(1, 2), ((KERNEL - 1) * DILATION, 0))  # causal: the left alone
        c = self.pointwise(self.depthwise(c))
        u, gate = c.chunk(2, dim=1)
        u = (u * torch.sigmoid(gate)).transpose(1, 2)  # (b, t, d)
        dt = F.softplus(self.dt(x))
        mean = torch.cumsum(dt * u, dim=1) / torch.cumsum(dt, dim=1)
        decay = torch.cumprod(torch.sigmoid(self.forget(u)), dim=1)
        z = mean + decay * u
        h = torch.zeros(b, HIDDEN, dtype=z.dtype)
        outs = []
        for step in range(t):
            i_r, i_z, i_n = self.ih(z[:, step]).chunk(3, dim=-1)
            h_r, h_z, h_n = self.hh(h).chunk(3, dim=-1)
            r, update = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            h = (1 - update) * n + update * h
            outs.append(h)
        logits = self.head(self.out_norm(torch.stack(outs, dim=1)))
        return F.log_softmax(logits, dim=-1)


def batch(generator, n):
    """A motif of 3 tokens repeated, 1 in 8 tokens replaced at random; the targets are the next tokens."""
    motif = torch.randint(0, VOCAB, (n, 3), generator=generator)
    seq = motif.repeat(1, (SEQ + 1) // 3 + 1)[:, : SEQ + 1]
    noise = torch.rand(n, SEQ + 1, generator=generator) < 0.125
    seq = torch.where(noise, torch.randint(0, VOCAB, (n, SEQ + 1), generator=generator), seq)
    return seq[:, :-1], seq[:, 1:]


def loss_of(model, tokens, targets):
    logp = model(tokens)
    return F.nll_loss(logp.reshape(-1, VOCAB), targets.reshape(-1))


model = Seq()
g = torch.Generator().manual_seed(1)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
for _ in range(400):
    tokens, targets = batch(g, 16)
    loss = loss_of(model, tokens, targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"trained, loss {loss.item():.3f}")

model = model.to(DTYPE)
model.zero_grad()
debugger = PrecisionDebugger(config_path=cfg)
tokens, targets = batch(g, 2)
debugger.start(model=model)
if NAME == "autocast":
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_of(model, tokens, targets)
else:
    loss = loss_of(model, tokens, targets)
loss.backward()
debugger.stop()
debugger.step()
print(NAME, f"loss {loss.item():.3f}, done in {time.time() - t0:.1f}s")
