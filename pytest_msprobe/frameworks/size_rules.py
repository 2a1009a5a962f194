"""The output shapes of the calls whose arguments ask a size: factories, repeats, pads, resizes.

`eye(60000)`, `x.repeat(1000, 1000)` or `interpolate(size=...)` make what their arguments ask,
whatever their inputs hold: the reason --msprobe-max-elements sizes a call before it runs
(output_bounds.py). The meta device would answer too, but its first call imports sympy and
torch._dynamo (2 s, as long as importing torch) in every process that meets such an entry; the
sizes these calls make are arithmetic, so they are read here (issue 48). As in shape_rules.py, a
call out of its rule's form (a tensor where a number goes, a dtype that truncates its steps, shapes
the call refuses) answers None and is left to the meta device. tests/test_size_rules.py holds
each rule to the shape the call itself makes on drawn arguments.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Real
from typing import Any, Callable

Shape = list[int]
Rule = Callable[[list, dict], "Shape | None"]


def _argument(args: list, kwargs: dict, at: int, name: str, default: Any = None) -> Any:
    return args[at] if len(args) > at else kwargs.get(name, default)


def _int(value: Any) -> int:
    if type(value) is not int:  # a bool, a tensor, a float: not this rule's form
        raise TypeError(f"not an int: {value!r}")
    return value


def _count(value: Any) -> int:
    """A size: an int, 0 or more."""
    if _int(value) < 0:
        raise ValueError("a negative size")
    return value


def _sizes(value: Any) -> Shape:
    """A list, tuple or torch.Size of sizes."""
    if not isinstance(value, (list, tuple)):
        raise TypeError("not a list of sizes")
    return [_count(v) for v in value]


def _varargs_size(args: list, kwargs: dict, start: int, name: str = "size") -> Shape:
    """A size given as ints one by one (`zeros(2, 3)`, `x.repeat(2, 3)`), as one list (`zeros([2,
    3])`), or by keyword."""
    given = args[start:]
    if not given:
        return _sizes(kwargs[name])
    if len(given) == 1 and isinstance(given[0], (list, tuple)):
        return _sizes(given[0])
    return _sizes(given)


def tensor_shape(value: Any) -> Shape:
    import torch

    if not isinstance(value, torch.Tensor):
        raise TypeError("not a tensor")
    return list(value.shape)


# -- factories -----------------------------------------------------------------------------


def _factory(args: list, kwargs: dict) -> Shape | None:
    """zeros, ones, empty, rand, randn: `(*size)` or `(size)`."""
    return _varargs_size(args, kwargs, 0)


def _sized_first(args: list, kwargs: dict) -> Shape | None:
    """full(size, fill_value), empty_strided(size, stride)."""
    return _sizes(_argument(args, kwargs, 0, "size"))


def _new_factory(args: list, kwargs: dict) -> Shape | None:
    """Tensor.new_zeros / new_ones / new_empty: `(self, *size)` or `(self, size)`."""
    tensor_shape(args[0])
    return _varargs_size(args, kwargs, 1)


def _new_sized(args: list, kwargs: dict) -> Shape | None:
    """Tensor.new_full(size, fill_value), new_empty_strided(size, stride)."""
    tensor_shape(args[0])
    return _sizes(_argument(args, kwargs, 1, "size"))


def _like(args: list, kwargs: dict) -> Shape | None:
    """zeros_like, full_like, rand_like, ...: the input's shape."""
    return tensor_shape(_argument(args, kwargs, 0, "input"))


def _eye(args: list, kwargs: dict) -> Shape | None:
    n = _count(_argument(args, kwargs, 0, "n"))
    m = _argument(args, kwargs, 1, "m")
    return [n, n if m is None else _count(m)]


def _randint(args: list, kwargs: dict) -> Shape | None:
    """randint(high, size) or randint(low, high, size): the size is the last positional argument."""
    size = kwargs["size"] if "size" in kwargs else args[-1]
    return _sizes(size)


def _randperm(args: list, kwargs: dict) -> Shape | None:
    return [_count(_argument(args, kwargs, 0, "n"))]


def _steps(args: list, kwargs: dict) -> Shape | None:
    """linspace(start, end, steps), logspace(start, end, steps, base)."""
    for value in (_argument(args, kwargs, 0, "start"), _argument(args, kwargs, 1, "end")):
        _real(value)
    return [_count(_argument(args, kwargs, 2, "steps"))]


def _real(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise TypeError(f"not a finite number: {value!r}")
    return value  # type: ignore[return-value]


def _range_bounds(args: list, kwargs: dict, end_alone: bool) -> tuple[int | float, int | float, int | float] | None:
    """(start, end, step) of arange (`end_alone`: arange(end) too) or range, as given; None where a
    dtype truncates them."""
    if end_alone and ((len(args) == 1 and "end" not in kwargs) or (not args and "start" not in kwargs)):
        start, end, step = 0, _argument(args, kwargs, 0, "end"), kwargs.get("step", 1)  # arange(end)
    else:
        start, end = _argument(args, kwargs, 0, "start"), _argument(args, kwargs, 1, "end")
        step = _argument(args, kwargs, 2, "step", 1)
    bounds = (_real(start), _real(end), _real(step))
    dtype = kwargs.get("dtype")
    ints = all(type(v) is int for v in bounds)
    if dtype is not None and (dtype.is_complex or (not dtype.is_floating_point and not ints)):
        return None  # an integer dtype casts the bounds first
    if step == 0 or (end - start) * step < 0:
        return None  # the call refuses them
    return bounds


def _arange(args: list, kwargs: dict) -> Shape | None:
    """ceil((end - start) / step): exact for integers, in double as PyTorch computes it otherwise."""
    bounds = _range_bounds(args, kwargs, end_alone=True)
    if bounds is None:
        return None
    start, end, step = bounds
    if all(type(v) is int for v in bounds):
        return [math.ceil(Fraction(end - start, step))]  # type: ignore[arg-type]
    return [math.ceil((float(end) - float(start)) / float(step))]


def _range(args: list, kwargs: dict) -> Shape | None:
    """torch.range (end included): floor((end - start) / step) + 1."""
    bounds = _range_bounds(args, kwargs, end_alone=False)
    if bounds is None:
        return None
    start, end, step = bounds
    if all(type(v) is int for v in bounds):
        return [int(Fraction(end - start, step)) + 1]  # type: ignore[arg-type]
    return [int((float(end) - float(start)) / float(step) + 1)]


# -- a tensor made larger by its arguments ------------------------------------------------


def _repeat(args: list, kwargs: dict) -> Shape | None:
    """Tensor.repeat(*sizes): the shape, ones in front where the sizes are more, times the sizes."""
    shape, times = tensor_shape(args[0]), _varargs_size(args, kwargs, 1, "repeats")
    if len(times) < len(shape):
        return None
    shape = [1] * (len(times) - len(shape)) + shape
    return [n * t for n, t in zip(shape, times)]


def _repeat_interleave(args: list, kwargs: dict) -> Shape | None:
    """repeat_interleave(input, repeats, dim) with one count for every element: the dim (or the
    flattened input) times it; counts in a tensor are data (output_bounds.DATA_SIZED)."""
    shape, times = tensor_shape(args[0]), _count(_argument(args, kwargs, 1, "repeats"))
    dim = _argument(args, kwargs, 2, "dim")
    if dim is None:
        return [math.prod(shape) * times]
    if not -len(shape) <= _int(dim) < len(shape):
        return None
    out = list(shape)
    out[dim] *= times
    return out


def _tile(args: list, kwargs: dict) -> Shape | None:
    """tile(input, dims): repeat, the shorter of shape and dims padded with ones in front."""
    shape, dims = tensor_shape(args[0]), _varargs_size(args, kwargs, 1, "dims")
    rank = max(len(shape), len(dims))
    shape, dims = [1] * (rank - len(shape)) + shape, [1] * (rank - len(dims)) + dims
    return [n * t for n, t in zip(shape, dims)]


def _expanded(shape: Shape, sizes: list) -> Shape | None:
    """expand's shape: -1 keeps a dim, a dim of 1 takes any size, new dims in front."""
    sizes = [_int(s) for s in sizes]
    if len(sizes) < len(shape):
        return None
    new, kept = sizes[: len(sizes) - len(shape)], sizes[len(sizes) - len(shape) :]
    if any(s < 0 for s in new):
        return None
    out = []
    for n, s in zip(shape, kept):
        if s == -1 or s == n:
            out.append(n)
        elif n == 1 and s >= 0:
            out.append(s)
        else:
            return None
    return new + out


def _expand(args: list, kwargs: dict) -> Shape | None:
    given = args[1:]
    sizes = given[0] if len(given) == 1 and isinstance(given[0], (list, tuple)) else given or kwargs["size"]
    if not isinstance(sizes, (list, tuple)):
        raise TypeError("not a list of sizes")
    return _expanded(tensor_shape(args[0]), list(sizes))


def _expand_as(args: list, kwargs: dict) -> Shape | None:
    return _expanded(tensor_shape(args[0]), tensor_shape(_argument(args, kwargs, 1, "other")))


def _broadcast_to(args: list, kwargs: dict) -> Shape | None:
    size = _argument(args, kwargs, 1, "size")
    if not isinstance(size, (list, tuple)):
        raise TypeError("not a list of sizes")
    return _expanded(tensor_shape(_argument(args, kwargs, 0, "input")), list(size))


def _pad(args: list, kwargs: dict) -> Shape | None:
    """F.pad: pad[2i], pad[2i + 1] before and after the i-th dim from the last (negative crops)."""
    shape = tensor_shape(_argument(args, kwargs, 0, "input"))
    pad = [_int(p) for p in _argument(args, kwargs, 1, "pad")]
    mode = _argument(args, kwargs, 2, "mode", "constant")
    if len(pad) % 2 or len(pad) > 2 * len(shape) or not pad:
        return None
    padded = len(pad) // 2
    if mode != "constant":
        # reflect, replicate, circular: 1 to 3 dims padded, with a batch and a channel dim or without the batch
        if padded > 3 or len(shape) not in (padded + 1, padded + 2) or not all(shape):
            return None
        limits = {"reflect": lambda n: n - 1, "circular": lambda n: n, "replicate": lambda n: math.inf}
        if mode not in limits or any(p > limits[mode](n) for n, p in zip(shape[::-1], _pairs(pad))):
            return None
    out = list(shape)
    for i in range(padded):
        before, after = pad[2 * i], pad[2 * i + 1]
        if shape[-1 - i] + min(before, 0) + min(after, 0) < 0:
            return None  # the negative pads crop more than the dim holds
        out[-1 - i] = shape[-1 - i] + before + after
    if min(out) < (1 if mode != "constant" else 0):
        return None
    return out


def _pairs(pad: list[int]) -> list[int]:
    """The larger pad of each padded dim, the last dim first."""
    return [max(pad[i], pad[i + 1]) for i in range(0, len(pad), 2)]


_MODE_RANK = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}


def _resized(shape: Shape, size: Any, scale: Any, mode: Any, align_corners: Any, antialias: Any) -> Shape | None:
    """interpolate's output: N, C, then each spatial dim `size` or floor(dim * scale_factor)."""
    spatial = len(shape) - 2
    if not 1 <= spatial <= 3 or (size is None) == (scale is None) or not isinstance(mode, str):
        return None
    if _MODE_RANK.get(mode, len(shape)) != len(shape) or mode not in (*_MODE_RANK, "nearest", "nearest-exact", "area"):
        return None
    if (align_corners is not None and mode not in _MODE_RANK) or (antialias and mode not in ("bilinear", "bicubic")):
        return None
    if size is not None:
        sizes = [_count(size)] * spatial if not isinstance(size, (list, tuple)) else [_count(s) for s in size]
    else:
        scales = [_real(scale)] * spatial if not isinstance(scale, (list, tuple)) else [_real(s) for s in scale]
        if len(scales) != spatial or min(scales) <= 0:
            return None
        sizes = [math.floor(float(n) * float(s)) for n, s in zip(shape[2:], scales)]
    if len(sizes) != spatial or min(sizes) < 1 or min(shape[1:]) < 1:
        return None
    return [*shape[:2], *sizes]


def _interpolate(args: list, kwargs: dict) -> Shape | None:
    """interpolate / upsample(input, size, scale_factor, mode, align_corners, ...)."""
    return _resized(
        tensor_shape(_argument(args, kwargs, 0, "input")),
        _argument(args, kwargs, 1, "size"),
        _argument(args, kwargs, 2, "scale_factor"),
        _argument(args, kwargs, 3, "mode", "nearest"),
        _argument(args, kwargs, 4, "align_corners"),
        _argument(args, kwargs, 6, "antialias", False),
    )


def _upsample_as(mode: str) -> Rule:
    """upsample_nearest / upsample_bilinear(input, size, scale_factor)."""

    def rule(args: list, kwargs: dict) -> Shape | None:
        shape = tensor_shape(_argument(args, kwargs, 0, "input"))
        size, scale = _argument(args, kwargs, 1, "size"), _argument(args, kwargs, 2, "scale_factor")
        return _resized(shape, size, scale, mode, True if mode == "bilinear" else None, False)

    return rule


# -- products of shapes --------------------------------------------------------------------


def _kron(args: list, kwargs: dict) -> Shape | None:
    a, b = tensor_shape(args[0]), tensor_shape(_argument(args, kwargs, 1, "other"))
    rank = max(len(a), len(b))
    a, b = [1] * (rank - len(a)) + a, [1] * (rank - len(b)) + b
    return [m * n for m, n in zip(a, b)]


def _outer(args: list, kwargs: dict) -> Shape | None:
    a, b = tensor_shape(args[0]), tensor_shape(_argument(args, kwargs, 1, "vec2"))
    return [*a, *b] if len(a) == len(b) == 1 else None


def _cartesian_prod(args: list, kwargs: dict) -> Shape | None:
    shapes = [tensor_shape(t) for t in args]
    if not shapes or any(len(s) != 1 for s in shapes):
        return None
    return shapes[0] if len(shapes) == 1 else [math.prod(s[0] for s in shapes), len(shapes)]


# -- windows and views ---------------------------------------------------------------------


def _unfold(args: list, kwargs: dict) -> Shape | None:
    """Tensor.unfold(dimension, size, step): the dim's windows, each window's `size` as a new last dim."""
    shape = tensor_shape(args[0])
    dim = _int(_argument(args, kwargs, 1, "dimension"))
    size, step = _count(_argument(args, kwargs, 2, "size")), _int(_argument(args, kwargs, 3, "step"))
    if not shape or not -len(shape) <= dim < len(shape) or step < 1 or size > shape[dim]:
        return None
    out = list(shape)
    out[dim] = (shape[dim] - size) // step + 1
    return [*out, size]


def _im2col(args: list, kwargs: dict) -> Shape | None:
    """F.unfold(input, kernel_size, dilation, padding, stride): (N, C * kernel, blocks)."""
    shape = tensor_shape(_argument(args, kwargs, 0, "input"))
    kernel, dilation, padding, stride = (
        _pair(_argument(args, kwargs, at, name, default))
        for at, name, default in ((1, "kernel_size", None), (2, "dilation", 1), (3, "padding", 0), (4, "stride", 1))
    )
    if len(shape) not in (3, 4) or min(kernel) < 1 or min(dilation) < 1 or min(padding) < 0 or min(stride) < 1:
        return None
    windows = zip(shape[-2:], kernel, dilation, padding, stride)
    blocks = [(n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, d, p, s in windows]
    if min(blocks) < 1 or shape[-3] < 1:
        return None
    return [*shape[:-3], shape[-3] * math.prod(kernel), math.prod(blocks)]


def _pair(value: Any) -> list[int]:
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError("not a pair")
        return [_int(v) for v in value]
    return [_int(value)] * 2


def _as_strided(args: list, kwargs: dict) -> Shape | None:
    """as_strided(input, size, stride, storage_offset): `size`, where its last element lies in the storage."""
    tensor = args[0]
    tensor_shape(tensor)
    size = _sizes(_argument(args, kwargs, 1, "size"))
    stride = _sizes(_argument(args, kwargs, 2, "stride"))
    offset = _argument(args, kwargs, 3, "storage_offset")
    offset = tensor.storage_offset() if offset is None else _count(offset)
    if len(size) != len(stride):
        return None
    if 0 not in size:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= tensor.untyped_storage().nbytes() // tensor.element_size():
            return None  # out of the storage: the call refuses it
    return size


RULES: dict[str, Rule] = {
    **dict.fromkeys(("zeros", "ones", "empty", "rand", "randn"), _factory),
    **dict.fromkeys(("full", "empty_strided"), _sized_first),
    **dict.fromkeys(("new_zeros", "new_ones", "new_empty"), _new_factory),
    **dict.fromkeys(("new_full", "new_empty_strided"), _new_sized),
    **dict.fromkeys(
        ("zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"), _like
    ),
    "eye": _eye,
    "randint": _randint,
    "randperm": _randperm,
    "linspace": _steps,
    "logspace": _steps,
    "arange": _arange,
    "range": _range,
    "repeat": _repeat,
    "repeat_interleave": _repeat_interleave,
    "tile": _tile,
    "expand": _expand,
    "expand_as": _expand_as,
    "broadcast_to": _broadcast_to,
    "pad": _pad,
    "interpolate": _interpolate,
    "upsample": _interpolate,
    "upsample_nearest": _upsample_as("nearest"),
    "upsample_bilinear": _upsample_as("bilinear"),
    "kron": _kron,
    "outer": _outer,
    "ger": _outer,
    "cartesian_prod": _cartesian_prod,
    "unfold": _unfold,
    "as_strided": _as_strided,
}

# Where one name means two calls: F.unfold (im2col) is not Tensor.unfold.
QUALIFIED: dict[str, Rule] = {"Functional.unfold": _im2col}
