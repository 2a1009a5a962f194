"""tests/data/promotion: calls of a clean step whose inputs are wider than their bf16 output, as CLIP
and Swin under CPU autocast record them (issue 27, bench/zoo), dumped by msprobe 26.2.0 (L1, no API
list) at tiny widths:

- CLIP's logits, `logit_scale.exp() * image_features`: an fp32 0-dim tensor times a bf16 tensor is
  bf16 (type promotion leaves a 0-dim tensor out of the result's dtype), so the product and its
  gradient are computed in bf16, and autograd casts the scale's gradient, a bf16 sum, up to fp32;
- Swin's attention under torch.autocast("cpu", bfloat16): `softmax(scores) @ v`, whose recorded inputs
  are the fp32 probabilities (autocast runs softmax in fp32) and a bf16 v: `@` is matmul, which
  autocast casts to bf16 after msprobe recorded its inputs;
- LayerNorm under CPU autocast: a bf16 input with the module's fp32 weight and bias, which PyTorch's
  CPU kernel takes as they are (not cast by autocast) and whose fp32 weight and bias gradients it
  returns at bf16 precision (bench/zoo/layer_norm_mixed.py): an error the standard keeps.

    python promotion.py OUT   (in msprobe's venv; see ../README.md)
"""
import math
import sys

import torch
import torch.nn.functional as F
from l1_debugger import l1_tensor_debugger
from msprobe.pytorch import seed_all

OUT = sys.argv[1]
seed_all(1234, mode=False)
torch.manual_seed(0)
B, N, D = 4, 8, 16
logit_scale = torch.tensor(math.log(1 / 0.07), requires_grad=True)
features = torch.randn(B, D, dtype=torch.bfloat16, requires_grad=True)
scores = torch.randn(B, N, N, requires_grad=True)
v = torch.randn(B, N, D, dtype=torch.bfloat16, requires_grad=True)
x = torch.randn(B, N, D, dtype=torch.bfloat16, requires_grad=True)
w, b = torch.ones(D, requires_grad=True), torch.zeros(D, requires_grad=True)

debugger = l1_tensor_debugger(OUT)
debugger.start()
logits = logit_scale.exp() * features
with torch.autocast("cpu", dtype=torch.bfloat16):
    attended = F.softmax(scores, dim=-1) @ v
    normed = F.layer_norm(x, (D,), w, b)
(logits.float().pow(2).sum() + attended.float().sum() + (normed.float() * x.float()).sum()).backward()
debugger.stop()
debugger.step()
