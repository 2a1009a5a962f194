"""The numpy prototype of the per-element judgement (bench/studies/kernel_bound.py)."""

from __future__ import annotations

import importlib.util
import sys

import deficits as d
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from conftest import ROOT


def _load():
    # bench/ is a folder of scripts, not a package the tests can import: load the file itself.
    spec = importlib.util.spec_from_file_location("kernel_bound", ROOT / "bench" / "studies" / "kernel_bound.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernel_bound"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


kb = _load()
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
finite = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False)


def arrays():
    return hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=6), elements=finite)


@pytest.mark.parametrize("dtype", list(DTYPES))
@given(values=hnp.arrays(np.float64, st.integers(1, 64), elements=st.floats(-1e30, 1e30, allow_nan=False)))
def test_rounded_is_torch_s_rounding(dtype, values):
    expected = torch.from_numpy(values).to(DTYPES[dtype]).double().numpy()
    assert np.array_equal(kb.rounded(values, kb.format_of(dtype)), expected)


@pytest.mark.parametrize("dtype", list(DTYPES))
@given(bench=arrays())
def test_correctly_rounded_results_of_any_shape_pass(dtype, bench):
    tested = torch.from_numpy(np.asarray(bench)).to(DTYPES[dtype]).double().numpy()
    judgement = kb.judge(tested, bench, dtype)
    assert judgement.status == kb.PASS
    assert judgement.ratio <= 0.5 / 1.5 + 1e-12  # half a ULP of a budget of 1.5


@pytest.mark.parametrize("dtype", list(DTYPES))
@given(bench=hnp.arrays(np.float64, st.integers(1, 200), elements=finite), seed=st.integers(0, 2**16))
def test_a_one_ulp_library_passes(dtype, bench, seed):
    fmt = kb.format_of(dtype)
    rounded = kb.rounded(bench, fmt)
    steps = np.random.default_rng(seed).integers(-1, 2, bench.shape)
    tested = kb.rounded(rounded + steps * kb.ulp(rounded, fmt), fmt)
    assert kb.judge(tested, bench, dtype).status == kb.PASS


@given(
    bench=hnp.arrays(np.float64, st.tuples(st.integers(1, 8), st.integers(1, 8)), elements=finite),
    noise=st.floats(1e-4, 1e-1),
    seed=st.integers(0, 2**16),
)
def test_the_verdict_does_not_depend_on_the_order_of_elements(bench, noise, seed):
    rng = np.random.default_rng(seed)
    tested = bench * (1 + noise * rng.standard_normal(bench.shape))
    magnitude = np.abs(bench) * rng.uniform(1, 1e3, bench.shape)
    order = rng.permutation(bench.size)
    before = kb.judge(tested, bench, "bf16", kb.Probes(magnitude=magnitude))
    after = kb.judge(
        tested.reshape(-1)[order], bench.reshape(-1)[order], "bf16", kb.Probes(magnitude=magnitude.reshape(-1)[order])
    )
    assert (after.status, after.ratio, after.tested, after.bench) == (
        before.status,
        before.ratio,
        before.tested,
        before.bench,
    )


def _matmul(kind: str, a: torch.Tensor, b: torch.Tensor):
    entry = d.call_entry("Torch.matmul", [a, b])
    tested = d.compute(kind, entry)[0].double().numpy()
    bench = d.run(d.EXACT, entry)[0].numpy()
    magnitude = (a.double().abs() @ b.double().abs()).numpy()  # the abs probe
    return tested, bench, kb.Probes(magnitude=magnitude)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@settings(max_examples=12, deadline=None)
@given(k=st.integers(64, 512), seed=st.integers(0, 2**16))
def test_low_precision_accumulation_over_64_terms_fails(dtype, k, seed):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(8, k, generator=g).to(DTYPES[dtype]), torch.randn(k, 8, generator=g).to(DTYPES[dtype])
    tested, bench, probes = _matmul("accumulate_low", a, b)
    assert kb.judge(tested, bench, dtype, probes).status == kb.ERROR
    for kind in ("sequential", "reverse", "pairwise", "blocked"):  # fp32 accumulation in any order
        tested, bench, probes = _matmul(kind, a, b)
        assert kb.judge(tested, bench, dtype, probes).status == kb.PASS, kind


@pytest.mark.parametrize("k", [64, 1024, 4096])
def test_tf32_operands_fail_an_fp32_matmul_that_fp32_sums_pass(k):
    g = torch.Generator().manual_seed(k)
    a, b = torch.randn(8, k, generator=g), torch.randn(k, 8, generator=g)
    for kind in ("sequential", "blocked"):
        assert kb.judge(*_matmul(kind, a, b)[:2], "float32", _matmul(kind, a, b)[2]).status == kb.PASS
    tested, bench, probes = _matmul("tf32", a, b)
    judgement = kb.judge(tested, bench, "float32", probes)
    assert judgement.status == kb.ERROR and judgement.ratio > 10


def test_without_its_probe_a_cancelling_fp32_sum_needs_one():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 1024, generator=g), torch.randn(1024, 4, generator=g)
    tested, bench, probes = _matmul("sequential", a, b)
    assert kb.needs_probes(tested, bench, "float32")
    assert kb.judge(tested, bench, "float32", probes).status == kb.PASS


def test_subnormal_results_have_the_subnormal_spacing_as_floor():
    bench = np.array([1e-7, -3e-8, 0.0])  # fp16 subnormals: spacing 2^-24 = 6e-8
    tested = bench + np.array([5e-8, -5e-8, 5e-8])
    assert kb.judge(tested, bench, "float16").status == kb.PASS
    assert kb.judge(bench + 2e-7, bench, "float16").status == kb.ERROR


def test_the_accumulation_unit_is_fp32_s_down_to_fp32_and_fp64_s_for_fp64():
    assert kb.format_of("bf16").accumulation == 2.0**-24
    assert kb.format_of("torch.float32").accumulation == 2.0**-24
    assert kb.format_of("float64").accumulation == 2.0**-53


def test_misplaced_nonfinite_values_are_an_error_and_matching_ones_are_skipped():
    bench = np.array([1.0, np.inf, np.nan])
    assert kb.judge(np.array([1.0, np.inf, np.nan]), bench, "bf16").status == kb.PASS
    judgement = kb.judge(np.array([np.nan, np.inf, np.nan]), bench, "bf16")
    assert judgement.status == kb.ERROR and judgement.index == (0,)


def test_probes_widen_the_budget_where_they_say_a_correct_kernel_errs():
    bench = np.array([1e-3, 1.0])
    tested = bench + np.array([1e-6, 0.0])  # 1e-6 at 1e-3 is ~260 fp32 ULP, 0.016 in bf16 ULP
    assert kb.judge(tested, bench, "float32").status == kb.ERROR
    widened = kb.judge(tested, bench, "float32", kb.Probes(perturbed=[bench + np.array([2e-7, 0.0])]))
    assert widened.status == kb.PASS
    low = kb.judge(tested, bench, "bf16", kb.Probes(low=tested))
    assert low.status == kb.PASS
    assert kb.judge(tested, bench, "float32", kb.Probes(low=tested)).status == kb.ERROR  # low is bf16/fp16 only


def test_the_band_between_the_budget_and_twice_it_is_a_warning():
    bench = np.array([1.0])
    one_ulp = 2.0**-7
    assert kb.judge(bench + 2.0 * one_ulp, bench, "bf16").status == kb.WARNING  # 2 of a budget of 1.5 ULP
    assert kb.judge(bench + 4.0 * one_ulp, bench, "bf16").status == kb.ERROR


def test_messages_speak_of_the_element_its_ulps_and_the_parts_of_its_budget():
    bench = np.array([[1.0, 2.0], [3.0, 4.0]])
    tested = bench.copy()
    tested[1, 0] += 40 * 2.0**-6  # 40 ULP of bf16 at 3.0
    judgement = kb.judge(tested, bench, "torch.bfloat16", kb.Probes(magnitude=np.full((2, 2), 10.0)))
    assert judgement.status == kb.ERROR and judgement.index == (1, 0)
    assert judgement.message.startswith("bf16: element [1, 0] is 40 ULP off (tested 3.625, bench 3)")
    assert "26.6x its budget 1.5 ULP (rounding 1.5, fp32 accumulation 0.00122)" in judgement.message
    assert "1 of 4 elements over budget" in judgement.message
    assert kb.judge(bench, bench, "fp16").message.startswith("within budget (fp16)")


def test_the_probes_the_rule_asks_for():
    assert kb.probes_for("Functional.linear.0.forward", "torch.float32") == ("abs",)
    assert kb.probes_for("Torch.matmul", "torch.bfloat16") == ("abs", "low")
    assert kb.probes_for("softmax", "float16") == ("formula", "perturbed", "low")
    assert kb.probes_for("Functional.scaled_dot_product_attention.0.backward", "float32") == ("perturbed",)


def test_shapes_must_agree_and_dtypes_must_be_floating():
    with pytest.raises(ValueError, match="shape"):
        kb.judge(np.zeros(3), np.zeros(4), "bf16")
    with pytest.raises(ValueError, match="no floating format"):
        kb.judge(np.zeros(3), np.zeros(3), "torch.int64")
