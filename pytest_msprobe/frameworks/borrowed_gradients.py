"""An input's gradient that another entry of the dump recorded, where the call's own entry recorded none.

On 3-D inputs msprobe 26.2.0 records for `linear` and `matmul` the gradient arriving at the output
(recorded_gradients.py): no input's gradient is in the entry. The input's gradient is in the dump all
the same, bit for bit, where another entry took it:

- the module's, in a mix dump: an `nn.Linear` module (`Module.<path>.Linear.forward.<n>`) whose input,
  output and parameters are this call's, bit for bit, records its input's gradient in its backward entry
  (a full backward hook: that module's use of its input alone) and its weight's and bias's in
  `parameters_grad`;
- the producer's: where the input is, bit for bit, the whole output of an earlier call of the dump (as it
  is or through a reshape or a permutation: `layer_norm` before q/k/v, `softmax` before P.V), and no other
  recorded call reads that output, the gradient arriving at the producer's output is this input's, the
  gradient msprobe recorded as the producer's backward input.

Each found gradient is judged against the call's own float64 gradient of that input, saying where it
came from. An input seen by another call too (q, k and v projections reading one layer_norm) has a
gradient that sums theirs: nothing to take, the SKIP stays.

The producer's is an inference: a call msprobe did not record (left out by the dump's API list, or one
it does not wrap: the transpose before a conv, a module's `_VF` call) may read that output too, and the
gradient arriving there is then the sum of theirs, which a correct kernel's is far from. So it is taken
as this input's only where it proves itself: within FIT (a relative L2 distance of 0.1) of the float64
gradient of this input, where a realistic deficit of the call's backward (TF32, low-precision sums:
1e-3 to 1e-2) stays and another call's share does not (two gradients of one shape are 0.53 and more
apart: bench/studies/gradient_attribution.md). Farther, it is no proof of anything: the SKIP stays,
saying what was found and why it was not judged, and that a backward of this call that far off (a
dropped term) would look the same: such a fault is no error here, as before this module took anything
(the view's SKIP), and `--msprobe-device recorded,cpu` judges the call by running it. Where it is
judged, its message says that a call msprobe did not record would put its share there too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch

from ..dumps.dump import MODULE_TYPES, Dump, EntryName
from ..inputs.rebuild import is_tensor_spec
from .recorded_gradients import FIT, distance
from .torch_engine import Codec, flat_specs, input_tensor_specs, recorded_values

# nn.Linear and MultiheadAttention's out_proj: their forward is F.linear of their input and parameters.
LINEAR_MODULES = frozenset({"Linear", "NonDynamicallyQuantizableLinear"})
MAX_PERMUTED_DIMS = 4  # permutations of a producer's output tried (4! = 24)


@dataclass(frozen=True)
class Borrowed:
    value: Any  # the recorded gradient, in the input's shape
    source: str  # where it was recorded, for the message
    # The producer's incoming gradient: this input's only where no call msprobe did not record reads that
    # output too (the module's is that module's use of its input alone: proven).
    inferred: bool = False

    def unproven(self, reference: Any) -> str:
        """Why this gradient is not judged as the input's (its float64 gradient `reference`), or ""."""
        if not self.inferred or not isinstance(self.value, torch.Tensor) or not isinstance(reference, torch.Tensor):
            return ""
        gap = distance(self.value, reference)
        if gap <= FIT:
            return ""
        return (
            f"{self.source} fits not this input's float64 gradient (a relative distance of {gap:.2g}, beyond "
            f"{FIT:g}), so it is not judged as this input's: where a call msprobe did not record (left out by "
            "the dump's API list, or one msprobe does not wrap) reads that output too, the gradient arriving "
            "there sums theirs; a backward of this call that far off would look the same"
        )

    def note(self) -> str:
        """What a row judged on this gradient says."""
        said = f"msprobe recorded no gradient of this input here: judged {self.source}"
        if self.inferred:
            said += (
                "; a call msprobe did not record that reads that output too would add its gradient there "
                "(an error on this row alone, with a correct kernel, would say so)"
            )
        return said


def borrowed(codec: Codec, dump: Dump, name: EntryName, floats: list, wanted: list[int]) -> dict[int, Borrowed]:
    """The gradients of the floating inputs `wanted` (argument order) that other entries recorded."""
    forward = dump.entries.get(f"{name.prefix}.forward")
    if not isinstance(forward, dict) or not wanted:
        return {}
    specs = [s for s in input_tensor_specs(forward) if _floating(codec, s)]
    found: dict[int, Borrowed] = {}
    if name.api == "linear":
        found.update(_from_module(codec, dump, name, forward, floats, specs, wanted))
    for index in wanted:
        if index not in found and index < len(specs) and index < len(floats):
            taken = _from_producer(codec, dump, name, specs[index], floats[index])
            if taken is not None:
                found[index] = taken
    return found


def _floating(codec: Codec, spec: Any) -> bool:
    try:
        return codec.dtype_kind(spec["dtype"]) == "f"
    except (KeyError, TypeError):
        return False


def _same_stats(a: Any, b: Any) -> bool:
    """Two recorded tensors that may be one: the same dtype, size, largest and smallest element."""
    if not (is_tensor_spec(a) and is_tensor_spec(b)):
        return False
    size = [_numel(a.get("shape")), _numel(b.get("shape"))]
    return size[0] == size[1] is not None and all(a.get(k) == b.get(k) for k in ("dtype", "Max", "Min"))


def _numel(shape: Any) -> int | None:
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        return None
    total = 1
    for n in shape:
        total *= n
    return total


# -- the module's, in a mix dump ------------------------------------------------------------------


def _from_module(
    codec: Codec, dump: Dump, name: EntryName, forward: dict, floats: list, specs: list, wanted: list[int]
) -> dict[int, Borrowed]:
    """The input's, weight's and bias's gradients of an nn.Linear module that is this call."""
    outputs = [s for s in flat_specs(forward.get("output", [])) if is_tensor_spec(s)]
    for module, body in dump.entries.items():
        parts = module.split(".")
        if parts[0] not in MODULE_TYPES or len(parts) < 4 or parts[-2] != "forward" or parts[-3] not in LINEAR_MODULES:
            continue
        inputs = [s for s in flat_specs(body.get("input_args", [])) if is_tensor_spec(s)]
        params = body.get("parameters") or {}
        given = [params.get("weight"), params.get("bias")]
        mine = specs[1:3] + [None] * (3 - len(specs))
        if not (inputs and outputs and _same_stats(inputs[0], specs[0])):
            continue
        module_outputs = [s for s in flat_specs(body.get("output", [])) if is_tensor_spec(s)]
        if not (module_outputs and _same_stats(module_outputs[0], outputs[0])):
            continue
        if any((p is None) != (m is None) or (p is not None and not _same_stats(p, m)) for p, m in zip(given, mine)):
            continue
        if not _bitwise(codec, dump, module, [inputs[0], module_outputs[0], *[p for p in given if p]],
                        floats[:1] + _values(codec, dump, f"{name.prefix}.forward", outputs[:1], "output")
                        + [f for f, p in zip(floats[1:3], given) if p]):  # fmt: skip
            continue
        return _module_gradients(codec, dump, module, wanted, given)
    return {}


def _values(codec: Codec, dump: Dump, entry: str, specs: list, key: str) -> list:
    return recorded_values(codec, dump, entry, specs, key)


def _bitwise(codec: Codec, dump: Dump, entry: str, specs: list, values: list) -> bool:
    found = recorded_values(codec, dump, entry, specs, "input")
    return len(found) == len(values) and all(
        isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
        for a, b in zip(found, values)
    )


def _module_gradients(codec: Codec, dump: Dump, module: str, wanted: list[int], given: list) -> dict[int, Borrowed]:
    root, count = module.rsplit(".forward.", 1)
    found: dict[int, Borrowed] = {}
    backward = dump.entries.get(f"{root}.backward.{count}")
    if 0 in wanted and isinstance(backward, dict):
        (spec, *_) = flat_specs(backward.get("output", [])) or [None]
        if is_tensor_spec(spec):
            (value,) = recorded_values(codec, dump, f"{root}.backward.{count}", [spec], "output")
            found[0] = Borrowed(value, f"{root}.backward.{count} (the module's gradient of its input)")
    grads = dump.entries.get(f"{root}.parameters_grad.{count}")
    if isinstance(grads, dict):
        for index, (param, spec) in enumerate(zip(("weight", "bias"), given), start=1):
            recorded = [s for s in flat_specs(grads.get(param, [])) if is_tensor_spec(s)]
            if index in wanted and spec is not None and recorded:
                (value,) = recorded_values(codec, dump, f"{root}.parameters_grad.{count}", recorded[:1], param)
                found[index] = Borrowed(value, f"{root}.parameters_grad.{count} (the module's {param} gradient)")
    return found


# -- the producer's, in any dump ------------------------------------------------------------------


def _from_producer(codec: Codec, dump: Dump, name: EntryName, spec: Any, value: Any) -> Borrowed | None:
    """The gradient arriving at the one earlier output this input is, whole, when no other call reads it."""
    if not isinstance(value, torch.Tensor):
        return None
    names = list(dump.entries)
    own = f"{name.prefix}.forward"
    if own not in names:
        return None
    producers = []
    for entry in names[: names.index(own)]:
        if not entry.endswith(".forward") or entry.split(".", 1)[0] in MODULE_TYPES:
            continue
        body = dump.entries[entry]
        outputs = flat_specs(body.get("output", [])) if isinstance(body, dict) else []
        producers += [(entry, j, s) for j, s in enumerate(outputs) if _same_stats(s, spec)]
    for entry, j, out_spec in reversed(producers):  # the latest first: the one that made it
        (made,) = recorded_values(codec, dump, entry, [out_spec], "output")
        view = _view_of(made, value)
        if view is None or _read_elsewhere(dump, own, entry, out_spec):
            continue
        prefix = entry.rsplit(".", 1)[0]
        backward = dump.entries.get(f"{prefix}.backward")
        incoming = flat_specs(backward.get("input", [])) if isinstance(backward, dict) else []
        if j >= len(incoming) or not is_tensor_spec(incoming[j]):
            return None
        (grad,) = recorded_values(codec, dump, f"{prefix}.backward", [incoming[j]], "input")
        if not isinstance(grad, torch.Tensor) or grad.shape != made.shape:
            return None
        return Borrowed(
            view(grad),
            f"{prefix}.backward's recorded incoming gradient (this input is {entry}'s output {j}, which no other "
            "recorded call reads)",
            inferred=True,
        )
    return None


def _view_of(made: Any, value: torch.Tensor) -> Any:
    """How `value` is `made` bit for bit (a reshape, or a permutation of its dimensions then a reshape),
    as a function of a tensor of made's shape; None where it is not."""
    if not isinstance(made, torch.Tensor) or made.numel() != value.numel() or made.dtype != value.dtype:
        return None
    if torch.equal(made.reshape(value.shape), value):
        return lambda t: t.reshape(value.shape)
    if made.dim() > MAX_PERMUTED_DIMS:
        return None
    for order in itertools.permutations(range(made.dim())):
        if list(order) != sorted(order) and torch.equal(made.permute(order).reshape(value.shape), value):
            return lambda t, order=order: t.permute(order).reshape(value.shape)
    return None


def _read_elsewhere(dump: Dump, own: str, producer: str, spec: Any) -> bool:
    """Whether a recorded call but this one (and the producer) may read the producer's output: an input
    of the same dtype, size, largest and smallest element."""
    for entry, body in dump.entries.items():
        if entry in (own, producer) or not entry.endswith(".forward") or entry.split(".", 1)[0] in MODULE_TYPES:
            continue
        if isinstance(body, dict) and any(_same_stats(s, spec) for s in input_tensor_specs(body)):
            return True
    return False
