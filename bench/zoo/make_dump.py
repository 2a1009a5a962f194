"""Model families the project's tests/data dumps do not cover, dumped by msprobe 26.2.0 at level L1
with no API list (every wrapped API is recorded, views, casts and dropout included), to look for
false errors on clean steps (issue 27: verdicts a CI gate can trust on held-out families).

    MODEL=NAME DTYPE=fp32|bf16|fp16|amp [TASK=statistics] python make_dump.py OUT

NAME is one of MODELS (each class says what it holds):

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
bloom, neox, mistral (Qwen2's biases too), deepseek (latent attention, group-limited sigmoid routing),
unet (diffusion), convnet (ConvNeXt and EfficientNet blocks), swin, clip, linattn (linear attention,
segment sums, cumprod gates), segdet (dense-prediction heads and losses): the second round, their docstrings say which code paths.

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
LOSS_SCALE = float(os.environ.get("LOSS_SCALE", 1024.0)) if NAME == "fp16" else 1.0  # a dynamic scaler starts at 65536
# Small by default (which APIs, which dtypes); WIDTH=1024 SEQ=1024 VOCAB=8192 HEADS=8 B=1 STEPS=20 gives a
# layer at a real head width (128) and sequence length, for the accumulation terms.
VOCAB, D, HEADS, SEQ, B = (int(os.environ.get(k, v)) for k, v in (("VOCAB", 96), ("WIDTH", 48), ("HEADS", 4), ("SEQ", 16), ("B", 2)))
STEPS = int(os.environ.get("STEPS", 100))
BLOCKS = int(os.environ.get("BLOCKS", 2))  # gpt2's blocks: 4 make a 266-entry step (bench.timing.fixed_costs)
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
        self.blocks = nn.ModuleList(GPT2Block() for _ in range(BLOCKS))
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


def rope_cache(T, dim, offset, theta=10000.0):
    """LLaMA's rotary tables in fp32 at positions offset .. offset + T (a long context's late tokens)."""
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = torch.outer(torch.arange(offset, offset + T, dtype=torch.float32), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(q, k, cos, sin):
    cos, sin = cos.to(q.dtype)[None, None], sin.to(q.dtype)[None, None]
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class RMSNorm(nn.Module):  # LLaMA's, written out: fp32 statistics, the weight in the model's dtype
    def __init__(self, n=D):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(dtype)


class Bloom(nn.Module):
    """BLOOM: ALiBi by baddbmm (beta 1, alpha 1/sqrt(d)), fused qkv with heads interleaved, a padding
    mask by masked_fill against finfo.min, softmax in fp32, bmm, bloom_gelu written out, an embedding
    LayerNorm."""

    def __init__(self):
        super().__init__()
        self.tok, self.ln_emb = nn.Embedding(VOCAB, D), nn.LayerNorm(D)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.dense = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.up, self.down = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    @staticmethod
    def alibi(attention, dtype):
        slopes = torch.tensor([2 ** (-8 * (i + 1) / HEADS) for i in range(HEADS)])
        positions = ((attention.cumsum(dim=-1) - 1) * attention)[:, None, :]
        return (slopes[None, :, None] * positions).reshape(-1, 1, attention.shape[1]).to(dtype)

    def forward(self, idx, targets):
        Bn, T = idx.shape
        lengths = T - 3 * (torch.arange(Bn) % 2)
        attention = (torch.arange(T)[None, :] < lengths[:, None]).long()
        x = self.ln_emb(self.tok(idx))
        h = self.ln1(x)
        fused = self.qkv(h).view(Bn, T, HEADS, 3, HD)
        q = fused[..., 0, :].transpose(1, 2).reshape(Bn * HEADS, T, HD)
        k = fused[..., 1, :].permute(0, 2, 3, 1).reshape(Bn * HEADS, HD, T)
        v = fused[..., 2, :].transpose(1, 2).reshape(Bn * HEADS, T, HD)
        scores = torch.baddbmm(self.alibi(attention, x.dtype), q, k, beta=1.0, alpha=HD**-0.5)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)[None, None] | (attention[:, None, None, :] == 0)
        scores = scores.view(Bn, HEADS, T, T).masked_fill(causal, torch.finfo(scores.dtype).min)
        p = F.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
        ctx = torch.bmm(p.view(Bn * HEADS, T, T), v).view(Bn, HEADS, T, HD).permute(0, 2, 1, 3).reshape(Bn, T, D)
        x = x + self.dense(ctx)
        u = self.up(self.ln2(x))
        x = x + self.down(u * 0.5 * (1.0 + torch.tanh(0.79788456 * u * (1 + 0.044715 * u * u))))
        logits = F.linear(self.ln_f(x), self.tok.weight)
        labels = targets.masked_fill(attention == 0, -100)
        return F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1))


class NeoX(nn.Module):
    """GPT-NeoX / Pythia: fused qkv, partial rotary (a third of each head) at positions from 3000,
    a parallel residual (x + attn(ln1 x) + mlp(ln2 x)), SDPA with is_causal, exact gelu."""

    ROT = 4

    def __init__(self):
        super().__init__()
        self.tok, self.head = nn.Embedding(VOCAB, D), nn.Linear(D, VOCAB, bias=False)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.dense = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.up, self.down = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, idx, targets):
        x = self.tok(idx)
        Bn, T, _ = x.shape
        qkv = self.qkv(self.ln1(x)).view(Bn, T, HEADS, 3 * HD).permute(0, 2, 1, 3)
        q, k, v = qkv[..., :HD], qkv[..., HD : 2 * HD], qkv[..., 2 * HD :]
        cos, sin = rope_cache(T, self.ROT, 3000)
        q_rot, k_rot = apply_rope(q[..., : self.ROT], k[..., : self.ROT], cos, sin)
        q = torch.cat((q_rot, q[..., self.ROT :]), dim=-1)
        k = torch.cat((k_rot, k[..., self.ROT :]), dim=-1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        attn = self.dense(a.transpose(1, 2).reshape(Bn, T, D))
        x = x + attn + self.down(F.gelu(self.up(self.ln2(x))))
        return F.cross_entropy(self.head(self.ln_f(x)).view(-1, VOCAB), targets.view(-1))


def repeat_kv(x, n):
    b, h, t, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, t, d).reshape(b, h * n, t, d)


class Mistral(nn.Module):
    """Mistral / Qwen2: q/k/v with bias (Qwen2), GQA (2 KV heads) by repeat_kv, RoPE theta 1e6 at
    positions from 5000, a sliding window of 6 (a quarter of longer sequences) as a boolean SDPA mask, RMSNorm written out, SwiGLU."""

    KV, WINDOW = 2, max(6, SEQ // 4)

    def __init__(self):
        super().__init__()
        self.tok, self.head = nn.Embedding(VOCAB, D), nn.Linear(D, VOCAB, bias=False)
        self.n1, self.n2, self.nf = RMSNorm(), RMSNorm(), RMSNorm()
        self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, self.KV * HD), nn.Linear(D, self.KV * HD)
        self.o = nn.Linear(D, D, bias=False)
        self.gate, self.up, self.down = nn.Linear(D, 2 * D, bias=False), nn.Linear(D, 2 * D, bias=False), nn.Linear(2 * D, D, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx)
        Bn, T, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(Bn, T, HEADS, HD).transpose(1, 2)
        k = self.k(h).view(Bn, T, self.KV, HD).transpose(1, 2)
        v = self.v(h).view(Bn, T, self.KV, HD).transpose(1, 2)
        cos, sin = rope_cache(T, HD, 5000, theta=1e6)
        q, k = apply_rope(q, k, cos, sin)
        k, v = repeat_kv(k, HEADS // self.KV), repeat_kv(v, HEADS // self.KV)
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = (j <= i) & (i - j < self.WINDOW)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + self.o(a.transpose(1, 2).reshape(Bn, T, D))
        h = self.n2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return F.cross_entropy(self.head(self.nf(x)).float().view(-1, VOCAB), targets.view(-1))


class DeepSeek(nn.Module):
    """DeepSeek-V3-style: multi-head latent attention (low-rank q and kv with their RMSNorms, a
    decoupled rotary part shared by the heads, eager attention with an fp32 softmax) and a MoE with
    sigmoid scores, a correction bias, group-limited top-2 of 8 (4 groups, 2 chosen), renormalised
    weights times a routed scaling factor, tokens sorted by expert (argsort, scatter_ counts) and put
    back by index assignment, and a shared expert."""

    H, QL, KVL, NOPE, ROPE, VD = HEADS, 24, 16, 8, 4, 8
    EXPERTS, TOP, GROUPS, TOPG = 8, 2, 4, 2

    def __init__(self):
        super().__init__()
        H, NOPE, ROPE, VD = self.H, self.NOPE, self.ROPE, self.VD
        self.tok, self.head = nn.Embedding(VOCAB, D), nn.Linear(D, VOCAB, bias=False)
        self.n1, self.n2, self.nf = RMSNorm(), RMSNorm(), RMSNorm()
        self.q_a, self.q_norm, self.q_b = nn.Linear(D, self.QL, bias=False), RMSNorm(self.QL), nn.Linear(self.QL, H * (NOPE + ROPE), bias=False)
        self.kv_a, self.kv_norm = nn.Linear(D, self.KVL + ROPE, bias=False), RMSNorm(self.KVL)
        self.kv_b, self.o = nn.Linear(self.KVL, H * (NOPE + VD), bias=False), nn.Linear(H * VD, D, bias=False)
        self.gate = nn.Parameter(torch.randn(self.EXPERTS, D) * 0.05)
        self.register_buffer("correction", torch.linspace(-0.02, 0.02, self.EXPERTS))
        self.experts = nn.ModuleList(
            nn.ModuleList([nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)]) for _ in range(self.EXPERTS)
        )
        self.shared = nn.ModuleList([nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)])

    def attention(self, h):
        H, NOPE, ROPE, VD = self.H, self.NOPE, self.ROPE, self.VD
        Bn, T, _ = h.shape
        q = self.q_b(self.q_norm(self.q_a(h))).view(Bn, T, H, NOPE + ROPE).transpose(1, 2)
        q_nope, q_pe = torch.split(q, [NOPE, ROPE], dim=-1)
        ckv, k_pe = torch.split(self.kv_a(h), [self.KVL, ROPE], dim=-1)
        k_pe = k_pe.view(Bn, T, 1, ROPE).transpose(1, 2)
        kv = self.kv_b(self.kv_norm(ckv)).view(Bn, T, H, NOPE + VD).transpose(1, 2)
        k_nope, v = torch.split(kv, [NOPE, VD], dim=-1)
        cos, sin = rope_cache(T, ROPE, 2048)
        q_pe, k_pe = apply_rope(q_pe, k_pe, cos, sin)
        q = torch.cat([q_nope, q_pe], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(Bn, H, T, ROPE)], dim=-1)
        s = torch.matmul(q, k.transpose(2, 3)) * (NOPE + ROPE) ** -0.5
        s = s + torch.triu(torch.full((T, T), torch.finfo(s.dtype).min), 1).to(s.dtype)
        p = F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o(torch.matmul(p, v).transpose(1, 2).reshape(Bn, T, H * VD))

    def moe(self, h):
        E, G = self.EXPERTS, self.GROUPS
        scores = F.linear(h.float(), self.gate.float()).sigmoid()
        choice = scores + self.correction[None]
        group_scores = choice.view(-1, G, E // G).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=self.TOPG, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
        topk_idx = torch.topk(choice.masked_fill(~score_mask.bool(), 0.0), k=self.TOP, dim=-1, sorted=False)[1]
        topk_w = scores.gather(1, topk_idx)
        topk_w = topk_w / (topk_w.sum(dim=-1, keepdim=True) + 1e-20) * 2.5
        counts = topk_idx.new_zeros((topk_idx.shape[0], E))
        counts.scatter_(1, topk_idx, 1)
        per_expert = counts.sum(dim=0)
        order = topk_idx.view(-1).argsort()
        sorted_tokens = h[order // topk_idx.shape[1]]
        outs, start = [], 0
        for e, n in enumerate(per_expert.tolist()):
            if n:
                g, u, d = self.experts[e]
                t = sorted_tokens[start : start + n]
                outs.append(d(F.silu(g(t)) * u(t)))
                start += n
        outs = torch.cat(outs, dim=0)
        back = torch.empty_like(outs)
        back[order] = outs
        y = back.view(*topk_idx.shape, -1).type(topk_w.dtype).mul_(topk_w.unsqueeze(-1)).sum(dim=1).type(back.dtype)
        g, u, d = self.shared
        return y + d(F.silu(g(h)) * u(h))

    def forward(self, idx, targets):
        x = self.tok(idx)
        Bn, T, _ = x.shape
        x = x + self.attention(self.n1(x))
        x = x + self.moe(self.n2(x).view(-1, D)).view(Bn, T, D)
        return F.cross_entropy(self.head(self.nf(x)).float().view(-1, VOCAB), targets.view(-1))


class ResBlock(nn.Module):
    def __init__(self, cin, cout, temb):
        super().__init__()
        self.n1, self.n2 = nn.GroupNorm(8, cin), nn.GroupNorm(8, cout)
        self.c1, self.c2 = nn.Conv2d(cin, cout, 3, padding=1), nn.Conv2d(cout, cout, 3, padding=1)
        self.t = nn.Linear(temb, cout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):
        h = self.c1(F.silu(self.n1(x)))
        h = h + self.t(F.silu(emb))[:, :, None, None]
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class UNet(nn.Module):
    """A diffusion UNet: sinusoidal timestep embeddings (t up to 884), GroupNorm + SiLU res blocks
    with the time added per channel, a strided conv down, a spatial self-attention by bmm, nearest
    upsampling by interpolate and a transposed conv, a skip by cat, an epsilon MSE loss."""

    C = 16

    def __init__(self):
        super().__init__()
        C = self.C
        self.t1, self.t2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, 4 * C)
        self.inp, self.res1 = nn.Conv2d(3, C, 3, padding=1), ResBlock(C, C, 4 * C)
        self.down, self.res2 = nn.Conv2d(C, 2 * C, 3, stride=2, padding=1), ResBlock(2 * C, 2 * C, 4 * C)
        self.an, self.qkv, self.proj = nn.GroupNorm(8, 2 * C), nn.Conv2d(2 * C, 6 * C, 1), nn.Conv2d(2 * C, 2 * C, 1)
        self.up_conv, self.up_t = nn.Conv2d(2 * C, C, 3, padding=1), nn.ConvTranspose2d(2 * C, C, 2, stride=2)
        self.res3, self.out_n, self.out = ResBlock(3 * C, C, 4 * C), nn.GroupNorm(8, C), nn.Conv2d(C, 3, 3, padding=1)

    def embed(self, t, dtype):
        half = self.C // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1).to(dtype)

    def attend(self, x):
        Bn, C, Hh, Ww = x.shape
        q, k, v = self.qkv(self.an(x)).reshape(Bn, 3, C, Hh * Ww).unbind(1)
        w = F.softmax(torch.bmm(q.transpose(1, 2), k) * C**-0.5, dim=-1)
        return x + self.proj(torch.bmm(v, w.transpose(1, 2)).reshape(Bn, C, Hh, Ww))

    def forward(self, images, labels):
        t = labels * 97 + 11
        abar = torch.cos((t.float() / 1000 + 0.008) / 1.008 * math.pi / 2) ** 2
        noise = torch.sin(images.float() * 7.0 + 1.0)
        a = abar[:, None, None, None]
        x = (a.sqrt() * images.float() + (1 - a).sqrt() * noise).to(images.dtype)
        emb = self.t2(F.silu(self.t1(self.embed(t, images.dtype))))
        h1 = self.res1(self.inp(x), emb)
        h2 = self.attend(self.res2(self.down(h1), emb))
        up = self.up_conv(F.interpolate(h2, scale_factor=2.0, mode="nearest")) + self.up_t(h2)
        h = self.res3(torch.cat([up, h1, h1 * 0.5], dim=1), emb)
        return F.mse_loss(self.out(F.silu(self.out_n(h))).float(), noise)


class LayerNorm2d(nn.Module):  # ConvNeXt's channels-first LayerNorm, written out
    def __init__(self, c):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + 1e-6)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class ConvNet(nn.Module):
    """ConvNeXt and EfficientNet blocks: a patchify stem, a depthwise 7x7 conv, a channels-last
    LayerNorm, layer scale; an MBConv with BatchNorm (training statistics), SiLU, a depthwise 3x3,
    squeeze-excitation (adaptive_avg_pool2d, sigmoid), hardswish; global pooling and a head."""

    def __init__(self):
        super().__init__()
        c, e = 24, 32
        self.stem, self.stem_norm = nn.Conv2d(3, c, 4, stride=4), LayerNorm2d(c)
        self.dw, self.ln = nn.Conv2d(c, c, 7, padding=3, groups=c), nn.LayerNorm(c, eps=1e-6)
        self.pw1, self.pw2, self.gamma = nn.Linear(c, 4 * c), nn.Linear(4 * c, c), nn.Parameter(0.1 * torch.ones(c))
        self.down_norm, self.down = LayerNorm2d(c), nn.Conv2d(c, e, 2, stride=2)
        self.expand, self.bn1 = nn.Conv2d(e, 4 * e, 1, bias=False), nn.BatchNorm2d(4 * e)
        self.mb_dw, self.bn2 = nn.Conv2d(4 * e, 4 * e, 3, padding=1, groups=4 * e, bias=False), nn.BatchNorm2d(4 * e)
        self.se1, self.se2 = nn.Conv2d(4 * e, e // 4, 1), nn.Conv2d(e // 4, 4 * e, 1)
        self.project, self.bn3 = nn.Conv2d(4 * e, e, 1, bias=False), nn.BatchNorm2d(e)
        self.head_norm, self.head = nn.LayerNorm(e), nn.Linear(e, 10)

    def forward(self, images, labels):
        x = self.stem_norm(self.stem(images))
        h = self.dw(x).permute(0, 2, 3, 1)
        h = self.gamma * self.pw2(F.gelu(self.pw1(self.ln(h))))
        x = x + h.permute(0, 3, 1, 2)
        x = self.down(self.down_norm(x))
        h = F.silu(self.bn1(self.expand(x)))
        h = F.hardswish(self.bn2(self.mb_dw(h)))
        s = torch.sigmoid(self.se2(F.silu(self.se1(F.adaptive_avg_pool2d(h, 1)))))
        x = x + self.bn3(self.project(h * s))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.cross_entropy(self.head(self.head_norm(x)), labels)


class Swin(nn.Module):
    """Swin: patch embedding, window attention (4x4 windows) with a relative position bias gathered
    from a table, a second block on windows shifted by torch.roll with its -100 mask, patch merging by
    strided slices and cat, mean pooling."""

    WS = 4

    def __init__(self):
        super().__init__()
        ws = self.WS
        self.patch, self.pn = nn.Conv2d(3, D, 2, stride=2), nn.LayerNorm(D)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "n1": nn.LayerNorm(D),
                    "qkv": nn.Linear(D, 3 * D),
                    "proj": nn.Linear(D, D),
                    "n2": nn.LayerNorm(D),
                    "fc1": nn.Linear(D, 2 * D),
                    "fc2": nn.Linear(2 * D, D),
                }
            )
            for _ in range(2)
        )
        self.tables = nn.ParameterList(nn.Parameter(torch.randn((2 * ws - 1) ** 2, HEADS) * 0.02) for _ in range(2))
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + ws - 1
        self.register_buffer("rel_index", rel[..., 0] * (2 * ws - 1) + rel[..., 1])
        img = torch.zeros(1, 8, 8, 1)
        cnt = 0
        for hs in (slice(0, -ws), slice(-ws, -2), slice(-2, None)):
            for wsl in (slice(0, -ws), slice(-ws, -2), slice(-2, None)):
                img[:, hs, wsl, :] = cnt
                cnt += 1
        mw = self.windows(img).squeeze(-1)
        self.register_buffer("shift_mask", (mw[:, None, :] - mw[:, :, None]).ne(0).float() * -100.0)
        self.merge_norm, self.merge = nn.LayerNorm(4 * D), nn.Linear(4 * D, 2 * D, bias=False)
        self.head_norm, self.head = nn.LayerNorm(2 * D), nn.Linear(2 * D, 10)

    def windows(self, x):
        Bn, Hh, Ww, C = x.shape
        ws = self.WS
        return x.view(Bn, Hh // ws, ws, Ww // ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)

    def block(self, x, b, shift):
        Bn, Hh, Ww, C = x.shape
        ws, N = self.WS, self.WS * self.WS
        m = self.blocks[b]
        h = m["n1"](x)
        if shift:
            h = torch.roll(h, shifts=(-shift, -shift), dims=(1, 2))
        w = self.windows(h)
        q, k, v = m["qkv"](w).reshape(-1, N, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        attn = (q * HD**-0.5) @ k.transpose(-2, -1)
        bias = self.tables[b][self.rel_index.view(-1)].view(N, N, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if shift:
            nw = self.shift_mask.shape[0]
            attn = attn.view(-1, nw, HEADS, N, N) + self.shift_mask.to(attn.dtype)[None, :, None]
            attn = attn.view(-1, HEADS, N, N)
        h = m["proj"]((F.softmax(attn, dim=-1) @ v).transpose(1, 2).reshape(-1, N, C))
        h = h.view(Bn, Hh // ws, Ww // ws, ws, ws, C).permute(0, 1, 3, 2, 4, 5).reshape(Bn, Hh, Ww, C)
        if shift:
            h = torch.roll(h, shifts=(shift, shift), dims=(1, 2))
        x = x + h
        return x + m["fc2"](F.gelu(m["fc1"](m["n2"](x))))

    def forward(self, images, labels):
        x = self.pn(self.patch(images).permute(0, 2, 3, 1))
        x = self.block(self.block(x, 0, 0), 1, self.WS // 2)
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], dim=-1)
        x = self.merge(self.merge_norm(x))
        return F.cross_entropy(self.head(self.head_norm(x.mean(dim=(1, 2)))), labels)


class CLIP(nn.Module):
    """CLIP: a text transformer with an additive causal mask, quick_gelu (x * sigmoid(1.702 x)) and
    pooling at each text's end token (argmax), a ViT image tower with a class token, projections,
    L2 normalisation by norm(), logit_scale.exp(), and the symmetric contrastive loss."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Parameter(torch.randn(SEQ, D) * 0.01)
        self.patch, self.cls = nn.Conv2d(3, D, 4, stride=4, bias=False), nn.Parameter(torch.randn(D) * 0.02)
        self.vpos, self.ln_pre = nn.Parameter(torch.randn(17, D) * 0.01), nn.LayerNorm(D)
        self.towers = nn.ModuleList(
            nn.ModuleDict({"n1": nn.LayerNorm(D), "qkv": nn.Linear(D, 3 * D), "o": nn.Linear(D, D), "n2": nn.LayerNorm(D), "fc1": nn.Linear(D, 4 * D), "fc2": nn.Linear(4 * D, D)})
            for _ in range(2)
        )
        self.ln_text, self.ln_post = nn.LayerNorm(D), nn.LayerNorm(D)
        self.text_proj, self.image_proj = nn.Linear(D, 32, bias=False), nn.Linear(D, 32, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def layer(self, x, m, mask):
        Bn, T, _ = x.shape
        q, k, v = m["qkv"](m["n1"](x)).view(Bn, T, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        s = torch.matmul(q, k.transpose(-1, -2)) * HD**-0.5
        if mask is not None:
            s = s + mask
        a = torch.matmul(F.softmax(s, dim=-1), v).transpose(1, 2).reshape(Bn, T, D)
        x = x + m["o"](a)
        u = m["fc1"](m["n2"](x))
        return x + m["fc2"](u * torch.sigmoid(1.702 * u))

    def forward(self, images, text):
        Bn, T = text.shape
        x = self.tok(text) + self.pos[:T]
        mask = torch.full((T, T), float("-inf")).triu(1).to(x.dtype)
        x = self.ln_text(self.layer(x, self.towers[0], mask))
        t = self.text_proj(x[torch.arange(Bn), text.argmax(dim=-1)])
        p = self.patch(images).flatten(2).transpose(1, 2)
        p = torch.cat([self.cls.to(p.dtype).expand(Bn, 1, D), p], dim=1) + self.vpos
        p = self.layer(self.ln_pre(p), self.towers[1], None)
        i = self.image_proj(self.ln_post(p[:, 0]))
        i = i / i.norm(p=2, dim=-1, keepdim=True)
        t = t / t.norm(p=2, dim=-1, keepdim=True)
        logits = self.logit_scale.exp() * i @ t.t()
        labels = torch.arange(Bn)
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


class LinAttn(nn.Module):
    """Linear-attention / SSM-style recurrences in parallel form: RWKV's token shift by F.pad, elu + 1
    feature maps with causal sums by cumsum, a Mamba-2 segment sum (differences of a cumsum, masked,
    exp), GLA-style gates by cumprod of sigmoids, a per-head group_norm, a silu output gate."""

    def __init__(self):
        super().__init__()
        self.tok, self.head = nn.Embedding(VOCAB, D), nn.Linear(D, VOCAB, bias=False)
        self.mu = nn.Parameter(torch.full((D,), 0.5))
        self.q, self.k, self.v, self.g, self.o = (nn.Linear(D, D, bias=False) for _ in range(5))
        self.decay = nn.Linear(D, HEADS)
        self.gates = nn.Linear(D, HEADS)
        self.norm, self.gn_w = RMSNorm(), nn.Parameter(torch.ones(D))

    def forward(self, idx, targets):
        x = self.tok(idx)
        Bn, T, _ = x.shape
        h = self.norm(x)
        shifted = F.pad(h, (0, 0, 1, -1))
        h = h * self.mu + shifted * (1 - self.mu)
        q, k, v = (lin(h).view(Bn, T, HEADS, HD).transpose(1, 2) for lin in (self.q, self.k, self.v))
        q, k = F.elu(q) + 1, F.elu(k) + 1
        kv = torch.cumsum(k[..., :, None] * v[..., None, :], dim=2)
        z = torch.cumsum(k, dim=2)
        num = torch.einsum("bhtd,bhtde->bhte", q, kv)
        den = torch.einsum("bhtd,bhtd->bht", q, z)[..., None] + 1e-6
        lin_out = num / den
        a = -F.softplus(self.decay(h)).transpose(1, 2)  # (B, H, T) log-decays
        cs = torch.cumsum(a, dim=-1)
        seg = cs[..., :, None] - cs[..., None, :]
        seg = seg.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
        s = torch.matmul(q, k.transpose(-1, -2)) * torch.exp(seg)
        ssm_out = torch.matmul(s, v) / T
        gate = torch.cumprod(torch.sigmoid(self.gates(h)).transpose(1, 2), dim=-1)[..., None]
        y = (lin_out + ssm_out * gate).transpose(1, 2).reshape(Bn * T, D)
        y = F.group_norm(y, HEADS, self.gn_w).view(Bn, T, D)
        x = x + self.o(y * F.silu(self.g(h)))
        return F.cross_entropy(self.head(x).view(-1, VOCAB), targets.view(-1))


class SegDet(nn.Module):
    """Dense-prediction heads: InstanceNorm (affine), leaky_relu, max_pool2d, a pixel_shuffle
    upsampler, bilinear interpolate (align_corners False) back to the image, a mask loss by
    binary_cross_entropy_with_logits, boxes by smooth_l1_loss, a distillation term by kl_div of
    log_softmax against softmax, mish, and a per-image standardisation by var and std."""

    def __init__(self):
        super().__init__()
        self.c1, self.n1 = nn.Conv2d(3, 16, 3, padding=1), nn.InstanceNorm2d(16, affine=True)
        self.c2, self.n2 = nn.Conv2d(16, 32, 3, padding=1), nn.InstanceNorm2d(32, affine=True)
        self.shuffle = nn.Conv2d(32, 4 * 16, 1)
        self.mask, self.box = nn.Conv2d(16, 1, 1), nn.Linear(32, 4)
        self.student, self.teacher = nn.Linear(32, 10), nn.Linear(32, 10)

    def forward(self, images, labels):
        x = (images - images.mean(dim=(1, 2, 3), keepdim=True)) / images.std(dim=(1, 2, 3), keepdim=True)
        h = F.leaky_relu(self.n1(self.c1(x)), 0.1)
        h = F.max_pool2d(h, 2)
        h = F.mish(self.n2(self.c2(h)))
        feat = F.adaptive_avg_pool2d(h, 1).flatten(1)
        up = F.pixel_shuffle(self.shuffle(h), 2)  # back to the image's size / 1
        logits = F.interpolate(self.mask(up), size=images.shape[-2:], mode="bilinear", align_corners=False)
        target = (images.mean(1, keepdim=True) > 0).to(logits.dtype)
        mask_loss = F.binary_cross_entropy_with_logits(logits, target)
        boxes = torch.stack([labels / 10.0, labels / 20.0, 1 - labels / 10.0, labels.float().var().expand_as(labels)], 1)
        box_loss = F.smooth_l1_loss(self.box(feat), boxes.to(feat.dtype), beta=0.5)
        distill = F.kl_div(F.log_softmax(self.student(feat), -1), F.softmax(self.teacher(feat).detach(), -1), reduction="batchmean")
        return mask_loss + box_loss + distill + F.cross_entropy(self.student(feat), labels)


MODELS = {
    "gpt2": GPT2, "bert": Bert, "t5": T5, "vit": ViT, "gemma": Gemma, "mamba": Mamba, "qwenmoe": QwenMoE, "torchnn": TorchNN,
    "bloom": Bloom, "neox": NeoX, "mistral": Mistral, "deepseek": DeepSeek, "unet": UNet, "convnet": ConvNet, "swin": Swin,
    "clip": CLIP, "linattn": LinAttn, "segdet": SegDet,
}  # fmt: skip
IMAGES = {"vit": 16, "unet": 16, "swin": 16, "clip": 16, "convnet": 32, "segdet": 16}


def batch(generator, Bn):
    """A copy task (a repeated stretch of 8 tokens) for the language models, a colour task for the image
    models (and a caption for CLIP)."""
    if MODEL in IMAGES:
        size = IMAGES[MODEL]
        labels = torch.randint(0, 10, (Bn,), generator=generator)
        images = torch.randn(Bn, 3, size, size, generator=generator) * 0.5 + labels[:, None, None, None] / 5.0
        if MODEL == "clip":  # a caption: the label's tokens, then the end token (the largest id) at a varying place
            text = (labels[:, None] * 7 + torch.arange(SEQ)[None, :]) % (VOCAB - 1)
            ends = 4 + labels % (SEQ - 4)
            return images, text.scatter(1, ends[:, None], VOCAB - 1)
        return images, labels
    pattern = torch.randint(0, VOCAB, (Bn, 8), generator=generator)
    seq = pattern.repeat(1, SEQ // 8 + 1)[:, : SEQ + 1]
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


model = MODELS[MODEL]()
g = torch.Generator().manual_seed(1)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for _ in range(STEPS):
    inputs, targets = batch(g, 8 if SEQ <= 64 else 1)
    loss = model(inputs, targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(MODEL, "trained, loss %.3f" % loss.item(), "in %.1fs" % (time.time() - t0))

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
if MODEL in IMAGES and NAME != "amp":
    inputs = inputs.to(DTYPE)
debugger.start(model=model)
with torch.autocast("cpu", dtype=torch.bfloat16, enabled=NAME == "amp"):
    loss = model(inputs, targets)
(loss * LOSS_SCALE).backward()
debugger.stop()
debugger.step()
print(MODEL, NAME, "loss %.3f" % float(loss), "done in %.1fs" % (time.time() - t0))
