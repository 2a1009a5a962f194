"""The index arguments of PyTorch APIs, checked against the tensors they index before any call.

Some kernels trust their indices: `max_pool2d_with_indices_backward` with an index of 5000 on a
4x4 input writes past its buffer (at 10^12 it segfaults), `ctc_loss` reads past its log-probs at
a target of the class count. A real run's indices lie inside what they index; a dump's are data
from a file we did not write (statistics that random data is drawn from, or a tensor file). So
every index argument an API table below names is checked, for random and real data alike, and
an entry whose indices leave their range is never called (a SKIP naming the entry, the field and
the bound). The rebuild draws random indices inside the same ranges (inputs.Rebuilder).

Kernels that take raw sizes, strides or storage offsets and check none of them are not called
at all (apis.py's "unchecked kernel" group); which API got which treatment is listed by
bench/studies/index_safety.py.

Pure data and torch: no pytest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..inputs.rebuild import IndexBound


@dataclass(frozen=True)
class Params:
    """A call's arguments by the API's parameter names (positional or keyword)."""

    names: tuple[str, ...]
    args: Sequence[Any]
    kwargs: Mapping[str, Any]

    def where(self, name: str) -> tuple[int | None, str | None]:
        """(position, keyword) the argument was passed at; (None, None) when it was not."""
        if name in self.kwargs:
            return None, name
        position = self.names.index(name)
        return (position, None) if position < len(self.args) else (None, None)

    def get(self, name: str, default: Any = None) -> Any:
        position, key = self.where(name)
        if key is not None:
            return self.kwargs[key]
        return self.args[position] if position is not None else default

    def shape(self, name: str) -> list[int] | None:
        value = self.get(name)
        return list(value.shape) if isinstance(value, torch.Tensor) else None

    def integer(self, name: str, default: int | None = None) -> int | None:
        value = self.get(name, default)
        if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
            return int(value.item())
        return value if isinstance(value, int) and not isinstance(value, bool) else default


# A valid range from the call's other arguments: (low, high inclusive, what bounds it), or None
# where the call gives none (an argument missing or of another kind: the kernel's own checks apply).
Valid = Callable[[Params], "tuple[int, int, str] | None"]


@dataclass(frozen=True)
class Rule:
    """One index argument of an API: its parameter name and what bounds its values."""

    index: str
    valid: Valid
    extras: Callable[[Params], frozenset[int]] = lambda p: frozenset()  # values also taken (ignore_index)
    ordered: bool = False  # non-decreasing from `low` (embedding_bag's offsets)


def _dim_size(tensor: str, dim: str, negative: bool = False) -> Valid:
    """Along `dim` of `tensor`: [0, size) or, where the API takes negative indices, [-size, size)."""

    def valid(p: Params) -> tuple[int, int, str] | None:
        shape, d = p.shape(tensor), p.integer(dim)
        if shape is None or d is None:
            return None
        sizes = shape or [1]  # a 0-dim tensor indexes as one element
        if not -len(sizes) <= d < len(sizes):
            return None  # the kernel refuses the dim itself
        size = sizes[d]
        return (-size if negative else 0), size - 1, f"dimension {d} of {tensor}, of size {size}"

    return valid


def _elements(tensor: str) -> Valid:
    """Into the flattened tensor, negative from its end: [-numel, numel)."""

    def valid(p: Params) -> tuple[int, int, str] | None:
        shape = p.shape(tensor)
        if shape is None:
            return None
        n = math.prod(shape)
        return -n, n - 1, f"the {n} elements of {tensor}"

    return valid


def _rows(tensor: str) -> Valid:
    def valid(p: Params) -> tuple[int, int, str] | None:
        shape = p.shape(tensor)
        if not shape:
            return None
        return 0, shape[0] - 1, f"the {shape[0]} rows of {tensor}"

    return valid


def _count(name: str, what: str) -> Valid:
    """[0, an integer argument)."""

    def valid(p: Params) -> tuple[int, int, str] | None:
        n = p.integer(name)
        return None if n is None or n <= 0 else (0, n - 1, f"{name} {n} ({what})")

    return valid


def _plane(tensor: str, dims: int) -> Valid:
    """Into the last `dims` dimensions of `tensor`, flattened: a pooling's indices."""

    def valid(p: Params) -> tuple[int, int, str] | None:
        shape = p.shape(tensor)
        if shape is None or len(shape) < dims:
            return None
        n = math.prod(shape[-dims:])
        return 0, n - 1, f"the {'x'.join(map(str, shape[-dims:]))} plane of {tensor}"

    return valid


def _classes(tensor: str, negative_one: bool = False) -> Valid:
    """Class indices of a loss: [0, C), C the class dimension of `tensor` (dim 1, or 0 for one sample)."""

    def valid(p: Params) -> tuple[int, int, str] | None:
        shape = p.shape(tensor)
        if not shape:
            return None
        classes = shape[1] if len(shape) >= 2 else shape[0]
        return (-1 if negative_one else 0), classes - 1, f"the {classes} classes of {tensor}"

    return valid


def _last(tensor: str) -> Valid:
    def valid(p: Params) -> tuple[int, int, str] | None:
        shape = p.shape(tensor)
        if not shape:
            return None
        return 0, shape[-1] - 1, f"the {shape[-1]} classes of {tensor}"

    return valid


def _up_to(tensor: str, dim: int, what: str) -> Valid:
    """[0, size] of `tensor` along `dim`, inclusive: a length, an offset into it."""

    def valid(p: Params) -> tuple[int, int, str] | None:
        shape = p.shape(tensor)
        if shape is None or not -len(shape) <= dim < len(shape):
            return None
        return 0, shape[dim], f"{what} {shape[dim]} of {tensor}"

    return valid


def _numel(tensor: str) -> Valid:
    def valid(p: Params) -> tuple[int, int, str] | None:
        shape = p.shape(tensor)
        if shape is None or len(shape) != 1:
            return None  # 2-D input: offsets are not used
        return 0, shape[0], f"the length {shape[0]} of {tensor}"

    return valid


def _int_arg(name: str, default: int) -> Callable[[Params], frozenset[int]]:
    def extras(p: Params) -> frozenset[int]:
        value = p.integer(name, default)
        return frozenset() if value is None else frozenset({value})

    return extras


@dataclass(frozen=True)
class Api:
    """The parameters of one API as its type calls it, and its index arguments."""

    params: str  # names, space-separated, in order
    rules: tuple[Rule, ...]


def _pooling(dims: int) -> Api:
    return Api(
        "grad_output self kernel_size stride padding dilation ceil_mode indices",
        (Rule("indices", _plane("self", dims)),),
    )


def _adaptive(dims: int) -> Api:
    return Api("grad_output self indices", (Rule("indices", _plane("self", dims)),))


_EMBEDDING_BAG_ATEN = Api(
    "weight indices offsets scale_grad_by_freq mode sparse per_sample_weights include_last_offset padding_idx",
    (Rule("indices", _rows("weight")), Rule("offsets", _numel("indices"), ordered=True)),
)
_CTC = (
    Rule("targets", _last("log_probs")),
    Rule("input_lengths", _up_to("log_probs", 0, "the time steps")),
)
_CTC_PARAMS = "log_probs targets input_lengths target_lengths blank"
_NLL_ATEN = Api(
    "self target weight reduction ignore_index",
    (Rule("target", _classes("self"), _int_arg("ignore_index", -100)),),
)
_NLL_BACKWARD = Api(
    "grad_output self target weight reduction ignore_index total_weight",
    (Rule("target", _classes("self"), _int_arg("ignore_index", -100)),),
)
_ALONG = {  # Tensor.x(self, dim, index, ...) and torch.x(input, dim, index, ...): [0, size) along dim
    "gather": "input dim index",
    "scatter": "input dim index src",
    "scatter_": "input dim index src",
    "scatter_add": "input dim index src",
    "scatter_add_": "input dim index src",
    "scatter_reduce": "input dim index src",
    "scatter_reduce_": "input dim index src",
    "index_select": "input dim index",
    "index_add": "input dim index source",
    "index_add_": "input dim index source",
    "index_copy": "input dim index source",
    "index_copy_": "input dim index source",
    "index_reduce": "input dim index source",
    "index_reduce_": "input dim index source",
}
_NEGATIVE_ALONG = {"index_fill": "input dim index value", "index_fill_": "input dim index value"}


def _along(params: str, negative: bool = False) -> Api:
    return Api(params, (Rule("index", _dim_size("input", "dim", negative)),))


def _take_along_dim(p: Params) -> tuple[int, int, str] | None:
    if p.get("dim") is None:
        return _elements("input")(p)
    return _dim_size("input", "dim", negative=True)(p)


def _unpool_plane(p: Params) -> tuple[int, int, str] | None:
    """aten's max_unpool: into the output plane its output_size names."""
    size = p.get("output_size")
    if not isinstance(size, (list, tuple)) or not size or not all(isinstance(s, int) for s in size):
        return None
    return 0, math.prod(size) - 1, f"output_size {list(size)}"


_UNPOOL = (Rule("indices", _unpool_plane),)
_PUBLIC: dict[str, Api] = {
    **{name: _along(params) for name, params in _ALONG.items()},
    **{name: _along(params, negative=True) for name, params in _NEGATIVE_ALONG.items()},
    "take": Api("input index", (Rule("index", _elements("input")),)),
    "put": Api("input index source accumulate", (Rule("index", _elements("input")),)),
    "put_": Api("input index source accumulate", (Rule("index", _elements("input")),)),
    "take_along_dim": Api("input indices dim", (Rule("indices", _take_along_dim),)),
}

# By entry type, then API (overloads of an aten API share its rules). Parameter names as torch's
# (a method's self is `input`): they bind keyword arguments, and name nothing else.
RULES: Mapping[str, Mapping[str, Api]] = {
    "Functional": {
        "embedding": Api("input weight padding_idx max_norm", (Rule("input", _rows("weight")),)),
        "embedding_bag": Api(
            "input weight offsets max_norm norm_type scale_grad_by_freq mode sparse per_sample_weights",
            (Rule("input", _rows("weight")), Rule("offsets", _numel("input"), ordered=True)),
        ),
        "ctc_loss": Api(_CTC_PARAMS, _CTC),
        "nll_loss": Api(
            "input target weight size_average ignore_index",
            (Rule("target", _classes("input"), _int_arg("ignore_index", -100)),),
        ),
        "cross_entropy": Api(
            "input target weight size_average ignore_index",
            (Rule("target", _classes("input"), _int_arg("ignore_index", -100)),),
        ),
        "multi_margin_loss": Api("input target", (Rule("target", _classes("input")),)),
        "multilabel_margin_loss": Api("input target", (Rule("target", _classes("input", negative_one=True)),)),
        "one_hot": Api("tensor num_classes", (Rule("tensor", _count("num_classes", "classes")),)),
    },
    "Tensor": _PUBLIC,
    "Torch": {
        **_PUBLIC,
        "embedding": Api("weight indices padding_idx", (Rule("indices", _rows("weight")),)),
        "embedding_bag": _EMBEDDING_BAG_ATEN,
        "embedding_renorm_": Api("input indices", (Rule("indices", _rows("input")),)),
        "ctc_loss": Api(_CTC_PARAMS, _CTC),
    },
    "Aten": {
        **_PUBLIC,
        "embedding": Api("weight indices padding_idx", (Rule("indices", _rows("weight")),)),
        "embedding_dense_backward": Api(
            "grad_output indices num_weights padding_idx",
            (Rule("indices", _count("num_weights", "rows of the weight"), _int_arg("padding_idx", -1)),),
        ),
        "embedding_backward": Api(
            "grad indices num_weights padding_idx",
            (Rule("indices", _count("num_weights", "rows of the weight"), _int_arg("padding_idx", -1)),),
        ),
        "embedding_bag": _EMBEDDING_BAG_ATEN,
        "_embedding_bag": _EMBEDDING_BAG_ATEN,
        "_embedding_bag_forward_only": _EMBEDDING_BAG_ATEN,
        "ctc_loss": Api(_CTC_PARAMS, _CTC),
        "_ctc_loss": Api(_CTC_PARAMS, _CTC),
        "nll_loss": _NLL_ATEN,
        "nll_loss_forward": _NLL_ATEN,
        "nll_loss2d_forward": _NLL_ATEN,
        "nll_loss_backward": _NLL_BACKWARD,
        "nll_loss2d_backward": _NLL_BACKWARD,
        "multi_margin_loss": Api("self target", (Rule("target", _classes("self")),)),
        "multilabel_margin_loss_forward": Api("self target", (Rule("target", _classes("self", negative_one=True)),)),
        "max_pool2d_with_indices_backward": _pooling(2),
        "max_pool3d_with_indices_backward": _pooling(3),
        "adaptive_max_pool2d_backward": _adaptive(2),
        "adaptive_max_pool3d_backward": _adaptive(3),
        "max_unpool2d": Api("self indices output_size", _UNPOOL),
        "max_unpool3d": Api("self indices output_size stride padding", _UNPOOL),
    },
}


def api_of(entry: str) -> tuple[str, str] | None:
    """(type, API without its aten overload) of an entry name `Aten.max_pool2d.default.0.forward`."""
    head = entry.rsplit(".", 2)[0]
    if "." not in head:
        return None
    api_type, api = head.split(".", 1)
    if api_type == "Aten" and "." in api:
        api = api.split(".", 1)[0]
    return api_type, api


def rules_of(api_type: str, api: str) -> Api | None:
    return RULES.get(api_type, {}).get(api)


def bounds(entry: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[IndexBound]:
    """The index arguments of an entry's call (a forward entry's `input_args`/`input_kwargs`) and
    the ranges their values must lie in, from the call's other arguments."""
    found = api_of(entry)
    table = rules_of(*found) if found else None
    if table is None:
        return []
    params = Params(tuple(table.params.split()), args, kwargs)
    out: list[IndexBound] = []
    for rule in table.rules:
        if rule.index not in params.names:
            continue
        position, key = params.where(rule.index)
        if position is None and key is None:
            continue
        try:
            valid = rule.valid(params)
        except (TypeError, ValueError, IndexError):
            valid = None
        if valid is None:
            continue
        low, high, what = valid
        field = f"input_args[{position}]" if key is None else f"input_kwargs.{key}"
        out.append(IndexBound(field, position, key, low, high, what, rule.extras(params), rule.ordered))
    return out


def refusal(entry: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, why) of the first index argument whose values leave their range, or None."""
    for bound in bounds(entry, args, kwargs):
        value = kwargs[bound.key] if bound.key is not None else args[bound.position or 0]
        why = outside(bound, value)
        if why:
            return bound.field, why
    return None


def outside(bound: IndexBound, value: Any) -> str | None:
    """Why `value` (an integer tensor, or a list of ints) does not lie in the bound, or None."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        value = torch.tensor(value, dtype=torch.int64) if value else None
    if not isinstance(value, torch.Tensor) or value.is_floating_point() or value.is_complex() or value.numel() == 0:
        return None  # class probabilities, a bool mask: no indices
    if value.dtype == torch.bool:
        return None
    flat = value.detach().reshape(-1).to("cpu", torch.int64)
    if bound.extras:
        flat = flat[~torch.isin(flat, torch.tensor(sorted(bound.extras), dtype=torch.int64))]
        if flat.numel() == 0:
            return None
    low, high = int(flat.min()), int(flat.max())
    taken = f" (or {', '.join(map(str, sorted(bound.extras)))})" if bound.extras else ""
    if low < bound.low or high > bound.high:
        return (
            f"indices in [{low}, {high}], outside [{bound.low}, {bound.high}]{taken}, {bound.what}: "
            "a real run's indices lie inside what they index, and a kernel that trusts them would read "
            "or write out of bounds, so it is never called"
        )
    if bound.ordered and not bool((flat[1:] >= flat[:-1]).all()):
        return f"offsets not in increasing order, as a real run's are ({bound.what}): never called"
    return None
