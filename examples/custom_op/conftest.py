"""The team's registrations: what pytest-msprobe benchmarks the team's operators against.

Loaded by `pytest examples/custom_op --msprobe-dump ...` (the folder named on the command line), or
by a plugin of the team's (`-p myteam_references`) on every host of a run over several.
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from pytest_msprobe.frameworks.references import Magnitude, Unwritten

sys.path.insert(0, str(Path(__file__).parent))  # the team's package, installed elsewhere, needs no such line
import myteam_ops  # noqa: E402 - defines torch.ops.myteam.gated_silu, the device side of the check


def gated_silu_reference(x, w_gate, w_up, valid_rows):
    """The float64 benchmark: the op's definition, the padding rows zero."""
    out = x.new_zeros(x.shape[0], w_gate.shape[0])
    rows = x[:valid_rows]
    out[:valid_rows] = F.silu(rows @ w_gate.T) * (rows @ w_up.T)
    return out


def gated_silu_magnitude(x, w_gate, w_up, valid_rows):
    """What a correct fp32 kernel rounds, per output element: the two projections' terms |x||W|,
    carried through silu and the product, and the product's own rounding."""
    rows = x[:valid_rows]
    z, u = rows @ w_gate.T, rows @ w_up.T
    z_terms, u_terms = rows.abs() @ w_gate.abs().T, rows.abs() @ w_up.abs().T
    sigmoid = torch.sigmoid(z)
    silu_slope = (sigmoid * (1 + z * (1 - sigmoid))).abs()
    found = x.new_zeros(x.shape[0], w_gate.shape[0])
    found[:valid_rows] = (silu_slope * z_terms + F.silu(z).abs()) * u.abs() + F.silu(z).abs() * u_terms
    return [found]


def rows_past_valid(outputs, args, kwargs):
    """The padding rows, which the kernel never writes."""
    valid_rows = args[3] if len(args) > 3 else kwargs["valid_rows"]
    rows = outputs[0].shape[0]
    mask = (torch.arange(rows) >= valid_rows).reshape(rows, 1)
    return {0: Unwritten(mask, f"rows {valid_rows}..{rows - 1} of {rows} are padding the kernel never writes")}


def fused_rms_norm_reference(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def pytest_msprobe_references(registry):
    registry.add("myteam.gated_silu", gated_silu_reference, magnitude=gated_silu_magnitude, unwritten=rows_past_valid)
    # Recorded as MyTeam.fused_rms_norm (register_custom_api's prefix): no torch.ops path, so its device
    # call is named; its reference composes APIs whose magnitude models the plugin has.
    registry.add(
        "MyTeam.fused_rms_norm",
        fused_rms_norm_reference,
        magnitude=Magnitude.COMPOSITION,
        device=myteam_ops.fused_rms_norm,
    )
