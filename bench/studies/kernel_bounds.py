"""What a correct kernel may get wrong at each element, measured against deficient kernels.

Every output of every entry of real msprobe dumps (the GPT dumps in fp32, bf16 and fp16 at seq 48 and
512, the CNN step in the same dtypes, and the two older shipped dumps), forward and backward (the recorded
gradients that match an input),
recomputed in float64 from the recorded inputs like the plugin's benchmark. For each output: the recorded
one (a correct CPU kernel), every control of tests/deficits.py (correct kernels that compute differently)
and every deficit (kernels that lose precision), each against a per-element budget

    budget_i = c_out * ulp_i + c_acc * u_acc * m_i + c_length * u_acc * sqrt(K) * |b_i| + c_spread * S_i + c_low * L_i

    ulp_i   the ULP of the tested dtype at the correctly rounded benchmark (subnormal spacing below
            the normal range): the final rounding and a 1-ULP math library
    m_i     max(|b_i|, M_i), M the probe "abs" (the API on |inputs|, grad_outputs included: |A||B|,
            sum |x|) for sums and products, the probe "formula" (the API's own formula with every
            difference made a sum of magnitudes) for softmax, layer_norm and gelu's gradient, else |b_i|
    K       how many terms one element sums, as the plugin's magnitudes.terms_of says (conv, linear,
            matmul, sum, mean, a norm's weight gradient; none elsewhere): where the terms share a sign
            a correct kernel's partial sums grow with the result, and what it rounds with them
    S_i     the probe "spread": max over 3 seeds of |b(inputs x (1 + u_acc r)) - b|, r = +-1 at random,
            for every API that is not a sum or product: conditioning
    L_i     the probe "low": |the API on the CPU in the tested dtype - b|, bf16/fp16 outputs only:
            what PyTorch's own kernel rounds in that dtype (saved activations, scalars, partial sums)

with u_acc = 2^-24 (fp32 accumulation). An output's ratio is max_i |t_i - b_i| / budget_i: pass <= 1,
warning <= 2, error beyond. The study also measures each probe alone (and "f32", the error of the API run
in float32 on the CPU, and "spread_out", the spread at the tested dtype's own unit), so that the choice
is seen against the alternatives: need(c) = max_i (e_i - c_out ulp_i)+ / T_i is the smallest constant in
front of a probe T that passes an output.

    python -m bench.studies.kernel_bounds

prints the tables of bench/studies/kernel_bounds.md (about 6 minutes on two cores; --cache FILE keeps the
measurements to print the tables again in seconds).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import pickle
import re
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from pytest_msprobe.frameworks import magnitudes as package_magnitudes
from pytest_msprobe.judging.compare import ExtraRuns
from pytest_msprobe.judging.standards import budget as package
from tests import deficits as d

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
DUMPS = {
    "gpt_fp32": DATA / "gpt_fp32",
    "gpt_bf16": DATA / "gpt_bf16",
    "gpt_fp16": DATA / "gpt_fp16",
    "gpt512_fp32": DATA / "gpt512_fp32",
    "gpt512_bf16": DATA / "gpt512_bf16",
    "gpt512_fp16": DATA / "gpt512_fp16",
    "pt_tensor_L1": ROOT / "examples" / "pt_tensor_L1",
    "pt_tensor_L1_bf16": DATA / "pt_tensor_L1_bf16",
    "cnn_fp32": DATA / "cnn_fp32",
    "cnn_bf16": DATA / "cnn_bf16",
    "cnn_fp16": DATA / "cnn_fp16",
}
U_ACC = 2.0**-24
SEEDS = 3
# Warning up to BAND x the budget, error beyond: the largest band that holds no material deficit
# of the study is 1.21 (a 12-bit rsqrt in a bf16 layer_norm); BAND keeps half that width, the 2x
# margin of c_low (table "The warning band"). A correct output needs none: they reach 0.67.
BAND = package.Constants.band
PROBES = ("abs", "formula", "spread", "spread_out", "f32", "low")
CASTS = {"to", "float", "half", "bfloat16", "double", "type", "type_as"}
SHORT = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float64": "fp64"}
FAMILY = {
    "linear": "matmul",
    "matmul": "matmul",
    "conv2d": "matmul",
    "__matmul__": "matmul",
    "bmm": "matmul",
    "softmax": "softmax",
    "layer_norm": "layer_norm",
    "batch_norm": "batch_norm",
    "max_pool2d": "pooling",
    "adaptive_avg_pool2d": "pooling",
    "mean": "reduction",
    "sum": "reduction",
    "cross_entropy": "reduction",
    "scaled_dot_product_attention": "attention",
}
# Sums and products: every input enters linearly, so the API on |inputs| is the magnitude of its terms.
SUMS_AND_PRODUCTS = {
    "linear",
    "matmul",
    "__matmul__",
    "mm",
    "bmm",
    "conv2d",
    "mean",
    "sum",
    "embedding",
    "add",
    "__add__",
    "add_",
    "mul",
    "__mul__",
    "cat",
    "masked_fill",
}
FORMULA = {"softmax", "layer_norm", "gelu", "batch_norm", "cross_entropy", "scaled_dot_product_attention"}
PLUGIN_FORMULAS = {"batch_norm", "cross_entropy", "scaled_dot_product_attention"}  # magnitudes() asks the plugin
# Pooling routes each grad_output element to inputs its input chooses: the magnitude of its gradient is
# the benchmark on |grad_output| with the inputs as they are, its forward's a sum of |x| (the "formula"
# probe here, frameworks/magnitudes.py: ROUTES); no spread, as for sums.
ROUTES = {"max_pool2d", "adaptive_avg_pool2d"}
NO_SPREAD = SUMS_AND_PRODUCTS | ROUTES


# The older study's fault injections (bench/dtype_standard_study.py), on the recorded outputs: errors all.
FAULTS = d.FAULTS


def is_deficit(name: str) -> bool:
    return name in FAULTS or (name != "recorded" and d.KINDS[name].deficit)


def family_name(api: str, direction: str) -> str:
    base = FAMILY.get(api, "elementwise")
    if api == "embedding" and direction == d.BACKWARD:
        base = "reduction"  # the gradient of a gather sums the rows of each token
    return base + (" grad" if direction == d.BACKWARD else "")


# -- running an entry on one side ----------------------------------------------


def api_fn(name: str) -> Callable:
    api_type, rest = name.split(".", 1)
    api = rest.rsplit(".", 2)[0]
    target: Any = {"Functional": F, "Torch": torch, "Tensor": torch.Tensor}[api_type]
    for part in api.split("."):
        target = getattr(target, part)
    return target


def tree(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [tree(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(tree(v, fn) for v in value)
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return fn(value)
    return value


def tensors(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        found.append(t)
        return t

    tree(value, keep)
    return found


@dataclass
class Side:
    """How one run places the floating inputs (grad_outputs too)."""

    name: str
    place: Callable[[torch.Tensor], torch.Tensor]
    float64: bool = True  # a benchmark-like run: casts return their input
    autocast: torch.dtype | None = None


def perturbed(u: float, seed: int) -> Callable[[torch.Tensor], torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)

    def place(t: torch.Tensor) -> torch.Tensor:
        signs = torch.randint(0, 2, t.shape, generator=generator).to(torch.float64) * 2 - 1
        return t.double() * (1 + u * signs)

    return place


def outputs(entry: d.Entry, side: Side) -> list[torch.Tensor | None]:
    """The entry's outputs (backward: recorded-layout gradients) on one side, float64 on the CPU."""
    fn = api_fn(entry.name)
    args = tree(entry.args, side.place)
    kwargs = {k: tree(v, side.place) for k, v in entry.kwargs.items()}
    inplace = entry.api.endswith("_") and not entry.api.endswith("__")
    if inplace:
        args = [args[0].clone(), *args[1:]]
    context = torch.autocast("cpu", dtype=side.autocast) if side.autocast else torch.autocast("cpu", enabled=False)
    if entry.direction == d.FORWARD:
        with torch.no_grad(), context:
            if entry.api in CASTS and side.float64:
                out: Any = args[0] * 1.0
            else:
                out = fn(*args, **kwargs)
        return [o.detach().double() if isinstance(o, torch.Tensor) else None for o in d.flat(list_of(out))]
    placed = tensors(args) + tensors(list(kwargs.values()))
    leaves = [t.detach().clone().requires_grad_(takes) for t, takes in zip(placed, takes_gradient(entry))]
    it = iter(leaves)
    args = tree(args, lambda t: next(it))
    kwargs = {k: tree(v, lambda t: next(it)) for k, v in kwargs.items()}
    if inplace:
        args = [args[0] * 1.0, *args[1:]]
    with context:
        out = args[0] * 1.0 if entry.api in CASTS and side.float64 else fn(*args, **kwargs)
    outs = [o for o in d.flat(list_of(out)) if isinstance(o, torch.Tensor) and o.requires_grad]
    grads_out = [side.place(g) for g in entry.grad_outputs if isinstance(g, torch.Tensor)]
    loss = torch.stack([(o * g.to(o.dtype)).sum().to(torch.float64) for o, g in zip(outs, grads_out)]).sum()
    grads = torch.autograd.grad(loss, [t for t in leaves if t.requires_grad], allow_unused=True)
    per_input: list[torch.Tensor | None] = [None if g is None else g.detach().double() for g in grads]
    family = d.family_of(entry.api)
    if family is not None:
        return d.recorded_layout(family, d.bind(family, tree(entry.args, lambda t: t), entry.kwargs), per_input)
    return by_shape(entry, per_input)


def takes_gradient(entry: d.Entry) -> list[bool]:
    """One flag per floating tensor of the call, as `outputs` places them: batch_norm's running
    statistics take no gradient (autograd refuses them; msprobe records input, weight, bias)."""
    names = d.PARAMS.get(entry.family or "", ())
    flags = []
    for i, arg in enumerate(entry.args):
        flags += [i >= len(names) or names[i] not in d.NO_GRAD] * len(tensors(arg))
    for key, value in entry.kwargs.items():
        flags += [key not in d.NO_GRAD] * len(tensors(value))
    return flags


def list_of(out: Any) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def by_shape(entry: d.Entry, grads: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """Recorded gradients matched to the inputs by position and shape, else by a shape no other has."""
    shapes = [None if g is None else list(g.shape) for g in grads]
    found: list[torch.Tensor | None] = []
    taken = set()
    for position, spec in enumerate(entry.output_specs):
        shape = spec.get("shape") if isinstance(spec, dict) else None
        index = position if position < len(shapes) and shapes[position] == shape and position not in taken else None
        if index is None:
            same = [i for i, s in enumerate(shapes) if s == shape and i not in taken]
            index = same[0] if len(same) == 1 else None
        found.append(None if index is None else grads[index])
        if index is not None:
            taken.add(index)
    return found


def returns_its_input(entry: d.Entry) -> bool:
    source = entry.args[0] if entry.args else None
    spec = next((s for s in d.flat(entry.forward_outputs) if isinstance(s, torch.Tensor)), None)
    return (
        entry.api in CASTS
        and isinstance(source, torch.Tensor)
        and spec is not None
        and spec.dtype == source.dtype
        and spec.shape == source.shape
    )


def magnitudes(entry: d.Entry) -> list[torch.Tensor | None]:
    """The same computation on the magnitudes of its terms, for APIs whose formula subtracts: every
    difference becomes a sum of absolute values (softmax: y (|g| + sum y|g|) for y (g - sum y g)). What
    a correct kernel's intermediate rounding scales with, where the API on |inputs| means nothing."""
    family = entry.family
    p = (
        d.bind(family, [d._f64(a) for a in entry.args], {k: d._f64(v) for k, v in entry.kwargs.items()})
        if family
        else {}
    )
    g = next((d._f64(t) for t in entry.grad_outputs if isinstance(t, torch.Tensor)), None)
    if entry.direction == d.BACKWARD and g is None:
        raise d.NotApplicable("no grad_output")
    if family == "softmax":
        dim = p["dim"] if p["dim"] is not None else -1
        y = torch.softmax(p["input"], dim)
        if entry.direction == d.FORWARD:
            return [y]
        assert g is not None
        ag = g.abs()
        return [y * (ag + (y * ag).sum(dim, keepdim=True))]
    if family == "layer_norm":
        rows, n = d._rows(p)
        mean = rows.mean(1, keepdim=True)
        rstd = 1 / torch.sqrt(((rows - mean) ** 2).mean(1, keepdim=True) + p["eps"])
        centred = (rows.abs() + mean.abs()) * rstd  # x - mean is rounded at the scale of |x| + |mean|
        w = p["weight"].reshape(1, n).abs() if p["weight"] is not None else torch.ones(1, n, dtype=torch.float64)
        bias = p["bias"].reshape(1, n).abs() if p["bias"] is not None else 0.0
        if entry.direction == d.FORWARD:
            return [(centred * w + bias).reshape(p["input"].shape)]
        assert g is not None
        ag = g.reshape(-1, n).abs()
        gw = ag * w
        dx = rstd * (gw + gw.mean(1, keepdim=True) + centred * (gw * centred).mean(1, keepdim=True))
        dw = (ag * centred).sum(0).reshape(p["weight"].shape) if p["weight"] is not None else None
        db = ag.sum(0).reshape(p["bias"].shape) if p["bias"] is not None else None
        return [dx.reshape(p["input"].shape), dw, db]
    if entry.api in PLUGIN_FORMULAS:  # the plugin's own formula, in the layout msprobe records
        grads = None if entry.direction == d.FORWARD else [g]
        try:
            found = package_magnitudes.formula(entry.api, entry.args, entry.kwargs, grads)
        except ValueError as exc:  # a variant the formula does not model: no magnitude, as in the plugin
            raise d.NotApplicable(str(exc)) from exc
        if grads is None:
            return found
        # batch_norm's running statistics take no gradient (msprobe records input, weight, bias);
        # attention's gradients are matched to the recorded ones by shape, as outputs() matches them.
        attention = entry.api == "scaled_dot_product_attention"
        return by_shape(entry, found) if attention else [v for v in found if v is not None]
    if entry.api in ROUTES:
        if entry.direction == d.FORWARD:
            return outputs(entry, Side("abs", lambda t: t.double().abs()))
        assert g is not None
        return outputs(replace(entry, grad_outputs=[g.abs()]), Side("bench", lambda t: t.double()))
    if family == "gelu":
        x = p["input"]
        if entry.direction == d.FORWARD:  # x/2 + x/2 erf(x/sqrt 2): the two halves cancel for x << 0
            return [0.5 * x.abs() * (1 + torch.erf(x / math.sqrt(2)).abs())]
        assert g is not None
        return [
            g.abs()
            * (
                0.5 * (1 + torch.erf(x / math.sqrt(2)).abs())
                + x.abs() * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
            )
        ]
    raise d.NotApplicable("no magnitude formula")


def _u(dtype: torch.dtype | None) -> float:
    return torch.finfo(dtype).eps / 2 if dtype is not None else U_ACC


def _as_np(values: list[torch.Tensor | None], position: int, scale: float) -> np.ndarray:
    value = values[position] if position < len(values) else None
    if value is None:
        return np.array(np.nan)
    out = np.abs(value.numpy()) * scale
    return np.where(np.isfinite(out), out, np.nan)


def _err(values: list[torch.Tensor | None], position: int, bench: np.ndarray) -> np.ndarray:
    value = values[position] if position < len(values) else None
    if value is None or list(value.shape) != list(bench.shape):
        return np.full(bench.shape, np.nan)
    out = np.abs(value.numpy() - bench)
    return np.where(np.isfinite(out), out, np.where(value.numpy() == bench, 0.0, np.nan))


# -- cases ---------------------------------------------------------------------


@dataclass
class Case:
    """One output of one entry with its benchmark and probes."""

    dump: str
    entry: str
    api: str
    position: int
    family: str
    dtype: str  # fp32, bf16, fp16
    k: int | None
    terms: int | None  # K as the plugin's magnitudes.terms_of gives it (the length term)
    bench: np.ndarray
    unit: np.ndarray  # the ULP of each element: the spacing of the dtype at the rounded benchmark
    probes: dict[str, np.ndarray]  # T_i per probe, u_acc already in for abs and formula
    variants: dict[str, np.ndarray] = field(default_factory=dict)  # name -> error |t - b| per element
    deficit: dict[str, bool] = field(default_factory=dict)  # recorded and controls: False
    separation: dict[str, float] = field(default_factory=dict)  # deficits: see deficits.separation

    def material(self, variant: str) -> bool:
        return self.deficit[variant] and self.separation[variant] > d.SEPARABLE


@dataclass
class Timing:
    bench: float = 0.0
    probes: dict[str, float] = field(default_factory=dict)
    strict_fail: int = 0  # recorded outputs over the budget without probes (c_out ulp + c_acc u_acc |b|)
    outputs: int = 0

    def add(self, probe: str, seconds: float) -> None:
        self.probes[probe] = self.probes.get(probe, 0.0) + seconds


def reduction_length(entry: d.Entry, position: int) -> int | None:
    """K of a matmul-like output, for the length table."""
    a = entry.args
    if entry.api == "linear":
        x = a[0]
        if entry.direction == d.FORWARD:
            return x.shape[-1]
        rows = x.reshape(-1, x.shape[-1]).shape[0]
        has_bias = len(a) > 2 and a[2] is not None
        layout = ["bias", "input", "weight"] if has_bias else ["input", "weight"]
        return {"bias": rows, "input": a[1].shape[0], "weight": rows}[layout[position]]
    if entry.api in ("matmul", "__matmul__", "bmm") and entry.direction == d.FORWARD:
        return a[0].shape[-1]
    if entry.api == "matmul" and entry.direction == d.BACKWARD:
        return a[1].shape[-1] if position == 0 else a[0].shape[0]
    if entry.api == "conv2d" and entry.direction == d.FORWARD:
        return int(np.prod(a[1].shape[1:]))
    return None


def terms_at(entry: d.Entry, position: int, numel: int) -> int | None:
    """K of the output at `position` as the plugin asks it (magnitudes.terms_of): a gradient by the
    index of its input among the floating ones, found through the recorded layout."""
    inputs = tensors(entry.args) + tensors(list(entry.kwargs.values()))
    floating = [t for t in inputs if t.is_floating_point()]
    grads = None
    index: int | None = position
    if entry.direction == d.BACKWARD:
        grads = [g for g in entry.grad_outputs if isinstance(g, torch.Tensor)]
        stand_ins = [torch.empty(t.shape, dtype=torch.float64) for t in inputs]  # gradients as outputs() lays them out
        family = d.family_of(entry.api)
        try:
            layout = (
                d.recorded_layout(family, d.bind(family, entry.args, entry.kwargs), stand_ins)
                if family is not None
                else by_shape(entry, list(stand_ins))
            )
        except d.NotApplicable:
            return None
        value = layout[position] if position < len(layout) else None
        whose = (value, value._base) if value is not None else ()
        mine = next((i for i, g in enumerate(stand_ins) if any(g is v for v in whose)), None)
        index = None if mine is None else sum(1 for t in inputs[:mine] if t.is_floating_point())
    if index is None:
        return None
    return package_magnitudes.terms_of(entry.name, floating, grads, index, numel)


def collect(name: str, root: Path, timing: Timing, log: Callable[[str], None]) -> list[Case]:
    data = json.loads((root / "dump.json").read_text())["data"]
    cases: list[Case] = []
    for entry_name in data:
        prefix, direction = entry_name.rsplit(".", 1)
        if direction not in (d.FORWARD, d.BACKWARD) or f"{prefix}.forward" not in data:
            continue
        entry = d.load_entry(root, entry_name, data)
        if entry.dtype is None or (direction == d.BACKWARD and returns_its_input(entry)):
            continue
        started = time.perf_counter()
        try:
            found = entry_cases(name, entry, timing)
        except d.NotApplicable as why:
            log(f"  skip {entry_name}: {why}")
            continue
        cases += found
        log(
            f"  {entry_name}: {len(found)} outputs, {sum(len(c.variants) for c in found)} variants, "
            f"{time.perf_counter() - started:.1f}s"
        )
    return cases


def timed(timing: Timing, seconds: dict[str, float], probe: str, fn: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    try:
        return fn()
    finally:
        seconds[probe] = time.perf_counter() - started
        timing.add(probe, seconds[probe])


def entry_cases(dump: str, entry: d.Entry, timing: Timing) -> list[Case]:
    autocast = (
        entry.dtype if entry.dtype in d.LOW and any(t.dtype == torch.float32 for t in tensors(entry.args)) else None
    )
    started = time.perf_counter()
    bench = outputs(entry, Side("bench", lambda t: t.double()))
    timing.bench += time.perf_counter() - started
    nothing: list[torch.Tensor | None] = [None] * len(bench)

    def run(side: Side) -> list[torch.Tensor | None]:
        try:
            return outputs(entry, side)
        except Exception:  # noqa: BLE001 - a probe that cannot run is no bound
            return nothing

    def formula() -> list[torch.Tensor | None]:
        try:
            return magnitudes(entry)
        except d.NotApplicable:
            return nothing

    seconds: dict[str, float] = {}
    runs = {
        "abs": timed(timing, seconds, "abs", lambda: run(Side("abs", lambda t: t.double().abs()))),
        "formula": timed(timing, seconds, "formula", formula),
        "f32": timed(timing, seconds, "f32", lambda: run(Side("f32", lambda t: t.float(), float64=False))),
        "low": timed(
            timing,
            seconds,
            "low",
            lambda: run(Side("low", lambda t: t.detach().clone(), float64=False, autocast=autocast)),
        ),
    }
    spreads: dict[str, list[list[torch.Tensor | None]]] = {}
    for name, u in (("spread", U_ACC), ("spread_out", _u(entry.dtype))):
        spreads[name] = timed(
            timing,
            seconds,
            name,
            lambda: [
                outputs(entry, Side(name, perturbed(u, seed)))  # noqa: B023
                for seed in range(SEEDS)
            ],
        )

    variants: dict[str, list[torch.Tensor | None]] = {"recorded": list(entry.recorded)}
    for kind in d.applicable(entry):
        try:
            values = d.compute(kind, entry)
        except d.NotApplicable:
            continue
        keep = set(d.changed(kind, entry, values))  # a deficit's untouched outputs are its correct kernel's
        variants[kind] = [v if i in keep else None for i, v in enumerate(values)]
    for name, fault in FAULTS.items():
        faulty = [fault(r) if isinstance(r, torch.Tensor) and r.is_floating_point() else None for r in entry.recorded]
        variants[name] = [
            f if f is not None and not torch.equal(f, r) else None for f, r in zip(faulty, entry.recorded)
        ]
    cases = []
    for position, b in enumerate(bench):
        recorded = entry.recorded[position] if position < len(entry.recorded) else None
        if b is None or not isinstance(recorded, torch.Tensor) or not recorded.is_floating_point():
            continue
        dtype = SHORT.get(str(recorded.dtype))
        if list(b.shape) != list(recorded.shape) or dtype not in ("fp32", "bf16", "fp16"):
            continue
        bn = b.numpy()
        probes = {
            "abs": _as_np(runs["abs"], position, U_ACC),
            "formula": _as_np(runs["formula"], position, U_ACC),
            "f32": _err(runs["f32"], position, bn),
            "low": _err(runs["low"], position, bn),
        }
        for probe, seeds in spreads.items():
            probes[probe] = np.max([_err(r, position, bn) for r in seeds], axis=0)
        probes["spread1"] = _err(spreads["spread"][0], position, bn)  # one seed, for the sensitivity table
        case = Case(
            dump,
            entry.name,
            entry.api,
            position,
            family_name(entry.api, entry.direction),
            dtype,
            reduction_length(entry, position),
            terms_at(entry, position, b.numel()),
            bn,
            d.ulp(d.rnd(b, recorded.dtype), recorded.dtype).numpy(),
            probes,
        )
        correct = [vs[position] for n, vs in variants.items() if not is_deficit(n)]
        for name, values in variants.items():
            value = values[position] if position < len(values) else None
            if value is None:
                continue
            t = value.double().numpy()
            error = np.abs(t - bn)
            case.variants[name] = np.where(~np.isfinite(error) & (t == bn), 0.0, error)
            case.deficit[name] = is_deficit(name)
            if case.deficit[name]:
                case.separation[name] = d.separation(value, b, correct)
        timing.outputs += 1
        if "recorded" in case.variants and ratio(case, "recorded", STRICT).max(initial=0.0) > 1:
            timing.strict_fail += 1
        cases.append(case)
    return cases


# -- the rule ------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    c_out: float = package.Constants.c_out  # ULP of each element: 0.5 final rounding, 1 a 1-ULP math library
    c_acc: float = package.Constants.c_acc  # u_acc x the magnitude of the terms
    c_spread: float = package.Constants.c_spread  # the benchmark's spread at u_acc
    c_low: float = package.Constants.c_low  # PyTorch's CPU kernel in the tested dtype (bf16/fp16 only)
    c_length: float = package.Constants.c_length  # u_acc sqrt(K) |b|: partial sums that grow with the result
    spread: str = "spread"  # the probe: 3 seeds ("spread") or one ("spread1")
    low_forward: bool = True  # the low probe for forward outputs too (else gradients only)

    def describe(self) -> str:
        terms = f"{self.c_out:g} ulp + {self.c_acc:g} u_acc m + {self.c_length:g} u_acc sqrt(K) |b|"
        return (
            terms
            + f" + {self.c_spread:g} S"
            + (f" + {self.c_low:g} L (bf16/fp16{'' if self.low_forward else ' gradients'})" if self.c_low else "")
        )


RULE = Rule()


def with_constant(rule: Rule, name: str, value: float) -> Rule:
    values = dict(vars(rule))
    values[name] = value
    return Rule(**values)


STRICT = replace(RULE, c_spread=0.0, c_low=0.0)  # the check before any probe: m = |b|, no spread (K needs none)


def probe(case: Case, name: str) -> np.ndarray:
    value = np.broadcast_to(case.probes[name], case.bench.shape)
    return np.where(np.isfinite(value), value, 0.0)


def magnitude(case: Case, rule: Rule) -> np.ndarray:
    """m_i: |b_i|, raised to the magnitude of the terms where a probe knows it."""
    m = np.abs(case.bench)
    if rule is STRICT:
        return m
    if case.api in SUMS_AND_PRODUCTS:
        return np.maximum(m, probe(case, "abs") / U_ACC)
    if case.api in FORMULA or case.api in ROUTES:
        return np.maximum(m, probe(case, "formula") / U_ACC)
    return m


def budget(case: Case, rule: Rule) -> np.ndarray:
    total = rule.c_out * case.unit + rule.c_acc * U_ACC * magnitude(case, rule)
    if rule.c_length and case.terms:
        total = total + rule.c_length * U_ACC * math.sqrt(case.terms) * np.abs(case.bench)
    if rule.c_spread and case.api not in NO_SPREAD:
        total = total + rule.c_spread * probe(case, rule.spread)
    if rule.c_low and case.dtype != "fp32" and (rule.low_forward or case.family.endswith("grad")):
        total = total + rule.c_low * probe(case, "low")
    return total


def ratio(case: Case, variant: str, rule: Rule) -> np.ndarray:
    error = case.variants[variant]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(error > 0, error / budget(case, rule), 0.0)
    return np.where(np.isnan(r), np.inf, r)


def verdict(case: Case, variant: str, rule: Rule) -> tuple[str, float, float]:
    """(pass / warning / error, max ratio, share of elements above 1) of one output under a rule."""
    r = ratio(case, variant, rule)
    worst = float(r.max()) if r.size else 0.0
    share = float(np.mean(r > 1)) if r.size else 0.0
    return ("pass" if worst <= 1 else "warning" if worst <= BAND else "error"), worst, share


def need(error: np.ndarray, unit: np.ndarray, c_out: float, t: np.ndarray | None) -> float:
    """The smallest constant c with e_i <= c_out ulp_i + c T_i at every element (inf where T_i is 0)."""
    excess = np.maximum(error - c_out * unit, 0.0)
    excess = np.where(np.isfinite(excess), excess, np.inf)
    if not np.any(excess > 0):
        return 0.0
    if t is None:
        return math.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(excess > 0, excess / np.where(t > 0, t, 0.0), 0.0)
    return float(np.where(np.isnan(r), np.inf, r).max())


def single_probe(case: Case, name: str) -> np.ndarray | None:
    if name == "none":
        return None
    t = probe(case, name)
    return np.maximum(t, U_ACC * np.abs(case.bench)) if name in ("abs", "formula") else t


# -- tables --------------------------------------------------------------------


def head(*columns: str) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def fmt(x: float) -> str:
    if x == 0:
        return "0"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}"


def groups(cases: Iterable[Case]) -> dict[tuple[str, str], list[Case]]:
    found: dict[tuple[str, str], list[Case]] = defaultdict(list)
    for case in cases:
        found[(case.family, case.dtype)].append(case)
    return dict(sorted(found.items()))


def correct_variants(case: Case) -> list[str]:
    return [v for v in case.variants if not case.deficit[v]]


def material_deficits(case: Case) -> list[str]:
    return [v for v in case.variants if case.material(v)]


def short(case: Case, variant: str) -> str:
    return f"{variant} ({case.api}.{case.entry.split('.')[-2]} {case.entry[-8:].strip('.')}[{case.position}])"


def probes_table(cases: list[Case], c_out: float) -> list[str]:
    """Each probe alone: the constant the correct outputs need at c_out (and which needs most), the
    constant below which every material deficit is an error, need(BAND c_out) / BAND (and the hardest);
    sep = the second over the first, > 1 where one constant does both."""
    names = ("none", "abs", "formula", "spread", "spread_out", "f32", "low")
    rows = head("family", "dtype", "outputs", *[f"{n}: correct / deficit / sep" for n in names])
    for (family, dtype), group in groups(cases).items():
        cells = []
        for name in names:
            correct = max(
                (
                    (need(c.variants[v], c.unit, c_out, single_probe(c, name)), short(c, v))
                    for c in group
                    for v in correct_variants(c)
                ),
                default=(0.0, ""),
            )
            deficit = min(
                (
                    (need(c.variants[v], c.unit, BAND * c_out, single_probe(c, name)) / BAND, short(c, v))
                    for c in group
                    for v in material_deficits(c)
                ),
                default=(math.inf, ""),
            )
            sep = deficit[0] / correct[0] if correct[0] > 0 else (math.inf if deficit[0] > 0 else 0.0)
            cells.append(f"{fmt(correct[0])} / {fmt(deficit[0])} / **{fmt(sep)}**")
        rows.append(f"| {family} | {dtype} | {len(group)} | " + " | ".join(cells) + " |")
    return rows


def final_table(cases: list[Case], rule: Rule) -> list[str]:
    """Per family and dtype: the correct outputs' worst ratio and how many do not pass; the material
    deficits' least ratio and how many are no error; immaterial deficits that are errors anyway."""
    rows = head(
        "family",
        "dtype",
        "correct outputs",
        "worst ratio",
        "not pass",
        "material deficits",
        "least ratio (kind)",
        "not error",
        "immaterial: errors",
    )
    for (family, dtype), group in groups(cases).items():
        correct = [verdict(c, v, rule) for c in group for v in correct_variants(c)]
        deficits = [(verdict(c, v, rule), v) for c in group for v in material_deficits(c)]
        immaterial = [verdict(c, v, rule) for c in group for v in c.variants if c.deficit[v] and not c.material(v)]
        least = min(deficits, key=lambda x: x[0][1], default=None)
        rows.append(
            f"| {family} | {dtype} | {len(correct)} | {fmt(max((w for _, w, _ in correct), default=0))} "
            f"| {sum(s != 'pass' for s, _, _ in correct)} | {len(deficits)} "
            f"| {fmt(least[0][1]) + ' (' + least[1] + ')' if least else '-'} "
            f"| {sum(s != 'error' for (s, _, _), _ in deficits)} "
            f"| {sum(s == 'error' for s, _, _ in immaterial)} of {len(immaterial)} |"
        )
    return rows


def kinds_table(cases: list[Case], rule: Rule) -> list[str]:
    rows = head(
        "variant",
        "outputs",
        "pass / warning / error",
        "max ratio",
        "min ratio",
        "median share > 1",
        "separation: min .. max",
    )
    found: dict[str, list[tuple[tuple[str, float, float], float]]] = defaultdict(list)
    for case in cases:
        for variant in case.variants:
            name = variant if not case.deficit[variant] or case.material(variant) else variant + " (immaterial)"
            found[name].append((verdict(case, variant, rule), case.separation.get(variant, 0.0)))
    order = ["recorded"] + [k.name for k in d.CONTROLS] + [k.name for k in d.DEFICITS] + list(FAULTS)
    for name in sorted(found, key=lambda n: (order.index(n.replace(" (immaterial)", "")), n)):
        results = found[name]
        statuses = [s for (s, _, _), _ in results]
        worst = [w for (_, w, _), _ in results]
        shares = sorted(sh for (_, _, sh), _ in results)
        seps = [sep for _, sep in results]
        counts = f"{statuses.count('pass')} / {statuses.count('warning')} / {statuses.count('error')}"
        sep = f"{fmt(min(seps))} .. {fmt(max(seps))}" if is_deficit(name.replace(" (immaterial)", "")) else ""
        rows.append(
            f"| {name} | {len(results)} | {counts} | {fmt(max(worst))} | {fmt(min(worst))} "
            f"| {shares[len(shares) // 2]:.3g} | {sep} |"
        )
    return rows


def exceptions(cases: list[Case], rule: Rule) -> list[str]:
    """Correct outputs that do not pass, material deficits that are no error."""
    rows = head("dump", "entry", "output", "variant", "verdict", "max ratio", "share > 1", "separation")
    for case in cases:
        for variant in case.variants:
            status, worst, share = verdict(case, variant, rule)
            if (not case.deficit[variant] and status != "pass") or (case.material(variant) and status != "error"):
                sep = fmt(case.separation[variant]) if case.deficit[variant] else ""
                rows.append(
                    f"| {case.dump} | {case.entry} | {case.position} | {variant} | {status} | {fmt(worst)} "
                    f"| {share:.3g} | {sep} |"
                )
    return rows


def sensitivity(cases: list[Case], rule: Rule) -> list[str]:
    """Outcomes as each constant is halved, doubled or dropped."""
    rows = head(
        "rule",
        "correct outputs not passing",
        "material deficits not errors",
        "of which separation > 8",
        "not passing: which",
    )
    variants = [("recommended", rule)]
    for name in ("c_out", "c_acc", "c_length", "c_spread", "c_low"):
        value = getattr(rule, name)
        variants += [
            (f"{name} x 0.5", with_constant(rule, name, value / 2)),
            (f"{name} x 2", with_constant(rule, name, value * 2)),
        ]
    variants += [
        ("no spread", replace(rule, c_spread=0.0)),
        ("spread from one seed", replace(rule, spread="spread1")),
        ("no low", replace(rule, c_low=0.0)),
        ("low for gradients only", replace(rule, low_forward=False)),
    ]
    for label, r in variants:
        fails = [(c, v) for c in cases for v in correct_variants(c) if verdict(c, v, r)[0] != "pass"]
        missed = [(c, v) for c in cases for v in material_deficits(c) if verdict(c, v, r)[0] != "error"]
        clear = sum(c.separation[v] > 8 for c, v in missed)
        which = sorted({f"{c.dtype} {c.api}{' grad' if c.family.endswith('grad') else ''}" for c, _ in fails})
        rows.append(f"| {label}: {r.describe()} | {len(fails)} | {len(missed)} | {clear} | {', '.join(which)} |")
    return rows


def knees(cases: list[Case], rule: Rule) -> list[str]:
    """For each constant, the smallest value (the others fixed) at which every correct output passes."""
    rows = head(
        "constant",
        "recommended",
        "smallest passing every correct output",
        "margin",
        "material deficits not errors there",
    )

    def fails(r: Rule) -> bool:
        return any(verdict(c, v, r)[0] != "pass" for c in cases for v in correct_variants(c))

    for name in ("c_out", "c_acc", "c_length", "c_spread", "c_low"):
        low, high = 0.0, 4 * getattr(rule, name)
        if fails(with_constant(rule, name, low)):
            for _ in range(24):
                middle = (low + high) / 2
                low, high = (low, middle) if not fails(with_constant(rule, name, middle)) else (middle, high)
        else:
            high = 0.0
        missed = sum(
            verdict(c, v, with_constant(rule, name, high))[0] != "error" for c in cases for v in material_deficits(c)
        )
        margin = getattr(rule, name) / high if high else math.inf
        rows.append(f"| {name} | {getattr(rule, name):g} | {high:.3g} | {fmt(margin)} | {missed} |")
    return rows


def band_table(cases: list[Case], rule: Rule) -> list[str]:
    """The warning band: the correct outputs' worst ratio (what a band could be for), the smallest
    ratio of a material deficit over its budget (a band at least that wide holds one), and what
    the recommended band holds."""
    correct = max((verdict(c, v, rule)[1] for c in cases for v in correct_variants(c)), default=0.0)
    over = [(verdict(c, v, rule)[1], c, v) for c in cases for v in material_deficits(c)]
    worst, case, variant = min((o for o in over if o[0] > 1), key=lambda o: o[0], default=(math.inf, None, ""))
    held = sum(1 < ratio <= BAND for ratio, _, _ in over)
    rows = head(
        "band",
        "correct outputs' worst ratio",
        "smallest material deficit over its budget",
        "margin: (knee - 1) / (band - 1)",
        "material deficits in the band",
    )
    at = f" ({short(case, variant)}, {case.dump})" if case is not None else ""
    margin = (worst - 1) / (BAND - 1) if BAND > 1 else math.inf
    rows.append(f"| {BAND:g} | {fmt(correct)} | {fmt(worst)}{at} | {fmt(margin)} | {held} |")
    return rows


def length_table(cases: list[Case], rule: Rule) -> list[str]:
    """The abs probe's need against K, matmul-like outputs of the dumps."""
    rows = head("dtype", "K", "outputs", "correct: need", "TF32/HF32 or low accumulation: need / band")
    found: dict[tuple[str, int], list[Case]] = defaultdict(list)
    for case in cases:
        if case.k:
            found[(case.dtype, case.k)].append(case)
    for (dtype, k), group in sorted(found.items()):
        correct = max(
            need(c.variants[v], c.unit, rule.c_out, single_probe(c, "abs")) for c in group for v in correct_variants(c)
        )
        low = [
            need(c.variants[v], c.unit, BAND * rule.c_out, single_probe(c, "abs")) / BAND
            for c in group
            for v in material_deficits(c)
            if v in ("tf32", "hf32", "accumulate_low", "accumulate_low_blocked")
        ]
        rows.append(f"| {dtype} | {k} | {len(group)} | {fmt(correct)} | {fmt(min(low)) if low else '-'} |")
    return rows


LENGTHS = (1024, 4096, 16384, 65536, 262144, 1048576)
TERM_MEANS = (0.0, 0.3, 1.0, None)  # the operands' mean over their std; None: |N(0, 1)|, every term positive


def synthetic_lengths(rule: Rule) -> list[str]:
    """fp32 sums of K products (a linear's 8x8 outputs) in four orders, and TF32 operands, against the
    rule: the c_length each correct kernel needs (at the rule's other constants) and TF32's ratio."""
    rows = head(
        "operands' mean / std",
        "K",
        "largest b / m",
        "need c_length: sequential",
        "pairwise",
        "blocked",
        "torch (BLAS)",
        f"TF32: ratio at c_length {rule.c_length:g}",
    )
    for mean in TERM_MEANS:
        for k in LENGTHS:
            g = torch.Generator().manual_seed(k)
            x, w = torch.randn(8, k, generator=g), torch.randn(8, k, generator=g)
            x, w = (x.abs(), w.abs()) if mean is None else (x + mean, w + mean)
            entry = d.call_entry("Functional.linear", [x, w])
            exact = first(d.run(d.EXACT, entry)).numpy()
            unit = d.ulp(d.rnd(torch.from_numpy(exact), torch.float32), torch.float32).numpy()
            m = (x.double().abs() @ w.double().abs().T).numpy()
            fixed = rule.c_out * unit + rule.c_acc * U_ACC * m  # the budget without the length term
            length = U_ACC * math.sqrt(k) * np.abs(exact)
            needs = []
            for kind in ("sequential", "pairwise", "blocked", "torch"):
                computed = x @ w.T if kind == "torch" else first(d.compute(kind, entry))
                needs.append(need(np.abs(computed.double().numpy() - exact), fixed, 1.0, length))
            tf32 = np.abs(first(d.compute("tf32", entry)).double().numpy() - exact)
            ratio_tf32 = float(np.max(tf32 / (fixed + rule.c_length * length)))
            data = "same sign" if mean is None else f"{mean:g}"
            rows.append(
                f"| {data} | {k} | {fmt(float(np.max(np.abs(exact) / m)))} | "
                + " | ".join(fmt(n) for n in needs)
                + f" | {'**' if ratio_tf32 > BAND else ''}{fmt(ratio_tf32)}{'**' if ratio_tf32 > BAND else ''} |"
            )
    return rows


def one_pass_large_mean() -> list[str]:
    """One-pass variance where it matters: rows whose mean is far from zero."""
    rows = head(
        "dtype",
        "row mean / std",
        "two-pass (sequential): ratio under the rule",
        "one-pass: ratio under the rule",
        "separation",
    )
    for dtype in (torch.float32, torch.bfloat16):
        for mean in (0.0, 10.0, 100.0):
            g = torch.Generator().manual_seed(int(mean))
            x = (torch.randn(32, 256, generator=g, dtype=torch.float64) + mean).to(dtype)
            entry = d.call_entry("Functional.layer_norm", [x, [256]])
            exact = first(d.run(d.EXACT, entry))
            correct = [first(d.compute(k, entry)) for k in ("sequential", "reverse", "pairwise", "blocked", "welford")]
            deficit = first(d.compute("one_pass_variance", entry))
            case = _synthetic_case(entry, exact, {"sequential": correct[0], "one_pass_variance": deficit})
            sep = d.separation(deficit, exact, list(correct))
            rows.append(
                f"| {SHORT[str(dtype)]} | {mean:g} | {fmt(verdict(case, 'sequential', RULE)[1])} "
                f"| {fmt(verdict(case, 'one_pass_variance', RULE)[1])} | {fmt(sep)} |"
            )
    return rows


def first(values: list[torch.Tensor | None]) -> torch.Tensor:
    value = values[0]
    assert value is not None
    return value


def _synthetic_case(entry: d.Entry, exact: torch.Tensor, values: dict[str, torch.Tensor]) -> Case:
    assert entry.dtype is not None
    bn = exact.numpy()
    spread = np.max([_err(outputs(entry, Side("spread", perturbed(U_ACC, s))), 0, bn) for s in range(SEEDS)], axis=0)
    probes = {
        "formula": _as_np(magnitudes(entry), 0, U_ACC),
        "spread": spread,
        "abs": np.array(np.nan),
        "low": _err(outputs(entry, Side("low", lambda t: t.clone(), float64=False)), 0, bn),
    }
    case = Case(
        "synthetic",
        entry.name,
        entry.api,
        0,
        "layer_norm",
        SHORT[str(entry.dtype)],
        None,
        None,  # a layer_norm's x-gradient and output: no K
        bn,
        d.ulp(d.rnd(exact, entry.dtype), entry.dtype).numpy(),
        probes,
    )
    for name, value in values.items():
        case.variants[name] = np.abs(value.double().numpy() - bn)
        case.deficit[name] = d.KINDS[name].deficit
    return case


def time_probes(names: Iterable[str], cases: list[Case], repeats: int = 3) -> list[str]:
    """Single-thread seconds of the benchmark and of each probe, best of `repeats`, per dump; and what the
    rule asks: its probes (abs for sums and products, formula and spread otherwise, low for bf16/fp16),
    only for the entries with an output over the budget without probes."""
    over = {
        (c.dump, c.entry)
        for c in cases
        if "recorded" in c.variants and ratio(c, "recorded", STRICT).max(initial=0.0) > 1
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = head(
        "dump",
        "entries",
        "with an output over the budget without probes",
        "bench s",
        "abs",
        "formula",
        "spread (3 seeds)",
        "spread (1 seed)",
        "low",
        "the rule's probes / bench",
        "the same, low for gradients only",
    )
    try:
        for name in names:
            data = json.loads((DUMPS[name] / "dump.json").read_text())["data"]
            total: dict[str, float] = defaultdict(float)
            entries = asked = 0
            for entry_name in data:
                prefix, direction = entry_name.rsplit(".", 1)
                if direction not in (d.FORWARD, d.BACKWARD) or f"{prefix}.forward" not in data:
                    continue
                entry = d.load_entry(DUMPS[name], entry_name, data)
                if entry.dtype is None or (direction == d.BACKWARD and returns_its_input(entry)):
                    continue
                try:
                    seconds = _probe_seconds(entry, repeats)
                except d.NotApplicable:
                    continue
                entries += 1
                for key, value in seconds.items():
                    total[key] += value
                if (name, entry_name) in over:
                    asked += 1
                    base = ["abs"] if entry.api in SUMS_AND_PRODUCTS else ["formula"]
                    base += ["low"] if entry.dtype in d.LOW else []
                    spread = [] if entry.api in NO_SPREAD else ["spread"]
                    total["rule"] += sum(seconds[k] for k in base + spread)
                    cheaper = [k for k in base + spread if k != "low" or direction == d.BACKWARD]
                    total["rule1"] += sum(seconds[k] for k in cheaper)
            bench = total["bench"]
            rows.append(
                f"| {name} | {entries} | {asked} | {bench:.3f} | "
                + " | ".join(fmt(total[k] / bench) for k in ("abs", "formula", "spread"))
                + f" | {fmt(total['spread'] / SEEDS / bench)} | {fmt(total['low'] / bench)} "
                f"| {fmt(total['rule'] / bench)} | {fmt(total['rule1'] / bench)} |"
            )
    finally:
        torch.set_num_threads(threads)
    return rows


def _probe_seconds(entry: d.Entry, repeats: int) -> dict[str, float]:
    autocast = (
        entry.dtype if entry.dtype in d.LOW and any(t.dtype == torch.float32 for t in tensors(entry.args)) else None
    )
    jobs: dict[str, Callable[[], Any]] = {
        "bench": lambda: outputs(entry, Side("bench", lambda t: t.double())),
        "abs": lambda: outputs(entry, Side("abs", lambda t: t.double().abs())),
        "formula": lambda: _or_none(magnitudes, entry),
        "spread": lambda: [outputs(entry, Side("spread", perturbed(U_ACC, seed))) for seed in range(SEEDS)],
        "low": lambda: outputs(entry, Side("low", lambda t: t.detach().clone(), float64=False, autocast=autocast)),
    }
    seconds = {}
    for key, job in jobs.items():
        best = math.inf
        for _ in range(repeats):
            started = time.perf_counter()
            job()
            best = min(best, time.perf_counter() - started)
        seconds[key] = best
    return seconds


def _or_none(fn: Callable[[d.Entry], Any], entry: d.Entry) -> Any:
    try:
        return fn(entry)
    except d.NotApplicable:
        return None


def package_check(cases: list[Case], rule: Rule) -> list[str]:
    """The plugin's own budget (pytest_msprobe/judging/standards/budget.py: read) on every output and variant,
    its extra runs answered by this study's probes, against this study's verdict."""
    agree = disagree = 0
    worst_gap = 0.0
    constants = package.Constants(rule.c_out, rule.c_acc, rule.c_spread, rule.c_low, rule.c_length, BAND)
    for case in cases:
        m = magnitude(case, rule)
        spread = probe(case, rule.spread) if case.api not in NO_SPREAD else None
        low = probe(case, "low") if case.dtype != "fp32" else None
        extra = ExtraRuns(
            magnitude=lambda m=m: m,
            spread=lambda _u, s=spread: s,
            low=lambda low=low: low,
            terms=lambda k=case.terms: k,
        )
        fmt = package.format_of(case.dtype)
        assert fmt is not None
        for variant, error in case.variants.items():
            tested = case.bench + error  # the error is all the judgement sees
            mine, ratio_here, _ = verdict(case, variant, rule)
            if not np.array_equal(np.isfinite(tested), np.isfinite(case.bench)):
                theirs, ratio_there = "error", math.inf  # judged before the budget (compare.nonfinite_mismatch)
            else:
                reading = package.read(tested, case.bench, fmt, extra, constants)
                theirs, ratio_there = reading.status(BAND), reading.ratio
            if mine == theirs:
                agree += 1
            else:
                disagree += 1
            # read stops asking once an output is within budget: its ratio is all the terms' only beyond 1
            if math.isfinite(ratio_here) and math.isfinite(ratio_there) and ratio_there > 1:
                worst_gap = max(worst_gap, abs(ratio_there / ratio_here - 1))
    return [
        f"{agree} verdicts agree, {disagree} differ; largest relative difference of the ratios over 1 {worst_gap:.2g}"
    ]


# -- LLaMA-style kernels: the structural term R (c_round) and unary math at large arguments ---------

# The ratio in a details row's Message: "worst element at 0.32 of its budget", "every element within 0.5 of
# its budget", "5.46x its budget"
_RATIO = re.compile(r"(?:at|within) ([0-9.e+-]+) of its budget|([0-9.e+-]+)x its budget")
LLAMA_DRAWS = (d.Draw(0, 256), d.Draw(1, 1024))
C_ROUNDS = (0.0, 1.0, 2.0)


def plugin_ratios(dump: Path, out: Path, c_round: float) -> dict[str, tuple[str, float]]:
    """(status, ratio) of every details row of the plugin run in recorded mode under the dtype standard
    with c_round, in this process (the standard's constants patched for the run)."""
    import pytest

    from pytest_msprobe.judging.standards import dtype as standard

    before = standard.CONSTANTS
    standard.CONSTANTS = replace(before, c_round=c_round)
    try:
        options = ["--msprobe-device", "recorded", "--msprobe-standard", "dtype", "--msprobe-out", str(out)]
        pytest.main(["-q", "-p", "no:cacheprovider", "--msprobe-dump", str(dump), *options])
    finally:
        standard.CONSTANTS = before
    (details,) = sorted(out.glob("accuracy_checking_details_*.csv"))
    found = {}
    with open(details, newline="", encoding="utf-8-sig") as handle:
        for row in csv.DictReader(handle):
            match = _RATIO.search(row["Message"])
            ratio = float(match.group(1) or match.group(2)) if match else math.nan
            found[row["API Name"]] = (row["Status"], ratio)
    return found


def llama_table(folder: Path) -> list[str]:
    """Each case of deficits.LLAMA_CASES at each draw and c_round: the worst ratio of a control's outputs
    (its forward and backward), the least of a deficit's worst output, over the draws."""
    worst: dict[tuple[str, float], float] = {}
    for number, draw in enumerate(LLAMA_DRAWS):
        judged = d.write_cases(folder / f"draw{number}", d.LLAMA_CASES, draw)
        for c_round in C_ROUNDS:
            rows = plugin_ratios(folder / f"draw{number}" / "dump.json", folder / f"out{number}_{c_round:g}", c_round)
            for case in d.LLAMA_CASES:
                entry = judged[case.name]
                prefix = entry if case.deficit else entry.rsplit(".", 1)[0]
                ratios = [ratio for name, (_, ratio) in rows.items() if name.startswith(prefix + ".")]
                value = max(ratios, default=math.nan)
                key = (case.name, c_round)
                if key not in worst:
                    worst[key] = value
                else:
                    worst[key] = min(worst[key], value) if case.deficit else max(worst[key], value)
    lines = head("case", "kind", "API", "judged", *(f"c_round {c:g}" for c in C_ROUNDS))
    for case in d.LLAMA_CASES:
        kind = "deficit (least)" if case.deficit else "correct (worst)"
        cells = [fmt(worst[(case.name, c)]) for c in C_ROUNDS]
        lines.append(f"| {case.name} | {kind} | {case.api} | {case.direction} | " + " | ".join(cells) + " |")
    return lines


# -- main ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the bf16 GPT dump only")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--cache", type=Path, help="keep the measurements in this pickle (read it if it exists)")
    parser.add_argument("--llama", type=Path, metavar="FOLDER", help="only the LLaMA-style cases, written in FOLDER")
    options = parser.parse_args(argv)
    if options.llama:
        print("## LLaMA-style kernels: ratios through the plugin, recorded mode, per c_round\n")
        print("\n".join(llama_table(options.llama)))
        return
    # torch's default threads, as the plugin runs: PyTorch's CPU layer_norm gradients in bf16/fp16 sum
    # per-thread partials in the low dtype, so the "low" probe matches the recorded kernel only at the
    # thread count that wrote the dump (2 here: tests/data/make/gpt_dumps.sh on this machine)
    log = print if options.verbose else (lambda _: None)
    names = ["gpt_bf16"] if options.quick else list(DUMPS)
    started = time.perf_counter()
    if options.cache and options.cache.exists():
        cases, timings = pickle.loads(options.cache.read_bytes())
    else:
        cases, timings = [], {}
        for name in names:
            log(f"{name}:")
            timings[name] = Timing()
            cases += collect(name, DUMPS[name], timings[name], log)
        if options.cache:
            options.cache.write_bytes(pickle.dumps((cases, timings)))
    variants = sum(len(c.variants) for c in cases)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads. "
        f"{len(cases)} outputs of {len(timings)} dumps, {variants} variants (recorded, controls, deficits), "
        f"measured in {time.perf_counter() - started:.0f} s; the rule: budget = {RULE.describe()}\n"
    )
    sections = [
        (f"The rule, per family and dtype ({RULE.describe()}, warning up to {BAND:g}x)", final_table(cases, RULE)),
        ("Per variant", kinds_table(cases, RULE)),
        ("Exceptions: correct outputs that do not pass, material deficits that are no error", exceptions(cases, RULE)),
        ("Each constant halved, doubled, dropped", sensitivity(cases, RULE)),
        ("Each constant at its knee", knees(cases, RULE)),
        ("The warning band", band_table(cases, RULE)),
        ("The plugin's budget (pytest_msprobe/judging/standards/budget.py) on the same outputs", package_check(cases, RULE)),
        (
            (
                f"Each probe alone: c needed at c_out = {RULE.c_out:g} (correct) / c below which deficits are errors / "
                "separation"
            ),
            probes_table(cases, RULE.c_out),
        ),
        ("The abs probe over K (matmul-like outputs of the dumps)", length_table(cases, RULE)),
        ("Partial sums over K: fp32 kernels and TF32 (synthetic linear, 8x8 outputs)", synthetic_lengths(RULE)),
        ("One-pass variance where the mean dominates (synthetic layer_norm, 32 rows of 256)", one_pass_large_mean()),
        (
            "Cost of the probes: seconds on one thread, best of 3, over the benchmark's",
            time_probes(list(timings), cases),
        ),
    ]
    for title, rows in sections:
        print(f"## {title}\n")
        print("\n".join(rows), end="\n\n")


if __name__ == "__main__":
    main()
