"""tests/data/linear3d_mix: nn.Linear modules on 3-D tokens at msprobe's mix level (module and API entries),
one training step: where msprobe 26.2.0 records for F.linear the gradient arriving at its output (no
input's), the module's backward entry records its input's gradient and parameters_grad its weight's and
bias's (borrowed_gradients.py).

    python linear3d_mix.py linear3d_mix.json

x (2, 6, 16) -> Linear(16, 24) -> gelu -> Linear(24, 16) -> layer_norm; the loss is a weighted sum. fp32.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from msprobe.pytorch import PrecisionDebugger, seed_all

seed_all(1234, mode=False)
torch.manual_seed(0)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.norm = nn.Linear(16, 24), nn.Linear(24, 16), nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(self.fc2(F.gelu(self.fc1(x))))


model = Mlp()
debugger = PrecisionDebugger(config_path=sys.argv[1])
x = torch.randn(2, 6, 16)
weights = torch.randn(2, 6, 16)
debugger.start(model=model)
loss = (model(x) * weights).sum()
loss.backward()
debugger.stop()
debugger.step()
print(f"loss {loss.item():.4f}")
