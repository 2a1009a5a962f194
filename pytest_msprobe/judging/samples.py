"""A failing output's elements, sampled for the HTML report's figures (--msprobe-html only).

Taken where the output is judged, while both arrays are at hand, and bounded whatever the
output's size: a few thousand (|b|, |t - b|) points drawn with a fixed seed, the worst elements
with their indices, and the count of every finite element's error in ULP of the output dtype
(ULP at |b|), in bins. Plain data (lists, floats), so it rides to the xdist controller with the
result. No framework, no pytest.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

POINTS = 2000  # points of the scatter
WORST = 10  # elements listed by index
# The error in ULP, binned: at most half a ULP is correct rounding, a few ULP a kernel's own
# roundings; thousands, a kernel that computes in a lower precision than it says.
ULP_EDGES = (0.0, 0.5, 1.0, 2.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 2.0**14, 2.0**20, math.inf)
# (explicit mantissa bits, smallest normal exponent) by the dtype's short name.
_FORMATS = {
    "float64": (52, -1022),
    "double": (52, -1022),
    "float32": (23, -126),
    "float": (23, -126),
    "bfloat16": (7, -126),
    "float16": (10, -14),
    "half": (10, -14),
    "float8_e4m3fn": (3, -6),
    "float8_e4m3fnuz": (3, -7),
    "float8_e5m2": (2, -14),
    "float8_e5m2fnuz": (2, -15),
}


def ulp(magnitude: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of `dtype`'s numbers at each |value| (at 0 and below the normal range: the
    subnormal spacing). An unknown dtype counts as float32."""
    mantissa, low = _FORMATS.get(dtype.rsplit(".", 1)[-1].lower(), _FORMATS["float32"])
    _, exponent = np.frexp(magnitude)
    exponent = np.where(magnitude > 0, np.maximum(exponent - 1, low), low)
    return np.ldexp(1.0, exponent - mantissa)


def figure_samples(
    tested: np.ndarray, bench: np.ndarray, tested_dtype: str, points: int = POINTS
) -> dict[str, Any] | None:
    """The samples of one output, or None where it has no elementwise error to draw (shapes that
    differ, no finite element on both sides)."""
    t, b = np.asarray(tested), np.asarray(bench)
    if t.shape != b.shape or t.dtype.kind not in "fc" or b.dtype.kind not in "fc":
        return None
    t, b = t.astype(np.float64, copy=False).ravel(), b.astype(np.float64, copy=False).ravel()
    finite = np.flatnonzero(np.isfinite(t) & np.isfinite(b))
    if not finite.size:
        return None
    error = np.abs(t[finite] - b[finite])
    magnitude = np.abs(b[finite])
    in_ulp = error / ulp(magnitude, tested_dtype)
    counts = np.bincount(np.searchsorted(ULP_EDGES, in_ulp, side="right") - 1, minlength=len(ULP_EDGES) - 1)
    drawn = np.random.default_rng(0).choice(finite.size, size=min(points, finite.size), replace=False)
    order = np.argsort(error)[::-1][:WORST] if finite.size > WORST else np.argsort(error)[::-1]
    shape = np.shape(tested)
    worst = [
        {
            "index": [int(i) for i in np.unravel_index(int(finite[k]), shape)] if shape else [],
            "tested": float(t[finite[k]]),
            "bench": float(b[finite[k]]),
            "error": float(error[k]),
            "ulp": float(in_ulp[k]),
        }
        for k in order
    ]
    mantissa = _FORMATS.get(tested_dtype.rsplit(".", 1)[-1].lower(), _FORMATS["float32"])[0]
    return {
        "dtype": tested_dtype,
        "total": int(finite.size),
        "bench": [float(f"{v:.5g}") for v in magnitude[drawn]],
        "error": [float(f"{v:.5g}") for v in error[drawn]],
        "ulp_of_one": 2.0**-mantissa,
        "ulp_edges": [*ULP_EDGES[:-1], None],  # JSON has no inf: the last bin is open
        "ulp_counts": [int(c) for c in counts[: len(ULP_EDGES) - 1]],
        "worst": worst,
    }
