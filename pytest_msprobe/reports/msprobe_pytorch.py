"""The rows of msprobe 26.2's PyTorch layout (layouts.MSPROBE_PYTORCH), as its acc_check writes them.

Cells: a blank as a single space, a number as msprobe's types write it (a Python or float64 number
with its 14 decimals, `"{:.14f}"`; one msprobe holds in float32 as numpy's str(); an int as its
digits), a shape as a Python tuple's text. No pytest, no framework.
"""

from __future__ import annotations

import numpy as np

from ..results import METRIC_FIELDS, MsprobeMetrics
from .layouts import MSPROBE_PYTORCH

BLANK = MSPROBE_PYTORCH.blank
PRECISION = 14  # msprobe's config.yaml `precision`


def number_cell(value: float | int | None, single: bool = False) -> str:
    """One metric as msprobe writes it."""
    if value is None:
        return BLANK
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if single:
        return str(np.float32(value))
    return f"{float(value):.{PRECISION}f}"


def metric_cells(metrics: MsprobeMetrics | None) -> list[str]:
    """The 17 metric cells of a details row, 余弦相似度 to ULP误差大于阈值占比."""
    if metrics is None:
        return [BLANK] * len(METRIC_FIELDS)
    return [number_cell(getattr(metrics, name), name in metrics.single) for name in METRIC_FIELDS]


def shape_cell(shape: list[int] | None) -> str:
    """`(2, 8)`, `(5,)`, `()`: a Python tuple's text; blank where the output has none."""
    return BLANK if shape is None else str(tuple(shape))
