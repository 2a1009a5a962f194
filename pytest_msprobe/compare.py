"""Per-output metrics, and the structural faults that fail an output under any standard.

Everything here works on numpy arrays in float64 and knows no framework: the
framework modules hand over the tested and the bench output as arrays plus the
tested dtype's name (torch spelling). The standards (standards/) judge what is
left once the outputs are comparable element by element.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from .results import ERROR, PASS

if TYPE_CHECKING:
    from .standards import Standard, Verdict

# The denominator of MaxRelativeErr where the bench value is exactly zero
# (msprobe's MindSpore checker uses the same constant).
REL_EPS = 1e-8


def _no_answer(*args: float) -> np.ndarray | None:
    return None


@dataclass
class ExtraRuns:
    """More of the benchmark for one output, computed only when a standard asks (an output over
    its budget): float64 arrays of the output's shape, or None where the API has no such answer.

    magnitude(): the magnitude of the terms a kernel sums (the bench on |inputs| for sums and
    products, the API's formula on magnitudes for softmax, layer_norm, gelu). spread(relative):
    max over a few seeds of |bench(inputs x (1 + relative r)) - bench|, r = +-1. low(): |the API
    on the CPU in the tested dtype - bench|.

    Cheaper first answers, each at most the full one, so that a standard asking them first gives
    the same verdict: lower_magnitude() a lower bound of magnitude() (a contraction's |A||B| in
    float32), spread_once(relative) the spread of the first seed alone."""

    magnitude: Callable[[], np.ndarray | None] = _no_answer
    spread: Callable[[float], np.ndarray | None] = _no_answer
    low: Callable[[], np.ndarray | None] = _no_answer
    lower_magnitude: Callable[[], np.ndarray | None] = _no_answer
    spread_once: Callable[[float], np.ndarray | None] = _no_answer


@dataclass
class Comparison:
    """One tested output beside its bench, both as arrays."""

    tested: np.ndarray
    bench: np.ndarray
    tested_dtype: str  # "torch.bfloat16"
    name: str = ""  # "Torch.matmul.0.forward.output.0", for per-API tolerances
    extra: ExtraRuns = field(default_factory=ExtraRuns)


@dataclass
class Metrics:
    cosine: float | None
    max_abs_err: float
    max_rel_err: float
    worst_index: tuple[int, ...] | None = None
    worst_tested: float | None = None
    worst_bench: float | None = None

    def where(self) -> str:
        """` at [0, 6] (tested -0.63, bench -0.63)`: the worst element, for a message."""
        if self.worst_index is None or self.worst_tested is None or self.worst_bench is None:
            return ""
        index = ", ".join(str(i) for i in self.worst_index)
        return f" at [{index}] (tested {self.worst_tested:.8g}, bench {self.worst_bench:.8g})"


def is_floating(dtype: str) -> bool:
    name = dtype.rsplit(".", 1)[-1].lower()
    return "float" in name or "complex" in name or name in ("half", "double")


def metrics(tested: np.ndarray, bench: np.ndarray) -> Metrics:
    """Cosine, MaxAbsErr and MaxRelativeErr over the finite elements of both."""
    t = np.asarray(tested, dtype=np.float64).reshape(-1)
    b = np.asarray(bench, dtype=np.float64).reshape(-1)
    finite = np.isfinite(t) & np.isfinite(b)
    if not finite.all():
        t, b = t[finite], b[finite]
    if t.size == 0:
        return Metrics(None, 0.0, 0.0)
    diff = np.abs(t - b)
    worst = int(np.argmax(diff))
    abs_b = np.abs(b)
    rel = diff / np.where(abs_b == 0, REL_EPS, abs_b)
    index = np.unravel_index(np.flatnonzero(finite)[worst], np.shape(tested)) if np.ndim(tested) else ()
    return Metrics(
        cosine=cosine(t, b),
        max_abs_err=float(diff[worst]),
        max_rel_err=float(rel.max()),
        worst_index=tuple(int(i) for i in index),
        worst_tested=float(t[worst]),
        worst_bench=float(b[worst]),
    )


def cosine(t: np.ndarray, b: np.ndarray) -> float | None:
    """Cosine similarity; None where undefined (one element, a zero vector)."""
    if t.size <= 1:
        return None
    # Scale first: the squares of large fp32 values overflow float64 sums.
    scale = max(float(np.abs(t).max()), float(np.abs(b).max()))
    if scale == 0.0:
        return None
    t, b = t / scale, b / scale
    norm_t, norm_b = float(np.sqrt(np.dot(t, t))), float(np.sqrt(np.dot(b, b)))
    if norm_t == 0.0 or norm_b == 0.0:
        return None
    return float(np.clip(np.dot(t, b) / (norm_t * norm_b), -1.0, 1.0))


def incomparable(c: Comparison) -> str | None:
    """Why the two outputs cannot be compared element by element (a failure)."""
    if np.shape(c.tested) != np.shape(c.bench):
        return f"shape {list(np.shape(c.tested))} differs from the bench's {list(np.shape(c.bench))}"
    kinds = (_kind(c.tested), _kind(c.bench))
    if kinds[0] != kinds[1] and "f" in kinds:
        return f"dtype kind differs: tested is {_kind_name(kinds[0])}, bench is {_kind_name(kinds[1])}"
    return None


def _kind(array: np.ndarray) -> str:
    kind = np.asarray(array).dtype.kind
    return {"f": "f", "c": "f", "b": "b"}.get(kind, "i")


def _kind_name(kind: str) -> str:
    return {"f": "floating", "b": "bool", "i": "integer"}[kind]


def nonfinite_mismatch(tested: np.ndarray, bench: np.ndarray) -> list[str]:
    """Where NaN and inf do not sit at the same places on both sides."""
    t, b = np.asarray(tested, np.float64), np.asarray(bench, np.float64)
    t_nan, b_nan = np.isnan(t), np.isnan(b)
    t_inf, b_inf = np.isinf(t), np.isinf(b)
    if not (t_nan.any() or b_nan.any() or t_inf.any() or b_inf.any()):
        return []
    faults = []
    nan_off = int((t_nan != b_nan).sum())
    if nan_off:
        faults.append(f"NaN at {nan_off} position(s) where the other side has none")
    inf_off = int(((t_inf | b_inf) & ~(t_nan | b_nan) & (t != b)).sum())
    if inf_off:
        faults.append(f"inf at {inf_off} position(s) where the other side differs")
    return faults


def exact_mismatch(c: Comparison) -> list[str]:
    """Integer and bool outputs must be equal."""
    t, b = np.asarray(c.tested), np.asarray(c.bench)
    wrong = int((t != b).sum())
    return [f"{wrong} of {t.size} elements differ (integer/bool outputs must be equal)"] if wrong else []


def compare(c: Comparison, standard: Standard) -> tuple[Metrics, Verdict]:
    """Metrics and verdict of one output; structural faults fail under any standard."""
    from .standards import Verdict

    fault = incomparable(c)
    if fault:
        return Metrics(None, float("nan"), float("nan")), Verdict(ERROR, [fault])
    m = metrics(c.tested, c.bench)
    if _kind(c.tested) != "f":
        wrong = exact_mismatch(c)
        return m, Verdict(ERROR if wrong else PASS, wrong)
    faults = nonfinite_mismatch(c.tested, c.bench)
    if faults:
        return m, Verdict(ERROR, faults)
    return m, standard.judge(c, m)
