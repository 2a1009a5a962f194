"""The size rules answer the shape the call itself makes, or nothing (issue 48: argument-sized calls
sized without the meta device, whose first call imports torch._dynamo and sympy).

Each rule is held to the real call on CPU, on drawn arguments valid and not: where a rule answers,
the call runs and makes exactly that shape (never more elements than the rule said); where the call
refuses its arguments, the rule answers None, as it does for a form it does not read (left to the
meta device). The draws are small: the real call allocates what it makes.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conftest import run_msprobe
from pytest_msprobe.frameworks import output_bounds, shape_rules, size_rules
from pytest_msprobe.frameworks.shape_rules import output_shapes

small = settings(max_examples=80, deadline=None, derandomize=True)
sizes = st.integers(-1, 3)  # -1: a size the call refuses (or expand's "keep")
dims = st.lists(st.integers(0, 3), min_size=0, max_size=4)
REFUSED = (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError, OverflowError)


def resolve(api: str) -> Any:
    kind, name = api.split(".")
    return getattr({"Torch": torch, "Tensor": torch.Tensor, "Functional": F}[kind], name)


def made(api: str, args: list, kwargs: dict) -> list[list[int]] | None:
    """The shapes of what the call makes on CPU, None where it refuses the arguments."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.range is deprecated; align_corners' default
            out = resolve(api)(*args, **kwargs)
    except REFUSED:
        return None
    return [list(out.shape)]


def holds(api: str, args: list, kwargs: dict | None = None) -> list[list[int]] | None:
    """The rule's answer, checked against the real call: the same shape, or None where the call refuses."""
    kwargs = kwargs or {}
    answer = output_shapes(api, args, kwargs)
    real = made(api, args, kwargs)
    shown = (api, [getattr(a, "shape", a) for a in args], kwargs)
    if answer is not None:
        assert real is not None, ("the rule answers a call that refuses its arguments", answer, *shown)
        assert answer == real, (answer, real, *shown)
    return answer


def tensor(shape: list[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype)


# -- factories -----------------------------------------------------------------------------


@small
@given(
    st.sampled_from(["Torch.zeros", "Torch.ones", "Torch.empty", "Torch.rand", "Torch.randn"]),
    st.lists(sizes, max_size=4),
    st.sampled_from(["varargs", "list", "keyword"]),
)
def test_a_factory_makes_its_size_given_any_way(api, size, form):
    args, kwargs = {"varargs": (size, {}), "list": ([size], {}), "keyword": ([], {"size": size})}[form]
    answer = holds(api, list(args), kwargs)
    if min(size, default=0) >= 0 and (size or form != "varargs"):
        assert answer == [size]


@small
@given(st.lists(sizes, max_size=4), dims)
def test_full_empty_strided_and_the_new_forms_make_their_size(size, shape):
    valid = min(size, default=0) >= 0
    strides = [1] * len(size)
    x = tensor(shape)
    for api, args in [
        ("Torch.full", [size, 1.5]),
        ("Torch.empty_strided", [size, strides]),
        ("Tensor.new_zeros", [x, size]),
        ("Tensor.new_ones", [x, *size]),
        ("Tensor.new_empty", [x, size]),
        ("Tensor.new_full", [x, size, 2.0]),
        ("Tensor.new_empty_strided", [x, size, strides]),
    ]:
        answer = holds(api, args)
        if valid and (size or api != "Tensor.new_ones"):
            assert answer == [size], api


@small
@given(dims)
def test_a_like_factory_makes_its_inputs_shape(shape):
    x = tensor(shape)
    for api, args in [
        ("Torch.zeros_like", [x]),
        ("Torch.ones_like", [x]),
        ("Torch.empty_like", [x]),
        ("Torch.full_like", [x, 3.0]),
        ("Torch.rand_like", [x]),
        ("Torch.randn_like", [x]),
        ("Torch.randint_like", [x, 5]),
    ]:
        assert holds(api, args) == [shape], api


@small
@given(sizes, st.one_of(st.none(), sizes), st.lists(sizes, max_size=3), st.booleans())
def test_eye_randint_and_randperm_make_what_they_are_asked(n, m, size, low):
    holds("Torch.eye", [n] if m is None else [n, m])
    holds("Torch.eye", [n], {} if m is None else {"m": m})
    randint = holds("Torch.randint", [0, 5, size] if low else [5, size])
    holds("Torch.randint", [5], {"size": size})
    holds("Torch.randperm", [n])
    if n >= 0 and (m is None or m >= 0):
        assert holds("Torch.eye", [n] if m is None else [n, m]) == [[n, n if m is None else m]]
    if min(size, default=0) >= 0:
        assert randint == [size]


numbers = st.one_of(st.integers(-20, 20), st.floats(-20, 20, allow_nan=False, width=64))
steps = st.one_of(
    st.integers(-5, 5),
    st.sampled_from([0.1, 0.3, -0.7, 0.25, 1e-2, -1.5, 2.0 / 3.0]),
    st.floats(-5, 5, allow_nan=False).filter(lambda v: abs(v) > 1e-2),
)
integer_dtypes = st.sampled_from([None, torch.int64, torch.int32, torch.float32, torch.float64, torch.float16])


@small
@given(numbers, numbers, steps, integer_dtypes, st.sampled_from(["positional", "keywords", "end only"]))
def test_arange_and_range_count_their_steps(start, end, step, dtype, form):
    kwargs: dict = {} if dtype is None else {"dtype": dtype}
    if form == "positional":
        args = [start, end, step]
    elif form == "keywords":
        args, kwargs = [], {**kwargs, "start": start, "end": end, "step": step}
    else:
        args = [end]
    if step and form != "end only":
        assume(abs((end - start) / step) < 5000)
    ints = all(type(v) is int for v in ((end,) if form == "end only" else (start, end, step)))
    if dtype is not None and not dtype.is_floating_point and not ints:
        # The bounds cast to the dtype first, a step of 0.5 to 0: torch 2.13 divides by it (SIGFPE).
        assert output_shapes("Torch.arange", args, kwargs) is None
        return
    arange = holds("Torch.arange", args, kwargs)
    holds("Torch.range", args, kwargs)
    consistent = step != 0 and (end - start) * step >= 0
    # (a float16 end may round past the last step: the call refuses some)
    readable = ints or dtype is None or (dtype.is_floating_point and dtype != torch.float16)
    if form == "positional" and consistent and readable:
        assert arange is not None


@small
@given(numbers, numbers, sizes)
def test_linspace_and_logspace_make_their_steps(start, end, count):
    assert holds("Torch.linspace", [start, end, count]) == ([[count]] if count >= 0 else None)
    holds("Torch.logspace", [start, end], {"steps": count})


def test_a_factory_out_of_its_rules_form_is_left_to_the_meta_device():
    assert output_shapes("Torch.arange", [torch.tensor(5)], {}) is None  # a tensor bound
    assert output_shapes("Torch.arange", [0, 10.5], {"dtype": torch.int64}) is None  # truncated to ints first
    assert output_shapes("Torch.zeros", [2.0, 3], {}) is None
    assert output_shapes("Torch.full", [[2, 3], 1.0], {"out": tensor([2, 3])}) is None
    assert output_shapes("Torch.eye", [True], {}) is None


# -- a tensor made larger by its arguments ------------------------------------------------


@small
@given(dims, st.lists(sizes, max_size=5), st.booleans())
def test_repeat_and_tile_multiply_the_shape(shape, times, as_list):
    x = tensor(shape)
    given_times = [times] if as_list else times
    repeated = holds("Tensor.repeat", [x, *given_times])
    tiled = holds("Tensor.tile", [x, *given_times])
    holds("Torch.tile", [x, times])
    if min(times, default=0) >= 0 and len(times) >= len(shape) and (times or as_list):
        assert repeated is not None
    if min(times, default=0) >= 0 and (times or as_list):
        assert tiled is not None


@small
@given(dims, st.integers(-1, 3), st.one_of(st.none(), st.integers(-3, 3)))
def test_repeat_interleave_by_one_count_multiplies_the_dim(shape, times, dim):
    x = tensor(shape)
    answer = holds("Tensor.repeat_interleave", [x, times], {} if dim is None else {"dim": dim})
    holds("Torch.repeat_interleave", [x, times, dim])
    if times >= 0 and (dim is None or -len(shape) <= dim < len(shape)):
        assert answer is not None
    assert output_shapes("Torch.repeat_interleave", [x, torch.tensor([2])], {}) is None  # counts as data


@small
@given(dims, st.lists(sizes, max_size=5), st.booleans())
def test_expand_and_broadcast_to_widen_the_ones(shape, size, as_list):
    x = tensor(shape)
    expanded = holds("Tensor.expand", [x, size] if as_list else [x, *size])
    holds("Torch.broadcast_to", [x, size])
    if (size or as_list) and (size == shape or (len(size) >= len(shape) and all(s >= 0 for s in size))):
        target = [n if s == -1 else s for n, s in zip([0] * (len(size) - len(shape)) + shape, size)]
        if all(n in (1, t) for n, t in zip(shape, target[len(size) - len(shape) :])):
            assert expanded is not None


@small
@given(dims, dims)
def test_expand_as_takes_the_others_shape(shape, other):
    holds("Tensor.expand_as", [tensor(shape), tensor(other)])


pads = st.lists(st.integers(-2, 3), min_size=0, max_size=6)


@small
@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=5),
    pads,
    st.sampled_from(["constant", "reflect", "replicate", "circular"]),
)
def test_pad_adds_its_pads_to_the_last_dims(shape, pad, mode):
    answer = holds("Functional.pad", [tensor(shape), pad], {"mode": mode})
    if mode == "constant" and pad and len(pad) % 2 == 0 and len(pad) <= 2 * len(shape):
        out, cropped = list(shape), list(shape)
        for i in range(len(pad) // 2):
            out[-1 - i] += pad[2 * i] + pad[2 * i + 1]
            cropped[-1 - i] += min(pad[2 * i], 0) + min(pad[2 * i + 1], 0)
        assert answer == ([out] if min(out) >= 0 and min(cropped) >= 0 else None)


@small
@given(
    st.integers(1, 3),
    st.lists(st.integers(0, 4), min_size=3, max_size=3),
    st.one_of(
        st.integers(0, 5),
        st.lists(st.integers(0, 5), min_size=1, max_size=3),
        st.floats(0.3, 3.0),
        st.lists(st.floats(0.3, 3.0), min_size=1, max_size=3),
    ),
    st.booleans(),
    st.sampled_from(["nearest", "nearest-exact", "area", "linear", "bilinear", "bicubic", "trilinear"]),
    st.sampled_from([None, True, False]),
    st.sampled_from([None, True]),
)
def test_interpolate_makes_its_size_or_its_scaled_size(spatial, dims_, asked, by_size, mode, corners, recompute):
    x = tensor([2, 3, *dims_[:spatial]])
    key = "size" if isinstance(asked, int) or (isinstance(asked, list) and type(asked[0]) is int) else "scale_factor"
    kwargs = {key: asked, "mode": mode, "align_corners": corners}
    holds("Functional.upsample", [x], kwargs)
    if key == "scale_factor":
        kwargs["recompute_scale_factor"] = recompute
    answer = holds("Functional.interpolate", [x], kwargs)
    holds("Functional.upsample_nearest", [x], {key: asked})
    holds("Functional.upsample_bilinear", [x], {key: asked})
    fits = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}.get(mode, spatial) == spatial
    asked_sizes = ([asked] * spatial if isinstance(asked, int) else asked) if key == "size" else [0]
    plain = corners is None or mode in ("linear", "bilinear")  # align_corners: interpolating modes only
    if fits and plain and min(dims_[:spatial]) > 0 and len(asked_sizes) == spatial and min(asked_sizes) > 0:
        assert answer is not None


# -- products of shapes, windows, views -----------------------------------------------------


@small
@given(dims, dims)
def test_kron_outer_and_cartesian_prod_multiply_their_sizes(a, b):
    x, y = tensor(a), tensor(b)
    assert holds("Torch.kron", [x, y]) is not None
    outer = holds("Torch.outer", [x, y])
    holds("Tensor.ger", [x, y])
    product = holds("Torch.cartesian_prod", [x, y])
    holds("Torch.cartesian_prod", [x])
    if len(a) == len(b) == 1:
        assert outer == [[*a, *b]] and product is not None


@small
@given(dims, st.integers(-4, 3), st.integers(0, 4), st.integers(-1, 3))
def test_tensor_unfold_makes_the_windows_of_a_dim(shape, dim, size, step):
    answer = holds("Tensor.unfold", [tensor(shape), dim, size, step])
    if shape and -len(shape) <= dim < len(shape) and step > 0 and size <= shape[dim]:
        assert answer is not None


@small
@given(
    st.lists(st.integers(1, 6), min_size=3, max_size=4),
    st.one_of(st.integers(0, 3), st.lists(st.integers(1, 3), min_size=2, max_size=2)),
    st.integers(1, 2),
    st.integers(0, 2),
    st.integers(0, 2),
)
def test_functional_unfold_makes_the_blocks_of_im2col(shape, kernel, dilation, padding, stride):
    holds("Functional.unfold", [tensor(shape), kernel], {"dilation": dilation, "padding": padding, "stride": stride})


@small
@given(st.integers(0, 12), st.lists(st.integers(0, 3), max_size=3), st.lists(st.integers(0, 3), max_size=3), sizes)
def test_as_strided_makes_its_size_within_the_storage(storage, size, stride, offset):
    strides = (stride + [1] * len(size))[: len(size)]
    answer = holds("Torch.as_strided", [torch.zeros(storage), size, strides], {"storage_offset": offset})
    if offset >= 0 and (0 in size or offset + sum((n - 1) * s for n, s in zip(size, strides)) < storage):
        assert answer == [size]


# -- calls sized by their tensors' shapes (shape_rules.py) ---------------------------------


@small
@given(st.integers(1, 3), st.integers(0, 3), st.integers(1, 3), st.integers(1, 3), dims, st.booleans())
def test_the_added_products_make_their_products_shape(n, m, p, batch, bias, matching):
    k = m if matching else m + 1
    assert holds("Torch.addmm", [tensor(bias), tensor([n, m]), tensor([m, p])]) in (None, [[n, p]])
    holds("Tensor.addmm", [tensor(bias), tensor([n, m]), tensor([k, p])])
    holds("Torch.addmv", [tensor(bias), tensor([n, m]), tensor([k])])
    holds("Torch.addr", [tensor(bias), tensor([n]), tensor([m])])
    holds("Torch.baddbmm", [tensor(bias), tensor([batch, n, m]), tensor([batch, k, p])])
    holds("Torch.addbmm", [tensor(bias), tensor([batch, n, m]), tensor([batch, k, p])])
    if matching and m:
        assert holds("Torch.addmm", [tensor([n, p]), tensor([n, m]), tensor([m, p])]) == [[n, p]]
        assert holds("Torch.baddbmm", [tensor([p]), tensor([batch, n, m]), tensor([batch, m, p])]) == [[batch, n, p]]


@small
@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=3),
    st.lists(st.integers(0, 4), min_size=1, max_size=3),
    st.integers(-3, 2),
)
def test_gather_makes_its_indexs_shape(shape, index, dim):
    holds("Torch.gather", [tensor(shape), dim, tensor(index, torch.int64)])


@small
@given(
    st.sampled_from([1, 2, 3]),
    st.booleans(),
    st.lists(st.integers(1, 7), min_size=3, max_size=3),
    st.integers(1, 3),
    st.one_of(st.none(), st.integers(1, 3)),
    st.integers(0, 2),
    st.integers(1, 2),
    st.booleans(),
)
def test_a_pool_makes_its_windows(spatial, batched, size, kernel, stride, padding, dilation, ceil_mode):
    x = tensor([2, 3, *size[:spatial]] if batched else [3, *size[:spatial]])
    common = {"kernel_size": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode}
    holds(f"Functional.max_pool{spatial}d", [x], {**common, "dilation": dilation})
    holds(f"Functional.avg_pool{spatial}d", [x], common)
    holds(f"Functional.adaptive_avg_pool{spatial}d", [x, kernel])
    holds(f"Functional.adaptive_avg_pool{spatial}d", [x, [None] * (spatial - 1) + [kernel]])
    assert output_shapes(f"Functional.max_pool{spatial}d", [x, 1], {"return_indices": True}) is None  # two outputs


letters = st.text("abcdij", min_size=0, max_size=3)


@small
@given(
    st.lists(st.tuples(letters, st.booleans()), min_size=1, max_size=3),
    st.one_of(st.none(), st.tuples(letters, st.booleans())),
    st.lists(st.integers(1, 3), min_size=6, max_size=6),
    st.lists(st.integers(0, 2), min_size=3, max_size=3),
)
def test_einsum_makes_its_output_letters(terms, output, sizes, extra):
    by_letter = dict(zip("abcdij", sizes))
    operands, written = [], []
    for (term, dotted), more in zip(terms, extra):
        written.append(("..." if dotted else "") + term)
        operands.append(tensor([*([2] * more if dotted else []), *(by_letter[c] for c in term)]))
    equation = ",".join(written) + ("" if output is None else "->" + ("..." if output[1] else "") + output[0])
    holds("Torch.einsum", [equation, *operands])
    holds("Torch.einsum", [equation, operands])


def test_einsum_reads_the_common_equations():
    q, k = tensor([2, 4, 3, 8]), tensor([2, 4, 5, 8])
    assert holds("Torch.einsum", ["bhqd,bhkd->bhqk", q, k]) == [[2, 4, 3, 5]]
    assert holds("Torch.einsum", ["...d,...d->...", q, q]) == [[2, 4, 3]]
    assert holds("Torch.einsum", ["ij,jk", tensor([2, 3]), tensor([3, 4])]) == [[2, 4]]
    assert holds("Torch.einsum", ["ii->i", tensor([3, 3])]) == [[3]]
    assert holds("Torch.einsum", ["i,j->ij", tensor([3]), tensor([1])]) == [[3, 1]]


@small
@given(dims, st.integers(-1, 4), st.integers(-4, 3), st.booleans())
def test_topk_max_and_min_make_values_and_indices(shape, k, dim, keepdim):
    x = tensor(shape)
    holds_all("Torch.topk", [x, k, dim])
    holds_all("Tensor.topk", [x, k], {"dim": dim})
    for api in ("Torch.max", "Tensor.min"):
        holds_all(api, [x])
        holds_all(api, [x, dim, keepdim])
        holds_all(api, [x], {"dim": dim})
        holds_all(api, [x, tensor(shape[1:])])


def test_topk_max_and_min_read_their_common_forms():
    x = tensor([3, 4])
    assert holds_all("Torch.topk", [x, 2]) == [[3, 2], [3, 2]]
    assert holds_all("Tensor.max", [x]) == [[]]
    assert holds_all("Tensor.max", [x, 1, True]) == [[3, 1], [3, 1]]
    assert holds_all("Torch.min", [x], {"dim": 0}) == [[4], [4]]
    assert holds_all("Torch.min", [x, tensor([4])]) == [[3, 4]]


def holds_all(api: str, args: list, kwargs: dict | None = None) -> list[list[int]] | None:
    """holds() for a call of one output or several."""
    kwargs = kwargs or {}
    answer = output_shapes(api, args, kwargs)
    try:
        out = resolve(api)(*args, **kwargs)
    except REFUSED:
        assert answer is None, (api, [getattr(a, "shape", a) for a in args], kwargs, answer)
        return None
    real = [list(o.shape) for o in out] if isinstance(out, tuple) else [list(out.shape)]
    assert answer is None or answer == real, (api, [getattr(a, "shape", a) for a in args], kwargs, answer, real)
    return answer


@small
@given(
    st.sampled_from(
        ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss", "kl_div", "binary_cross_entropy"]
    ),
    dims,
    st.booleans(),
    st.sampled_from(["mean", "sum", "none", "batchmean"]),
)
def test_a_pointwise_loss_is_one_number_reduced_or_its_inputs_shape(name, shape, same, reduction):
    x = torch.rand(shape)
    target = torch.rand(shape if same else [*shape, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a target of another shape; kl_div's mean
        answer = holds(f"Functional.{name}", [x, target], {"reduction": reduction})
    if same and reduction in ("mean", "sum") and name not in ("soft_margin_loss",):
        assert answer == [[]]


@small
@given(
    st.sampled_from([1, 2]),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(0, 2),
    st.integers(0, 2),
    st.integers(1, 2),
    st.integers(1, 2),
)
def test_conv_transpose_spreads_its_kernel(spatial, size, kernel, stride, padding, extra, dilation, groups):
    x = tensor([2, 2 * groups, *[size] * spatial])
    weight = tensor([2 * groups, 3, *[kernel] * spatial])
    kwargs = {"stride": stride, "padding": padding, "output_padding": extra, "dilation": dilation, "groups": groups}
    holds(f"Functional.conv_transpose{spatial}d", [x, weight, None], kwargs)


@small
@given(dims, dims, st.integers(-4, 3))
def test_cosine_similarity_reduces_the_broadcast_dim(a, b, dim):
    answer = holds("Functional.cosine_similarity", [tensor(a), tensor(b)], {"dim": dim})
    holds("Functional.cosine_similarity", [tensor(a), tensor(b), dim])
    if a == b and a and -len(a) <= dim < len(a):
        assert answer == [[n for at, n in enumerate(a) if at != dim % len(a)]]


@small
@given(st.lists(st.integers(1, 8), min_size=3, max_size=4), st.integers(0, 3), st.integers(-1, 5))
def test_pixel_shuffle_and_one_hot_move_and_make_their_dims(shape, factor, classes):
    holds("Functional.pixel_shuffle", [tensor(shape), factor])
    holds("Functional.pixel_unshuffle", [tensor(shape), factor])
    index = torch.zeros(shape[:2], dtype=torch.int64)
    assert holds("Functional.one_hot", [index, classes]) == ([[*shape[:2], classes]] if classes >= 1 else None)


# -- which calls the meta device still sizes -----------------------------------------------


ISSUE_48 = [
    *("Torch.arange", "Torch.range", "Torch.linspace", "Torch.logspace", "Torch.eye", "Torch.full", "Torch.empty"),
    *("Aten.zeros", "Aten.ones", "Aten.rand", "Aten.randn", "Aten.randint", "Aten.randperm", "Aten.empty_strided"),
    *("Tensor.new_ones", "Tensor.new_empty", "Aten.new_zeros", "Aten.new_full", "Torch.ones_like", "Torch.full_like"),
    *("Aten.zeros_like", "Aten.rand_like", "Aten.randn_like", "Aten.randint_like", "Torch.empty_like"),
    *("Tensor.repeat", "Tensor.expand", "Tensor.expand_as", "Torch.broadcast_to", "Tensor.tile", "Functional.pad"),
    *("Functional.interpolate", "Functional.upsample", "Functional.upsample_nearest", "Functional.upsample_bilinear"),
    *("Torch.kron", "Torch.outer", "Torch.ger", "Torch.cartesian_prod", "Tensor.unfold", "Functional.unfold"),
    *("Aten.as_strided", "Tensor.repeat_interleave"),
    *("Torch.addmm", "Tensor.baddbmm", "Torch.addbmm", "Torch.addmv", "Torch.addr", "Tensor.gather"),
    *("Functional.max_pool2d", "Functional.avg_pool1d", "Functional.adaptive_avg_pool2d", "Tensor.index_add_"),
    *("Tensor.scatter_", "Tensor.fill_", "Tensor.zero_", "Tensor.copy_", "Functional.dropout2d"),
    *("Torch.einsum", "Torch.topk", "Tensor.max", "Torch.min", "Functional.mse_loss", "Functional.kl_div"),
    *("Functional.conv_transpose2d", "Functional.pixel_shuffle", "Functional.one_hot", "Torch.roll"),
    *("Tensor.argsort", "Functional.normalize", "Tensor.__setitem__", "Functional.cosine_similarity"),
]


@pytest.mark.parametrize("api", ISSUE_48)
def test_an_argument_sized_call_needs_no_meta_device(api):
    assert not output_bounds.sized_on_meta("pytorch", api)


def test_functional_unfold_is_im2col_not_tensor_unfold():
    assert shape_rules.rule_for("Functional.unfold") is size_rules.QUALIFIED["Functional.unfold"]
    assert shape_rules.rule_for("Tensor.unfold") is size_rules.RULES["unfold"]


# -- as a user runs it -----------------------------------------------------------------------

RECORD_IMPORTS = """
import sys

def pytest_unconfigure(config):
    process = getattr(config, "workerinput", {}).get("workerid", "main")
    with open(f"imported-{process}", "w") as handle:
        handle.write(" ".join(str(name in sys.modules) for name in ("torch", "torch._dynamo", "sympy")))
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_dump_of_argument_sized_calls_runs_without_dynamo_or_sympy(pytester, copy_dump, workers):
    """tests/data/sized_calls, written by msprobe (make/sized_calls.py): every call sized by its rule,
    none on the meta device, so no process imports what its first call would (a fresh process each:
    this one warmed the meta device up long ago)."""
    pytester.makeconftest(RECORD_IMPORTS)
    result = run_msprobe(pytester, copy_dump("sized_calls"), *workers, device="cpu", subprocess=True)
    result.assert_outcomes(passed=65)
    imported = {path.name: path.read_text() for path in pytester.path.glob("imported-*")}
    checking = sorted(name for name, said in imported.items() if said.startswith("True"))  # torch imported
    assert checking == (["imported-gw0", "imported-gw1"] if workers else ["imported-main"]), imported
    assert all(said.endswith("False False") for said in imported.values()), imported
