"""The shape rules answer what the meta device answers, or nothing (issue 29: no meta run, and no
torch._dynamo import, for a transformer's common calls; issue 26: the bound they serve).

Every rule is held to PyTorch's meta device on drawn arguments, valid and not: where a rule
answers, the call runs on meta and makes exactly those shapes; where the shapes do not fit, the
rule answers None and the meta device decides, as it did for every call before.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_msprobe.frameworks import output_bounds, shape_rules
from pytest_msprobe.frameworks.shape_rules import broadcast, output_shapes

META = torch.device("meta")
sizes = st.integers(0, 3)
shapes = st.lists(sizes, min_size=0, max_size=4)
small = settings(max_examples=80, deadline=None, derandomize=True)


def meta(shape: list[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=META)


def resolve(api: str) -> Any:
    kind, name = api.split(".")
    return getattr({"Torch": torch, "Tensor": torch.Tensor, "Functional": torch.nn.functional}[kind], name)


def on_meta(api: str, args: list, kwargs: dict) -> list[list[int]] | None:
    """What the call makes on the meta device, None where it refuses the arguments."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # padding="same" with an even kernel
            out = resolve(api)(*args, **kwargs)
    except (RuntimeError, ValueError, TypeError, IndexError):
        return None
    return [list(out.shape)]


def holds(api: str, args: list, kwargs: dict | None = None) -> list[list[int]] | None:
    """The rule's answer, checked against the meta device's; the answer."""
    kwargs = kwargs or {}
    answer = output_shapes(api, args, kwargs)
    if answer is not None:
        assert on_meta(api, args, kwargs) == answer, (api, [getattr(a, "shape", a) for a in args], kwargs)
    return answer


@small
@given(
    st.sampled_from(["Torch.add", "Torch.mul", "Tensor.__truediv__", "Tensor.__rsub__", "Torch.pow", "Tensor.eq"]),
    shapes,
    st.one_of(shapes, st.floats(-2, 2)),
)
def test_an_elementwise_call_makes_its_operands_broadcast(api, a, b):
    other = meta(b) if isinstance(b, list) else b
    answer = holds(api, [meta(a), other])
    expected = broadcast(a, b) if isinstance(b, list) else a
    assert answer == (None if expected is None else [expected])


@small
@given(st.sampled_from(["Tensor.add_", "Tensor.__imul__", "Tensor.mul_"]), shapes, shapes)
def test_an_in_place_call_keeps_its_tensors_shape_or_is_left_to_meta(api, a, b):
    answer = holds(api, [meta(a), meta(b)])
    assert answer == ([a] if broadcast(a, b) == a else None)


@small
@given(shapes, shapes, shapes)
def test_where_and_masked_fill_broadcast_their_mask_too(condition, a, b):
    assert holds("Torch.where", [meta(condition, torch.bool), meta(a), meta(b)]) == (
        None if broadcast(condition, a, b) is None else [broadcast(condition, a, b)]
    )
    holds("Tensor.masked_fill", [meta(a), meta(condition, torch.bool), 0.5])
    holds("Torch.clamp", [meta(a)], {"min": meta(b), "max": meta(condition)})


def test_a_call_out_of_its_rules_form_is_left_to_the_meta_device():
    x = meta([2, 3])
    assert output_shapes("Torch.add", [x, x], {"out": x}) is None
    assert output_shapes("Torch.where", [meta([2], torch.bool)], {}) is None  # nonzero: sized by data
    assert output_shapes("Torch.add", [x, [1, 2]], {}) is None  # a list is no operand
    assert output_shapes("Torch.sort", [x, 1], {}) is None  # no rule reads it
    assert output_shapes("Functional.linear", [x], {}) is None  # no weight


@small
@given(shapes, st.integers(0, 3), st.integers(0, 3), st.sampled_from(["none", "matching", "scalar", "other"]))
def test_linear_makes_the_input_with_its_last_dim_the_weights_rows(x, rows, columns, bias):
    weight = meta([rows, x[-1] if x and columns else columns])
    given_bias = {"none": None, "matching": meta([rows]), "scalar": meta([]), "other": meta([rows + 1])}[bias]
    answer = holds("Functional.linear", [meta(x), weight, given_bias])
    if x and weight.shape[1] == x[-1] and bias in ("none", "matching", "scalar"):
        assert answer == [[*x[:-1], rows]]


@small
@given(st.lists(sizes, min_size=1, max_size=4), st.lists(sizes, min_size=1, max_size=4), st.booleans())
def test_matmul_follows_torch_matmul_its_vectors_and_batches(a, b, matching):
    if matching and len(b) > 1:
        b[-2] = a[-1]
    elif matching:
        b[-1] = a[-1]
    answer = holds("Torch.matmul", [meta(a), meta(b)])
    holds("Tensor.__matmul__", [meta(a), meta(b)])
    holds("Tensor.__rmatmul__", [meta(b), meta(a)])
    holds("Torch.mm", [meta(a), meta(b)])
    holds("Torch.bmm", [meta(a), meta(b)])
    if matching and on_meta("Torch.matmul", [meta(a), meta(b)], {}) is not None:
        assert answer is not None


@small
@given(
    st.lists(st.integers(1, 3), min_size=0, max_size=2),
    st.sampled_from([(4, 4), (4, 2), (4, 1), (2, 4)]),
    st.integers(1, 3),
    st.integers(1, 3),
    st.sampled_from([None, "square", "row", "batched", "wider"]),
    st.booleans(),
)
def test_attention_makes_the_queries_by_the_values_width(batch, heads, length, width, mask, gqa):
    query_heads, kv_heads = heads
    q = meta([*batch, query_heads, length, 4])
    k = meta([*batch, kv_heads, 3, 4])
    v = meta([*batch, kv_heads, 3, width])
    masks = {"square": [length, 3], "row": [1, 3], "batched": [*batch, 1, length, 3], "wider": [2, *batch, 1, 1, 3]}
    kwargs: dict = {"enable_gqa": gqa}
    if mask is not None:
        kwargs["attn_mask"] = meta(masks[mask], torch.bool)
    answer = holds("Functional.scaled_dot_product_attention", [q, k, v], kwargs)
    if mask == "wider":
        assert answer is None
    elif query_heads == kv_heads or (gqa and query_heads % kv_heads == 0):
        assert answer == [[*batch, query_heads, length, width]]


@small
@given(st.lists(shapes, min_size=1, max_size=3), st.integers(-3, 3), st.booleans())
def test_cat_and_stack_make_their_tensors_together(tensors, dim, alike):
    if alike:
        tensors = [tensors[0]] * len(tensors)
    holds("Torch.cat", [[meta(s) for s in tensors], dim])
    stacked = holds("Torch.stack", [[meta(s) for s in tensors]], {"dim": dim})
    if alike and -len(tensors[0]) - 1 <= dim <= len(tensors[0]):
        assert stacked is not None


@small
@given(shapes, st.lists(sizes, min_size=1, max_size=3))
def test_embedding_makes_a_row_per_index(indices, weight):
    answer = holds("Functional.embedding", [meta(indices, torch.int64), meta(weight)])
    assert answer == ([[*indices, weight[1]]] if len(weight) == 2 else None)


@small
@given(
    st.sampled_from(["Functional.cross_entropy", "Functional.nll_loss"]),
    st.lists(st.integers(1, 3), min_size=1, max_size=3),
    st.sampled_from(["mean", "sum", "none"]),
    st.booleans(),
    st.sampled_from(["indices", "probabilities", "another shape"]),
)
def test_a_class_loss_reduced_is_one_number(api, shape, reduction, legacy, target):
    targets = {
        "indices": meta([*shape[:1], *shape[2:]] if len(shape) > 1 else [], torch.int64),
        "probabilities": meta(shape),
        "another shape": meta([*shape, 2], torch.int64),
    }
    kwargs = {"reduction": reduction, **({"reduce": True} if legacy else {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # `reduce` is deprecated
        answer = holds(api, [meta(shape), targets[target]], kwargs)
    read = target == "indices" or (target == "probabilities" and api.endswith("cross_entropy"))
    assert answer == ([[]] if reduction != "none" and not legacy and read else None)


@small
@given(
    st.sampled_from([1, 2]),
    st.booleans(),
    st.lists(st.integers(1, 6), min_size=2, max_size=2),
    st.lists(st.integers(1, 3), min_size=2, max_size=2),
    st.integers(1, 2),
    st.one_of(st.integers(0, 2), st.just("same"), st.just("valid")),
    st.integers(1, 2),
)
def test_a_convolution_makes_its_sliding_windows(spatial, batched, size, kernel, stride, padding, dilation):
    x = meta([2, 3, *size[:spatial]] if batched else [3, *size[:spatial]])
    weight = meta([5, 3, *kernel[:spatial]])
    kwargs = {"stride": stride, "padding": padding, "dilation": dilation}
    answer = holds(f"Functional.conv{spatial}d", [x, weight, None], kwargs)
    if on_meta(f"Functional.conv{spatial}d", [x, weight, None], kwargs) is not None:
        assert answer is not None


@pytest.mark.parametrize(
    "api",
    [
        "Tensor.__add__",
        "Torch.mul",
        "Tensor.add_",
        "Functional.linear",
        "Functional.scaled_dot_product_attention",
        "Torch.cat",
        "Tensor.mean",
        "Functional.conv2d",
        "Tensor.view",
        "Tensor.__neg__",
    ],
)
def test_a_call_a_rule_or_its_input_sizes_needs_no_meta_device(api):
    assert not output_bounds.sized_on_meta("pytorch", api)
    assert output_bounds.sized_on_meta("mindspore", api.replace("Tensor", "Mint"))


@pytest.mark.parametrize(
    "api",
    ["Torch.tril_indices", "Torch.sort", "Tensor.__getitem__", "Functional.multi_head_attention_forward", "Torch.histc"],
)
def test_a_call_no_rule_reads_stays_on_the_meta_device(api):
    assert output_bounds.sized_on_meta("pytorch", api)
    assert shape_rules.rule_for(api) is None
