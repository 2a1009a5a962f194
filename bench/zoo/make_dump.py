"""Model families the project's tests/data dumps do not cover, dumped by msprobe 26.2.0 at level L1
with no API list (every wrapped API is recorded, views, casts and dropout included), to look for
false errors on clean steps (issue 27: verdicts a CI gate can trust on held-out families).

    MODEL=gpt2|bert|t5|vit|gemma|mamba|qwenmoe|torchnn DTYPE=fp32|bf16|fp16|amp [TASK=statistics] python make_dump.py OUT

gpt2: HF GPT-2's code path: Conv1D projections by addmm, split/view/permute heads, scores divided
    by sqrt(d), causal mask by torch.where against finfo.min, dropout 0.1 (embeddings, attention
    probabilities, residuals) in training mode, gelu_new written out (tanh of a cubic), tied head.
bert: word + position + token-type embeddings, an additive padding mask from finfo.min, SDPA with that
    mask and dropout_p 0.1, erf gelu, a tanh pooler, a masked-LM loss with ignore_index -100 and NSP.
t5: encoder-decoder with bucketed relative position bias (log, min, where on integer buckets), T5's
    RMS layer norm in fp32, scores without scaling, softmax(scores.float()).type_as, cross-attention,
    a gated-gelu FFN (v1.1), the head scaled by d ** -0.5, label smoothing 0.1.
vit: conv2d patches (4x4, stride 4), a class token by expand and cat, SDPA without mask, tanh gelu,
    the class token's LayerNorm and head.
gemma: embeddings scaled by sqrt(d) in the model's dtype, RMSNorm (1 + w) in fp32, multi-query
    attention (one KV head by expand), attention-logit softcapping tanh(s / 50) * 50, fp32 softmax,
    GeGLU with tanh gelu, final-logit softcapping tanh(x / 30) * 30.
mamba: a selective-state-space block: in_proj, causal depthwise conv1d, silu, softplus dt, -exp(A_log),
    the scan written out step by step (exp, mul, add, einsum), D skip, silu gate, out_proj.
torchnn: torch.nn's MultiheadAttention, GRU, LSTM, GroupNorm, F.normalize, cosine_similarity.
qwenmoe: top-4 of 8 experts without renormalisation, experts found by one_hot/permute/where,
    index_add_, a shared expert gated by sigmoid, a load-balancing auxiliary loss.

amp: the fp32 model under torch.autocast("cpu", dtype=torch.bfloat16) (mixed precision, fp32 weights
cast per call). fp16 is loss-scaled (backward from loss * 1024). Every model is trained first (fp32,
AdamW) so that attention and routing are no longer uniform, then dumped for one training step (train
mode, forward and backward, no optimiser step).
"""

import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from msprobe.pytorch import PrecisionDebugger, seed_all

t0 = time.time()
OUT = sys.argv[1]
NAME = os.environ.get("DTYPE", "fp32")
MODEL = os.environ.get("MODEL", "gpt2")
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "amp": torch.float32}[NAME]
LOSS_SCALE = 1024.0 if NAME == "fp16" else 1.0
VOCAB, D, HEADS, SEQ, B = 96, 48, 4, 16, 2
HD = D // HEADS
seed_all(1234, mode=False)
torch.manual_seed(0)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Conv1D(nn.Module):  # GPT-2's transposed linear
    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.weight.size(-1),)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = Conv1D(3 * D, D), Conv1D(D, D)
        self.c_fc, self.mlp_proj = Conv1D(4 * D, D), Conv1D(D, 4 * D)
        self.drop = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool)).view(1, 1, SEQ, SEQ))

    def forward(self, x):
        Bn, T, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (t.view(Bn, T, HEADS, HD).permute(0, 2, 1, 3) for t in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], HD**0.5, dtype=q.dtype)
        mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype)
        w = torch.where(self.bias[:, :, :T, :T], w, mask_value)
        w = self.drop(F.softmax(w, dim=-1))
        a = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous().view(Bn, T, D)
        x = x + self.drop(self.c_proj(a))
        return x + self.drop(self.mlp_proj(gelu_new(self.c_fc(self.ln_2(x)))))


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(SEQ, D)
        nn.init.normal_(self.wte.weight, std=0.02)
        self.blocks = nn.ModuleList(GPT2Block() for _ in range(2))
        self.ln_f, self.drop = nn.LayerNorm(D), nn.Dropout(0.1)

    def forward(self, idx, targets):
        pos = torch.arange(0, idx.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        shift = logits[..., :-1, :].contiguous()
        return F.cross_entropy(shift.view(-1, VOCAB), targets[..., 1:].contiguous().view(-1))


class BertLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.ModuleList(nn.Linear(D, D) for _ in range(3))
        self.o, self.ln1, self.ln2 = nn.Linear(D, D), nn.LayerNorm(D, eps=1e-12), nn.LayerNorm(D, eps=1e-12)
        self.up, self.down, self.drop = nn.Linear(D, 4 * D), nn.Linear(4 * D, D), nn.Dropout(0.1)

    def forward(self, x, mask):
        Bn, T, _ = x.shape
        q, k, v = (lin(x).view(Bn, T, HEADS, HD).transpose(1, 2) for lin in self.qkv)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1 if self.training else 0.0)
        x = self.ln1(x + self.drop(self.o(a.transpose(1, 2).reshape(Bn, T, D))))
        return self.ln2(x + self.drop(self.down(F.gelu(self.up(x)))))


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word, self.pos, self.token_type = nn.Embedding(VOCAB, D), nn.Embedding(SEQ, D), nn.Embedding(2, D)
        self.ln, self.drop = nn.LayerNorm(D, eps=1e-12), nn.Dropout(0.1)
        self.layers = nn.ModuleList(BertLayer() for _ in range(2))
        self.pool, self.nsp = nn.Linear(D, D), nn.Linear(D, 2)
        self.mlm, self.mlm_ln, self.mlm_bias = nn.Linear(D, D), nn.LayerNorm(D, eps=1e-12), nn.Parameter(torch.zeros(VOCAB))

    def forward(self, idx, targets):
        Bn, T = idx.shape
        lengths = T - 5 * (torch.arange(Bn) % 2)  # every other sequence padded
        attention = (torch.arange(T)[None, :] < lengths[:, None]).long()
        token_type = (torch.arange(T)[None, :] >= T // 2).long().expand(Bn, T)
        pos = torch.arange(T).unsqueeze(0)
        x = self.drop(self.ln(self.word(idx) + self.pos(pos) + self.token_type(token_type)))
        dtype = x.dtype
        mask = (1.0 - attention[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        for layer in self.layers:
            x = layer(x, mask)
        pooled = torch.tanh(self.pool(x[:, 0]))
        nsp = F.cross_entropy(self.nsp(pooled), torch.zeros(Bn, dtype=torch.long))
        h = self.mlm_ln(F.gelu(self.mlm(x)))
        logits = F.linear(h, self.word.weight, self.mlm_bias)
        labels = targets.masked_fill(attention == 0, -100)
        labels = labels.masked_fill(torch.arange(T)[None, :] % 3 != 0, -100)  # 1 in 3 tokens "masked"
        return F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1), ignore_index=-100) + nsp


class T5Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))

    def forward(self, x):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + 1e-6)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


def relative_bucket(relative_position, bidirectional, num_buckets=32, max_distance=128):
    buckets = 0
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (
        torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, relative_position, large)


class T5Attention(nn.Module):
    def __init__(self, bias, bidirectional=True):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.rel = nn.Embedding(32, HEADS) if bias else None
        self.bidirectional = bidirectional

    def forward(self, x, kv, position_bias=None, causal=False):
        Bn, T, _ = x.shape
        S = kv.shape[1]
        q = self.q(x).view(Bn, T, HEADS, HD).transpose(1, 2)
        k = self.k(kv).view(Bn, S, HEADS, HD).transpose(1, 2)
        v = self.v(kv).view(Bn, S, HEADS, HD).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(3, 2))
        if position_bias is None:
            ctx = torch.arange(T, dtype=torch.long)[:, None]
            mem = torch.arange(S, dtype=torch.long)[None, :]
            bucket = relative_bucket(mem - ctx, self.bidirectional)
            position_bias = self.rel(bucket).permute([2, 0, 1]).unsqueeze(0)
            if causal:
                causal_mask = torch.triu(torch.ones(T, S, dtype=torch.bool), 1)
                position_bias = position_bias + causal_mask.to(position_bias.dtype) * torch.finfo(scores.dtype).min
        scores = scores + position_bias
        w = F.softmax(scores.float(), dim=-1).type_as(scores)
        w = F.dropout(w, p=0.1, training=self.training)
        return self.o(torch.matmul(w, v).transpose(1, 2).contiguous().view(Bn, T, D)), position_bias


class T5FF(nn.Module):
    def __init__(self):
        super().__init__()
        self.wi_0, self.wi_1, self.wo = nn.Linear(D, 2 * D, bias=False), nn.Linear(D, 2 * D, bias=False), nn.Linear(2 * D, D, bias=False)

    def forward(self, x):
        return self.wo(F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x))


class T5(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Embedding(VOCAB, D)
        self.enc_attn, self.enc_ff = T5Attention(True), T5FF()
        self.dec_self, self.dec_cross, self.dec_ff = T5Attention(True, bidirectional=False), T5Attention(False), T5FF()
        self.norms = nn.ModuleList(T5Norm() for _ in range(7))
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx, targets):
        n = self.norms
        x = self.shared(idx)
        a, _ = self.enc_attn(n[0](x), n[0](x))
        x = x + a
        enc = n[2](x + self.enc_ff(n[1](x)))
        dec_in = torch.cat([torch.zeros_like(targets[:, :1]), targets[:, :-1]], dim=1)
        y = self.shared(dec_in)
        a, _ = self.dec_self(n[3](y), n[3](y), causal=True)
        y = y + a
        a, _ = self.dec_cross(n[4](y), enc, position_bias=torch.zeros(1, HEADS, y.shape[1], enc.shape[1], dtype=y.dtype))
        y = y + a
        y = n[6](y + self.dec_ff(n[5](y)))
        logits = self.head(y * D**-0.5)
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1), label_smoothing=0.1)


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, 4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, D) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 17, D) * 0.02)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(D, eps=1e-6), nn.LayerNorm(D, eps=1e-6), nn.LayerNorm(D, eps=1e-6)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2, self.head = nn.Linear(D, 4 * D), nn.Linear(4 * D, D), nn.Linear(D, 10)

    def forward(self, images, labels):
        x = self.patch(images).flatten(2).transpose(1, 2)  # (B, 16, D)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        Bn, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(Bn, T, 3, HEADS, HD).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(Bn, T, D))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return F.cross_entropy(self.head(self.ln_f(x)[:, 0]), labels)


class GemmaNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(D))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (h * (1.0 + self.weight.float())).type_as(x)


class Gemma(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.n1, self.n2, self.nf = GemmaNorm(), GemmaNorm(), GemmaNorm()
        self.q, self.k, self.v, self.o = nn.Linear(D, D, bias=False), nn.Linear(D, HD, bias=False), nn.Linear(D, HD, bias=False), nn.Linear(D, D, bias=False)
        self.gate, self.up, self.down = nn.Linear(D, 2 * D, bias=False), nn.Linear(D, 2 * D, bias=False), nn.Linear(2 * D, D, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx)
        x = x * torch.tensor(D**0.5, dtype=x.dtype)
        Bn, T, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(Bn, T, HEADS, HD).transpose(1, 2)
        k = self.k(h).view(Bn, T, 1, HD).transpose(1, 2).expand(Bn, HEADS, T, HD)
        v = self.v(h).view(Bn, T, 1, HD).transpose(1, 2).expand(Bn, HEADS, T, HD)
        s = torch.matmul(q, k.transpose(2, 3)) * HD**-0.5
        s = torch.tanh(s / 50.0) * 50.0
        s = s + torch.triu(torch.full((T, T), float("-inf")), 1).to(s.dtype)
        p = F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        x = x + self.o(torch.matmul(p, v).transpose(1, 2).reshape(Bn, T, D))
        h = self.n2(x)
        x = x + self.down(F.gelu(self.gate(h), approximate="tanh") * self.up(h))
        logits = F.linear(self.nf(x), self.tok.weight)
        logits = torch.tanh(logits / 30.0) * 30.0
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


class Mamba(nn.Module):
    N, E, R, K = 8, 2 * D, 4, 4  # state, expanded width, dt rank, conv width

    def __init__(self):
        super().__init__()
        N, E, R, K = self.N, self.E, self.R, self.K
        self.tok, self.norm = nn.Embedding(VOCAB, D), GemmaNorm()
        self.in_proj = nn.Linear(D, 2 * E, bias=False)
        self.conv = nn.Conv1d(E, E, K, groups=E, padding=K - 1)
        self.x_proj, self.dt_proj = nn.Linear(E, R + 2 * N, bias=False), nn.Linear(R, E)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(E, 1))
        self.Dskip = nn.Parameter(torch.ones(E))
        self.out_proj, self.head = nn.Linear(E, D, bias=False), nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx, targets):
        N, R = self.N, self.R
        x = self.tok(idx)
        Bn, T, _ = x.shape
        xz = self.in_proj(self.norm(x))
        u, z = xz.chunk(2, dim=-1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :T]).transpose(1, 2)
        dt, Bs, Cs = torch.split(self.x_proj(u), [R, N, N], dim=-1)
        dt = F.softplus(self.dt_proj(dt))
        A = -torch.exp(self.A_log.float())
        dA = torch.exp(torch.einsum("btd,dn->btdn", dt.float(), A))
        dBu = torch.einsum("btd,btn,btd->btdn", dt.float(), Bs.float(), u.float())
        h = torch.zeros(Bn, self.E, N)
        ys = []
        for t in range(T):
            h = dA[:, t] * h + dBu[:, t]
            ys.append(torch.einsum("bdn,bn->bd", h, Cs[:, t].float()))
        y = torch.stack(ys, dim=1).to(u.dtype) + u * self.Dskip
        y = y * F.silu(z)
        logits = self.head(x + self.out_proj(y))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


class QwenMoE(nn.Module):
    EXPERTS, TOP = 8, 4

    def __init__(self):
        super().__init__()
        self.tok, self.norm = nn.Embedding(VOCAB, D), GemmaNorm()
        self.router = nn.Linear(D, self.EXPERTS, bias=False)
        self.experts = nn.ModuleList(
            nn.ModuleList([nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)]) for _ in range(self.EXPERTS)
        )
        self.shared = nn.ModuleList([nn.Linear(D, 2 * D, bias=False), nn.Linear(D, 2 * D, bias=False), nn.Linear(2 * D, D, bias=False)])
        self.shared_gate, self.head = nn.Linear(D, 1, bias=False), nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx)
        Bn, T, _ = x.shape
        h = self.norm(x).view(-1, D)
        logits = self.router(h)
        weights = F.softmax(logits, dim=1, dtype=torch.float)
        weights, chosen = torch.topk(weights, self.TOP, dim=-1)
        weights = weights.to(h.dtype)
        out = torch.zeros_like(h)
        mask = F.one_hot(chosen, num_classes=self.EXPERTS).permute(2, 1, 0)
        for e, (g, u, d) in enumerate(self.experts):
            slot, tokens = torch.where(mask[e])
            if tokens.numel() == 0:
                continue
            xe = h[None, tokens].reshape(-1, D)
            ye = d(F.silu(g(xe)) * u(xe)) * weights[tokens, slot, None]
            out.index_add_(0, tokens, ye.to(h.dtype))
        g, u, d = self.shared
        out = out + torch.sigmoid(self.shared_gate(h)) * d(F.silu(g(h)) * u(h))
        y = x + out.view(Bn, T, D)
        ce = F.cross_entropy(self.head(y).view(-1, VOCAB), targets.view(-1))
        probs = F.softmax(logits.float(), dim=-1)
        load = F.one_hot(chosen, self.EXPERTS).float().mean(dim=(0, 1))
        aux = (load * probs.mean(0)).sum() * self.EXPERTS
        return ce + 0.01 * aux


class TorchNN(nn.Module):
    """torch.nn's own blocks: MultiheadAttention (no dropout), a GRU and an LSTM, GroupNorm on a 1-D
    conv, F.normalize and a cosine-similarity head (a CLIP-like contrastive loss)."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D, padding_idx=0)
        self.mha = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.gru, self.lstm = nn.GRU(D, D, batch_first=True), nn.LSTM(D, D, batch_first=True)
        self.conv, self.gn = nn.Conv1d(D, D, 3, padding=1), nn.GroupNorm(4, D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, idx, targets):
        x = self.tok(idx)
        T = idx.shape[1]
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        a, _ = self.mha(x, x, x, attn_mask=causal, need_weights=False)
        x = x + a
        x = x + self.gru(x)[0]
        x = x + self.lstm(x)[0]
        x = x + F.silu(self.gn(self.conv(x.transpose(1, 2)))).transpose(1, 2)
        ce = F.cross_entropy(self.head(x).view(-1, VOCAB), targets.view(-1))
        z = F.normalize(x.mean(1), dim=-1)
        sim = F.cosine_similarity(z[:, None, :], z[None, :, :], dim=-1) / 0.07
        return ce + 0.1 * F.cross_entropy(sim, torch.arange(z.shape[0]))


MODELS = {"gpt2": GPT2, "bert": Bert, "t5": T5, "vit": ViT, "gemma": Gemma, "mamba": Mamba, "qwenmoe": QwenMoE, "torchnn": TorchNN}


def batch(generator, Bn):
    """A copy task (a repeated stretch of 8 tokens) for the language models, a colour task for ViT."""
    if MODEL == "vit":
        labels = torch.randint(0, 10, (Bn,), generator=generator)
        images = torch.randn(Bn, 3, 16, 16, generator=generator) * 0.5 + labels[:, None, None, None] / 5.0
        return images, labels
    pattern = torch.randint(0, VOCAB, (Bn, 8), generator=generator)
    seq = pattern.repeat(1, SEQ // 8 + 1)[:, : SEQ + 1]
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


model = MODELS[MODEL]()
g = torch.Generator().manual_seed(1)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for _ in range(100):
    inputs, targets = batch(g, 8)
    loss = model(inputs, targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(MODEL, "trained, loss %.3f" % loss.item())

if NAME != "amp":
    model = model.to(DTYPE)
model.zero_grad()
model.train()
TASK = os.environ.get("TASK", "tensor")  # or statistics: re-run in cpu mode on random inputs
config = {
    "task": TASK,
    "dump_path": OUT,
    "rank": [],
    "step": [],
    "level": "L1",
    "async_dump": False,
    TASK: {"scope": [], "list": [], "data_mode": ["all"]},
    "risk_level": "ALL",
}
os.makedirs(OUT, exist_ok=True)
cfg = os.path.join(OUT, f"config_{MODEL}_{NAME}.json")
with open(cfg, "w") as f:
    json.dump(config, f)
debugger = PrecisionDebugger(config_path=cfg)
inputs, targets = batch(g, B)
if MODEL == "vit":
    inputs = inputs.to(DTYPE) if NAME != "amp" else inputs
debugger.start(model=model)
with torch.autocast("cpu", dtype=torch.bfloat16, enabled=NAME == "amp"):
    loss = model(inputs, targets)
(loss * LOSS_SCALE).backward()
debugger.stop()
debugger.step()
print(MODEL, NAME, "loss %.3f" % float(loss), "done in %.1fs" % (time.time() - t0))
