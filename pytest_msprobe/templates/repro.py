"""Reproduce one entry of a pytest-msprobe run, standalone: torch and numpy, nothing else.

pytest-msprobe (--msprobe-repro) wrote this script beside inputs.pt (the call's inputs as the
run rebuilt them, plain tensors) and verdict.json (what the run found). It rebuilds the call,
runs it on the device in the recorded dtypes and on the CPU with every floating input in
float64 (float32 where float64 has no kernel), and prints per output the metrics of the
details CSV (Cosine, MaxAbsErr, MaxRelativeErr) and the verdict of the run's standard, beside
the run's. One intra-op thread, as the run had: on the CPU the numbers are the run's.

    python repro.py                 # on the kind of device the run tested (DEVICE below)
    python repro.py --device cpu    # cpu, cuda[:i], npu[:i] (torch_npu is imported only then),
                                    # recorded: the outputs the dump recorded, where the run judged those
    python repro.py --fp32          # the fp32 probe: the tested side with its fp16/bf16 inputs in fp32
                                    # (no autocast), its outputs rounded back to the recorded dtypes
    python repro.py --json          # the same, as JSON

A MindSpore entry runs its tested side on MindSpore (cpu or npu) and its benchmark on torch.
Exit status 1 when the verdict is error, as the run's item failed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

# -- the entry: pytest-msprobe writes this part (the values here are an example) --
ENTRY = "Torch.matmul.0.forward"
FRAMEWORK = "pytorch"  # the tested side runs on pytorch or mindspore
DEVICE = "cpu"  # the device the run tested: cpu, cuda, npu or recorded
TESTED = "torch.matmul"  # the tested callable
AUTOCAST = ""  # the tested call ran under autocast to this dtype
GRAD_FLAGS: list[bool] = []  # backward: per floating input, whether it took a gradient in the step
INPLACE = False
PRIMITIVE_ARGS: list | None = None  # a MindSpore primitive's constructor arguments
COMPARED = {0: "torch.float32"}  # the outputs the run compared: index -> tested dtype
THREADS: int | None = 1  # intra-op threads of the run (None: the user's OMP_NUM_THREADS)
STANDARD: dict[str, Any] = {
    "name": "basic",
    "describe": "basic (Cosine > 0.99 and MaxAbsErr < 0.0001)",
    "cosine": 0.99,
    "max_abs_err": 0.0001,
}


def bench(*args, **kwargs):
    """The benchmark: the API on torch, run on the CPU in float64."""
    return resolve("torch.matmul")(*args, **kwargs)


# -- end of the entry --

HERE = Path(__file__).resolve().parent
DIRECTION = ENTRY.rsplit(".", 1)[-1]
REL_EPS = 1e-8  # MaxRelativeErr's denominator where the bench is exactly zero
SEVERITY = {"pass": 0, "warning": 1, "error": 2}


def resolve(path: str) -> Any:
    """A dotted name: `torch.nn.functional.linear`, `mindspore.mint.exp`."""
    root, *parts = path.split(".")
    target: Any = importlib.import_module(root)
    for part in parts:
        target = getattr(target, part)
    return target


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


def place(value: Any, device: str, dtype: torch.dtype | None) -> Any:
    """A value on a side: on `device`, floating tensors in `dtype` (None keeps the recorded one)."""
    if isinstance(value, torch.device):  # a device argument: the side's device
        return torch.device(device)
    if not isinstance(value, torch.Tensor):
        return value
    wanted = dtype if (value.is_floating_point() and dtype is not None) else value.dtype
    return value.detach().to(device=device, dtype=wanted, copy=True)


def call_on(
    fn: Callable, call: dict, device: str, dtype: torch.dtype | None, autocast: str, grad: bool
) -> tuple[Any, list[torch.Tensor]]:
    """(output, floating input tensors in argument order) of the call on one side."""
    args = tree_map(lambda v: place(v, device, dtype), call["args"])
    kwargs = tree_map(lambda v: place(v, device, dtype), call["kwargs"])
    leaves = floating(args, kwargs)
    if grad:
        wanted = GRAD_FLAGS[: len(leaves)] + [True] * (len(leaves) - len(GRAD_FLAGS))
        for leaf, grad_wanted in zip(leaves, wanted):
            leaf.requires_grad_(grad_wanted)
    if grad and INPLACE:  # an in-place op may not write into a leaf that requires grad
        args, kwargs = tree_map(clone, args), tree_map(clone, kwargs)
    context: Any = contextlib.nullcontext()
    if autocast:
        context = torch.autocast(torch.device(device).type, dtype=getattr(torch, autocast.replace("torch.", "")))
    with context, torch.set_grad_enabled(grad):
        return fn(*args, **kwargs), leaves


def clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else value


def flat_outputs(out: Any) -> list:
    if isinstance(out, (tuple, list)) and not isinstance(out, torch.Size):
        return [leaf for item in out for leaf in flat_outputs(item)]
    return [out]


def run_torch(fn: Callable, call: dict, device: str, dtype: torch.dtype | None, autocast: str) -> list:
    """Forward: the outputs, flattened. Backward: the gradients of every floating input."""
    if DIRECTION == "forward":
        return flat_outputs(call_on(fn, call, device, dtype, autocast, False)[0])
    out, leaves = call_on(fn, call, device, dtype, autocast, True)
    outs = [o for o in flat_outputs(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    grads = [place(g, device, dtype) if isinstance(g, torch.Tensor) else None for g in flat_outputs(call["grads"])]
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


def run_bench(call: dict, device: str) -> tuple[list, str]:
    """float64 on the CPU; float32 where float64 has no kernel."""
    if "bench" in call:  # an NPU op: its float64 reference is pytest-msprobe's, the run's outputs
        return call["bench"], "the run's (pytest-msprobe's float64 reference of this NPU op, from inputs.pt)"
    if device == "recorded" and "recorded_bench" in call:
        # msprobe took some of these gradients inside the API's graph: the run judged them against
        # the float64 gradient there, which this script does not compute.
        return call["recorded_bench"], "the run's float64 gradients where msprobe recorded them (inputs.pt)"
    try:
        return run_torch(bench, call, "cpu", torch.float64, ""), "float64 on the CPU"
    except Exception as exc:  # noqa: BLE001 - as the run: float32 where float64 raises
        first = str(exc).strip().splitlines()
        note = f"float32 on the CPU: float64 raised {type(exc).__name__}: {first[0][:300] if first else ''}"
        return run_torch(bench, call, "cpu", torch.float32, ""), note


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
    if device.startswith("npu"):
        import torch_npu  # noqa: F401 - only for an NPU: it registers the device with torch
    return run_torch(resolve(TESTED), call, device, None, "" if fp32 else AUTOCAST)


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
    """Cosine, MaxAbsErr and MaxRelativeErr over the finite elements of both."""
    t = np.asarray(tested, dtype=np.float64).reshape(-1)
    b = np.asarray(bench, dtype=np.float64).reshape(-1)
    finite = np.isfinite(t) & np.isfinite(b)
    if not finite.all():
        t, b = t[finite], b[finite]
    if t.size == 0:
        return {"cosine": None, "max_abs_err": 0.0, "max_rel_err": 0.0, "where": None}
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
    }


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


def kind(array: np.ndarray) -> str:
    return {"f": "f", "c": "f", "b": "b"}.get(np.asarray(array).dtype.kind, "i")


def judge(t: np.ndarray, b: np.ndarray, tested_dtype: str, index: int, input_scale: float) -> tuple[dict, str, str]:
    """(metrics, status, why) of one output: structural faults first, then the run's standard."""
    if np.shape(t) != np.shape(b):
        nan = float("nan")
        return {"cosine": None, "max_abs_err": nan, "max_rel_err": nan, "where": None}, "error", "shapes differ"
    if kind(t) != kind(b) and "f" in (kind(t), kind(b)):
        return {"cosine": None, "max_abs_err": float("nan"), "max_rel_err": float("nan")}, "error", "dtype kinds differ"
    m = metrics(t, b)
    if kind(t) != "f":  # integer and bool outputs must be equal
        wrong = int((np.asarray(t) != np.asarray(b)).sum())
        return (m, "error", f"{wrong} of {np.size(t)} elements differ") if wrong else (m, "pass", "equal")
    t64, b64 = np.asarray(t, np.float64), np.asarray(b, np.float64)
    if not np.array_equal(np.isnan(t64), np.isnan(b64)):
        return m, "error", "NaN where the other side has none"
    if ((np.isinf(t64) | np.isinf(b64)) & ~(np.isnan(t64) | np.isnan(b64)) & (t64 != b64)).any():
        return m, "error", "inf where the other side differs"
    status, why = standard_verdict(t, b, m, tested_dtype, index, input_scale)
    return m, status, why


def standard_verdict(t: np.ndarray, b: np.ndarray, m: dict, dtype: str, index: int, input_scale: float) -> tuple:
    name = STANDARD["name"]
    if name == "basic":
        return basic(t, b, m, STANDARD["cosine"], STANDARD["max_abs_err"])
    if name == "dtype":
        tolerance = STANDARD["tolerances"].get(str(index))
        if tolerance is not None:
            return within_tolerance(t, b, *tolerance)
        budget = STANDARD["budgets"].get(dtype)
        if budget is None:
            status, why = basic(t, b, m, **STANDARD["fallback"])
            return status, f"no dtype budget for {dtype}, basic rule: {why}"
        return within_budget(t, b, budget, input_scale, STANDARD["warning"])
    return "", f"the standard {name} is not reproduced here: compare the metrics with verdict.json"


def basic(t: np.ndarray, b: np.ndarray, m: dict, cosine: float, max_abs_err: float) -> tuple[str, str]:
    broken = []
    zero_t, zero_b = (np.size(a) > 0 and not np.any(a) for a in (t, b))
    if zero_t != zero_b and np.size(t) > 1:
        broken.append(f"the {'tested' if zero_t else 'bench'} output is all zero and the other is not")
    elif m["cosine"] is not None and not m["cosine"] > cosine:
        broken.append(f"Cosine {m['cosine']:.6g} <= {cosine:g}")
    if not m["max_abs_err"] < max_abs_err:
        broken.append(f"MaxAbsErr {m['max_abs_err']:.3g} >= {max_abs_err:g}")
    return ("error", "; ".join(broken)) if broken else ("pass", f"Cosine > {cosine:g} and MaxAbsErr < {max_abs_err:g}")


def finite_pairs(t: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    finite = np.isfinite(t) & np.isfinite(b)
    return t[finite], b[finite]


def within_tolerance(t: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> tuple[str, str]:
    t, b = finite_pairs(t, b)
    off = int(np.count_nonzero(np.abs(t - b) > atol + rtol * np.abs(b)))
    rule = f"|t - b| <= {atol:g} + {rtol:g} |b|"
    return ("error", f"{off} of {t.size} elements break {rule}") if off else ("pass", f"within {rule}")


def ulp(x: float, budget: dict) -> float:
    x = abs(float(x))
    exponent = math.frexp(x)[1] - 1 if x > 0 else budget["min_exponent"]
    return math.ldexp(1.0, max(exponent, budget["min_exponent"]) - budget["mantissa_bits"])


def rms(values: np.ndarray) -> float:
    if not values.size:
        return 0.0
    scale = float(np.abs(values).max())
    return scale * float(np.sqrt(np.mean((values / scale) ** 2))) if scale else 0.0


def within_budget(t: np.ndarray, b: np.ndarray, budget: dict, input_scale: float, warning: bool) -> tuple[str, str]:
    """The dtype standard: the max error in ULP of the output scale, the RMS error in ULP of its RMS."""
    t, b = finite_pairs(t, b)
    scale = abs(float(input_scale or 0.0))
    scale = scale if math.isfinite(scale) else 0.0
    input_part = budget["input_ulps"] * ulp(scale, budget) if scale else 0.0
    output_scale = float(np.abs(b).max()) if b.size else 0.0
    checks = [
        ("max error", float(np.abs(t - b).max()) if t.size else 0.0, ulp(output_scale, budget), budget["max_error"]),
        (
            "RMS error",
            rms(t - b),
            max(math.ldexp(rms(b), -budget["mantissa_bits"]), ulp(0.0, budget)),
            budget["rms_error"],
        ),
    ]
    worst, why = "pass", []
    for statistic, error, unit, (pass_ulps, error_ulps) in checks:
        if error <= pass_ulps * unit + input_part:
            status = "pass"
        elif warning and error <= error_ulps * unit + input_part:
            status = "warning"
        else:
            status = "error"
        limit = error_ulps if warning else pass_ulps
        why.append(f"{statistic} {error / unit:.3g} ULP (pass within {pass_ulps:g}, error beyond {limit:g})")
        worst = status if SEVERITY[status] > SEVERITY[worst] else worst
    scale_part = f"; each limit + {input_part:.3g} for the input scale" if input_part else ""
    return worst, f"{budget['name']}: " + ", ".join(why) + scale_part


def input_scale(call: dict) -> float:
    scale = 0.0
    for t in floating(call["args"], call["kwargs"]):
        if t.numel():
            finite = t[torch.isfinite(t)]
            if finite.numel():
                scale = max(scale, float(finite.abs().max()))
    return scale


# -- the run again ----------------------------------------------------------------


def reproduce(call: dict, device: str, fp32: bool) -> dict[str, Any]:
    report: dict[str, Any] = {"entry": ENTRY, "device": device, "fp32": fp32, "standard": STANDARD["describe"]}
    benched, report["bench"] = run_bench(call, device)
    try:
        tested = run_tested(call, device, fp32)
    except Exception as exc:  # noqa: BLE001 - a device that raises is the finding, as in the run
        report.update(status="error", outputs=[], raised=f"{type(exc).__name__}: {exc}")
        return report
    scale = input_scale(call)
    outputs: list[dict[str, Any]] = []
    for index, dtype in COMPARED.items():
        value = tested[index] if index < len(tested) else None
        if fp32 and isinstance(value, torch.Tensor) and value.is_floating_point():
            value = value.to(getattr(torch, dtype.replace("torch.", "")))  # rounded back to the recorded dtype
        t, b = to_array(value), to_array(benched[index] if index < len(benched) else None)
        if t is None or b is None:
            outputs.append({"index": index, "status": "error", "why": "no output to compare"})
            continue
        m, status, why = judge(t[0], b[0], t[1], index, scale)
        outputs.append(
            {"index": index, "tested_dtype": t[1], "shape": list(np.shape(t[0])), **m, "status": status, "why": why}
        )
    statuses: list[str] = [o["status"] for o in outputs if o["status"]]
    report["status"] = max(statuses, key=lambda status: SEVERITY[status]) if statuses else ""
    report["outputs"] = outputs
    return report


def show(report: dict[str, Any], run: dict[str, Any]) -> None:
    """The report beside the run's (verdict.json; with --fp32, the run's fp32 probe), one line an output."""
    side = "in fp32, rounded back (the fp32 probe)" if report["fp32"] else "in the recorded dtypes"
    print(f"{ENTRY}: {TESTED} on {report['device']} {side}; bench: {report['bench']}")
    print(f"standard: {report['standard']}")
    if "raised" in report:
        print(f"the tested run raised {report['raised']}")
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
        what = f"output.{o['index']} {o.get('tested_dtype', '')} {o.get('shape', '')}"
        print(f"{what}: {numbers}: {o['status']} ({o['why']})")
        theirs = ran.get(str(o["index"]))
        if theirs is not None:
            print(
                f"  {whose}: Cosine {theirs['cosine']!r}, MaxAbsErr {theirs['max_abs_err']!r}, "
                f"MaxRelativeErr {theirs['max_rel_err']!r}: {theirs['status']}"
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
        torch.set_num_threads(THREADS)  # the run's count: a float sum rounds differently with more
    call = decode(torch.load(HERE / "inputs.pt", weights_only=True))
    if options.device == "recorded" and "recorded" not in call:
        parser.error("the run re-ran this entry: no recorded outputs here")
    report = reproduce(call, options.device, options.fp32)
    verdict = HERE / "verdict.json"
    run = json.loads(verdict.read_text(encoding="utf-8")) if verdict.is_file() else {}
    if options.json:
        print(json.dumps({**report, "run": run.get("status")}))
    else:
        show(report, run)
    return 1 if report["status"] == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
