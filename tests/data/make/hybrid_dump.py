"""A small hybrid CNN + ViT for tests/data/hybrid_<dtype>: the APIs of a vision model with a conv stem
and attention blocks that this repository's GPT, CNN and LLaMA dumps do not hold.

    DTYPE=fp32|bf16|autocast LEVEL=L1|mix python hybrid_dump.py hybrid_tensor_L1.json

The step: one image of 3x64x64 resized to 56x56 by bilinear interpolate (a non-integer scale, 64 to 56,
align_corners=False, no gradient), a spatial transformer (a linear predicting each image's affine map
from a 4x4 average, affine_grid, bilinear grid_sample: both with gradients), a conv stem (3x3 stride 2
to 8 channels, batch_norm in training, relu: 28x28), a patch embedding (a 4x4 stride-4 conv to width
32: 7x7 tokens), a learned 8x8 position embedding resized to the 7x7 grid by bicubic interpolate
(align_corners=False: 8 to 7, with its gradient), two attention blocks (layer_norm, a fused q/k/v
linear on the 3-D tokens, scaled_dot_product_attention in block 0 and attention written out in
block 1: 4-D matmul, softmax, matmul; the output projection, a gelu MLP of width 64), the tokens back
to a 7x7 map upsampled by nearest interpolate (scale 2) and added to a 3x3 stride-2 conv of the
stem's features (14x14), adaptive_avg_pool2d to 1x1, a linear head and cross_entropy.

Trained first (fp32, AdamW, 60 steps of batch 16 on a synthetic task: which of 10 oriented stripe
patterns an image holds) so that attention and batch statistics are no longer at init, then dumped
for one step (forward and backward, no optimiser) by msprobe 26.2.0 at level L1 (or mix: module and
API entries) with an API list (hybrid_tensor_L1.json). bf16: the model and the images cast
(model.to(bf16)). autocast: the fp32 model under torch.autocast("cpu", bfloat16), which runs conv,
linear, matmul and attention in bf16 and keeps the rest in fp32.
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
BATCH, RAW, SIZE, CLASSES = 1, 64, 56, 10
STEM = 8
D, HEADS, MLP, GRID, POS = 32, 4, 64, 7, 8
seed_all(1234, mode=False)
torch.manual_seed(0)


class Block(nn.Module):
    """Pre-norm attention and MLP; `written_out`: attention as matmul, softmax, matmul."""

    def __init__(self, written_out):
        super().__init__()
        self.written_out = written_out
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, MLP), nn.Linear(MLP, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        if self.written_out:
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(D // HEADS)
            y = torch.matmul(torch.softmax(scores, dim=-1), v)
        else:
            y = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Hybrid(nn.Module):
    def __init__(self):
        super().__init__()
        self.locator = nn.Linear(3 * 16, 6)  # the spatial transformer's affine map, from a 4x4 average
        nn.init.zeros_(self.locator.weight)
        with torch.no_grad():
            self.locator.bias.copy_(torch.tensor([1.0, 0, 0, 0, 1, 0]))
        self.stem, self.bn = nn.Conv2d(3, STEM, 3, 2, 1, bias=False), nn.BatchNorm2d(STEM)
        self.patch = nn.Conv2d(STEM, D, 4, 4)
        self.pos = nn.Parameter(torch.randn(1, D, POS, POS) * 0.02)
        self.blocks = nn.ModuleList([Block(False), Block(True)])
        self.norm = nn.LayerNorm(D)
        self.side = nn.Conv2d(STEM, D, 3, 2, 1)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, images, targets):
        x = F.interpolate(images, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
        theta = self.locator(F.adaptive_avg_pool2d(x, 4).flatten(1)).reshape(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        f = F.relu(self.bn(self.stem(x)))  # 28x28
        tokens = self.patch(f)  # 7x7
        pos = F.interpolate(self.pos, size=(GRID, GRID), mode="bicubic", align_corners=False)
        t = (tokens + pos).flatten(2).transpose(1, 2)
        for block in self.blocks:
            t = block(t)
        t = self.norm(t).transpose(1, 2).reshape(-1, D, GRID, GRID)
        up = F.interpolate(t, scale_factor=2, mode="nearest")  # 14x14
        y = F.adaptive_avg_pool2d(up + self.side(f), 1).flatten(1)
        return F.cross_entropy(self.head(y), targets)


def batch(generator, n):
    """Images in [0, 1]: stripes at one of 10 angles and a random phase, plus noise; the angle is the class."""
    targets = torch.randint(0, CLASSES, (n,), generator=generator)
    angle = targets.float() * math.pi / CLASSES
    phase = torch.rand(n, generator=generator) * 2 * math.pi
    yy, xx = torch.meshgrid(torch.arange(RAW).float(), torch.arange(RAW).float(), indexing="ij")
    along = xx * torch.cos(angle)[:, None, None] + yy * torch.sin(angle)[:, None, None]
    stripes = 0.5 + 0.5 * torch.sin(along * 0.35 + phase[:, None, None])
    colour = torch.rand(n, 3, 1, 1, generator=generator) * 0.5 + 0.5
    images = stripes[:, None] * colour + 0.2 * torch.randn(n, 3, RAW, RAW, generator=generator)
    return images.clamp(0, 1), targets


model = Hybrid()
g = torch.Generator().manual_seed(1)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
for _ in range(60):
    images, targets = batch(g, 16)
    loss = model(images, targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"trained, loss {loss.item():.3f}")

model = model.to(DTYPE)
model.zero_grad()
debugger = PrecisionDebugger(config_path=cfg)
images, targets = batch(g, BATCH)
debugger.start(model=model)
if NAME == "autocast":
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(images, targets)
else:
    loss = model(images.to(DTYPE), targets)
loss.backward()
debugger.stop()
debugger.step()
print(NAME, f"loss {loss.item():.3f}, done in {time.time() - t0:.1f}s")
