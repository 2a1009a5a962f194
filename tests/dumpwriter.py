"""Write tensor dumps in msprobe's own format (26.x), for APIs no shipped dump records.

Entries, file names and statistics are laid out as msprobe writes them:
`<Type>.<api>.<n>.forward` with input_args / input_kwargs / output, a backward
entry with the grad_outputs as `input` and the input gradients as `output`,
and one `.pt` file per tensor in dump_tensor_data/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch


class DumpWriter:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.tensor_dir = self.folder / "dump_tensor_data"
        self.tensor_dir.mkdir(parents=True, exist_ok=True)
        self.data: Dict[str, Any] = {}

    def spec(self, value: Any, name: str) -> Any:
        if isinstance(value, torch.Tensor):
            return self.tensor_spec(value, name)
        if isinstance(value, (list, tuple)):
            return [self.spec(v, f"{name}.{i}") for i, v in enumerate(value)]
        if value is None:
            return None
        if isinstance(value, torch.dtype):
            return {"type": "torch.dtype", "value": str(value)}
        return {"type": type(value).__name__, "value": value}

    def tensor_spec(self, tensor: torch.Tensor, name: str) -> dict:
        requires_grad = tensor.requires_grad
        tensor = tensor.detach().cpu()
        data_name = f"{name}.pt"
        torch.save(tensor.clone(), self.tensor_dir / data_name)
        stats = tensor.to(torch.float64)
        empty = stats.numel() == 0  # msprobe writes null statistics for an empty tensor
        return {
            "type": "torch.Tensor", "dtype": str(tensor.dtype), "shape": list(tensor.shape),
            "Max": None if empty else float(stats.max()), "Min": None if empty else float(stats.min()),
            "Mean": None if empty else float(stats.mean()), "Norm": None if empty else float(stats.norm()),
            "requires_grad": requires_grad, "data_name": data_name,
        }

    def record(self, prefix: str, fn: Callable, args: List[Any], kwargs: Optional[dict] = None,
               backward: bool = False, seed: int = 0) -> Any:
        """Run fn like the training step did and write its forward (and backward) entries."""
        kwargs = kwargs or {}
        forward = f"{prefix}.forward"
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
        for leaf in leaves:
            leaf.requires_grad_(backward)
        out = fn(*args, **kwargs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        self.data[forward] = {
            "input_args": [self.spec(a, f"{forward}.input.{i}") for i, a in enumerate(args)],
            "input_kwargs": {k: self.spec(v, f"{forward}.input.{k}") for k, v in kwargs.items()},
            "output": [self.spec(o, f"{forward}.output.{i}") for i, o in enumerate(outs)],
        }
        if backward:
            self.record_backward(prefix, outs, leaves, seed)
        return out

    def record_backward(self, prefix: str, outs: List[Any], leaves: List[torch.Tensor], seed: int) -> None:
        name = f"{prefix}.backward"
        generator = torch.Generator().manual_seed(seed)
        diff = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
        grads_out = [torch.randn(o.shape, generator=generator).to(device=o.device, dtype=o.dtype) for o in diff]
        grads_in = torch.autograd.grad(diff, leaves, grads_out, allow_unused=True)
        self.data[name] = {
            "input": [self.spec(g, f"{name}.input.{i}") for i, g in enumerate(grads_out)],
            "output": [self.spec(g, f"{name}.output.{i}") for i, g in enumerate(grads_in)],
        }

    def write(self, task: str = "tensor") -> Path:
        path = self.folder / "dump.json"
        document = {"task": task, "level": "L1", "framework": "pytorch",
                    "dump_data_dir": str(self.tensor_dir), "data": self.data}
        path.write_text(json.dumps(document, indent=1))
        return path


class MsDumpWriter:
    """The same for MindSpore dumps, as msprobe writes them: `mindspore.Tensor` specs, dtypes
    spelled `BFloat16`, one `.npy` per tensor (bfloat16 stored as float32, which holds it exactly).
    Values are given as torch tensors; the caller computes the outputs."""

    DTYPES = {torch.float32: "Float32", torch.float16: "Float16", torch.bfloat16: "BFloat16",
              torch.int64: "Int64", torch.bool: "Bool"}

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.tensor_dir = self.folder / "dump_tensor_data"
        self.tensor_dir.mkdir(parents=True, exist_ok=True)
        self.data: Dict[str, Any] = {}

    def spec(self, value: Any, name: str) -> Any:
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu()
            stored = tensor.float() if tensor.dtype == torch.bfloat16 else tensor
            data_name = f"{name}.npy"
            np.save(self.tensor_dir / data_name, stored.numpy())
            stats = tensor.to(torch.float64)
            return {"type": "mindspore.Tensor", "dtype": self.DTYPES[tensor.dtype], "shape": list(tensor.shape),
                    "Max": float(stats.max()), "Min": float(stats.min()), "Mean": float(stats.mean()),
                    "Norm": float(stats.norm()), "data_name": data_name}
        return {"type": type(value).__name__, "value": value}

    def record(self, prefix: str, args: List[Any], outputs: List[Any],
               grad_outputs: Optional[List[Any]] = None, grad_inputs: Optional[List[Any]] = None) -> None:
        forward = f"{prefix}.forward"
        self.data[forward] = {
            "input_args": [self.spec(a, f"{forward}.input.{i}") for i, a in enumerate(args)],
            "input_kwargs": {},
            "output": [self.spec(o, f"{forward}.output.{i}") for i, o in enumerate(outputs)],
        }
        if grad_outputs is not None:
            backward = f"{prefix}.backward"
            self.data[backward] = {
                "input": [self.spec(g, f"{backward}.input.{i}") for i, g in enumerate(grad_outputs)],
                "output": [self.spec(g, f"{backward}.output.{i}") for i, g in enumerate(grad_inputs or [])],
            }

    def write(self) -> Path:
        path = self.folder / "dump.json"
        document = {"task": "tensor", "level": "L1", "framework": "mindspore",
                    "dump_data_dir": str(self.tensor_dir), "data": self.data}
        path.write_text(json.dumps(document, indent=1))
        return path


def mindspore_mul_dump(folder: Path, dtype: torch.dtype, scale: float = 1.0) -> Path:
    """Mint.mul of two real tensors of ms_tensor_L1 (the inputs of its Mint.add.0) in `dtype`,
    the recorded output computed in fp32 and rounded, times `scale`."""
    source = Path(__file__).resolve().parent / "data" / "ms_tensor_L1" / "dump_tensor_data"
    x, y = (torch.from_numpy(np.load(source / f"Mint.add.0.forward.input.{i}.npy")).to(dtype) for i in (0, 1))
    grad = torch.from_numpy(np.load(source / "Mint.add.0.backward.input.0.npy")).to(dtype)
    out = ((x.float() * y.float()) * scale).to(dtype)
    writer = MsDumpWriter(folder)
    writer.record("Mint.mul.0", [x, y], [out], [grad], [(grad.float() * y.float()).to(dtype),
                                                        (grad.float() * x.float()).to(dtype)])
    return writer.write()


def bf16_accumulating_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A matmul whose running sum is rounded to bf16 at every step: a low-precision accumulation."""
    total = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        total = (total + a[:, k : k + 1].float() * b[k : k + 1, :].float()).to(torch.bfloat16).float()
    return total.to(torch.bfloat16)


def matmul_add_dump(folder: Path, dtype: torch.dtype, matmul: Callable = torch.matmul) -> Path:
    """A matmul over 1024 terms and an add, both in `dtype`; the matmul's output as `matmul`
    computed it. Summed in bf16, 1024 terms are tens of ULP off: far over the bf16 budget."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(shape, generator=generator).to(dtype) for shape in ((16, 1024), (1024, 16)))
    x, y = (torch.randn(8, 8, generator=generator).to(dtype) for _ in range(2))
    writer = DumpWriter(folder)
    writer.record("Torch.matmul.0", matmul, [a, b])
    writer.record("Torch.add.0", torch.add, [x, y])
    return writer.write()
