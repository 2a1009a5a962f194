"""msprobe 26.2's metrics of one output, as its PyTorch acc_check computes them, against this
plugin's float64 bench: the 17 metric cells of its 23-column details CSV.

Read from mindstudio-probe 26.2.0 (shared/spec/msprobe-26-interop.md, sections 2 and 3):
`compare/compare.py` (`_compare_torch_tensor`, `_compare_float_tensor`), `compare/algorithm.py`
and `precision_standard/` (the benchmark, ULP, absolute-threshold and binary standards, and
`standard_config.py`'s per-dtype constants). Which cells are filled is msprobe's too:

- a floating output gets the cells of the one standard msprobe's registry picks for it (an fp8
  output: ULP; an fp8 input: absolute threshold; fp16/bf16/fp32 otherwise: benchmark; float64
  none), then Cosine (blank for one element or all zeros), MaxAbsErr (blank once Cosine fails),
  and the 双百/双千/双万 ratios only as far as acc_check's own rule goes before it decides (none
  once MaxAbsErr < 0.001; 双百 for fp16/bf16 only; 双万 not for fp16/bf16);
- an integer or bool output: the binary mismatch rate (MaxAbsErr alone for msprobe's
  quantisation APIs); a Python bool/int/float: mismatch rate 0 where equal, else blank;
- nothing for shapes or dtype kinds that differ, an empty output, complex outputs or integer
  dtypes msprobe cannot compare (int16, uint16, uint32, uint64).

The bench is this plugin's float64 one; the dtype parameters are the tested dtype's, and the eps
of a relative error is that of the bench msprobe would have run (fp16: float32's, bf16: 2^-8,
fp32 and fp64: float64's), so a ratio reads as msprobe's would on the same values. The other
numbers msprobe holds in a narrower dtype (the bf16 device output in float32, the bench cast to
the device's dtype for the finite mask and EB) are held so here too; the arithmetic is float64.

Numpy only, no framework; block by block, so an output costs a few blocks of memory at most.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..results import MsprobeMetrics

BENCHMARK, ULP, ABSOLUTE_THRESHOLD, BINARY = "benchmark", "ulp", "absolute_threshold", "binary"
BLOCK = 1 << 16  # elements a block: its float64 temporaries stay in the cache (reductions.py's choice)
# compare.py: acc_check's thresholds (CompareConst).
COSINE_THRESHOLD = 0.99
MAX_ABS_ERR_THRESHOLD = 0.001
HUNDREDTH, THOUSANDTH, TEN_THOUSANDTH = 0.01, 0.001, 0.0001
ULP_FP32_THRESHOLD, ULP_OTHER_THRESHOLD = 32, 1
# config.yaml's quantization_api_list: integer outputs passing within 1, judged by MaxAbsErr.
QUANTIZATION_APIS = frozenset({"npu_rms_norm_dynamic_quant", "npu_dynamic_quant", "npu_quant_lightning_indexer"})
FP8 = frozenset({"torch.float8_e4m3fn", "torch.float8_e5m2"})
# BENCHMARK_COMPARE_SUPPORT_LIST: the dtypes whose outputs get a standard's cells.
RULED = frozenset({"torch.float16", "torch.bfloat16", "torch.float32"}) | FP8
# check_dtype_comparable's integer and bool dtypes: any other (int16, uint16, ...) is an error to it.
COMPARABLE_INTEGERS = frozenset(
    {np.dtype(np.bool_), np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64)}
)
BUILTIN = frozenset({"bool", "int", "float"})  # a Python scalar output (frameworks' to_array names it so)
_FLOAT64_EPS = float(np.finfo(np.float64).eps)
_BF16_MAX = 3.3895313892515355e38  # CompareConst.BFLOAT16_MAX


@dataclass(frozen=True)
class DtypeParams:
    """One tested dtype's constants (standard_config.py, compare_utils.py) and how msprobe holds it."""

    held_as: type  # the numpy dtype msprobe holds the device output in (bf16: float32)
    eps: float  # of the bench msprobe runs: the denominator's term of a relative error
    single: bool  # msprobe's errors are float32 (its fp16/bf16 bench is float32)
    small_value: float  # |bench| at most this: the small-value region
    benchmark_atol: float  # the benchmark standard's small-value atol
    threshold_atol: float  # the absolute-threshold standard's
    rtol: float
    clip: float  # the largest finite value of held_as, where the inf/nan ratio clips


_DEFAULTS = {"small_value": 2**-20, "benchmark_atol": 2**-30, "threshold_atol": 2**-30, "rtol": 2**-20}
PARAMS = {
    "torch.float16": DtypeParams(
        np.float16, float(np.finfo(np.float32).eps), True, 2**-10, 1e-16, 2**-16, 2**-10, 65504.0
    ),
    "torch.bfloat16": DtypeParams(np.float32, 2**-8, True, 2**-10, 1e-16, 1e-16, 2**-8, _BF16_MAX),
    "torch.float32": DtypeParams(np.float32, _FLOAT64_EPS, False, clip=float(np.finfo(np.float32).max), **_DEFAULTS),
    "torch.float64": DtypeParams(np.float64, _FLOAT64_EPS, False, clip=float(np.finfo(np.float64).max), **_DEFAULTS),
}
# msprobe cannot hold an fp8 output in numpy itself (torch's .numpy() of one raises): its ULP
# standard takes both sides as float64, and so does this; the eps is its fp32 bench's.
for _name in FP8:
    PARAMS[_name] = DtypeParams(
        np.float64, float(np.finfo(np.float32).eps), False, clip=float(np.finfo(np.float64).max), **_DEFAULTS
    )


def msprobe_metrics(
    tested: np.ndarray, bench: np.ndarray, dtype: str, *, api: str = "", fp8_input: bool = False
) -> MsprobeMetrics:
    """msprobe's metric cells of one output: `tested` the output's values (float64 holding the
    tested dtype's, or its integers), `bench` this plugin's benchmark, `dtype` the tested dtype
    in torch's spelling ("torch.bfloat16"; "int" for a Python int). `api` is the API's own name
    ("npu_dynamic_quant"), `fp8_input` whether the call had an fp8 input tensor."""
    if dtype in BUILTIN:
        return _builtin(tested, bench)
    t, b = np.asarray(tested), np.asarray(bench)
    if t.shape != b.shape or t.size == 0 or t.dtype.kind == "c" or b.dtype.kind == "c":
        return MsprobeMetrics()
    if t.dtype.kind in "biu" or b.dtype.kind in "biu":
        if t.dtype.kind == "f" or b.dtype.kind == "f" or t.dtype not in COMPARABLE_INTEGERS:
            return MsprobeMetrics()  # a kind differing: an error with blank cells
        return _integer(t, b, api)
    params = PARAMS.get(dtype)
    return MsprobeMetrics() if params is None else _floating(t, b, dtype, params, fp8_input)


def _builtin(tested: np.ndarray, bench: np.ndarray) -> MsprobeMetrics:
    """_compare_builtin_type: equal Python values get a mismatch rate of 0, others nothing."""
    equal = np.asarray(tested).item() == np.asarray(bench).item()
    return MsprobeMetrics(error_rate=0, rule=BINARY) if equal else MsprobeMetrics()


def _integer(t: np.ndarray, b: np.ndarray, api: str) -> MsprobeMetrics:
    if api in QUANTIZATION_APIS:  # _compare_quantization_tensor: |device - bench| in their own dtypes
        error = t != b if t.dtype.kind == "b" else np.abs(t - b)
        return MsprobeMetrics(max_abs_err=int(np.max(error)))
    return MsprobeMetrics(error_rate=float(np.count_nonzero(t != b) / t.size), rule=BINARY)


@dataclass
class _Sums:
    """What the blocks add up to."""

    n: int = 0
    max_abs: float = 0.0
    nan_err: bool = False  # a NaN |t - b|: np.max's NaN
    dot: float = 0.0
    t_norm: float = 0.0
    b_norm: float = 0.0
    below: dict[float, int] = field(default_factory=lambda: {HUNDREDTH: 0, THOUSANDTH: 0, TEN_THOUSANDTH: 0})
    # benchmark
    small: int = 0
    small_err: int = 0
    masked: int = 0  # inf/nan or small: left out of RMSE
    squares: float = 0.0
    larger: int = 0
    smaller: int = 0
    rel_max: float = -1.0
    rel_sum: float = 0.0
    rel_count: int = 0
    # absolute threshold
    inf_nan: int = 0
    inf_nan_err: int = 0
    normal: int = 0
    normal_err: int = 0
    small_abs_err: int = 0
    # ULP
    ulp_max: float = -np.inf
    ulp_nan: bool = False
    ulp_sum: float = 0.0
    ulp_over: int = 0


def _blocks(t: np.ndarray, b: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    flat_t, flat_b = t.reshape(-1), b.reshape(-1)
    for start in range(0, flat_t.size, BLOCK):
        yield (
            flat_t[start : start + BLOCK].astype(np.float64, copy=False),
            flat_b[start : start + BLOCK].astype(np.float64, copy=False),
        )


def _max_abs(array: np.ndarray) -> float:
    """np.max(np.abs(array)), NaN where any element is, block by block."""
    flat = array.reshape(-1)
    found = 0.0
    for start in range(0, flat.size, BLOCK):
        biggest = float(np.max(np.abs(flat[start : start + BLOCK])))
        if np.isnan(biggest):
            return biggest
        found = max(found, biggest)
    return found


def _floating(t: np.ndarray, b: np.ndarray, dtype: str, params: DtypeParams, fp8_input: bool) -> MsprobeMetrics:
    rule = "" if dtype not in RULED else ULP if dtype in FP8 else ABSOLUTE_THRESHOLD if fp8_input else BENCHMARK
    t_max, b_max = _max_abs(t), _max_abs(b)
    cosine_wanted = t.size > 1 and not (t_max <= _FLOAT64_EPS or b_max <= _FLOAT64_EPS)
    sums = _Sums(n=t.size)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for tb, bb in _blocks(t, b):
            _add_block(sums, tb, bb, params, rule, (t_max, b_max) if cosine_wanted else None)
    cells: dict[str, float | int | None] = {}
    single = ["max_abs_err"] if params.single else []
    if rule == BENCHMARK:
        cells.update(_benchmark_cells(sums))
        single += [
            name for name in ("max_rel_error", "mean_rel_error") if params.single and isinstance(cells[name], float)
        ]
    elif rule == ABSOLUTE_THRESHOLD:
        cells.update(_threshold_cells(sums))
    elif rule == ULP:
        cells["max_ulp_error"] = float("nan") if sums.ulp_nan else sums.ulp_max
        cells["mean_ulp_error"] = sums.ulp_sum / sums.n
        cells["ulp_error_proportion"] = sums.ulp_over / sums.n
    cosine, passed = _cosine(sums, t.size, t_max, b_max)
    cells["cosine_sim"] = cosine
    cells.update(_ratio_cells(sums, dtype) if passed else {})
    return MsprobeMetrics(**cells, rule=rule, single=tuple(s for s in single if cells.get(s) is not None))


def _add_block(
    sums: _Sums, t: np.ndarray, b: np.ndarray, params: DtypeParams, rule: str, maxima: tuple[float, float] | None
) -> None:
    abs_err = np.abs(t - b)
    biggest = np.max(abs_err)
    if np.isnan(biggest):
        sums.nan_err = True
    else:
        sums.max_abs = max(sums.max_abs, float(biggest))
    abs_b = np.abs(b)
    abs_b_eps = abs_b + params.eps
    relative = abs_err / abs_b_eps
    for threshold in sums.below:
        sums.below[threshold] += int(np.count_nonzero(relative < threshold))
    if maxima is not None:
        t_scaled, b_scaled = t / maxima[0], b / maxima[1]
        sums.dot += float(np.dot(t_scaled, b_scaled))
        sums.t_norm += float(np.dot(t_scaled, t_scaled))
        sums.b_norm += float(np.dot(b_scaled, b_scaled))
    if not rule:
        return
    if rule == ULP:
        _add_ulp(sums, t, b)
        return
    b_held = b.astype(params.held_as).astype(np.float64)  # get_finite_and_infinite_mask's bench.astype(device dtype)
    finite = np.isfinite(t) & np.isfinite(b_held)
    small = (abs_b <= params.small_value) & finite
    if rule == BENCHMARK:
        _add_benchmark(sums, t, b_held, abs_err, relative, finite, small, params)
    else:
        _add_threshold(sums, t, b_held, abs_err, abs_b_eps, relative, finite, small, params)


def _add_benchmark(
    sums: _Sums,
    t: np.ndarray,
    b_held: np.ndarray,
    abs_err: np.ndarray,
    relative: np.ndarray,
    finite: np.ndarray,
    small: np.ndarray,
    params: DtypeParams,
) -> None:
    sums.small += int(np.count_nonzero(small))
    sums.small_err += int(np.count_nonzero(small & (abs_err > params.benchmark_atol)))
    left_out = ~finite | small
    sums.masked += int(np.count_nonzero(left_out))
    kept = abs_err[~left_out]
    sums.squares += float(np.dot(kept, kept))
    diff = t - b_held  # get_error_balance: the device minus the bench in the device's dtype (signs alike)
    sums.larger += int(np.count_nonzero(diff > 0))
    sums.smaller += int(np.count_nonzero(diff < 0))
    rel = relative[~left_out]
    if rel.size:
        sums.rel_max = max(sums.rel_max, float(np.max(rel)))
        sums.rel_sum += float(np.sum(rel))
        sums.rel_count += rel.size


def _add_threshold(
    sums: _Sums,
    t: np.ndarray,
    b_held: np.ndarray,
    abs_err: np.ndarray,
    abs_b_eps: np.ndarray,
    relative: np.ndarray,
    finite: np.ndarray,
    small: np.ndarray,
    params: DtypeParams,
) -> None:
    """check_inf_nan_value, check_norm_value, check_small_value."""
    inf_nan = ~finite
    # In the device's dtype, as msprobe subtracts: fp16's 65504 - (-65504) is inf there.
    golden: np.ndarray = np.clip(b_held.astype(params.held_as), -params.clip, params.clip)
    difference = np.clip(t.astype(params.held_as), -params.clip, params.clip) - golden
    clipped = np.abs(difference).astype(np.float64) / abs_b_eps
    passed = (clipped <= params.rtol) | (np.isnan(t) & np.isnan(golden))
    sums.inf_nan += int(np.count_nonzero(inf_nan))
    sums.inf_nan_err += int(np.count_nonzero(inf_nan & ~passed))
    normal = finite & ~small
    sums.normal += int(np.count_nonzero(normal))
    sums.normal_err += int(np.count_nonzero(normal & (relative > params.rtol)))
    sums.small += int(np.count_nonzero(small))
    sums.small_abs_err += int(np.count_nonzero(small & (abs_err > params.threshold_atol)))


def _add_ulp(sums: _Sums, t: np.ndarray, b: np.ndarray) -> None:
    """calc_ulp_err_fp8: the mantissa width tapers with the bench's exponent (HiFloat8's, for any
    fp8), and the error keeps its sign (its max, mean and share over 1 are of the signed errors)."""
    ex = np.log2(np.abs(b) + 2.0**-1000)
    ex[ex < -22] = -22
    exponent = np.floor(ex)
    magnitude = np.abs(exponent)
    width = np.zeros_like(b)
    width[magnitude <= 15] = 1
    width[magnitude <= 7] = 2
    width[magnitude <= 3] = 3
    ulp = (t - b) * 2 ** (-exponent + width)
    signed_bench = ex * np.where(b >= 0, 1, -1)
    signed_tested = np.log2(np.abs(t) + 2.0**-1000) * np.where(t >= 0, 1, -1)
    ulp[width == 0] = (signed_tested - signed_bench)[width == 0]  # signed: get_ulp_err takes no abs for fp8
    biggest = np.max(ulp)
    if np.isnan(biggest):
        sums.ulp_nan = True
    else:
        sums.ulp_max = max(sums.ulp_max, float(biggest))
    sums.ulp_sum += float(np.sum(ulp))
    sums.ulp_over += int(np.count_nonzero(ulp > ULP_OTHER_THRESHOLD))


def _ratio(count: int, total: int) -> float | int:
    """msprobe's `0 if total == 0 else count / total`: its int 0 over an empty set."""
    return 0 if total == 0 else count / total


def _benchmark_cells(sums: _Sums) -> dict[str, float | int | None]:
    n = sums.n
    mse = sums.squares / n * (n / (n - sums.masked + 0.0001) + 0.0001)
    return {
        "small_value_err_ratio": _ratio(sums.small_err, sums.small),
        "rmse": float(np.sqrt(mse)),
        "eb": abs(sums.larger - sums.smaller) / n,
        "max_rel_error": sums.rel_max if sums.rel_max >= 0 else 0,
        "mean_rel_error": sums.rel_sum / sums.rel_count if sums.rel_count else 0,
    }


def _threshold_cells(sums: _Sums) -> dict[str, float | int | None]:
    return {
        "inf_nan_error_ratio": _ratio(sums.inf_nan_err, sums.inf_nan),
        "rel_err_ratio": _ratio(sums.normal_err, sums.normal),
        "abs_err_ratio": _ratio(sums.small_abs_err, sums.small),
    }


def _cosine(sums: _Sums, size: int, t_max: float, b_max: float) -> tuple[float | None, bool]:
    """cosine_sim: blank for one element or both sides all zero (a pass), one side all zero (a
    failure); a NaN passes; else the cosine of the max-normalised vectors, passing above 0.99."""
    if size == 1:
        return None, True
    zero_t, zero_b = t_max <= _FLOAT64_EPS, b_max <= _FLOAT64_EPS
    if zero_t or zero_b:
        return None, zero_t and zero_b
    cosine = sums.dot / (np.sqrt(sums.t_norm) * np.sqrt(sums.b_norm))
    if np.isnan(cosine):
        return float("nan"), True
    cosine = float(np.clip(cosine, -1, 1))
    return cosine, cosine > COSINE_THRESHOLD


def _ratio_cells(sums: _Sums, dtype: str) -> dict[str, float | int | None]:
    """_compare_float_tensor from MaxAbsErr on: each ratio only as far as its rule goes."""
    max_abs = float("nan") if sums.nan_err else sums.max_abs
    cells: dict[str, float | int | None] = {"max_abs_err": max_abs}
    if max_abs < MAX_ABS_ERR_THRESHOLD:
        return cells
    low = dtype in ("torch.float16", "torch.bfloat16")
    ratio = {threshold: count / sums.n for threshold, count in sums.below.items()}
    if low:
        cells["rel_err_hundredth"] = ratio[HUNDREDTH]
        if not ratio[HUNDREDTH] > 1 - HUNDREDTH:
            return cells
    cells["rel_err_thousandth"] = ratio[THOUSANDTH]
    if low:
        return cells
    cells["rel_err_ten_thousandth"] = ratio[TEN_THOUSANDTH]
    return cells
