"""The `npu` device on PyTorch's Python PrivateUse1 backend, every tensor's bytes in CPU memory.

An npu tensor is a real PrivateUse1 tensor (its sizes, strides, storage offset, autograd and
autocast keys are PyTorch's own) whose storage holds no memory: the storage's Python object
carries the CPU storage that holds its bytes. Every alias of an npu tensor shares its storage,
so views, and the detach() and alias() that PyTorch makes in C++ without asking the backend,
read and write the same CPU bytes, as they would device memory.

One fallback runs every aten op that reaches the backend: on CPU tensors viewing the bytes of
its npu arguments, in their own dtypes; new results become npu tensors, results that are an
argument (in-place and out= ops) come back as that argument. It is also the npu kernel of every
op that has a CPU kernel of its own beside a composite one (native_layer_norm, say), so that the
device runs the kernels a CPU run runs instead of their decompositions. Where PyTorch picks a
decomposition by device in C++, the device takes the CPU's: the convolution that _convolution
leaves to other backends is the CPU's, and the rnns and attention run whole on the CPU, their
backward by the CPU's autograd. A run on this device computes exactly what the same run on the
CPU does, unless a deficit is injected (_deficits).
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from . import _deficits, _state

NAME = "npu"
_CPU_STORAGE = "_npu_sim_cpu_storage"  # attributes of an npu storage's Python object: its bytes,
_DEVICE = "_npu_sim_device"  # and the id it was made on where one was asked for (every tensor says npu:0)
_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_SET = torch.ops.aten.set_.source_Storage_storage_offset
_LIBRARIES: List[torch.library.Library] = []
# Composite ops whose decomposition PyTorch picks by device in C++ (the rnns take CUDA's fused cells
# off the CPU, attention its math kernel): the device runs them whole as the CPU does, backward too.
_WHOLE_ON_THE_CPU = tuple(getattr(torch.ops.aten, name) for name in (
    "lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "scaled_dot_product_attention"))
# A lazy conjugate or negation is a bit on a view that PyTorch's fallbacks resolve by copying, which
# for this backend never ends: here conj() and the negative view copy at once (writes do not go through).
_LAZY = ((torch.ops.aten._conj.default, torch.ops.aten.conj_physical.default),
         (torch.ops.aten._neg_view.default, torch.ops.aten.neg.default))
_COMPOSITE = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutograd")
# What _convolution calls off the CPU and CUDA: run as the convolution the CPU picks.
_OVERRIDEABLE = (torch.ops.aten.convolution_overrideable.default,
                  torch.ops.aten.convolution_backward_overrideable.default)


def register(device_module) -> None:
    """Rename PrivateUse1 to npu, install `device_module` as torch.npu and the kernels; once."""
    if _LIBRARIES:
        return
    _setup_privateuseone_for_python_backend(NAME, backend_module=device_module)
    every_op, kernels = torch.library.Library("_", "IMPL"), torch.library.Library("aten", "IMPL")
    _LIBRARIES.extend((every_op, kernels))
    every_op.fallback(_run_on_cpu, "PrivateUse1")
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in torch._C._dispatch_get_all_op_names():
        composite = [key for key in _COMPOSITE if has(name, key)]
        # An implicit composite is also autograd's kernel: only ops with their own autograd kernel can do without.
        if (name.startswith("aten::") and has(name, "CPU") and composite
                and (composite != ["CompositeImplicitAutograd"] or has(name, "Autograd"))):
            op = _overload(name)
            kernels.impl(op, functools.partial(_run_on_cpu, op), "PrivateUse1")
    for op in _OVERRIDEABLE:  # their composite kernel only says "not implemented"
        kernels.impl(op, functools.partial(_run_on_cpu, op), "PrivateUse1")
    for lazy, physical in _LAZY:
        kernels.impl(lazy, functools.partial(_run_on_cpu, physical), "PrivateUse1")
    for packet in _WHOLE_ON_THE_CPU:
        for overload in packet.overloads():
            op = getattr(packet, overload)
            for key in ("PrivateUse1", "AutogradPrivateUse1"):  # composite ops: autograd's key decides
                kernels.impl(op, functools.partial(_whole_on_the_cpu, op), key)


def _overload(name: str) -> torch._ops.OpOverload:
    packet, _, overload = name[len("aten::"):].partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def cpu_view(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor on the bytes of an npu tensor, with its sizes, strides and offset."""
    storage = getattr(tensor.untyped_storage(), _CPU_STORAGE, None)
    if storage is None:
        raise RuntimeError("npu sim: an npu tensor whose storage holds no data (made outside the simulated device)")
    return torch.empty(0, dtype=tensor.dtype).set_(storage, tensor.storage_offset(), tensor.size(), tensor.stride())


class _Call:
    """One op's arguments brought to the CPU, and the way back for its results."""

    def __init__(self) -> None:
        self.npu_storages: Dict[int, torch.UntypedStorage] = {}  # CPU storage -> its npu storage
        self.arguments: Dict[int, Tuple[Any, Optional[torch.Tensor]]] = {}  # id(CPU value) -> (argument, CPU view)
        self.device: Optional[int] = None  # the npu id a factory op was asked for

    def down(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.device.type != NAME:
                self.arguments[id(value)] = (value, None)
                return value
            cpu = cpu_view(value)
            self.npu_storages[cpu.untyped_storage()._cdata] = value.untyped_storage()
            self.arguments[id(cpu)] = (value, cpu)
            return cpu
        if isinstance(value, torch.device) and value.type == NAME:
            self.device = _state.index(value)
            return torch.device("cpu")
        if isinstance(value, torch.UntypedStorage) and value.device.type == NAME:
            storage = getattr(value, _CPU_STORAGE)
            self.npu_storages[storage._cdata] = value
            return storage
        return value

    def up(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) in self.arguments:
            return self.arguments[id(value)][0]
        if value._is_zerotensor() or value.is_conj() or value.is_neg():
            # Dispatch keys that stand for bytes (an efficient zero tensor has none): npu tensors get the bytes.
            value = torch.zeros(value.shape, dtype=value.dtype) if value._is_zerotensor() else (
                value.resolve_conj().resolve_neg())
        return self.to_npu(value)

    def to_npu(self, cpu: torch.Tensor) -> torch.Tensor:
        npu = torch._C._acc.create_empty_tensor((0,), cpu.dtype)
        self.adopt(npu, cpu)
        return npu

    def adopt(self, npu: torch.Tensor, cpu: torch.Tensor) -> None:
        """Give `npu` the storage and metadata of `cpu` (through the Meta kernel of set_: no data moves)."""
        key = cpu.untyped_storage()._cdata
        storage = self.npu_storages.get(key)
        if storage is None:
            storage = torch._C._acc.create_empty_tensor((0,), torch.uint8).untyped_storage()
            setattr(storage, _CPU_STORAGE, cpu.untyped_storage())
            setattr(storage, _DEVICE, self.device)
            self.npu_storages[key] = storage
        _SET.redispatch(_META, npu, storage, cpu.storage_offset(), cpu.size(), cpu.stride())

    def sync_metadata(self) -> None:
        """resize_, set_, t_ and the like change an argument's metadata: its npu tensor follows."""
        for npu, cpu in self.arguments.values():
            if cpu is not None and (npu.size() != cpu.size() or npu.stride() != cpu.stride()
                                    or npu.storage_offset() != cpu.storage_offset()
                                    or cpu.untyped_storage()._cdata not in self.npu_storages):
                self.adopt(npu, cpu)


def _run_on_cpu(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    call = _Call()
    cpu_args, cpu_kwargs = tree_map(call.down, args), tree_map(call.down, kwargs)
    if op is torch.ops.aten._copy_from.default or op is torch.ops.aten._copy_from_and_resize.default:
        source, target = cpu_args[0], cpu_args[1]
        if _on_host(call, target):
            _state.reading_results()  # device to host: where an asynchronous device error surfaces
        elif _on_host(call, source):  # host to device: the id the target was made on, for the log
            _state.place(getattr(args[1].untyped_storage(), _DEVICE, None))
        if op is torch.ops.aten._copy_from_and_resize.default:
            target.resize_(source.shape)
        result: Any = target.copy_(source)
    elif op is torch.ops.aten.convolution_overrideable.default:
        result = _deficits.run(torch.ops.aten.convolution.default, cpu_args, cpu_kwargs)
    elif op is torch.ops.aten.convolution_backward_overrideable.default:
        grad_output, input, weight, *settings, output_mask = cpu_args
        bias_sizes = [weight.shape[1] * settings[-1] if settings[3] else weight.shape[0]]  # transposed: in * groups
        result = _deficits.run(torch.ops.aten.convolution_backward.default,
                               (grad_output, input, weight, bias_sizes, *settings, output_mask), cpu_kwargs)
    else:
        if op is torch.ops.aten._local_scalar_dense.default:
            _state.reading_results()
        if "generator" in cpu_kwargs and cpu_kwargs["generator"] is None:
            cpu_kwargs["generator"] = _state.generator()
        result = _deficits.run(op, cpu_args, cpu_kwargs)
    call.sync_metadata()
    return tree_map(call.up, result)


def _on_host(call: _Call, cpu: torch.Tensor) -> bool:
    """A CPU tensor the op was given as it is (not the bytes of an npu tensor)."""
    return call.arguments[id(cpu)][1] is None


def _whole_on_the_cpu(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    flat, spec = tree_flatten((args, kwargs))
    at = [i for i, value in enumerate(flat) if isinstance(value, torch.Tensor) and value.device.type == NAME]
    return _OnTheCpu.apply(op, spec, flat, at, *(flat[i] for i in at))


class _OnTheCpu(torch.autograd.Function):
    """An op run on the CPU tensors of its npu arguments, its gradients by the CPU's autograd."""

    @staticmethod
    def forward(ctx: Any, op: torch._ops.OpOverload, spec: Any, flat: list, at: List[int], *tensors: torch.Tensor):
        # The current device: every tensor says npu:0, and so does PyTorch's Python device guard.
        ctx.device = torch.device(NAME, _state.current_device())
        ctx.leaves = [cpu_view(t).detach().requires_grad_(wanted)
                      for t, wanted in zip(tensors, ctx.needs_input_grad[4:])]
        for i, leaf in zip(at, ctx.leaves):
            flat[i] = leaf
        args, kwargs = tree_unflatten(flat, spec)
        with torch.set_grad_enabled(any(ctx.needs_input_grad)):  # as the caller's (mkldnn's lstm trains otherwise)
            result = _deficits.run(op, args, kwargs, in_place=False)
        ctx.outputs = result if isinstance(result, tuple) else (result,)
        on_device = tuple(out.detach().to(ctx.device) for out in ctx.outputs)
        return on_device if isinstance(result, tuple) else on_device[0]

    @staticmethod
    def backward(ctx: Any, *grads: Optional[torch.Tensor]):
        wanted = [leaf for leaf in ctx.leaves if leaf.requires_grad]
        # d/do of sum(o * g) is g: backward with grad_outputs g, without autograd.grad's grad_outputs
        # (which imports sympy, a second or so of every process that gets here)
        with torch.enable_grad():
            loss = sum((out * cpu_view(g)).sum() for out, g in zip(ctx.outputs, grads)
                       if g is not None and out.requires_grad)
            reached = wanted and isinstance(loss, torch.Tensor)
            found = iter(torch.autograd.grad(loss, wanted, allow_unused=True) if reached else [None] * len(wanted))
        inputs = [next(found) if leaf.requires_grad else None for leaf in ctx.leaves]
        return (None, None, None, None, *(None if g is None else g.to(ctx.device) for g in inputs))
