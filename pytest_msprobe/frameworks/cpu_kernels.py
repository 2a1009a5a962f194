"""What PyTorch's own CPU kernels are known to compute short of their dtype, by call.

A clean dump written on a CPU carries these kernels' results; `--msprobe-device cpu` runs them. The
standard judges them as it judges any kernel (an output off by more than its budget is an error: that
is the precision a user of the kernel gets); the message says whose deficit it is, so that a user does
not look for it in their model. Each entry names the study that measured it.
"""

from __future__ import annotations

import torch

from . import OutputPair
from .torch_engine import Call, floating

LOW = (torch.bfloat16, torch.float16)

# F.layer_norm(input, normalized_shape, weight, bias, eps): its floating inputs, in order.
LAYER_NORM_APIS = ("layer_norm",)
WEIGHT, BIAS = 1, 2

# 0.7-1.7% off in bfloat16 and 0.06-0.3% in float16 over 32-256 rows, as a sum in that dtype is, where an fp32
# sum is exact to 1e-7: bench/studies/clean_dumps.md, `python bench/zoo/layer_norm_mixed.py`.
MIXED_LAYER_NORM = (
    "PyTorch's CPU layer_norm of a {low} input with a float32 weight and bias sums their gradients in {low}: "
    "the CPU kernel's own deficit (bench/studies/clean_dumps.md); autocast on CUDA and Ascend runs layer_norm "
    "in float32"
)


def named(call: Call, pairs: list[OutputPair]) -> list[OutputPair]:
    """The backward pairs of a call, each marked with its CPU kernel's known deficit where it has one."""
    if call.name.direction != "backward" or call.name.api not in LAYER_NORM_APIS:
        return pairs
    inputs = floating(call.args, call.kwargs)
    x = call.args[0] if call.args and isinstance(call.args[0], torch.Tensor) else None
    if x is None or x.dtype not in LOW or len(inputs) < 2:
        return pairs
    said = MIXED_LAYER_NORM.format(low=str(x.dtype).removeprefix("torch."))
    for pair in pairs:
        if pair.index in (WEIGHT, BIAS) and pair.index < len(inputs) and inputs[pair.index].dtype == torch.float32:
            pair.kernel_deficit = said
    return pairs
