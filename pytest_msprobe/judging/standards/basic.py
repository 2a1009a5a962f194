"""The basic standard, the user's rule: Cosine > 0.99 and MaxAbsErr < 1e-4 (both configurable)."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from ...results import ERROR
from ..compare import Comparison, Metrics
from . import Verdict
from .budget import format_of
from .dtype import DtypeStandard
from .rule import BasicRule
from .tolerances import Tolerances

if TYPE_CHECKING:
    from ...options import Options


class BasicStandard(BasicRule):
    """Cosine > cosine and MaxAbsErr < max_abs_err, whatever the dtype.

    A bf16 or fp16 output breaks MaxAbsErr < 1e-4 on rounding alone once its
    values exceed a few hundredths: such a failure is marked with its dtype
    (Verdict.floor) when the rounding budget of that dtype holds it.
    """

    name = "basic"

    def __init__(self, cosine: float = 0.99, max_abs_err: float = 1e-4, tolerances: Tolerances | None = None):
        super().__init__(cosine, max_abs_err)
        # The dtype standard the floor asks, with the run's msprobe_tolerances: "--msprobe-standard
        # dtype passes it" must hold of the run the user would make (a per-API rtol/atol can fail
        # what the budget passes, an allowance pass what it fails).
        self.budget = DtypeStandard(tolerances) if tolerances else _dtype_budget()

    @classmethod
    def from_options(cls, options: Options) -> BasicStandard:
        try:
            tolerances = Tolerances.parse(options.tolerances)
        except ValueError:  # unused by basic: the run goes on; the dtype standard would refuse it
            tolerances = None
        return cls(options.cosine, options.max_abs_err, tolerances)

    def describe(self) -> str:
        return f"basic (Cosine > {self.cosine:g} and MaxAbsErr < {self.max_abs_err:g})"

    def header_lines(self) -> list[str]:
        return []

    def judge(self, c: Comparison, m: Metrics) -> Verdict:
        verdict = super().judge(c, m)
        if verdict.status == ERROR:
            verdict.floor = rounding_floor(c, m, self.budget)
            if verdict.floor and self._one_side_zero(c, m):
                verdict.reasons.append(zero_within_budget(c, m, self.budget))
                # Rounding alone is no fault beyond any measure: it ranks at the edge of the rule
                # (the summary listed it first, beside NaN and shape faults, as "worst").
                verdict.severity = max(1.0, m.max_abs_err / self.max_abs_err if self.max_abs_err > 0 else 1.0)
        return verdict


def rounding_floor(c: Comparison, m: Metrics, budget: DtypeStandard | None = None) -> str:
    """The short name of the output's dtype when its rounding budget holds the error, else ""."""
    if not (budget or _dtype_budget()).within_budget(c, m):
        return ""
    name = c.tested_dtype.rsplit(".", 1)[-1]
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}.get(name, c.tested_dtype)


def zero_within_budget(c: Comparison, m: Metrics, budget: DtypeStandard | None = None) -> str:
    """Why an output all zero on one side only is rounding alone (its floor holds): the other
    side's values round to 0 in the dtype, or are within its budget of 0. "Within the rounding
    budget" alone reads as a contradiction of "all zero and the other is not"."""
    fmt = format_of(c.tested_dtype)
    if fmt is None:  # within_budget holds only for a dtype with a budget
        return ""
    other = "bench" if m.all_zero[0] else "tested"
    values = np.asarray(c.bench if m.all_zero[0] else c.tested, dtype=np.float64)
    largest = float(np.max(np.abs(values)))
    half_step = math.ldexp(1.0, fmt.min_exponent - fmt.mantissa_bits - 1)  # half the smallest subnormal
    if m.all_zero[0] and largest <= half_step:
        return (
            f"every {other} value rounds to 0 in {fmt.name} (none is above half its smallest step, "
            f"{half_step:.3g}): a correct {fmt.name} result is all zero too"
        )
    ratio = (budget or _dtype_budget()).judge(c, m).ratio
    share = f" (the worst at {ratio:.2g} of it)" if ratio is not None else ""
    return f"every {other} value is within {fmt.name}'s rounding budget of 0{share}"


@functools.cache
def _dtype_budget() -> DtypeStandard:
    return DtypeStandard()
