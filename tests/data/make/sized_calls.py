"""tests/data/sized_calls: the calls whose arguments size their outputs (issue 48), as msprobe 26.2.0 records
them (statistics, L1 with no API list, risk level ALL), one small step, forward and backward: the factories
(arange, range, linspace, logspace, eye, full, full_like, empty_like, ones_like, Tensor.new_ones, new_empty),
repeat, repeat_interleave by a count, expand, expand_as, broadcast_to, tile, F.pad (constant and reflect),
F.interpolate by size and by scale_factor, F.upsample, F.upsample_nearest, F.upsample_bilinear, kron, outer,
cartesian_prod, Tensor.unfold, F.unfold; and the GEMMs and windows read from their tensors' shapes: addmm,
baddbmm, addbmm, addmv, addr, gather, max_pool2d, avg_pool2d, adaptive_avg_pool2d. None of them is sized on
PyTorch's meta device (tests/test_size_rules.py: a run on it never imports torch._dynamo or sympy).

    python sized_calls.py OUT   (in msprobe's venv; see ../README.md)
"""
import json
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from msprobe.pytorch import PrecisionDebugger, seed_all

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
config = {"task": "statistics", "dump_path": OUT, "rank": [], "step": [], "level": "L1", "async_dump": False,
          "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
          "risk_level": "ALL"}
with open(os.path.join(OUT, "config.json"), "w") as handle:
    json.dump(config, handle)
seed_all(1234, mode=False)
torch.manual_seed(0)
x = torch.randn(2, 3, requires_grad=True)
image = torch.randn(1, 2, 4, 4, requires_grad=True)
row, column = torch.randn(3, requires_grad=True), torch.randn(4, requires_grad=True)
a, b = torch.randn(2, 3, requires_grad=True), torch.randn(3, 4, requires_grad=True)
batch1, batch2 = torch.randn(2, 2, 3, requires_grad=True), torch.randn(2, 3, 4, requires_grad=True)
bias = torch.randn(4, requires_grad=True)

debugger = PrecisionDebugger(config_path=os.path.join(OUT, "config.json"))
debugger.start()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch.range is deprecated
    made = [
        torch.arange(0, 6, 2), torch.arange(1.0, 2.0, 0.25), torch.range(0, 3), torch.linspace(0, 1, 5),
        torch.logspace(0, 1, 4), torch.eye(3), torch.eye(2, 4), torch.full((2, 3), 1.5),
        torch.full_like(x, 2.0), torch.empty_like(x), torch.ones_like(x), x.new_ones(2, 2), x.new_empty((3,)),
    ]
grown = [
    x.repeat(2, 1, 2), x.repeat_interleave(2, dim=1), x[:1].expand(4, 3), x[:1].expand_as(torch.empty(5, 3)),
    torch.broadcast_to(row, (2, 3)), torch.tile(x, (2,)), x.tile(1, 2), F.pad(x, (1, 2)),
    F.pad(image, (1, 1, 2, 0), mode="reflect"), F.interpolate(image, size=(6, 5)),
    F.interpolate(image, scale_factor=1.5, mode="bilinear"), F.upsample(image, scale_factor=2),
    F.upsample_nearest(image, size=3), F.upsample_bilinear(image, scale_factor=2),
    torch.kron(x, a), torch.outer(row, column), torch.cartesian_prod(row, column), x.unfold(1, 2, 1),
    F.unfold(image, kernel_size=2), torch.addmm(bias, a, b), torch.baddbmm(bias, batch1, batch2),
    torch.addbmm(bias, batch1, batch2), torch.addmv(row[:2], a, row), torch.addr(a, row[:2], row),
    torch.gather(a, 1, torch.tensor([[0, 2], [1, 1]])), F.max_pool2d(image, 2), F.avg_pool2d(image, 3, 1, 1),
    F.adaptive_avg_pool2d(image, (2, 3)),
]
debugger.stop()  # the loss's own calls left out; the backward of the calls above still recorded
loss = sum(g.float().sum() for g in grown)
debugger.start()
loss.backward()
debugger.stop()
debugger.step()
print("done:", len(made) + len(grown), "calls")
