"""The dtype standard: correct roundings pass, faults fail, per-API tolerances override.

Exact results are built in float64 and rounded to the tested dtype here, with
numpy alone, so the tests need neither torch nor a dump.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pytest_msprobe.compare import Comparison, compare
from pytest_msprobe.results import ERROR, PASS, WARNING
from pytest_msprobe.standards.basic import BasicStandard
from pytest_msprobe.standards.dtype import BFLOAT16, FLOAT16, FLOAT32, DtypeStandard
from pytest_msprobe.standards.tolerances import Tolerances

# (explicit mantissa bits, exponent of the smallest normal): the test's own oracle.
FORMATS = {"torch.bfloat16": (7, -126), "torch.float16": (10, -14), "torch.float32": (23, -126),
           "torch.float64": (52, -1022)}
LOW_PRECISION = ["torch.bfloat16", "torch.float16", "torch.float32"]


def round_to(x, dtype: str) -> np.ndarray:
    """Round float64 values to the nearest value of `dtype` (ties to even), exactly."""
    mantissa_bits, min_exponent = FORMATS[dtype]
    x = np.asarray(x, dtype=np.float64)
    _, exponent = np.frexp(x)
    spacing = np.ldexp(1.0, np.maximum(exponent - 1, min_exponent) - mantissa_bits)
    return np.rint(x / spacing) * spacing


def verdict(tested, bench, dtype, input_scale=0.0, name="Torch.matmul.0.forward.output.0", standard=None):
    c = Comparison(np.asarray(tested, np.float64), np.asarray(bench, np.float64), dtype, name, input_scale)
    return compare(c, standard or DtypeStandard())[1]


dtypes = st.sampled_from(LOW_PRECISION)
# Any finite values fp16 can hold, near zero and subnormal ones included.
any_values = arrays(np.float64, st.integers(1, 64), elements=st.floats(-3e4, 3e4, allow_nan=False))
# Outputs a fault can be seen in: the largest element is a normal number of every dtype.
moderate_elements = st.floats(-32, 32, allow_nan=False, allow_subnormal=False)
moderate_values = arrays(np.float64, st.integers(1, 64), elements=moderate_elements).filter(
    lambda a: np.abs(a).max() >= 1e-3)
# Outputs where 1.0 is more than 16 bf16 ULP of the output scale (the error limit).
small_values = arrays(np.float64, st.integers(1, 64), elements=st.floats(-4, 4, allow_nan=False, allow_subnormal=False))


def realistic(seed: int, shape, log_scale: float) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape) * 10.0 ** log_scale


seeds = st.integers(0, 2**32 - 1)
log_scales = st.floats(-3, 1.5)


# --- correct results pass ------------------------------------------------------------------


@given(dtype=st.sampled_from(list(FORMATS)), bench=any_values)
def test_an_exact_result_rounded_to_the_dtype_passes(dtype, bench):
    assert verdict(round_to(bench, dtype), bench, dtype).status == PASS


@given(dtype=dtypes, seed=seeds, n=st.integers(16, 4096), log_scale=log_scales)
def test_a_mean_of_normalised_values_passes_on_its_input_scale(dtype, seed, n, log_scale):
    x = realistic(seed, n, log_scale)
    x = round_to((x - x.mean()) / x.std(), dtype)  # in fp32 the mean is near 1e-8: rounding noise
    tested = round_to(float(x.astype(np.float32).mean(dtype=np.float32)), dtype)  # fp32 accumulation
    bench = x.mean()
    input_scale = float(np.abs(x).max())
    assert verdict(tested, bench, dtype, input_scale).status == PASS


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_without_the_input_scale_the_same_mean_fails(seed):
    x = realistic(seed, 4096, 0.0)
    x = ((x - x.mean()) / x.std()).astype(np.float32)
    tested, bench = float(x.mean(dtype=np.float32)), x.astype(np.float64).mean()
    assert verdict(tested, bench, "torch.float32", input_scale=0.0).status == ERROR  # off by ~1e8 ULP of itself
    assert verdict(tested, bench, "torch.float32", input_scale=float(np.abs(x).max())).status == PASS


@given(dtype=dtypes, seed=seeds, k=st.integers(8, 4096), log_scale=st.floats(-2, 1))
def test_a_float32_matmul_with_outputs_near_zero_passes(dtype, seed, k, log_scale):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((4, k)) * 10.0 ** log_scale).astype(np.float32)
    w = rng.standard_normal((k, 8)).astype(np.float32)
    w[:, 0] -= x[0] @ w[:, 0] * x[0] / (x[0] @ x[0])  # output [0, 0] cancels to about zero
    # The least accurate kernel: float32 products summed one after the other.
    products = x[:, :, None] * w[None, :, :]
    tested = round_to(np.cumsum(products, axis=1, dtype=np.float32)[:, -1, :], dtype)
    bench = x.astype(np.float64) @ w.astype(np.float64)
    input_scale = float(max(np.abs(x).max(), np.abs(w).max()))
    assert verdict(tested, bench, dtype, input_scale).status == PASS
    assert verdict(tested, bench, dtype, input_scale=0.0).status == PASS  # the output scale alone suffices


@given(dtype=dtypes, seed=seeds, n=st.integers(2, 512), log_scale=log_scales)
def test_intermediate_roundings_at_the_output_magnitude_pass(dtype, seed, n, log_scale):
    # t = round(round(b + c) - round(c)): elements near zero end far from b in their own ULP.
    rng = np.random.default_rng(seed)
    bench = rng.uniform(-1, 1, n) * 10.0 ** log_scale
    c = rng.uniform(-1, 1, n) * np.abs(bench).max()
    tested = round_to(round_to(bench + c, dtype) - round_to(c, dtype), dtype)
    assert verdict(tested, bench, dtype).status == PASS


# --- faults fail ---------------------------------------------------------------------------

# Inputs up to 8x the output scale, as in softmax and layer_norm.
input_ratios = st.one_of(st.just(0.0), st.floats(0.1, 8))


@given(dtype=dtypes, bench=moderate_values, ratio=input_ratios)
def test_an_output_scaled_by_1_03_fails(dtype, bench, ratio):
    correct = round_to(bench, dtype)
    input_scale = ratio * np.abs(bench).max()
    assert verdict(round_to(correct * 1.03, dtype), bench, dtype, input_scale).status == ERROR


@given(dtype=dtypes, bench=moderate_values, ratio=input_ratios, data=st.data())
def test_three_percent_noise_fails(dtype, bench, ratio, data):
    signs = data.draw(arrays(np.float64, bench.shape, elements=st.sampled_from([-1.0, 1.0])))
    noisy = round_to(round_to(bench, dtype) * (1 + 0.03 * signs), dtype)
    assert verdict(noisy, bench, dtype, ratio * np.abs(bench).max()).status == ERROR


@given(dtype=dtypes, bench=small_values, data=st.data())
def test_one_element_off_by_one_fails(dtype, bench, data):
    tested = round_to(bench, dtype)
    i = data.draw(st.integers(0, bench.size - 1))
    tested[i] = round_to(tested[i] + 1.0, dtype)
    assert verdict(tested, bench, dtype, np.abs(bench).max()).status == ERROR


@given(dtype=dtypes, seed=seeds, n=st.integers(256, 1024), log_scale=log_scales)
def test_a_mantissa_cut_to_three_bits_fails(dtype, seed, n, log_scale):
    bench = realistic(seed, n, log_scale)
    mantissa, exponent = np.frexp(round_to(bench, dtype))
    cut = np.ldexp(np.trunc(mantissa * 16) / 16, exponent)
    assert verdict(cut, bench, dtype, np.abs(bench).max()).status == ERROR


@given(dtype=dtypes, seed=seeds, rows=st.integers(2, 8), columns=st.integers(8, 64), log_scale=log_scales)
def test_swapped_rows_fail(dtype, seed, rows, columns, log_scale):
    bench = realistic(seed, (rows, columns), log_scale)
    tested = round_to(bench, dtype)
    tested[[0, 1]] = tested[[1, 0]]
    assert verdict(tested, bench, dtype, np.abs(bench).max()).status == ERROR


@given(dtype=dtypes, bench=moderate_values, data=st.data())
def test_a_nan_where_the_bench_has_none_fails(dtype, bench, data):
    tested = round_to(bench, dtype)
    tested[data.draw(st.integers(0, bench.size - 1))] = np.nan
    result = verdict(tested, bench, dtype)
    assert result.status == ERROR and "NaN" in result.message


def test_nan_and_inf_at_the_same_places_are_left_out_of_the_budget():
    bench = np.array([1.0, np.nan, -np.inf, 0.3])
    assert verdict(round_to(bench, "torch.bfloat16"), bench, "torch.bfloat16").status == PASS


# --- properties of the verdict -------------------------------------------------------------


@given(dtype=dtypes, bench=any_values, ulps=st.floats(0, 40), ratio=input_ratios, data=st.data())
def test_the_verdict_does_not_depend_on_the_order_of_elements(dtype, bench, ulps, ratio, data):
    mantissa_bits = FORMATS[dtype][0]
    noise = data.draw(arrays(np.float64, bench.shape, elements=st.floats(-1, 1)))
    tested = round_to(bench * (1 + ulps * 2.0**-mantissa_bits * noise), dtype)
    order = np.random.default_rng(data.draw(seeds)).permutation(bench.size)
    input_scale = ratio * np.abs(bench).max()
    assert (verdict(tested, bench, dtype, input_scale).status
            == verdict(tested[order], bench[order], dtype, input_scale).status)


@given(x=st.floats(0, 1e30, exclude_min=True))
def test_the_ulp_is_numpys_spacing_for_float32_and_float16(x):
    for fmt, numpy_type in ((FLOAT32, np.float32), (FLOAT16, np.float16)):
        with np.errstate(over="ignore"):
            value = numpy_type(x)
        if np.isfinite(value) and value > 0:
            assert fmt.ulp(float(value)) == float(np.spacing(value))


def test_ulps_of_bfloat16_and_below_the_normal_range():
    assert BFLOAT16.ulp(1.0) == 2.0**-7
    assert BFLOAT16.ulp(-3.0) == 2.0**-6
    assert FLOAT16.ulp(0.0) == FLOAT16.ulp(1e-7) == 2.0**-24  # subnormal spacing


def bf16_output(ulps_off: float = 0.0, scale: float = 1.0):
    """64 correct bf16 elements up to 1.5, the last one moved by `ulps_off` ULP of the output scale."""
    bench = np.linspace(0.5, 1.5, 64) * scale
    tested = round_to(bench, "torch.bfloat16")
    tested[-1] = bench[-1] + ulps_off * BFLOAT16.ulp(bench[-1])
    return tested, bench


def test_between_the_budget_and_the_error_limit_is_a_warning():
    tested, bench = bf16_output(10)  # max error 10 ULP, RMS error 1.2 ULP
    warned = verdict(tested, bench, "torch.bfloat16")
    assert warned.status == WARNING
    assert warned.message.startswith("bf16 budget: max error 0.0781 = 10 ULP of the output scale 1.5, above 8 ULP,"
                                     " within the error limit 16 ULP, at [63]")
    strict = verdict(tested, bench, "torch.bfloat16", standard=DtypeStandard(warning=False))
    assert strict.status == ERROR and "= 10 ULP of the output scale 1.5 > 8 ULP" in strict.message


def test_the_messages_say_which_budget_decided_and_by_how_much():
    tested, bench = bf16_output(20)
    assert verdict(tested, bench, "torch.bfloat16").message.startswith(
        "bf16 budget: max error 0.156 = 20 ULP of the output scale 1.5 > 16 ULP, at [63] (tested 1.65625, bench 1.5)")
    scaled = round_to(bench * 1.03, "torch.bfloat16")
    assert re.match(r"bf16 budget: RMS error 0\.0\d+ = 3\.\d+ ULP of the output's RMS 1\.04 > 2\.5 ULP, at \[\d+\]",
                    verdict(scaled, bench, "torch.bfloat16").message)
    correct = round_to(bench, "torch.bfloat16")
    assert re.fullmatch(r"within budget \(bf16\): max 0\.\d+ of 8 ULP, RMS 0\.\d+ of 2 ULP",
                        verdict(correct, bench, "torch.bfloat16").message)


def test_where_the_input_scale_decides_the_message_says_so_in_absolute_terms():
    bench = np.array([2e-9])  # a mean of normalised values, inputs up to 4
    passed = verdict(bench + 2e-7, bench, "torch.float32", input_scale=4.0)
    assert passed.message == "within budget (fp32, input scale 4): max 2e-07 of 4.77e-07, RMS 2e-07 of 4.77e-07"
    failed = verdict(bench + 1e-3, bench, "torch.float32", input_scale=4.0)
    assert failed.message.startswith("fp32 budget: max error 0.001 > 4.77e-07 = 16384 ULP of the output scale 2e-09"
                                     " + 1 ULP of the input scale 4, at [0]")


def test_a_dtype_without_a_budget_falls_back_to_the_basic_rule():
    bench = np.array([1.0, 2.0])
    result = verdict(bench + 0.25, bench, "torch.float8_e4m3fn")
    assert result.status == ERROR
    assert result.message.startswith("no dtype budget for torch.float8_e4m3fn, basic rule: ")


def test_within_budget_tells_a_rounding_floor_failure_from_a_fault():
    bench = np.linspace(-3, 3, 32)
    c = Comparison(round_to(bench, "torch.bfloat16"), bench, "torch.bfloat16")
    m, basic = compare(c, BasicStandard())
    assert basic.status == ERROR and DtypeStandard().within_budget(c, m)
    faulty = Comparison(round_to(bench * 1.03, "torch.bfloat16"), bench, "torch.bfloat16")
    assert not DtypeStandard().within_budget(faulty, compare(faulty, BasicStandard())[0])
    misplaced = Comparison(np.where(bench > 2.5, np.nan, c.tested), bench, "torch.bfloat16")
    assert not DtypeStandard().within_budget(misplaced, compare(misplaced, BasicStandard())[0])


def test_describe_is_one_line_with_the_budgets():
    text = DtypeStandard(Tolerances.parse(["Torch.mm: atol=1"])).describe()
    assert "\n" not in text
    assert "bf16 8/2, fp16 8/4, fp32 64/64" in text and "1 per-API tolerance" in text


# --- per-API tolerances --------------------------------------------------------------------


def test_tolerances_parse_lines_and_the_first_match_wins():
    tolerances = Tolerances.parse([
        "# looser for the attention matmuls",
        "Torch.matmul.*: rtol=1e-3, atol=1e-5",
        "",
        "Torch.*: atol=0.5",
        "Functional.linear.0.forward: rtol = 0.02",
    ])
    assert tolerances.lookup("Torch.matmul.0.forward.output.0") == (1e-3, 1e-5)
    assert tolerances.lookup("Torch.mm.3.backward.output.1") == (0.0, 0.5)
    assert tolerances.lookup("Functional.linear.0.forward.output.0") == (0.02, 0.0)
    assert tolerances.lookup("Functional.linear.1.forward.output.0") is None
    assert tolerances.describe() == ["Torch.matmul.*: rtol=0.001, atol=1e-05", "Torch.*: rtol=0, atol=0.5",
                                     "Functional.linear.0.forward: rtol=0.02, atol=0"]


@pytest.mark.parametrize("line, reason", [
    ("Torch.matmul.* rtol=1e-3", "expected"),
    (": rtol=1e-3", "expected"),
    ("Torch.matmul.*:", "give rtol, atol or both"),
    ("Torch.matmul.*: rtol=abc", "not a number"),
    ("Torch.matmul.*: rtol=-1", ">= 0"),
    ("Torch.matmul.*: atol=nan", ">= 0"),
    ("Torch.matmul.*: tol=1e-3", "unknown key 'tol'"),
    ("Torch.matmul.*: rtol=1e-3 atol=1e-5", "not key=value"),
    ("Torch.matmul.*: rtol=1e-3, rtol=1e-2", "rtol given twice"),
])
def test_a_bad_tolerance_line_is_named_in_the_error(line, reason):
    with pytest.raises(ValueError) as raised:
        Tolerances.parse(["Torch.mm.*: atol=1", line])
    assert repr(line) in str(raised.value) and reason in str(raised.value)


def test_a_tolerance_changes_the_verdict_of_the_matching_name_only():
    bench = np.linspace(0.5, 2.0, 16)
    tested = round_to(bench * 1.03, "torch.bfloat16")
    loose = DtypeStandard(Tolerances.parse(["Torch.matmul.*: rtol=0.05"]))
    matmul, mm = "Torch.matmul.0.forward.output.0", "Torch.mm.0.forward.output.0"
    assert verdict(tested, bench, "torch.bfloat16", name=matmul).status == ERROR
    assert verdict(tested, bench, "torch.bfloat16", name=matmul, standard=loose).status == PASS
    assert verdict(tested, bench, "torch.bfloat16", name=mm, standard=loose).status == ERROR


def test_a_tight_tolerance_fails_what_the_budget_passes_and_says_how():
    bench = np.linspace(0.5, 2.0, 16)
    tested = round_to(bench, "torch.bfloat16")
    tight = DtypeStandard(Tolerances.parse(["Torch.matmul.0.forward: rtol=1e-6"]))
    assert verdict(tested, bench, "torch.bfloat16").status == PASS
    failed = verdict(tested, bench, "torch.bfloat16", standard=tight)
    assert failed.status == ERROR
    assert failed.message.startswith("tolerance Torch.matmul.0.forward: rtol=1e-06, atol=0: ")
    assert "elements off, max error" in failed.message
