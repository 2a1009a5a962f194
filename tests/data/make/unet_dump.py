"""A small diffusion-style U-Net for tests/data/unet_<dtype>: a model family none of the other dumps holds
(issue 47's held-out check).

    DTYPE=fp32|bf16|autocast python unet_dump.py unet_tensor_L1.json

The step: a noisy 4x16x16 latent and its timestep; the timestep embedding of diffusion models (exp of a
frequency ramp, sin and cos of t times it, cat, linear, silu, linear); a conv in (4 -> 16 channels), a
residual block (group_norm of 4 groups, silu, conv2d 3x3, the time embedding added per channel by a
linear of its silu, group_norm, silu, conv2d, the skip), down by avg_pool2d (16 -> 8) to a second block of
24 channels, down by max_pool2d (8 -> 4); at 4x4 a transformer block over the 16 positions: group_norm,
a 1x1 conv in, layer_norm and self-attention (SDPA), layer_norm and cross-attention (SDPA, keys and values
from 6 context tokens of width 16 by embedding), layer_norm and a GEGLU feed-forward (linear, erf gelu of
one half times the other); up by conv_transpose2d (4x4 stride 2: 4 -> 8), skip concatenation (cat), a
block, up by nearest interpolate x2 (8 -> 16) plus a bilinear interpolate of the 4x4 features x4 (a side
path), skip concatenation, a block, group_norm, silu, conv out to 4 channels; the loss is mse_loss against
the noise.

Trained first (fp32, AdamW, 60 steps of batch 8 on a synthetic denoising task: smooth random fields, noise
at a random level) so that norms, attention and gates are no longer at init, then dumped for one step
(forward and backward, batch 1, no optimiser) by msprobe 26.2.0 at level L1 with an API list
(unet_tensor_L1.json: views, casts and the residual adds left out). bf16: the model and its inputs cast
(model.to(bf16)). autocast: the fp32 model under torch.autocast("cpu", bfloat16).
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
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "autocast": torch.float32}[NAME]
LATENT, SIZE, C1, C2, TEMB, CTX, CTX_TOKENS, VOCAB, HEADS = 4, 16, 16, 24, 32, 16, 6, 20, 4
seed_all(1234, mode=False)
torch.manual_seed(0)


def timestep_embedding(t, dim):
    """sin and cos of t at frequencies exp(-ln(10000) k / half): DDPM's and Stable Diffusion's."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(4, cin), nn.GroupNorm(4, cout)
        self.conv1, self.conv2 = nn.Conv2d(cin, cout, 3, padding=1), nn.Conv2d(cout, cout, 3, padding=1)
        self.time = nn.Linear(TEMB, cout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + (self.skip(x) if self.skip is not None else x)


class Transformer(nn.Module):
    """Stable Diffusion's BasicTransformerBlock at one resolution: self-attention, cross-attention, GEGLU."""

    def __init__(self, c):
        super().__init__()
        self.norm, self.proj_in, self.proj_out = nn.GroupNorm(4, c), nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 1)
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(c), nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.o1 = nn.Linear(c, 3 * c, bias=False), nn.Linear(c, c)
        self.q, self.kv, self.o2 = nn.Linear(c, c, bias=False), nn.Linear(CTX, 2 * c, bias=False), nn.Linear(c, c)
        self.geglu, self.ff = nn.Linear(c, 8 * c), nn.Linear(4 * c, c)

    def heads(self, x):
        b, t, c = x.shape
        return x.reshape(b, t, HEADS, c // HEADS).transpose(1, 2)

    def forward(self, x, context):
        b, c, hh, ww = x.shape
        t = self.proj_in(self.norm(x)).flatten(2).transpose(1, 2)  # (b, hw, c)
        q, k, v = self.qkv(self.ln1(t)).chunk(3, dim=-1)
        a = F.scaled_dot_product_attention(self.heads(q), self.heads(k), self.heads(v))
        t = t + self.o1(a.transpose(1, 2).reshape(b, -1, c))
        k, v = self.kv(context).chunk(2, dim=-1)
        a = F.scaled_dot_product_attention(self.heads(self.q(self.ln2(t))), self.heads(k), self.heads(v))
        t = t + self.o2(a.transpose(1, 2).reshape(b, -1, c))
        h, gate = self.geglu(self.ln3(t)).chunk(2, dim=-1)
        t = t + self.ff(h * F.gelu(gate))
        return x + self.proj_out(t.transpose(1, 2).reshape(b, c, hh, ww))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.temb1, self.temb2 = nn.Linear(C1, TEMB), nn.Linear(TEMB, TEMB)
        self.context = nn.Embedding(VOCAB, CTX)
        self.conv_in = nn.Conv2d(LATENT, C1, 3, padding=1)
        self.down1, self.down2 = ResBlock(C1, C1), ResBlock(C1, C2)
        self.mid = Transformer(C2)
        self.up = nn.ConvTranspose2d(C2, C2, 4, stride=2, padding=1)
        self.up2, self.up1 = ResBlock(2 * C2, C2), ResBlock(C2 + C1, C1)
        self.norm_out, self.conv_out = nn.GroupNorm(4, C1), nn.Conv2d(C1, LATENT, 3, padding=1)

    def forward(self, x, t, tokens):
        temb = self.temb2(F.silu(self.temb1(timestep_embedding(t, C1).to(x.dtype))))
        context = self.context(tokens)
        h1 = self.down1(self.conv_in(x), temb)  # 16x16
        h2 = self.down2(F.avg_pool2d(h1, 2), temb)  # 8x8
        m = self.mid(F.max_pool2d(h2, 2), context)  # 4x4
        u = self.up2(torch.cat([self.up(m), h2], dim=1), temb)  # 8x8
        side = F.interpolate(m, scale_factor=4, mode="bilinear", align_corners=False)  # 4 -> 16
        u = F.interpolate(u, scale_factor=2, mode="nearest") + side  # 16x16
        u = self.up1(torch.cat([u, h1], dim=1), temb)
        return self.conv_out(F.silu(self.norm_out(u)))


def batch(generator, n):
    """Smooth random latents (a coarse field upsampled) noised at a random level; the target is the noise."""
    coarse = torch.randn(n, LATENT, 4, 4, generator=generator)
    x0 = F.interpolate(coarse, size=(SIZE, SIZE), mode="bicubic", align_corners=False)
    t = torch.randint(1, 1000, (n,), generator=generator)
    alpha = torch.cos(t.float() / 1000 * math.pi / 2)[:, None, None, None] ** 2
    noise = torch.randn(n, LATENT, SIZE, SIZE, generator=generator)
    tokens = torch.randint(0, VOCAB, (n, CTX_TOKENS), generator=generator)
    return alpha.sqrt() * x0 + (1 - alpha).sqrt() * noise, t, tokens, noise


model = UNet()
g = torch.Generator().manual_seed(1)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
for _ in range(60):
    x, t, tokens, noise = batch(g, 8)
    loss = F.mse_loss(model(x, t, tokens), noise)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"trained, loss {loss.item():.3f}")

model = model.to(DTYPE)
model.zero_grad()
debugger = PrecisionDebugger(config_path=cfg)
x, t, tokens, noise = batch(g, 1)
debugger.start(model=model)
if NAME == "autocast":
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x, t, tokens), noise)
else:
    loss = F.mse_loss(model(x.to(DTYPE), t, tokens), noise.to(DTYPE))
loss.backward()
debugger.stop()
debugger.step()
print(NAME, f"loss {loss.item():.3f}, done in {time.time() - t0:.1f}s")
