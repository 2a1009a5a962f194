"""tests/data/ssm_fp32, ssm_bf16 and ssm_stats: a small Mamba-2-style state-space model, a model family
none of the other dumps holds (issue 45's held-out check). Each block: a pre-norm layer_norm; one input
projection (linear, no bias) split into the gate z, the conv's channels and the step sizes dt; a causal
depthwise conv1d (kernel 4, padded on the left, the tail sliced off) and silu; dt = softplus(dt + bias),
A = -exp(A_log); the selective scan as Mamba-2's chunked reference (`ssd_minimal_discrete`: cumsum of
A dt, a masked segment sum (masked_fill 0 and -inf, cumsum), exp, and four einsums over chunks of 8); the
skip D x, the gate silu(z), the output projection, a residual dropout (p 0.1) and the residual add. The
tokens come in by embedding, the logits go out by a final layer_norm, a linear head and cross_entropy.

d_model 32, d_inner 64 (4 heads of 16), d_state 16, vocabulary 64, seq 16, batch 1; trained first (fp32,
AdamW, 150 steps of a counting task) so that the scan's decays and the gates are no longer at their init,
then cast to the dump's dtype (model.to(dtype), CPU kernels) and dumped for one step, forward and
backward, by msprobe 26.2.0 at level L1 with an API list (ssm_tensor_L1.json; views and casts left out).

ssm_stats is a statistics dump of a fresh model with 6 blocks (the step a training run dumps first):
every block computes A = -exp(A_log) from the same initial A_log (Mamba's log(1..H)), and every segment
sum masks with the same lower triangle of ones, so that those calls differ at most in Max and Min: the
groups of msprobe's `acc_check -f`.

    DTYPE=fp32|bf16 python ssm_dump.py tensor OUT     (in msprobe's venv; see ../README.md)
    python ssm_dump.py statistics OUT
"""

import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from msprobe.pytorch import PrecisionDebugger, seed_all

t0 = time.time()
TASK, OUT = sys.argv[1], sys.argv[2]
NAME = os.environ.get("DTYPE", "fp32")
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[NAME]
VOCAB, D, EXPAND, HEADDIM, STATE, CONV, CHUNK, SEQ = 64, 32, 2, 16, 16, 4, 8, 16
INNER = EXPAND * D
HEADS = INNER // HEADDIM
LAYERS = 6 if TASK == "statistics" else 2
APIS = ["embedding", "layer_norm", "linear", "conv1d", "silu", "softplus", "exp", "cumsum", "einsum",
        "masked_fill", "pad", "cat", "__mul__", "__add__", "__sub__", "__neg__", "tril", "dropout",
        "cross_entropy", "to"]
seed_all(1234, mode=False)
torch.manual_seed(0)


def segsum(x):
    """Mamba-2's stable segment sum: out[..., i, j] = x[..., j+1] + ... + x[..., i] for j <= i, -inf above."""
    T = x.size(-1)
    x = x[..., None].expand(*x.shape, T)
    below = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
    x = x.masked_fill(~below, 0)
    x_segsum = torch.cumsum(x, dim=-2)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=0)
    return x_segsum.masked_fill(~causal, -torch.inf)


def ssd(X, A, B, C):
    """Mamba-2's ssd_minimal_discrete without einops. X (b, l, h, p), A (b, l, h), B and C (b, l, h, n)."""
    b, l, h, p = X.shape
    c = l // CHUNK
    X, B, C = (t.reshape(b, c, CHUNK, *t.shape[2:]) for t in (X, B, C))
    A = A.reshape(b, c, CHUNK, h).permute(0, 3, 1, 2)  # b h c l
    A_cumsum = torch.cumsum(A, dim=-1)
    L = torch.exp(segsum(A))
    Y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", C, B, L, X)
    decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, decay_states, X)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(A_cumsum[:, :, :, -1], (1, 0))))
    states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
    Y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, states, torch.exp(A_cumsum))
    return (Y_diag + Y_off).reshape(b, l, h, p)


class Mamba2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.in_proj = nn.Linear(D, 2 * INNER + 2 * STATE + HEADS, bias=False)
        conv_channels = INNER + 2 * STATE
        self.conv = nn.Conv1d(conv_channels, conv_channels, CONV, groups=conv_channels, padding=CONV - 1)
        self.dt_bias = nn.Parameter(torch.log(torch.expm1(torch.linspace(1e-3, 1e-1, HEADS))))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, HEADS + 1, dtype=torch.float32)))
        self.D = nn.Parameter(torch.ones(HEADS))
        self.out_proj = nn.Linear(INNER, D, bias=False)

    def forward(self, u):
        b, l, _ = u.shape
        z, xBC, dt = self.in_proj(self.norm(u)).split([INNER, INNER + 2 * STATE, HEADS], dim=-1)
        xBC = F.silu(self.conv(xBC.transpose(1, 2))[..., :l].transpose(1, 2))
        x, B, C = xBC.split([INNER, STATE, STATE], dim=-1)
        dt = F.softplus(dt + self.dt_bias)  # (b, l, h)
        A = -torch.exp(self.A_log)
        x = x.reshape(b, l, HEADS, HEADDIM)
        B, C = (t[:, :, None].expand(b, l, HEADS, STATE) for t in (B, C))
        y = ssd(x * dt[..., None], A * dt, B, C)
        y = y + x * self.D[:, None]
        y = y.reshape(b, l, INNER) * F.silu(z)
        return u + F.dropout(self.out_proj(y), p=0.1, training=self.training)


class Mamba2(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Mamba2Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx, targets):
        h = self.tok(idx)
        for block in self.blocks:
            h = block(h)
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def batch(generator, b):
    """A counting task: from a random start by a random stride of 1 to 3 (the model must see two tokens
    to tell the stride), the next token the target."""
    start = torch.randint(0, VOCAB, (b, 1), generator=generator)
    stride = torch.randint(1, 4, (b, 1), generator=generator)
    seq = (start + stride * torch.arange(SEQ + 1)) % VOCAB
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def debugger_for(out):
    os.makedirs(out, exist_ok=True)
    config = {"task": TASK, "dump_path": out, "rank": [], "step": [], "level": "L1", "async_dump": False,
              TASK: {"scope": [], "list": APIS, "data_mode": ["all"]}, "risk_level": "ALL"}
    if TASK == "statistics":
        config[TASK]["summary_mode"] = "statistics"
    path = os.path.join(out, "config.json")
    with open(path, "w") as handle:
        json.dump(config, handle)
    return PrecisionDebugger(config_path=path)


model = Mamba2()
g = torch.Generator().manual_seed(1)
if TASK == "tensor":
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        idx, targets = batch(g, 8)
        loss = model(idx, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("trained, loss %.3f" % loss.item(), file=sys.stderr)
model = model.to(DTYPE)
model.zero_grad()
debugger = debugger_for(OUT)
idx, targets = batch(g, 1)
torch.manual_seed(2)  # the residual dropouts' masks
debugger.start(model=model)
loss = model(idx, targets)
loss.backward()
debugger.stop()
debugger.step()
print(TASK, NAME, "loss %.3f" % loss.item(), "done in %.1fs" % (time.time() - t0), file=sys.stderr)
