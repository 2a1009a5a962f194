"""--msprobe-repro: a standalone reproducer of every entry that is not pass (nor SKIP).

`<folder>/<dump folder>/<entry>/` holds

- inputs.pt: the call's inputs as the run rebuilt them (recorded dtypes, on the CPU; random
  mode's generated values), the gradients fed to the outputs of a backward, the recorded
  outputs where the tested side was recorded (with the float64 gradients they were judged
  against where msprobe took them inside the API's graph), and the bench outputs of an NPU
  op; plain tensors and Python values, loadable with torch.load(weights_only=True);
- verdict.json: the metrics, the rule and the verdict of this run;
- repro.py: templates/repro.py with the entry's part written in, a script that needs torch
  and numpy only (torch_npu for an NPU, MindSpore for a MindSpore entry's tested side) and
  prints the same metrics and verdict.

The verdict is the run's standard, inlined as data made here from the standard's own
constants (the dtype standard's budgets, the per-API tolerances that match, the basic
thresholds); a standard the script does not know is named, and the script prints the
metrics alone. The folders are written with error_data's helpers. No pytest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .error_data import entry_folder, output_row, save_torch
from .frameworks import Kept, Recipe
from .inputs import Device, tree_map
from .messages import entry_message
from .results import SKIP, EntryResult

if TYPE_CHECKING:
    from .check import Checker
    from .dump import Dump
    from .standards import Standard

TEMPLATE = Path(__file__).with_name("templates") / "repro.py"
BEGIN = "# -- the entry: pytest-msprobe writes this part"
END = "# -- end of the entry --"
NO_BENCH = (
    "def bench(*args, **kwargs):\n"
    '    raise RuntimeError("no bench to rebuild here: inputs.pt holds the bench outputs of the run")\n'
)


def save(folder: Path, dump: Dump, result: EntryResult, kept: Kept, checker: Checker) -> Path:
    """Write the entry's inputs.pt, verdict.json and repro.py; returns the entry's folder."""
    if kept.recipe is None:
        raise ValueError(f"the {dump.framework} framework gave no recipe to rebuild the call from")
    target = entry_folder(folder, dump, result)
    save_torch(target, "inputs", inputs(kept, checker.run.recorded))
    verdict = verdict_data(dump, result, checker)
    (target / "verdict.json").write_text(json.dumps(verdict, indent=2, default=str), encoding="utf-8")
    (target / "repro.py").write_text(script(dump, result, kept.recipe, checker), encoding="utf-8")
    return target


def inputs(kept: Kept, recorded: bool) -> dict[str, Any]:
    """What inputs.pt holds: the call, and the values the script cannot compute itself."""
    data = {"args": encode(kept.inputs["args"]), "kwargs": encode(kept.inputs["kwargs"])}
    if kept.grad_outputs is not None:
        data["grads"] = encode(kept.grad_outputs)
    if recorded and kept.tested is not None:
        data["recorded"] = encode(kept.tested)
        if kept.bench_inside:  # the recorded gradients' float64 counterparts inside the API's graph
            data["recorded_bench"] = encode(kept.bench)
    if kept.recipe is not None and not kept.recipe.bench_source:
        data["bench"] = encode(kept.bench)
    return data


def encode(tree: Any) -> Any:
    """Values torch.load(weights_only=True) reads back: tensors on the CPU, a device argument as
    torch.device("cpu") (the script puts its own device there), slices and Ellipsis as marked dicts."""
    import torch

    def leaf(value: Any) -> Any:
        if isinstance(value, Device):
            return torch.device("cpu")
        if isinstance(value, slice):
            return {"__slice__": [value.start, value.stop, value.step]}
        if value is Ellipsis:
            return {"__ellipsis__": True}
        if isinstance(value, torch.Tensor):
            return value.detach().cpu()
        return value

    return tree_map(leaf, tree)


def verdict_data(dump: Dump, result: EntryResult, checker: Checker) -> dict[str, Any]:
    """The run's findings on the entry: what repro.py prints beside its own."""
    plain = result.to_dict()
    return {
        "entry": result.entry,
        "api": result.api,
        "direction": result.direction,
        "dump": str(dump.path),
        "framework": dump.framework,
        "device": checker.run.tested_on,
        "mode": checker.run.mode,
        "seed": checker.run.seed,
        "standard": checker.standard.describe(),
        "status": result.status.value,
        "message": entry_message(result),
        "position": result.position,
        "call_site": plain["call_site"],
        "probe": plain["probe"],
        "outputs": [output_row(result, output) for output in result.outputs],
    }


def script(dump: Dump, result: EntryResult, recipe: Recipe, checker: Checker) -> str:
    """templates/repro.py with this entry's part in place of the example."""
    template = TEMPLATE.read_text(encoding="utf-8")
    head, _, rest = template.partition(BEGIN)
    _, _, tail = rest.partition(END)
    if not tail:
        raise ValueError(f"{TEMPLATE}: the markers of the entry's part are missing")
    return head + entry_part(dump, result, recipe, checker) + END + tail


def entry_part(dump: Dump, result: EntryResult, recipe: Recipe, checker: Checker) -> str:
    import torch

    compared = {o.index: o.tested_dtype for o in result.outputs if o.status != SKIP}
    device = checker.run.tested_on.partition(":")[0]
    values = [
        ("ENTRY", result.entry, f"of {dump.path}"),
        ("FRAMEWORK", recipe.framework, "the tested side runs on pytorch or mindspore"),
        ("DEVICE", device, "the device the run tested: cpu, cuda, npu or recorded"),
        ("TESTED", recipe.tested, "the tested callable"),
        ("AUTOCAST", recipe.autocast, "the tested call ran under autocast to this dtype"),
        ("GRAD_FLAGS", list(recipe.grad_flags), "per floating input: took a gradient in the step"),
        ("INPLACE", recipe.inplace, ""),
        ("PRIMITIVE_ARGS", None if recipe.primitive_args is None else list(recipe.primitive_args), ""),
        ("COMPARED", compared, "the outputs the run compared: index -> tested dtype"),
        ("THREADS", torch.get_num_threads(), "intra-op threads of the run"),
        ("STANDARD", standard_data(checker.standard, result), "the run's standard, its constants inlined"),
    ]
    lines = [BEGIN + " --"]
    for name, value, comment in values:
        lines.append(f"{name} = {value!r}" + (f"  # {comment}" if comment else ""))
    return "\n".join(lines) + "\n\n\n" + (recipe.bench_source or NO_BENCH) + "\n\n"


def standard_data(standard: Standard, result: EntryResult) -> dict[str, Any]:
    """What the script needs to give the verdict of `standard` on this entry's outputs."""
    from .standards.basic import BasicStandard
    from .standards.dtype import DtypeStandard, budget_for

    data: dict[str, Any] = {"name": standard.name, "describe": standard.describe()}
    if isinstance(standard, BasicStandard):
        return {**data, "cosine": standard.cosine, "max_abs_err": standard.max_abs_err}
    if not isinstance(standard, DtypeStandard):
        return data  # the script prints the metrics, and says it cannot give this standard's verdict
    fallback = BasicStandard()  # what the dtype standard applies to a dtype without a budget
    budgets = {}
    for output in result.outputs:
        budget = budget_for(output.tested_dtype)
        budgets[output.tested_dtype] = (
            None
            if budget is None
            else {
                "name": budget.format.name,
                "mantissa_bits": budget.format.mantissa_bits,
                "min_exponent": budget.format.min_exponent,
                "max_error": [budget.max_error.pass_ulps, budget.max_error.error_ulps],
                "rms_error": [budget.rms_error.pass_ulps, budget.rms_error.error_ulps],
                "input_ulps": budget.input_ulps,
            }
        )
    tolerances = {}
    for output in result.outputs:
        tolerance = standard.tolerances.match(result.output_name(output))
        if tolerance is not None:
            tolerances[str(output.index)] = [tolerance.rtol, tolerance.atol]
    return {
        **data,
        "warning": standard.warning,
        "budgets": {dtype: budget for dtype, budget in budgets.items() if budget is not None},
        "tolerances": tolerances,
        "fallback": {"cosine": fallback.cosine, "max_abs_err": fallback.max_abs_err},
    }
