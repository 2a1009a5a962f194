"""Check one dump entry: run both sides through its framework, judge every output.

The one place that ties frameworks to compare.py; it knows no pytest.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from . import error_data
from .compare import ERROR, PASS, SKIP, BasicStandard, Comparison, compare, worst_status
from .dump import Dump, EntryName
from .frameworks import for_framework
from .inputs import AUTO, DEFAULT_MAX_ELEMENTS, InputError, element_budget
from .outcome import BenchmarkFailed, EntryResult, OutputPair, OutputRow, Run, Unsupported


@dataclass
class Settings:
    device: str = "cpu"  # "cpu", "cuda:0", "npu:3" or "recorded"
    mode: str = AUTO
    seed: int = 1234
    standard: object = BasicStandard()
    error_data: Optional[Path] = None  # where the tensors of entries that are not pass are saved
    max_elements: int = DEFAULT_MAX_ELEMENTS  # random elements one entry may build


def check_entry(dump: Dump, name: EntryName, settings: Settings) -> EntryResult:
    result = EntryResult(name.prefix, name.direction, SKIP, dump=str(dump.path))
    result.message = dump.fault(name) or ""  # nested too deep, written twice: never read further
    if result.message:
        return result
    try:
        framework = for_framework(dump.framework)
        # Only asked for when saving: the default path holds no values past the comparison.
        keep = {"keep": True} if settings.error_data else {}
        with element_budget(settings.max_elements):
            run = framework.run(dump, name, settings.device, settings.mode, settings.seed, **keep)
    except (Unsupported, BenchmarkFailed, InputError) as exc:
        result.message = str(exc)
        return result
    judge(result, name, run, settings)
    if run.kept is not None and result.status != PASS:
        try:
            note = f"error data in {error_data.save(settings.error_data, dump, result, run.kept, settings)}"
        except Exception as exc:  # noqa: BLE001 - saving is an extra: the verdict stands without it
            note = f"error data not saved: {type(exc).__name__}: {exc}"
        result.message = join([result.message, note])
    return result


def judge(result: EntryResult, name: EntryName, run: Run, settings: Settings) -> None:
    if run.tested_error:
        result.status = ERROR
        result.message = join([f"the tested run on {settings.device} raised {run.tested_error}", *run.notes])
        return
    result.outputs = [output_row(name, pair, run, settings.standard) for pair in run.pairs]
    result.status = worst_status([row.status for row in result.outputs])
    result.message = join([*failures(result.outputs), *run.notes])
    if not result.outputs:
        result.message = join(["no output to compare", result.message])


def output_row(name: EntryName, pair: OutputPair, run: Run, standard) -> OutputRow:
    row_name = f"{name.full}.output.{pair.index}"
    if pair.skip:
        return OutputRow(row_name, pair.bench_dtype, pair.tested_dtype, pair.shape, None, None, None, SKIP, pair.skip)
    comparison = Comparison(pair.tested, pair.bench, pair.tested_dtype, name=row_name, input_scale=run.input_scale)
    metrics, verdict = compare(comparison, standard)
    at_floor = verdict.status == ERROR and standard.name == "basic" and rounding_floor().within_budget(
        comparison, metrics)
    message = verdict.message
    if at_floor:
        message += f"; within the {short_dtype(pair.tested_dtype)} rounding budget (--msprobe-standard dtype passes it)"
    return OutputRow(
        row_name, pair.bench_dtype, pair.tested_dtype, pair.shape,
        metrics.cosine, metrics.max_abs_err, metrics.max_rel_err, verdict.status, message, at_floor,
    )


@functools.lru_cache(maxsize=None)
def rounding_floor():
    """The dtype standard, asked under the basic one whether a failure is rounding alone."""
    from .dtype_standard import DtypeStandard

    return DtypeStandard()


def short_dtype(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}.get(
        dtype.rsplit(".", 1)[-1], dtype)


def failures(rows: List[OutputRow]) -> List[str]:
    """`output.0: <why>` for every output that did not pass, failures first."""
    ranked = sorted((row for row in rows if row.status != "pass" and row.message), key=lambda r: r.status == SKIP)
    return [f"output.{row.name.rsplit('.', 1)[-1]}: {row.message}" for row in ranked]


def join(parts: List[str]) -> str:
    return "; ".join(part for part in parts if part)
