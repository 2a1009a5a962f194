"""The magnitude model of a fused op that composes APIs this plugin models (Magnitude.COMPOSITION).

A fused kernel computing silu(x W^T) * (x V^T) in fp32 rounds each intermediate once: the budget's
m_i is what those roundings weigh at the output. The registered forward reference is run in float64
under a torch function mode that carries, beside every tensor it computes, the magnitude of the
roundings that tensor holds (none for the call's own inputs, which are exact), through each API it
calls, to first order:

- m(f(v)) = own_f(v) + sum_i |d f / d v_i| m_i: the API's own rounding, and what it makes of the
  roundings its inputs carry;
- own_f is the API's model in magnitudes.py: for sums and products the API on |inputs| (`|A||B|`),
  for softmax, layer_norm and the other formulas their formula, for elementwise math the result
  itself (a few ULP of it), for copies and views nothing;
- |d f / d v_i| m_i: for sums and products (nonnegative coefficients) the directional derivative at
  |inputs| along m, an upper bound; for elementwise math the absolute directional derivative along
  each input's m, exact; copies move m as they move the values; softmax y (m + sum y m).

An API outside these, met with rounded inputs, cannot be composed: ComposeFailed (an error row that
says which API; give the op a magnitude model of its own).

The backward (compose_backward): autograd's backward formulas run in C++, below any torch function
mode, so the forward and its vector-Jacobian product are traced together to torch's operators
(make_fx, functionalized, backward formulas decomposed to core ATen as torch.compile decomposes
them), and the same rules run over that graph's operators in order. The call's inputs and the
recorded grad_outputs are exact; every forward intermediate the backward reads holds the roundings
the forward made (a fused backward kernel recomputes or stores them in fp32 alike), and every
backward step adds its own. An operator of that graph outside the rules (a layer_norm's forward
node, whose saved mean and rstd this model cannot carry) is a ComposeFailed naming it: give the op
a backward_magnitude of its own.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Sequence
from typing import Any, Callable

import torch
import torch.autograd.forward_ad as fwAD
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
from torch.utils.weak import WeakIdKeyDictionary

from . import magnitudes
from .references import ReferenceFailed

# Data movement: the values copied, none rounded. Each moves the roundings as it moves the values.
COPIES = frozenset({
    "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "t", "T", "mT", "contiguous", "clone",
    "__getitem__", "chunk", "split", "tensor_split", "unbind", "unsqueeze", "squeeze", "flatten", "unflatten",
    "expand", "expand_as", "broadcast_to", "narrow", "select", "movedim", "moveaxis", "swapaxes", "swapdims",
    "detach", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "repeat", "tile", "roll", "flip",
    "index_select", "gather", "take_along_dim", "diagonal", "tril", "triu", "to", "double", "float", "type",
    "masked_fill",  # its fill value is written, not computed: no rounding of it
    # torch's operators, as a traced backward names them (_ATEN below): copies too.
    "slice", "slice_scatter", "select_scatter", "slice_backward", "select_backward", "as_strided", "copy",
    "alias", "view_as_real", "squeeze_dims",
})  # fmt: skip
# Sums and products whose coefficients are nonnegative (a subtraction is elementwise below).
SUMS = frozenset({
    "linear", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "mv", "dot", "outer", "einsum", "baddbmm",
    "addmm", "addmv", "addbmm", "addr", "conv1d", "conv2d", "conv3d", "sum", "mean", "add", "__add__", "__radd__",
    "__iadd__", "mul", "__mul__", "__rmul__", "__imul__", "multiply", "embedding", "cumsum",
    "bilinear", "tensordot", "scatter_add", "index_add",
})  # fmt: skip
# Elementwise math of one or more inputs: its derivative along each input is exact and local.
ELEMENTWISE = frozenset({
    *magnitudes.UNARY, "relu", "abs", "neg", "__neg__", "sub", "__sub__", "__isub__", "__rsub__", "rsub",
    "subtract", "div", "__truediv__", "__rtruediv__", "__itruediv__", "true_divide", "divide", "pow", "__pow__",
    "__rpow__", "square", "where", "maximum", "minimum", "clamp", "clip", "clamp_min", "clamp_max", "gelu",
    "softplus", "mish", "hardtanh", "leaky_relu", "elu", "selu", "celu", "relu6", "hardswish", "hardsigmoid",
    "logsigmoid", "erfc", "lerp", "addcmul", "addcdiv",
})  # fmt: skip
SOFTMAX = frozenset({"softmax", "log_softmax"})
# New tensors of constants, shaped like an input: exact.
CONSTANTS = frozenset({
    "zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full", "new_empty",
    "new_tensor", "fill", "zero", "zeros", "ones", "full", "empty", "empty_strided", "new_empty_strided",
    "scalar_tensor",
})  # fmt: skip
# torch's operators whose rule is an API's above: the functional copy of a view is that view.
_ATEN = {"_softmax": "softmax", "_log_softmax": "log_softmax", "_unsafe_view": "view", "_to_copy": "to"}


class ComposeFailed(ReferenceFailed):
    """The reference calls an API whose rounding this model cannot carry: an error row naming it."""


def compose(reference: Callable, args: Sequence[Any], kwargs: dict[str, Any]) -> list:
    """The magnitude of each flattened output of `reference(*args, **kwargs)` (float64 tensors, zeros
    where an output holds no rounding, None for a non-floating output)."""
    mode = _Carrier()
    with warnings.catch_warnings():
        # Forward AD's first use scripts torch's jvp decompositions, which torch 2.13 says is deprecated.
        warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)
        with mode:
            out = reference(*args, **kwargs)
    found = []
    for value in _flat(out):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            carried = mode.carried.get(value)
            found.append(torch.zeros_like(value, dtype=torch.float64) if carried is None else carried)
        else:
            found.append(None)
    return found


def compose_backward(
    reference: Callable,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    grad_outputs: Sequence[Any],
    wanted: Sequence[bool],
) -> list:
    """The magnitude of the gradient of each floating tensor input of `reference(*args, **kwargs)`,
    in argument order, that autograd's backward of it computes from `grad_outputs` (one per
    floating output, None for an output given none); None where an input takes no gradient
    (`wanted` False)."""
    from torch._decomp import core_aten_decompositions
    from torch.func import functionalize, vjp
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.node import map_arg

    leaves, spec = tree_flatten((tuple(args), dict(kwargs)))
    slots = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor) and v.is_floating_point()]
    inputs = [leaves[i].detach() for i in slots]
    with torch.no_grad():
        outputs = _floating_outputs(reference(*args, **kwargs))
    given = list(grad_outputs) + [None] * (len(outputs) - len(grad_outputs))
    grads = [
        g.detach().to(o.dtype) if isinstance(g, torch.Tensor) else torch.zeros_like(o) for o, g in zip(outputs, given)
    ]

    def forward(*floats: torch.Tensor) -> tuple:
        filled = list(leaves)
        for slot, value in zip(slots, floats):
            filled[slot] = value
        call_args, call_kwargs = tree_unflatten(filled, spec)
        return tuple(_floating_outputs(reference(*call_args, **call_kwargs)))

    def joint(*tensors: torch.Tensor) -> list:
        backward = vjp(forward, *tensors[: len(inputs)])[1]  # (outputs, vjp_fn)
        return list(backward(tuple(tensors[len(inputs) :])))

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = make_fx(
                functionalize(joint, remove="mutations_and_views"),
                decomposition_table=dict(core_aten_decompositions()),
            )(*inputs, *grads)
    except ReferenceFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - what torch cannot trace is this model's limit, said as such
        lines = str(exc).strip().splitlines()
        raise ComposeFailed(
            f"its backward cannot be traced to torch's operators ({type(exc).__name__}: "
            f"{lines[0][:200] if lines else ''})"
        ) from None
    carrier = _Carrier()
    values: dict[Any, Any] = {}
    fed = iter([*inputs, *grads])
    found: list = []
    for node in graph.graph.nodes:
        if node.op == "placeholder":
            values[node] = next(fed)
        elif node.op == "get_attr":  # a constant the reference made: exact
            values[node] = getattr(graph, node.target)
        elif node.op == "call_function":
            call_args = map_arg(node.args, values.__getitem__)
            call_kwargs = map_arg(node.kwargs, values.__getitem__)
            if node.target is operator.getitem:  # an element of a tuple an operator returned, as it is
                values[node] = call_args[0][call_args[1]]
            else:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)
                    values[node] = carrier.__torch_function__(node.target, (), call_args, call_kwargs)
        elif node.op == "output":
            found = list(map_arg(node.args[0], values.__getitem__))
    magnitudes_of: list[torch.Tensor | None] = []
    for gradient, take in zip(found, list(wanted) + [True] * (len(found) - len(wanted))):
        if not take or not isinstance(gradient, torch.Tensor):
            magnitudes_of.append(None)
            continue
        carried = carrier.carried.get(gradient)
        magnitudes_of.append(torch.zeros_like(gradient, dtype=torch.float64) if carried is None else carried)
    return magnitudes_of


def _floating_outputs(value: Any) -> list[torch.Tensor]:
    return [v for v in _flat(value) if isinstance(v, torch.Tensor) and v.is_floating_point()]


def _flat(value: Any) -> list:
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        return [leaf for item in value for leaf in _flat(item)]
    return [value]


IN_PLACE_OPERATORS = frozenset({"__iadd__", "__isub__", "__imul__", "__itruediv__", "__setitem__"})


def _raw_name(func: Any) -> str:
    if isinstance(func, torch._ops.OpOverload):  # a traced backward's operator: aten.slice_copy.Tensor
        name = _ATEN.get(func._opname, func._opname)
        return name[: -len("_copy")] if name.endswith("_copy") and name[: -len("_copy")] in COPIES else name
    name = getattr(func, "__name__", "") or ""
    if name == "__get__":  # a property of Tensor (x.T, x.mT)
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    return name


def _name(func: Any) -> str:
    """The API's name; an in-place method's without its underscore (the same model)."""
    name = _raw_name(func)
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _shown(func: Any) -> str:
    """torch.cumprod, Tensor.cumprod, torch.nn.functional.linear: a function as its user calls it."""
    if isinstance(func, torch._ops.OpOverload):
        return f"{func.namespace}.{func._opname}"
    name = _raw_name(func)
    owner = getattr(func, "__qualname__", name).rpartition(".")[0]
    module = getattr(func, "__module__", None) or ""
    if owner in ("_VariableFunctionsClass", ""):
        return f"{module or 'torch'}.{name}" if module.startswith("torch") else f"torch.{name}"
    return f"Tensor.{name}" if "Tensor" in owner else f"{owner}.{name}"


def _in_place(func: Any) -> bool:
    if isinstance(func, torch._ops.OpOverload):  # a functionalized graph's: none
        return False
    name = _raw_name(func)
    return (name.endswith("_") and not name.endswith("__")) or name in IN_PLACE_OPERATORS


def _floating(tree: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(tree)
    return [v for v in leaves if isinstance(v, torch.Tensor) and v.is_floating_point()]


class _Carrier(TorchFunctionMode):
    """Runs every torch function as it is, and records beside each floating result the magnitude of
    the roundings it holds (the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.carried: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = _name(func)
        inputs = _floating((args, kwargs))
        carried = {id(t): self.carried[t] for t in inputs if t in self.carried}
        if name == "__setitem__":
            return self._set_item(func, args, kwargs, carried)
        # An in-place call changes its first input: the rules read the inputs as they were.
        before = (args, kwargs)
        if _in_place(func) and inputs:
            before = tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, (args, kwargs))
            carried = {id(c): carried[id(o)] for o, c in zip(inputs, _floating(before)) if id(o) in carried}
        out = func(*args, **kwargs)
        outputs = [v for v in _flat(out) if isinstance(v, torch.Tensor) and v.is_floating_point()]
        if not outputs or not inputs:
            return out  # sizes, masks, constants: exact
        found = self._rule(func, name, before, carried, outputs)
        for value, magnitude in zip(outputs, found):
            if magnitude is None:
                self.carried.pop(value, None)
            else:
                self.carried[value] = magnitude
        return out

    def _rule(self, func: Any, name: str, call: tuple, carried: dict[int, torch.Tensor], outputs: list) -> list:
        args, kwargs = call
        if name in CONSTANTS:
            return [None] * len(outputs)
        if name in COPIES:
            return _copies(func, args, kwargs, carried) if carried else [None] * len(outputs)
        if name in SUMS:
            return _sums(func, args, kwargs, carried)
        if name in ELEMENTWISE:
            own = (
                list(magnitudes.formula(name, args, kwargs, None))
                if name in magnitudes.PARAMETERS
                else [o.detach().abs().to(torch.float64) for o in outputs]
            )
            return _elementwise(func, args, kwargs, carried, own)
        if name in SOFTMAX:
            return _softmax(name, args, kwargs, carried, outputs)
        if name in magnitudes.PARAMETERS and not carried:
            return list(magnitudes.formula(name, args, kwargs, None))[: len(outputs)]
        what = _shown(func)
        if name in magnitudes.PARAMETERS:
            raise ComposeFailed(
                f"{what} takes a tensor holding the roundings of earlier steps, and this model carries none "
                f"through {name}"
            )
        raise ComposeFailed(f"{what} is not an API whose magnitude model composes here")

    def _set_item(self, func: Any, args: Sequence[Any], kwargs: dict, carried: dict[int, torch.Tensor]) -> Any:
        target, index, value = args[0], args[1], args[2]
        func(*args, **kwargs)
        if isinstance(target, torch.Tensor) and target.is_floating_point():
            base = self.carried.get(target)
            moved = carried.get(id(value)) if isinstance(value, torch.Tensor) else None
            if base is not None or moved is not None:
                base = torch.zeros_like(target, dtype=torch.float64) if base is None else base.clone()
                base[index] = 0 if moved is None else moved
                self.carried[target] = base
        return None


def _with(args: Any, kwargs: Any, replace: Callable[[torch.Tensor], Any]) -> tuple:
    def swap(v: Any) -> Any:
        return replace(v) if isinstance(v, torch.Tensor) and v.is_floating_point() else v

    return tree_map(swap, args), tree_map(swap, kwargs)


def _copies(func: Any, args: Any, kwargs: Any, carried: dict[int, torch.Tensor]) -> list:
    moved_args, moved_kwargs = _with(args, kwargs, lambda v: carried.get(id(v), torch.zeros_like(v)))
    if _name(func) == "masked_fill":  # the value written carries no rounding
        moved_args = (*moved_args[:2], 0.0) if len(moved_args) > 2 else moved_args
        moved_kwargs = {**moved_kwargs, "value": 0.0} if "value" in moved_kwargs else moved_kwargs
    return [o for o in _flat(func(*moved_args, **moved_kwargs)) if isinstance(o, torch.Tensor)]


def _absolute(value: Any) -> Any:
    """|x| for the terms of a sum: tensors and coefficients (alpha, beta), not dims or indices."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().abs()
    if isinstance(value, float):
        return abs(value)
    return value


def _sums(func: Any, args: Any, kwargs: Any, carried: dict[int, torch.Tensor]) -> list:
    """own + prop: the API on |inputs|, plus its directional derivative there along the roundings."""

    def at_magnitude(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            absolute = v.detach().abs()
            if id(v) in carried:
                absolute = fwAD.make_dual(absolute, carried[id(v)].to(absolute.dtype))
            return absolute
        return _absolute(v)

    with fwAD.dual_level():
        out = _jvp_call(func, tree_map(at_magnitude, args), tree_map(at_magnitude, kwargs))
        found = []
        for value in _flat(out):
            if not (isinstance(value, torch.Tensor) and value.is_floating_point()):
                continue
            primal, tangent = fwAD.unpack_dual(value)
            found.append(primal if tangent is None else primal + tangent)
    return found


def _elementwise(func: Any, args: Any, kwargs: Any, carried: dict[int, torch.Tensor], own: list) -> list:
    """own + prop: the API's own (|the result|, or its formula), plus each input's |directional
    derivative| along the roundings it carries."""
    found = list(own)
    for key, magnitude in carried.items():
        with fwAD.dual_level():

            def one(v: Any, key: int = key, magnitude: torch.Tensor = magnitude) -> Any:
                if isinstance(v, torch.Tensor) and id(v) == key:
                    return fwAD.make_dual(v.detach().clone(), magnitude.to(v.dtype))
                return v.detach() if isinstance(v, torch.Tensor) else v

            out = _jvp_call(func, tree_map(one, args), tree_map(one, kwargs))
            tangents = [fwAD.unpack_dual(v).tangent for v in _flat(out) if isinstance(v, torch.Tensor)]
        for i, tangent in enumerate(tangents[: len(found)]):
            if tangent is not None:
                found[i] = found[i] + tangent.abs().to(torch.float64)
    return found


def _softmax(name: str, args: Any, kwargs: Any, carried: dict[int, torch.Tensor], outputs: list) -> list:
    """softmax: its formula, plus y (m + sum y m) of the roundings its input carries; log_softmax
    |y|, plus m + sum softmax(x) m."""
    x = args[0] if args else kwargs.get("input")
    dim = kwargs.get("dim", args[1] if len(args) > 1 else -1)
    dim = -1 if dim is None else dim
    own = (
        magnitudes.formula("softmax", tuple(args)[:2], kwargs, None)[0]  # aten's _softmax: half_to_float third
        if name == "softmax"
        else outputs[0].detach().abs().to(torch.float64)
    )
    m = carried.get(id(x)) if isinstance(x, torch.Tensor) else None
    if m is None:
        return [own]
    y = torch.softmax(x.detach().to(torch.float64), dim)
    m = torch.where(y > 0, m, 0)  # a masked position (-inf, its m infinite) weighs nothing
    spread = (y * m).sum(dim, keepdim=True)
    return [own + (y * (m + spread) if name == "softmax" else m + spread)]


def _jvp_call(func: Any, args: Any, kwargs: Any) -> Any:
    try:
        return func(*args, **kwargs)
    except RuntimeError as exc:
        what = _shown(func)
        raise ComposeFailed(f"{what} has no forward derivative in torch: {str(exc).splitlines()[0][:200]}") from None
