"""tests/data/torch_nn_<dtype>: torch.nn's own blocks in a clean training step, at tiny widths (d 8,
2 heads, seq 6, batch 2), dumped by msprobe 26.2.0 (L1, no API list): nn.MultiheadAttention with a
causal mask (F.multi_head_attention_forward: in-projections, attention, out-projection in one
entry), a GRU and an LSTM, GroupNorm after a 1-D conv.

    DTYPE=fp32|bf16 python torch_nn.py OUT   (in msprobe's venv; see ../README.md)
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from l1_debugger import l1_tensor_debugger
from msprobe.pytorch import seed_all

OUT = sys.argv[1]
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}[os.environ.get("DTYPE", "fp32")]
seed_all(1234, mode=False)
torch.manual_seed(0)
L, N, E, H = 6, 2, 8, 2
mha = nn.MultiheadAttention(E, H, batch_first=True).to(DTYPE)
gru, lstm = nn.GRU(E, E, batch_first=True).to(DTYPE), nn.LSTM(E, E, batch_first=True).to(DTYPE)
conv, norm = nn.Conv1d(E, E, 3, padding=1).to(DTYPE), nn.GroupNorm(2, E).to(DTYPE)
x = torch.randn(N, L, E, dtype=DTYPE, requires_grad=True)
causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)

debugger = l1_tensor_debugger(OUT)
debugger.start()
a, _ = mha(x, x, x, attn_mask=causal, need_weights=False)
h = x + a
h = h + gru(h)[0] + lstm(h)[0]
h = h + norm(conv(h.transpose(1, 2))).transpose(1, 2)
h.float().pow(2).mean().backward()
debugger.stop()
debugger.step()
