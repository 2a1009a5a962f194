"""Rebuilding arguments: every encoding of dump-format.md, and the seeded random generator."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pytest_msprobe.frameworks.torch_engine import CODEC
from pytest_msprobe.inputs.rebuild import (
    RANDOM,
    REAL,
    Device,
    InputError,
    Rebuilder,
    Undescribed,
    random_array,
    tensor_seed,
)


def rebuilder(tmp_path=Path("/nonexistent"), mode="auto", entry="Torch.x.0.forward"):
    return Rebuilder(CODEC, entry, tmp_path, mode, 1234)


def tensor_spec(shape=(2, 3), dtype="torch.float32", lo=-1.0, hi=1.0, **extra):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": hi, "Min": lo, **extra}


@pytest.mark.parametrize("spec, expected", [
    ({"type": "int", "value": 3}, 3),
    ({"type": "float", "value": 0.5}, 0.5),
    ({"type": "bool", "value": True}, True),
    ({"type": "str", "value": "mean"}, "mean"),
    ({"type": "slice", "value": [None, 32, None]}, slice(None, 32, None)),
    ({"type": "ellipsis", "value": "..."}, Ellipsis),
    ({"type": "torch.Size", "value": [2, 3]}, torch.Size([2, 3])),
    ({"type": "torch.dtype", "value": "torch.float16"}, torch.float16),
    ({"type": "torch.device", "value": "npu:0"}, Device("npu:0")),
    (None, None),
    ([{"type": "int", "value": 1}, [{"type": "int", "value": 2}, None]], [1, [2, None]]),
])
def test_every_argument_encoding_is_decoded(spec, expected):
    assert rebuilder().value(spec, "input_args[0]") == expected


def test_bare_words_from_the_parser_read_as_floats():
    assert math.isinf(rebuilder().value({"type": "float", "value": "-Infinity"}, "x"))
    assert math.isnan(rebuilder().value({"type": "float", "value": "NaN"}, "x"))


def test_an_empty_object_is_kept_as_undescribed():
    assert rebuilder().value({}, "input_args[1]") == Undescribed("input_args[1]")


@pytest.mark.parametrize("spec, field, text", [
    ({"type": "int"}, "input_args[0].value", "missing"),
    ({"type": "torch.memory_format", "value": "x"}, "input_args[0].type", "unsupported argument type"),
    (tensor_spec(dtype="torch.float17"), "input_args[0].dtype", "unknown dtype 'torch.float17'"),
    ({**tensor_spec(), "shape": [2, -1]}, "input_args[0].shape", "not a list of sizes"),
    ({"type": "int", "value": "three"}, "input_args[0].value", "cannot read"),
])
def test_a_bad_argument_names_entry_and_field(spec, field, text):
    with pytest.raises(InputError) as info:
        rebuilder().value(spec, "input_args[0]")
    assert str(info.value).startswith(f"Torch.x.0.forward: {field}: ") and text in str(info.value)


def test_real_mode_loads_the_tensor_file(tmp_path):
    torch.save(torch.arange(6.0).reshape(2, 3), tmp_path / "a.pt")
    value = rebuilder(tmp_path, REAL).value(tensor_spec(data_name="a.pt"), "input_args[0]")
    assert torch.equal(value, torch.arange(6.0).reshape(2, 3))


def test_a_file_outside_the_tensor_folder_is_refused(tmp_path):
    (tmp_path / "data").mkdir()
    torch.save(torch.zeros(2, 3), tmp_path / "a.pt")
    with pytest.raises(InputError, match="points outside"):
        rebuilder(tmp_path / "data", REAL).value(tensor_spec(data_name="../a.pt"), "input_args[0]")


def test_auto_mode_falls_back_to_random_and_says_so(tmp_path):
    r = rebuilder(tmp_path, "auto")
    value = r.value(tensor_spec(data_name="missing.pt"), "input_args[0]")
    assert value.shape == (2, 3) and r.notes == ["input_args[0]: tensor file missing.pt missing, random data used"]
    with pytest.raises(InputError, match="does not exist"):
        rebuilder(tmp_path, REAL).value(tensor_spec(data_name="missing.pt"), "input_args[0]")


bounds = st.tuples(st.floats(-1e4, 1e4), st.floats(-1e4, 1e4)).map(sorted)
shapes = st.lists(st.integers(1, 5), min_size=0, max_size=3)


@given(bounds, shapes, st.integers(0, 2**32))
def test_random_floats_lie_in_min_max_with_both_present(b, shape, seed):
    lo, hi = b
    array = random_array({"shape": shape, "Min": lo, "Max": hi}, "f", seed)
    assert array.shape == tuple(shape)
    assert array.min() >= lo and array.max() <= hi
    if array.size >= 2:
        assert array.reshape(-1)[0] == lo and array.reshape(-1)[-1] == hi


@given(st.integers(-50, 50), st.integers(0, 50), shapes, st.integers(0, 2**32))
def test_random_ints_lie_in_min_max(lo, width, shape, seed):
    array = random_array({"shape": shape, "Min": lo, "Max": lo + width}, "i", seed)
    assert array.dtype == np.int64 and array.shape == tuple(shape)
    assert array.size == 0 or (array.min() >= lo and array.max() <= lo + width)


def test_random_bools_follow_min_and_max():
    assert not random_array({"shape": [50], "Min": False, "Max": False}, "b", 1).any()
    assert random_array({"shape": [50], "Min": True, "Max": True}, "b", 1).all()


@given(st.sampled_from([float("inf"), float("-inf"), float("nan")]), st.integers(0, 2**32))
def test_recorded_inf_and_nan_are_planted_and_the_rest_stays_finite(special, seed):
    array = random_array({"shape": [4, 8], "Min": -2.0, "Max": special}, "f", seed).reshape(-1)
    last = array[-1]
    assert (math.isnan(last) and math.isnan(special)) or last == special
    assert np.isfinite(array[:-1]).all()


@given(st.integers(0, 2**32))
def test_the_same_seed_gives_the_same_tensor(seed):
    spec = {"shape": [3, 4], "Min": -1.0, "Max": 1.0}
    assert np.array_equal(random_array(spec, "f", seed), random_array(spec, "f", seed))


def test_the_seed_depends_on_entry_and_field_only():
    assert tensor_seed(1234, "A.x.0.forward", "input_args[0]") == tensor_seed(1234, "A.x.0.forward", "input_args[0]")
    assert tensor_seed(1234, "A.x.0.forward", "input_args[0]") != tensor_seed(1234, "A.x.0.forward", "input_args[1]")
    assert tensor_seed(1234, "A.x.0.forward", "input_args[0]") != tensor_seed(1234, "A.x.1.forward", "input_args[0]")
    assert tensor_seed(1, "A.x.0.forward", "input_args[0]") != tensor_seed(2, "A.x.0.forward", "input_args[0]")


def test_random_tensors_get_the_recorded_dtype():
    value = rebuilder(mode=RANDOM).value(tensor_spec(dtype="torch.bfloat16", lo=0.0, hi=4.0), "input_args[0]")
    assert value.dtype == torch.bfloat16 and float(value.min()) >= 0.0 and float(value.max()) <= 4.0


@pytest.mark.parametrize("lo, hi", [(None, -38217.0), (38217.0, None)])
def test_a_bound_the_statistics_lack_stays_within_the_dtype(lo, hi):
    """float16 with Max -38217 alone: the made-up Min is -65504, not -76434 (which float16 rounds to -inf)."""
    spec = {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [64], "Min": lo, "Max": hi}
    value = rebuilder(mode=RANDOM).value(spec, "input_args[0]")
    assert value.dtype == torch.float16 and bool(torch.isfinite(value).all())
