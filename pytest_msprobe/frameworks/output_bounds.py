"""An entry's output sizes, known before anything is allocated: beyond the bound, a SKIP naming it.

`--msprobe-max-elements` bounds what an entry may build. Its inputs are counted as they are
rebuilt (inputs.py); its outputs are asked for by its arguments (`eye(60000)`, `repeat`,
`interpolate(size=...)`), and the check makes each of them up to five times over (the tested
output, the float64 bench, their float64 copies for the metrics). So before a call runs:

- the shapes the dump recorded for its outputs (`recorded_outputs`, no framework needed);
- what the call would make: by its arguments for the common calls (shape_rules.py: by their tensors'
  shapes; size_rules.py: the factories, repeats, pads and resizes their size arguments size), else
  run on PyTorch's `meta` device (shapes, no data), the tensors and any device it names moved
  there (`call_outputs`); not at all for the calls no larger than their input (NO_LARGER_THAN_INPUT);
- where no meta kernel exists (data-dependent ops), a rule for the few such APIs whose output
  the data sizes (`DATA_SIZED`), else the integer size arguments themselves (`size_arguments`).

An output counts its elements whatever its strides: an `expand` is a view, but its bench copy in
float64 is not. The outputs of one entry are counted together.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import TYPE_CHECKING, Any, Callable

from ..inputs.rebuild import is_tensor_spec
from . import Unsupported, shape_rules

if TYPE_CHECKING:
    from .torch_engine import Call


# PyTorch APIs whose outputs together are no larger than their first input (its shape, a view of
# it, a reduction or a split of it), whatever their arguments: an input is within the bound, so
# they are not sized (a meta run costs a norm's Python decomposition, 40 ms for batch_norm).
NO_LARGER_THAN_INPUT = frozenset(
    {
        *("relu", "relu6", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "softplus", "mish"),
        *("leaky_relu", "elu", "selu", "celu", "hardtanh", "hardswish", "hardsigmoid", "logsigmoid", "softsign"),
        *("batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm", "local_response_norm"),
        *("abs", "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "erf", "reciprocal", "sign", "square"),
        *("contiguous", "clone", "detach", "float", "half", "bfloat16", "double", "int", "long", "bool"),
        *("to", "type_as", "dropout", "cumsum", "cumprod", "tril", "triu", "__neg__", "__invert__"),
        *("dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "fill", "zero", "copy"),
        # the input's shape, whatever the index and the values put into it
        *("index_add", "index_copy", "index_fill", "index_put", "scatter", "scatter_add", "scatter_reduce"),
        *("roll", "argsort", "normalize", "__setitem__"),
        *("view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "t", "transpose", "swapaxes"),
        *("permute", "movedim", "unsqueeze", "squeeze", "narrow", "select", "chunk", "split", "unbind"),
        # reductions with one output (`max`, `sort` and `topk` have two: not here)
        *("mean", "sum", "nansum", "nanmean", "prod", "amax", "amin", "argmax", "argmin", "std", "var"),
        *("norm", "logsumexp", "all", "any", "count_nonzero"),
    }
)


class OutputTooLarge(Unsupported):
    """An output past the bound; the message names the entry, the output, its shape and the bound."""


def _over(entry: str, what: str, shape: list[int] | None, count: int, bound: int, how: str) -> OutputTooLarge:
    shown = f" {shape}" if shape is not None else ""
    return OutputTooLarge(
        f"{entry}: {what}{shown} is {count:,} elements{how}, more than --msprobe-max-elements {bound:,}: "
        "not run (nothing was allocated for it)"
    )


def _sizes(shape: Any) -> list[int] | None:
    if isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        return shape
    return None  # the rebuild names a malformed shape where it matters


def recorded_entry(entries: dict, prefix: str, direction: str, bound: int) -> None:
    """The outputs recorded for an entry (a backward's input gradients, and its forward's outputs,
    which its call makes again) past the bound: OutputTooLarge."""
    for full in dict.fromkeys((f"{prefix}.forward", f"{prefix}.{direction}")):
        body = entries.get(full)
        if isinstance(body, dict):
            recorded_outputs(full, _flat(body.get("output", [])), bound)


def _flat(specs: Any) -> list:
    if isinstance(specs, list):
        return [leaf for item in specs for leaf in _flat(item)]
    return [specs]


def recorded_outputs(entry: str, specs: list, bound: int) -> None:
    """The outputs the dump recorded for `entry` (flattened specs), counted together."""
    shapes = [_sizes(spec.get("shape")) if is_tensor_spec(spec) else None for spec in specs]
    over = _first_over(shapes, bound)
    if over is not None:
        index, shape, count, together = over
        raise _over(entry, f"output[{index}].shape: recorded", shape, count, bound, together)


def _first_over(shapes: list, bound: int) -> tuple[int, list[int], int, str] | None:
    """The first output at which the shapes, counted together, pass `bound`: (index, shape, its
    count, how many with those before it), or None."""
    total = 0
    for index, shape in enumerate(shapes):
        if shape is None:
            continue
        count = math.prod(shape)
        total += count
        if total > bound:
            return index, shape, count, f" ({total:,} with the outputs before it)" if total != count else ""
    return None


def recorded_shapes(specs: list) -> bool:
    """Whether the dump recorded the shape of any tensor output."""
    return any(is_tensor_spec(spec) and _sizes(spec.get("shape")) is not None for spec in specs)


def sized_on_meta(framework: str, api: str) -> bool:
    """Whether the calls of `api` (`Functional.relu`) of a `framework` dump are sized on the meta
    device: all but PyTorch's NO_LARGER_THAN_INPUT, no larger than their input (within the bound),
    and those shape_rules.py reads (unless a call's arguments are out of its rule's form)."""
    return framework != "pytorch" or not (_no_larger_than_input(api) or shape_rules.rule_for(api))


def _no_larger_than_input(api: str) -> bool:
    name = api.rsplit(".", 1)[-1]
    return (name if name.endswith("__") else name.removesuffix("_")) in NO_LARGER_THAN_INPUT


def call_outputs(call: Call, bound: int, framework: str = "pytorch") -> None:
    """Raise OutputTooLarge where the call would make more than `bound` elements."""
    entry = f"{call.name.prefix}.forward"
    if framework == "pytorch" and _no_larger_than_input(call.name.api):
        return
    found, sized = None, "sized by its arguments"
    if framework == "pytorch":
        api = f"{call.name.api_type}.{call.name.api}"  # F.unfold is not Tensor.unfold
        found = shape_rules.output_shapes(api, call.args, call.kwargs)
    if found is None:
        found, sized = on_meta(call), "sized on PyTorch's meta device"
    if found is not None:
        over = _first_over(list(found), bound)
        if over is not None:
            index, shape, count, together = over
            how = f"{together} ({sized})"
            raise _over(entry, f"output[{index}] would be", shape, count, bound, how)
        return
    rule = DATA_SIZED.get(call.name.api.rsplit(".", 1)[-1]) if framework == "pytorch" else None
    if rule is not None:
        try:
            count = rule(call.args, call.kwargs)
        except Exception:  # noqa: BLE001 - arguments the rule cannot read: the call itself will say
            count = 0
        if count > bound:
            raise _over(entry, "an output (or a step inside the call) sized by its data", None, count, bound, "")
    # No meta kernel: the recorded shapes speak for a PyTorch entry, and the size arguments too;
    # a MindSpore entry's size arguments only where no shape is recorded.
    if framework == "pytorch" or not recorded_shapes(call.output_specs):
        size_arguments(entry, call.args, call.kwargs, bound)


def size_arguments(entry: str, args: list, kwargs: dict, bound: int) -> None:
    """An integer argument, or a list of them (a size), past the bound: what no call could make
    in memory, whatever it means."""
    for where, value in [
        *((f"input_args[{i}]", v) for i, v in enumerate(args)),
        *((f"input_kwargs.{k}", v) for k, v in kwargs.items()),
    ]:
        count = _size_of(value)
        if count is not None and count > bound:
            raise _over(entry, f"{where}: the size argument", _as_shape(value), count, bound, "")


def _size_of(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value)
    sizes = value if isinstance(value, (list, tuple)) else ()
    if sizes and all(isinstance(v, int) and not isinstance(v, bool) for v in sizes):
        return math.prod(abs(v) for v in sizes)
    return None


def _as_shape(value: Any) -> list[int] | None:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else None


def on_meta(call: Call) -> list[list[int] | None] | None:
    """The shapes of the bench callable's outputs, run on the meta device (None where an output is
    no tensor); None where it cannot run there."""
    import torch

    from ..inputs.rebuild import Device, tree_map
    from .torch_engine import flat_outputs

    meta = torch.device("meta")

    def place(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().to(meta)
        return meta if isinstance(value, Device) else value

    args = tree_map(place, call.args)
    kwargs = tree_map(place, call.kwargs)
    try:
        with _on_meta()(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the real call says them, once
            out = call.bench_fn(*args, **kwargs)
    except Exception:  # noqa: BLE001 - no meta kernel, or arguments the real call refuses too
        return None
    return [list(o.shape) if isinstance(o, torch.Tensor) else None for o in flat_outputs(out)]


def warm_up() -> None:
    """The meta device's first call imports PyTorch's meta registrations (sympy among them), and
    the first of its Python references (`eye`) torch._dynamo: together about as long as importing
    torch, paid once at the session's start rather than inside an entry and its time limit."""
    import torch

    with torch.no_grad():
        torch.eye(2, device="meta").mm(torch.empty(2, 2, device="meta"))


@functools.cache
def _on_meta() -> type:
    """A mode that puts every factory call on the meta device, whatever device it names (a device
    given as text, "cpu", would allocate there)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._device import _device_constructors

    meta = torch.device("meta")

    class OnMeta(TorchFunctionMode):
        def __torch_function__(self, func: Callable, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if "device" in kwargs or func in _device_constructors():
                kwargs["device"] = meta
            return func(*args, **kwargs)

    return OnMeta


# -- data-dependent outputs: no meta kernel, the (small, real) arguments size them --------------


def _combinations(args: list, kwargs: dict) -> int:
    # torch builds r grids of n^r elements (and their mask) before it selects the combinations.
    tensor = args[0] if args else kwargs["input"]
    r = args[1] if len(args) > 1 else kwargs.get("r", 2)
    return int(tensor.numel()) ** int(r) * max(int(r), 1)


def _repeat_interleave(args: list, kwargs: dict) -> int:
    import torch

    tensor = args[0] if args else kwargs["input"]
    repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
    if repeats is None:  # torch.repeat_interleave(repeats): the indices, sum(repeats) of them
        return int(tensor.clamp(min=0).sum())
    if not isinstance(repeats, torch.Tensor):
        return 0  # an int: sized on meta
    dim = args[2] if len(args) > 2 else kwargs.get("dim")
    rest = tensor.numel() // max(tensor.shape[dim], 1) if dim is not None and tensor.dim() else 1
    total = int(repeats.clamp(min=0).sum())
    if repeats.numel() == 1:  # one count for every element (or slice)
        total *= tensor.numel() if dim is None else tensor.shape[dim]
    return total * rest


def _bincount(args: list, kwargs: dict) -> int:
    tensor = args[0] if args else kwargs["input"]
    minlength = args[2] if len(args) > 2 else kwargs.get("minlength", 0)
    largest = int(tensor.max()) + 1 if tensor.numel() else 0
    return max(largest, int(minlength))


DATA_SIZED: dict[str, Callable[[list, dict], int]] = {
    "combinations": _combinations,
    "repeat_interleave": _repeat_interleave,
    "bincount": _bincount,
}
