"""MindSpore: the API on MindSpore (tested), its PyTorch equivalent in float64 (bench).

Imported only when a MindSpore entry is checked; MindSpore itself is imported
only for a tested run (a `recorded` check needs PyTorch alone). Arguments are
rebuilt as torch CPU tensors in the recorded dtypes: torch holds every
MindSpore dtype exactly (numpy has no bfloat16), the bench runs on them
through torch.py's machinery, and the tested run converts them to
mindspore.Tensor at the call. Outputs of both sides come back as torch
tensors, so Tested Dtype is spelled as torch spells it (reports.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..dumps import apis
from ..dumps.dump import BACKWARD, DISTRIBUTED_TYPES, Dump, EntryName
from ..inputs.rebuild import REAL, Rebuilder, element_bound, is_tensor_spec, tree_map
from . import OutputPair, Recipe, Run, RunOptions, Unsupported, ms_mapping, output_bounds
from . import torch_engine as engine
from .magnitudes import with_magnitudes

DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "bool_": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}

# How MindSpore 2.10 says that an op has no kernel for this device (or for these dtypes).
MISSING_KERNEL = (
    (re.compile(r"The kernel (\w+) unregistered"), ""),
    (re.compile(r"Create kernelmod for op (\w+) failed"), ""),
    (re.compile(r"Select \w+ operator\[(\w+)\] fail! Unsupported data type"), " for these input dtypes"),
    (re.compile(r"[Uu]nsupported op \[(\w+)\]"), ""),
)


class MindSporeCodec(engine.TorchCodec):
    """Specs of a MindSpore dump (`Float32`, `.npy`) -> torch CPU tensors (see inputs.Codec).

    Torch tensors, since numpy has no bfloat16; they become MindSpore tensors at the call.
    """

    def dtype(self, name: str) -> torch.dtype:
        key = str(name).lower().replace("mindspore.", "", 1)
        if key not in DTYPES:
            raise KeyError(name)
        return DTYPES[key]

    def load(self, path: Path) -> torch.Tensor:
        array = np.load(path, allow_pickle=False)
        if not isinstance(array, np.ndarray):
            raise TypeError("holds no single array")
        return torch.from_numpy(contiguous(array))

    def cast(self, tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return tensor.to(dtype)

    def size(self, dims: list[int]) -> tuple:
        return tuple(dims)  # MindSpore takes shapes as tuples


CODEC = MindSporeCodec()


def contiguous(array: np.ndarray) -> np.ndarray:
    """For torch.from_numpy; unlike np.ascontiguousarray, a 0-d array stays 0-d."""
    array = np.asarray(array)
    return array if array.flags.c_contiguous else array.copy()


# -- MindSpore itself, imported once and only for a tested run -----------------

_bound: dict[str, str] = {}


def mindspore():
    """The mindspore module, in PyNative mode with kernel errors raised where they happen."""
    try:
        import mindspore as ms
    except ImportError as exc:
        raise Unsupported(
            f"MindSpore is not installed ({exc}): pip install 'pytest-msprobe[mindspore]', "
            "or check the outputs a tensor dump recorded with --msprobe-device recorded"
        ) from None
    if "mode" not in _bound:
        ms.set_context(mode=ms.PYNATIVE_MODE)
        # Without it an op's kernel error surfaces at the next op: another entry's.
        ms.runtime.launch_blocking()
        _bound["mode"] = "pynative"
    return ms


def bind(device: str) -> str:
    """Run MindSpore on `device` ("cpu" or "npu:<id>") in this process; the device string.

    MindSpore binds a process to one device once: asking for another later is an error.
    """
    target, _, index = device.partition(":")
    if target not in ("cpu", "npu"):
        raise Unsupported(f"MindSpore entries run on cpu or npu, not {device!r}")
    if _bound.get("device") == device:
        return device
    if "device" in _bound:
        raise Unsupported(f"MindSpore is bound to {_bound['device']} in this process, not {device}")
    ms = mindspore()
    wanted = ("Ascend", int(index or 0)) if target == "npu" else ("CPU", 0)
    try:
        ms.set_device(*wanted)
    except RuntimeError as exc:
        # MindSpore already ran a kernel in this process: it is bound to what it ran on.
        current = ms.get_current_device()
        if current[0] != wanted[0] or (target == "npu" and current[1] != wanted[1]):
            raise Unsupported(
                f"MindSpore cannot move to {device}: {exc} (it runs on {current[0]}:{current[1]})"
            ) from None
    _bound["device"] = device
    return device


def to_mindspore(value: Any) -> Any:
    """A torch value of the rebuilt call as MindSpore takes it."""
    ms = mindspore()
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: through float32, exactly
            return ms.Tensor(tensor.float().numpy()).astype(ms.bfloat16)
        return ms.Tensor(tensor.numpy())
    if isinstance(value, torch.dtype):
        name = str(value).replace("torch.", "")
        return getattr(ms, "bool_" if name == "bool" else name)
    return value


def from_mindspore(value: Any) -> Any:
    """A MindSpore output as a torch tensor in the same dtype; tuples flattened by the caller."""
    ms = mindspore()
    if isinstance(value, ms.Tensor):
        if value.dtype == ms.bfloat16:
            return torch.from_numpy(value.astype(ms.float32).asnumpy().copy()).to(torch.bfloat16)
        # asnumpy() shares the tensor's memory: a copy outlives it.
        return torch.from_numpy(np.array(value.asnumpy(), copy=True))
    if isinstance(value, (tuple, list)):
        return [from_mindspore(v) for v in value]
    return value


def missing_kernel(exc: BaseException) -> str | None:
    """The kernel MindSpore says it lacks (`GeluExt`, `Exp for these input dtypes`), or None."""
    for pattern, qualifier in MISSING_KERNEL:
        found = pattern.search(str(exc))
        if found:
            return found.group(1) + qualifier
    return None


# -- resolving an entry --------------------------------------------------------


def resolve_bench(name: EntryName) -> ms_mapping.Equivalent:
    if name.api_type in DISTRIBUTED_TYPES:
        raise Unsupported(f"{name.api_type} collective: it cannot be re-run alone, on one device")
    if engine.NONDETERMINISTIC.search(name.api.rsplit(".", 1)[-1]):
        raise Unsupported(f"non-deterministic API {name.api}: two runs never agree")
    if name.api_type != "Primitive":  # the same SKIP whether the tested side runs or is recorded
        apis.listed(apis.MINDSPORE, name.api_type, name.api)
    equivalent = ms_mapping.lookup(name.api_type, name.api)
    if equivalent is None and name.api_type == "Primitive":
        raise Unsupported(
            f"Primitive.{name.api} has no PyTorch equivalent in pytest-msprobe's MindSpore mapping "
            "table: msprobe records no primitive attributes, and only primitives whose attributes "
            f"the arguments tell are mapped ({', '.join(sorted(ms_mapping.PRIMITIVE))})"
        )
    if equivalent is None:
        raise Unsupported(
            f"{name.api_type}.{name.api} has no PyTorch equivalent in pytest-msprobe's MindSpore "
            "mapping table (frameworks/ms_mapping.py), so there is no benchmark for it"
        )
    return equivalent


def resolve_tested(name: EntryName, call: engine.Call) -> Callable:
    """The MindSpore callable of the entry (a primitive is built with its attributes)."""
    ms = mindspore()
    api_type, api = name.api_type, name.api
    where = f"MindSpore {ms.__version__}"
    if api_type == "Primitive":
        cls = apis.resolve(ms.ops, apis.primitive(api, ms_mapping.PRIMITIVE), where)
        attributes = resolve_bench(name).primitive_args or (lambda *args: ())
        try:
            return cls(*attributes(*call.args))
        except Exception as exc:  # noqa: BLE001 - arguments the attribute rule cannot read
            raise Unsupported(
                f"Primitive {api}: cannot derive its attributes from the recorded arguments "
                f"({type(exc).__name__}: {exc})"
            ) from None
    roots = {
        "Mint": lambda: ms.mint,
        "MintFunctional": lambda: ms.mint.nn.functional,
        "Functional": lambda: ms.ops,
        "Tensor": lambda: ms.Tensor,
    }
    listed = apis.listed(apis.MINDSPORE, api_type, api)  # only msprobe's APIs, along the listed path
    return apis.resolve(roots[api_type](), listed, where)


# -- the call ------------------------------------------------------------------


def build_call(dump: Dump, name: EntryName, mode: str, seed: int) -> engine.Call:
    equivalent = resolve_bench(name)
    forward = engine.forward_body(dump, name)
    rebuilt = Rebuilder(CODEC, f"{name.prefix}.forward", dump.tensor_dir, mode, seed).rebuild(forward)
    call = engine.Call(
        name,
        None,
        equivalent.bench(),
        rebuilt.args,
        rebuilt.kwargs,
        engine.flat_specs(forward.get("output", [])),
        list(rebuilt.notes),
    )
    if equivalent.note:
        call.notes.append(equivalent.note)
    return call


def on_mindspore(call: engine.Call, leaves: list | None = None) -> tuple:
    """(args, kwargs) on MindSpore; the floating tensors replaced by `leaves` when given."""
    replacements = iter(leaves or [])

    def convert(value: Any) -> Any:
        if leaves is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
            return next(replacements)
        return to_mindspore(value)

    args = [as_tuple(arg) for arg in call.args]
    kwargs = {key: as_tuple(value) for key, value in call.kwargs.items()}
    return tree_map(convert, args), tree_map(convert, kwargs)


_INDEX_ITEMS = (int, slice, type(Ellipsis), type(None))


def as_tuple(value: Any) -> Any:
    """msprobe writes a tuple as a JSON list, and some MindSpore ops (mint.permute,
    ops.tile) refuse a list of ints: a list of ints or index items is a tuple again.
    Lists of tensors (mint.cat) stay lists."""
    if not isinstance(value, list):
        return value
    items = [as_tuple(item) for item in value]
    if items and all(isinstance(item, _INDEX_ITEMS) and not isinstance(item, bool) for item in items):
        return tuple(items)
    return items


def tested_forward(call: engine.Call, fn: Callable) -> list:
    args, kwargs = on_mindspore(call)
    return engine.flat_outputs(from_mindspore(fn(*args, **kwargs)))


def tested_gradients(call: engine.Call, fn: Callable, grad_outputs: list) -> list:
    """Gradients of every floating input through mindspore.vjp, with the recorded sens."""
    ms = mindspore()
    leaves = [to_mindspore(t) for t in engine.floating([call.args, call.kwargs])]

    def forward(*xs: Any) -> Any:
        args, kwargs = on_mindspore(call, list(xs))
        return fn(*args, **kwargs)

    out, vjp = ms.vjp(forward, *leaves)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not all(isinstance(o, ms.Tensor) for o in outs):
        raise Unsupported("an output is not a tensor: mindspore.vjp takes no sens for it")
    grads = engine.flat_outputs(grad_outputs)
    sens = []
    for i, o in enumerate(outs):
        g = grads[i] if i < len(grads) and isinstance(grads[i], torch.Tensor) else None
        sens.append(
            to_mindspore(g).astype(o.dtype)
            if g is not None
            else ms.Tensor(np.zeros(o.shape, dtype=np.float32)).astype(o.dtype)
        )
    found = vjp(tuple(sens) if isinstance(out, (tuple, list)) else sens[0])
    found = found if isinstance(found, (tuple, list)) else (found,)
    return [from_mindspore(g) for g in found]


def on_device(name: EntryName, work: Callable[[], list]) -> Callable[[], list]:
    """The tested run; a kernel MindSpore lacks on this device is a SKIP, not a finding."""

    def tested() -> list:
        try:
            return work()
        except Unsupported:
            raise
        except Exception as exc:
            kernel = missing_kernel(exc)
            if kernel is None:
                raise
            raise Unsupported(
                f"MindSpore {mindspore().__version__} has no kernel {kernel} on "
                f"{_bound.get('device', 'this device')} for {name.api_type}.{name.api} "
                f"({type(exc).__name__}: {engine.first_line(exc)})"
            ) from None

    return tested


# -- forward and backward ------------------------------------------------------


class MindSpore:
    """Entries of dumps written by msprobe's MindSpore PrecisionDebugger (PyNative mode)."""

    name = "mindspore"

    def run(self, dump: Dump, entry: EntryName, options: RunOptions) -> Run:
        call = build_call(dump, entry, REAL if options.recorded else options.mode, options.seed)
        output_bounds.call_outputs(call, element_bound(), self.name)  # before anything is allocated
        if not options.recorded:
            bind(options.device)
        sides = (
            backward_sides(dump, call, options) if entry.direction == BACKWARD else forward_sides(dump, call, options)
        )
        # The benchmark's PyTorch API says how its terms' magnitude is had (an adapter's says nothing).
        torch_name = resolve_bench(entry).torch_name
        magnitude_api = "" if " " in torch_name else torch_name
        if options.keep:
            sides.recipe = recipe(call, magnitude_api)
        return engine.run_sides(call, with_magnitudes(sides, magnitude_api, call), options)


def recipe(call: engine.Call, magnitude_api: str) -> Recipe:
    """The call as repro.py rebuilds it: the MindSpore callable by the path apis.py resolves it by,
    and the PyTorch bench as source."""
    name = call.name
    equivalent = resolve_bench(name)
    if name.api_type == "Primitive":
        attributes = equivalent.primitive_args or (lambda *args: ())
        path = apis.primitive(name.api, ms_mapping.PRIMITIVE).dotted
        return Recipe(
            "mindspore",
            path,
            equivalent.source(),
            primitive_args=tuple(attributes(*call.args)),
            magnitude_api=magnitude_api,
        )
    path = apis.listed(apis.MINDSPORE, name.api_type, name.api).dotted
    return Recipe("mindspore", path, equivalent.source(), magnitude_api=magnitude_api)


def probing(options: RunOptions, work: Callable[[], list]) -> Callable[[], list]:
    """The fp32 probe's run on MindSpore: on the CPU when the tested side was recorded."""

    def probe() -> list:
        bind(options.probe_device)
        return work()

    return probe


def forward_sides(dump: Dump, call: engine.Call, options: RunOptions) -> engine.Sides:
    name = call.name
    if options.recorded:

        def tested() -> list:
            return engine.recorded_values(CODEC, dump, f"{name.prefix}.forward", call.output_specs, "output")
    else:

        def tested() -> list:
            fn = resolve_tested(name, call)
            return on_device(name, lambda: tested_forward(call, fn))()

    def probe() -> list:
        widened = engine.in_fp32(call)
        return tested_forward(widened, resolve_tested(name, widened))

    return engine.Sides(
        lambda side: engine.forward(side, call),
        tested,
        engine.pairs_of,
        call.notes,
        options.recorded,
        probe=probing(options, probe),
    )


def backward_sides(dump: Dump, call: engine.Call, options: RunOptions) -> engine.Sides:
    name = call.name
    body = dump.entries[name.full]
    rebuilder = Rebuilder(CODEC, name.full, dump.tensor_dir, REAL if options.recorded else options.mode, options.seed)
    grad_outputs = rebuilder.rebuild(body, "input", "").args
    grad_specs = gradient_specs(name, call, engine.flat_specs(body.get("output", [])))
    notes = call.notes + rebuilder.notes
    recorded_any = any(is_tensor_spec(spec) for spec in grad_specs)
    if options.recorded and not recorded_any:
        raise Unsupported(
            "the backward entry records no input gradient (msprobe wrote an empty output "
            "list), so there is nothing recorded to compare"
        )
    if not options.recorded and not recorded_any:
        notes = [*notes, "msprobe recorded no input gradient: the gradients of every floating input are compared"]

    def bench(side: Any) -> list:
        return engine.gradients(side, call, grad_outputs)

    if options.recorded:

        def tested() -> list:
            return engine.recorded_values(CODEC, dump, name.full, grad_specs, "output")
    else:

        def tested() -> list:
            fn = resolve_tested(name, call)
            return on_device(name, lambda: tested_gradients(call, fn, grad_outputs))()

    def by_input(tested: list, bench: list) -> tuple[dict[int, Any], list]:
        """The tested gradients by input index: recorded ones sit at their recorded
        positions, a device run's in input order already."""
        matched, strays = align(grad_specs, engine.shapes_of(bench), recorded_any)
        return {index: tested[at if options.recorded else index] for index, at in matched.items()}, strays

    def compared(tested: list, bench: list) -> tuple[list, list]:
        return [by_input(tested, bench)[0].get(i) for i in range(len(bench))], bench

    def pair(tested: list, bench: list) -> list[OutputPair]:
        matched, strays = by_input(tested, bench)
        return engine.gradient_pairs(matched, bench, f"{strays}, which match no input" if strays else "")

    def probe() -> list:
        widened = engine.in_fp32(call)
        return tested_gradients(widened, resolve_tested(name, widened), grad_outputs)

    return engine.Sides(bench, tested, pair, notes, options.recorded, grad_outputs, compared, probing(options, probe))


def gradient_specs(name: EntryName, call: engine.Call, specs: list) -> list:
    """The recorded gradient specs, in the order of the call's tensor inputs.

    msprobe records a primitive's input gradients last input first; and
    one item per tensor input, null for those (bool, int) that take none.
    """
    if name.api_type == "Primitive":
        specs = specs[::-1]
    inputs = engine.tensors(call.args, call.kwargs)
    if len(specs) == len(inputs):
        specs = [spec for spec, tensor in zip(specs, inputs) if tensor.is_floating_point()]
    return specs


def align(specs: list, shapes: list, recorded_any: bool = True) -> tuple[dict[int, int], list]:
    """({floating input index: position of its value}, shapes recorded that match no input).

    By position where the shape agrees, else to the one input of that shape. A
    device run of an entry msprobe recorded no gradient for compares them all.
    """
    if not recorded_any:
        return {i: i for i, s in enumerate(shapes) if s is not None}, []
    matched: dict[int, int] = {}
    strays = []
    for position, spec in enumerate(specs):
        if not is_tensor_spec(spec):
            continue
        index = engine.input_of(position, list(spec.get("shape") or []), shapes, matched)
        if index is None:
            strays.append(spec.get("shape"))
        else:
            matched[index] = position
    return matched, strays
