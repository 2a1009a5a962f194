"""tests/data/amp_dropout: GPT-2's and BERT's calls that a clean step records and no re-run can
reproduce as recorded, at tiny widths (d 8, seq 4, batch 2), dumped by msprobe 26.2.0 (L1, no API list):

- under torch.autocast("cpu", bfloat16), GPT-2's Conv1D: addmm of an fp32 bias, a bf16 activation
  (the previous autocast matmul's output) and an fp32 weight, to a bf16 output: autocast casts all
  three to bf16 inside the dispatcher, after msprobe recorded them;
- BERT's attention: scaled_dot_product_attention with an additive padding mask and dropout_p 0.1
  in training (random: two runs never agree), and the same call with dropout_p 0 (deterministic);
- Mamba's dt projection in bf16: linear with a bias on a split of a wider tensor (a non-contiguous
  3-D input), which PyTorch computes as a matmul rounded to bf16 and then an add of the bias; the
  rebuilt input is contiguous, and linear then adds the bias before its one rounding.

    python amp_dropout.py OUT   (in msprobe's venv; see ../README.md)
"""
import sys

import torch
import torch.nn.functional as F
from l1_debugger import l1_tensor_debugger
from msprobe.pytorch import seed_all

OUT = sys.argv[1]
seed_all(1234, mode=False)
torch.manual_seed(0)
B, T, D, H = 2, 4, 8, 2
x = torch.randn(B, T, D, requires_grad=True)
w1 = torch.randn(D, D, requires_grad=True)
w2, b2 = (torch.randn(D, D) * 0.3).requires_grad_(), torch.randn(D).requires_grad_()
mask = torch.zeros(B, 1, 1, T)
mask[1, ..., -1] = torch.finfo(torch.float32).min  # the second sequence padded by one token

debugger = l1_tensor_debugger(OUT)
debugger.start()
with torch.autocast("cpu", dtype=torch.bfloat16):
    h = torch.matmul(x, w1)  # bf16
    y = torch.addmm(b2, h.view(-1, D), w2)  # fp32 bias and weight beside a bf16 activation
q = k = v = y.float().view(B, T, H, D // H).transpose(1, 2)
a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1)
b = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
xp = torch.randn(B, 16, 20, dtype=torch.bfloat16)
dt = torch.split(xp, [4, 16], dim=-1)[0]
w3, b3 = torch.randn(96, 4, dtype=torch.bfloat16) * 0.5, torch.randn(96, dtype=torch.bfloat16) * 0.5
with torch.no_grad():
    F.linear(dt, w3, b3)
(a.sum() + b.pow(2).sum()).backward()
debugger.stop()
debugger.step()
