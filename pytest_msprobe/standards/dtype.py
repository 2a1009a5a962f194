"""The dtype standard: error budgets in ULP of the tested dtype.

A float64 benchmark differs from a correct bf16 or fp16 result by the rounding
alone, |round_to_dtype(exact) - exact|, which a fixed MaxAbsErr of 1e-4 cannot
tell from a fault once values exceed a few hundredths. This standard counts
the error in units in the last place (ULP) of the tested dtype, with two
statistics over the finite elements (NaN and inf must already sit at the same
places; compare.compare fails them first):

    max |t - b|  within  n ULP of the output scale, max |b|
    RMS(t - b)   within  n ULP of the output's RMS, 2**-mantissa_bits x RMS(b)

- The max error catches a few elements gone wrong (one element off, a swapped
  row). It is counted at the output scale, not at each element: kernels round
  intermediates at the magnitude of the largest values, so an element near zero
  may be off by thousands of its own ULP and be correct.
- The RMS error catches a small error spread over many elements (a scale of
  1.03, noise, a lost mantissa bit): TorchBench's RMSE against fp64. In bf16 a
  3% error is only 2.8 to 7.7 ULP of the largest element, while correct
  backward kernels that round intermediates in bf16 (sdpa, layer_norm weight
  grads) reach 5.5; their RMS error stays under 1.9 ULP, a 3% one is >= 2.8.
- fp32 and fp64 add 1 ULP of the input scale (Comparison.input_scale, max
  |input|) to both: a reduction whose result is far smaller than what it summed
  is off by 1e8 ULP of itself (a mean of layer-normed values, near 1e-8) but by
  under 0.01 ULP of its inputs. A sum of n such values loses about sqrt(n)/3
  (8 at n = 4096, 537 at 2**20); allowing that would hide every fault in
  outputs far below their inputs, gradients above all (a cross_entropy grad is
  2e-4 next to logits of 14), so such sums need a per-API tolerance. bf16/fp16
  reductions accumulate in fp32, far below their own ULP, and get no such term.

Numbers, from bench/studies/dtype_standard.md (real dumps recomputed in float64,
forward and backward, and GPT-sized CPU calls, then fault-injected):

    dtype  max error    RMS error   correct outputs     faults
           pass/error   pass/error  max, RMS            x1.03 and 3% noise, RMS
    bf16      8/16         2/2.5    5.5, 1.9            >= 2.8
    fp16      8/32         4/16     4.8, 1.9            >= 25
    fp32     64/16384     64/16384  29, 10              >= 2.5e5; TF32 inputs 2e3-6e3
                                                        (a warning), bf16 inputs >= 1.4e4
    fp64     64/16384     64/16384  not measured: fp32's numbers in the fp64 format

Between a pass budget and its error limit an output is a WARNING (msprobe's
middle level); with warning=False everything beyond the pass budget is an
error. Per-API tolerances (ini option msprobe_tolerances) replace the budget
with torch.testing.assert_close's rule, |t - b| <= atol + rtol * |b|.

Everything here is numpy; dtypes arrive as torch spellings ("torch.bfloat16").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..compare import Comparison, Metrics, incomparable
from ..results import ERROR, PASS, WARNING, Status
from . import Verdict
from .tolerances import Tolerances, finite_pairs

if TYPE_CHECKING:
    from ..options import Options


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format, as far as its ULP goes."""

    name: str
    mantissa_bits: int  # explicit fraction bits
    min_exponent: int  # exponent of the smallest normal number

    def ulp(self, x: float) -> float:
        """The spacing of this format's numbers at |x| (subnormal spacing below the normal range)."""
        x = abs(float(x))
        exponent = math.frexp(x)[1] - 1 if x > 0 else self.min_exponent
        return math.ldexp(1.0, max(exponent, self.min_exponent) - self.mantissa_bits)


BFLOAT16 = FloatFormat("bf16", 7, -126)
FLOAT16 = FloatFormat("fp16", 10, -14)
FLOAT32 = FloatFormat("fp32", 23, -126)
FLOAT64 = FloatFormat("fp64", 52, -1022)


@dataclass(frozen=True)
class Limits:
    """A pass budget and, above it, the error limit; in between is a warning."""

    pass_ulps: float
    error_ulps: float


@dataclass(frozen=True)
class Budget:
    """What one dtype allows.

    max_error is in ULP of the output scale and catches a few elements gone
    wrong; rms_error is the RMS error in ULP of the output's RMS and catches a
    small error spread over many elements (a scale, noise, a lost bit).
    """

    format: FloatFormat
    max_error: Limits
    rms_error: Limits
    # ULP of the input scale added to both limits, for reductions far smaller
    # than what they summed; none for bf16/fp16, which accumulate in fp32.
    input_ulps: float = 0.0


BUDGETS = {
    "bfloat16": Budget(BFLOAT16, max_error=Limits(8, 16), rms_error=Limits(2, 2.5)),
    "float16": Budget(FLOAT16, max_error=Limits(8, 32), rms_error=Limits(4, 16)),
    "float32": Budget(FLOAT32, max_error=Limits(64, 16384), rms_error=Limits(64, 16384), input_ulps=1),
    "float64": Budget(FLOAT64, max_error=Limits(64, 16384), rms_error=Limits(64, 16384), input_ulps=1),
}
_ALIASES = {
    "bf16": "bfloat16",
    "half": "float16",
    "fp16": "float16",
    "float": "float32",
    "fp32": "float32",
    "double": "float64",
    "fp64": "float64",
}
_RANK = {PASS: 0, WARNING: 1, ERROR: 2}


def budget_for(dtype: str) -> Budget | None:
    """The budget of a tested dtype in torch spelling; None for dtypes without one (float8, complex)."""
    name = dtype.rsplit(".", 1)[-1].lower()
    return BUDGETS.get(_ALIASES.get(name, name))


@dataclass(frozen=True)
class Check:
    """One statistic of the error against its limits, all in absolute terms."""

    statistic: str  # "max error" or "RMS error"
    error: float
    unit: float  # one ULP of the scale the limits are counted in
    scale_name: str  # "the output scale 1.5"
    limits: Limits
    input_part: float  # what the input scale adds to either limit
    input_name: str  # "1 ULP of the input scale 4.56"

    def allowed(self, ulps: float) -> float:
        return ulps * self.unit + self.input_part

    def status(self, warning: bool) -> Status:
        if self.error <= self.allowed(self.limits.pass_ulps):
            return PASS
        if warning and self.error <= self.allowed(self.limits.error_ulps):
            return WARNING
        return ERROR

    @property
    def ulps(self) -> float:
        return self.error / self.unit

    @property
    def input_matters(self) -> bool:
        """Whether the input scale makes a visible part of the budget (then it is named)."""
        return self.input_part >= 0.05 * self.limits.pass_ulps * self.unit


@dataclass(frozen=True)
class Reading:
    """One output's max and RMS error against its dtype's budget."""

    budget: Budget
    input_scale: float
    max_error: Check
    rms_error: Check

    @property
    def checks(self) -> tuple[Check, Check]:
        return self.max_error, self.rms_error

    def status(self, warning: bool) -> Status:
        return self.decisive(warning).status(warning)

    def decisive(self, warning: bool) -> Check:
        """The check with the worse status; the max error on a tie, as it points at an element."""
        return max(self.checks, key=lambda check: _RANK[check.status(warning)])


def read(c: Comparison, budget: Budget) -> Reading:
    t, b = finite_pairs(c)
    output_scale = float(np.abs(b).max()) if b.size else 0.0
    rms = _rms(b)
    fmt = budget.format
    input_scale = _finite_or_zero(c.input_scale)
    input_part = budget.input_ulps * fmt.ulp(input_scale) if input_scale else 0.0
    input_name = f"{budget.input_ulps:g} ULP of the input scale {input_scale:.3g}"
    max_error = Check(
        "max error",
        float(np.abs(t - b).max()) if t.size else 0.0,
        fmt.ulp(output_scale),
        f"the output scale {output_scale:.3g}",
        budget.max_error,
        input_part,
        input_name,
    )
    # The RMS unit is continuous (eps x RMS): a binade step would halve it at random.
    # Below the normal range the spacing stops shrinking, and so does the unit.
    rms_unit = max(math.ldexp(rms, -fmt.mantissa_bits), fmt.ulp(0.0))
    rms_error = Check(
        "RMS error", _rms(t - b), rms_unit, f"the output's RMS {rms:.3g}", budget.rms_error, input_part, input_name
    )
    return Reading(budget, input_scale, max_error, rms_error)


def _rms(values: np.ndarray) -> float:
    if not values.size:
        return 0.0
    scale = float(np.abs(values).max())  # scaled first: squares of large values overflow
    return scale * float(np.sqrt(np.mean((values / scale) ** 2))) if scale else 0.0


def _finite_or_zero(x: float) -> float:
    x = abs(float(x or 0.0))
    return x if math.isfinite(x) else 0.0


class DtypeStandard:
    """Judge each output by the ULP budget of its dtype (see the module docstring)."""

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
        text = (
            f"dtype (max/RMS error within ULP of the output scale/RMS: {_budgets('pass_ulps')};"
            " fp32/fp64 + 1 ULP of the input scale"
        )
        if self.warning:
            text += f"; warning up to {_budgets('error_ulps')}"
        if self.tolerances:
            count = len(self.tolerances.entries)
            text += f"; {count} per-API tolerance{'s' if count > 1 else ''}"
        return text + ")"

    def header_lines(self) -> list[str]:
        return [f"tolerance {line}" for line in self.tolerances.describe()]

    def judge(self, c: Comparison, m: Metrics) -> Verdict:
        tolerance = self.tolerances.match(c.name)
        if tolerance is not None:
            return tolerance.judge(c, m)
        budget = budget_for(c.tested_dtype)
        if budget is None:
            return _judge_basic(c, m)
        reading = read(c, budget)
        return Verdict(reading.status(self.warning), [_message(reading, m, self.warning)])

    def within_budget(self, c: Comparison, m: Metrics) -> bool:
        """Whether the output passes this standard: under the basic standard, a failure
        that this is true of sits at the rounding floor of its dtype."""
        if incomparable(c) or not _same_nonfinite(c):
            return False
        tolerance = self.tolerances.match(c.name)
        if tolerance is not None:
            return tolerance.judge(c, m).status == PASS
        budget = budget_for(c.tested_dtype)
        return budget is not None and read(c, budget).status(warning=False) == PASS


def _budgets(limit: str) -> str:
    """ "bf16 8/2, fp16 8/4, ...": one limit of the max and the RMS error per dtype."""
    return ", ".join(
        f"{b.format.name} {getattr(b.max_error, limit):g}/{getattr(b.rms_error, limit):g}" for b in BUDGETS.values()
    )


def _judge_basic(c: Comparison, m: Metrics) -> Verdict:
    from .basic import BasicStandard

    verdict = BasicStandard().judge(c, m)
    note = f"no dtype budget for {c.tested_dtype}, basic rule"
    return Verdict(verdict.status, [f"{note}: {verdict.message}" if verdict.message else note])


def _message(r: Reading, m: Metrics, warning: bool) -> str:
    name = r.budget.format.name
    if r.status(warning) == PASS:
        if r.max_error.input_matters:
            name += f", input scale {r.input_scale:.3g}"
        return f"within budget ({name}): " + ", ".join(_within(check) for check in r.checks)
    return f"{name} budget: {_over(r.decisive(warning), warning)}{_at(m)}"


def _within(check: Check) -> str:
    short = check.statistic.split()[0]  # "max", "RMS"
    if check.input_matters:
        return f"{short} {check.error:.3g} of {check.allowed(check.limits.pass_ulps):.3g}"
    return f"{short} {check.ulps:.2g} of {check.limits.pass_ulps:g} ULP"


def _over(check: Check, warning: bool) -> str:
    text = f"{check.statistic} {check.error:.3g}"
    if not check.input_matters:
        text += f" = {check.ulps:.3g} ULP of {check.scale_name}"
    if check.status(warning) == WARNING:
        above = _limit(check, check.limits.pass_ulps)
        return f"{text}, above {above}, within the error limit {_limit(check, check.limits.error_ulps)}"
    return f"{text} > {_limit(check, check.limits.error_ulps if warning else check.limits.pass_ulps)}"


def _limit(check: Check, ulps: float) -> str:
    if not check.input_matters:
        return f"{ulps:g} ULP"
    return f"{check.allowed(ulps):.3g} = {ulps:g} ULP of {check.scale_name} + {check.input_name}"


def _at(m: Metrics) -> str:
    where = m.where()
    return f",{where}" if where else ""


def _same_nonfinite(c: Comparison) -> bool:
    t = np.asarray(c.tested, dtype=np.float64)
    b = np.asarray(c.bench, dtype=np.float64)
    nonfinite = ~np.isfinite(t) | ~np.isfinite(b)
    return bool(np.array_equal(t[nonfinite], b[nonfinite], equal_nan=True))
