"""Random floats drawn a block at a time into the tensor's own dtype: the very tensors that
drawing the whole array in float64 and converting it with torch gave (the rule before)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_msprobe.frameworks.torch_engine import CODEC
from pytest_msprobe.inputs import rebuild as inputs
from pytest_msprobe.inputs.rebuild import random_array

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
FLOAT_MAX = {torch.float32: 3.4028234663852886e38, torch.bfloat16: 3.3895313892515355e38, torch.float16: 65504.0}


def whole_float64(spec: dict, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """The rule before: the whole array drawn in float64 by rng.uniform, converted by torch."""
    rng = np.random.default_rng(seed)
    low, high = inputs.as_float(spec.get("Min")), inputs.as_float(spec.get("Max"))
    lo, hi = inputs._finite_bounds(spec, low, high)
    if math.isfinite(hi - lo):
        array = np.asarray(rng.uniform(lo, hi, size=tuple(spec["shape"])), dtype=np.float64)
    else:
        u = rng.random(size=tuple(spec["shape"]))
        array = np.asarray(lo * (1 - u) + hi * u, dtype=np.float64)
    if array.size:
        array.reshape(-1)[0] = low if low is not None else lo
        array.reshape(-1)[-1] = high if high is not None else hi
    return torch.from_numpy(array).to(dtype)


def drawn(spec: dict, seed: int, dtype: torch.dtype) -> torch.Tensor:
    return CODEC.from_array(random_array(spec, "f", seed, CODEC.drawn_dtype(dtype)), dtype)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.view(-1).double().nan_to_num(7.0), b.view(-1).double().nan_to_num(7.0))
    )


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(DTYPES),
    st.floats(-1.0, 1.0),
    st.floats(-1.0, 1.0),
    st.floats(-30, 30),
    st.lists(st.integers(1, 6), max_size=3),
    st.integers(0, 2**32),
)
def test_the_draws_are_the_tensors_of_the_whole_float64_array(dtype, a, b, exponent, shape, seed):
    scale = 2.0**exponent
    lo, hi = sorted((a * scale + 0.0, b * scale + 0.0))  # no -0.0: rng.uniform(0.0, -0.0) raises
    spec = {"shape": shape, "Min": lo, "Max": hi}
    assert same(drawn(spec, seed, dtype), whole_float64(spec, seed, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_blocks_draw_the_same_values_as_one_array(dtype, monkeypatch):
    monkeypatch.setattr(inputs, "DRAW_BLOCK", 7)  # many blocks, a short last one
    spec = {"shape": [5, 11], "Min": -3.0, "Max": 2.5}
    assert same(drawn(spec, 99, dtype), whole_float64(spec, 99, dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_bound_rounds_as_torch_rounds_float64_to_a_low_precision_dtype(dtype):
    # Just above half-way between two values of the dtype: rounded through float32 it is a tie.
    bits = 7 if dtype == torch.bfloat16 else 10
    bound = 1.0 + 2.0 ** -(bits + 1) + 2.0**-40
    spec = {"shape": [4], "Min": -bound, "Max": bound}
    assert same(drawn(spec, 3, dtype), whole_float64(spec, 3, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_bounds_at_and_beyond_the_dtype_range_round_as_before_without_a_warning(dtype):
    top = FLOAT_MAX[dtype]
    specs = [
        {"shape": [64], "Min": -top, "Max": top},
        {
            "shape": [64],
            "Min": float("-inf"),
            "Max": float("inf"),
            "Min_except_inf_nan": -1e300,
            "Max_except_inf_nan": 1e300,
        },
        {"shape": [64], "Min": -1e308, "Max": 1e308},  # the width overflows float64
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for spec in specs:
            assert same(drawn(spec, 5, dtype), whole_float64(spec, 5, dtype))


def test_float64_and_the_widest_bounds_still_draw_in_float64():
    spec = {"shape": [3, 3], "Min": -1e308, "Max": 1e308}
    assert same(drawn(spec, 8, torch.float64), whole_float64(spec, 8, torch.float64))
    assert CODEC.drawn_dtype(torch.float64) is np.float64
