"""Per-API tolerances (ini key msprobe_tolerances): torch.testing.assert_close's rule for chosen outputs.

Lines like `Torch.matmul.*: rtol=1e-3, atol=1e-5`, first match wins; an output
they match is judged element by element, |t - b| <= atol + rtol * |b|, instead
of by its dtype's budget.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Callable

import numpy as np

from ..compare import Comparison, Metrics
from ..results import ERROR, PASS
from . import Verdict


@dataclass(frozen=True)
class Tolerance:
    """One per-API override: assert_close's |t - b| <= atol + rtol * |b|, element by element."""

    pattern: str
    rtol: float
    atol: float

    def matches(self, output_name: str) -> bool:
        # "Torch.matmul" and "Torch.matmul.0.forward" name all their outputs too.
        return fnmatchcase(output_name, self.pattern) or fnmatchcase(output_name, self.pattern + ".*")

    def describe(self) -> str:
        return f"{self.pattern}: rtol={self.rtol:g}, atol={self.atol:g}"

    def judge(self, c: Comparison, m: Metrics) -> Verdict:
        t, b = finite_pairs(c)
        error = np.abs(t - b)
        off = int(np.count_nonzero(error > self.atol + self.rtol * np.abs(b)))
        if not off:
            return Verdict(PASS, [f"within tolerance {self.pattern}"])
        where = m.where()
        return Verdict(
            ERROR,
            [
                f"tolerance {self.describe()}: {off} of {error.size} elements off, "
                f"max error {m.max_abs_err:.3g}{',' + where if where else ''}"
            ],
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
    for setting in filter(None, (s.strip() for s in settings.split(","))):
        found = _SETTING.match(setting)
        if not found:
            raise bad(f"{setting!r} is not key=value")
        key, value = found.groups()
        if key not in ("rtol", "atol"):
            raise bad(f"unknown key {key!r} (rtol, atol)")
        if key in values:
            raise bad(f"{key} given twice")
        values[key] = _non_negative(value, key, bad)
    if not values:
        raise bad("give rtol, atol or both")
    return Tolerance(pattern, values.get("rtol", 0.0), values.get("atol", 0.0))


def _non_negative(text: str, key: str, bad: Callable[[str], ValueError]) -> float:
    try:
        value = float(text)
    except ValueError:
        raise bad(f"{key}={text} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise bad(f"{key}={text} must be a finite number >= 0")
    return value


def finite_pairs(c: Comparison) -> tuple[np.ndarray, np.ndarray]:
    """Both outputs flattened in float64, where both are finite."""
    t = np.asarray(c.tested, dtype=np.float64).reshape(-1)
    b = np.asarray(c.bench, dtype=np.float64).reshape(-1)
    finite = np.isfinite(t) & np.isfinite(b)
    return t[finite], b[finite]
