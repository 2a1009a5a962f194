"""Outputs that are one rounding of what the bench computes: the dtype standard's exact rules.

- A cast into an 8-bit format (`Tensor.to(torch.float8_e4m3fn)`, `type`, `npu_dtype_cast`, ...)
  rounds each element once. The bench is that cast on the CPU, of the same input widened exactly:
  to nearest, ties to even, and beyond the largest finite value what torch's cast gives
  (formats8.py: e4m3fn saturates, e5m2 gives inf, the fnuz formats NaN). A correct cast equals it
  at every element; one ULP off is a cast that truncates or rounds otherwise, which the budget's
  1.5 ULP would pass.
- A quantisation (a float-in, integer-out operator: npu_quantize, npu_dynamic_quant's int8 output,
  npu_rms_norm_dynamic_quant, npu_dequant_swiglu_quant, ...): its integer outputs are within 1 of
  the bench's, one unit of the quantised grid: where the scaled value sits near a half, a correct
  kernel's float32 scaling may round it either way. msprobe's rule too (its config.yaml's
  quantization_api_list: max |error| <= 1). Its float outputs (the scales) are judged as floats.
  Which operators: the name holds "quant" (npu_anti_quant's and npu_dequant's outputs are floats,
  so never judged here), not an indexer's (npu_quant_lightning_indexer's outputs are positions),
  nor quantile's;
  which outputs: the 8-bit integers (int8, uint8), the quantised grids; an int32/int64 output of
  such a call is a position or a count (npu_moe_init_routing_quant's row indices) and must be equal.
"""

from __future__ import annotations

import numpy as np

from ...dumps.dump import parse_entry_name
from ...results import ERROR, PASS
from ..compare import Comparison, Metrics
from . import Verdict
from .budget import Format
from .formats8 import cast_rule

# The APIs whose forward output is their input cast into the dtype they are asked for.
CASTS = frozenset({"to", "type", "type_as", "_to_copy", "copy_", "npu_dtype_cast", "npu_dtype_cast_", "cast", "astype"})
QUANTISED_UNIT = 1  # |error| a quantisation's integer output may have: one unit of its grid


def api_of(output_name: str) -> tuple[str, str]:
    """(the API's last name, its direction) of an output such as "Tensor.to.0.forward.output.0";
    ("", "") where the name is not an API entry's."""
    for direction in ("forward", "backward"):
        at = output_name.rfind(f".{direction}.")
        if at >= 0:
            entry = parse_entry_name(output_name[: at + len(direction) + 1])
            if entry is not None:
                return entry.api.rsplit(".", 1)[-1], entry.direction
    return "", ""


def is_cast(output_name: str) -> bool:
    api, direction = api_of(output_name)
    return direction == "forward" and api in CASTS


def is_quantisation(output_name: str) -> bool:
    api, direction = api_of(output_name)
    return direction == "forward" and "quant" in api.replace("quantile", "") and "indexer" not in api


def is_quantised(c: Comparison) -> bool:
    """An 8-bit integer output of a quantisation (see the module docstring)."""
    dtype = np.asarray(c.tested).dtype
    return dtype.kind in "iu" and dtype.itemsize == 1 and is_quantisation(c.name)


def judge_cast(c: Comparison, m: Metrics, fmt: Format) -> Verdict:
    """A cast into an 8-bit format: every element equal to the bench's rounding (NaN and inf
    were matched before: compare.compare)."""
    t = np.asarray(c.tested, dtype=np.float64).reshape(-1)
    b = np.asarray(c.bench, dtype=np.float64).reshape(-1)
    finite = np.isfinite(t) & np.isfinite(b)
    off = np.flatnonzero(finite & (t != b))
    rule = f"a cast into {fmt.name} rounds once, {cast_rule(fmt)}, as the bench's cast does"
    if not off.size:
        return Verdict(PASS, [f"{rule}: every element equal to it"], ratio=0.0, severity=0.0)
    ulps = np.abs(t[off] - b[off]) / fmt.spacing(b[off])
    worst = int(off[int(np.argmax(ulps))])
    index = ", ".join(str(int(i)) for i in np.unravel_index(worst, np.shape(c.bench))) if np.ndim(c.bench) else ""
    toward_zero = np.abs(t[off]) < np.abs(b[off])
    how = (
        "every one toward zero (truncated?)"
        if toward_zero.all()
        else "every one away from zero"
        if not toward_zero.any()
        else f"{int(toward_zero.sum())} toward zero"
    )
    message = (
        f"{rule}: {off.size} of {t.size} elements differ from it, {how}; the most at [{index}] "
        f"(tested {t[worst]:.8g}, bench {b[worst]:.8g}), {float(ulps.max()):.3g} ULP of {fmt.name}"
    )
    # Any element off is a fault: its severity counts the ULP, as the budget's ratio would.
    return Verdict(ERROR, [message], ratio=float(ulps.max()) + 1.0, severity=float(ulps.max()) + 1.0)


def judge_quantised(c: Comparison, m: Metrics) -> Verdict:
    """A quantisation's integer output: within one unit of the bench's at every element."""
    t = np.asarray(c.tested).astype(np.float64).reshape(-1)
    b = np.asarray(c.bench).astype(np.float64).reshape(-1)
    error = np.abs(t - b)
    worst = float(error.max(initial=0.0))
    rule = f"quantisation rule (an integer output of {api_of(c.name)[0]}): |error| <= {QUANTISED_UNIT} unit"
    if worst <= QUANTISED_UNIT:
        one = int(np.count_nonzero(error))
        return Verdict(
            PASS,
            [f"{rule}: max |error| {worst:g}" + (f" ({one} of {t.size} elements 1 unit off)" if one else "")],
            ratio=worst / QUANTISED_UNIT,
            severity=worst / QUANTISED_UNIT,
        )
    at = int(np.argmax(error))
    index = ", ".join(str(int(i)) for i in np.unravel_index(at, np.shape(c.bench))) if np.ndim(c.bench) else ""
    over = int(np.count_nonzero(error > QUANTISED_UNIT))
    return Verdict(
        ERROR,
        [
            f"{rule}: max |error| {worst:g} at [{index}] (tested {t[at]:g}, bench {b[at]:g}); "
            f"{over} of {t.size} elements more than {QUANTISED_UNIT} off"
        ],
        ratio=worst / QUANTISED_UNIT,
        severity=worst / QUANTISED_UNIT,
    )
