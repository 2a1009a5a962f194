"""PyTorch: resolve an entry to its callable, run it tested and as benchmark.

Imported only when a PyTorch entry is checked. The tested run happens on the
device under test in the recorded dtypes (or is read from the dump in
`recorded` mode); the benchmark runs on CPU with every floating tensor in
float64. Both sides come back as numpy arrays for compare.py.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import torch

from .. import devices
from ..dump import BACKWARD, DISTRIBUTED_TYPES, Dump, EntryName
from ..inputs import REAL, Device, Rebuilder, Undescribed, is_tensor_spec, tree_map
from ..outcome import BenchmarkFailed, Kept, OutputPair, Run, Unsupported

RECORDED = "recorded"

# Random by design: two runs never agree, so there is nothing to check.
NONDETERMINISTIC = re.compile(
    r"dropout|^rand|bernoulli|multinomial|^normal_?$|poisson|^uniform_$|exponential_|geometric_"
    r"|cauchy_|log_normal_|^random_$|rrelu|^empty|new_empty"
)
# Casts: their dtype argument is the point of the call, and never autocast.
CASTS = frozenset({"to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long", "bool", "char",
                   "byte", "short", "cpu", "cuda", "npu"})
LOW_PRECISION = (torch.float16, torch.bfloat16)


class TorchCodec:
    """Specs -> torch values (see inputs.Codec)."""

    def dtype(self, name: str) -> torch.dtype:
        dtype = getattr(torch, str(name).replace("torch.", "", 1), None) if str(name).startswith("torch.") else None
        if not isinstance(dtype, torch.dtype):
            raise KeyError(name)
        return dtype

    def dtype_kind(self, name: str) -> str:
        dtype = self.dtype(name)
        if dtype == torch.bool:
            return "b"
        if dtype.is_complex:
            return "c"
        return "f" if dtype.is_floating_point else "i"

    def load(self, path: Path) -> torch.Tensor:
        tensor = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"holds a {type(tensor).__name__}, not a tensor")
        return tensor

    def from_array(self, array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        array = np.asarray(array)
        if not array.flags.c_contiguous:
            array = array.copy()
        return torch.from_numpy(array).to(dtype)

    def shape_of(self, tensor: torch.Tensor) -> List[int]:
        return list(tensor.shape)

    def size(self, dims: List[int]) -> torch.Size:
        return torch.Size(dims)


CODEC = TorchCodec()


def resolve(name: EntryName, device: str) -> tuple:
    """(tested callable, bench callable) of an entry; Unsupported says why there is none."""
    api_type, api = name.api_type, name.api
    if api_type in DISTRIBUTED_TYPES:
        raise Unsupported(f"{api_type} collective: it cannot be re-run alone, on one device")
    if NONDETERMINISTIC.search(api):
        raise Unsupported(f"non-deterministic API {api}: two runs never agree")
    if api_type == "NPU":
        return resolve_npu(api, device)
    target = resolve_torch(api_type, api)
    return target, target


def resolve_npu(api: str, device: str) -> tuple:
    """torch_npu's fused op on the NPU, its float64 CPU reference as the bench."""
    from .. import npu_reference

    reference = npu_reference.lookup(api)
    if reference is None:
        raise Unsupported(f"NPU op {api} has no CPU reference to benchmark it with")
    bench = _skip_unmodelled(api, reference, npu_reference.ReferenceUnsupported)
    if device == RECORDED:
        return None, bench
    if not device.startswith("npu"):
        raise Unsupported(f"NPU op {api} runs only on an NPU: use --msprobe-device npu, or recorded "
                          "to check the outputs a tensor dump recorded")
    import torch_npu

    return getattr(torch_npu, api), bench


def _skip_unmodelled(api: str, reference: Callable, unsupported: type) -> Callable:
    """A call using a feature the reference does not model is a SKIP, not a bench failure."""

    def bench(*args, **kwargs):
        try:
            return reference(*args, **kwargs)
        except unsupported as exc:
            raise Unsupported(f"NPU op {api}: {exc}") from None

    return bench


def resolve_torch(api_type: str, api: str) -> Callable:
    roots = {
        "Functional": lambda: torch.nn.functional,
        "Tensor": lambda: torch.Tensor,
        "Torch": lambda: torch,
        "VF": lambda: torch._VF,
        "Aten": lambda: torch.ops.aten,
    }
    if api_type not in roots:
        raise Unsupported(f"unknown API type {api_type!r}")
    target: Any = roots[api_type]()
    for part in api.split("."):
        try:
            target = getattr(target, part)
        except (AttributeError, RuntimeError):
            raise Unsupported(f"{api_type}.{api} does not exist in torch {torch.__version__}") from None
    if not callable(target):
        raise Unsupported(f"{api_type}.{api} is not callable")
    return target


# -- the call ------------------------------------------------------------------


@dataclass
class Call:
    """A recorded call rebuilt: the callable and its arguments (recorded dtypes, CPU)."""

    name: EntryName
    fn: Optional[Callable]  # the tested callable (None in recorded mode)
    bench_fn: Callable
    args: list
    kwargs: dict
    output_specs: list
    notes: List[str] = field(default_factory=list)
    grad_flags: List[bool] = field(default_factory=list)  # per floating input: took a gradient
    autocast: Optional[torch.dtype] = None

    @property
    def inplace(self) -> bool:
        api = self.name.api.rsplit(".", 1)[-1]
        return (api.endswith("_") and not api.endswith("__")) or api.startswith("__i") or self.kwargs.get(
            "inplace"
        ) is True


def build_call(dump: Dump, name: EntryName, fns: tuple, mode: str, seed: int) -> Call:
    forward = dump.entries.get(f"{name.prefix}.forward")
    if forward is None:
        raise Unsupported(f"no forward entry {name.prefix}.forward in the dump to rebuild the call from")
    rebuilder = Rebuilder(CODEC, f"{name.prefix}.forward", dump.tensor_dir, mode, seed)
    rebuilt = rebuilder.rebuild(forward)
    output_specs = flat_specs(forward.get("output", []))
    call = Call(name, *fns, rebuilt.args, rebuilt.kwargs, output_specs, list(rebuilt.notes))
    call.grad_flags = [spec.get("requires_grad") is not False for spec in input_tensor_specs(forward)
                       if CODEC.dtype_kind(spec["dtype"]) == "f"]
    recover_undescribed(call)
    call.autocast = autocast_dtype(call)
    if call.autocast is not None:
        call.notes.append(f"autocast to {call.autocast} applied: recorded inputs are wider than the output")
    return call


def flat_specs(specs: Any) -> list:
    """Output specs in order, nested lists flattened (spec dicts and None are leaves)."""
    if isinstance(specs, list):
        return [leaf for item in specs for leaf in flat_specs(item)]
    return [specs]


def input_tensor_specs(body: dict) -> list:
    """The tensor specs of a forward entry's inputs, in argument order (kwargs after args)."""
    specs = flat_specs(body.get("input_args", [])) + flat_specs(list(body.get("input_kwargs", {}).values()))
    return [spec for spec in specs if is_tensor_spec(spec)]


def recover_undescribed(call: Call) -> None:
    """msprobe 26.x writes `{}` for some dtype arguments: the output dtype tells which."""
    out_dtype = next((s.get("dtype") for s in call.output_specs if is_tensor_spec(s)), None)

    def recover(value: Any) -> Any:
        if not isinstance(value, Undescribed):
            return value
        if out_dtype is None:
            raise Unsupported(f"{value.field} is {{}}: msprobe could not describe it")
        call.notes.append(f"{value.field} was {{}}: read as {out_dtype}, the recorded output dtype")
        return CODEC.dtype(out_dtype)

    call.args = tree_map(recover, call.args)
    call.kwargs = tree_map(recover, call.kwargs)


def autocast_dtype(call: Call) -> Optional[torch.dtype]:
    """fp32 inputs but a bf16/fp16 output: the call ran under autocast."""
    if call.name.api in CASTS:
        return None
    inputs = {t.dtype for t in tensors(call.args, call.kwargs) if t.is_floating_point()}
    outputs = {s.get("dtype") for s in call.output_specs if is_tensor_spec(s)}
    if len(outputs) != 1 or not inputs:
        return None
    try:
        out = CODEC.dtype(outputs.pop())
    except KeyError:
        return None
    if out in LOW_PRECISION and all(d not in LOW_PRECISION and d.itemsize > out.itemsize for d in inputs):
        return out
    return None


def tensors(*trees: Any) -> List[torch.Tensor]:
    found: List[torch.Tensor] = []
    for tree in trees:
        tree_map(lambda v: found.append(v) if isinstance(v, torch.Tensor) else None, tree)
    return found


# -- the two sides -------------------------------------------------------------


@dataclass
class Side:
    """How one side places its tensors: tested (device, recorded dtype) or bench."""

    device: str
    floating: Optional[torch.dtype] = None  # None keeps the recorded dtype
    autocast: Optional[torch.dtype] = None

    def place(self, value: Any) -> Any:
        if isinstance(value, Device):
            return torch.device(self.device)
        if not isinstance(value, torch.Tensor):
            return value
        dtype = self.floating if (value.is_floating_point() and self.floating is not None) else value.dtype
        return value.detach().to(device=self.device, dtype=dtype, copy=True)

    def context(self) -> contextlib.AbstractContextManager:
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(torch.device(self.device).type, dtype=self.autocast)


def call_on(side: Side, call: Call, grad: bool = False):
    """(output, floating input tensors in argument order) of the call placed on one side."""
    args = tree_map(side.place, call.args)
    kwargs = tree_map(side.place, call.kwargs)
    leaves = [t for t in tensors(args, kwargs) if t.is_floating_point()]
    if grad:
        # Only what took a gradient in the training step (running stats of
        # batch_norm, say, did not and cannot).
        for leaf, wanted in itertools.zip_longest(leaves, call.grad_flags[: len(leaves)], fillvalue=True):
            leaf.requires_grad_(wanted)
    if grad and call.inplace:
        # An in-place op may not write into a leaf that requires grad.
        args, kwargs = tree_map(_clone_tensor, args), tree_map(_clone_tensor, kwargs)
    fn = call.bench_fn if side.device == "cpu" and side.floating is not None else call.fn
    with side.context(), torch.set_grad_enabled(grad):
        return fn(*args, **kwargs), leaves


def _clone_tensor(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def bench_sides() -> Sequence[Side]:
    """float64 first; float32 where the API has no float64 kernel."""
    return Side("cpu", torch.float64), Side("cpu", torch.float32)


def run_bench(fn: Callable[[Side], Any]) -> tuple:
    """(result, side, note) of the first bench side that runs."""
    errors = []
    for side in bench_sides():
        try:
            return fn(side), side, ("" if side.floating == torch.float64 else
                                    f"benchmark ran in {side.floating}: float64 raised {errors[0]}")
        except Unsupported:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the bench is reported
            errors.append(f"{type(exc).__name__}: {_first_line(exc)}")
    raise BenchmarkFailed(f"the benchmark cannot run on CPU: {errors[-1]}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def tested_side(device: str, call: Call) -> Side:
    return Side(device, None, call.autocast)


# -- outputs -------------------------------------------------------------------


def flat_outputs(out: Any) -> list:
    """Outputs in order: tuples (named ones too) and lists flattened."""
    if isinstance(out, (tuple, list)) and not isinstance(out, torch.Size):
        return [leaf for item in out for leaf in flat_outputs(item)]
    return [out]


def to_array(value: Any) -> Optional[tuple]:
    """(array, dtype name, shape) of one output; None for outputs not compared."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.is_floating_point():
            array = t.to(torch.float64).numpy()
        elif t.is_complex():
            array = t.to(torch.complex128).numpy()
        else:
            array = t.numpy()
        return array, str(value.dtype), list(value.shape)
    if isinstance(value, torch.Size):
        return np.asarray(list(value), dtype=np.int64), "torch.Size", [len(value)]
    if isinstance(value, bool):
        return np.asarray(value), "bool", []
    if isinstance(value, int):
        return np.asarray(value, dtype=np.int64), "int", []
    if isinstance(value, float):
        return np.asarray(value, dtype=np.float64), "float", []
    return None


def pairs_of(tested: Sequence[Any], bench: Sequence[Any]) -> List[OutputPair]:
    pairs = []
    for index, (t, b) in enumerate(zip(tested, bench)):
        if t is None and b is None:
            continue
        t_arr, b_arr = to_array(t), to_array(b)
        if t_arr is None or b_arr is None:
            what = type(t if t_arr is None else b).__name__
            pairs.append(OutputPair(index, skip=f"output of type {what} is not compared"))
            continue
        pairs.append(OutputPair(index, t_arr[0], b_arr[0], t_arr[1], b_arr[1], t_arr[2]))
    if len(tested) != len(bench):
        pairs.append(OutputPair(len(pairs), skip=f"the tested side gave {len(tested)} outputs, the bench {len(bench)}"))
    return pairs


def input_scale(call: Call) -> float:
    """The largest finite |value| among the floating inputs."""
    scale = 0.0
    for t in tensors(call.args, call.kwargs):
        if t.is_floating_point() and t.numel():
            finite = t[torch.isfinite(t)]
            if finite.numel():
                scale = max(scale, float(finite.abs().max()))
    return scale


# -- forward and backward ------------------------------------------------------


def run(dump: Dump, name: EntryName, device: str, mode: str, seed: int, keep: bool = False) -> Run:
    """keep: hand the values back on Run.kept (for the error data); off, nothing is held."""
    recorded = device == RECORDED
    call = build_call(dump, name, resolve(name, device), REAL if recorded else mode, seed)
    if name.direction == BACKWARD:
        return run_backward(dump, call, device, mode, seed, keep)
    bench_out, side, note = run_bench(lambda s: call_on(s, call)[0])
    result = Run([], call.notes + ([note] if note else []), input_scale(call))
    bench = flat_outputs(bench_out)
    tested = None
    if recorded:
        tested = recorded_values(dump, f"{name.prefix}.forward", call.output_specs, "output")
    else:
        try:
            tested = flat_outputs(call_on(tested_side(device, call), call)[0])
            devices.synchronize(device)
        except Exception as exc:  # noqa: BLE001 - a device that raises is a finding
            result.tested_error = f"{type(exc).__name__}: {_first_line(exc)}"
    keep_values(result, keep, call, tested, bench, None)
    if tested is not None:
        result.pairs = skip_uncompared(name, pairs_of(tested, bench))
    return result


def skip_uncompared(name: EntryName, pairs: List[OutputPair]) -> List[OutputPair]:
    """Outputs of NPU references that only keep torch_npu's structure are not compared."""
    if name.api_type != "NPU":
        return pairs
    from ..npu_reference import UNCOMPARED_OUTPUTS

    why = UNCOMPARED_OUTPUTS.get(name.api, {})
    return [OutputPair(p.index, skip=why[p.index]) if p.index in why else p for p in pairs]


def recorded_values(dump: Dump, entry: str, specs: list, key: str) -> list:
    """The values a tensor dump recorded, loaded from its files (None stays None)."""
    rebuilder = Rebuilder(CODEC, entry, dump.tensor_dir, REAL, 0)
    return [None if spec is None else rebuilder.value(spec, f"{key}[{i}]") for i, spec in enumerate(specs)]


def run_backward(dump: Dump, call: Call, device: str, mode: str, seed: int, keep: bool = False) -> Run:
    name = call.name
    body = dump.entries[name.full]
    recorded = device == RECORDED
    rebuilder = Rebuilder(CODEC, name.full, dump.tensor_dir, REAL if recorded else mode, seed)
    grad_outputs = rebuilder.rebuild(body, "input", "").args
    grad_specs = flat_specs(body.get("output", []))
    notes = call.notes + rebuilder.notes

    if recorded and returns_its_input(call):
        raise Unsupported(f"{name.api} returned its input unchanged (a no-op cast), so it has no backward node "
                          "of its own: the gradients msprobe recorded for it belong to other calls")
    bench_grads, side, note = run_bench(lambda s: gradients(s, call, grad_outputs))
    result = Run([], notes + ([note] if note else []), input_scale(call))
    if recorded:
        tested = recorded_values(dump, name.full, grad_specs, "output")
        result.pairs = recorded_gradient_pairs(tested, bench_grads, grad_specs)
        if keep:  # saved in the order of the bench gradients, as the details rows are
            matched, _ = match_recorded_gradients(tested, bench_grads, grad_specs)
            tested = [matched.get(i) for i in range(len(bench_grads))]
        keep_values(result, keep, call, tested, bench_grads, grad_outputs)
        return result
    try:
        tested = gradients(tested_side(device, call), call, grad_outputs)
        devices.synchronize(device)
    except Unsupported:
        raise
    except Exception as exc:  # noqa: BLE001
        result.tested_error = f"{type(exc).__name__}: {_first_line(exc)}"
        keep_values(result, keep, call, None, bench_grads, grad_outputs)
        return result
    keep_values(result, keep, call, tested, bench_grads, grad_outputs)
    expected = [i < len(grad_specs) and grad_specs[i] is not None for i in range(len(bench_grads))]
    result.pairs = [p for p in pairs_of(tested, bench_grads) if p.index < len(expected) and expected[p.index]]
    return result


def keep_values(result: Run, keep: bool, call: Call, tested, bench, grad_outputs) -> None:
    if keep:
        grads = None if grad_outputs is None else flat_outputs(grad_outputs)
        result.kept = Kept({"args": call.args, "kwargs": call.kwargs}, tested, bench, grads)


def returns_its_input(call: Call) -> bool:
    """A cast to the dtype it already has: torch returns the very input tensor."""
    if call.name.api not in CASTS or not call.args or not isinstance(call.args[0], torch.Tensor):
        return False
    source = call.args[0]
    outputs = [s for s in call.output_specs if is_tensor_spec(s)]
    return len(outputs) == 1 and outputs[0].get("dtype") == str(source.dtype) and outputs[0].get("shape") == list(
        source.shape)


def gradients(side: Side, call: Call, grad_outputs: list) -> list:
    """Gradients of every floating input tensor, in argument order (None where unused)."""
    out, leaves = call_on(side, call, grad=True)
    outs = [o for o in flat_outputs(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs:
        raise Unsupported("the forward outputs take no grad")
    grads = [side.place(g) if isinstance(g, torch.Tensor) else None for g in flat_outputs(grad_outputs)]
    chosen = [(o, g) for o, g in zip(outs, grads) if g is not None]
    if not chosen:
        raise Unsupported("the backward entry records no grad_output for a differentiable output")
    for i, (o, g) in enumerate(chosen):
        if o.shape != g.shape:
            raise Unsupported(f"grad_output {i} has shape {list(g.shape)}, its output {list(o.shape)}")
    wanted = [leaf for leaf in leaves if leaf.requires_grad]
    # d/do of sum(o * g) is g exactly, so this is backward with grad_outputs g;
    # autograd.grad(..., grad_outputs=) imports sympy on first use (0.25-1.3 s a process).
    if any(o.is_complex() for o, _ in chosen):  # a complex loss has no implicit grad
        found = iter(torch.autograd.grad([o for o, _ in chosen], wanted, [g.to(o.dtype) for o, g in chosen],
                                         allow_unused=True))
    else:
        loss = sum((o * g.to(o.dtype)).sum() for o, g in chosen)
        found = iter(torch.autograd.grad(loss, wanted, allow_unused=True))
    return [next(found) if leaf.requires_grad else None for leaf in leaves]


def recorded_gradient_pairs(tested: list, bench: list, specs: list) -> List[OutputPair]:
    """Recorded gradients against the bench gradients of the inputs they belong to.

    Item i of a backward `output` is usually the gradient of differentiable
    input i, but for some APIs (linear, matmul) msprobe hooks an internal node
    and records gradients in another order or of shapes that match no input.
    A recorded gradient is matched by position and shape, else to the one input
    whose shape it alone has; the rest cannot be compared and say so.
    """
    shapes = [None if g is None else list(g.shape) for g in bench]
    matched, strays = match_recorded_gradients(tested, bench, specs)
    return gradient_pairs(matched, bench, shapes, strays)


def gradient_pairs(matched: dict, bench: list, shapes: list, strays: list) -> List[OutputPair]:
    """The matched recorded gradients against the bench's, and a SKIP for each input left
    without one when some recorded gradient matched no input."""
    pairs = []
    for index in sorted(matched):
        pair = pairs_of([matched[index]], [bench[index]])[0]
        pair.index = index
        pairs.append(pair)
    if strays:
        for index in (i for i, s in enumerate(shapes) if s is not None and i not in matched):
            pairs.append(OutputPair(index, skip=f"no recorded gradient has this input's shape {shapes[index]}: "
                                               f"msprobe recorded {strays}, which match no input"))
    return sorted(pairs, key=lambda p: p.index)


def match_recorded_gradients(tested: list, bench: list, specs: list) -> tuple:
    """({input index: recorded gradient}, shapes of the recorded gradients that match no input)."""
    shapes = [None if g is None else list(g.shape) for g in bench]
    matched: dict = {}
    strays = []
    for position, (t, spec) in enumerate(zip(tested, specs)):
        if spec is None or t is None:
            continue
        index = _input_of(position, list(t.shape), shapes, matched)
        if index is None:
            strays.append(list(t.shape))
        else:
            matched[index] = t
    return matched, strays


def _input_of(position: int, shape: list, shapes: list, taken: dict) -> Optional[int]:
    if position < len(shapes) and shapes[position] == shape and position not in taken:
        return position
    candidates = [i for i, s in enumerate(shapes) if s == shape and i not in taken]
    return candidates[0] if len(candidates) == 1 else None
