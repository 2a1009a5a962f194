"""Measure the dtype standard on correct outputs and on fault-injected copies.

Correct outputs come from two places:

- real msprobe dumps (pt_tensor_L1_bf16: a tiny model in bfloat16, tests/data/pt_tensor_L1_bf16;
  pt_tensor_L1_riskALL: the same model in float32 with a few bf16/fp16 casts,
  examples/pt_tensor_L1): every forward entry is
  recomputed in float64 from its recorded inputs, every backward entry by float64
  autograd from the forward inputs and the recorded grad_outputs, and compared with
  the outputs a correct CPU kernel recorded;
- GPT-sized calls of common kernels (linear K=256..1024, attention, layer_norm, softmax,
  reductions over up to 2**20 normalised values), forward and backward, run on CPU in
  bf16, fp16 and fp32 and recomputed in float64 from the same inputs.

Each correct output is then damaged: scaled by 1.03, 3% noise, mantissa cut to 3 bits,
two rows swapped, one element +1.0, a NaN; fp32 outputs of matmul-like calls are also
recomputed the way TF32/HF32 (10-bit inputs) and bf16 (7-bit inputs) compute them.
Every variant goes through compare.compare under the basic and the dtype standard.

    python -m bench.studies.dtype_standard [--dumps DIR] [--details]

run from the repository root; prints markdown tables (kept in bench/studies/dtype_standard.md).
--dumps DIR reads the two dumps from DIR/pt_tensor_L1_bf16 and DIR/pt_tensor_L1_riskALL instead
of the repository's copies.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from pytest_msprobe.compare import Comparison, compare
from pytest_msprobe.results import ERROR, PASS, WARNING
from pytest_msprobe.standards.basic import BasicStandard
from pytest_msprobe.standards.dtype import DtypeStandard, budget_for, read

ROOT = Path(__file__).resolve().parents[2]
# The real dumps by the names the tables give them, and the repository's copies of them.
DUMPS = {
    "pt_tensor_L1_bf16": ROOT / "tests" / "data" / "pt_tensor_L1_bf16",
    "pt_tensor_L1_riskALL": ROOT / "examples" / "pt_tensor_L1",
}
CASTS = {"to", "float", "half", "bfloat16", "double", "type"}
SHORT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
# torch.testing.assert_close defaults (rtol, atol), for reference.
ASSERT_CLOSE = {torch.bfloat16: (1.6e-2, 1e-5), torch.float16: (1e-3, 1e-5), torch.float32: (1.3e-6, 1e-5)}


@dataclass
class Output:
    source: str  # "dump forward", "GPT-sized backward", ...
    name: str
    dtype: torch.dtype
    tested: torch.Tensor  # as the kernel wrote it, in its dtype
    bench: np.ndarray  # float64
    input_scale: float
    recompute: Callable[[Callable], torch.Tensor] | None = None  # runs the call on rounded inputs


def _floating(a) -> bool:
    return torch.is_tensor(a) and a.is_floating_point()


def _tensors(x) -> Iterator[torch.Tensor]:
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)
    elif torch.is_tensor(x):
        yield x


def _scale(tensors) -> float:
    values = [float(t.detach().double().abs().max()) for t in tensors if _floating(t) and t.numel()]
    return max(values, default=0.0)


def _map(x, fn):
    """x with every floating tensor replaced by fn(tensor), lists kept."""
    if isinstance(x, list):
        return [_map(v, fn) for v in x]
    return fn(x) if _floating(x) else x


def _leaf(t: torch.Tensor) -> torch.Tensor:
    # A fresh float64 leaf per argument: two arguments that are one tensor get two grads.
    return t.detach().double().clone().requires_grad_(True)


# --- correct outputs from the real dumps ------------------------------------------------


def dump_outputs(label: str, root: Path) -> Iterator[Output]:
    data = json.loads((root / "dump.json").read_text())["data"]
    load = _loader(root / "dump_tensor_data")
    for name, body in data.items():
        if name.endswith(".forward"):
            yield from _forward_entry(label, name, body, load)
        elif name.endswith(".backward") and name[: -len("backward")] + "forward" in data:
            forward = data[name[: -len("backward")] + "forward"]
            if not _same_tensor_cast(name, forward):
                yield from _backward_entry(label, name, body, forward, load)


def _same_tensor_cast(name: str, forward: dict) -> bool:
    """A cast to its own dtype returns its input: msprobe then records the grad of both uses."""
    if name.split(".", 1)[1].rsplit(".", 2)[0] not in CASTS:
        return False
    return forward["input_args"][0].get("dtype") == forward["output"][0].get("dtype")


def _forward_entry(dump: str, name: str, body: dict, load) -> Iterator[Output]:
    args = load(body["input_args"])
    kwargs = {k: load(v) for k, v in body["input_kwargs"].items()}
    tested = load(body["output"])[0]
    bench_kwargs = {k: _map(v, torch.Tensor.double) for k, v in kwargs.items()}
    bench = _recompute(name, _map(args, torch.Tensor.double), bench_kwargs)
    yield Output("dump forward", f"{dump}/{name}", tested.dtype, tested, bench.detach().numpy(), _scale(_tensors(args)))


def _backward_entry(dump: str, name: str, body: dict, forward: dict, load) -> Iterator[Output]:
    """Float64 grads of the forward's floating inputs, matched to the recorded ones by shape."""
    args = _map(load(forward["input_args"]), _leaf)
    kwargs = {k: _map(load(v), _leaf) for k, v in forward["input_kwargs"].items()}
    leaves = list(_tensors([args, list(kwargs.values())]))
    grad_outputs = [g for g in load(body["input"]) if torch.is_tensor(g)]
    out = _recompute(name, args, kwargs)
    grads = torch.autograd.grad(out, leaves, [g.double() for g in grad_outputs], allow_unused=True)
    unused = [g for g in grads if g is not None]
    scale = max(_scale(leaves), _scale(grad_outputs))
    for i, recorded in enumerate(load(body["output"])):
        match = next((k for k, g in enumerate(unused) if torch.is_tensor(recorded) and g.shape == recorded.shape), None)
        if match is not None:
            bench = unused.pop(match)
            yield Output("dump backward", f"{dump}/{name}.{i}", recorded.dtype, recorded, bench.numpy(), scale)


def _loader(folder: Path):
    def load(spec):
        if isinstance(spec, list):
            return [load(s) for s in spec]
        if isinstance(spec, dict) and "data_name" in spec:
            return torch.load(folder / spec["data_name"], weights_only=True)
        if isinstance(spec, dict):
            return spec.get("value")
        return spec

    return load


def _recompute(name: str, args: list, kwargs: dict) -> torch.Tensor:
    api_type, rest = name.split(".", 1)
    api = rest.rsplit(".", 2)[0]
    if api in CASTS:  # the float64 bench of a cast is its input
        return args[0] * 1.0
    if api.endswith("_"):
        args = [args[0].clone(), *args[1:]]
    fn = {"Tensor": torch.Tensor, "Torch": torch, "Functional": F}[api_type]
    return getattr(fn, api)(*args, **kwargs)


# --- correct outputs of GPT-sized calls --------------------------------------------------


def synthetic_calls():
    """(name, fn, args, kwargs, matmul_like, backward) of GPT-sized calls, seeded."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=g) * scale

    B, L, H, K = 4, 64, 256, 1024
    x, logits, q = randn(B, L, H), randn(B, 8, L, L, scale=3.0), randn(B, 4, L, 64)
    normed = F.layer_norm(randn(4, 4096).double(), (4096,)).float()
    wide = F.layer_norm(randn(1 << 20).double(), (1 << 20,)).float()
    image, kernel = randn(2, 16, 16, 16), randn(32, 16, 3, 3, scale=1 / 12)
    targets = torch.randint(0, L, (B * 8 * L,), generator=g)
    yield "linear", F.linear, (x, randn(K, H, scale=H**-0.5), randn(K, scale=0.1)), {}, True, True
    yield "linear K=1024", F.linear, (randn(B, L, K), randn(H, K, scale=K**-0.5)), {}, True, True
    yield "matmul (q k^T)", torch.matmul, (q, q.transpose(-1, -2)), {}, True, True
    yield "conv2d", F.conv2d, (image, kernel, randn(32, scale=0.1)), {"padding": 1}, True, True
    yield "sdpa", F.scaled_dot_product_attention, (q, q * 0.5, q), {}, True, True
    yield "dot products summed in order, K=4096", _ordered_dot, (randn(4, 4096), randn(4096, 8)), {}, True, False
    yield "layer_norm", F.layer_norm, (x, (H,), 1 + randn(H, scale=0.1), randn(H, scale=0.1)), {}, False, True
    yield "layer_norm (inputs ~200)", F.layer_norm, (randn(B, L, H, scale=50.0), (H,)), {}, False, True
    yield "softmax", torch.softmax, (logits,), {"dim": -1}, False, True
    yield "log_softmax", torch.log_softmax, (logits,), {"dim": -1}, False, True
    yield "gelu", F.gelu, (x,), {}, False, True
    yield "silu", F.silu, (x,), {}, False, True
    yield "exp", torch.exp, (x,), {}, False, True
    yield "cross_entropy", F.cross_entropy, (logits.reshape(-1, L), targets), {}, False, True
    yield "mean of layer-normed", torch.mean, (normed,), {"dim": -1}, False, False
    yield "sum of layer-normed", torch.sum, (normed,), {"dim": -1}, False, False
    yield "sum of 2**20 layer-normed", torch.sum, (wide,), {}, False, False
    yield "var", torch.var, (x,), {"dim": -1}, False, True
    yield "add (cancelling)", torch.add, (x, -x + randn(B, L, H, scale=1e-3)), {}, False, False


def _ordered_dot(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The least accurate matmul kernel: fp32 products summed one after the other
    (torch.cumsum accumulates fp32 in double on CPU, so the loop is spelled out)."""
    accumulator = torch.float64 if x.dtype == torch.float64 else torch.float32
    products = x.to(accumulator).unsqueeze(-1) * w.to(accumulator).unsqueeze(0)
    total = torch.zeros(products.shape[0], products.shape[2], dtype=accumulator)
    for k in range(products.shape[1]):
        total += products[:, k, :]
    return total.to(x.dtype)


def synthetic_outputs() -> Iterator[Output]:
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for name, fn, args, kwargs, matmul_like, backward in synthetic_calls():
            cast = [a.to(dtype).detach().clone().requires_grad_(backward) if _floating(a) else a for a in args]
            tested = fn(*cast, **kwargs)
            bench_args = [_leaf(a) if _floating(a) else a for a in cast]
            bench = fn(*bench_args, **kwargs)
            scale = _scale(cast)
            recompute = _recomputer(fn, cast, kwargs) if matmul_like and dtype == torch.float32 else None
            yield Output("GPT-sized forward", name, dtype, tested.detach(), bench.detach().numpy(), scale, recompute)
            if backward:
                yield from _synthetic_grads(name, tested, bench, cast, bench_args, g)


def _synthetic_grads(name, tested, bench, cast, bench_args, g) -> Iterator[Output]:
    grad_output = torch.randn(tested.shape, generator=g).to(tested.dtype)
    leaves = [a for a in cast if _floating(a)]
    bench_leaves = [a for a in bench_args if _floating(a)]
    grads = torch.autograd.grad(tested, leaves, grad_output)
    bench_grads = torch.autograd.grad(bench, bench_leaves, grad_output.double())
    scale = max(_scale(leaves), _scale([grad_output]))
    for i, (grad, bench_grad) in enumerate(zip(grads, bench_grads)):
        yield Output("GPT-sized backward", f"{name} grad {i}", grad.dtype, grad, bench_grad.numpy(), scale)


def _recomputer(fn, args, kwargs):
    def recompute(round_input):
        rounded = tuple(round_input(a.detach()).double() if _floating(a) else a for a in args)
        return fn(*rounded, **kwargs).float()

    return recompute


# --- faults ------------------------------------------------------------------------------


def _in_dtype(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(values)).to(dtype)


def scaled(t: torch.Tensor) -> torch.Tensor:
    return _in_dtype(t.double().numpy() * 1.03, t.dtype)


def noisy(t: torch.Tensor) -> torch.Tensor:
    """3% noise: every element 3% off, up or down at random."""
    rng = np.random.default_rng(0)
    v = t.double().numpy()
    return _in_dtype(v * (1 + 0.03 * rng.choice([-1.0, 1.0], v.shape)), t.dtype)


def mantissa_cut(t: torch.Tensor, bits: int = 3) -> torch.Tensor:
    mantissa, exponent = np.frexp(t.double().numpy())
    return _in_dtype(np.ldexp(np.trunc(mantissa * 2.0 ** (bits + 1)) / 2.0 ** (bits + 1), exponent), t.dtype)


def row_swapped(t: torch.Tensor) -> torch.Tensor:
    v = t.double().numpy().copy()
    if v.size < 2:
        return t
    rows = v.reshape(v.shape[0], -1) if v.shape[0] > 1 else v.reshape(-1, 1)  # else swap two elements
    rows[[0, 1]] = rows[[1, 0]]
    return _in_dtype(rows.reshape(v.shape), t.dtype)


def one_off(t: torch.Tensor) -> torch.Tensor:
    v = t.double().numpy().copy()
    v.reshape(-1)[0] += 1.0
    return _in_dtype(v, t.dtype)


def one_nan(t: torch.Tensor) -> torch.Tensor:
    v = t.double().numpy().copy()
    v.reshape(-1)[0] = np.nan
    return _in_dtype(v, t.dtype)


def _round_mantissa(bits: int):
    def round_input(a: torch.Tensor) -> torch.Tensor:
        mantissa, exponent = np.frexp(a.double().numpy())
        return torch.from_numpy(np.ldexp(np.rint(mantissa * 2.0 ** (bits + 1)) / 2.0 ** (bits + 1), exponent))

    return round_input


FAULTS = {
    "x1.03": scaled,
    "3% noise": noisy,
    "mantissa 3 bits": mantissa_cut,
    "swapped row": row_swapped,
    "one element +1.0": one_off,
    "NaN": one_nan,
}
COMPUTE = {"TF32/HF32 inputs": _round_mantissa(10), "bf16 inputs": _round_mantissa(7)}
VARIANTS = ["correct", *FAULTS, *COMPUTE]


# --- measuring ---------------------------------------------------------------------------


@dataclass
class Result:
    output: Output
    variant: str
    changed: bool
    basic: str
    dtype: str
    max_ulps: float  # max error in ULP of the output scale (nan: the standard is not asked)
    rms_ulps: float  # RMS error in ULP of the output's RMS
    assert_close: bool


def judge(out: Output, variant: str, tested: torch.Tensor) -> Result:
    t = tested.double().numpy()
    c = Comparison(t, out.bench, str(out.dtype), out.name, out.input_scale)
    _, basic = compare(c, BasicStandard())
    _, verdict = compare(c, DtypeStandard())
    reading = read(c, budget_for(c.tested_dtype))
    asked = variant != "NaN"  # compare.compare fails a misplaced NaN before any standard
    max_ulps, rms_ulps = (reading.max_error.ulps, reading.rms_error.ulps) if asked else (math.nan, math.nan)
    changed = variant == "correct" or not np.array_equal(t, out.tested.double().numpy())
    rtol, atol = ASSERT_CLOSE[out.dtype]
    with np.errstate(invalid="ignore"):
        close = bool(np.all(np.abs(t - out.bench) <= atol + rtol * np.abs(out.bench)))
    return Result(out, variant, changed, basic.status, verdict.status, max_ulps, rms_ulps, close)


def measure(outputs: list[Output]) -> list[Result]:
    results = []
    for out in outputs:
        results.append(judge(out, "correct", out.tested))
        for variant, fault in FAULTS.items():
            results.append(judge(out, variant, fault(out.tested)))
        if out.recompute is not None:
            for variant, round_input in COMPUTE.items():
                results.append(judge(out, variant, out.recompute(round_input)))
    return results


# --- tables ------------------------------------------------------------------------------


def table_head(*columns: str) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _span(values: list[float]) -> str:
    values = [v for v in values if math.isfinite(v)]
    return f"{min(values):.3g} .. {max(values):.3g}" if values else "-"


def summary(results: list[Result], source: str) -> list[str]:
    rows = table_head(
        "dtype",
        "variant",
        "outputs (changed)",
        "basic pass",
        "assert_close pass",
        "dtype: pass / warning / error",
        "max error, ULP of output scale",
        "RMS error, ULP of RMS",
    )
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in results:
        if r.output.source == source:
            groups[(SHORT[r.output.dtype], r.variant)].append(r)
    for (dtype, variant), group in sorted(groups.items(), key=lambda kv: (kv[0][0], VARIANTS.index(kv[0][1]))):
        changed = [r for r in group if r.changed]
        statuses = [r.dtype for r in changed]
        verdicts = f"{statuses.count(PASS)} / {statuses.count(WARNING)} / {statuses.count(ERROR)}"
        rows.append(
            f"| {dtype} | {variant} | {len(group)} ({len(changed)}) | {sum(r.basic == PASS for r in changed)} "
            f"| {sum(r.assert_close for r in changed)} | {verdicts} "
            f"| {_span([r.max_ulps for r in changed])} | {_span([r.rms_ulps for r in changed])} |"
        )
    return rows


def exceptions(results: list[Result]) -> list[str]:
    """Correct outputs that do not pass, and changed faulty ones that are no error."""
    rows = table_head(
        "output", "dtype", "variant", "dtype verdict", "max ULP", "RMS ULP", "output scale", "input scale"
    )
    for r in results:
        expected = PASS if r.variant == "correct" else ERROR
        if r.changed and r.dtype != expected and r.variant not in COMPUTE:
            o = r.output
            rows.append(
                f"| {o.name} | {SHORT[o.dtype]} | {r.variant} | {r.dtype} | {r.max_ulps:.3g} "
                f"| {r.rms_ulps:.3g} | {np.abs(o.bench).max():.3g} | {o.input_scale:.3g} |"
            )
    return rows


def details(results: list[Result]) -> list[str]:
    rows = table_head(
        "output",
        "dtype",
        "n",
        "output scale",
        "input scale",
        "max error",
        "basic",
        "max error, ULP of each element",
        "max error, ULP of output scale",
        "RMS error, ULP of RMS",
        "dtype",
    )
    for r in results:
        if r.variant != "correct":
            continue
        o = r.output
        err = float(np.max(np.abs(o.tested.double().numpy() - o.bench))) if o.bench.size else 0.0
        rows.append(
            f"| {o.source}: {o.name} | {SHORT[o.dtype]} | {o.bench.size} | {np.abs(o.bench).max():.3g} "
            f"| {o.input_scale:.3g} | {err:.3g} | {r.basic} | {element_ulps(o):.3g} | {r.max_ulps:.3g} "
            f"| {r.rms_ulps:.3g} | {r.dtype} |"
        )
    return rows


def element_ulps(o: Output) -> float:
    """The max error in ULP of each element itself, the measure the dtype standard does not use."""
    fmt = budget_for(str(o.dtype)).format
    _, exponent = np.frexp(o.bench)
    ulp = np.ldexp(1.0, np.maximum(exponent - 1, fmt.min_exponent) - fmt.mantissa_bits)
    return float(np.max(np.abs(o.tested.double().numpy() - o.bench) / ulp))


def reductions() -> list[str]:
    """fp32 sums and means of layer-normed values: error in fp32 ULP of the input scale."""
    rows = table_head(
        "n",
        "sum: ULP of output scale",
        "sum: ULP of input scale",
        "mean: ULP of output scale",
        "mean: ULP of input scale",
    )
    g = torch.Generator().manual_seed(1)
    fp32 = budget_for("torch.float32").format
    for n in (256, 4096, 65536, 1 << 20):
        x = F.layer_norm(torch.randn(n, generator=g).double(), (n,)).float()
        cells = []
        for reduce in (torch.sum, torch.mean):
            bench = float(reduce(x.double()))
            error = abs(float(reduce(x)) - bench)
            cells += [f"{error / fp32.ulp(bench):.3g}", f"{error / fp32.ulp(float(x.abs().max())):.3g}"]
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dumps", type=Path, help="a folder holding " + " and ".join(DUMPS) + " (default: the repository's copies)"
    )
    parser.add_argument("--details", action="store_true", help="one row per correct output")
    options = parser.parse_args(argv)
    folders = {name: options.dumps / name for name in DUMPS} if options.dumps else DUMPS
    outputs = [o for name, folder in folders.items() for o in dump_outputs(name, folder)]
    outputs += list(synthetic_outputs())
    results = measure(outputs)
    print(f"{DtypeStandard().describe()}\n")
    for source in ("dump forward", "dump backward", "GPT-sized forward", "GPT-sized backward"):
        print(f"## {source} outputs\n")
        print("\n".join(summary(results, source)), end="\n\n")
    print("## fp32 reductions of layer-normed values (the input-scale term)\n")
    print("\n".join(reductions()), end="\n\n")
    print("## exceptions: correct outputs that do not pass, faults that are no error\n")
    print("\n".join(exceptions(results)), end="\n\n")
    if options.details:
        print("## correct outputs, one by one\n")
        print("\n".join(details(results)))


if __name__ == "__main__":
    main()
