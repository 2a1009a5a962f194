"""The basic rule alone: Cosine > cosine and MaxAbsErr < max_abs_err, whatever the dtype.

The basic standard (basic.py) is this rule and a word on the rounding floor of a failure, which
asks the dtype standard; the dtype standard falls back on this rule for a dtype it has no budget
for. Each imports this module, neither the other's, so the two do not import each other.
"""

from __future__ import annotations

import math

import numpy as np

from ...results import ERROR, PASS
from ..compare import Comparison, Metrics
from ..figures import beside
from . import Verdict


class BasicRule:
    """Cosine > cosine and MaxAbsErr < max_abs_err."""

    def __init__(self, cosine: float = 0.99, max_abs_err: float = 1e-4):
        self.cosine = cosine
        self.max_abs_err = max_abs_err

    def judge(self, c: Comparison, m: Metrics) -> Verdict:
        broken = self.broken_rules(c, m)
        severity = self.severity(c, m)
        if not broken:
            return Verdict(PASS, severity=severity)
        return Verdict(ERROR, broken, severity=severity)

    def broken_rules(self, c: Comparison, m: Metrics) -> list[str]:
        broken = []
        within = m.max_abs_err < self.max_abs_err
        if self._one_side_zero(c, m):
            zero, other = ("tested", "bench") if m.all_zero[0] else ("bench", "tested")
            # Its largest element is the worst one; MaxAbsErr's reason names it where that breaks too.
            largest = f": the largest in magnitude{m.where()}" if within and m.where() else ""
            broken.append(f"the {zero} output is all zero and the {other} is not{largest}")
        elif m.cosine is not None and not m.cosine > self.cosine:
            broken.append(f"Cosine {beside(m.cosine, self.cosine, 6)} <= {self.cosine:g}")
        if not within:
            broken.append(f"MaxAbsErr {beside(m.max_abs_err, self.max_abs_err)} >= {self.max_abs_err:g}{m.where()}")
        return broken

    def severity(self, c: Comparison, m: Metrics) -> float:
        """How many times beyond its thresholds the output is: the larger of MaxAbsErr over its
        threshold and 1 - Cosine over 1 - its threshold (up to 1 it passes; inf where one side
        is all zero, which basic.py brings back to the edge where the dtype's rounding holds it)."""
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
