"""The output shapes of a transformer's common calls, read from their arguments' shapes.

The meta device sizes any call (output_bounds.py), but an elementwise op, a `cat`, linear with a
bias, SDPA or cross_entropy runs a Python reference there, whose first call imports sympy and
torch._dynamo: 2 s, about as long as importing torch, in every process that checks such a step.
Their outputs follow from their tensor arguments' shapes by rules everyone knows (broadcasting,
a GEMM's and addmm's, attention's, a convolution's and a pool's), so they are read here, and
rule_for finds size_rules.py's for the calls their size arguments size. A call a rule does not
read as it expects (an `out=`, a list where a number goes, shapes that do not fit) answers None
and is sized on the meta device as before. tests/test_shape_rules.py holds the first rules to
the meta device's answer, tests/test_size_rules.py the later ones to the real call's.
"""

from __future__ import annotations

from numbers import Number
from typing import Any, Callable, Union

from . import size_rules
from .einsum_rule import einsum

Shape = list[int]
# What a rule answers: the output's shape, the shapes of several outputs (a tuple), or None.
Answer = Union[Shape, tuple[Shape, ...], None]

# Calls whose one output is their tensor and number arguments broadcast together: no argument of
# theirs is a size or a dim (`max` and `min` are not here: `max(x, 1)` reduces dim 1; _extreme reads them).
BROADCAST = frozenset(
    {
        *("add", "sub", "subtract", "rsub", "mul", "multiply", "div", "divide", "true_divide", "floor_divide"),
        *("pow", "float_power", "remainder", "fmod", "atan2", "hypot", "copysign", "xlogy", "lerp"),
        *("maximum", "minimum", "fmax", "fmin", "where", "masked_fill", "clamp", "clip", "addcmul", "addcdiv"),
        *("eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "equal_to", "not_equal"),
        *("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"),
        *("__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__", "__rmul__", "__imul__"),
        *("__truediv__", "__rtruediv__", "__itruediv__", "__div__", "__rdiv__", "__idiv__", "__floordiv__"),
        *("__rfloordiv__", "__ifloordiv__", "__pow__", "__rpow__", "__ipow__", "__mod__", "__rmod__", "__imod__"),
        *("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"),
        *("__and__", "__rand__", "__iand__", "__or__", "__ror__", "__ior__", "__xor__", "__rxor__", "__ixor__"),
    }
)


def output_shapes(api: str, args: list, kwargs: dict) -> list[Shape | None] | None:
    """The shapes of a PyTorch call's outputs (`Functional.linear`), or None where no rule reads it."""
    if "out" in kwargs:
        return None
    rule = rule_for(api)
    if rule is None:
        return None
    try:
        shape = rule(args, kwargs)
    except (IndexError, KeyError, TypeError, ValueError, ArithmeticError):  # arguments out of the rule's form
        return None
    if shape is None:
        return None
    return list(shape) if isinstance(shape, tuple) else [shape]  # a tuple: a call of several outputs


def rule_for(api: str) -> Callable[[list, dict], Answer] | None:
    """The rule for the calls of `api`, or None: the rules cover names, the arguments come later."""
    name = api.rsplit(".", 1)[-1]
    if (name.startswith("__i") and name in BROADCAST) or (name.endswith("_") and name[:-1] in BROADCAST):
        return _in_place
    if name in BROADCAST:
        return _broadcast
    return size_rules.QUALIFIED.get(api) or RULES.get(name) or size_rules.RULES.get(name)


def broadcast(*shapes: Shape) -> Shape | None:
    """NumPy's (and PyTorch's) broadcasting of `shapes`, None where they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    result = [1] * rank
    for shape in shapes:
        for at, size in enumerate(shape, start=rank - len(shape)):
            if size != 1 and result[at] not in (1, size):
                return None
            result[at] = size if size != 1 else result[at]
    return result


def _shape(value: Any) -> Shape | None:
    """A tensor's shape, None for anything else."""
    import torch

    return list(value.shape) if isinstance(value, torch.Tensor) else None


def _tensor_shape(value: Any) -> Shape:
    shape = _shape(value)
    if shape is None:
        raise TypeError("not a tensor")
    return shape


def _broadcast(args: list, kwargs: dict) -> Shape | None:
    import torch

    values = [*args, *kwargs.values()]
    if any(not isinstance(v, (torch.Tensor, Number, str, torch.dtype, type(None))) for v in values):
        return None  # a list or a size is no operand: the meta device reads it
    shapes = [s for s in map(_shape, values) if s is not None]
    return broadcast(*shapes) if shapes and len(args) + len(kwargs) > 1 else None


def _in_place(args: list, kwargs: dict) -> Shape | None:
    """An in-place op writes its tensor: the others broadcast to its shape, or the call refuses them."""
    shape = _broadcast(args, kwargs)
    return shape if shape is not None and shape == _shape(args[0]) else None


def _argument(args: list, kwargs: dict, at: int, name: str, default: Any = None) -> Any:
    return args[at] if len(args) > at else kwargs.get(name, default)


def _linear(args: list, kwargs: dict) -> Shape | None:
    x = _tensor_shape(_argument(args, kwargs, 0, "input"))
    weight = _tensor_shape(_argument(args, kwargs, 1, "weight"))
    bias = _argument(args, kwargs, 2, "bias")
    if not x or len(weight) not in (1, 2) or weight[-1] != x[-1]:
        return None
    out = x[:-1] + weight[:-1]
    return out if bias is None or broadcast(_tensor_shape(bias), out) == out else None


def _matmul(a: Shape, b: Shape) -> Shape | None:
    """torch.matmul's output shape."""
    if not a or not b or a[-1] != b[-2 if len(b) > 1 else -1]:
        return None
    if len(b) == 1:
        return a[:-1]
    if len(a) == 1:
        return b[:-2] + b[-1:]
    batch = broadcast(a[:-2], b[:-2])
    return None if batch is None else [*batch, a[-2], b[-1]]


def _matmul_call(args: list, kwargs: dict) -> Shape | None:
    return _matmul(_tensor_shape(args[0]), _tensor_shape(_argument(args, kwargs, 1, "other")))


def _rmatmul_call(args: list, kwargs: dict) -> Shape | None:
    return _matmul(_tensor_shape(args[1]), _tensor_shape(args[0]))


def _mm(args: list, kwargs: dict) -> Shape | None:
    a, b = _tensor_shape(args[0]), _tensor_shape(_argument(args, kwargs, 1, "mat2"))
    return _matmul(a, b) if len(a) == len(b) == 2 else None


def _bmm(args: list, kwargs: dict) -> Shape | None:
    a, b = _tensor_shape(args[0]), _tensor_shape(_argument(args, kwargs, 1, "mat2"))
    return _matmul(a, b) if len(a) == len(b) == 3 and a[0] == b[0] else None


def _added_product(
    product: Callable[[Shape, Shape], Shape | None], *names: str
) -> Callable[[list, dict], Shape | None]:
    """addmm, addmv, addr, baddbmm, addbmm: input + the product of the next two (`names`), the input
    broadcast to the product's shape (the product's own: the input never widens it)."""

    def rule(args: list, kwargs: dict) -> Shape | None:
        x, a, b = (_tensor_shape(_argument(args, kwargs, at, name)) for at, name in enumerate(("input", *names)))
        out = product(a, b)
        if out is None or 0 in (*a, *b) or broadcast(x, out) != out:
            return None  # an empty operand is left to the meta device (addmv then returns its input as it is)
        return out

    return rule


def _gemm(a: Shape, b: Shape) -> Shape | None:
    return [a[0], b[1]] if len(a) == len(b) == 2 and a[1] == b[0] else None


def _gemv(a: Shape, b: Shape) -> Shape | None:
    return a[:1] if len(a) == 2 and len(b) == 1 and a[1] == b[0] else None


def _outer_product(a: Shape, b: Shape) -> Shape | None:
    return [*a, *b] if len(a) == len(b) == 1 else None


def _batched_gemm(a: Shape, b: Shape) -> Shape | None:
    return [a[0], a[1], b[2]] if len(a) == len(b) == 3 and a[0] == b[0] and a[2] == b[1] else None


def _summed_gemm(a: Shape, b: Shape) -> Shape | None:
    out = _batched_gemm(a, b)
    return None if out is None else out[1:]


def _gather(args: list, kwargs: dict) -> Shape | None:
    """gather(input, dim, index): the index's shape, no wider than the input outside `dim`."""
    x = _tensor_shape(_argument(args, kwargs, 0, "input"))
    dim = _argument(args, kwargs, 1, "dim")
    index = _tensor_shape(_argument(args, kwargs, 2, "index"))
    if type(dim) is not int or len(index) != len(x) or not x or not -len(x) <= dim < len(x):
        return None
    dim %= len(x)
    return index if all(i <= n for d, (i, n) in enumerate(zip(index, x)) if d != dim) else None


def _sdpa(args: list, kwargs: dict) -> Shape | None:
    q, k, v = (_tensor_shape(_argument(args, kwargs, i, n)) for i, n in enumerate(("query", "key", "value")))
    mask = _argument(args, kwargs, 3, "attn_mask")
    if min(len(q), len(k), len(v)) < 2 or q[-1] != k[-1] or k[-2] != v[-2] or len({len(q), len(k), len(v)}) > 1:
        return None
    if _argument(args, kwargs, 7, "enable_gqa", False) is True and len(q) > 2 and k[-3] and q[-3] % k[-3] == 0:
        k, v = [*k[:-3], q[-3], *k[-2:]], [*v[:-3], q[-3], *v[-2:]]  # each KV head serves a group of queries
    batch = broadcast(q[:-2], k[:-2], v[:-2])
    if batch is None:
        return None
    scores = [*batch, q[-2], k[-2]]  # a mask that widens them is left to the meta device
    return [*batch, q[-2], v[-1]] if mask is None or broadcast(_tensor_shape(mask), scores) == scores else None


def _concatenated(args: list, kwargs: dict) -> Shape | None:
    tensors = _argument(args, kwargs, 0, "tensors")
    dim = _argument(args, kwargs, 1, "dim", 0)
    if not isinstance(tensors, (list, tuple)) or not isinstance(dim, int):
        return None
    # cat passes over 1-D empty tensors, the legacy way of saying "nothing here"
    shapes = [s for s in map(_tensor_shape, tensors) if s != [0]]
    if not shapes:
        return [0] if tensors else None
    rank = len(shapes[0])
    dim = dim + rank if dim < 0 else dim
    rest = [[*s[:dim], *s[dim + 1 :]] for s in shapes]
    if not 0 <= dim < rank or any(len(s) != rank or r != rest[0] for s, r in zip(shapes, rest)):
        return None
    return [*shapes[0][:dim], sum(s[dim] for s in shapes), *shapes[0][dim + 1 :]]


def _stacked(args: list, kwargs: dict) -> Shape | None:
    tensors = _argument(args, kwargs, 0, "tensors")
    dim = _argument(args, kwargs, 1, "dim", 0)
    if not isinstance(tensors, (list, tuple)) or not tensors or not isinstance(dim, int):
        return None
    shapes = [_tensor_shape(t) for t in tensors]
    rank = len(shapes[0]) + 1
    dim = dim + rank if dim < 0 else dim
    if not 0 <= dim < rank or any(s != shapes[0] for s in shapes):
        return None
    return [*shapes[0][:dim], len(shapes), *shapes[0][dim:]]


def _embedding(args: list, kwargs: dict) -> Shape | None:
    weight = _tensor_shape(_argument(args, kwargs, 1, "weight"))
    return [*_tensor_shape(_argument(args, kwargs, 0, "input")), weight[1]] if len(weight) == 2 else None


def _class_loss(probabilities: bool) -> Callable[[list, dict], Shape | None]:
    """cross_entropy's (class indices, or probabilities) and nll_loss's (indices) reduced loss: one
    number (`reduction="none"` is left to the meta device)."""

    def rule(args: list, kwargs: dict) -> Shape | None:
        x = _tensor_shape(_argument(args, kwargs, 0, "input"))
        target = _tensor_shape(_argument(args, kwargs, 1, "target"))
        indices = [*x[:1], *x[2:]] if len(x) > 1 else []
        if not x or (target != indices and not (probabilities and target == x)):
            return None
        legacy = (_argument(args, kwargs, at, name) for at, name in ((3, "size_average"), (5, "reduce")))
        reduced = _argument(args, kwargs, 6, "reduction", "mean") in ("mean", "sum")
        return [] if reduced and all(v is None for v in legacy) else None

    return rule


def _conv(spatial: int) -> Callable[[list, dict], Shape | None]:
    def rule(args: list, kwargs: dict) -> Shape | None:
        x = _tensor_shape(_argument(args, kwargs, 0, "input"))
        weight = _tensor_shape(_argument(args, kwargs, 1, "weight"))
        if len(x) not in (spatial + 1, spatial + 2) or len(weight) != spatial + 2:
            return None
        stride, padding, dilation = (
            _argument(args, kwargs, at, name, 1 if name != "padding" else 0)
            for at, name in ((3, "stride"), (4, "padding"), (5, "dilation"))
        )
        steps, gaps = _per_dim(stride, spatial), _per_dim(dilation, spatial)
        pads = _per_dim(0 if padding == "valid" else padding, spatial) if padding != "same" else [0] * spatial
        if steps is None or pads is None or gaps is None or min(steps) < 1 or min(gaps) < 1 or min(pads) < 0:
            return None
        sizes = x[-spatial:]
        if padding == "same":  # stride 1 only, the output the input's size
            out = sizes if max(steps) == 1 else None
        else:
            kernel = weight[2:]
            out = [(n + 2 * p - g * (k - 1) - 1) // s + 1 for n, p, g, k, s in zip(sizes, pads, gaps, kernel, steps)]
        if out is None or min(out) < 1:
            return None  # a kernel larger than its padded input, or "same" with a stride: the call refuses it
        return [*x[: -spatial - 1], weight[0], *out]

    return rule


def _pool(spatial: int, max_pool: bool) -> Callable[[list, dict], Shape | None]:
    """max_pool / avg_pool: the windows of a convolution of the kernel's size, counted up with ceil_mode
    (a last window that starts in the padding is dropped); max_pool's indices are left to the meta device."""

    def rule(args: list, kwargs: dict) -> Shape | None:
        x = _tensor_shape(_argument(args, kwargs, 0, "input"))
        names = ("kernel_size", "stride", "padding", *(("dilation",) if max_pool else ()), "ceil_mode")
        given = {name: _argument(args, kwargs, at, name) for at, name in enumerate(names, start=1)}
        if max_pool and _argument(args, kwargs, 6, "return_indices", False):
            return None
        kernel = _per_dim(given["kernel_size"], spatial)
        stride = kernel if given["stride"] in (None, [], ()) else _per_dim(given["stride"], spatial)
        pads = _per_dim(given["padding"] or 0, spatial)
        gaps = _per_dim(given.get("dilation") or 1, spatial)
        ceil = given["ceil_mode"] or False
        if len(x) not in (spatial + 1, spatial + 2) or min(x[-spatial - 1 :]) < 1 or type(ceil) is not bool:
            return None
        if kernel is None or stride is None or pads is None or gaps is None:
            return None
        out = []
        for n, k, s, p, g in zip(x[-spatial:], kernel, stride, pads, gaps):
            if min(k, s, g) < 1 or not 0 <= p <= k // 2:
                return None
            if spatial == 3 and not max_pool and n < k:
                return None  # avg_pool3d refuses an input smaller than its kernel, padded or not
            size = (n + 2 * p - g * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
            if ceil and (size - 1) * s >= n + p:
                size -= 1
            out.append(size)
        return [*x[:-spatial], *out] if min(out) >= 1 else None

    return rule


def _adaptive_pool(spatial: int) -> Callable[[list, dict], Shape | None]:
    """adaptive_avg_pool: `output_size` (None keeps a dim)."""

    def rule(args: list, kwargs: dict) -> Shape | None:
        x = _tensor_shape(_argument(args, kwargs, 0, "input"))
        size = _argument(args, kwargs, 1, "output_size")
        sizes = list(size) if isinstance(size, (list, tuple)) else [size] * spatial
        if len(x) not in (spatial + 1, spatial + 2) or len(sizes) != spatial or min(x[-spatial - 1 :]) < 1:
            return None
        out = [n if s is None else s for n, s in zip(x[-spatial:], sizes)]
        if not all(type(s) is int and s >= 0 for s in out):
            return None
        return [*x[:-spatial], *out]

    return rule


def _conv_transpose(spatial: int) -> Callable[[list, dict], Shape | None]:
    """conv_transpose: each input position spreads a kernel, `stride` apart, less the padding."""

    def rule(args: list, kwargs: dict) -> Shape | None:
        x = _tensor_shape(_argument(args, kwargs, 0, "input"))
        weight = _tensor_shape(_argument(args, kwargs, 1, "weight"))
        names = ((3, "stride", 1), (4, "padding", 0), (5, "output_padding", 0), (7, "dilation", 1))
        stride, padding, extra, dilation = (_per_dim(_argument(args, kwargs, *n), spatial) for n in names)
        groups = _argument(args, kwargs, 6, "groups", 1)
        if len(x) not in (spatial + 1, spatial + 2) or len(weight) != spatial + 2 or type(groups) is not int:
            return None
        if stride is None or padding is None or extra is None or dilation is None or groups < 1:
            return None
        if x[-spatial - 1] != weight[0] or weight[0] % groups or min(x[-spatial:]) < 1 or min(stride) < 1:
            return None
        if (
            min(dilation) < 1
            or min(padding) < 0
            or any(not 0 <= e < max(s, d) for e, s, d in zip(extra, stride, dilation))
        ):
            return None
        sizes = zip(x[-spatial:], weight[2:], stride, padding, extra, dilation)
        out = [(n - 1) * s - 2 * p + d * (k - 1) + e + 1 for n, k, s, p, e, d in sizes]
        return [*x[: -spatial - 1], weight[1] * groups, *out] if min(out) >= 1 else None

    return rule


def _pixel_shuffle(args: list, kwargs: dict) -> Shape | None:
    """pixel_shuffle: (..., C r^2, H, W) -> (..., C, H r, W r)."""
    x = _tensor_shape(_argument(args, kwargs, 0, "input"))
    r = _argument(args, kwargs, 1, "upscale_factor")
    if type(r) is not int or r < 1 or len(x) < 3 or x[-3] % (r * r):
        return None
    return [*x[:-3], x[-3] // (r * r), x[-2] * r, x[-1] * r]


def _pixel_unshuffle(args: list, kwargs: dict) -> Shape | None:
    x = _tensor_shape(_argument(args, kwargs, 0, "input"))
    r = _argument(args, kwargs, 1, "downscale_factor")
    if type(r) is not int or r < 1 or len(x) < 3 or x[-2] % r or x[-1] % r:
        return None
    return [*x[:-3], x[-3] * r * r, x[-2] // r, x[-1] // r]


def _one_hot(args: list, kwargs: dict) -> Shape | None:
    """one_hot with its classes given (-1, the data's largest index, is the meta device's)."""
    x = _tensor_shape(_argument(args, kwargs, 0, "tensor"))
    classes = _argument(args, kwargs, 1, "num_classes", -1)
    return [*x, classes] if type(classes) is int and classes >= 1 else None


def _pointwise_loss(
    reduction_at: int, reduced: tuple[str, ...] = ("mean", "sum")
) -> Callable[[list, dict], Shape | None]:
    """mse_loss, l1_loss, kl_div, ...: one number reduced; the input's shape element by element where
    the target has it (a broadcast target, a weight: the meta device's)."""

    def rule(args: list, kwargs: dict) -> Shape | None:
        x = _tensor_shape(_argument(args, kwargs, 0, "input"))
        target = _tensor_shape(_argument(args, kwargs, 1, "target"))
        reduction = _argument(args, kwargs, reduction_at, "reduction", "mean")
        legacy = any(kwargs.get(k) is not None for k in ("size_average", "reduce", "weight", "pos_weight"))
        if legacy or any(a is not None for a in args[2:reduction_at]) or len(args) > reduction_at + 1 or target != x:
            return None
        return [] if reduction in reduced else x if reduction == "none" else None

    return rule


def _cosine_similarity(args: list, kwargs: dict) -> Shape | None:
    """cosine_similarity: the two inputs broadcast, `dim` reduced."""
    shape = broadcast(*(_tensor_shape(_argument(args, kwargs, at, name)) for at, name in ((0, "x1"), (1, "x2"))))
    dim = _argument(args, kwargs, 2, "dim", 1)
    if shape is None or type(dim) is not int or not -len(shape) <= dim < len(shape):
        return None
    return [n for at, n in enumerate(shape) if at != dim % len(shape)]


def _top_k(args: list, kwargs: dict) -> tuple[Shape, Shape] | None:
    """topk: values and indices, the dim cut to k."""
    x = _tensor_shape(_argument(args, kwargs, 0, "input"))
    k, dim = _argument(args, kwargs, 1, "k"), _argument(args, kwargs, 2, "dim", -1)
    if type(k) is not int or type(dim) is not int or not -max(len(x), 1) <= dim < max(len(x), 1):
        return None
    if not x:
        return ([], []) if k in (0, 1) else None
    if not 0 <= k <= x[dim]:
        return None
    out = list(x)
    out[dim] = k
    return out, list(out)


def _extreme(args: list, kwargs: dict) -> Shape | tuple[Shape, Shape] | None:
    """max / min: of all elements (one number), along a dim (values and indices), or against
    another tensor (their broadcast)."""
    x = _tensor_shape(_argument(args, kwargs, 0, "input"))
    other = _argument(args, kwargs, 1, "dim" if "dim" in kwargs else "other")
    if other is None and len(args) < 2:
        return [] if 0 not in x else None  # of all the elements
    if _shape(other) is not None:
        return broadcast(x, _tensor_shape(other))
    keepdim = _argument(args, kwargs, 2, "keepdim", False)
    if type(other) is not int or type(keepdim) is not bool or not -max(len(x), 1) <= other < max(len(x), 1):
        return None
    if not x:
        return [], []
    dim = other % len(x)
    if x[dim] == 0:
        return None
    out = [*x[:dim], *([1] if keepdim else []), *x[dim + 1 :]]
    return out, list(out)


def _per_dim(value: Any, spatial: int) -> list[int] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * spatial
    if isinstance(value, (list, tuple)) and len(value) in (1, spatial) and all(type(v) is int for v in value):
        return list(value) * (spatial // len(value))
    return None


RULES: dict[str, Callable[[list, dict], Answer]] = {
    "linear": _linear,
    "matmul": _matmul_call,
    "__matmul__": _matmul_call,
    "__rmatmul__": _rmatmul_call,
    "mm": _mm,
    "bmm": _bmm,
    "scaled_dot_product_attention": _sdpa,
    "cat": _concatenated,
    "concat": _concatenated,
    "concatenate": _concatenated,
    "stack": _stacked,
    "embedding": _embedding,
    "cross_entropy": _class_loss(probabilities=True),
    "nll_loss": _class_loss(probabilities=False),
    "conv1d": _conv(1),
    "conv2d": _conv(2),
    "conv3d": _conv(3),
    "addmm": _added_product(_gemm, "mat1", "mat2"),
    "addmv": _added_product(_gemv, "mat", "vec"),
    "addr": _added_product(_outer_product, "vec1", "vec2"),
    "baddbmm": _added_product(_batched_gemm, "batch1", "batch2"),
    "addbmm": _added_product(_summed_gemm, "batch1", "batch2"),
    "gather": _gather,
    **{f"max_pool{n}d": _pool(n, max_pool=True) for n in (1, 2, 3)},
    **{f"avg_pool{n}d": _pool(n, max_pool=False) for n in (1, 2, 3)},
    **{f"adaptive_avg_pool{n}d": _adaptive_pool(n) for n in (1, 2, 3)},
    **{f"conv_transpose{n}d": _conv_transpose(n) for n in (1, 2, 3)},
    "pixel_shuffle": _pixel_shuffle,
    "pixel_unshuffle": _pixel_unshuffle,
    "one_hot": _one_hot,
    **dict.fromkeys(("mse_loss", "l1_loss", "smooth_l1_loss", "soft_margin_loss"), _pointwise_loss(4)),
    "kl_div": _pointwise_loss(4, ("mean", "sum", "batchmean")),
    "huber_loss": _pointwise_loss(2),
    **dict.fromkeys(("binary_cross_entropy", "binary_cross_entropy_with_logits"), _pointwise_loss(5)),
    "cosine_similarity": _cosine_similarity,
    "topk": _top_k,
    "max": _extreme,
    "min": _extreme,
    "einsum": einsum,
}
