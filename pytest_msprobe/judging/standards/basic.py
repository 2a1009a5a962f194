"""The basic standard, the user's rule: Cosine > 0.99 and MaxAbsErr < 1e-4 (both configurable)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ...results import ERROR
from ..compare import Comparison, Metrics
from . import Verdict
from .dtype import DtypeStandard
from .rule import BasicRule

if TYPE_CHECKING:
    from ...options import Options


class BasicStandard(BasicRule):
    """Cosine > cosine and MaxAbsErr < max_abs_err, whatever the dtype.

    A bf16 or fp16 output breaks MaxAbsErr < 1e-4 on rounding alone once its
    values exceed a few hundredths: such a failure is marked with its dtype
    (Verdict.floor) when the rounding budget of that dtype holds it.
    """

    name = "basic"

    @classmethod
    def from_options(cls, options: Options) -> BasicStandard:
        return cls(options.cosine, options.max_abs_err)

    def describe(self) -> str:
        return f"basic (Cosine > {self.cosine:g} and MaxAbsErr < {self.max_abs_err:g})"

    def header_lines(self) -> list[str]:
        return []

    def judge(self, c: Comparison, m: Metrics) -> Verdict:
        verdict = super().judge(c, m)
        if verdict.status == ERROR:
            verdict.floor = rounding_floor(c, m)
        return verdict


def rounding_floor(c: Comparison, m: Metrics) -> str:
    """The short name of the output's dtype when its rounding budget holds the error, else ""."""
    if not _dtype_budget().within_budget(c, m):
        return ""
    name = c.tested_dtype.rsplit(".", 1)[-1]
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}.get(name, c.tested_dtype)


@functools.cache
def _dtype_budget() -> DtypeStandard:
    return DtypeStandard()
