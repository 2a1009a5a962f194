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

The verdict is the run's standard: the basic thresholds, or the dtype standard's own code
(standards/budget.py, the magnitude formulas, its message: repro_sources.py reads them from the
package as it writes the script) with the per-API tolerances that match, and the script runs
the same extra benchmark runs as the run (the seeds, the perturbation, the thread counts are
written in from the engine's). Where the script cannot rebuild the benchmark (an NPU op's
reference, a gradient msprobe took inside the API's graph), inputs.pt keeps the run's bench
values and the answers of its extra runs, and the script says so. A standard the script does
not know is named, and the script prints the metrics alone. The folders are written with
error_data's helpers. No pytest.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..frameworks import Kept, Recipe
from ..inputs.rebuild import Device, tree_map
from ..reports.messages import entry_message
from ..results import SKIP, EntryResult, OutputResult
from . import repro_sources
from .error_data import entry_folder, output_row, save_torch

if TYPE_CHECKING:
    from ..checking.check import Checker
    from ..dumps.dump import Dump
    from ..judging.standards import Standard
    from ..judging.standards.dtype import DtypeStandard

TEMPLATE = Path(__file__).with_name("templates") / "repro.py"
BEGIN = "# -- the entry: pytest-msprobe writes this part"
END = "# -- end of the entry --"
CODE_BEGIN = "# -- the package's code: pytest-msprobe writes this part --"
CODE_END = "# -- end of the package's code --"
NO_BENCH = (
    "def bench(*args, **kwargs):\n"
    '    raise RuntimeError("no bench to rebuild here: inputs.pt holds the bench outputs of the run")\n'
)


def save(folder: Path, dump: Dump, result: EntryResult, kept: Kept, checker: Checker) -> Path:
    """Write the entry's inputs.pt, verdict.json and repro.py; returns the entry's folder."""
    if kept.recipe is None:
        raise ValueError(f"the {dump.framework} framework gave no recipe to rebuild the call from")
    if kept.recipe.unscripted:
        raise ValueError(kept.recipe.unscripted)
    with entry_folder(folder, dump, result) as target:  # never through a link (files.py)
        save_torch(target, "inputs", inputs(kept, checker.run.recorded, result))
        verdict = verdict_data(dump, result, checker)
        target.write_text("verdict.json", json.dumps(verdict, indent=2, default=str))
        target.write_text("repro.py", script(dump, result, kept.recipe, checker))
    return target.path


def importable_functions(dump: Dump, recipe: Recipe) -> dict[str, list[str]]:
    """OUTPUT_FUNCTIONS of the script: role -> [the file the run imported it from, its name], or
    ["", why not] where the script cannot import it: one the run could not say how to find again,
    and one in the dump's folder (a dump is data: a script never imports from there)."""
    folder = Path(dump.path).resolve().parent
    found = {}
    for role, where, name in recipe.output_functions:
        if where and Path(where).is_absolute() and Path(where).resolve().is_relative_to(folder):
            where, name = "", f"{name} of {where} lies in the dump's folder {folder}: never imported from there"
        found[role] = [where, name]
    return found


def inputs(kept: Kept, recorded: bool, result: EntryResult) -> dict[str, Any]:
    """What inputs.pt holds: the call, and the values the script cannot compute itself."""
    data = {"args": encode(kept.inputs["args"]), "kwargs": encode(kept.inputs["kwargs"])}
    if kept.grad_outputs is not None:
        data["grads"] = encode(kept.grad_outputs)
    if recorded and kept.tested is not None:
        data["recorded"] = encode(kept.tested)
    rebuilt = kept.recipe is not None and bool(kept.recipe.bench_source)
    if not rebuilt:  # an NPU op: its float64 reference is pytest-msprobe's own
        data["bench"] = encode(kept.bench)
    if kept.at_nodes:  # the recorded gradients' float64 counterparts inside the API's graph
        data["recorded_bench"] = encode(kept.bench)
        data["at_nodes"] = sorted(kept.at_nodes)
    # Where the bench is the run's, so are the answers of the standard's extra runs.
    unbuilt = [o for o in result.outputs if o.status != SKIP and (not rebuilt or o.index in kept.at_nodes)]
    if unbuilt and kept.extra is not None:
        data["extra"] = {o.index: extra_answers(kept, o) for o in unbuilt}
    return data


def extra_answers(kept: Kept, output: OutputResult) -> dict[str, Any]:
    """The answers of the dtype standard's extra runs for one output, all it may ask, for a script
    that cannot run them (the benchmark is the run's)."""
    import torch

    from ..judging.standards.budget import U_ACC, format_of

    extra = kept.extra
    assert extra is not None
    fmt = format_of(output.tested_dtype)
    answers = {
        "lower_magnitude": extra.lower_magnitude(output.index),
        "magnitude": extra.magnitude(output.index),
        "spread_once": extra.spread(output.index, U_ACC, 1),
        "spread": extra.spread(output.index, U_ACC),
        "structural": extra.run_of("structural", extra.sides.structural, None, output.index),
    }
    if fmt is not None and fmt.mantissa_bits < 23:  # the standard asks `low` of fp16/bf16 only
        answers["low"] = extra.low(output.index)
    found: dict[str, Any] = {
        name: None if value is None else torch.from_numpy(value) for name, value in answers.items()
    }
    found["terms"] = extra.terms(output.index)
    return found


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
        "outputs": [{**output_row(result, output), "ratio": output.ratio} for output in result.outputs],
    }


def script(dump: Dump, result: EntryResult, recipe: Recipe, checker: Checker) -> str:
    """templates/repro.py with this entry's part and the package's code in place of the example's."""
    template = TEMPLATE.read_text(encoding="utf-8")
    head, _, rest = template.partition(BEGIN)
    _, _, middle = rest.partition(END)
    middle, _, rest = middle.partition(CODE_BEGIN)
    _, _, tail = rest.partition(CODE_END)
    if not tail:
        raise ValueError(f"{TEMPLATE}: the markers of the parts pytest-msprobe writes are missing")
    return head + entry_part(dump, result, recipe, checker) + END + middle + code_part() + CODE_END + tail


def entry_part(dump: Dump, result: EntryResult, recipe: Recipe, checker: Checker) -> str:
    import torch

    from ..frameworks.torch_engine import LOW_ONEDNN, LOW_THREADS, SPREAD_SEEDS

    compared = {o.index: o.tested_dtype for o in result.outputs if o.status != SKIP}
    device = checker.run.tested_on.partition(":")[0]
    values = [
        ("ENTRY", result.entry, f"of {dump.path}"),
        ("FRAMEWORK", recipe.framework, "the tested side runs on pytorch or mindspore"),
        ("DEVICE", device, "the device the run tested: cpu, cuda, npu or recorded"),
        ("TESTED", recipe.tested, "the tested callable, as msprobe's list of the APIs it wraps names it"),
        ("AUTOCAST", recipe.autocast, "the tested call ran under autocast to this dtype"),
        ("GRAD_FLAGS", list(recipe.grad_flags), "per floating input: took a gradient in the step"),
        ("INPLACE", recipe.inplace, ""),
        ("PRIMITIVE_ARGS", None if recipe.primitive_args is None else list(recipe.primitive_args), ""),
        ("COMPARED", compared, "the outputs the run compared: index -> tested dtype"),
        ("THREADS", torch.get_num_threads(), "intra-op threads of the run"),
        ("MAGNITUDE_API", recipe.magnitude_api, "whose magnitude model the dtype standard's extra runs use"),
        ("SPREAD_SEEDS", SPREAD_SEEDS, "the extra run `spread`: this many seeds of perturbed inputs"),
        ("LOW_THREADS", list(LOW_THREADS), "the extra run `low`: the CPU kernel at these thread counts"),
        ("LOW_ONEDNN", list(LOW_ONEDNN), "and with oneDNN's kernels and ATen's own (torch.backends.mkldnn.enabled)"),
        ("STANDARD", standard_data(checker.standard, result), "the run's standard"),
        (
            "OUTPUT_FUNCTIONS",
            importable_functions(dump, recipe),
            "applied to the op's outputs run again, as the run did: role -> [file the run imported, name]",
        ),
        ("API", recipe.api, "the API's name, as a post-processing handler is given it"),
    ]
    lines = [BEGIN + " --"]
    for name, value, comment in values:
        lines.append(f"{name} = {value!r}" + (f"  # {comment}" if comment else ""))
    return "\n".join(lines) + "\n\n\n" + (recipe.bench_source or NO_BENCH) + "\n\n"


def code_part() -> str:
    """The package's code the script runs (repro_sources.py), each module's source a string."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = f"pytest-msprobe {version('pytest-msprobe')}"
    except PackageNotFoundError:
        package = "pytest-msprobe"
    lines = [
        CODE_BEGIN,
        f"PACKAGE = {package!r}  # whose code SOURCES holds",
        "SOURCES: dict[str, str] = {}  # module -> its source, as the run ran it",
    ]
    for name, text in repro_sources.sources().items():
        lines.append(f"SOURCES[{name!r}] = {literal(text)}")
    uses = {part.name: list(part.uses) for part in repro_sources.PARTS if part.uses}
    lines.append(f"USES: dict[str, list[str]] = {uses!r}  # module -> the modules of SOURCES whose names it uses")
    return "\n".join(lines) + "\n"


def literal(text: str) -> str:
    """A Python literal of `text` that reads as the source it holds: a raw triple-quoted string
    where it can be one."""
    if "'''" not in text and not text.endswith("\\") and "\r" not in text:
        found = "r'''" + text + "'''"
        try:
            if ast.literal_eval(found) == text:
                return found
        except SyntaxError:
            pass
    return repr(text)


def _per_output(standard: DtypeStandard, result: EntryResult) -> tuple[dict[str, list], dict[str, list]]:
    """The msprobe_tolerances lines that match each output: rules (rtol, atol) and allowances."""
    rules, allowances = {}, {}
    for output in result.outputs:
        tolerance = standard.tolerances.match(result.output_name(output))
        if tolerance is None:
            continue
        if tolerance.rule:
            rules[str(output.index)] = [tolerance.rtol, tolerance.atol, tolerance.pattern, tolerance.describe()]
        else:
            allowances[str(output.index)] = [tolerance.accumulation, tolerance.describe()]
    return rules, allowances


def standard_data(standard: Standard, result: EntryResult) -> dict[str, Any]:
    """What the script needs to give the verdict of `standard` on this entry's outputs."""
    from ..judging.standards.basic import BasicStandard
    from ..judging.standards.dtype import DtypeStandard

    data: dict[str, Any] = {"name": standard.name, "describe": standard.describe()}
    if isinstance(standard, BasicStandard):
        # The floor asks the dtype standard with the run's msprobe_tolerances (basic.py): the same here.
        rules, allowances = _per_output(standard.budget, result)
        thresholds = {"cosine": standard.cosine, "max_abs_err": standard.max_abs_err}
        return {**data, **thresholds, "rules": rules, "allowances": allowances}
    if not isinstance(standard, DtypeStandard):
        return data  # the script prints the metrics, and says it cannot give this standard's verdict
    fallback = BasicStandard()  # what the dtype standard applies to a dtype without a budget
    rules, allowances = _per_output(standard, result)
    return {
        **data,
        "warning": standard.warning,
        "rules": rules,
        "allowances": allowances,
        "fallback": {"cosine": fallback.cosine, "max_abs_err": fallback.max_abs_err},
    }
