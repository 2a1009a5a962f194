"""Reproduce one entry of a pytest-msprobe run, standalone: torch and numpy, nothing else.

pytest-msprobe (--msprobe-repro) wrote this script beside inputs.pt (the call's inputs as the
run rebuilt them, plain tensors) and verdict.json (what the run found). It rebuilds the call,
runs it on the device in the recorded dtypes and on the CPU with every floating input in
float64 (float32 where float64 has no kernel), and prints per output the metrics of the
details CSV (Cosine, MaxAbsErr, MaxRelativeErr) and the verdict of the run's standard, beside
the run's. The dtype standard is the package's own code, written in at the end of this script
(SOURCES), with the extra benchmark runs it asks for (the terms' magnitude, the spread under
perturbed inputs, PyTorch's own CPU kernel in the tested dtype at 1 to 8 threads). The run's
intra-op thread count, as the run had: on the CPU the numbers are the run's.

    python repro.py                 # on the kind of device the run tested (DEVICE below)
    python repro.py --device cpu    # cpu, cuda[:i], npu[:i] (torch_npu is imported only then),
                                    # recorded: the outputs the dump recorded, where the run judged those
    python repro.py --fp32          # the fp32 probe: the tested side with its fp16/bf16 inputs in fp32
                                    # (no autocast), its outputs rounded back to the recorded dtypes
    python repro.py --json          # the same, as JSON

A MindSpore entry runs its tested side on MindSpore (cpu or npu) and its benchmark on torch.
Autocast is reproduced as the run did it: both sides take the inputs rounded to the autocast
dtype (what the kernel really took). Exit status 1 when the verdict is error, as the run's
item failed.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import itertools
import json
import linecache
import sys
import types
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

# -- the entry: pytest-msprobe writes this part (the values here are an example) --
ENTRY = "Torch.matmul.0.forward"
FRAMEWORK = "pytorch"  # the tested side runs on pytorch or mindspore
DEVICE = "cpu"  # the device the run tested: cpu, cuda, npu or recorded
TESTED = "torch.matmul"  # the tested callable
AUTOCAST = ""  # the tested call ran under autocast to this dtype: both sides take the inputs rounded to it
GRAD_FLAGS: list[bool] = []  # backward: per floating input, whether it took a gradient in the step
INPLACE = False
PRIMITIVE_ARGS: list | None = None  # a MindSpore primitive's constructor arguments
COMPARED = {0: "torch.float32"}  # the outputs the run compared: index -> tested dtype
THREADS: int | None = 1  # intra-op threads of the run (None: the user's OMP_NUM_THREADS)
MAGNITUDE_API = "matmul"  # the torch API whose magnitude model the dtype standard's extra runs use
SPREAD_SEEDS = 3  # the extra run `spread`: this many seeds of perturbed inputs
LOW_THREADS = [1, 2, 4, 8]  # the extra run `low`: the CPU kernel at these thread counts
LOW_ONEDNN = [True, False]  # and with oneDNN's kernels and ATen's own (torch.backends.mkldnn.enabled)
STANDARD: dict[str, Any] = {
    "name": "basic",
    "describe": "basic (Cosine > 0.99 and MaxAbsErr < 0.0001)",
    "cosine": 0.99,
    "max_abs_err": 0.0001,
}
# What the run did to the tested outputs before comparing them, done here to the op's outputs run
# again: "target", msprobe's post-processing handler(api, output, args, kwargs); "unwritten", the
# registered mask(bench outputs, args, kwargs) -> {output index: mask} (the bench's value where True).
# role -> [the file the run imported it from (or a pytest_msprobe module), its name there], or
# ["", why it cannot be imported here] (the recorded outputs, already as compared, need none).
OUTPUT_FUNCTIONS: dict[str, list[str]] = {}
API = "matmul"  # the API's name, as a post-processing handler is given it


def bench(*args, **kwargs):
    """The benchmark: the API on torch, run on the CPU in float64."""
    return resolve("torch.matmul")(*args, **kwargs)


# -- end of the entry --

HERE = Path(__file__).resolve().parent
DIRECTION = ENTRY.rsplit(".", 1)[-1]
REL_EPS = 1e-8  # MaxRelativeErr's denominator where the bench is exactly zero
PASS, WARNING, ERROR = "pass", "warning", "error"
SEVERITY = {PASS: 0, WARNING: 1, ERROR: 2}
DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}
FLOOR_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


def resolve(path: str) -> Any:
    """A dotted name the run resolved through msprobe's list of the APIs it wraps:
    `torch.nn.functional.linear`, `mindspore.mint.exp`."""
    root, *parts = path.split(".")
    target: Any = importlib.import_module(root)
    try:
        for part in parts:
            target = getattr(target, part)
    except AttributeError:
        if path.startswith("torch.ops."):  # a team's own op: defined by the module that registers it
            raise SystemExit(
                f"{path} is not defined in this process: run the script after the module that defines it, "
                "python -c \"import <your ops module>, runpy; runpy.run_path('repro.py', run_name='__main__')\""
            ) from None
        raise
    return target


@functools.cache
def package_module(name: str) -> types.ModuleType:
    """One of pytest-msprobe's modules, run from its source in SOURCES: the code the run judged with."""
    module = types.ModuleType(f"pytest_msprobe_repro_{name}")
    module.__dict__.update(PASS=PASS, WARNING=WARNING, ERROR=ERROR)
    for used in USES.get(name, []):  # what it imported from the package's modules written before it
        module.__dict__.update({k: v for k, v in vars(package_module(used)).items() if not k.startswith("__")})
    filename = f"<pytest-msprobe {name}.py>"
    linecache.cache[filename] = (len(SOURCES[name]), None, SOURCES[name].splitlines(True), filename)
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(SOURCES[name], filename, "exec"), module.__dict__)
    return module


# -- the call, as the run rebuilt it --------------------------------------------


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    if isinstance(tree, list):
        return [tree_map(fn, item) for item in tree]
    if isinstance(tree, tuple):
        if hasattr(tree, "_fields"):
            return type(tree)(*(tree_map(fn, item) for item in tree))
        return tuple(tree_map(fn, item) for item in tree)
    if isinstance(tree, dict):
        return {key: tree_map(fn, item) for key, item in tree.items()}
    return fn(tree)


def decode(value: Any) -> Any:
    """inputs.pt holds what weights_only loads: slices and Ellipsis come as marked dicts."""
    if isinstance(value, dict) and set(value) == {"__slice__"}:
        return slice(*value["__slice__"])
    if isinstance(value, dict) and set(value) == {"__ellipsis__"}:
        return Ellipsis
    if isinstance(value, dict):
        return {key: decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode(item) for item in value]
    if isinstance(value, tuple) and not isinstance(value, torch.Size):
        return tuple(decode(item) for item in value)
    return value


def tensors(*trees: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for tree in trees:
        tree_map(lambda v: found.append(v) if isinstance(v, torch.Tensor) else None, tree)
    return found


def floating(*trees: Any) -> list[torch.Tensor]:
    return [t for t in tensors(*trees) if t.is_floating_point()]


def widen(value: Any) -> Any:
    """fp16 and bf16 to fp32, as the run's fp32 probe."""
    return (
        value.float() if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16) else value
    )


@dataclass
class Side:
    """How one side places its tensors and what it runs, as the run's (torch_engine.Side): the
    tested side (the device, the recorded dtypes) or the bench (the CPU, `bench`, float64)."""

    device: str
    floating: torch.dtype | None = None  # every floating tensor in this dtype; None keeps the recorded one
    autocast: torch.dtype | None = None  # floating inputs rounded to this dtype first, as autocast does
    reference: bool = False  # run `bench` (the benchmark's callable) instead of the tested API
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None  # on every floating tensor (extra runs)
    grad_transform: Callable[[torch.Tensor], torch.Tensor] | None = None  # then on the grad_outputs alone

    def place(self, value: Any) -> Any:
        if isinstance(value, torch.device):  # a device argument: the side's device
            return torch.device(self.device)
        if not isinstance(value, torch.Tensor):
            return value
        if not value.is_floating_point():
            return value.detach().to(device=self.device, copy=True)
        if self.autocast is not None:
            value = value.detach().to(self.autocast)
        placed = value.detach().to(device=self.device, dtype=self.floating or value.dtype, copy=True)
        return placed if self.transform is None else self.transform(placed)

    def place_grad(self, value: Any) -> Any:
        placed = self.place(value)
        return (
            placed
            if self.grad_transform is None or not isinstance(placed, torch.Tensor)
            else self.grad_transform(placed)
        )


def autocast_dtype(fp32: bool) -> torch.dtype | None:
    """The run's autocast dtype; none for the fp32 probe, which runs out of autocast."""
    return None if fp32 or not AUTOCAST else DTYPES[AUTOCAST]


def absolute(side: Side) -> Side:
    """Every floating tensor (inputs and grad_outputs) made |x|: a sum's benchmark then gives the
    magnitude of the terms it adds."""
    return replace(side, transform=torch.abs)


def perturbed(side: Side, relative: float, seed: int) -> Side:
    """Every floating tensor multiplied by 1 + relative x (+-1 at random), as the run's."""
    generator = torch.Generator().manual_seed(seed)

    def transform(t: torch.Tensor) -> torch.Tensor:
        signs = torch.randint(0, 2, t.shape, generator=generator).to(t.dtype) * 2 - 1
        return t * (1 + relative * signs)

    return replace(side, transform=transform)


def call_on(side: Side, call: dict, grad: bool) -> tuple[Any, list[torch.Tensor]]:
    """(output, floating input tensors in argument order) of the call on one side."""
    args = tree_map(side.place, call["args"])
    kwargs = tree_map(side.place, call["kwargs"])
    leaves = floating(args, kwargs)
    if grad:
        wanted = GRAD_FLAGS[: len(leaves)] + [True] * (len(leaves) - len(GRAD_FLAGS))
        for leaf, grad_wanted in zip(leaves, wanted):
            leaf.requires_grad_(grad_wanted)
    if grad and INPLACE:  # an in-place op may not write into a leaf that requires grad
        args, kwargs = tree_map(clone, args), tree_map(clone, kwargs)
    fn = bench if side.reference else resolve(TESTED)
    with torch.set_grad_enabled(grad):
        return fn(*args, **kwargs), leaves


def clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def flat_outputs(out: Any) -> list:
    if isinstance(out, (tuple, list)) and not isinstance(out, torch.Size):
        return [leaf for item in out for leaf in flat_outputs(item)]
    return [out]


def run_torch(side: Side, call: dict) -> list:
    """Forward: the outputs, flattened. Backward: the gradients of every floating input."""
    if DIRECTION == "forward":
        return flat_outputs(call_on(side, call, False)[0])
    out, leaves = call_on(side, call, True)
    outs = [o for o in flat_outputs(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    grads = [side.place_grad(g) if isinstance(g, torch.Tensor) else None for g in flat_outputs(call["grads"])]
    chosen = [(o, g) for o, g in zip(outs, grads) if g is not None]
    wanted = [leaf for leaf in leaves if leaf.requires_grad]
    # d/do of sum(o * g) is g: backward with grad_outputs g, as the run computed it.
    if any(o.is_complex() for o, _ in chosen):
        found = iter(
            torch.autograd.grad([o for o, _ in chosen], wanted, [g.to(o.dtype) for o, g in chosen], allow_unused=True)
        )
    else:
        loss = sum((o * g.to(o.dtype)).sum() for o, g in chosen)
        found = iter(torch.autograd.grad(loss, wanted, allow_unused=True))
    return [next(found) if leaf.requires_grad else None for leaf in leaves]


def run_bench(call: dict, device: str, fp32: bool) -> tuple[list, Side | None, list[str]]:
    """(outputs, the side they ran on, what to say): float64 on the CPU; float32 where float64 has
    no kernel. Where the run's benchmark is not rebuilt here, its values from inputs.pt."""
    if "bench" in call:  # a fused op (torch_npu's, a team's): its float64 reference the run's
        if fp32 and AUTOCAST:
            raise SystemExit("--fp32 of an autocast NPU op needs its reference without autocast: not here")
        npu = "the run's: the float64 reference of this fused op (from inputs.pt, with its extra runs)"
        return call["bench"], None, [npu]
    errors: list[str] = []
    autocast = autocast_dtype(fp32)
    for dtype in (torch.float64, torch.float32):
        side = Side("cpu", dtype, autocast, True)
        try:
            found = run_torch(side, call)
        except Exception as exc:  # noqa: BLE001 - as the run: float32 where float64 raises
            first = str(exc).strip().splitlines()
            errors.append(f"{type(exc).__name__}: {first[0][:300] if first else ''}")
            continue
        said = ["float64 on the CPU" if dtype == torch.float64 else f"float32 on the CPU: float64 raised {errors[0]}"]
        if device == "recorded" and not fp32 and call.get("at_nodes"):
            # msprobe took these gradients inside the API's graph: the run judged them against the
            # float64 gradient there, which this script does not compute.
            for index in call["at_nodes"]:
                found[index] = call["recorded_bench"][index]
            nodes = ", ".join(map(str, call["at_nodes"]))
            said.append(
                f"output {nodes}: the run's float64 gradient at a node of the graph (inputs.pt, with its extra runs)"
            )
        return found, side, said
    raise SystemExit(f"the benchmark cannot run on the CPU: {errors[-1]}")


def run_tested(call: dict, device: str, fp32: bool) -> list:
    if device == "recorded":
        if fp32:
            device = "cpu"  # the recorded outputs cannot be re-run: the probe runs on the CPU
        else:
            return call["recorded"]
    if fp32:
        call = {**call, "args": tree_map(widen, call["args"]), "kwargs": tree_map(widen, call["kwargs"])}
    if FRAMEWORK == "mindspore":
        return run_mindspore(call, device)
    outputs = run_torch(Side(device, None, autocast_dtype(fp32)), call)
    kind = device.partition(":")[0]
    if kind in ("cuda", "npu"):  # a kernel's error is reported at the next synchronisation: here
        accelerator(kind).synchronize()
    return outputs


def bind(device: str) -> None:
    """The device ready before anything runs, as the run bound it: torch_npu registers the npu
    with torch (and its autograd engine) when imported."""
    kind, _, index = device.partition(":")
    if FRAMEWORK == "pytorch" and kind == "npu":
        import torch_npu  # noqa: F401 - only for an NPU
    if FRAMEWORK == "pytorch" and kind in ("cuda", "npu"):
        accelerator(kind).set_device(int(index or 0))


def accelerator(kind: str) -> Any:
    """torch.cuda or torch.npu (which torch_npu adds when imported)."""
    return torch.cuda if kind == "cuda" else torch.npu  # type: ignore[attr-defined]


# -- the dtype standard's extra runs, as the run's (torch_engine.ExtraBenchRuns) ------


class ExtraRuns:
    """More of the benchmark, computed only when the standard asks (an output over its budget),
    each run once: the magnitude of the terms a kernel sums, the spread under inputs perturbed
    by u_acc (3 seeds), PyTorch's own CPU kernel in the tested dtype at 1 to 8 threads. A run
    that raises answers None, as in the run. `saved`: the run's answers, by output, where the
    benchmark is the run's (an NPU op, a gradient at a node of the graph)."""

    def __init__(self, call: dict, side: Side | None, bench: list, fp32: bool, saved: dict[int, dict]):
        self.call, self.side, self.bench, self.fp32, self.saved = call, side, bench, fp32, saved
        self.runs: dict[tuple, list | None] = {}

    @functools.cached_property
    def kind(self) -> str:
        """ "sum", "formula", "routes" or "": how the API's magnitude is had (frameworks/magnitudes.py)."""
        return package_module("magnitudes").family(MAGNITUDE_API) if MAGNITUDE_API else ""

    def for_output(self, index: int) -> Any:
        if index in self.saved:
            answers = {
                name: value.numpy() if isinstance(value, torch.Tensor) else value
                for name, value in self.saved[index].items()
            }
            return types.SimpleNamespace(
                magnitude=lambda: answers.get("magnitude"),
                spread=lambda relative: answers.get("spread"),
                low=lambda: answers.get("low"),
                lower_magnitude=lambda: answers.get("lower_magnitude"),
                sampled_magnitude=lambda: None,  # the script asks the full ones: a failure's verdict had them
                spread_once=lambda relative: answers.get("spread_once"),
                terms=lambda: answers.get("terms"),
                structural=lambda: answers.get("structural"),
                library_ulps=self.library_ulps,
            )
        return types.SimpleNamespace(
            magnitude=lambda: self.magnitude(index),
            spread=lambda relative: self.spread(index, relative),
            low=lambda: self.low(index),
            lower_magnitude=lambda: self.lower_magnitude(index),
            sampled_magnitude=lambda: None,
            spread_once=lambda relative: self.spread(index, relative, 1),
            terms=lambda: self.terms(index),
            structural=lambda: self.structural(index),
            library_ulps=self.library_ulps,
        )

    @functools.cached_property
    def library_ulps(self) -> float | None:
        """A correct math library's ULP for the forward of elementwise math (magnitudes.library_ulps)."""
        if not MAGNITUDE_API or "magnitudes" not in SOURCES:  # the template's own example has no package code
            return None
        return package_module("magnitudes").library_ulps(MAGNITUDE_API, "grads" not in self.call)

    def structural(self, index: int) -> np.ndarray | None:
        """What a correct kernel's roundings in the low dtype move the output by (magnitudes.structural)."""
        magnitudes = package_module("magnitudes")
        if not MAGNITUDE_API:
            return None
        grads = flat_outputs(self.call["grads"]) if "grads" in self.call else None
        args, kwargs = self.call["args"], self.call["kwargs"]
        return self.output(
            ("structural",),
            lambda: magnitudes.structural(MAGNITUDE_API, args, kwargs, grads, autocast_dtype(self.fp32)),
            index,
        )

    def terms(self, index: int) -> int | None:
        """How many terms one element of the output sums at most, where the API says (magnitudes.terms_of,
        or its normaliser's: normaliser_terms)."""
        bench = self.bench[index] if index < len(self.bench) else None
        if not MAGNITUDE_API or not isinstance(bench, torch.Tensor):
            return None
        grads = flat_outputs(self.call["grads"]) if "grads" in self.call else None
        args, kwargs = self.call["args"], self.call["kwargs"]
        magnitudes = package_module("magnitudes")
        return magnitudes.terms_of(MAGNITUDE_API, floating(args, kwargs), grads, index, bench.numel()) or (
            magnitudes.normaliser_terms(MAGNITUDE_API, args, kwargs, grads is None)
        )

    def magnitude(self, index: int) -> np.ndarray | None:
        backward = "grads" in self.call
        if self.kind == "sum" or (self.kind == "routes" and not backward):  # the benchmark on |inputs|
            assert self.side is not None
            return self.output(("magnitude",), functools.partial(run_torch, absolute(self.side), self.call), index)
        if self.kind == "routes":  # the benchmark on |grad_outputs|, the inputs as they are
            assert self.side is not None
            side = replace(self.side, grad_transform=torch.abs)
            return self.output(("magnitude",), functools.partial(run_torch, side, self.call), index)
        if self.kind == "formula":  # the API's formula on magnitudes
            grads = flat_outputs(self.call["grads"]) if "grads" in self.call else None
            formula = package_module("magnitudes").formula
            args, kwargs = self.call["args"], self.call["kwargs"]
            return self.output(("magnitude",), lambda: formula(MAGNITUDE_API, args, kwargs, grads), index)
        return None

    def lower_magnitude(self, index: int) -> np.ndarray | None:
        """A contraction's magnitude in float32 made a lower bound of the float64 one, asked
        first, where the run asks it (magnitudes.lower_bound; torch_engine.ExtraBenchRuns)."""
        if self.kind != "sum" or self.side is None or self.side.floating != torch.float64:
            return None
        magnitudes = package_module("magnitudes")
        grads = flat_outputs(self.call["grads"]) if "grads" in self.call else None
        terms = magnitudes.terms_bound(MAGNITUDE_API, floating(self.call["args"], self.call["kwargs"]), grads)
        if (
            terms is None
            or 4 * (terms + 4) * magnitudes.U_FLOAT32 > 1
            or torch.get_float32_matmul_precision() != "highest"
        ):
            return None
        side = replace(absolute(self.side), floating=torch.float32)
        run = functools.partial(run_torch, side, self.call)
        found = self.output(("lower magnitude",), lambda: magnitudes.lower_bound(run(), terms), index)
        return found if found is not None and np.isfinite(found).all() else None

    def spread(self, index: int, relative: float, seeds: int = SPREAD_SEEDS) -> np.ndarray | None:
        bench = self.output(("bench",), lambda: self.bench, index)
        if self.kind in ("sum", "routes") or bench is None or self.side is None:  # the magnitude says it all
            return None
        if self.kind == "unary" and "grads" not in self.call:  # an exact input: no perturbation to spread
            return None
        widest: np.ndarray | None = None
        for seed in range(seeds):
            side = perturbed(self.side, relative, seed)
            run = self.output(("spread", relative, seed), functools.partial(run_torch, side, self.call), index)
            if run is None or run.shape != bench.shape:
                return None
            gap = np.abs(run - bench)
            widest = gap if widest is None else np.maximum(widest, gap)
        return widest

    def low(self, index: int) -> np.ndarray | None:
        bench = self.output(("bench",), lambda: self.bench, index)
        widest: np.ndarray | None = None
        for threads, onednn in itertools.product(LOW_THREADS, LOW_ONEDNN):
            run = self.output(("low", threads, onednn), functools.partial(self.low_run, threads, onednn), index)
            if run is None or bench is None or run.shape != bench.shape:
                return None
            gap = np.abs(run - bench)
            widest = gap if widest is None else np.maximum(widest, gap)
        return widest

    def low_run(self, threads: int, onednn: bool) -> list:
        threads_before, onednn_before = torch.get_num_threads(), torch.backends.mkldnn.enabled
        torch.set_num_threads(threads)
        torch.backends.mkldnn.enabled = onednn  # type: ignore[assignment]  # a property of the module
        try:
            return run_torch(Side("cpu", None, autocast_dtype(self.fp32), True), self.call)
        finally:
            torch.set_num_threads(threads_before)
            torch.backends.mkldnn.enabled = onednn_before

    def output(self, key: tuple, compute: Callable[[], list], index: int) -> np.ndarray | None:
        if key not in self.runs:
            try:
                self.runs[key] = compute()
            except Exception:  # noqa: BLE001 - an extra run: the standard judges without it
                self.runs[key] = None
        outputs = self.runs[key]
        if outputs is None or index >= len(outputs):
            return None
        found = to_array(outputs[index])
        return None if found is None else np.asarray(found[0], dtype=np.float64)


# -- MindSpore: the tested side of a MindSpore entry ----------------------------


def run_mindspore(call: dict, device: str) -> list:
    import mindspore as ms

    kind, _, index = device.partition(":")
    if kind not in ("cpu", "npu"):
        raise SystemExit(f"a MindSpore entry runs on cpu or npu, not {device}")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.runtime.launch_blocking()  # a kernel error is raised at its op
    ms.set_device(*(("Ascend", int(index or 0)) if kind == "npu" else ("CPU", 0)))
    fn = resolve(TESTED)
    if PRIMITIVE_ARGS is not None:
        fn = fn(*PRIMITIVE_ARGS)

    def to_ms(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu()
            if t.dtype == torch.bfloat16:  # numpy has no bfloat16: through float32, exactly
                return ms.Tensor(t.float().numpy()).astype(ms.bfloat16)
            return ms.Tensor(t.numpy())
        if isinstance(value, torch.dtype):
            name = str(value).replace("torch.", "")
            return getattr(ms, "bool_" if name == "bool" else name)
        return value

    def from_ms(value: Any) -> Any:
        if isinstance(value, ms.Tensor):
            if value.dtype == ms.bfloat16:
                return torch.from_numpy(value.astype(ms.float32).asnumpy().copy()).to(torch.bfloat16)
            return torch.from_numpy(np.array(value.asnumpy(), copy=True))
        if isinstance(value, (tuple, list)):
            return [from_ms(v) for v in value]
        return value

    def on_ms(leaves: list | None = None) -> tuple:
        replacements = iter(leaves or [])

        def convert(value: Any) -> Any:
            if leaves is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
                return next(replacements)
            return to_ms(value)

        args = [as_tuple(arg) for arg in call["args"]]
        kwargs = {key: as_tuple(value) for key, value in call["kwargs"].items()}
        return tree_map(convert, args), tree_map(convert, kwargs)

    if DIRECTION == "forward":
        args, kwargs = on_ms()
        return flat_outputs(from_ms(fn(*args, **kwargs)))
    leaves = [to_ms(t) for t in floating([call["args"], call["kwargs"]])]

    def forward(*xs: Any) -> Any:
        args, kwargs = on_ms(list(xs))
        return fn(*args, **kwargs)

    out, vjp = ms.vjp(forward, *leaves)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    grads = flat_outputs(call["grads"])
    sens = []
    for i, o in enumerate(outs):
        g = grads[i] if i < len(grads) and isinstance(grads[i], torch.Tensor) else None
        sens.append(
            to_ms(g).astype(o.dtype)
            if g is not None
            else ms.Tensor(np.zeros(o.shape, dtype=np.float32)).astype(o.dtype)
        )
    found = vjp(tuple(sens) if isinstance(out, (tuple, list)) else sens[0])
    found = found if isinstance(found, (tuple, list)) else (found,)
    return [from_ms(g) for g in found]


def as_tuple(value: Any) -> Any:
    """msprobe writes a tuple as a JSON list; MindSpore wants tuples of ints and index items."""
    if not isinstance(value, list):
        return value
    items = [as_tuple(item) for item in value]
    if items and all(
        isinstance(i, (int, slice, type(Ellipsis), type(None))) and not isinstance(i, bool) for i in items
    ):
        return tuple(items)
    return items


# -- metrics and the standard, as the run computed them -------------------------


def to_array(value: Any) -> tuple[np.ndarray, str] | None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.is_floating_point():
            return t.to(torch.float64).numpy(), str(value.dtype)
        if t.is_complex():
            return t.to(torch.complex128).numpy(), str(value.dtype)
        return t.numpy(), str(value.dtype)
    if isinstance(value, torch.Size):
        return np.asarray(list(value), dtype=np.int64), "torch.Size"
    if isinstance(value, bool):
        return np.asarray(value), "bool"
    if isinstance(value, int):
        return np.asarray(value, dtype=np.int64), "int"
    if isinstance(value, float):
        return np.asarray(value, dtype=np.float64), "float"
    return None


def metrics(tested: np.ndarray, bench: np.ndarray) -> dict[str, Any]:
    """Cosine, MaxAbsErr and MaxRelativeErr over the finite elements of both, and the NaN and inf
    that do not match: the package's one pass (compare.metrics)."""
    if "reductions" not in SOURCES:
        return whole_array_metrics(tested, bench)
    reductions = package_module("reductions")
    found = reductions.errors(tested, bench)
    nonfinite = (found.nan_off, found.inf_off)
    if found.count == 0:
        return {"cosine": None, "max_abs_err": 0.0, "max_rel_err": 0.0, "where": None, "nonfinite": nonfinite}
    index = np.unravel_index(found.worst, np.shape(tested)) if np.ndim(tested) else ()
    return {
        "cosine": reductions.cosine(tested, bench, found),
        "max_abs_err": found.max_abs,
        "max_rel_err": found.max_rel,
        "where": [[int(i) for i in index], found.worst_tested, found.worst_bench],
        "nonfinite": nonfinite,
    }


def whole_array_metrics(tested: np.ndarray, bench: np.ndarray) -> dict[str, Any]:
    """The template's own example, which holds no package code: the metrics as whole arrays."""
    t = np.asarray(tested, dtype=np.float64).reshape(-1)
    b = np.asarray(bench, dtype=np.float64).reshape(-1)
    finite = np.isfinite(t) & np.isfinite(b)
    if not finite.all():
        t, b = t[finite], b[finite]
    if t.size == 0:
        return {
            "cosine": None,
            "max_abs_err": 0.0,
            "max_rel_err": 0.0,
            "where": None,
            "nonfinite": nonfinite_offsets(tested, bench),
        }
    diff = np.abs(t - b)
    worst = int(np.argmax(diff))
    abs_b = np.abs(b)
    rel = diff / np.where(abs_b == 0, REL_EPS, abs_b)
    index = np.unravel_index(np.flatnonzero(finite)[worst], np.shape(tested)) if np.ndim(tested) else ()
    return {
        "cosine": cosine(t, b),
        "max_abs_err": float(diff[worst]),
        "max_rel_err": float(rel.max()),
        "where": [[int(i) for i in index], float(t[worst]), float(b[worst])],
        "nonfinite": nonfinite_offsets(tested, bench),
    }


def nonfinite_offsets(tested: np.ndarray, bench: np.ndarray) -> tuple[int, int]:
    t, b = np.asarray(tested, np.float64), np.asarray(bench, np.float64)
    t_nan, b_nan, t_inf, b_inf = np.isnan(t), np.isnan(b), np.isinf(t), np.isinf(b)
    return int((t_nan != b_nan).sum()), int(((t_inf | b_inf) & ~(t_nan | b_nan) & (t != b)).sum())


def cosine(t: np.ndarray, b: np.ndarray) -> float | None:
    if t.size <= 1:
        return None
    scale = max(float(np.abs(t).max()), float(np.abs(b).max()))  # the squares of large values overflow
    if scale == 0.0:
        return None
    t, b = t / scale, b / scale
    norm_t, norm_b = float(np.sqrt(np.dot(t, t))), float(np.sqrt(np.dot(b, b)))
    if norm_t == 0.0 or norm_b == 0.0:
        return None
    return float(np.clip(np.dot(t, b) / (norm_t * norm_b), -1.0, 1.0))


def where(m: dict) -> str:
    """` at [0, 6] (tested -0.63, bench -0.63)`: the worst element, as the run's messages say it."""
    if not m.get("where"):
        return ""
    index, tested, benched = m["where"]
    return f" at [{', '.join(map(str, index))}] (tested {tested:.8g}, bench {benched:.8g})"


def first_nonfinite(t: np.ndarray, b: np.ndarray, nan: bool) -> str:
    """compare.first_nonfinite: the first element where NaN (else inf) is on one side only or differs."""
    if nan:
        off = np.isnan(t) != np.isnan(b)
    else:
        off = (np.isinf(t) | np.isinf(b)) & ~(np.isnan(t) | np.isnan(b)) & (t != b)
    found = np.flatnonzero(off)
    if not found.size:
        return ""
    i = int(found[0])
    index = ", ".join(str(int(k)) for k in np.unravel_index(i, t.shape)) if t.ndim else ""
    return f" (the first at [{index}]: tested {float(t.flat[i]):.8g}, bench {float(b.flat[i]):.8g})"


def kind(array: np.ndarray) -> str:
    return {"f": "f", "c": "f", "b": "b"}.get(np.asarray(array).dtype.kind, "i")


def judge(t: np.ndarray, b: np.ndarray, tested_dtype: str, index: int, extra: Any) -> dict[str, Any]:
    """Metrics, status, why and the dtype standard's ratio of one output: structural faults
    first, then the run's standard (compare.compare)."""
    nan = float("nan")
    if np.shape(t) != np.shape(b):
        why = f"shape {list(np.shape(t))} differs from the bench's {list(np.shape(b))}"
        return {"cosine": None, "max_abs_err": nan, "max_rel_err": nan, "status": ERROR, "why": why}
    if kind(t) != kind(b) and "f" in (kind(t), kind(b)):
        names = {"f": "floating", "b": "bool", "i": "integer"}
        why = f"dtype kind differs: tested is {names[kind(t)]}, bench is {names[kind(b)]}"
        return {"cosine": None, "max_abs_err": nan, "max_rel_err": nan, "status": ERROR, "why": why}
    m = metrics(t, b)
    nan_off, inf_off = m.pop("nonfinite")
    if kind(t) != "f":  # integer and bool outputs must be equal
        wrong = int((np.asarray(t) != np.asarray(b)).sum())
        why = f"{wrong} of {np.size(t)} elements differ (integer/bool outputs must be equal)" if wrong else ""
        return {**m, "status": ERROR if wrong else PASS, "why": why}
    t64, b64 = np.asarray(t, np.float64), np.asarray(b, np.float64)
    faults = []
    if nan_off:
        faults.append(f"NaN at {nan_off} position(s) where the other side has none{first_nonfinite(t64, b64, True)}")
    if inf_off:
        faults.append(f"inf at {inf_off} position(s) where the other side differs{first_nonfinite(t64, b64, False)}")
    if faults:
        # As the run writes it (compare.Metrics.over_whole_arrays): the fault in the numbers.
        finite = f"Cosine {'undefined' if m['cosine'] is None else format(m['cosine'], '.6g')}, "
        faults.append(f"over the elements finite on both sides: {finite}MaxAbsErr {m['max_abs_err']:.6g}")
        worst = nan if nan_off else float("inf")
        m.update(cosine=nan, max_abs_err=worst, max_rel_err=worst)
        return {**m, "status": ERROR, "why": "; ".join(faults)}
    return {**m, **standard_verdict(t64, b64, m, tested_dtype, index, extra)}


def standard_verdict(t: np.ndarray, b: np.ndarray, m: dict, dtype: str, index: int, extra: Any) -> dict[str, Any]:
    name = STANDARD["name"]
    if name == "basic":
        found = basic(t, b, m, STANDARD["cosine"], STANDARD["max_abs_err"])
        if found["status"] == ERROR:
            floor = rounding_floor(t, b, m, dtype, index, extra)
            if floor and one_side_zero(t, b):
                found["why"] += f"; {zero_within_budget(t, b, dtype, index, extra)}"
            if floor:
                found["why"] += f"; within the {floor} rounding budget (--msprobe-standard dtype passes it)"
        return found
    if name == "dtype":
        return dtype_verdict(t, b, m, dtype, index, extra, STANDARD["warning"])
    return {"status": "", "why": f"the standard {name} is not reproduced here: compare the metrics with verdict.json"}


def basic(t: np.ndarray, b: np.ndarray, m: dict, cosine: float, max_abs_err: float) -> dict[str, Any]:
    """standards/basic.py: Cosine > cosine and MaxAbsErr < max_abs_err."""
    broken = []
    within = m["max_abs_err"] < max_abs_err
    if one_side_zero(t, b):
        zero, other = ("tested", "bench") if not np.any(t) else ("bench", "tested")
        largest = f": the largest in magnitude{where(m)}" if within and where(m) else ""
        broken.append(f"the {zero} output is all zero and the {other} is not{largest}")
    elif m["cosine"] is not None and not m["cosine"] > cosine:
        broken.append(f"Cosine {m['cosine']:.6g} <= {cosine:g}")
    if not within:
        broken.append(f"MaxAbsErr {m['max_abs_err']:.3g} >= {max_abs_err:g}{where(m)}")
    return {"status": ERROR, "why": "; ".join(broken)} if broken else {"status": PASS, "why": ""}


def one_side_zero(t: np.ndarray, b: np.ndarray) -> bool:
    zero_t, zero_b = (np.size(a) > 0 and not np.any(a) for a in (t, b))
    return zero_t != zero_b and np.size(t) > 1


def zero_within_budget(t: np.ndarray, b: np.ndarray, dtype: str, index: int, extra: Any) -> str:
    """standards/basic.py's zero_within_budget: why an output all zero on one side is rounding alone."""
    budget, dtype_module = package_module("budget"), package_module("dtype")
    fmt = budget.format_of(dtype)
    if fmt is None:
        return ""
    zero_t = not np.any(t)
    other = "bench" if zero_t else "tested"
    largest = float(np.max(np.abs(np.asarray(b if zero_t else t, np.float64))))
    half_step = float(np.ldexp(1.0, fmt.min_exponent - fmt.mantissa_bits - 1))
    if zero_t and largest <= half_step:
        return (
            f"every {other} value rounds to 0 in {fmt.name} (none is above half its smallest step, "
            f"{half_step:.3g}): a correct {fmt.name} result is all zero too"
        )
    if str(index) in STANDARD.get("rules", {}):  # a per-API rule has no budget to share
        return f"every {other} value is within {fmt.name}'s rounding budget of 0"
    ratio = budget.read(t, b, fmt, extra, dtype_module.CONSTANTS, allowance_of(index)).ratio
    return f"every {other} value is within {fmt.name}'s rounding budget of 0 (the worst at {ratio:.2g} of it)"


def allowance_of(index: int) -> float | None:
    """The u_acc an msprobe_tolerances allowance accepts for this output, else None."""
    allowance = STANDARD.get("allowances", {}).get(str(index))
    return allowance[0] if allowance else None


def rounding_floor(t: np.ndarray, b: np.ndarray, m: dict, dtype: str, index: int, extra: Any) -> str:
    """The dtype whose rounding budget holds a basic failure (the dtype standard's, no warning band,
    with the run's msprobe_tolerances: a per-API rule, an allowance)."""
    if not SOURCES:
        return ""
    budget, dtype_module = package_module("budget"), package_module("dtype")
    fmt = budget.format_of(dtype)
    if fmt is None:
        return ""
    rule = STANDARD.get("rules", {}).get(str(index))
    if rule is not None:
        if within_tolerance(t, b, m, *rule)["status"] != PASS:
            return ""
    elif budget.read(t, b, fmt, extra, dtype_module.CONSTANTS, allowance_of(index)).ratio > 1:
        return ""
    name = dtype.rsplit(".", 1)[-1]
    return FLOOR_NAMES.get(name, dtype)


def dtype_verdict(
    t: np.ndarray, b: np.ndarray, m: dict, dtype: str, index: int, extra: Any, warning: bool
) -> dict[str, Any]:
    """standards/dtype.py, DtypeStandard.judge: a per-API rule, else each element against its budget."""
    rule = STANDARD["rules"].get(str(index))
    if rule is not None:
        return within_tolerance(t, b, m, *rule)
    budget, dtype_module = package_module("budget"), package_module("dtype")
    fmt = budget.format_of(dtype)
    if fmt is None:
        found = basic(t, b, m, **STANDARD["fallback"])
        note = f"no dtype budget for {dtype}, basic rule"
        return {**found, "why": f"{note}: {found['why']}" if found["why"] else note}
    allowance = STANDARD["allowances"].get(str(index))  # [u_acc accepted, the tolerance line]
    constants = dtype_module.CONSTANTS
    reading = budget.read(t, b, fmt, extra, constants, allowance[0] if allowance else None)
    status = PASS if reading.ratio <= 1 else WARNING if warning and reading.ratio <= constants.band else ERROR
    why = dtype_module._message(reading, status) + (f" (allowed: {allowance[1]})" if allowance else "")
    return {"status": status, "why": why, "ratio": reading.ratio, "asked": list(reading.asked)}


def within_tolerance(
    t: np.ndarray, b: np.ndarray, m: dict, rtol: float, atol: float, pattern: str, line: str
) -> dict[str, Any]:
    """standards/tolerances.py, Tolerance.judge: |t - b| <= atol + rtol |b| on every finite element."""
    t, b = t.reshape(-1), b.reshape(-1)
    finite = np.isfinite(t) & np.isfinite(b)
    t, b = t[finite], b[finite]
    error = np.abs(t - b)
    off = int(np.count_nonzero(error > atol + rtol * np.abs(b)))
    if not off:
        return {"status": PASS, "why": f"within tolerance {pattern}"}
    at = where(m)
    why = f"tolerance {line}: {off} of {error.size} elements off, max error {m['max_abs_err']:.3g}"
    why += f",{at}" if at else ""
    return {"status": ERROR, "why": why}


# -- the run again ----------------------------------------------------------------


@functools.cache
def output_function(role: str) -> Callable:
    """One of OUTPUT_FUNCTIONS, imported from the file the run imported it from (by its path: never
    a file of the same name elsewhere on sys.path, nor one in a dump's folder), or this package's."""
    where, name = OUTPUT_FUNCTIONS[role]
    if not where:  # the run said why no script can import it (`name`)
        raise SystemExit(f"the run applied a function to the outputs ({role}) that cannot be applied here: {name}")
    try:
        module = _user_module(where) if where.endswith(".py") else importlib.import_module(where)
        found: Any = module
        for part in name.split("."):
            found = getattr(found, part)
    except Exception as exc:  # noqa: BLE001 - said as what the script cannot do
        raise SystemExit(
            f"the run applied {name} of {where} to the outputs ({role}); it cannot be imported here: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    return found


@functools.cache
def _user_module(path: str) -> types.ModuleType:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"pytest_msprobe_repro_{Path(path).stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def as_compared(tested: list, benched: list, call: dict) -> list:
    """The op's outputs run again as the run compared them: msprobe's post-processing handler on them,
    then the bench's value where the registered mask says a correct kernel may leave an element
    unwritten (registered.compared)."""
    if "target" in OUTPUT_FUNCTIONS:
        given = tested[0] if len(tested) == 1 else tuple(tested)
        found = output_function("target")(API, given, call["args"], call["kwargs"])
        tested = list(found) if isinstance(found, (tuple, list)) else [found]
    if "unwritten" in OUTPUT_FUNCTIONS:
        tested = list(tested)
        masks = output_function("unwritten")(benched, call["args"], call["kwargs"]) or {}
        for index, given in dict(masks).items():
            value = tested[index] if index < len(tested) else None
            bench = benched[index] if index < len(benched) else None
            if not isinstance(value, torch.Tensor) or not isinstance(bench, torch.Tensor):
                continue
            mask = getattr(given, "mask", given)  # an Unwritten(mask, why), or the mask
            mask = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else mask
            where = torch.as_tensor(np.asarray(mask, dtype=bool)).to(value.device)
            tested[index] = torch.where(where, bench.detach().to(device=value.device, dtype=value.dtype), value)
    return tested


def reproduce(call: dict, device: str, fp32: bool) -> dict[str, Any]:
    report: dict[str, Any] = {"entry": ENTRY, "device": device, "fp32": fp32, "standard": STANDARD["describe"]}
    benched, side, report["bench"] = run_bench(call, device, fp32)
    rerun = device != "recorded" or fp32
    for role in OUTPUT_FUNCTIONS if rerun else ():
        output_function(role)  # imported first: the file that defines them may define the op too
    try:
        tested = run_tested(call, device, fp32)
    except Exception as exc:  # noqa: BLE001 - a device that raises is the finding, as in the run
        report.update(status=ERROR, outputs=[], raised=f"{type(exc).__name__}: {exc}")
        return report
    if rerun and OUTPUT_FUNCTIONS:  # the recorded outputs in inputs.pt are already as the run compared them
        tested = as_compared(tested, benched, call)
        applied = ", ".join(f"{name} ({role})" for role, (_, name) in OUTPUT_FUNCTIONS.items())
        report["bench"].append(f"the op's outputs as the run compared them: {applied}")
    # The run's answers to the extra runs where the bench is the run's: all of an NPU op's; a
    # gradient judged at a node of the graph where the recorded outputs are judged again.
    saved = call.get("extra", {})
    if "bench" not in call and (device != "recorded" or fp32):
        saved = {}
    extra = ExtraRuns(call, side, benched, fp32, saved)
    at_nodes = set(call.get("at_nodes", [])) if fp32 else set()  # not probed: a rerun has no such gradient
    outputs: list[dict[str, Any]] = []
    for index, dtype in COMPARED.items():
        if index in at_nodes:
            continue
        value = tested[index] if index < len(tested) else None
        if fp32 and isinstance(value, torch.Tensor) and value.is_floating_point() and dtype in DTYPES:
            value = value.to(DTYPES[dtype])  # rounded back to the recorded dtype
        t, b = to_array(value), to_array(benched[index] if index < len(benched) else None)
        if t is None or b is None:
            outputs.append({"index": index, "status": ERROR, "why": "no output to compare"})
            continue
        found = judge(t[0], b[0], t[1], index, extra.for_output(index))
        outputs.append({"index": index, "tested_dtype": t[1], "shape": list(np.shape(t[0])), **found})
    statuses: list[str] = [o["status"] for o in outputs if o["status"]]
    report["status"] = max(statuses, key=lambda status: SEVERITY[status]) if statuses else ""
    report["outputs"] = outputs
    if at_nodes:
        report["not_probed"] = sorted(at_nodes)
    return report


def show(report: dict[str, Any], run: dict[str, Any]) -> None:
    """The report beside the run's (verdict.json; with --fp32, the run's fp32 probe), one line an output."""
    if report["device"] == "recorded" and not report["fp32"]:
        print(f"{ENTRY}: {TESTED}, the outputs the dump recorded")
    elif report["device"] == "recorded":  # the probe re-runs the call on the CPU, as the run's did
        print(f"{ENTRY}: {TESTED} on cpu in fp32, rounded back (the fp32 probe; the tested side was recorded)")
    else:
        side = "in fp32, rounded back (the fp32 probe)" if report["fp32"] else "in the recorded dtypes"
        print(f"{ENTRY}: {TESTED} on {report['device']} {side}")
    print(f"bench: {'; '.join(report['bench'])}")
    print(f"standard: {report['standard']}")
    if "raised" in report:
        print(f"the tested run raised {report['raised']}")
    if report.get("not_probed"):
        nodes = ", ".join(map(str, report["not_probed"]))
        print(f"output {nodes}: judged at a node of the API's graph, where a run of the call in fp32 has no value")
    whose = "the run"
    if report["fp32"]:
        whose = "the run's probe"
        run = {"outputs": [], "status": "not probed", **(run.get("probe") or {})}
        run["outputs"] = [{**o, "name": f"output.{o['index']}"} for o in run["outputs"]]
    ran = {row["name"].rsplit(".", 1)[-1]: row for row in run.get("outputs", [])}
    for o in report["outputs"]:
        numbers = ", ".join(
            f"{label} {o[key]!r}"
            for label, key in (("Cosine", "cosine"), ("MaxAbsErr", "max_abs_err"), ("MaxRelativeErr", "max_rel_err"))
            if key in o
        )
        ratio = f", {o['ratio']!r}x its budget" if o.get("ratio") is not None else ""
        what = f"output.{o['index']} {o.get('tested_dtype', '')} {o.get('shape', '')}"
        print(f"{what}: {numbers}{ratio}: {o['status']}" + (f" ({o['why']})" if o["why"] else ""))
        theirs = ran.get(str(o["index"]))
        if theirs is not None:
            theirs_ratio = f", {theirs['ratio']!r}x its budget" if theirs.get("ratio") is not None else ""
            print(
                f"  {whose}: Cosine {theirs['cosine']!r}, MaxAbsErr {theirs['max_abs_err']!r}, "
                f"MaxRelativeErr {theirs['max_rel_err']!r}{theirs_ratio}: {theirs['status']}"
            )
    print(f"verdict: {report['status'] or 'not reproduced'} ({whose}: {run.get('status') or 'unknown'})")


def device_name(text: str) -> str:
    kind = text.partition(":")[0]
    if kind not in ("cpu", "cuda", "npu", "recorded"):
        raise argparse.ArgumentTypeError(f"cpu, cuda[:i], npu[:i] or recorded, not {text!r}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=f"Reproduce {ENTRY} of a pytest-msprobe run.")
    parser.add_argument(
        "--device", type=device_name, default=DEVICE, help=f"cpu, cuda[:i], npu[:i] or recorded (default {DEVICE})"
    )
    parser.add_argument(
        "--fp32", action="store_true", help="the tested side with its fp16/bf16 inputs in fp32, rounded back"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    options = parser.parse_args(argv)
    if THREADS:
        torch.set_num_threads(THREADS)  # the run's count: a float sum rounds differently with another
    call = decode(torch.load(HERE / "inputs.pt", weights_only=True))
    if options.device == "recorded" and "recorded" not in call:
        parser.error("the run re-ran this entry: no recorded outputs here")
    bind("cpu" if options.device == "recorded" else options.device)
    report = reproduce(call, options.device, options.fp32)
    verdict = HERE / "verdict.json"
    run = json.loads(verdict.read_text(encoding="utf-8")) if verdict.is_file() else {}
    if options.json:
        print(json.dumps({**report, "run": run.get("status")}))
    else:
        show(report, run)
    return 1 if report["status"] == ERROR else 0


# -- the package's code: pytest-msprobe writes this part --
PACKAGE = ""  # "pytest-msprobe 0.1.0": whose code SOURCES holds
SOURCES: dict[str, str] = {}  # module -> its source: the dtype standard, the magnitude formulas
USES: dict[str, list[str]] = {}  # module -> the modules of SOURCES whose names it uses
# -- end of the package's code --


if __name__ == "__main__":
    sys.exit(main())
