"""Details CSVs of msprobe's PyTorch layout, written by hand, and the NPU/GPU pairs the comparison's
tests feed both to msprobe's own `api_precision_compare` and to `python -m pytest_msprobe.compare`.

Each case is one output: its NPU row, its GPU row (None: the GPU run lacks it), the status this
plugin's comparison gives it, and the one msprobe 26.2.0 gives it where they differ on purpose (a
quirk of msprobe's that hides a fault, docs/compare.md); msprobe's tool gives every other case the
same status. The cases cover each rule on both sides of its thresholds.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_msprobe.reports.layouts import MSPROBE_PYTORCH

# The metric cells by msprobe's CompareColumn names, in the layout's order (columns 5 to 21).
METRICS = (
    "cosine_sim",
    "max_abs_err",
    "rel_err_hundredth",
    "rel_err_thousandth",
    "rel_err_ten_thousandth",
    "error_rate",
    "eb",
    "rmse",
    "small_value_err_ratio",
    "max_rel_error",
    "mean_rel_error",
    "inf_nan_error_ratio",
    "rel_err_ratio",
    "abs_err_ratio",
    "max_ulp_error",
    "mean_ulp_error",
    "ulp_error_proportion",
)
# A GPU row's benchmark metrics; an NPU row scales them.
BASE = {
    "cosine_sim": 0.99999,
    "max_abs_err": 0.002,
    "eb": 0.1,
    "rmse": 1e-3,
    "small_value_err_ratio": 0.1,
    "max_rel_error": 1e-2,
    "mean_rel_error": 1e-3,
}
NAN, INF = float("nan"), float("inf")


@dataclass
class Side:
    dtype: str = "torch.float32"
    shape: str = "(2, 8)"
    status: str = "pass"
    message: str = ""
    metrics: dict[str, object] = field(default_factory=dict)

    def cells(self, name: str) -> list[str]:
        values = [_cell(self.metrics.get(metric)) for metric in METRICS]
        bench = " " if self.dtype.strip() == "" else "torch.float64"
        return [name, bench, self.dtype, self.shape, *values, self.status, self.message]


def _cell(value: object) -> str:
    if value is None:
        return " "
    return repr(value) if isinstance(value, float) else str(value)


def bench(**scale: float) -> Side:
    """A benchmark-rule row: BASE with each named metric multiplied."""
    return Side(metrics={name: value * scale.get(name, 1.0) for name, value in BASE.items()})


def with_metrics(side: Side, **metrics: object) -> Side:
    return Side(side.dtype, side.shape, side.status, side.message, {**side.metrics, **metrics})


@dataclass
class Case:
    name: str
    npu: Side
    gpu: Side | None
    ours: str
    msprobe: str | None = None  # where msprobe's status differs on purpose; "dropped": it writes no row

    @property
    def msprobe_status(self) -> str:
        return self.ours if self.msprobe is None else self.msprobe


def _ratio(name: str, npu: Side, ours: str, gpu: Side | None = None, msprobe: str | None = None) -> Case:
    return Case(name, npu, bench() if gpu is None else gpu, ours, msprobe)


def _fp(dtype: str, **metrics: object) -> Side:
    return Side(dtype=dtype, metrics=metrics)


CASES: list[Case] = [
    # one API's rows apart from each other (its backward last): msprobe writes the API twice
    _ratio("Functional.linear.0.forward.output.0", bench(rmse=2.5), "error"),
    # the benchmark ratios against the L0 / L1 / L2 thresholds (RMSE 2 / 1.5 / 1.2, max rel 10 / 5 / 2)
    _ratio("Functional.relu.0.forward.output.0", bench(rmse=1.9), "pass"),
    _ratio("Functional.relu.1.forward.output.0", bench(rmse=2.1), "error"),
    _ratio("Torch.matmul.0.forward.output.0", bench(rmse=1.1), "pass"),
    _ratio("Torch.matmul.1.forward.output.0", bench(rmse=1.3), "error"),
    _ratio("Functional.embedding.0.forward.output.0", bench(max_rel_error=4.0), "pass"),
    _ratio("Functional.embedding.1.forward.output.0", bench(max_rel_error=6.0), "error"),
    _ratio("Functional.gelu.0.forward.output.0", bench(max_rel_error=9.0), "pass"),
    _ratio("Functional.gelu.1.forward.output.0", bench(mean_rel_error=2.5), "error"),
    _ratio("Functional.layer_norm.0.forward.output.0", bench(mean_rel_error=1.1), "pass"),
    _ratio("Functional.layer_norm.0.backward.output.0", bench(max_rel_error=2.5), "error"),
    _ratio("Functional.layer_norm.0.backward.output.1", bench(), "pass"),
    _ratio("Functional.silu.0.forward.output.0", bench(small_value_err_ratio=2.5), "error"),
    # a GPU value under the dtype's minimum denominator (fp32 2^-14) divides as that minimum
    _ratio(
        "Functional.silu.1.forward.output.0",
        bench(small_value_err_ratio=1e-4),
        "pass",
        gpu=bench(small_value_err_ratio=0.0),
    ),
    _ratio(
        "Functional.silu.2.forward.output.0",
        bench(small_value_err_ratio=2e-3),
        "error",
        gpu=bench(small_value_err_ratio=0.0),
    ),
    # EB's ratio is written, not counted
    _ratio("Functional.tanh.0.forward.output.0", bench(eb=9.0), "pass"),
    # inf and NaN in the metrics: the same on both sides passes, else an error
    _ratio(
        "Torch.exp.0.forward.output.0", with_metrics(bench(), rmse=INF), "pass", gpu=with_metrics(bench(), rmse=INF)
    ),
    _ratio("Torch.exp.1.forward.output.0", with_metrics(bench(), rmse=INF), "error"),
    _ratio(
        "Torch.exp.2.forward.output.0",
        with_metrics(bench(), max_rel_error=NAN),
        "pass",
        gpu=with_metrics(bench(), max_rel_error=NAN),
    ),
    _ratio("Torch.exp.3.forward.output.0", with_metrics(bench(), max_rel_error=NAN), "error"),
    _ratio(
        "Torch.exp.4.forward.output.0", with_metrics(bench(), rmse=INF), "error", gpu=with_metrics(bench(), rmse=-INF)
    ),
    # fp16 and bf16: their own minimum denominators (2^-11, 2^-8)
    Case(
        "Tensor.add.0.forward.output.0",
        _fp("torch.float16", **{**BASE, "rmse": 9e-4}),
        _fp("torch.float16", **{**BASE, "rmse": 1e-5}),
        "pass",
    ),
    Case(
        "Tensor.add.1.forward.output.0",
        _fp("torch.float16", **{**BASE, "rmse": 1.1e-3}),
        _fp("torch.float16", **{**BASE, "rmse": 1e-5}),
        "error",
    ),
    Case(
        "Tensor.mul.0.forward.output.0",
        _fp("torch.bfloat16", **{**BASE, "rmse": 7e-3}),
        _fp("torch.bfloat16", **{**BASE, "rmse": 1e-5}),
        "pass",
    ),
    Case(
        "Tensor.mul.1.forward.output.0",
        _fp("torch.bfloat16", **{**BASE, "rmse": 8e-3}),
        _fp("torch.bfloat16", **{**BASE, "rmse": 1e-5}),
        "error",
    ),
    # an fp8 output: ULP, the NPU's share over the threshold under 0.001
    Case(
        "Tensor.to.0.forward.output.0",
        _fp("torch.float8_e4m3fn", ulp_error_proportion=5e-4, max_ulp_error=1.0),
        _fp("torch.float8_e4m3fn", ulp_error_proportion=0.0),
        "pass",
    ),
    Case(
        "Tensor.to.1.forward.output.0",
        _fp("torch.float8_e4m3fn", ulp_error_proportion=2e-3),
        _fp("torch.float8_e4m3fn", ulp_error_proportion=0.0),
        "error",
    ),
    # an fp8 input (the absolute-threshold cells filled): its three failure ratios all 0
    Case(
        "Torch.matmul.2.forward.output.0",
        _fp("torch.float32", inf_nan_error_ratio=0, rel_err_ratio=0.0, abs_err_ratio=0),
        _fp("torch.float32", inf_nan_error_ratio=0, rel_err_ratio=0.0, abs_err_ratio=0),
        "pass",
    ),
    Case(
        "Torch.matmul.3.forward.output.0",
        _fp("torch.float32", inf_nan_error_ratio=0, rel_err_ratio=0.25, abs_err_ratio=0),
        _fp("torch.float32", inf_nan_error_ratio=0, rel_err_ratio=0.0, abs_err_ratio=0),
        "error",
    ),
    # integers and bools: binary, the NPU's mismatch rate 0
    Case(
        "Torch.argmax.0.forward.output.0",
        _fp("torch.int64", error_rate=0.0),
        _fp("torch.int64", error_rate=0.0),
        "pass",
    ),
    Case(
        "Torch.argmax.1.forward.output.0",
        _fp("torch.int64", error_rate=0.5),
        _fp("torch.int64", error_rate=0.0),
        "error",
    ),
    Case(
        "Torch.isnan.0.forward.output.0",
        _fp("torch.bool", error_rate=0.125),
        _fp("torch.bool", error_rate=0.0),
        "error",
    ),
    # SKIPs: no dtype (a backward output without a gradient), an empty output
    Case("Functional.relu.2.forward.output.0", bench(), bench(), "pass"),
    Case(
        "Functional.relu.2.backward.output.0",
        Side(dtype=" ", shape=" ", status="SKIP", message="Bench output is None, skip this test."),
        Side(dtype=" "),
        "SKIP",
    ),
    Case(
        "Torch.cat.0.forward.output.0",
        Side(shape="(0,)", status="SKIP", message="There is not bench calculation result."),
        Side(shape="(0,)"),
        "SKIP",
    ),
    # -- where msprobe's code hides a fault, and this comparison does not (docs/compare.md) --
    # a GPU row missing: msprobe drops the NPU's row without a word
    Case("Functional.softmax.0.forward.output.0", bench(rmse=5.0), None, "SKIP", msprobe="dropped"),
    # an output whose own check failed before its metrics (shapes differ): msprobe reads 0.0, passes it
    Case(
        "Functional.conv2d.0.forward.output.0",
        Side(status="error", message="The shape of bench(2, 4) and npu(2, 8) not equal."),
        bench(),
        "error",
        msprobe="pass",
    ),
    # a dropout that draws a mask: both rows without metrics (two masks), the NPU's share rule failed and
    # the GPU's did not: msprobe reads 0.0 on both sides, passes it
    Case(
        "Functional.dropout.0.forward.output.0",
        Side(status="error", message="dropout p=0.1 draws over 512 elements: 31.0% dropped on the tested side"),
        Side(message="dropout p=0.1 draws over 512 elements: 9.0% dropped on the tested side"),
        "error",
        msprobe="pass",
    ),
    # ... and one whose share rule failed on both sides: nothing to tell them apart by (msprobe: pass)
    Case(
        "Functional.dropout.1.forward.output.0",
        Side(status="error", message="dropout p=0.1 draws over 512 elements: 31.0% dropped on the tested side"),
        Side(status="error", message="dropout p=0.1 draws over 512 elements: 30.0% dropped on the tested side"),
        "SKIP",
        msprobe="pass",
    ),
    # a Python int output that differs: its mismatch rate blank; msprobe raises on it and skips
    Case(
        "Tensor.item.0.forward.output.0",
        Side(dtype="<class 'int'>", shape="()", status="error"),
        Side(dtype="<class 'int'>", shape="()", metrics={"error_rate": 0}),
        "error",
        msprobe="SKIP",
    ),
    # NaN in the NPU output only: the benchmark ratios leave NaN elements out; the cosine says it
    Case(
        "Torch.log.0.forward.output.0",
        with_metrics(bench(), cosine_sim=NAN, max_abs_err=NAN),
        bench(),
        "error",
        msprobe="pass",
    ),
]
CASES += [
    # the last output of an API float64: msprobe skips the whole API, its other outputs' errors too
    Case("Torch.max.0.forward.output.0", bench(rmse=3.0), bench(), "error"),
    Case("Torch.max.0.forward.output.1", Side(dtype="torch.float64"), Side(dtype="torch.float64"), "SKIP"),
    Case("Functional.linear.0.backward.output.0", bench(), bench(), "pass"),
]
# API -> its (forward, backward) in this plugin's result CSV, and msprobe's rows of it where they differ
# on purpose (none: it writes no row of the API).
API_RESULTS = {
    "Functional.linear.0": (("error", "pass"), [("error", " "), (" ", "pass")]),
    "Functional.layer_norm.0": (("pass", "error"), None),
    "Functional.relu.2": (("pass", "SKIP"), None),
    "Functional.softmax.0": (("SKIP", " "), []),
    "Functional.conv2d.0": (("error", " "), [("pass", " ")]),
    "Tensor.item.0": (("error", " "), []),  # msprobe: a row of the output's name, SKIP SKIP
    "Torch.log.0": (("error", " "), [("pass", " ")]),
    "Functional.dropout.0": (("error", " "), [("pass", " ")]),
    "Functional.dropout.1": (("SKIP", " "), [("pass", " ")]),
    "Torch.max.0": (("error", " "), [("SKIP", "SKIP")]),
}


def write_details(path: Path, rows: Sequence[list[str]]) -> Path:
    """A details CSV of msprobe's PyTorch layout, as acc_check writes it (UTF-8 with a BOM)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8-sig") as handle:
        writer = csv.writer(handle)
        writer.writerow(MSPROBE_PYTORCH.details_columns)
        writer.writerows(rows)
    return path


def write_pair(folder: Path, cases: Sequence[Case], stamp: str = "20260101000000") -> tuple[Path, Path]:
    """The NPU's and the GPU's details CSVs of these cases, in folder/npu and folder/gpu."""
    npu = [case.npu.cells(case.name) for case in cases]
    gpu = [case.gpu.cells(case.name) for case in cases if case.gpu is not None]
    name = f"accuracy_checking_details_{stamp}.csv"
    return write_details(folder / "npu" / name, npu), write_details(folder / "gpu" / name, gpu)


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return list(csv.DictReader(handle))
