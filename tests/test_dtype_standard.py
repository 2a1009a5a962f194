"""The dtype standard: each element against what a correct kernel could do there (standards/budget.py).

Properties (hypothesis): correctly rounded results of any shape pass, fp16/bf16 accumulation
over K >= 64 is an error, the verdict does not depend on the order of elements; and the
budget's parts, messages, tolerances and allowances.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from pytest_msprobe.judging.compare import Comparison, ExtraRuns, compare
from pytest_msprobe.judging.standards.basic import BasicStandard
from pytest_msprobe.judging.standards.budget import FORMATS, format_of
from pytest_msprobe.judging.standards.dtype import DtypeStandard
from pytest_msprobe.judging.standards.tolerances import Tolerances
from pytest_msprobe.results import ERROR, PASS, WARNING

LOW = {"torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16}
DTYPES = [*LOW, "torch.float32"]


def round_to(x, dtype: str) -> np.ndarray:
    """The test's own oracle: float64 values rounded to the nearest value of `dtype`, through torch."""
    return torch.from_numpy(np.asarray(x, dtype=np.float64)).to(getattr(torch, dtype.split(".")[1])).double().numpy()


def verdict(tested, bench, dtype, probes=None, name="Torch.matmul.0.forward.output.0", standard=None):
    c = Comparison(np.asarray(tested, np.float64), np.asarray(bench, np.float64), dtype, name, probes or ExtraRuns())
    return compare(c, standard or DtypeStandard())[1]


dtypes = st.sampled_from(DTYPES)
# Finite values every dtype holds (fp16's range), zeros, subnormals and negatives included, any shape.
any_values = arrays(np.float64, array_shapes(min_dims=0, max_dims=3, max_side=12),
                    elements=st.floats(-6e4, 6e4, allow_nan=False))


@given(dtype=dtypes, bench=any_values)
def test_correctly_rounded_results_of_any_shape_pass(dtype, bench):
    assert verdict(round_to(bench, dtype), bench, dtype).status == PASS


def accumulated_in(dtype: torch.dtype, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A matmul whose every partial sum is rounded to `dtype`: a kernel accumulating in the low precision."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=dtype)
    for k in range(a.shape[1]):
        acc = (acc.double() + a[:, k : k + 1].double() * b[k : k + 1, :].double()).to(dtype)
    return acc


@settings(max_examples=30, deadline=None)
@given(dtype=st.sampled_from(list(LOW)), k=st.integers(64, 512), seed=st.integers(0, 2**31), signed=st.booleans())
def test_fp16_and_bf16_accumulation_over_k_of_64_and_more_is_an_error(dtype, k, seed, signed):
    generator = torch.Generator().manual_seed(seed)
    a, b = (torch.rand(shape, generator=generator, dtype=torch.float64) for shape in ((16, k), (k, 16)))
    if signed:
        a, b = a * 2 - 1, b * 2 - 1
    a, b = a.to(LOW[dtype]), b.to(LOW[dtype])
    exact = (a.double() @ b.double()).numpy()
    magnitude = (a.double().abs() @ b.double().abs()).numpy()
    tested = accumulated_in(LOW[dtype], a, b).double().numpy()
    assert verdict(tested, exact, dtype, ExtraRuns(magnitude=lambda: magnitude)).status == ERROR
    # The same inputs with fp32 accumulation, rounded once: what a correct kernel gives.
    correct = (a.float() @ b.float()).to(LOW[dtype]).double().numpy()
    assert verdict(correct, exact, dtype, ExtraRuns(magnitude=lambda: magnitude)).status == PASS


@settings(max_examples=50)
@given(dtype=dtypes, bench=any_values, ulps=st.floats(0, 40), data=st.data())
def test_the_verdict_does_not_depend_on_the_order_of_elements(dtype, bench, ulps, data):
    fmt = format_of(dtype)
    bench = bench.reshape(-1)
    tested = bench + ulps * fmt.spacing(bench) * data.draw(arrays(np.float64, bench.shape, elements=st.floats(-1, 1)))
    order = data.draw(st.permutations(range(bench.size)))
    one, other = verdict(tested, bench, dtype), verdict(tested[order], bench[order], dtype)
    assert one.status == other.status


def test_a_sum_of_many_terms_near_zero_passes_on_the_magnitude_of_its_terms():
    """A cancelling fp32 dot product is off by many ULP of its tiny result: correct, and the
    magnitude probe (|A||B|) is what says so; without it the same output fails."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 1024)), rng.standard_normal((1024, 4))
    exact = a @ b
    tested = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)  # fp32 operands, fp32 sums
    exact = a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)
    magnitude = np.abs(a.astype(np.float32)) @ np.abs(b.astype(np.float32))
    asked = []
    probes = ExtraRuns(magnitude=lambda: asked.append("magnitude") or magnitude)
    assert verdict(tested, exact, "torch.float32", probes).status == PASS
    assert asked in ([], ["magnitude"])  # asked at most once, only when over the budget without it


def test_a_magnitude_of_part_of_the_terms_passes_with_a_bound_and_never_fails():
    """The sampled magnitude (a part of the terms, a lower bound) is asked first: where it leaves
    the output within budget the verdict is a pass whose message says the ratio is a bound; where
    it does not, the standard goes on to the whole magnitude, so a verdict never rests on it."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 1024)), rng.standard_normal((1024, 4))
    exact = a @ b
    magnitude = np.abs(a) @ np.abs(b)
    # 6 u_acc M off at every element, not a BLAS's own rounding (which depends on the machine's):
    # more than a budget without M allows, within what a quarter of M gives (c_acc = 32).
    tested = (exact + 6 * 2.0**-24 * magnitude * rng.choice([-1.0, 1.0], exact.shape)).astype(np.float32)
    asked = []

    def probes(part):
        return ExtraRuns(
            magnitude=lambda: asked.append("whole") or magnitude,
            sampled_magnitude=lambda: asked.append("part") or magnitude * part,
        )

    bounded = verdict(tested, exact, "torch.float32", probes(0.25))
    assert bounded.status == PASS and asked == ["part"]
    assert "every element within" in bounded.message and "(bounded with the magnitude of a part of the terms)" in bounded.message
    asked.clear()
    whole = verdict(tested, exact, "torch.float32", probes(1e-6))  # a part too small to pass: the whole asked
    assert whole.status == PASS and asked == ["part", "whole"] and "worst element at" in whole.message
    asked.clear()
    wrong = verdict(tested * (1 + 1e-3), exact, "torch.float32", probes(0.25))
    assert wrong.status == ERROR and asked == ["part", "whole"]


def test_tf32_operands_are_an_error_and_pass_where_declared():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 512)).astype(np.float32), rng.standard_normal((512, 16)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    tf32 = FORMATS["tf32"].rounded
    tested = (tf32(a).astype(np.float32) @ tf32(b).astype(np.float32)).astype(np.float64)
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    probes = ExtraRuns(magnitude=lambda: magnitude)
    assert verdict(tested, exact, "torch.float32", probes).status == ERROR
    declared = DtypeStandard(Tolerances.parse(["Torch.matmul.*: inputs=tf32"]))
    allowed = verdict(tested, exact, "torch.float32", probes, standard=declared)
    assert allowed.status == PASS and "(allowed: Torch.matmul.*: inputs=tf32)" in allowed.message
    elsewhere = verdict(tested, exact, "torch.float32", probes, name="Torch.bmm.0.forward.output.0", standard=declared)
    assert elsewhere.status == ERROR  # only the APIs the allowance names


def test_within_the_warning_band_is_a_warning():
    """Up to 1.04 times the budget (CONSTANTS.band), a warning; beyond, an error."""
    bench = np.full(4, 1.0)
    fmt = format_of("torch.bfloat16")
    budget = 1.5 * fmt.spacing(bench)[0] + 32 * 2.0**-24  # rounding and fp32 accumulation at |b| = 1
    for off, expected in ((0.9, PASS), (1.02, WARNING), (1.06, ERROR), (2.5, ERROR)):
        tested = bench.copy()
        tested[2] += off * budget
        assert verdict(tested, bench, "torch.bfloat16").status == expected, off


def test_the_message_names_the_element_and_the_parts_of_its_budget():
    bench = np.array([1.0, 2.0, 3.0])
    tested = np.array([1.0, 2.0 + 2**-4, 3.0])  # 4 bf16 ULP at 2
    message = verdict(tested, bench, "torch.bfloat16").message
    assert message.startswith("bf16 budget: element [1] is 4 ULP off (tested 2.0625, bench 2), ")
    assert "its budget of 1.5 ULP (rounding 1.5, fp32 accumulation" in message
    assert message.endswith("; 1 of 3 elements over budget")
    passing = verdict(bench, bench, "torch.bfloat16").message
    assert passing.startswith("within budget (bf16): worst element at 0 of its budget")


def test_probes_are_asked_in_turn_and_only_while_over_the_budget():
    bench = np.array([1.0, -1.0, 1e-3])
    tested = bench + np.array([0.0, 0.0, 1e-5])  # far over the rounding of 1e-3 in fp32
    asked = []

    def answer(name, value):
        def ask(*args):
            asked.append(name)
            return value
        return ask

    probes = ExtraRuns(magnitude=answer("magnitude", np.array([1.0, 1.0, 2.0])),
                    spread=answer("spread", np.array([0.0, 0.0, 1e-5])), low=answer("low", None))
    assert verdict(tested, bench, "torch.float32", probes).status == PASS
    assert asked == ["magnitude", "spread"]  # low is for bf16/fp16 only, and it passed before


def test_nan_and_inf_must_sit_at_the_same_places_and_are_left_out_of_the_budget():
    bench = np.array([1.0, np.nan, np.inf, 2.0])
    assert verdict(bench.copy(), bench, "torch.float16").status == PASS
    moved = np.array([np.nan, 1.0, np.inf, 2.0])
    assert verdict(moved, bench, "torch.float16").status == ERROR


def test_a_dtype_without_a_budget_falls_back_to_the_basic_rule():
    result = verdict(np.array([1.0, 2.0]), np.array([1.0, 2.5]), "torch.float8_e8m0fnu")
    assert result.status == ERROR and result.message.startswith("no dtype budget for torch.float8_e8m0fnu, basic rule: ")


def test_within_budget_tells_a_rounding_floor_failure_from_a_fault():
    bench = np.linspace(-2, 2, 64)
    rounded = round_to(bench, "torch.bfloat16")
    floor = Comparison(rounded, bench, "torch.bfloat16")
    m, basic = compare(floor, BasicStandard())
    assert basic.status == ERROR and basic.floor == "bf16"
    assert DtypeStandard().within_budget(floor, m)
    faulty = Comparison(rounded * 1.03, bench, "torch.bfloat16")
    m, basic = compare(faulty, BasicStandard())
    assert basic.status == ERROR and basic.floor == ""


def test_describe_is_one_short_line():
    text = DtypeStandard().describe()
    assert "\n" not in text and len(text) < 200 and text.startswith("dtype (each element within 1.5 ULP")


def test_tolerances_parse_rules_and_allowances_and_the_first_match_wins():
    tolerances = Tolerances.parse(["# team rules", "Torch.matmul.*: rtol=1e-3, atol=1e-5", "",
                                   "Functional.conv2d.*: inputs=hf32", "Torch.*: accumulate=fp16  # late"])
    assert tolerances.lookup("Torch.matmul.0.forward.output.0") == (1e-3, 1e-5)
    conv = tolerances.match("Functional.conv2d.3.backward.output.1")
    assert conv is not None and not conv.rule and conv.accumulation == 2.0**-11
    assert tolerances.describe() == ["Torch.matmul.*: rtol=0.001, atol=1e-05", "Functional.conv2d.*: inputs=hf32",
                                     "Torch.*: accumulate=fp16"]


@pytest.mark.parametrize("line, reason", [
    ("Torch.matmul.*", "expected"),
    ("Torch.matmul.*: rtol", "is not key=value"),
    ("Torch.matmul.*: rtol=abc", "is not a number"),
    ("Torch.matmul.*: rtol=-1", "must be a finite number >= 0"),
    ("Torch.matmul.*: eps=1", "unknown key 'eps'"),
    ("Torch.matmul.*: rtol=1, rtol=2", "rtol given twice"),
    ("Torch.matmul.*: inputs=fp8", "inputs=fp8: not a format"),
    ("Torch.matmul.*: rtol=1e-3, inputs=hf32", "not both"),
    ("Torch.matmul.*:", "or an allowance"),
])
def test_a_bad_tolerance_line_is_named_in_the_error(line, reason):
    with pytest.raises(ValueError, match=reason):
        Tolerances.parse([line])


def test_a_tolerance_rule_replaces_the_budget_for_the_matching_name_only():
    bench = np.linspace(-1, 1, 16)
    tested = bench * 1.001
    loose = DtypeStandard(Tolerances.parse(["Torch.matmul.0.forward: rtol=1e-2"]))
    assert verdict(tested, bench, "torch.float32", standard=loose).status == PASS
    other = verdict(tested, bench, "torch.float32", name="Torch.mm.0.forward.output.0", standard=loose)
    assert other.status == ERROR
    tight = DtypeStandard(Tolerances.parse(["Torch.matmul.0.forward: rtol=1e-6"]))
    failed = verdict(tested, bench, "torch.float32", standard=tight)
    assert failed.status == ERROR
    assert failed.message.startswith("tolerance Torch.matmul.0.forward: rtol=1e-06, atol=0: ")
