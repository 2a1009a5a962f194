"""Per-output metrics, and the structural faults that fail an output under any standard.

Everything here works on numpy arrays in float64 and knows no framework: the
framework modules hand over the tested and the bench output as arrays plus the
tested dtype's name (torch spelling). The standards (standards/) judge what is
left once the outputs are comparable element by element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..results import ERROR, PASS, MsprobeMetrics
from . import reductions

if TYPE_CHECKING:
    from .standards import Standard, Verdict

REL_EPS = reductions.REL_EPS  # the denominator of MaxRelativeErr where the bench value is exactly zero


def _no_answer(*args: float) -> np.ndarray | None:
    return None


def _no_terms() -> int | None:
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
    float32), sampled_magnitude() a lower bound again, the magnitude of a part of the terms (a
    conv's gradients over a quarter of the channels or samples, in float32), spread_once(relative)
    the spread of the first seed alone."""

    magnitude: Callable[[], np.ndarray | None] = _no_answer
    spread: Callable[[float], np.ndarray | None] = _no_answer
    low: Callable[[], np.ndarray | None] = _no_answer
    lower_magnitude: Callable[[], np.ndarray | None] = _no_answer
    sampled_magnitude: Callable[[], np.ndarray | None] = _no_answer
    spread_once: Callable[[float], np.ndarray | None] = _no_answer
    terms: Callable[[], int | None] = _no_terms  # how many terms one element sums at most (K), no run
    # What a correct kernel's own roundings in a low dtype move the output by (a saved output read
    # by the gradient's formula, flash attention's P in bf16): frameworks/magnitudes.structural.
    structural: Callable[[], np.ndarray | None] = _no_answer
    # Another correct kernel's benchmark where the API may be computed two ways that round
    # differently (a biased GEMM's product rounded before its bias is added), and its description:
    # an output within its budget of either was computed correctly.
    alternative: Callable[[], np.ndarray | None] = _no_answer
    alternative_kernel: str = ""
    # An elementwise function of one exact input (exp, cos, silu, ...: no terms to sum): how many ULP a
    # correct fp32 math library's function is off the correctly rounded result, which takes the place
    # of the accumulation term (frameworks/magnitudes.LIBRARY_ULPS); None where the output sums terms.
    library_ulps: float | None = None


@dataclass
class Comparison:
    """One tested output beside its bench, both as arrays."""

    tested: np.ndarray
    bench: np.ndarray
    tested_dtype: str  # "torch.bfloat16"
    name: str = ""  # "Torch.matmul.0.forward.output.0", for per-API tolerances
    extra: ExtraRuns = field(default_factory=ExtraRuns)
    computed_in: str = ""  # the narrower dtype a correct kernel computed it in, if not tested_dtype
    # msprobe's metrics of this output and its name as msprobe numbers it (a backward's outputs by
    # every positional tensor argument), where a standard asks for them (the benchmark standard).
    msprobe: MsprobeMetrics | None = None
    msprobe_name: str = ""


@dataclass
class Metrics:
    cosine: float | None
    max_abs_err: float
    max_rel_err: float
    worst_index: tuple[int, ...] | None = None
    worst_tested: float | None = None
    worst_bench: float | None = None
    nonfinite: tuple[int, int] = (0, 0)  # (NaN where the other side has none, inf where it differs)
    all_zero: tuple[bool, bool] = (False, False)  # (tested, bench): every element 0, and one at least
    # What the pass found of each block, for a standard's later look at the same arrays.
    blocks: reductions.BlockErrors | None = None

    def over_whole_arrays(self) -> Metrics:
        """The metrics of an output whose NaN or inf do not match, as the whole arrays give them:
        Cosine NaN, MaxAbsErr and MaxRelativeErr NaN (a NaN off) or inf (an inf off), so that
        a sort by any column of the details file finds the fault first. The finite part's
        figures stay in the verdict's message."""
        worst = math.nan if self.nonfinite[0] else math.inf
        return replace(self, cosine=math.nan, max_abs_err=worst, max_rel_err=worst)

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
    """Cosine, MaxAbsErr and MaxRelativeErr over the finite elements of both, and the NaN and inf
    that do not match (one pass, block by block: reductions.py)."""
    found = reductions.errors(tested, bench)
    nonfinite = (found.nan_off, found.inf_off)
    all_zero = (np.size(tested) > 0 and not found.nonzero[0], np.size(bench) > 0 and not found.nonzero[1])
    if found.count == 0:
        return Metrics(None, 0.0, 0.0, nonfinite=nonfinite, all_zero=all_zero, blocks=found.blocks)
    index = np.unravel_index(found.worst, np.shape(tested)) if np.ndim(tested) else ()
    return Metrics(
        cosine=reductions.cosine(tested, bench, found),
        max_abs_err=found.max_abs,
        max_rel_err=found.max_rel,
        worst_index=tuple(int(i) for i in index),
        worst_tested=found.worst_tested,
        worst_bench=found.worst_bench,
        nonfinite=nonfinite,
        all_zero=all_zero,
        blocks=found.blocks,
    )


def cosine(t: np.ndarray, b: np.ndarray) -> float | None:
    """Cosine similarity of finite arrays; None where undefined (one element, a zero vector)."""
    return reductions.cosine(t, b, reductions.errors(t, b))


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


def nonfinite_mismatch(m: Metrics) -> list[str]:
    """Where NaN and inf do not sit at the same places on both sides."""
    nan_off, inf_off = m.nonfinite
    faults = []
    if nan_off:
        faults.append(f"NaN at {nan_off} position(s) where the other side has none")
    if inf_off:
        faults.append(f"inf at {inf_off} position(s) where the other side differs")
    return faults


def exact_mismatch(c: Comparison) -> list[str]:
    """Integer and bool outputs must be equal."""
    t, b = np.asarray(c.tested), np.asarray(c.bench)
    wrong = int((t != b).sum())
    return [f"{wrong} of {t.size} elements differ (integer/bool outputs must be equal)"] if wrong else []


# The least magnitude that rounds to inf in each format, to nearest: its largest finite number plus
# half its last ULP (IEEE 754's overflow threshold).
OVERFLOW = {
    "float16": (2 - 2.0**-11) * 2.0**15,
    "bfloat16": (2 - 2.0**-8) * 2.0**127,
    "float32": (2 - 2.0**-24) * 2.0**127,
}


def overflowed(bench: np.ndarray, dtype: str) -> tuple[np.ndarray, int]:
    """The bench as `dtype` holds it where that overflows: each element beyond the format's range
    made inf of its sign, and how many were. A correct fp16 kernel's 7.9e4 is inf."""
    limit = OVERFLOW.get(dtype.rsplit(".", 1)[-1])
    if limit is None:
        return bench, 0
    values = np.asarray(bench, np.float64)
    beyond = np.abs(values) >= limit  # False at NaN
    count = int(np.count_nonzero(beyond))
    if not count:
        return bench, 0
    values = values.copy()
    values[beyond] = np.copysign(np.inf, values[beyond])
    return values, count


def compare(c: Comparison, standard: Standard) -> tuple[Metrics, Verdict]:
    """Metrics and verdict of one output; structural faults fail under any standard."""
    from .standards import Verdict

    fault = incomparable(c)
    if fault:
        return Metrics(None, float("nan"), float("nan")), Verdict(ERROR, [fault], severity=math.inf)
    m = metrics(c.tested, c.bench)
    overflow = ""
    if m.nonfinite[1] and _kind(c.tested) == "f":
        # An inf on the tested side only: where the bench is beyond the tested dtype's range, inf is
        # that value correctly rounded (fp16 gradients of a loss scale, exp of a large argument).
        bench, count = overflowed(c.bench, c.tested_dtype)
        if count:
            c = replace(c, bench=bench)
            m = metrics(c.tested, c.bench)
            name = c.tested_dtype.rsplit(".", 1)[-1]
            overflow = f"{count} bench element(s) beyond {name}'s range: inf in {name}, as a correct kernel rounds them"
    if _kind(c.tested) != "f":
        # A standard may judge some integer outputs otherwise (the dtype standard: a quantisation's).
        judge_integer = getattr(standard, "judge_integer", None)
        verdict = judge_integer(c, m) if judge_integer is not None else None
        if verdict is not None:
            return m, verdict
        wrong = exact_mismatch(c)
        return m, Verdict(ERROR if wrong else PASS, wrong, severity=math.inf if wrong else 0.0)
    faults = nonfinite_mismatch(m)
    if faults:
        # Which side holds the NaN or inf, and where: the count alone did not say.
        faults = [fault + first_nonfinite(c.tested, c.bench, fault.startswith("NaN")) for fault in faults]
        finite = f"Cosine {_figure(m.cosine)}, MaxAbsErr {_figure(m.max_abs_err)}"
        faults.append(f"over the elements finite on both sides: {finite}")
        if overflow:
            faults.append(overflow)
        return m.over_whole_arrays(), Verdict(ERROR, faults, severity=math.inf, nonfinite=True)
    verdict = standard.judge(c, m)
    if overflow:
        verdict.reasons.append(overflow)
    return m, verdict


def first_nonfinite(tested: np.ndarray, bench: np.ndarray, nan: bool) -> str:
    """` (the first at [0, 3]: tested nan, bench 0.27)`: the first element where NaN (`nan`), else
    inf, is on one side only or differs, for the message that counts them."""
    t, b = np.asarray(tested, np.float64), np.asarray(bench, np.float64)
    if nan:
        off = np.isnan(t) != np.isnan(b)
    else:
        off = (np.isinf(t) | np.isinf(b)) & ~(np.isnan(t) | np.isnan(b)) & (t != b)
    found = np.flatnonzero(off)
    if not found.size:
        return ""
    i = int(found[0])
    index = ", ".join(str(int(k)) for k in np.unravel_index(i, t.shape)) if t.ndim else ""
    return f" (the first at [{index}]: tested {float(t.flat[i]):.8g}, bench {float(b.flat[i]):.8g})"


def _figure(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.6g}"
