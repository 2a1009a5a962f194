"""What a registered reference (references.py) brings to an entry's run on torch: the bench and the
device call, the outputs' checks, what is left out of the comparison, the backward, the magnitude.

A custom op msprobe recorded (`myteam.gated_silu`: a torch.ops namespace msprobe 26.2 wraps with
`custom_op_namespaces`, or a module of its custom_wrap_ops.yaml) has no API of torch behind it: its
bench is the registered forward, its tested side the registered device call, else the op of that
name under torch.ops, which only a module the user imported can have defined. The user's functions
run guarded (references.guarded): what they raise, or give in another shape or dtype than the dump
records, is an error row naming them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Callable

import numpy as np
import torch

from ..dumps import apis
from ..dumps.dump import EntryName
from ..inputs.rebuild import is_tensor_spec, tree_map
from . import OutputPair, Unsupported
from .composed import ComposeFailed, compose, compose_backward
from .references import (
    BUILT_IN,
    Magnitude,
    Reference,
    ReferenceFailed,
    ReferenceUnsupported,
    Unwritten,
    describe,
    guarded,
    where_defined,
)
from .torch_engine import CODEC, Call, Side, Sides, absolute, floating

HINT = "register one (pytest_msprobe_references in a conftest, or --msprobe-fusion-config; docs/custom-ops.md)"


def custom(api_type: str) -> bool:
    """An entry of an op msprobe recorded outside its own lists: a torch.ops namespace or a module."""
    return api_type not in apis.PYTORCH_TYPES


def fused(name: EntryName) -> bool:
    """A fused op: one kernel, no torch API behind it (torch_npu's, or a team's own)."""
    return name.api_type == "NPU" or custom(name.api_type)


def user_code(reference: Reference | None, field: str) -> bool:
    return reference is not None and reference.origin_of(field) not in ("", BUILT_IN)


def bench_of(reference: Reference, name: EntryName) -> Callable:
    """The registered forward as the bench: a feature the reference does not model is a SKIP; the
    user's, guarded."""
    forward = reference.forward
    assert forward is not None
    what = f"{name.api_type}.{name.api}"
    called = guarded(forward, "reference", what) if user_code(reference, "forward") else forward

    def bench(*args: Any, **kwargs: Any) -> Any:
        try:
            return called(*args, **kwargs)
        except ReferenceUnsupported as exc:
            label = f"NPU op {name.api}" if name.api_type == "NPU" else what
            raise Unsupported(f"{label}: {exc}") from None

    return bench


def resolve_custom(name: EntryName, reference: Reference | None, recorded: bool) -> tuple[Callable | None, Callable]:
    """(tested callable, bench) of a custom op's entry; Unsupported where no reference is registered."""
    what = f"{name.api_type}.{name.api}"
    if reference is None or reference.forward is None:
        raise Unsupported(
            f"{what}: msprobe has no pytorch API type {name.api_type!r}: a custom op's entry (a torch.ops "
            f"namespace or a module msprobe was told to record), never called without a reference: {HINT}"
        )
    bench = bench_of(reference, name)
    if recorded:
        return None, bench
    if reference.device is not None:
        return guarded(reference.device, "device call", what), bench
    return torch_ops_call(name), bench


def torch_ops_call(name: EntryName) -> Callable:
    """torch.ops.<type>.<api>: an op a module the user imported defined. Each part a Python name,
    none of those apis.py never calls; nothing imported."""
    parts = (name.api_type, *name.api.split("."))
    dotted = "torch.ops." + ".".join(parts)
    for part in parts:
        why = apis.denied(part)
        if why:
            raise Unsupported(f"{dotted}: never called: {part!r} {why}")
    target: Any = torch.ops
    try:
        for part in parts:
            target = getattr(target, part)
    except (AttributeError, RuntimeError):
        raise Unsupported(
            f"{dotted} does not exist in this process: import the module that defines the op where its "
            "reference is registered, or register its device call"
        ) from None
    if not isinstance(target, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        raise Unsupported(f"{dotted} is not an operator")
    return target


def device_of(reference: Reference | None, name: EntryName) -> Callable | None:
    """A device call registered for an NPU or torch entry, guarded."""
    if reference is None or reference.device is None:
        return None
    return guarded(reference.device, "device call", f"{name.api_type}.{name.api}")


# -- the bench's outputs -------------------------------------------------------


def checked_bench(call: Call, side: Side, outputs: list) -> list:
    """A user's reference's outputs against the outputs the dump records: their number, each
    tensor's shape and dtype kind, and float64 where the bench computes in float64."""
    reference = call.reference
    if not user_code(reference, "forward"):
        return outputs
    assert reference is not None and reference.forward is not None
    named = f"the reference {where_defined(reference.forward)} registered for {call.name.api_type}.{call.name.api}"
    problem = output_problem(outputs, call.output_specs, side.floating)
    if problem:
        raise ReferenceFailed(f"{named} {problem}")
    return outputs


def output_problem(outputs: Sequence[Any], specs: Sequence[Any], floating_dtype: torch.dtype | None) -> str:
    """What about `outputs` does not fit the recorded output specs ("" where they fit)."""
    if len(outputs) != len(specs):
        return f"returned {len(outputs)} outputs, the dump records {len(specs)}"
    for index, (value, spec) in enumerate(zip(outputs, specs)):
        if not is_tensor_spec(spec):
            continue
        if not isinstance(value, torch.Tensor):
            return f"returned a {type(value).__name__} as output {index}, the dump records a tensor"
        shape = spec.get("shape")
        if isinstance(shape, list) and list(value.shape) != shape:
            return f"returned output {index} of shape {list(value.shape)}, the dump records {shape}"
        try:
            kind = CODEC.dtype_kind(spec["dtype"])
        except (KeyError, TypeError):
            continue
        if _kind(value) != kind:
            return f"returned {value.dtype} as output {index}, the dump records {spec['dtype']}"
        if kind == "f" and floating_dtype is not None and value.dtype != floating_dtype:
            return (
                f"returned {value.dtype} as output {index} ({spec['dtype']} recorded): the bench computes in "
                f"{floating_dtype}, the dtype of the inputs it is given"
            )
    return ""


def _kind(value: torch.Tensor) -> str:
    if value.is_floating_point():
        return "f"
    return "c" if value.is_complex() else "b" if value.dtype == torch.bool else "i"


# -- what is compared ----------------------------------------------------------


def postprocessed(call: Call, tested: list, bench: list) -> tuple[list, list, str]:
    """msprobe's acc_check handlers (api_output_postprocess.yaml) on both sides' outputs, as its
    pre-check runs them: `handler(api_name, output, args, kwargs)`, the output a tuple where the op
    gives several. (tested, bench, what was done in words)."""
    reference = call.reference
    if reference is None or reference.postprocess is None:
        return tested, bench, ""
    api = call.name.api
    found, said = [], []
    handlers = ((tested, reference.postprocess.target, "target"), (bench, reference.postprocess.golden, "golden"))
    for outputs, handler, side in handlers:
        if handler is None:
            found.append(outputs)
            continue
        run = guarded(handler, f"{side} post-processing", f"{call.name.api_type}.{api}")
        given = outputs[0] if len(outputs) == 1 else tuple(outputs)
        result = run(api, given, call.args, call.kwargs)
        found.append(list(result) if isinstance(result, (tuple, list)) else [result])
        said.append(f"{side} outputs post-processed by {describe(handler)}")
    return found[0], found[1], " and ".join(said) + f" ({reference.origin_of('postprocess')})"


def left_out(call: Call, pairs: list[OutputPair], bench: list, postprocessed: str = "") -> list[OutputPair]:
    """Outputs that only keep the op's structure are not compared, nor the elements a correct kernel
    may leave unwritten (the registered mask: the bench's value stands there on both sides); what
    `postprocessed` says is said on each output compared."""
    reference = call.reference
    if reference is None:
        return pairs
    why = reference.uncompared
    pairs = [OutputPair(p.index, skip=why[p.index]) if p.index in why else p for p in pairs]
    if postprocessed:
        for pair in pairs:
            pair.note = postprocessed if not pair.skip else pair.note
    if reference.unwritten is None:
        return pairs
    masks = _masks(call, bench)
    for pair in pairs:
        given = masks.get(pair.index)
        if given is None or pair.skip or pair.tested is None or pair.bench is None:
            continue
        unwritten = given if isinstance(given, Unwritten) else Unwritten(given)
        try:
            mask = np.broadcast_to(_as_bool_array(unwritten.mask), pair.tested.shape)
        except ValueError:
            raise ReferenceFailed(
                f"the unwritten mask {where_defined(reference.unwritten)} registered for "
                f"{call.name.api_type}.{call.name.api} gave output {pair.index} a mask of shape "
                f"{list(np.shape(unwritten.mask))}, which does not broadcast to its shape {list(pair.tested.shape)}"
            ) from None
        if not mask.any():
            continue
        # The bench's value in place of whatever the device left there: equal, not judged.
        pair.tested = np.where(mask, pair.bench, pair.tested)
        said = unwritten.why or f"{int(mask.sum())} of {mask.size} elements may be left unwritten by a correct kernel"
        pair.note = "; ".join(filter(None, (pair.note, f"{said}: not compared")))
    return pairs


def _masks(call: Call, bench: list) -> dict:
    reference = call.reference
    assert reference is not None and reference.unwritten is not None
    mask_fn = reference.unwritten
    if user_code(reference, "unwritten"):
        mask_fn = guarded(mask_fn, "unwritten mask", f"{call.name.api_type}.{call.name.api}")
    return dict(mask_fn(bench, call.args, call.kwargs) or {})


def compared(call: Call, tested: list, bench: list) -> tuple[list, list]:
    """The outputs as they are compared (post-processed, the bench's value where a correct kernel may
    leave an element unwritten), in their own types: what the error data and the repro keep. A mask
    that does not fit leaves its output as it is (`left_out` makes it the entry's error)."""
    tested, bench, _ = postprocessed(call, tested, bench)
    reference = call.reference
    if reference is None or reference.unwritten is None:
        return tested, bench
    found = list(tested)
    for index, given in _masks(call, bench).items():
        value = found[index] if index < len(found) else None
        benched = bench[index] if index < len(bench) else None
        if not isinstance(value, torch.Tensor) or not isinstance(benched, torch.Tensor):
            continue
        mask = given.mask if isinstance(given, Unwritten) else given
        try:
            where = torch.as_tensor(_as_bool_array(mask)).to(value.device)
            found[index] = torch.where(where, benched.detach().to(device=value.device, dtype=value.dtype), value)
        except (RuntimeError, ValueError, TypeError):
            continue
    return found, bench


def _as_bool_array(mask: Any) -> np.ndarray:
    if isinstance(mask, torch.Tensor):
        mask = mask.detach().cpu().numpy()
    return np.asarray(mask, dtype=bool)


# -- backward ------------------------------------------------------------------


def explicit_gradients(side: Side, call: Call, grad_outputs: list) -> list:
    """The registered backward on one side: backward(grad_outputs, *args, **kwargs), the gradient
    of each floating tensor input in argument order (None where it has none)."""
    reference = call.reference
    assert reference is not None and reference.backward is not None
    backward = reference.backward
    if user_code(reference, "backward"):
        backward = guarded(backward, "backward reference", f"{call.name.api_type}.{call.name.api}")
    args, kwargs = tree_map(side.place, call.args), tree_map(side.place, call.kwargs)
    grads = [side.place_grad(g) if isinstance(g, torch.Tensor) else g for g in grad_outputs]
    found = backward(grads, *args, **kwargs)
    found = list(found) if isinstance(found, (tuple, list)) else [found]
    inputs = floating(args, kwargs)
    if len(found) != len(inputs):
        raise ReferenceFailed(
            f"the backward reference {where_defined(reference.backward)} registered for "
            f"{call.name.api_type}.{call.name.api} returned {len(found)} gradients for {len(inputs)} floating inputs"
        )
    return found


# -- the magnitude the dtype standard scales its budget by ----------------------


def with_registered_magnitude(sides: Sides, call: Call) -> Sides | None:
    """The sides with the registered magnitude model; the sides as they are for a custom op without
    one (its name is no API's whose model magnitudes.py holds); None where magnitudes.py decides."""
    reference = call.reference
    forward = sides.grad_outputs is None
    model = None if reference is None else reference.magnitude if forward else reference.backward_magnitude
    declared = None if reference is None else reference.magnitude
    if declared is Magnitude.SUMS_AND_PRODUCTS:
        return replace(sides, magnitude=lambda side: sides.compared_run(absolute(side)), spread=False)
    if declared is Magnitude.COMPOSITION and (forward or model is None):
        assert reference is not None and reference.forward is not None
        if forward:
            composed = reference.forward
            return replace(sides, magnitude=lambda side: _composed(call, side, composed), spread=False)
        grads = sides.grad_outputs or []
        return replace(sides, magnitude=lambda side: _composed_backward(call, side, grads), spread=False)
    if model is None or isinstance(model, Magnitude):
        return sides if custom(call.name.api_type) else None
    role, field = ("magnitude model", "magnitude") if forward else ("backward magnitude model", "backward_magnitude")
    run = guarded(model, role, f"{call.name.api_type}.{call.name.api}") if user_code(reference, field) else model

    def magnitude(side: Side) -> list:
        args, kwargs = tree_map(side.place, call.args), tree_map(side.place, call.kwargs)
        if forward:
            found = run(*args, **kwargs)
        else:
            grads = [side.place_grad(g) if isinstance(g, torch.Tensor) else g for g in sides.grad_outputs or []]
            found = run(grads, *args, **kwargs)
        return _checked_magnitudes(call, model, role, found, call.output_specs if forward else None)

    return replace(sides, magnitude=magnitude)


def _composed(call: Call, side: Side, forward: Callable) -> list:
    args, kwargs = tree_map(side.place, call.args), tree_map(side.place, call.kwargs)
    if user_code(call.reference, "forward"):
        forward = guarded(forward, "reference", f"{call.name.api_type}.{call.name.api}")
    return compose(forward, args, kwargs)


def _composed_backward(call: Call, side: Side, grad_outputs: list) -> list:
    """The backward's magnitudes composed: through the registered backward where one is (a function
    of torch's APIs, as the forward), else through autograd's of the forward (composed.compose_backward)."""
    reference = call.reference
    assert reference is not None and reference.forward is not None
    what = f"{call.name.api_type}.{call.name.api}"
    args, kwargs = tree_map(side.place, call.args), tree_map(side.place, call.kwargs)
    grads = [side.place_grad(g) if isinstance(g, torch.Tensor) else None for g in grad_outputs]
    wanted = list(call.grad_flags)
    try:
        if reference.backward is not None:
            backward = reference.backward
            if user_code(reference, "backward"):
                backward = guarded(backward, "backward reference", what)
            found = compose(backward, (grads, *args), kwargs)
            return [None if i < len(wanted) and not wanted[i] else m for i, m in enumerate(found)]
        forward = reference.forward
        if user_code(reference, "forward"):
            forward = guarded(forward, "reference", what)
        return compose_backward(forward, args, kwargs, grads, wanted)
    except ComposeFailed as exc:
        through = (
            "its registered backward" if reference.backward is not None else "autograd's backward of its reference"
        )
        raise ComposeFailed(
            f"the backward of {what} cannot compose its magnitude model (Magnitude.COMPOSITION, "
            f"{reference.origin_of('magnitude')}) through {through}: {exc}; register a backward_magnitude "
            "for it (docs/custom-ops.md)"
        ) from None


def _checked_magnitudes(call: Call, model: Any, role: str, found: Any, specs: list | None) -> list:
    """A user's model's magnitudes: forward, one per output the dump records, of its shape; backward,
    one per floating input (its gradient's), of that input's shape. Each a nonnegative float32 or
    float64 tensor on the CPU (a float16 one would overflow where the terms are large; any other kind
    is no magnitude), or None where an output has none."""
    found = list(found) if isinstance(found, (tuple, list)) else [found]
    named = f"the {role} {where_defined(model)} registered for {call.name.api_type}.{call.name.api}"
    if specs is not None:
        shapes = [s.get("shape") if is_tensor_spec(s) else None for s in specs]
        what = "outputs"
    else:
        shapes = [list(t.shape) for t in floating(call.args, call.kwargs)]
        what = "floating inputs (one per gradient)"
    if len(found) != len(shapes):
        raise ReferenceFailed(f"{named} gave {len(found)} magnitudes for {len(shapes)} {what}")
    checked: list = []
    for index, (value, shape) in enumerate(zip(found, shapes)):
        if value is None:
            checked.append(None)
            continue
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            kind = f"a {value.dtype} tensor" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
            raise ReferenceFailed(f"{named} gave {kind} for output {index}, not a floating tensor")
        if value.dtype not in (torch.float32, torch.float64):
            raise ReferenceFailed(
                f"{named} gave output {index} a {value.dtype} magnitude: float64 (or float32), which holds "
                "the terms' magnitude without overflowing"
            )
        if value.device.type != "cpu":
            raise ReferenceFailed(f"{named} gave output {index} a magnitude on {value.device}, not on the CPU")
        if isinstance(shape, list) and list(value.shape) != shape:
            raise ReferenceFailed(f"{named} gave output {index} a magnitude of shape {list(value.shape)}, not {shape}")
        value = value.detach()
        if bool((value < 0).any()):
            raise ReferenceFailed(f"{named} gave output {index} a negative magnitude")
        checked.append(value)
    return checked
