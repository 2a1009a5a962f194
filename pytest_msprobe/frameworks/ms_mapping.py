"""MindSpore API -> its PyTorch equivalent, the benchmark of a MindSpore entry.

A table, read top to bottom: `Mint.x` mirrors `torch.x` name for name and
argument for argument, `MintFunctional.x` mirrors `torch.nn.functional.x`;
`mindspore.ops` (`Functional.x`) and `Tensor` methods speak MindSpore's older
dialect (`axis` for `dim`, `keep_dims` for `keepdim`), which RENAMES
translates; the few whose positional conventions differ get a small adapter
below the table. An API absent from the table is not benchmarked (a SKIP that
names it). Imported only with frameworks/mindspore.py, which imports torch.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

# MindSpore keyword -> PyTorch keyword, for ops and Tensor methods.
RENAMES: Mapping[str, str] = {
    "axis": "dim",
    "keep_dims": "keepdim",
    "keepdims": "keepdim",
    "x": "input",
    "input_x": "input",
    "logits": "input",
}


@dataclass(frozen=True)
class Equivalent:
    """The PyTorch callable an entry is benchmarked with, and how its arguments translate."""

    torch_name: str  # as a user reads it: "torch.matmul", "torch.Tensor.sum", or an adapter's description
    renames: Mapping[str, str] = field(default_factory=dict)
    adapter: Callable | None = None  # for conventions a keyword rename cannot express
    # Primitive entries: the primitive's constructor arguments, from the call's
    # own arguments (msprobe records no attributes), and the assumption said in Message.
    primitive_args: Callable[..., tuple] | None = None
    note: str = ""

    def bench(self) -> Callable:
        target = self.adapter or _resolve(self.torch_name)

        def call(*args, **kwargs):
            return target(*args, **rename(kwargs, self.renames))

        return call

    def source(self) -> str:
        """`bench(*args, **kwargs)` as standalone source, for repro.py: the adapter and what it
        uses from this module copied as they are, so the script runs exactly this bench."""
        target = self.adapter.__name__ if self.adapter else f'resolve("{self.torch_name}")'
        return "\n\n".join(
            [
                f"RENAMES = {dict(self.renames)!r}",
                *sources(rename, *([self.adapter] if self.adapter else [])),
                f"def bench(*args, **kwargs):\n    return {target}(*args, **rename(kwargs, RENAMES))\n",
            ]
        )


def sources(*functions: Callable) -> list[str]:
    """The source of each function and of the module-level functions and constants it uses, in turn."""
    found: dict[str, str] = {}

    def add(fn: Callable) -> None:
        if fn.__name__ in found:
            return
        found[fn.__name__] = inspect.getsource(fn)
        for name in _names(fn.__code__):
            value = globals().get(name)
            if isinstance(value, types.FunctionType) and value.__module__ == __name__:
                add(value)
            elif isinstance(value, (int, float, str)) and name.isupper() and name not in found:
                found[name] = f"{name} = {value!r}\n"

    for fn in functions:
        add(fn)
    return list(found.values())


def _names(code: types.CodeType) -> set[str]:
    """The global names a function's code (and the code nested in it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def rename(kwargs: dict[str, Any], renames: Mapping[str, str]) -> dict[str, Any]:
    """MindSpore keyword names in PyTorch's spelling.

    `axis=None` means every dim in MindSpore, which torch spells by leaving
    `dim` out (torch.prod and others refuse dim=None, and then keepdim=False).
    """
    renamed = {renames.get(key, key): value for key, value in kwargs.items()}
    if "dim" in renamed and renamed["dim"] is None and "axis" in kwargs:
        del renamed["dim"]
        if renamed.get("keepdim") is False:
            del renamed["keepdim"]
    return renamed


def _resolve(dotted: str) -> Callable:
    target: Any = torch
    for part in dotted.split(".")[1:]:
        target = getattr(target, part)
    return target


def same(module: str, names: str, renames: Mapping[str, str] = {}) -> dict[str, Equivalent]:
    """`name` -> `<module>.name` for each name of a whitespace-separated list."""
    return {name: Equivalent(f"{module}.{name}", renames) for name in names.split()}


# -- adapters: where MindSpore's argument conventions differ -------------------


def tensor_transpose(self: torch.Tensor, *dims, **kwargs):
    """MindSpore's Tensor.transpose: two dims swap them (as in torch), a full
    permutation (`transpose(2, 0, 1)` or one tuple) permutes."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    if len(dims) == 2 and not kwargs:
        return self.transpose(*dims)
    if not dims and {"dim0", "dim1"} <= set(kwargs):
        return self.transpose(kwargs["dim0"], kwargs["dim1"])
    return self.permute(*(dims or range(self.dim() - 1, -1, -1)))  # no dims: reverse them all


def tensor_getitem(self: torch.Tensor, index):
    """msprobe writes an index tuple as a JSON list: `x[0:2, ...]` comes back as a list."""
    if isinstance(index, list) and any(isinstance(i, (slice, type(Ellipsis), type(None))) for i in index):
        index = tuple(index)
    return self[index]


def tensor_var(self: torch.Tensor, *args, **kwargs):
    """Tensor.var has two overloads in MindSpore 2.10: numpy's (axis, ddof=0,
    keepdims), the default, and torch's (dim, *, correction=1, keepdim)."""
    if {"dim", "correction", "keepdim"} & kwargs.keys():
        return self.var(*args, **kwargs)
    names = ("axis", "ddof", "keepdims")
    given = {**dict(zip(names, args)), **kwargs}
    return torch.var(
        self, dim=given.get("axis"), correction=given.get("ddof", 0), keepdim=bool(given.get("keepdims", False))
    )


def ops_flatten(input: torch.Tensor, order: str = "C", *, start_dim: int = 1, end_dim: int = -1):
    """ops.flatten keeps the first dim by default (start_dim=1)."""
    if order != "C":
        raise ValueError(f"ops.flatten order={order!r} has no torch equivalent")
    return torch.flatten(input, start_dim, end_dim)


def ops_gather(input_params: torch.Tensor, input_indices: torch.Tensor, axis: int, batch_dims: int = 0):
    """ops.gather takes whole slices along `axis` (numpy's take), not torch.gather's elements."""
    if batch_dims:
        raise ValueError("ops.gather with batch_dims has no torch equivalent here")
    axis = axis % input_params.dim()
    taken = input_params.index_select(axis, input_indices.reshape(-1).long())
    shape = input_params.shape[:axis] + input_indices.shape + input_params.shape[axis + 1 :]
    return taken.reshape(shape)


def ops_squeeze(input: torch.Tensor, axis=None):
    """ops.squeeze(input, axis=None): None drops every size-1 dim."""
    return torch.squeeze(input) if axis is None or axis == () else torch.squeeze(input, axis)


def ops_transpose(input: torch.Tensor, input_perm):
    """ops.transpose(input, input_perm) is torch.permute."""
    return torch.permute(input, tuple(input_perm))


def cast(input: torch.Tensor, dtype):
    """ops.cast / Tensor.astype: a dtype conversion."""
    return input.to(dtype)


LAYER_NORM_EPSILON = 1e-7  # mindspore.nn.LayerNorm's default
LAYER_NORM_NOTE = (
    "LayerNorm primitive: msprobe records no primitive attributes; assumed epsilon=1e-7 "
    "(mindspore.nn.LayerNorm's default) and normalisation over gamma's trailing dims"
)


def layer_norm_attrs(x, gamma, *rest) -> tuple:
    """(begin_norm_axis, begin_params_axis, epsilon) of the LayerNorm primitive."""
    axis = x.dim() - gamma.dim()
    return axis, axis, LAYER_NORM_EPSILON


def matmul_attrs(x, w, *rest) -> tuple:
    """(transpose_a, transpose_b) of the MatMul primitive, read from the shapes.

    msprobe records no attributes; of the four, exactly one must fit the
    shapes (mindspore.nn.Dense uses transpose_b), else the check cannot be made.
    """
    fits = [
        (ta, tb)
        for ta in (False, True)
        for tb in (False, True)
        if x.shape[-2 if ta else -1] == w.shape[-1 if tb else -2]
    ]
    if len(fits) != 1:
        raise ValueError(
            f"the shapes {list(x.shape)} and {list(w.shape)} fit {len(fits)} transpositions, "
            "and msprobe does not record which one the primitive had"
        )
    return fits[0]


def matmul_primitive(x, w):
    transpose_a, transpose_b = matmul_attrs(x, w)
    return torch.matmul(x.transpose(-2, -1) if transpose_a else x, w.transpose(-2, -1) if transpose_b else w)


def bias_add_primitive(x, bias):
    """BiasAdd with its default data_format NCHW: the bias runs along dim 1."""
    return x + bias.reshape([1, -1] + [1] * (x.dim() - 2))


def layer_norm_primitive(x, gamma, beta):
    """The LayerNorm primitive's three outputs: y, mean and (biased) variance, keepdim."""
    begin_norm_axis, _, epsilon = layer_norm_attrs(x, gamma)
    dims = tuple(range(begin_norm_axis, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    y = (x - mean) / torch.sqrt(variance + epsilon) * gamma + beta
    return y, mean, variance


# -- the table -----------------------------------------------------------------

MINT: dict[str, Equivalent] = same(
    "torch",
    """
    abs acos acosh add addmm all amax amin any arange argmax argmin argsort asin asinh atan atan2 atanh
    baddbmm bitwise_and bitwise_or bitwise_xor bmm broadcast_to cat ceil chunk clamp clone cos cosh cummax
    cummin cumprod cumsum diag div dot einsum eq erf erfc erfinv exp exp2 expm1 eye flatten flip floor fmod
    full_like gather ge gt index_select inverse isclose isfinite isinf isnan le lerp log log10 log1p log2
    logaddexp logical_and logical_not logical_or logical_xor logsumexp lt matmul max maximum mean
    median min minimum mm mul mv nan_to_num narrow ne neg norm ones_like outer permute pow prod reciprocal
    remainder repeat_interleave reshape roll round rsqrt scatter scatter_add select sigmoid sign sin sinc sinh
    softmax sort split sqrt square squeeze stack std sub sum swapaxes t tan tanh tile topk trace transpose
    tril triu trunc unbind unsqueeze var where xlogy zeros_like
""",
)

MINT_FUNCTIONAL: dict[str, Equivalent] = same(
    "torch.nn.functional",
    """
    adaptive_avg_pool1d adaptive_avg_pool2d avg_pool2d batch_norm binary_cross_entropy
    binary_cross_entropy_with_logits conv1d conv2d cross_entropy elu embedding gelu glu group_norm hardshrink
    hardsigmoid hardswish hardtanh interpolate l1_loss layer_norm leaky_relu linear log_softmax
    logsigmoid max_pool2d mish mse_loss nll_loss normalize one_hot pad prelu relu relu6 selu sigmoid silu
    smooth_l1_loss softmax softplus softshrink tanh
""",
)

FUNCTIONAL: dict[str, Equivalent] = {
    **same(
        "torch",
        """
        abs add addmm amax amin argmax argmin atan2 bmm broadcast_to ceil clamp cos cumsum div eq erf exp
        floor ge gt isfinite isinf isnan le log logsumexp lt matmul maximum mean minimum mul ne neg pow prod
        reciprocal reshape rsqrt sigmoid sin sqrt square stack sub sum tanh tile tril triu unsqueeze where
    """,
        RENAMES,
    ),
    **same("torch.nn.functional", "gelu log_softmax relu silu softmax softplus", RENAMES),
    "cat": Equivalent("torch.cat", RENAMES),
    "concat": Equivalent("torch.cat", RENAMES),
    "clip": Equivalent("torch.clamp", RENAMES),
    "dense": Equivalent("torch.nn.functional.linear", RENAMES),
    "expand_dims": Equivalent("torch.unsqueeze", RENAMES),
    "gather_elements": Equivalent("torch.gather", RENAMES),
    "layer_norm": Equivalent("torch.nn.functional.layer_norm", RENAMES),
    "permute": Equivalent("torch.permute", {**RENAMES, "axis": "dims"}),
    "equal": Equivalent("torch.eq", RENAMES),
    "greater": Equivalent("torch.gt", RENAMES),
    "greater_equal": Equivalent("torch.ge", RENAMES),
    "less": Equivalent("torch.lt", RENAMES),
    "less_equal": Equivalent("torch.le", RENAMES),
    "not_equal": Equivalent("torch.ne", RENAMES),
    "flatten": Equivalent("ops.flatten: torch.flatten (start_dim 1 by default)", adapter=ops_flatten),
    "gather": Equivalent("ops.gather: index_select along axis, reshaped to the indices' shape", adapter=ops_gather),
    "squeeze": Equivalent("ops.squeeze: torch.squeeze (axis None: every size-1 dim)", adapter=ops_squeeze),
    "transpose": Equivalent("ops.transpose: torch.permute", adapter=ops_transpose),
    "cast": Equivalent("ops.cast: torch.Tensor.to", adapter=cast),
}

TENSOR: dict[str, Equivalent] = {
    **same(
        "torch.Tensor",
        """
        __abs__ __add__ __and__ __eq__ __floordiv__ __ge__ __gt__ __le__ __lt__ __matmul__ __mod__
        __mul__ __ne__ __neg__ __or__ __pow__ __radd__ __rmul__ __rpow__ __rsub__ __rtruediv__ __sub__
        __truediv__
        abs add bool chunk clamp clip clone contiguous cos cumsum div double exp expand expand_as flatten float
        half int log long masked_fill matmul mean mul neg permute pow prod reshape rsqrt sigmoid sin softmax
        split sqrt square squeeze sub sum t tanh tile to type_as unsqueeze view
    """,
        RENAMES,
    ),
    "__getitem__": Equivalent(
        "torch.Tensor.__getitem__ (an index list with slices read as a tuple)", adapter=tensor_getitem
    ),
    "astype": Equivalent("Tensor.astype: torch.Tensor.to", adapter=cast),
    "transpose": Equivalent(
        "Tensor.transpose: torch.Tensor.transpose (two dims) or permute (all dims)", adapter=tensor_transpose
    ),
    "var": Equivalent("Tensor.var: torch.var (numpy's ddof=0 overload by default)", adapter=tensor_var),
}

PRIMITIVE: dict[str, Equivalent] = {
    "BiasAdd": Equivalent(
        "BiasAdd primitive: x + bias along dim 1 (data_format NCHW assumed)",
        adapter=bias_add_primitive,
        primitive_args=lambda *args: (),
        note="BiasAdd primitive: msprobe records no attributes; data_format NCHW assumed",
    ),
    "Dense": Equivalent("torch.nn.functional.linear", primitive_args=lambda *args: ()),
    "MatMul": Equivalent(
        "MatMul primitive: torch.matmul, transposes read from the shapes",
        adapter=matmul_primitive,
        primitive_args=matmul_attrs,
    ),
    "ReLU": Equivalent("torch.relu", primitive_args=lambda *args: ()),
    "LayerNorm": Equivalent(
        "LayerNorm primitive: layer norm over gamma's dims, with mean and variance",
        adapter=layer_norm_primitive,
        primitive_args=layer_norm_attrs,
        note=LAYER_NORM_NOTE,
    ),
}

TABLES: dict[str, dict[str, Equivalent]] = {
    "Mint": MINT,
    "MintFunctional": MINT_FUNCTIONAL,
    "Functional": FUNCTIONAL,
    "Tensor": TENSOR,
    "Primitive": PRIMITIVE,
}


def primitive_class(api: str) -> str:
    """`dense.Dense` -> `Dense`: msprobe names a primitive call `<name>.<Class>`."""
    return api.rsplit(".", 1)[-1]


def lookup(api_type: str, api: str) -> Equivalent | None:
    """The PyTorch equivalent of a MindSpore API, or None when the table has none."""
    table = TABLES.get(api_type)
    if table is None:
        return None
    return table.get(primitive_class(api) if api_type == "Primitive" else api)


def mapped_names() -> tuple[str, ...]:
    """Every mapped API as `<Type>.<api>`, for the README and the tests."""
    return tuple(f"{kind}.{name}" for kind, table in TABLES.items() for name in sorted(table))
