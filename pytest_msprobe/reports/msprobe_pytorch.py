"""The rows of msprobe 26.2's PyTorch layout (layouts.MSPROBE_PYTORCH), as its acc_check writes them.

Cells: a blank as a single space, a number as msprobe's types write it (a Python or float64 number
with its 14 decimals, `"{:.14f}"`; one msprobe holds in float32 as numpy's str(); an int as its
digits), a shape as a Python tuple's text, a Python scalar's dtype as `<class 'int'>`. Status and
Message are this plugin's verdict; a text cell is neutralised as in the default layout (cells.py),
a number never is (a negative Cosine stays a number).

The rows, as acc_check lays them out (shared/spec/msprobe-26-interop.md, section 1):

- a direction without any output compared (a SKIP, a tested run that raised) is one row
  `<entry>.output.0` with blank cells but its Status and Message (its record_skip_info);
- a backward's outputs are numbered by the positional tensor arguments of the call, every one
  counted (its extract_tensors_grad): one that takes no gradient (an integer tensor, a float one
  that needs none) is a SKIP row of blanks, as msprobe's `Bench output is None`. The gradients of
  tensors passed by keyword, which msprobe never compares, follow them;
- the result row: `API name, Forward Test Success, Backward Test Success, Message`, a direction the
  dump has not (or a Message with nothing to say) a blank.

No pytest, no framework.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..inputs.rebuild import is_tensor_spec
from ..results import METRIC_FIELDS, SKIP, EntryResult, MsprobeMetrics, OutputResult, Status
from .cells import MAX_CELL, text_cell, untext
from .layouts import MSPROBE_PYTORCH
from .messages import api_message, details_message, entry_message

BLANK = MSPROBE_PYTORCH.blank
PRECISION = 14  # msprobe's config.yaml `precision`
# What a Python scalar output's dtype is to msprobe: str(type(value)).
BUILTIN_TYPES = {"int": "<class 'int'>", "float": "<class 'float'>", "bool": "<class 'bool'>"}
# The Message of a positional tensor's row that has no gradient to compare (msprobe: `Bench output is None`).
NO_GRADIENT = "no gradient: an integer tensor, or one the step did not differentiate"


def number_cell(value: float | int | None, single: bool = False) -> str:
    """One metric as msprobe writes it."""
    if value is None:
        return BLANK
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if single:
        return str(np.float32(value))
    return f"{float(value):.{PRECISION}f}"


def metric_cells(metrics: MsprobeMetrics | None) -> list[str]:
    """The 17 metric cells of a details row, 余弦相似度 to ULP误差大于阈值占比."""
    if metrics is None:
        return [BLANK] * len(METRIC_FIELDS)
    return [number_cell(getattr(metrics, name), name in metrics.single) for name in METRIC_FIELDS]


def shape_cell(shape: list[int] | None, dtype: str = "") -> str:
    """`(2, 8)`, `(5,)`, `()`: a Python tuple's text; blank where msprobe has none (a Python scalar)."""
    return BLANK if shape is None or dtype in BUILTIN_TYPES else str(tuple(shape))


def dtype_cell(dtype: str) -> str:
    return BLANK if not dtype else text_cell(BUILTIN_TYPES.get(dtype, dtype))


def text_or_blank(value: str, limit: int = 0, where: str = "") -> str:
    return text_cell(value, limit, where) if value else BLANK


def details_rows(result: EntryResult) -> Iterator[list[Any]]:
    """The details rows of one direction of an API."""
    if not result.outputs:
        yield [text_cell(f"{result.entry}.output.0"), *[BLANK] * 20, result.status.value, _message(result)]
        return
    for number, output in numbered(result):
        name = text_cell(f"{result.entry}.output.{number}")
        if output is None:
            yield [name, *[BLANK] * 20, SKIP.value, text_cell(NO_GRADIENT)]
            continue
        yield [
            name,
            dtype_cell(output.bench_dtype),
            dtype_cell(output.tested_dtype),
            shape_cell(output.shape, output.tested_dtype),
            *metric_cells(output.msprobe),
            output.status.value,
            text_or_blank(details_message(result, output), MAX_CELL, " cut"),
        ]


def numbered(result: EntryResult) -> list[tuple[int, OutputResult | None]]:
    """(msprobe's output number, the output or None for a SKIP row of its own) in msprobe's order."""
    numbering = result.msprobe_outputs
    if numbering is None:
        return [(output.index, output) for output in result.outputs]
    by_index: dict[int, list[OutputResult]] = {}
    for output in result.outputs:
        by_index.setdefault(output.index, []).append(output)  # both sides of an entry judged twice
    rows: list[tuple[int, OutputResult | None]] = []
    for number, index in enumerate(numbering):
        found = by_index.pop(index, []) if index is not None else []
        rows += [(number, output) for output in found] or [(number, None)]
    rest = sorted(by_index)  # passed by keyword: after every positional one
    rows += [(len(numbering) + n, output) for n, index in enumerate(rest) for output in by_index[index]]
    return rows


def msprobe_numbers(numbering: list[int | None] | None, indexes: Iterable[int]) -> dict[int, int]:
    """msprobe's output number of each of this plugin's output indexes, as numbered() lays them out:
    a positional argument's gradient at its place, one passed by keyword after all of them."""
    indexes = sorted(set(indexes))
    if numbering is None:
        return {index: index for index in indexes}
    placed = {index: number for number, index in enumerate(numbering) if index is not None}
    rest = [index for index in indexes if index not in placed]
    return {**{i: placed[i] for i in indexes if i in placed}, **{i: len(numbering) + n for n, i in enumerate(rest)}}


def _message(result: EntryResult) -> str:
    return text_or_blank(entry_message(result), MAX_CELL, " cut")


def output_of_cells(index: int, status: Status, row: list[str]) -> OutputResult:
    """An output as a details row of this layout tells it (its Message aside): the dtypes, the
    shape, Cosine and MaxAbsErr (msprobe's, blank where it left them so), and every metric."""
    text = [cell.strip() for cell in row]
    metrics = metrics_of_cells(text[4:21])
    return OutputResult(
        index,
        status,
        untext(text[1]),
        untext(text[2]),
        _shape(text[3]),
        _float(metrics.cosine_sim),
        _float(metrics.max_abs_err),
        msprobe=metrics if any(getattr(metrics, name) is not None for name in METRIC_FIELDS) else None,
    )


def metrics_of_cells(cells: list[str]) -> MsprobeMetrics:
    """The 17 metric cells read back: a blank as None, digits as an int, a number written with 14
    decimals as a float, any other (numpy's str() of a float32) as a float msprobe held in float32."""
    values: dict[str, Any] = {}
    single = []
    for name, cell in zip(METRIC_FIELDS, cells):
        cell = cell.strip()
        if not cell:
            values[name] = None
        elif cell.lstrip("-").isdigit():
            values[name] = int(cell)
        else:
            try:
                values[name] = float(cell)
            except ValueError:
                values[name] = None
                continue
            if "." in cell and len(cell.rpartition(".")[2]) != PRECISION:
                single.append(name)
    return MsprobeMetrics(**values, single=tuple(single))


def _float(value: float | int | None) -> float | None:
    return None if value is None else float(value)


def _shape(cell: str) -> list[int] | None:
    """`(2, 8)` -> [2, 8]; None for anything else (a blank)."""
    inner = cell.strip()
    if not (inner.startswith("(") and inner.endswith(")")):
        return None
    parts = [part.strip() for part in inner[1:-1].split(",") if part.strip()]
    return [int(part) for part in parts] if all(part.isdigit() for part in parts) else None


def result_row(api: str, forward: EntryResult | None, backward: EntryResult | None) -> list[str]:
    return [
        text_cell(api),
        forward.status.value if forward else BLANK,
        backward.status.value if backward else BLANK,
        text_or_blank(api_message(forward, backward), MAX_CELL, " cut: every output's message is in its details row"),
    ]


def backward_numbering(forward_inputs: dict[str, Any]) -> list[int | None]:
    """For each positional tensor argument of a call (nested lists flattened, as msprobe's
    extract_tensors_grad walks them), the index of this plugin's gradient output it is (the
    floating tensors of the call counted, positional ones first), or None where it is no floating
    tensor. `forward_inputs` is the forward entry of dump.json: its input_args and input_kwargs."""
    numbering: list[int | None] = []
    floating = 0
    for spec in _leaves(forward_inputs.get("input_args", [])):
        if not is_tensor_spec(spec):
            continue
        if _is_floating(spec):
            numbering.append(floating)
            floating += 1
        else:
            numbering.append(None)
    return numbering


def has_fp8_input(forward_inputs: dict[str, Any]) -> bool:
    """Whether a call had an fp8 tensor among its inputs (msprobe's is_fp8: float8_e4m3fn,
    float8_e5m2, HiFloat8): its floating outputs are judged by the absolute threshold then."""
    specs = _leaves([forward_inputs.get("input_args", []), *dict(forward_inputs.get("input_kwargs") or {}).values()])
    return any(is_tensor_spec(spec) and _is_fp8(spec) for spec in specs)


def _is_fp8(spec: dict[str, Any]) -> bool:
    """is_dtype_fp8's two dtypes (the fnuz ones are not among them), or a HiFloat8 tensor."""
    dtype, kind = str(spec.get("dtype", "")), str(spec.get("type", ""))
    return dtype in ("torch.float8_e4m3fn", "torch.float8_e5m2") or "HiFloat8" in f"{dtype} {kind}"


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _is_floating(spec: dict[str, Any]) -> bool:
    """torch's is_floating_point(): float16/32/64, bfloat16, the float8s (not complex)."""
    dtype = str(spec.get("dtype", "")).rsplit(".", 1)[-1]
    return "float" in dtype.lower() or dtype in ("half", "double")
