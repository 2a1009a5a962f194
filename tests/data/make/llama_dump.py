"""A small LLaMA-style decoder, and a top-2 MoE variant of it, for tests/data/llama_<dtype> and
tests/data/moe_<dtype>: the APIs of a modern decoder at small widths (d_model 64, 4 query heads of 16,
2 key/value heads, vocabulary 128, seq 32, batch 1) so that the tensor dumps stay small.

    MODEL=llama|moe DTYPE=fp32|bf16|fp16 python llama_dump.py llama_tensor_L1.json

llama: two blocks of RMSNorm written out (x.float().pow(2).mean(-1), rsqrt, the weight's product back in
the model's dtype), RoPE with the angles computed in fp32 from positions 4000..4031 (cos and sin of
arguments in the thousands), q/o projections of square weights and k/v of non-square ones, on 3-D
activations (B, T, D), no bias; attention by F.scaled_dot_product_attention(is_causal=True) with GQA by
repeat_interleave in block 0, written out in block 1 (GQA by expand and reshape, 4-D matmul for Q.K^T and
P.V, a causal mask added, softmax in fp32); a SwiGLU MLP (silu(gate) * up, down); the loss is
cross_entropy plus a z-loss (1e-4 * logsumexp(logits.float())^2).
moe: one block whose attention has biased q/k/v projections (Qwen-style) and runs on 3-D (B*H, T, d)
batches: baddbmm for the scores (the causal mask its additive input), bmm for P.V; its MLP is a top-2
mixture of 4 SwiGLU experts (router softmax in fp32, topk, the routing weights picked by gather and
renormalised, each expert's tokens picked by gather and its output put back by index_add_); the logits
by einsum against the tied embedding.

Both are trained first (fp32, AdamW, a synthetic copy task) so that attention is no longer uniform,
then cast to the dump's dtype (model.to(dtype): every API runs in that dtype on the CPU, whose kernels
accumulate in fp32) and dumped for one step (forward and backward, no optimiser) by msprobe 26.2.0 at
level L1 with an API list (llama_tensor_L1.json, risk level ALL so that repeat_interleave and expand are
kept; views, transposes and casts are not in the list). fp16 is loss-scaled: the backward starts from
loss * 1024, as a GradScaler's would.
"""
import math
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
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[NAME]
MODEL = os.environ.get("MODEL", "llama")
SEQ = int(os.environ.get("SEQ", "16"))
VOCAB, D, HEADS, KV_HEADS, MLP, EXPERTS, TOP = 64, 32, 4, 2, 96, 4, 2
HD = D // HEADS
POS0 = 4000  # RoPE positions offset into the thousands (a long context's tail)
LOSS_SCALE = 1024.0 if DTYPE == torch.float16 else 1.0
seed_all(1234, mode=False)
torch.manual_seed(0)


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(x.dtype)


def rope(T):
    """cos and sin at positions POS0.., computed in fp32 and cast to the model's dtype (as HF does)."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    angles = torch.outer(torch.arange(POS0, POS0 + T, dtype=torch.float32), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):  # x: (B, H, T, HD)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind, bias = kind, kind == "bmm"
        self.q = nn.Linear(D, D, bias=bias)  # square
        self.k, self.v = nn.Linear(D, KV_HEADS * HD, bias=bias), nn.Linear(D, KV_HEADS * HD, bias=bias)
        self.o = nn.Linear(D, D, bias=False)  # square

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, HEADS, HD).transpose(1, 2)
        k = self.k(x).view(B, T, KV_HEADS, HD).transpose(1, 2)
        v = self.v(x).view(B, T, KV_HEADS, HD).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = HEADS // KV_HEADS
        if self.kind == "sdpa":
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            k = k[:, :, None].expand(B, KV_HEADS, rep, T, HD).reshape(B, HEADS, T, HD)
            v = v[:, :, None].expand(B, KV_HEADS, rep, T, HD).reshape(B, HEADS, T, HD)
            mask = torch.full((T, T), float("-inf")).triu(1).to(x.dtype)
            if self.kind == "matmul":  # 4-D
                scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(HD) + mask
                p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
                y = torch.matmul(p, v)
            else:  # 3-D batches of B*H
                q3, k3, v3 = (t.reshape(B * HEADS, T, HD) for t in (q, k, v))
                scores = torch.baddbmm(mask.expand(B * HEADS, T, T), q3, k3.transpose(1, 2), alpha=HD**-0.5)
                p = torch.softmax(scores, dim=-1)
                y = torch.bmm(p, v3).view(B, HEADS, T, HD)
        return self.o(y.transpose(1, 2).reshape(B, T, D))


class SwiGLU(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.gate, self.up = nn.Linear(D, width, bias=False), nn.Linear(D, width, bias=False)
        self.down = nn.Linear(width, D, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    """Top-2 of EXPERTS SwiGLU experts, Mixtral's routing: softmax in fp32, topk, renormalised."""

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, EXPERTS, bias=False)
        self.experts = nn.ModuleList(SwiGLU(MLP // 2) for _ in range(EXPERTS))

    def forward(self, x):
        B, T, _ = x.shape
        h = x.reshape(B * T, D)
        probs = F.softmax(self.router(h), dim=-1, dtype=torch.float32)
        _, chosen = torch.topk(probs, TOP, dim=-1)
        weights = probs.gather(-1, chosen)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)
            if token.numel() == 0:
                continue
            tokens = h.gather(0, token[:, None].expand(-1, D))
            y = expert(tokens) * weights[token, slot, None]
            out.index_add_(0, token, y)
        return out.view(B, T, D)


class Block(nn.Module):
    def __init__(self, kind, moe):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(), RMSNorm()
        self.attn, self.mlp = Attention(kind), (MoE() if moe else SwiGLU(MLP))

    def forward(self, x, cos, sin):
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.moe = moe
        self.tok = nn.Embedding(VOCAB, D)
        kinds = ["bmm"] if moe else ["sdpa", "matmul"]
        self.blocks = nn.ModuleList(Block(kind, moe) for kind in kinds)
        self.norm = RMSNorm()
        self.head = None if moe else nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx, targets):
        x = self.tok(idx)
        cos, sin = rope(idx.shape[1])
        for block in self.blocks:
            x = block(x, cos, sin)
        x = self.norm(x)
        logits = torch.einsum("btd,vd->btv", x, self.tok.weight) if self.moe else self.head(x)
        ce = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        z = torch.logsumexp(logits.float(), dim=-1)
        return ce + 1e-4 * z.pow(2).mean()


def batch(generator, B, T):
    """A copy task: a random stretch of 8 tokens repeated, shifted by one for the targets."""
    pattern = torch.randint(0, VOCAB, (B, 8), generator=generator)
    seq = pattern.repeat(1, (T + 1) // 8 + 1)[:, : T + 1]
    noise = torch.rand(seq.shape, generator=generator) < 0.1
    seq = torch.where(noise, torch.randint(0, VOCAB, seq.shape, generator=generator), seq)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


model = Decoder(MODEL == "moe")
g = torch.Generator().manual_seed(1)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
for step in range(150):
    idx, targets = batch(g, 8, SEQ)
    loss = model(idx, targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained, loss %.3f" % loss.item())

model = model.to(DTYPE)
model.zero_grad()
debugger = PrecisionDebugger(config_path=cfg)
idx, targets = batch(g, 1, SEQ)
debugger.start(model=model)
loss = model(idx, targets)
(loss * LOSS_SCALE).backward()
debugger.stop()
debugger.step()
print(MODEL, NAME, "loss %.3f" % float(loss), "done in %.1fs" % (time.time() - t0))
