"""msprobe 26.2.0's `api_precision_compare` rules: one output of an NPU run judged against the same
output of a GPU run, from the two runs' msprobe metrics (the cells of their details rows, no tensors).

Read from mindstudio-probe 26.2.0 (shared/spec/msprobe-26-interop.md, section 4):
`compare/api_precision_compare.py` and `precision_standard/` (`standard_register.py` picks the rule,
`benchmark_compare.py`, `ulp_compare.py`, `standard_config.py` the thresholds and denominators).

- ratio(X) = |X_npu| / max(|X_gpu|, the dtype's minimum denominator); an inf or NaN on either side
  makes it NaN, which passes where both sides are the same inf or both NaN and fails otherwise;
- the benchmark rule (fp16, bf16, fp32 outputs): the ratios of the small-value error share, RMSE and
  the max and mean relative error, each over its threshold of the API's level (L0, L1, L2) is an
  error; EB's ratio is written, not counted;
- an fp8 output: the ULP rule (its share of elements over the ULP threshold under 0.001, NPU alone);
  an fp8 input: the absolute threshold (its three failure ratios all 0, NPU alone); any other dtype
  but float64 and complex: binary (mismatch rate 0, NPU alone). float64, complex, an empty output
  or a row without a dtype: SKIP.

Where msprobe's code hides a fault, this does the right thing (docs/compare.md lists each):

- a metric the rule needs left blank reads 0.0 there, so an output whose own check failed before
  its metrics (shapes or dtypes that differ) passes: here it is an `error` where the NPU's own
  check says error (a dropout's rows, blank on both sides: where the GPU's does not), else SKIP
  naming the column;
- the benchmark ratios leave inf and NaN elements out, so an NPU output with NaN where the GPU's has
  none passes: here the NaN cosine or non-finite MaxAbsErr of the NPU's row against a finite one in
  the GPU's is an `error`.

Numbers only; no CSV, no framework. reports/compare.py reads the rows and writes the files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Union

from ..results import ERROR, PASS, SKIP, MsprobeMetrics, Status

# compare_utils.py and const.py (CompareConst)
UNSUPPORTED = frozenset({"torch.float64", "torch.complex64", "torch.complex128"})
UNSUPPORTED_MESSAGE = "This data type does not support benchmark compare."
FLOATS = frozenset({"torch.float16", "torch.bfloat16", "torch.float32", "torch.float64"})
FP8 = frozenset(
    {
        "torch.float8_e4m3fn",
        "torch.float8_e5m2",
        "torch_npu.HiFloat8Tensor",
        "<class 'torch_npu.utils.hif8_tensor.HiFloat8Tensor'>",
    }
)
# BINARY_COMPARE_UNSUPPORT_LIST less what is taken above: an output of this dtype gets no rule.
NO_BINARY = frozenset({"torch.float8_e4m3fn", "torch.float8_e5m2"}) | FLOATS | UNSUPPORTED
ZERO_SHAPE = "(0,)"
THOUSANDTH_PASS = 0.999
FP8_ULP_PROPORTION = 0.001  # StandardConfig._fp16_ulp_err_proportion, which the fp8 rule uses

BENCHMARK = "标杆比对法"
ULP = "ULP误差比对法"
BINARY = "二进制一致法"
ABSOLUTE_THRESHOLD = "绝对阈值法"

# StandardConfig: the API levels and the ratio thresholds of each (small-value and EB: 2 at all).
L2_APIS = frozenset(
    {
        "addmm",
        "npu_cross_entropy_loss",
        "npu_cross_entropy_loss_backward",
        "GELU",
        "layer_norm",
        "matmul",
        "mm",
        "index",
        "one_hot",
        "sum",
        "npu_rms_norm",
        "npu_rms_norm_backward",
        "nonzero",
    }
)
L1_APIS = frozenset({"embedding", "npu_fusion_attention_grad", "npu_fusion_attention", "scatter_", "scatter_add_"})
THRESHOLDS = {
    "L0": {"rmse": 2.0, "max_rel_err": 10.0, "mean_rel_err": 2.0},
    "L1": {"rmse": 1.5, "max_rel_err": 5.0, "mean_rel_err": 1.5},
    "L2": {"rmse": 1.2, "max_rel_err": 2.0, "mean_rel_err": 1.2},
}
SMALL_VALUE_THRESHOLD = EB_THRESHOLD = 2.0
# StandardConfig._minmum_err: a GPU value under it divides as it
MINIMUM_DENOMINATOR = {"torch.float16": 2**-11, "torch.bfloat16": 2**-8, "torch.float32": 2**-14}
DEFAULT_MINIMUM_DENOMINATOR = 2**-14
# CompareMessage: msprobe's note on a failed API
API_NOTES = {
    "topk": "在npu上，topk的入参sorted=False时不生效，会返回有序tensor，而cpu上会返回无序tensor。 "
    "如果topk精度不达标，请检查是否是该原因导致的。"
}


@dataclass(frozen=True)
class Row:
    """One run's details row of an output: what the rules read."""

    dtype: str  # DEVICE Dtype, torch's spelling; "" where blank
    shape: str  # as msprobe writes it: "(2, 8)"
    status: str  # the run's own verdict on the output (acc_check's or this plugin's)
    message: str
    metrics: MsprobeMetrics


@dataclass(frozen=True)
class Reference:
    """A reference run's rows by output name (msprobe's numbering: `<api>.backward.output.<i>` counts
    every positional tensor argument), and the files they were read from."""

    rows: Mapping[str, Row]
    source: str
    missing: str = ""  # why it has no rows at all (a run of several dumps: no folder for this dump)


# The columns a rule names (api_precision_compare's ApiPrecisionCompareColumn, as its files spell them).
COLUMN = {
    "small_value_err_ratio": "小值域错误占比",
    "rmse": "均方根误差",
    "max_rel_error": "相对误差最大值",
    "mean_rel_error": "相对误差平均值",
    "eb": "误差均衡性",
    "error_rate": "二进制一致错误率",
    "inf_nan_error_ratio": "inf/nan错误率",
    "rel_err_ratio": "相对误差错误率",
    "abs_err_ratio": "绝对误差错误率",
    "ulp_error_proportion": "ULP误差大于阈值占比",
    "cosine_sim": "余弦相似度",
    "max_abs_err": "最大绝对误差",
}

Cell = Union[float, str, None]  # None: a blank cell


@dataclass(frozen=True)
class Failure:
    """A ratio over its threshold, or a rule's NPU-only value out of bounds, for the result's Message."""

    what: str  # the column's name, or the rule
    value: float | None
    bound: str  # "> 2.0 (L0)", "!= 0", or why
    threshold: float | None = None  # the ratio's threshold, where the rule has one: how far off it is

    def text(self) -> str:
        """`均方根误差比值 3.21 > 2 (L0)`, `二进制一致错误率 0.5 != 0`."""
        if self.value is None:
            return f"{self.what} ({self.bound})" if self.bound else self.what
        return f"{self.what} {self.value:.4g} {self.bound}"


@dataclass
class Judged:
    """One output's row of api_precision_compare_details: the cells of its 28 columns but the name
    (ApiPrecisionOutputColumn's names; None a blank cell), its status, rule and message."""

    status: Status
    algorithm: str = ""
    message: str = ""
    cells: dict[str, Cell] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)


@dataclass(frozen=True)
class OutputName:
    """`Torch.matmul.0.forward.output.1`: its API call, direction and output number."""

    api: str  # Torch.matmul.0
    direction: str  # forward, backward
    index: int

    @property
    def api_name(self) -> str:
        """The API's own name, as msprobe's levels and notes name it: `matmul`, `linalg.norm`."""
        return ".".join(self.api.split(".")[1:-1]) or self.api


_OUTPUT_NAME = re.compile(r"^(?P<api>.+)\.(?P<direction>forward|backward)\.output\.(?P<index>\d+)$")


def output_name(name: str) -> OutputName | None:
    """The parts of an output's row name; None for a name that is none (`<api>.<direction>.output.<i>`)."""
    match = _OUTPUT_NAME.match(name)
    return OutputName(match["api"], match["direction"], int(match["index"])) if match else None


def api_level(api_name: str) -> str:
    """StandardConfig.get_api_level: L2 and L1 by name (`matmul`, `embedding`), L0 the rest."""
    return "L2" if api_name in L2_APIS else "L1" if api_name in L1_APIS else "L0"


def minimum_denominator(dtype: str) -> float:
    return MINIMUM_DENOMINATOR.get(dtype, DEFAULT_MINIMUM_DENOMINATOR)


def ratio(npu: float, gpu: float, dtype: str) -> tuple[float, bool, str]:
    """calc_ratio and check_inf_or_nan: |npu| / max(|gpu|, minimum), whether the two sides agree on
    inf and NaN (a NaN ratio where either is), and msprobe's note on a non-finite pair."""
    if math.isinf(npu) or math.isinf(gpu) or math.isnan(npu) or math.isnan(gpu):
        if math.isinf(npu) and math.isinf(gpu):
            same = npu == gpu
        else:
            same = not (math.isinf(npu) or math.isinf(gpu)) and math.isnan(npu) and math.isnan(gpu)
        return math.nan, same, "同为同号inf或nan" if same else "inf或nan不一致"
    return abs(npu) / max(abs(gpu), minimum_denominator(dtype)), True, ""


def rule_of(npu: Row) -> str:
    """standard_register.py: fp8 output ULP, fp8 input (its 相对误差错误率 filled) absolute threshold,
    a floating output benchmark, any other dtype binary. (Its per-API lists, 双千 for conv1d and
    conv2d among them, are reached by no dtype that gets this far, in msprobe or here.)"""
    if npu.dtype in FP8:
        return ULP
    if npu.metrics.rel_err_ratio is not None:
        return ABSOLUTE_THRESHOLD
    if npu.dtype in FLOATS:
        return BENCHMARK
    if npu.dtype not in NO_BINARY:
        return BINARY
    return BENCHMARK


def skip_reason(npu: Row) -> str | None:
    """Why msprobe skips an output whatever the GPU's row says: None where it judges it."""
    if not npu.dtype:
        return npu.message or "no DEVICE Dtype: the run compared nothing here"
    if npu.dtype in UNSUPPORTED:
        return UNSUPPORTED_MESSAGE
    if npu.shape == ZERO_SHAPE:
        return npu.message or "an empty output"
    return None


@dataclass(frozen=True)
class Sides:
    """How messages name the two runs: msprobe's NPU and GPU, or this run and its reference."""

    npu: str = "NPU"
    gpu: str = "GPU"


def judge(api_name: str, npu: Row, gpu: Row, sides: Sides = Sides()) -> Judged:
    """One output: api_name the API's own name (`matmul`), npu and gpu the two runs' rows of it."""
    reason = skip_reason(npu)
    if reason is not None:
        return Judged(SKIP, message=reason)
    algorithm = rule_of(npu)
    rule = RULES[algorithm]
    blank = _blank(npu, gpu if algorithm == BENCHMARK else None, NEEDS[algorithm], sides)
    if blank is not None:
        return blank
    judged = rule(api_name, npu, gpu)
    judged.algorithm = algorithm
    if algorithm == BENCHMARK:
        _non_finite(npu, gpu, judged, sides)
    return judged


def _blank(npu: Row, gpu: Row | None, needed: tuple[str, ...], sides: Sides) -> Judged | None:
    """A metric the rule needs, blank in a row: msprobe reads it as 0.0 (and passes the output) or
    raises (and skips it). Here: an error where the NPU's own check failed before its metrics, or
    where both rows are blank (a dropout that draws a mask: its rows have no metrics) and the NPU's
    own check failed but the GPU's did not; else SKIP naming the column."""
    npu_blank = [COLUMN[name] for name in needed if getattr(npu.metrics, name) is None]
    gpu_blank = [COLUMN[name] for name in needed if getattr(gpu.metrics, name) is None] if gpu else []
    if not npu_blank and not gpu_blank:
        return None
    if npu_blank and npu.status == ERROR and (not gpu_blank or (gpu is not None and gpu.status != ERROR)):
        if gpu_blank:
            why = f"the {sides.npu} run's own check failed where the {sides.gpu} run's did not"
        else:
            why = f"the {sides.npu} run's own check failed before its metrics"
        message = f"ERROR: {why} ({', '.join(npu_blank)} blank){_said(npu)}"
        return Judged(ERROR, message=message, failures=[Failure(why, None, npu.message)])
    parts = []
    if npu_blank:
        parts.append(f"the {sides.npu} row has no {', '.join(npu_blank)}{_said(npu)}")
    if gpu and gpu_blank:
        parts.append(f"the {sides.gpu} row has no {', '.join(gpu_blank)}{_said(gpu)}")
    return Judged(SKIP, message="; ".join(parts))


def _said(row: Row) -> str:
    said = f"{row.status}: {row.message}" if row.message else row.status
    return f" (its check: {said})" if said else ""


def _non_finite(npu: Row, gpu: Row, judged: Judged, sides: Sides) -> None:
    """msprobe's benchmark ratios leave out every element that is inf or NaN on either side, so an
    NPU output with NaN where the GPU's has none passes them: its NaN cosine (any inf or NaN makes
    it so) or non-finite MaxAbsErr, against finite ones in the GPU's row, fails it here."""
    npu_cells = _non_finite_cells(npu.metrics)
    if not npu_cells or _non_finite_cells(gpu.metrics):
        return
    what = ", ".join(f"{COLUMN[name]} {value}" for name, value in npu_cells)
    judged.status = ERROR
    judged.message += f"ERROR: the {sides.npu} output has inf or NaN where the {sides.gpu}'s has none ({what})\n"
    judged.failures.append(Failure(f"inf or NaN in the {sides.npu} output only", None, what))


def _non_finite_cells(metrics: MsprobeMetrics) -> list[tuple[str, float]]:
    cells = [(name, getattr(metrics, name)) for name in ("cosine_sim", "max_abs_err")]
    return [(name, value) for name, value in cells if value is not None and not math.isfinite(value)]


def _benchmark(api_name: str, npu: Row, gpu: Row) -> Judged:
    """BenchmarkPrecisionCompare: four ratios against the API level's thresholds, EB's written."""
    level = api_level(api_name)
    judged = Judged(PASS)
    metrics = (
        ("small_value_err_ratio", "small_value_err", SMALL_VALUE_THRESHOLD, "小值域错误比值"),
        ("rmse", "rmse", THRESHOLDS[level]["rmse"], "均方根误差比值"),
        ("max_rel_error", "max_rel_err", THRESHOLDS[level]["max_rel_err"], "相对误差最大值比值"),
        ("mean_rel_error", "mean_rel_err", THRESHOLDS[level]["mean_rel_err"], "相对误差平均值比值"),
        ("eb", "eb", EB_THRESHOLD, "误差均衡性比值"),
    )
    notes, errors = "", ""
    for name, cell, threshold, title in metrics:
        value, same, note = ratio(_value(npu, name), _value(gpu, name), npu.dtype)
        notes += f"{COLUMN[name]}{note}\n" if note else ""
        failed = not same or (math.isfinite(value) and value > threshold)
        judged.cells[f"{cell}_ratio"] = value
        judged.cells[f"{cell}_status"] = ERROR if failed else PASS
        if failed and name != "eb":  # EB's status is written, not counted
            judged.status = ERROR
            errors += f"ERROR: {title}超过阈值\n"
            bound = f"> {threshold:g} ({level})" if same else "inf or NaN on one side only"
            judged.failures.append(
                Failure(title, value if same else _value(npu, name), bound, threshold if same else None)
            )
    judged.message = notes + errors
    return judged


def _value(row: Row, name: str) -> float:
    value = getattr(row.metrics, name)
    return 0.0 if value is None else float(value)


def _ulp(api_name: str, npu: Row, gpu: Row) -> Judged:
    """UlpPrecisionCompare for an fp8 output: the NPU's share over the ULP threshold under 0.001."""
    share = _value(npu, "ulp_error_proportion")
    passed = share < FP8_ULP_PROPORTION
    judged = Judged(PASS if passed else ERROR, cells={"ulp_err_proportion": share, "ulp_err_status": PASS})
    if not passed:
        judged.cells["ulp_err_status"] = ERROR
        judged.message = "ERROR: ULP误差不满足标准\n"
        judged.failures.append(
            Failure(COLUMN["ulp_error_proportion"], share, f">= {FP8_ULP_PROPORTION:g}", FP8_ULP_PROPORTION)
        )
    return judged


def _absolute_threshold(api_name: str, npu: Row, gpu: Row) -> Judged:
    """record_absolute_threshold_result: each failure ratio 0, NPU alone."""
    judged = Judged(PASS)
    for name, cell in (
        ("inf_nan_error_ratio", "inf_nan_error_ratio"),
        ("rel_err_ratio", "rel_err_ratio"),
        ("abs_err_ratio", "abs_err_ratio"),
    ):
        value = _value(npu, name)
        failed = value != 0
        judged.cells[cell] = value
        judged.cells[f"{cell}_status"] = ERROR if failed else PASS
        if failed:
            judged.status = ERROR
            judged.message += f"ERROR: {COLUMN[name]}超过阈值"
            judged.failures.append(Failure(COLUMN[name], value, "!= 0"))
    return judged


def _binary(api_name: str, npu: Row, gpu: Row) -> Judged:
    """record_binary_consistency_result: the NPU's mismatch rate 0."""
    value = _value(npu, "error_rate")
    failed = value != 0
    judged = Judged(
        ERROR if failed else PASS, cells={"error_rate": value, "error_rate_status": ERROR if failed else PASS}
    )
    if failed:
        judged.message = "ERROR: 二进制一致错误率超过阈值\n"
        judged.failures.append(Failure(COLUMN["error_rate"], value, "!= 0"))
    return judged


@dataclass(frozen=True)
class Closer:
    """Which of two runs' outputs is nearer the float64 bench both ran (both runs this plugin's)."""

    side: str  # "NPU", "GPU", or "" where they are as near
    metric: str  # the metric that tells them apart: RMSE, MaxAbsErr, mismatch rate
    npu: float
    gpu: float


# RMSE first (msprobe's, over the elements outside the small-value region); where it does not tell
# the runs apart, the largest error, then the share of elements that differ (integers).
CLOSENESS = (("rmse", "RMSE"), ("max_abs_err", "MaxAbsErr"), ("error_rate", "mismatch rate"))


def closer_to_float64(npu: MsprobeMetrics, gpu: MsprobeMetrics) -> Closer | None:
    """The run whose error against the float64 bench is smaller, by the first metric of CLOSENESS
    that both rows hold, finite, and that differs; as near where every one they hold is equal;
    None where they hold none."""
    equal = None
    for name, metric in CLOSENESS:
        ours, theirs = getattr(npu, name), getattr(gpu, name)
        if ours is None or theirs is None or not (math.isfinite(ours) and math.isfinite(theirs)):
            continue
        if ours != theirs:
            return Closer("NPU" if ours < theirs else "GPU", metric, ours, theirs)
        equal = equal or Closer("", metric, ours, theirs)
    return equal


RULES: dict[str, Callable[[str, Row, Row], Judged]] = {
    BENCHMARK: _benchmark,
    ULP: _ulp,
    ABSOLUTE_THRESHOLD: _absolute_threshold,
    BINARY: _binary,
}
# The cells each rule counts; the GPU's too for the benchmark's ratios (the others are the NPU's alone).
NEEDS = {
    BENCHMARK: ("small_value_err_ratio", "rmse", "max_rel_error", "mean_rel_error"),  # EB's is not counted
    ULP: ("ulp_error_proportion",),
    ABSOLUTE_THRESHOLD: ("inf_nan_error_ratio", "rel_err_ratio", "abs_err_ratio"),
    BINARY: ("error_rate",),
}
