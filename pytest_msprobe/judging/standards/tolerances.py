"""Per-API tolerances (ini key msprobe_tolerances) of the dtype standard, first match wins.

`Torch.matmul.*: rtol=1e-3, atol=1e-5`: the outputs it matches are judged element by
element by torch.testing.assert_close's rule, |t - b| <= atol + rtol * |b|, instead of by
their dtype's budget. `Functional.conv2d.*: inputs=hf32` or `Torch.matmul.*: accumulate=fp16`:
an allowance, what a team accepts of those kernels on purpose (HF32 operands, fp16 partial
sums): their budget's accumulation unit is raised to that format's (an operand rounded to
it errs by at most twice its unit times the magnitude of the terms, which the budget's
32 x u_acc x magnitude holds). `inputs=e4m3fn` (or `e5m2`, `hif8`): the kernel rounds its
operands to that 8-bit format itself (a float8 GEMM on wider recorded inputs): the operands'
rounding is then the budget's dominant term, ((1 + u)^2 - 1) M = (2u + u^2) M for products of two
operands so rounded, u the format's unit roundoff at its narrowest mantissa (as u_acc = that
factor / c_acc: 32 u M would accept errors twice the magnitude); of operands in the format's
normal range, where a float8 kernel's scales put them (a subnormal operand's rounding is
absolute, not held).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Callable

import numpy as np

from ...results import ERROR, PASS
from ..compare import Comparison, Metrics
from . import Verdict
from .budget import FORMATS, Constants

# Formats an allowance may name, by the names users write.
ALLOWED = {
    "tf32": FORMATS["tf32"],
    "hf32": FORMATS["hf32"],
    "fp16": FORMATS["float16"],
    "bf16": FORMATS["bfloat16"],
    "float16": FORMATS["float16"],
    "bfloat16": FORMATS["bfloat16"],
}

# 8-bit formats a kernel may round its operands to (inputs= only: nothing accumulates in them), by
# the names users write, and the unit roundoff at their narrowest mantissa (formats8.py: e4m3 3
# bits, e5m2 2, HiFloat8 1 at |e| >= 8).
OPERANDS_8 = {"e4m3fn": 2.0**-4, "float8_e4m3fn": 2.0**-4, "e5m2": 2.0**-3, "float8_e5m2": 2.0**-3, "hif8": 2.0**-2}


@dataclass(frozen=True)
class Tolerance:
    """One per-API line: assert_close's rule (rtol, atol), or an allowance (inputs, accumulate)."""

    pattern: str
    rtol: float = 0.0
    atol: float = 0.0
    rule: bool = True  # rtol/atol given: assert_close's rule replaces the budget
    inputs: str = ""  # the format the kernel's operands are rounded to, accepted ("hf32")
    accumulate: str = ""  # the format it accumulates in, accepted ("fp16")

    def matches(self, output_name: str) -> bool:
        # "Torch.matmul" and "Torch.matmul.0.forward" name all their outputs too.
        return fnmatchcase(output_name, self.pattern) or fnmatchcase(output_name, self.pattern + ".*")

    @property
    def accumulation(self) -> float | None:
        """The unit roundoff an allowance accepts, for the budget's accumulation term."""
        units = [ALLOWED[name].unit_roundoff for name in (self.inputs, self.accumulate) if name in ALLOWED]
        if self.inputs in OPERANDS_8:  # a product of two rounded operands: (2u + u^2) M, as c_acc u_acc M
            u = OPERANDS_8[self.inputs]
            units.append(((1 + u) ** 2 - 1) / Constants().c_acc)
        return max(units) if units else None

    def describe(self) -> str:
        if self.rule:
            return f"{self.pattern}: rtol={self.rtol:g}, atol={self.atol:g}"
        given = (("inputs", self.inputs), ("accumulate", self.accumulate))
        return f"{self.pattern}: " + ", ".join(f"{key}={value}" for key, value in given if value)

    def judge(self, c: Comparison, m: Metrics) -> Verdict:
        t, b = finite_pairs(c)
        error = np.abs(t - b)
        allowed = self.atol + self.rtol * np.abs(b)
        off = int(np.count_nonzero(error > allowed))
        severity = _worst_ratio(error, allowed)
        if not off:
            return Verdict(PASS, [f"within tolerance {self.pattern}"], severity=severity)
        where = m.where()
        return Verdict(
            ERROR,
            [
                f"tolerance {self.describe()}: {off} of {error.size} elements off, "
                f"max error {m.max_abs_err:.3g}{',' + where if where else ''}"
            ],
            severity=severity,
        )


_SETTING = re.compile(r"^\s*(\w+)\s*=\s*([^\s,]+)\s*$")


class Tolerances:
    """Per-API tolerances from the ini option msprobe_tolerances, first match wins."""

    def __init__(self, entries: Iterable[Tolerance] = ()):
        self.entries: list[Tolerance] = list(entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    @classmethod
    def parse(cls, lines: Iterable[str]) -> Tolerances:
        """Lines like "Torch.matmul.*: rtol=1e-3, atol=1e-5"; blank lines and # comments skipped."""
        entries = []
        for line in lines:
            text = line.split("#", 1)[0].strip()
            if text:
                entries.append(_parse_line(text, line))
        return cls(entries)

    def match(self, output_name: str) -> Tolerance | None:
        for entry in self.entries:
            if entry.matches(output_name):
                return entry
        return None

    def lookup(self, output_name: str) -> tuple[float, float] | None:
        """(rtol, atol) for an output such as "Torch.matmul.0.forward.output.0", or None."""
        entry = self.match(output_name)
        return (entry.rtol, entry.atol) if entry else None

    def describe(self) -> list[str]:
        return [entry.describe() for entry in self.entries]


def _parse_line(text: str, line: str) -> Tolerance:
    def bad(reason: str) -> ValueError:
        return ValueError(f"cannot read {line.strip()!r}: {reason}")

    pattern, colon, settings = text.partition(":")
    pattern = pattern.strip()
    if not colon or not pattern:
        raise bad('expected "<API pattern>: rtol=<number>, atol=<number>"')
    values: dict[str, float] = {}
    formats: dict[str, str] = {}
    for setting in filter(None, (s.strip() for s in settings.split(","))):
        found = _SETTING.match(setting)
        if not found:
            raise bad(f"{setting!r} is not key=value")
        key, value = found.groups()
        if key in values or key in formats:
            raise bad(f"{key} given twice")
        if key in ("rtol", "atol"):
            values[key] = _non_negative(value, key, bad)
        elif key in ("inputs", "accumulate"):
            if key == "accumulate" and value in OPERANDS_8:
                raise bad(f"{key}={value}: an 8-bit format holds operands (inputs=), not sums")
            if value not in ALLOWED and not (key == "inputs" and value in OPERANDS_8):
                names = [*ALLOWED, *(OPERANDS_8 if key == "inputs" else ())]
                raise bad(f"{key}={value}: not a format ({', '.join(names)})")
            formats[key] = value
        else:
            raise bad(f"unknown key {key!r} (rtol, atol; or inputs, accumulate)")
    if values and formats:
        raise bad("a line gives assert_close's rtol/atol or an allowance (inputs, accumulate), not both")
    if formats:
        return Tolerance(
            pattern, rule=False, inputs=formats.get("inputs", ""), accumulate=formats.get("accumulate", "")
        )
    if not values:
        raise bad("give rtol, atol or both, or an allowance: inputs=hf32, accumulate=fp16")
    return Tolerance(pattern, values.get("rtol", 0.0), values.get("atol", 0.0))


def _non_negative(text: str, key: str, bad: Callable[[str], ValueError]) -> float:
    try:
        value = float(text)
    except ValueError:
        raise bad(f"{key}={text} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise bad(f"{key}={text} must be a finite number >= 0")
    return value


def _worst_ratio(error: np.ndarray, allowed: np.ndarray) -> float:
    """max |t - b| / (atol + rtol |b|): how many times its tolerance the worst element is off."""
    if not error.size:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(error > 0, error / allowed, 0.0)
    return float(ratio.max())


def finite_pairs(c: Comparison) -> tuple[np.ndarray, np.ndarray]:
    """Both outputs flattened in float64, where both are finite."""
    t = np.asarray(c.tested, dtype=np.float64).reshape(-1)
    b = np.asarray(c.bench, dtype=np.float64).reshape(-1)
    finite = np.isfinite(t) & np.isfinite(b)
    return t[finite], b[finite]
