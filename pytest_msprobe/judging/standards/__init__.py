"""The standards that judge an output: the seam between the metrics and a verdict.

A standard is one class implementing `Standard`, listed in `STANDARDS` by the
name `--msprobe-standard` takes; it is imported only when chosen. It sees one
output at a time (compare.Comparison, with its Metrics) once the structural
checks passed (same shape, same places of NaN and inf), and says pass, warning
or error, with its reasons as data.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ...results import Status

if TYPE_CHECKING:
    from ...options import Options
    from ..compare import Comparison, Metrics
    from ..precision_compare import Reference

# name -> "module:Class" under this package: a standard's module (numpy and all)
# is imported only when a run chooses it.
STANDARDS = {
    "basic": "basic:BasicStandard",
    "dtype": "dtype:DtypeStandard",
    "benchmark": "benchmark:BenchmarkStandard",  # against a reference run's rows (Standard.uses_reference)
}


@dataclass
class Verdict:
    status: Status
    reasons: list[str] = field(default_factory=list)  # the rules broken, or what the output stayed within
    floor: str = ""  # a failure within this dtype's rounding budget ("bf16"): see OutputResult.floor
    ratio: float | None = None  # the worst element's error over its budget, where the standard has one
    severity: float | None = None  # how many times its budget the output is off: see OutputResult.severity
    nonfinite: bool = False  # NaN or inf where the other side has none

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)


class Standard(Protocol):
    name: str

    @classmethod
    def from_options(cls, options: Options) -> Standard:
        """Built from the run's options; a ValueError names the setting it cannot read."""
        ...

    def describe(self) -> str:
        """One line for the report header and the failure messages."""
        ...

    def header_lines(self) -> list[str]:
        """More lines for the report header (the per-API tolerances), or none."""
        ...

    def judge(self, c: Comparison, m: Metrics) -> Verdict: ...


def for_dump(standard: Standard, path: Path) -> Standard:
    """The standard that judges the dump at path's entries: the run's, or (a standard judging against a
    reference run of several dumps) the one bound to that dump's reference."""
    bind = getattr(standard, "for_dump", None)
    return standard if bind is None else bind(path)


def standard_class(name: str) -> type[Standard]:
    module, _, cls = STANDARDS[name].partition(":")
    standard: type[Standard] = getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    return standard


def make_standard(options: Options, reference: Reference | Mapping[Path, Reference] | None = None) -> Standard:
    """The run's standard; `reference`, a reference run's rows (a run over several dumps: each dump's,
    by its path), for a standard judging against one (the benchmark standard: the glue reads
    --msprobe-reference, judging knows no CSV)."""
    cls = standard_class(options.standard)
    if getattr(cls, "uses_reference", False) and reference is not None:
        standard: Standard = cls.from_reference(options, reference)  # type: ignore[attr-defined]
        return standard
    return cls.from_options(options)
