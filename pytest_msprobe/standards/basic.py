"""The basic standard, the user's rule: Cosine > 0.99 and MaxAbsErr < 1e-4 (both configurable)."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from ..compare import Comparison, Metrics
from ..figures import beside
from ..results import ERROR, PASS
from . import Verdict

if TYPE_CHECKING:
    from ..options import Options
    from .dtype import DtypeStandard


class BasicStandard:
    """Cosine > cosine and MaxAbsErr < max_abs_err, whatever the dtype.

    A bf16 or fp16 output breaks MaxAbsErr < 1e-4 on rounding alone once its
    values exceed a few hundredths: such a failure is marked with its dtype
    (Verdict.floor) when the rounding budget of that dtype holds it.
    """

    name = "basic"

    def __init__(self, cosine: float = 0.99, max_abs_err: float = 1e-4):
        self.cosine = cosine
        self.max_abs_err = max_abs_err

    @classmethod
    def from_options(cls, options: Options) -> BasicStandard:
        return cls(options.cosine, options.max_abs_err)

    def describe(self) -> str:
        return f"basic (Cosine > {self.cosine:g} and MaxAbsErr < {self.max_abs_err:g})"

    def header_lines(self) -> list[str]:
        return []

    def judge(self, c: Comparison, m: Metrics) -> Verdict:
        broken = self.broken_rules(c, m)
        severity = self.severity(c, m)
        if not broken:
            return Verdict(PASS, severity=severity)
        return Verdict(ERROR, broken, rounding_floor(c, m), severity=severity)

    def broken_rules(self, c: Comparison, m: Metrics) -> list[str]:
        broken = []
        if self._one_side_zero(c, m):
            side = "tested" if m.all_zero[0] else "bench"
            broken.append(f"the {side} output is all zero and the other is not")
        elif m.cosine is not None and not m.cosine > self.cosine:
            broken.append(f"Cosine {beside(m.cosine, self.cosine, 6)} <= {self.cosine:g}")
        if not m.max_abs_err < self.max_abs_err:
            broken.append(f"MaxAbsErr {beside(m.max_abs_err, self.max_abs_err)} >= {self.max_abs_err:g}{m.where()}")
        return broken

    def severity(self, c: Comparison, m: Metrics) -> float:
        """How many times beyond its thresholds the output is: the larger of MaxAbsErr over its
        threshold and 1 - Cosine over 1 - its threshold (up to 1 it passes; inf where one side
        is all zero)."""
        if self._one_side_zero(c, m):
            return math.inf
        ratios = [_over(m.max_abs_err, self.max_abs_err)]
        if m.cosine is not None:
            ratios.append(_over(1.0 - m.cosine, 1.0 - self.cosine))
        return max(ratios)

    @staticmethod
    def _one_side_zero(c: Comparison, m: Metrics) -> bool:
        return m.all_zero[0] != m.all_zero[1] and np.size(c.tested) > 1


def _over(value: float, bound: float) -> float:
    """value / bound, where a bound of 0 is broken by anything above it."""
    if bound > 0:
        return max(value, 0.0) / bound
    return math.inf if value > 0 else 0.0


def rounding_floor(c: Comparison, m: Metrics) -> str:
    """The short name of the output's dtype when its rounding budget holds the error, else ""."""
    if not _dtype_budget().within_budget(c, m):
        return ""
    name = c.tested_dtype.rsplit(".", 1)[-1]
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}.get(name, c.tested_dtype)


@functools.cache
def _dtype_budget() -> DtypeStandard:
    from .dtype import DtypeStandard

    return DtypeStandard()
