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
