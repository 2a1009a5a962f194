"""Injected deficits: a device that computes some ops wrongly, chosen per op by the environment.

MSPROBE_NPU_SIM_DEFICITS is a comma-separated list of `<op>=<kind>`; `<op>` is an aten op
(`aten::mm`, every overload; `aten::add.Tensor`, one) or a fused op (`npu_rms_norm`). Kinds:

  bf16_accumulate  mm, bmm, addmm: each product summed into a bfloat16 accumulator
  low_accumulate   mm, bmm, addmm of bf16/fp16 operands: each product summed into a bfloat16
                   accumulator; fp32 operands computed right (a kernel whose fp32 path is sound)
  tanh             gelu, gelu_backward: the tanh approximation instead of erf
  epsilon:<x>      an op with an eps / epsilon argument (layer norm, the fused norms): x instead
  scale:<x>        every floating output multiplied by x
  no_residual      npu_add_rms_norm: x1 alone normalised and returned as x, the residual x2 left out
  skip_last_group  npu_grouped_matmul: group_list's last group left unwritten, as if its end were
                   the one before (a kernel reading group_list one short)
  mean_of_v        npu_prompt_flash_attention, npu_incre_flash_attention, npu_fused_infer_attention_score:
                   every query sees the keys as
                   equal (key zeroed), its output the mean of the values it sees
  flash_p          (a control, no deficit) npu_prompt_flash_attention, npu_incre_flash_attention,
                   npu_fused_infer_attention_score: a correct flash kernel, the probabilities P
                   rounded to the query's dtype (bf16/fp16) before P V, accumulated in fp32
  int_offset:<n>   a quantisation (npu_quantize, npu_dynamic_quant): n added to its 8-bit integer outputs
  raise            the op raises a device error at once
  async_error      the op returns, and the device reports its error at the next synchronisation
                   (synchronize, a copy to the host, .item()), as an NPU running asynchronously does
  crash            the process dies by SIGSEGV, as a kernel that faults takes its process down

Every deficit that fires is logged (`deficit <op> <kind>`, see _state).
"""

from __future__ import annotations

import inspect
import os
import signal
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

import torch

from . import _state

VARIABLE = "MSPROBE_NPU_SIM_DEFICITS"
_MATMULS = ("aten::mm", "aten::bmm", "aten::addmm")
_GELUS = ("aten::gelu", "aten::gelu_backward")
_ONLY_FOR = {"bf16_accumulate": _MATMULS, "low_accumulate": _MATMULS, "tanh": _GELUS, "no_residual": ("npu_add_rms_norm",),
             "skip_last_group": ("npu_grouped_matmul",),
             "mean_of_v": ("npu_prompt_flash_attention", "npu_incre_flash_attention",
                           "npu_fused_infer_attention_score"),
             "flash_p": ("npu_prompt_flash_attention", "npu_incre_flash_attention",
                         "npu_fused_infer_attention_score"),
             "int_offset": ("npu_quantize", "npu_dynamic_quant")}
_WITH_VALUE = ("epsilon", "scale", "int_offset")
KINDS = ("bf16_accumulate", "low_accumulate", "tanh", "epsilon", "scale", "no_residual", "skip_last_group", "mean_of_v", "flash_p",
         "int_offset", "raise", "async_error", "crash")


@dataclass(frozen=True)
class Deficit:
    target: str
    kind: str
    value: Optional[float] = None

    def describe(self) -> str:
        return self.kind if self.value is None else f"{self.kind}:{self.value:g}"


def parse(text: str) -> Dict[str, Deficit]:
    """`aten::mm=bf16_accumulate,npu_rms_norm=epsilon:1e-2` -> {target: Deficit}."""
    deficits: Dict[str, Deficit] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        target, _, spec = item.partition("=")
        kind, _, value = spec.partition(":")
        if kind not in KINDS:
            raise ValueError(f"{VARIABLE}: {item!r}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
        if (kind in _WITH_VALUE) != bool(value):
            raise ValueError(f"{VARIABLE}: {item!r}: {kind} {'needs' if kind in _WITH_VALUE else 'takes no'} :<value>")
        allowed = _ONLY_FOR.get(kind)
        if allowed and target.rsplit(".", 1)[0] not in allowed:
            raise ValueError(f"{VARIABLE}: {item!r}: {kind} applies to {', '.join(allowed)} only")
        deficits[target] = Deficit(target, kind, float(value) if value else None)
    return deficits


DEFICITS = parse(os.environ.get(VARIABLE, ""))


def run(op: torch._ops.OpOverload, args: tuple, kwargs: dict, in_place: bool = True) -> Any:
    """The op on CPU tensors, as the simulated device computes it (in_place: a scale may
    change its outputs in place; not where autograd records them)."""
    name = op._schema.name
    deficit = DEFICITS.get(f"{name}.{op._overloadname}") or DEFICITS.get(name)
    operands = args[1:3] if name == "aten::addmm" else args[:2]
    if deficit is not None and deficit.kind == "low_accumulate" and operands[0].dtype == torch.float32:
        deficit = None  # the sound fp32 path
    if deficit is None:
        return _callable(op, args, kwargs)(*args, **kwargs)
    _state.log(f"deficit {name} {deficit.describe()}")
    if deficit.kind in ("bf16_accumulate", "low_accumulate"):
        return _bf16_accumulate(name, args, kwargs)
    if deficit.kind == "tanh":
        kwargs = {**kwargs, "approximate": "tanh"}  # keyword-only in both gelu ops
    if deficit.kind == "epsilon":
        args, kwargs = _with_epsilon(op, args, kwargs, deficit.value)
    return _around(deficit, name, lambda: _callable(op, args, kwargs)(*args, **kwargs), in_place)


def _callable(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Callable:
    """The op, or its packet where a Tensor argument came as a number: a wrapped number (the tensor
    C++ makes of a scalar, remainder(x, 2)) reaches Python as a number, and the packet picks the
    overload that takes it (remainder.Scalar), which wraps it again the same way."""
    for position, argument in enumerate(op._schema.arguments):
        value = args[position] if position < len(args) else kwargs.get(argument.name)
        if isinstance(value, (bool, int, float, complex)) and isinstance(argument.type, torch._C.TensorType):
            return op.overloadpacket
    return op


def fused(name: str, fn: Callable, args: tuple, kwargs: dict) -> Any:
    """A fused op (a Python function composing aten ops on the device), as the device computes it."""
    deficit = DEFICITS.get(name)
    if deficit is None:
        return fn(*args, **kwargs)
    _state.log(f"deficit {name} {deficit.describe()}")
    if deficit.kind == "epsilon":
        bound = inspect.signature(fn).bind(*args, **kwargs)
        key = next((k for k in ("epsilon", "eps") if k in inspect.signature(fn).parameters), None)
        if key is None:
            raise RuntimeError(f"npu sim: {name} has no epsilon argument for {VARIABLE}")
        bound.arguments[key] = deficit.value
        args, kwargs = bound.args, bound.kwargs
    if deficit.kind == "mean_of_v":
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.arguments["key"] = torch.zeros_like(bound.arguments["key"])
        args, kwargs = bound.args, bound.kwargs
    if deficit.kind == "flash_p":
        query = inspect.signature(fn).bind(*args, **kwargs).arguments["query"]
        _state.probabilities_dtype = query.dtype  # _fused._attend rounds P to it
        try:
            return fn(*args, **kwargs)
        finally:
            _state.probabilities_dtype = None
    if deficit.kind == "no_residual":
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.arguments["x2"] = torch.zeros_like(bound.arguments["x2"])
        args, kwargs = bound.args, bound.kwargs
    if deficit.kind == "skip_last_group" and kwargs.get("group_list") is not None:
        kwargs = dict(kwargs)
        ends = kwargs["group_list"].tolist() if isinstance(kwargs["group_list"], torch.Tensor) else list(
            kwargs["group_list"])
        if kwargs.get("group_list_type", 0) == 1:
            ends[-1] = 0  # sizes: the last group has none
        else:
            ends[-1] = ends[-2] if len(ends) > 1 else 0
        given = kwargs["group_list"]
        kwargs["group_list"] = torch.tensor(ends, dtype=given.dtype).to(given.device) if isinstance(
            given, torch.Tensor) else ends
    return _around(deficit, name, lambda: fn(*args, **kwargs), in_place=False)


def _around(deficit: Deficit, name: str, compute: Callable[[], Any], in_place: bool = True) -> Any:
    """The kinds that act before or after the computation itself."""
    if deficit.kind == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if deficit.kind == "raise":
        raise RuntimeError(f"npu sim: device error in {name} (injected by {VARIABLE})")
    result = compute()
    if deficit.kind == "async_error":
        _state.fail_later(f"npu sim: device error in {name}, reported at synchronisation (injected by {VARIABLE})")
    if deficit.kind == "int_offset":
        offset = int(deficit.value or 0)

        def shift(value: Any) -> Any:
            if not isinstance(value, torch.Tensor) or value.dtype not in (torch.int8, torch.uint8):
                return value
            info = torch.iinfo(value.dtype)
            return (value.to(torch.int32) + offset).clamp(info.min, info.max).to(value.dtype)

        return torch.utils._pytree.tree_map(shift, result)
    if deficit.kind == "scale":
        factor = float(deficit.value or 0.0)  # parse() gives every scale its value

        # An aten op's result may be its own argument (add_, out=); a fused op's is in autograd's graph.
        def scale(value: Any) -> Any:
            if not isinstance(value, torch.Tensor) or not value.is_floating_point():
                return value
            return value.mul_(factor) if in_place else value * factor

        return torch.utils._pytree.tree_map(scale, result)
    return result


def _with_epsilon(op: torch._ops.OpOverload, args: tuple, kwargs: dict, value: Optional[float]):
    for position, argument in enumerate(op._schema.arguments):
        if argument.name in ("eps", "epsilon"):
            if argument.name in kwargs or position >= len(args):
                return args, {**kwargs, argument.name: value}
            return (*args[:position], value, *args[position + 1:]), kwargs
    raise RuntimeError(f"npu sim: {op} has no eps argument for {VARIABLE}")


def _bf16_accumulate(name: str, args: tuple, kwargs: dict) -> torch.Tensor:
    """mm / bmm / addmm with every partial sum rounded to bfloat16."""
    if name == "aten::addmm":
        bias, a, b = args[:3]
        beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    else:
        bias, (a, b), beta, alpha = None, args[:2], 0, 1
    total = torch.zeros((*a.shape[:-1], b.shape[-1]), dtype=torch.bfloat16)
    for k in range(a.shape[-1]):
        total = (total.float() + a[..., k:k + 1].float() * b[..., k:k + 1, :].float()).to(torch.bfloat16)
    result = total.to(a.dtype) * alpha
    if bias is not None:
        result = result + beta * bias
    out = kwargs.get("out")
    return result if out is None else out.resize_(result.shape).copy_(result)
