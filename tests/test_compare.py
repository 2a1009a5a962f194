"""Metrics and the basic standard: properties (hypothesis) and the special cases of msprobe-acc-check.md."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pytest_msprobe.judging.compare import Comparison, compare, cosine, metrics
from pytest_msprobe.judging.standards.basic import BasicStandard
from pytest_msprobe.results import ERROR, PASS, SKIP, WARNING, worst_status

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
vectors = arrays(np.float64, st.integers(2, 64), elements=finite)


def judged(tested, bench, dtype="torch.float32", standard=None):
    c = Comparison(np.asarray(tested), np.asarray(bench), dtype)
    return compare(c, standard or BasicStandard())


@given(vectors, vectors)
def test_cosine_lies_in_minus_one_one(t, b):
    n = min(len(t), len(b))
    value = cosine(t[:n], b[:n])
    assert value is None or -1.0 <= value <= 1.0


@given(vectors)
def test_identical_outputs_have_no_error(t):
    m = metrics(t, t.copy())
    assert m.max_abs_err == 0.0 and m.max_rel_err == 0.0
    assert m.cosine is None or m.cosine == pytest.approx(1.0, abs=1e-12)


@given(vectors, st.floats(1e-3, 1e3))
def test_metrics_are_symmetric_in_scale(t, k):
    """Scaling both sides scales MaxAbsErr and leaves cosine unchanged."""
    b = t + 1.0
    m1, m2 = metrics(t, b), metrics(t * k, b * k)
    assert m2.max_abs_err == pytest.approx(m1.max_abs_err * k, rel=1e-9)
    if m1.cosine is not None and m2.cosine is not None:
        assert m2.cosine == pytest.approx(m1.cosine, abs=1e-9)


@settings(max_examples=50)
@given(vectors, st.randoms(use_true_random=False))
def test_metrics_do_not_depend_on_element_order(t, rnd):
    b = t * 1.001 + 0.5
    order = list(range(len(t)))
    rnd.shuffle(order)
    m1, m2 = metrics(t, b), metrics(t[order], b[order])
    assert m1.max_abs_err == m2.max_abs_err and m1.max_rel_err == m2.max_rel_err
    assert (m1.cosine is None) == (m2.cosine is None)


def test_max_relative_error_uses_epsilon_where_bench_is_zero():
    m = metrics(np.array([1e-9, 2.0]), np.array([0.0, 2.0]))
    assert m.max_rel_err == pytest.approx(1e-9 / 1e-8)


def test_both_all_zero_has_no_cosine_and_passes():
    m, v = judged([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert m.cosine is None and v.status == PASS


def test_one_side_all_zero_is_an_error():
    m, v = judged([0.0, 0.0, 0.0], [1e-6, 0.0, 0.0])
    assert v.status == ERROR and "tested output is all zero" in v.message


def test_one_element_is_judged_by_max_abs_err_alone():
    m, v = judged([1.0], [1.00001])
    assert m.cosine is None and v.status == PASS
    assert judged([1.0], [1.001])[1].status == ERROR


def test_rule_thresholds_are_strict():
    t = np.array([1.0, 2.0, 3.0])
    assert judged(t, t + 0.5e-4)[1].status == PASS
    assert judged(t, t + 2e-4)[1].status == ERROR
    assert judged(t, t + 2e-4, standard=BasicStandard(max_abs_err=1e-3))[1].status == PASS


def test_a_failure_names_the_rule_and_the_worst_element():
    _, v = judged([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.5]])
    assert v.message == "MaxAbsErr 0.5 >= 0.0001 at [1, 1] (tested 4, bench 4.5)"


def test_low_cosine_fails():
    _, v = judged([1.0, -1.0, 1.0], [1.0, 1.0, 1.0])
    assert v.status == ERROR and v.message.startswith("Cosine 0.333333 <= 0.99")


def test_nan_at_the_same_places_is_not_a_fault():
    m, v = judged([1.0, np.nan, 3.0], [1.0, np.nan, 3.0])
    assert v.status == PASS and m.max_abs_err == 0.0


@pytest.mark.parametrize("tested, bench, text", [
    ([1.0, np.nan, 3.0], [1.0, 2.0, 3.0], "NaN at 1 position"),
    ([1.0, 2.0, 3.0], [1.0, np.nan, 3.0], "NaN at 1 position"),
    ([1.0, np.inf, 3.0], [1.0, 2.0, 3.0], "inf at 1 position"),
    ([1.0, np.inf, 3.0], [1.0, -np.inf, 3.0], "inf at 1 position"),
])
def test_nan_and_inf_must_sit_at_the_same_places(tested, bench, text):
    _, v = judged(tested, bench)
    assert v.status == ERROR and text in v.message


@pytest.mark.parametrize("tested, bench, worst", [
    ([1.0, np.nan, 3.0], [1.0, 2.0, 3.0], "nan"),
    ([1.0, np.inf, 3.0], [1.0, 2.0, 3.0], "inf"),
])
def test_a_nonfinite_fault_shows_in_the_numbers_and_the_finite_part_in_the_message(tested, bench, worst):
    m, v = judged(tested, bench)
    # A sort by Cosine or MaxAbsErr, as msprobe users do in a spreadsheet, must find it first.
    assert np.isnan(m.cosine) and str(m.max_abs_err) == worst and str(m.max_rel_err) == worst
    assert "over the elements finite on both sides: Cosine 1, MaxAbsErr 0" in v.message


def test_shape_mismatch_is_an_error():
    m, v = judged(np.zeros((2, 3)), np.zeros((3, 2)))
    assert v.status == ERROR and "shape [2, 3] differs from the bench's [3, 2]" in v.message


def test_dtype_kind_mismatch_is_an_error():
    _, v = judged(np.array([1, 2]), np.array([1.0, 2.0]), dtype="torch.int64")
    assert v.status == ERROR and "dtype kind differs" in v.message


def test_integer_and_bool_outputs_must_be_equal():
    assert judged(np.array([1, 2]), np.array([1, 2]), "torch.int64")[1].status == PASS
    _, v = judged(np.array([True, False]), np.array([True, True]), "torch.bool")
    assert v.status == ERROR and "1 of 2 elements differ" in v.message


def test_worst_status_of_an_api():
    assert worst_status([PASS, ERROR, WARNING]) == ERROR
    assert worst_status([PASS, WARNING, SKIP]) == WARNING
    assert worst_status([PASS, SKIP]) == PASS
    assert worst_status([SKIP, SKIP]) == SKIP
    assert worst_status([]) == SKIP


def test_large_values_do_not_overflow_the_cosine():
    t = np.array([3e200, 1e200, -2e200])
    assert cosine(t, t) == pytest.approx(1.0)
