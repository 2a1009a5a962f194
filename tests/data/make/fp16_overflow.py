"""tests/data/fp16_overflow: fp16 results beyond fp16's range (65504), which a correct kernel rounds
to inf (issue 27): a product and an exp whose values pass 65520, and a loss-scaled gradient that does
(400 x 300 = 1.2e5), as a dynamic loss scaler's first steps overflow; and an fp16 cross_entropy
scaled by 65536, whose gradient is inf from the start (msprobe records it at log_softmax's output
inside the API: -inf at each target, 0 elsewhere). Dumped by msprobe 26.2.0 (L1, no API list) on the
CPU.

    python fp16_overflow.py OUT   (in msprobe's venv; see ../README.md)
"""
import sys

import torch
import torch.nn.functional as F
from l1_debugger import l1_tensor_debugger
from msprobe.pytorch import seed_all

OUT = sys.argv[1]
seed_all(1234, mode=False)
x = (torch.randn(16, 16) * 30).half().requires_grad_()
logits = torch.randn(6, 10).half().requires_grad_()
debugger = l1_tensor_debugger(OUT)
debugger.start()
product = x * 3000.0  # |x| > 21.84 gives more than 65520: inf
grown = torch.exp(x / 3)  # x > 33.3 gives more than 65520: inf
scaled = x * 300.0  # in range; its gradient, 400 x 300, is not
(scaled.float().sum() * 400.0).backward()
(F.cross_entropy(logits, torch.arange(6)) * 65536.0).backward()  # 65536 is past fp16's range
debugger.stop()
debugger.step()
print("inf: product", torch.isinf(product).sum().item(), "exp", torch.isinf(grown).sum().item(), "grad", torch.isinf(x.grad).sum().item())
