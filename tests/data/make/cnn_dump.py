"""A small ResNet-like CNN for tests/data/cnn_<dtype>: a 3x3 stem (16 channels, no bias) with
batch_norm over 4 x 16 x 16 = 1,024 elements per channel, relu, a 3x3 stride-2 max pool (overlapping
windows), a basic residual block (two 3x3 convs, batch_norms, the identity added), a downsampling
block (3x3 stride 2 to 32 channels, its shortcut a 1x1 stride-2 conv with bias), adaptive average
pooling, a linear head and cross_entropy. Batch 4, 3x16x16 images: the stem's weight gradient sums
N x H x W = 1,024 terms per element.

Trained first (fp32, SGD with momentum, 150 steps of batch 32 on a synthetic task: which of 10
oriented stripe patterns an image holds, under noise) so that activations and batch statistics are
no longer at init, then cast to the dump's dtype and dumped for one step (forward and backward, no
optimiser) by msprobe 26.2.0 at level L1 with an API list (cnn_tensor_L1.json: the APIs above; the
flatten and the num_batches_tracked counters left out).

    DTYPE=fp32|bf16|fp16 python cnn_dump.py cnn_tensor_L1.json

bf16 and fp16 are the model cast (model.to(dtype)), inputs too: every API runs in that dtype on the
CPU, batch_norm in training mode (batch statistics; its running statistics in the dtype as well).
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
BATCH, SIZE, CLASSES = 4, 16, 10
seed_all(1234, mode=False)
torch.manual_seed(0)


def conv_bn(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)


class Basic(nn.Module):
    """conv-bn-relu-conv-bn, plus the input (or a 1x1 strided conv of it) added, then relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = conv_bn(cin, cout, stride)
        self.conv2, self.bn2 = conv_bn(cout, cout)
        self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=True) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn = conv_bn(3, 16)
        self.block1, self.block2 = Basic(16, 16, 1), Basic(16, 32, 2)
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x, targets):
        x = F.relu(self.bn(self.stem(x)))
        x = F.max_pool2d(x, 3, 2, 1)  # 16x16 -> 8x8, windows overlap by one row and column
        x = self.block2(self.block1(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.cross_entropy(self.head(x), targets)


def batch(generator, n):
    """Images in [0, 1]: stripes at one of 10 angles and a random phase, plus noise; the angle is the class."""
    targets = torch.randint(0, CLASSES, (n,), generator=generator)
    angle = targets.float() * math.pi / CLASSES
    phase = torch.rand(n, generator=generator) * 2 * math.pi
    yy, xx = torch.meshgrid(torch.arange(SIZE).float(), torch.arange(SIZE).float(), indexing="ij")
    along = xx * torch.cos(angle)[:, None, None] + yy * torch.sin(angle)[:, None, None]
    stripes = 0.5 + 0.5 * torch.sin(along * 1.2 + phase[:, None, None])
    colour = torch.rand(n, 3, 1, 1, generator=generator) * 0.5 + 0.5
    images = stripes[:, None] * colour + 0.2 * torch.randn(n, 3, SIZE, SIZE, generator=generator)
    return images.clamp(0, 1), targets


model = CNN()
g = torch.Generator().manual_seed(1)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for _ in range(150):
    images, targets = batch(g, 32)
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
loss = model(images.to(DTYPE), targets)
loss.backward()
debugger.stop()
debugger.step()
print(NAME, f"loss {loss.item():.3f}, done in {time.time() - t0:.1f}s")
