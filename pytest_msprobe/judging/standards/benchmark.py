"""The benchmark standard: msprobe's api_precision_compare inside a run.

`--msprobe-standard benchmark --msprobe-reference B` judges each output of this run as msprobe
judges an NPU run against a GPU run: this output's msprobe metrics (judging/msprobe_metrics.py,
against the float64 bench) over the metrics of the reference run's row of the same name (B: a
details CSV or run folder in msprobe's PyTorch layout, this plugin's or msprobe's acc_check's),
each ratio against the threshold of the API's level (judging/precision_compare.py). An output the
reference has no row of is a SKIP naming B's files. A run over several dumps takes a reference run of
the same dumps, each dump judged against the rows of its own folder (for_dump). The structural faults
(shapes, NaN or inf where the bench has none, integer outputs that differ) fail an output under any
standard before it gets here (compare.py), as docs/compare.md says msprobe's rule should.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ...results import ERROR, SKIP
from .. import precision_compare as rules
from ..compare import Comparison, Metrics
from . import Verdict

if TYPE_CHECKING:
    from ...options import Options


SIDES = rules.Sides("tested", "reference")  # "the reference row has no 均方根误差"


class BenchmarkStandard:
    name = "benchmark"
    # The checker computes each output's msprobe metrics and msprobe name for it (Comparison.msprobe);
    # make_standard builds it from the reference run's rows the glue read (from_reference).
    wants_msprobe = True
    uses_reference = True

    def __init__(self, reference: rules.Reference | None, by_dump: Mapping[Path, rules.Reference] | None = None):
        self.reference = reference  # the one dump's reference run (or, from for_dump, this dump's)
        self.by_dump = dict(by_dump or {})  # a run over several dumps: each dump's reference run, by its path

    @classmethod
    def from_options(cls, options: Options) -> BenchmarkStandard:
        raise ValueError(
            "--msprobe-standard benchmark judges against a reference run: name it with --msprobe-reference"
        )

    @classmethod
    def from_reference(
        cls, options: Options, reference: rules.Reference | Mapping[Path, rules.Reference]
    ) -> BenchmarkStandard:
        if isinstance(reference, rules.Reference):
            return cls(reference)
        return cls(None, reference)

    def for_dump(self, path: Path) -> BenchmarkStandard:
        """The standard that judges the entries of the dump at path (the Checker asks it per entry)."""
        if self.reference is not None or path not in self.by_dump:
            return self
        return BenchmarkStandard(self.by_dump[path])

    def describe(self) -> str:
        return (
            "benchmark (msprobe's api_precision_compare: each output's RMSE, max and mean relative error and "
            "small-value error share over the reference run's, within the L0/L1/L2 thresholds of its API)"
        )

    def header_lines(self) -> list[str]:
        references = [self.reference] if self.reference is not None else list(self.by_dump.values())
        return [
            f"reference run: {reference.missing or f'{reference.source} ({len(reference.rows)} outputs)'}"
            for reference in references
        ]

    def judge(self, c: Comparison, m: Metrics) -> Verdict:
        if c.msprobe is None:  # the checker computes them for this standard: never so
            return Verdict(SKIP, ["no msprobe metrics of this output"])
        tested = rules.Row(c.tested_dtype, str(tuple(c.tested.shape)), "", "", c.msprobe)
        reason = rules.skip_reason(tested)
        if reason is not None:
            return Verdict(SKIP, [reason])
        run = self.reference
        if run is None or run.missing:  # a dump of a run over several dumps: its folder has no reference
            return Verdict(SKIP, [run.missing if run else "no reference run for this dump"])
        reference = run.rows.get(c.msprobe_name)
        if reference is None:
            return Verdict(SKIP, [f"no row {c.msprobe_name} in {run.source}: the reference run has no such output"])
        named = rules.output_name(c.msprobe_name)
        judged = rules.judge(named.api_name if named else c.msprobe_name, tested, reference, SIDES)
        reasons = [failure.text() for failure in judged.failures] or [judged.message.strip()]
        severity = max((_times_threshold(failure) for failure in judged.failures), default=0.0)
        return Verdict(judged.status, [r for r in reasons if r], severity=severity if judged.status == ERROR else 0.0)


def _times_threshold(failure: rules.Failure) -> float:
    """How many times its threshold a ratio is; beyond any measure where the rule has none."""
    if failure.value is None or failure.threshold is None or not math.isfinite(failure.value):
        return math.inf
    return failure.value / failure.threshold if failure.threshold > 0 else math.inf
