"""Results beyond the tested dtype's range are inf when correctly rounded (issue 27): an fp16 product,
exp or loss-scaled gradient past 65520 is inf on a correct kernel, so a float64 bench beyond the range
agrees with it; and a gradient msprobe took inside the API is found there with its infs.
tests/data/fp16_overflow is a real msprobe 26.2.0 dump (make/fp16_overflow.py)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import read_csv, run_msprobe
from pytest_msprobe.judging.compare import Comparison, compare, overflowed
from pytest_msprobe.judging.standards.dtype import DtypeStandard


def test_the_overflow_threshold_is_the_largest_number_plus_half_its_ulp():
    bench = np.array([65504.0, 65519.99, 65520.0, -1e6, np.nan, 3.0])
    found, count = overflowed(bench, "torch.float16")
    assert count == 2
    np.testing.assert_array_equal(found[:4], [65504.0, 65519.99, np.inf, -np.inf])
    assert np.isnan(found[4]) and found[5] == 3.0
    with np.errstate(over="ignore"):  # what the threshold stands for: numpy's own rounding to fp16
        assert np.float16(65519.99) == 65504 and np.isinf(np.float16(65520.0))
    assert overflowed(bench, "torch.float64")[1] == 0


def test_inf_agrees_with_a_bench_beyond_the_range_and_a_saturated_value_does_not():
    bench = np.array([1.0, 7.9e4, -2e5])
    tested = np.array([1.0, np.inf, -np.inf])
    _, verdict = compare(Comparison(tested, bench, "torch.float16"), DtypeStandard())
    assert verdict.status == "pass" and "2 bench element(s) beyond float16's range" in verdict.message
    _, wrong_sign = compare(Comparison(np.array([1.0, -np.inf, -np.inf]), bench, "torch.float16"), DtypeStandard())
    assert wrong_sign.status == "error"
    _, saturated = compare(Comparison(np.array([1.0, 65504.0, -65504.0]), bench, "torch.float16"), DtypeStandard())
    assert saturated.status == "error"  # a saturating kernel is not IEEE's rounding
    _, in_range = compare(Comparison(tested, np.array([1.0, 6.5e4, -2e5]), "torch.float16"), DtypeStandard())
    assert in_range.status == "error"  # 6.5e4 is an fp16 number: an inf there is the kernel's overflow


@pytest.mark.parametrize("device", ["recorded", "cpu"])
def test_fp16_overflow_in_a_real_dump(pytester, copy_dump, device):
    result = run_msprobe(pytester, copy_dump("fp16_overflow"), "--msprobe-standard", "dtype", device=device)
    details = {row["API Name"]: row for row in read_csv(pytester.path / "out", "details")}
    beyond = {
        "Tensor.__mul__.0.forward.output.0": "121",  # x * 3000
        "Torch.exp.0.forward.output.0": "25",
        "Tensor.__mul__.1.backward.output.0": "256",  # x * 300 under a loss scale of 400: 1.2e5 each
    }
    for name, count in beyond.items():
        row = details[name]
        assert row["Status"] == "pass", (name, row["Message"])
        assert f"{count} bench element(s) beyond float16's range: inf in float16" in row["Message"]
    # 65536 x cross_entropy: the product and its gradient are inf; the loss's gradient, inf, reaches
    # log_softmax's output as -inf at each target and 0 elsewhere, where msprobe took it (inf, NaN and
    # all: the float64 gradient there has them at the same places)
    assert "1 bench element(s) beyond float16's range" in details["Tensor.__mul__.3.forward.output.0"]["Message"]
    ce = details["Functional.cross_entropy.0.backward.output.0"]
    assert ce["Status"] == "pass", ce["Message"]
    if device == "recorded":
        assert "msprobe recorded this gradient at NllLossBackward0 (its input 0) inside the API" in ce["Message"]
    assert {row["Status"] for row in details.values()} <= {"pass", "SKIP"}
    assert result.ret == 0
