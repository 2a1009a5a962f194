"""What a correct fp32 kernel of elementwise math is off by: the math-library term of the dtype standard.

The forward of a unary function (exp, cos, silu, ...: frameworks/magnitudes.UNARY) of an exact input
sums nothing. Its budget had the accumulation term all the same, 32 u_acc |b| (16 to 32 fp32 ULP), beside
the final rounding and a 1-ULP library (c_out, 1.5 ULP): held-out tests/data/ssm_fp32's exp had a budget
of 24.2 ULP, "fp32 accumulation 22.7". That term is now 2 lib u_acc |b| (lib to 2 lib ULP of fp32),
lib = frameworks/magnitudes.LIBRARY_ULPS: the larger of CUDA's and glibc's documented bounds.

For each function this measures, over 2^20 fp32 arguments a range (and cos/sin at 4000-5000 rad, RoPE's
angles at long positions), with 1 and 2 threads, contiguous and strided (ATen's vectorised and scalar
loops), the ratio to its budget, computed by the plugin's own budget.read, before and after, of:

- PyTorch's CPU kernel (this machine's; correct);
- a library lib ULP off the correctly rounded result at random (-lib..lib ULP: CUDA's and glibc's
  documented bounds, the worst a correct kernel is allowed) and a 1-ULP library: controls, must pass;
- deficits, must be errors: `fast_exp` (2^n times a cubic, tests/deficits.fast_exp: ~3000 ULP), the
  argument of exp2 rounded to fp32 (`exp2(fl(x log2 e))`, as CUDA's __expf and fast-math exps compute:
  about |x| ULP off), and the same for silu and sigmoid through their exp; cos/sin with pi/2 as one fp32
  constant (a fast-math reduction: tests/deficits' fast cos).

    python -m bench.studies.unary_library [--out FILE]

prints the table and writes it to bench/studies/unary_library.md (or FILE).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pytest_msprobe.frameworks.magnitudes import LIBRARY_ULPS
from pytest_msprobe.judging.compare import ExtraRuns
from pytest_msprobe.judging.standards.budget import FORMATS, read

F64, F32 = torch.float64, torch.float32
FP32 = FORMATS["float32"]
SIZE = 1 << 20
RANGES: dict[str, list[tuple[float, float]]] = {
    "exp": [(-20, 10), (-88, 88)], "exp2": [(-30, 15)], "expm1": [(-5, 5)], "log": [(1e-6, 1e4)],
    "log2": [(1e-6, 1e4)], "log10": [(1e-6, 1e4)], "log1p": [(-0.9, 100)], "sqrt": [(1e-6, 1e4)],
    "rsqrt": [(1e-6, 1e4)], "reciprocal": [(1e-3, 1e3)], "tanh": [(-5, 5)], "sigmoid": [(-20, 20)],
    "silu": [(-20, 20)], "erf": [(-4, 4)], "sinh": [(-10, 10)], "cosh": [(-10, 10)], "atan": [(-100, 100)],
    "cos": [(-10, 10), (4000, 5000)], "sin": [(-10, 10), (4000, 5000)], "tan": [(-1.5, 1.5)],
}  # fmt: skip
OLD = ExtraRuns()  # no library term: the accumulation term on |b|, as every output without a model had


def function(name: str):
    return F.silu if name == "silu" else getattr(torch, name)


def arguments(low: float, high: float, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(SIZE, dtype=F64, generator=generator) * (high - low) + low).to(F32)


def torch_kernel(name: str, x: torch.Tensor) -> list[np.ndarray]:
    """PyTorch's fp32 kernel at 1 and 2 threads, on the contiguous tensor and a strided view."""
    fn, runs, threads = function(name), [], torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            runs.append(fn(x).double().numpy())
            strided = torch.stack([x, x], dim=1)[:, 0]  # ATen's non-contiguous loop
            runs.append(fn(strided).double().numpy())
    finally:
        torch.set_num_threads(threads)
    return runs


def ulps_off(exact: torch.Tensor, ulps: int, seed: int) -> np.ndarray:
    """The correctly rounded result moved by -ulps..ulps fp32 ULP at random: a library at its bound."""
    rounded = exact.to(F32)
    step = torch.randint(-ulps, ulps + 1, exact.shape, generator=torch.Generator().manual_seed(seed))
    up, down = torch.nextafter(rounded, rounded + 1), torch.nextafter(rounded, rounded - 1)
    spacing = torch.where(step >= 0, up - rounded, rounded - down).double()
    return (rounded.double() + step * spacing).to(F32).double().numpy()


def fast_exp(x: torch.Tensor) -> torch.Tensor:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    import deficits

    return deficits.fast_exp(x)


def exp2_of_rounded(x: torch.Tensor) -> torch.Tensor:
    """exp as exp2 of x log2(e) rounded to fp32 (CUDA's __expf, fast-math exps): the argument's rounding."""
    return torch.exp2((x.to(F32) * torch.tensor(math.log2(math.e), dtype=F32)).double())


def deficits_of(name: str, x: torch.Tensor) -> dict[str, torch.Tensor]:
    x64 = x.double()
    if name == "exp":
        return {"fast_exp (2^n times a cubic)": fast_exp(x64), "exp2(fl(x log2 e))": exp2_of_rounded(x64)}
    if name in ("sigmoid", "silu"):
        e = exp2_of_rounded(-x64)
        sig = 1 / (1 + e)
        return {"exp2(fl(x log2 e)) inside": sig if name == "sigmoid" else x64 * sig}
    if name in ("cos", "sin"):
        half_pi = torch.tensor(math.pi / 2, dtype=F32).double()  # pi/2 as one fp32 constant
        k = torch.round(x64 / half_pi)
        r = x64 - k * half_pi
        quadrant = k.remainder(4)
        if name == "sin":
            quadrant = (quadrant + 3).remainder(4)  # sin(x) = cos(x - pi/2)
        parts = [torch.cos(r), -torch.sin(r), -torch.cos(r), torch.sin(r)]
        found = torch.zeros_like(x64)
        for q, part in enumerate(parts):
            found = torch.where(quadrant == q, part, found)
        return {"pi/2 as one fp32 constant": found}
    return {}


def ratio(tested: np.ndarray, bench: np.ndarray, extra: ExtraRuns) -> float:
    return read(tested, bench, FP32, extra).ratio


def study() -> list[tuple[str, str, str, str, float, float]]:
    """(function, range, kind, case, ratio before, ratio after)."""
    rows = []
    for index, (name, ranges) in enumerate(RANGES.items()):
        lib = LIBRARY_ULPS[name]
        new = ExtraRuns(library_ulps=lib)
        for low, high in ranges:
            where = f"[{low:g}, {high:g}]"
            x = arguments(low, high, index)
            exact = function(name)(x.double())
            bench = exact.numpy()
            cases = [("correct", "PyTorch's CPU kernel", torch_kernel(name, x))]
            cases.append(("correct", "1 ULP off the correctly rounded", [ulps_off(exact, 1, index)]))
            if lib > 1:
                cases.append(("correct", f"{lib} ULP off (its documented bound)", [ulps_off(exact, lib, index)]))
            for what, value in deficits_of(name, x).items():
                cases.append(("deficit", what, [value.to(F32).double().numpy()]))
            for kind, case, runs in cases:
                before = max(ratio(t, bench, OLD) for t in runs)
                after = max(ratio(t, bench, new) for t in runs)
                rows.append((name, where, kind, case, before, after))
                print(f"{name:10s} {where:16s} {kind:8s} {case:38s} {before:10.3g} {after:10.3g}", flush=True)
    return rows


def report(rows: list, command: str) -> str:
    lines = [
        "# The math-library term of unary math (the dtype standard, fp32)",
        "",
        f"`{command}` (torch {torch.__version__}, this machine's CPU). Ratio: the output's worst element over",
        "its budget (budget.read): before, 1.5 ULP + 32 u_acc |b| (the accumulation term every output without",
        "a model had); after, 1.5 ULP + 2 lib u_acc |b| (lib = magnitudes.LIBRARY_ULPS). A correct kernel",
        "passes at 1 or less; a deficit is an error beyond 1.04.",
        "",
        "| function | lib (ULP) | arguments | kind | case | ratio before | ratio after |",
        "|---|---:|---|---|---|---:|---:|",
    ]
    for name, where, kind, case, before, after in rows:
        lines.append(f"| {name} | {LIBRARY_ULPS[name]} | {where} | {kind} | {case} | {before:.3g} | {after:.3g} |")
    correct = [r for r in rows if r[2] == "correct"]
    deficit = [r for r in rows if r[2] == "deficit"]
    worst = max(correct, key=lambda r: r[5])
    least = min(deficit, key=lambda r: r[5])
    hidden = [r for r in deficit if r[4] <= 1.04]
    lines += [
        "",
        f"Correct: {len(correct)} cases, the worst at {worst[5]:.3g} of its budget after ({worst[0]}, {worst[3]}).",
        f"Deficits: {len(deficit)} cases, the least at {least[5]:.3g} after ({least[0]} {least[1]}, {least[3]}); "
        f"{len(hidden)} passed before (within 1.04 of the old budget): "
        + ", ".join(f"{r[0]} {r[1]} {r[3]} ({r[4]:.2g} before, {r[5]:.3g} after)" for r in hidden)
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".md"))
    args = parser.parse_args(argv)
    rows = study()
    text = report(rows, "python -m bench.studies.unary_library")
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
