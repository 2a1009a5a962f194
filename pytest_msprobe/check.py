"""Check one dump entry: run both sides through its framework, judge every output.

The one place that ties the frameworks to the standards; it knows no pytest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from . import error_data
from .compare import Comparison, compare
from .dump import Dump, EntryName
from .fallbacks import explain_bench
from .frameworks import BenchmarkFailed, OutputPair, Run, RunOptions, Unsupported, for_framework
from .inputs import InputError, element_budget
from .options import DEFAULT_MAX_ELEMENTS
from .results import ERROR, PASS, SKIP, EntryResult, OutputResult, worst_status
from .standards import Standard


@dataclass(frozen=True)
class Checker:
    """How this process checks entries: how both sides run, the standard, where error data goes."""

    run: RunOptions
    standard: Standard
    error_data: Path | None = None  # where the values of entries that are not pass are saved
    max_elements: int = DEFAULT_MAX_ELEMENTS  # random elements one entry may build

    def check(self, dump: Dump, name: EntryName) -> EntryResult:
        result = EntryResult(name.prefix, name.direction, SKIP, dump=str(dump.path))
        result.reason = dump.fault(name) or ""  # nested too deep, written twice: never read further
        if result.reason:
            return result
        # Only asked for when saving: the default path holds no values past the comparison.
        options = replace(self.run, keep=self.error_data is not None)
        try:
            with element_budget(self.max_elements):
                run = for_framework(dump.framework).run(dump, name, options)
        except (Unsupported, BenchmarkFailed, InputError) as exc:
            result.reason = str(exc)
            return result
        self.judge(result, name, run)
        if run.kept is not None and self.error_data is not None and result.status != PASS:
            try:
                result.notes.append(f"error data in {error_data.save(self.error_data, dump, result, run.kept, self)}")
            except Exception as exc:  # noqa: BLE001 - saving is an extra: the verdict stands without it
                result.notes.append(f"error data not saved: {type(exc).__name__}: {exc}")
        return result

    def judge(self, result: EntryResult, name: EntryName, run: Run) -> None:
        result.notes = list(run.notes)
        if run.tested_error:
            result.status = ERROR
            result.reason = f"the tested run on {self.run.tested_on} raised {run.tested_error}"
            return
        result.outputs = [self.output(name, pair, run) for pair in run.pairs]
        explain_bench(result)
        result.status = worst_status(output.status for output in result.outputs)
        if not result.outputs:
            result.reason = "no output to compare"

    def output(self, name: EntryName, pair: OutputPair, run: Run) -> OutputResult:
        if pair.skip or pair.tested is None or pair.bench is None:
            return OutputResult(pair.index, SKIP, pair.bench_dtype, pair.tested_dtype, pair.shape, reasons=[pair.skip])
        comparison = Comparison(
            pair.tested,
            pair.bench,
            pair.tested_dtype,
            name=f"{name.full}.output.{pair.index}",
            extra=pair.extra,
        )
        metrics, verdict = compare(comparison, self.standard)
        return OutputResult(
            pair.index,
            verdict.status,
            pair.bench_dtype,
            pair.tested_dtype,
            pair.shape,
            metrics.cosine,
            metrics.max_abs_err,
            metrics.max_rel_err,
            verdict.reasons,
            verdict.floor,
            pair.note,
            severity=verdict.severity,
            nonfinite=verdict.nonfinite,
        )
