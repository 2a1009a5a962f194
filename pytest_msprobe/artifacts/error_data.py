"""Error data: the values of every entry that is not pass (nor SKIP), saved so its numbers can be reproduced.

One folder per entry, `<folder>/<dump folder>/<entry>/`, holding the rebuilt
inputs, the tested outputs, the bench outputs (and, for a backward, the
gradients fed to the outputs), and manifest.json saying what is where. PyTorch
values are saved with torch.save (imported only then), others with numpy. No
pytest. repro.py writes its folders with the same helpers (entry_folder, save_torch).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..frameworks import Kept
from ..inputs.rebuild import Device, tree_map
from ..reports import files
from ..reports.messages import entry_message, output_message
from ..results import EntryResult, OutputResult

if TYPE_CHECKING:
    from ..checking.check import Checker
    from ..dumps.dump import Dump

MANIFEST = "manifest.json"
PARTS = ("inputs", "tested_outputs", "bench_outputs", "grad_outputs")
TORCH_LOAD = (
    "torch.load(path, weights_only=True). inputs.pt: {'args': [...], 'kwargs': {...}} as rebuilt "
    "(recorded dtypes, on CPU; a device argument is 'cpu'). tested_outputs.pt, bench_outputs.pt: "
    "lists in the order of the details rows (output i is item i; for a backward, the gradient of "
    "the i-th floating input, None where it has none). grad_outputs.pt: the gradients fed to the "
    "outputs. The bench ran on CPU with floating tensors in its Bench Dtype."
)
NUMPY_LOAD = "numpy.load(path): one array per value, keyed by where it sits (args[0], kwargs['x'], [1])."


def save(folder: Path, dump: Dump, result: EntryResult, kept: Kept, checker: Checker) -> Path:
    """Write the entry's values and manifest; returns the entry's folder."""
    with entry_folder(folder, dump, result) as target:
        _save(target, dump, result, kept, checker)
    return target.path


def _save(target: files.Folder, dump: Dump, result: EntryResult, kept: Kept, checker: Checker) -> None:
    torch_values = dump.framework in ("pytorch", "mindtorch")
    files, values = {}, {}
    for part, value in zip(PARTS, (kept.inputs, kept.tested, kept.bench, kept.grad_outputs)):
        if value is None:
            continue
        value = tree_map(portable, value)
        files[part] = save_torch(target, part, value) if torch_values else _save_numpy(target, part, value)
        values[part] = [
            {"at": at, "dtype": _dtype(leaf), "shape": _shape(leaf)}
            for at, leaf in leaves(value)
            if _shape(leaf) is not None
        ]
    manifest = {
        "entry": f"{result.api}.{result.direction}",
        "api": result.api,
        "direction": result.direction,
        "dump": str(dump.path),
        "framework": dump.framework,
        "status": result.status.value,
        "message": entry_message(result),
        "device": checker.run.tested_on,
        "mode": checker.run.mode,
        "seed": checker.run.seed,
        "standard": checker.standard.describe(),
        "outputs": [output_row(result, output) for output in result.outputs],
        "files": files,
        "values": values,
        "load": TORCH_LOAD if torch_values else NUMPY_LOAD,
    }
    target.write_text(MANIFEST, json.dumps(manifest, indent=2, default=str))


def output_row(result: EntryResult, output: OutputResult) -> dict[str, Any]:
    """An output as its details row says it."""
    return {
        "name": result.output_name(output),
        "bench_dtype": output.bench_dtype,
        "tested_dtype": output.tested_dtype,
        "shape": output.shape,
        "cosine": output.cosine,
        "max_abs_err": output.max_abs_err,
        "max_rel_err": output.max_rel_err,
        "status": output.status.value,
        "message": output_message(output),
    }


def entry_folder(folder: Path, dump: Dump, result: EntryResult) -> files.Folder:
    """`<folder>/<dump folder>/<entry>/`, made: below folder, never through a link (a shared
    folder may hold one planted at a name the run will use); close it when its files are written."""
    return files.Folder.make(folder, [*Path(dump_label(Path(dump.path))).parts, result.entry])


def dump_label(dump_path: Path) -> str:
    """The dump's folder relative to the working folder (step0/rank0 stay apart), else its name."""
    relative = os.path.relpath(dump_path.resolve().parent, Path.cwd())
    return dump_path.resolve().parent.name if relative.startswith("..") else relative


def portable(value: Any) -> Any:
    """Values a plain loader reads back: tensors detached on CPU, device markers as 'cpu'."""
    if isinstance(value, Device):
        return "cpu"
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return value.detach().cpu()
    return value


def save_torch(target: files.Folder, part: str, value: Any) -> str:
    import torch

    name = f"{part}.pt"
    with target.open_new(name, binary=True) as handle:
        torch.save(value, handle)
    return name


def _save_numpy(target: files.Folder, part: str, value: Any) -> str:
    name = f"{part}.npz"
    arrays = {at: _as_array(leaf) for at, leaf in leaves(value) if leaf is not None}
    with target.open_new(name, binary=True) as handle:
        np.savez(handle, **arrays)
    return name


def _as_array(value: Any) -> np.ndarray:
    if hasattr(value, "asnumpy"):  # a MindSpore tensor
        return np.asarray(value.asnumpy())
    if hasattr(value, "detach"):  # a torch tensor (MindSpore checks rebuild their values in torch)
        value = value.detach().cpu()
        # numpy has no bfloat16: float32 holds every bfloat16 exactly.
        return (value.float() if str(value.dtype) == "torch.bfloat16" else value).numpy()
    return np.asarray(value)


def leaves(tree: Any, at: str = "") -> Iterator[tuple[str, Any]]:
    """(where, value) of every leaf of nested dicts, lists and tuples: `args[0]`, `kwargs['weight']`."""
    if isinstance(tree, dict):
        for key, item in tree.items():
            yield from leaves(item, f"{at}[{key!r}]" if at else str(key))
    elif isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            yield from leaves(item, f"{at}[{i}]")
    else:
        yield at, tree


def _shape(value: Any):
    shape = getattr(value, "shape", None)
    return None if shape is None else [int(n) for n in shape]


def _dtype(value: Any) -> str:
    return str(getattr(value, "dtype", type(value).__name__))
