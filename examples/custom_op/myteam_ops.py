"""A team's own operators, as a port to Ascend brings them: `torch.ops.myteam.gated_silu`, a
torch.library op whose CPU kernel here stands in for the device kernel (an AscendC or Triton-Ascend
kernel registered for the NPU), and `fused_rms_norm`, a Python launcher of the kind a Triton kernel
has, which msprobe records through `PrecisionDebugger.register_custom_api`.

gated_silu(x, w_gate, w_up, valid_rows) = silu(x w_gate^T) * (x w_up^T) on the first valid_rows
rows of x; the kernel never writes the rows after them (padding tokens): what they hold is whatever
the memory held, here NaN, so that nothing can mistake them for results.
"""

import torch
import torch.nn.functional as F

NAMESPACE = "myteam"


def gated_silu_kernel(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, valid_rows: int) -> torch.Tensor:
    """The device kernel's stand-in: fp32 in, fp32 accumulation, the rows past valid_rows unwritten."""
    out = torch.full((x.shape[0], w_gate.shape[0]), float("nan"), dtype=x.dtype, device=x.device)
    rows = x[:valid_rows]
    out[:valid_rows] = F.silu(rows @ w_gate.t()) * (rows @ w_up.t())
    return out


def _setup_context(ctx, inputs, output):
    x, w_gate, w_up, valid_rows = inputs
    ctx.save_for_backward(x, w_gate, w_up)
    ctx.valid_rows = valid_rows


def _backward(ctx, grad):
    x, w_gate, w_up = ctx.saved_tensors
    rows, g = x[: ctx.valid_rows], grad[: ctx.valid_rows]
    z, u = rows @ w_gate.t(), rows @ w_up.t()
    sigmoid = torch.sigmoid(z)
    dz = g * u * sigmoid * (1 + z * (1 - sigmoid))
    du = g * F.silu(z)
    dx = torch.zeros_like(x)
    dx[: ctx.valid_rows] = dz @ w_gate + du @ w_up
    return dx, dz.t() @ rows, du.t() @ rows, None


def _define() -> None:
    """torch.ops.myteam.gated_silu, once per process (pytest's in-process runs import this file again)."""
    if hasattr(getattr(torch.ops, NAMESPACE), "gated_silu"):
        return
    op = torch.library.custom_op(f"{NAMESPACE}::gated_silu", gated_silu_kernel, mutates_args=(), device_types="cpu")
    op.register_fake(lambda x, w_gate, w_up, valid_rows: x.new_empty((x.shape[0], w_gate.shape[0])))
    op.register_autograd(_backward, setup_context=_setup_context)


def fused_rms_norm(x, weight, eps=1e-6):
    """A fused RMSNorm's launcher (a Triton kernel's, on the device): fp32 statistics, one pass."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


_define()
