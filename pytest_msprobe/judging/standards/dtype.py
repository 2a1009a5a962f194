"""The dtype standard: each element against what a correct kernel could do at that element.

A float64 benchmark differs from a correct bf16 or fp16 result by the rounding alone, which a
fixed MaxAbsErr of 1e-4 cannot tell from a fault. This standard judges every element of an
output against its own budget (standards/budget.py): the final rounding in the tested dtype at
that element, plus what the computation amplifies of the fp32 accumulation a correct kernel is
allowed (Ascend's cube unit and CUDA's tensor cores accumulate fp16/bf16/fp32 in fp32) and of the
intermediates a correct kernel rounds to the low dtype (a saved output its gradient reads, flash
attention's P in bf16). An
output whose worst element is within its budget passes; up to 1.04 times it, a warning; beyond,
an error. So a bf16 matmul accumulated in bf16, a TF32 GEMM, a tanh GELU for an erf one or a
gradient missing a term fail, and other summation orders, 1-ULP math libraries, online softmax
or Welford's layer_norm pass (bench/studies/kernel_bounds.md).

The 8-bit formats (float8_e4m3fn, float8_e5m2, their fnuz variants, HiFloat8) get the same
budget with their own ULP (formats8.py); a cast into one of them, and a quantisation's integer
output, are one rounding and judged exactly (one_rounding.py): equal to the bench's cast, within
one unit of the bench's quantised value.

The ini key msprobe_tolerances adjusts it per API, first match wins:
`pattern: rtol=.., atol=..` judges the outputs it matches by torch.testing.assert_close's rule
instead; `pattern: inputs=hf32` or `accumulate=fp16` declares what a team accepts of a kernel
(HF32 operands, torch_npu's default for conv; fp16 partial sums), which raises the
accumulation unit of the budget to that format's for the APIs it names.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ...results import ERROR, PASS, WARNING
from ..compare import Comparison, Metrics, incomparable, nonfinite_mismatch
from . import Verdict
from .budget import Constants, Format, Reading, read
from .formats8 import format_of, is_eight_bit
from .one_rounding import is_cast, is_quantised, judge_cast, judge_quantised
from .rule import BasicRule
from .tolerances import Tolerances

if TYPE_CHECKING:
    from ...options import Options

CONSTANTS = Constants()


class DtypeStandard:
    """Judge each element of an output by its dtype's budget (see the module docstring)."""

    name = "dtype"

    def __init__(self, tolerances: Tolerances | None = None, warning: bool = True):
        self.tolerances = tolerances or Tolerances()
        self.warning = warning

    @classmethod
    def from_options(cls, options: Options) -> DtypeStandard:
        try:
            return cls(Tolerances.parse(options.tolerances))
        except ValueError as exc:
            raise ValueError(f"msprobe_tolerances: {exc}") from None

    def describe(self) -> str:
        c = CONSTANTS
        text = (
            f"dtype (each element within {c.c_out:g} ULP + {c.c_acc:g} u_acc x its terms' magnitude "
            f"+ {c.c_round:g} x rounded intermediates + {c.c_spread:g} x its conditioning "
            f"+ {c.c_low:g} x the CPU's bf16/fp16 kernel"
        )
        if self.warning:
            text += f"; warning up to {c.band:g}x"
        if self.tolerances:
            count = len(self.tolerances.entries)
            text += f"; {count} per-API tolerance{'s' if count > 1 else ''}"
        return text + ")"

    def header_lines(self) -> list[str]:
        return [f"tolerance {line}" for line in self.tolerances.describe()]

    def judge(self, c: Comparison, m: Metrics) -> Verdict:
        tolerance = self.tolerances.match(c.name)
        if tolerance is not None and tolerance.rule:
            return tolerance.judge(c, m)
        fmt = format_of(c.computed_in or c.tested_dtype)
        if fmt is None:
            return _judge_basic(c, m)
        if is_eight_bit(fmt) and is_cast(c.name):
            return judge_cast(c, m, fmt)  # one rounding: equal to the bench's (one_rounding.py)
        allowance = tolerance.accumulation if tolerance is not None else None
        reading = read(c.tested, c.bench, fmt, c.extra, CONSTANTS, allowance, m.blocks)
        kernel = ""
        if reading.ratio > 1 and c.extra.alternative_kernel:
            other = _read_alternative(c, fmt, allowance)
            if other is not None and other.ratio <= 1:
                reading, kernel = other, c.extra.alternative_kernel
        status = PASS if reading.ratio <= 1 else WARNING if self.warning and reading.ratio <= CONSTANTS.band else ERROR
        message = _message(reading, status)
        if kernel:
            message += f", against {kernel}, as a correct kernel may compute it"
        if tolerance is not None:
            message += f" (allowed: {tolerance.describe()})"
        return Verdict(status, [message], ratio=reading.ratio, severity=reading.ratio)

    def judge_integer(self, c: Comparison, m: Metrics) -> Verdict | None:
        """An integer output judged otherwise than by equality: a quantisation's int8/uint8, within
        one unit (one_rounding.py); None for the others (compare.compare asks them equal)."""
        return judge_quantised(c, m) if is_quantised(c) else None

    def within_budget(self, c: Comparison, m: Metrics) -> bool:
        """Whether the output passes this standard with no warning band: under the basic
        standard, a failure this is true of is rounding alone, not a fault."""
        if incomparable(c) or nonfinite_mismatch(m) or format_of(c.tested_dtype) is None:
            return False
        return DtypeStandard(self.tolerances, warning=False).judge(c, m).status == PASS


def _read_alternative(c: Comparison, fmt: Format, allowance: float | None) -> Reading | None:
    """The output against another correct kernel's benchmark (compare.ExtraRuns.alternative), with
    the same magnitude and conditioning terms; not the CPU's low-precision run, which follows the
    first kernel's rounding."""
    bench = c.extra.alternative()
    if bench is None or np.shape(bench) != np.shape(c.bench):
        return None
    extra = replace(c.extra, low=lambda: None)
    return read(c.tested, bench, fmt, extra, CONSTANTS, allowance)


def _judge_basic(c: Comparison, m: Metrics) -> Verdict:
    verdict = BasicRule().judge(c, m)
    note = f"no dtype budget for {c.tested_dtype}, basic rule"
    message = f"{note}: {verdict.message}" if verdict.message else note
    return Verdict(verdict.status, [message], severity=verdict.severity)


def _message(r: Reading, status: str) -> str:
    at = ", ".join(str(i) for i in r.index)
    name = r.format.name
    if status == PASS and r.bounded:
        return (
            f"within budget ({name}): every element within {r.ratio:.2g} of its budget, the most at [{at}] "
            "(bounded with the magnitude of a part of the terms)"
        )
    if status == PASS:
        return f"within budget ({name}): worst element at {r.ratio:.2g} of its budget, at [{at}]"
    parts = ", ".join(f"{part} {ulps:.3g}" for part, ulps in r.parts.items())
    head = (
        f"{name} budget: element [{at}] is {r.error_ulps:.3g} ULP off (tested {r.tested:.8g}, bench {r.bench:.8g}), "
        f"{r.ratio:.3g}x its budget of {r.budget_ulps:.3g} ULP ({parts})"
    )
    if status == WARNING:
        return f"{head}, within the warning band {CONSTANTS.band:g}x"
    return f"{head}; {r.over} of {r.size} elements over budget"
