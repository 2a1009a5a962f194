"""How far a correct fp32 softplus is from the correctly rounded one: the measurement behind
tests/test_deficits_e2e.py's exception for seq_fp32's softplus computed as log(1 + exp(x)).

softplus has no function of its own in a math library: PyTorch's CPU kernel and CUDA's compute
log1p(exp(x)) (above a threshold, x itself). With exp at its documented bound (2 ULP: CUDA's expf,
magnitudes.LIBRARY_ULPS) and log1p correctly rounded, that correct composite is off by the ULP
printed here; log(1 + exp(x)) without log1p loses exp(x)'s digits in 1 + exp(x) where x is very
negative, and is far worse there, but on arguments whose exp(x) is not small it is as close as the
correct composite. Over [-6, 4] (the sequence model's step sizes, tests/data/make/seq_dump.py) and
the arguments of seq_fp32's own softplus entry:

    python -m bench.studies.softplus_composite
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SEQ = ROOT / "tests" / "data" / "seq_fp32"


def ulps_off(tested: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|tested - exact| in ULP of fp32 at the correctly rounded exact value."""
    rounded = exact.float().abs()
    spacing = (torch.nextafter(rounded, torch.tensor(float("inf"))) - rounded).double()
    return (tested.double() - exact).abs() / spacing


def exp_off(x: torch.Tensor, ulps: int) -> torch.Tensor:
    """exp(x) correctly rounded to fp32, then moved `ulps` ULP (up, or down where negative)."""
    value = torch.exp(x.double()).float()
    toward = torch.tensor(float("inf") if ulps > 0 else 0.0)
    for _ in range(abs(ulps)):
        value = torch.nextafter(value, toward)
    return value


def rows(x: torch.Tensor) -> list[tuple[str, float]]:
    exact = torch.nn.functional.softplus(x.double())
    found = [("PyTorch's CPU kernel", float(ulps_off(torch.nn.functional.softplus(x), exact).max()))]
    for ulps in (2, -2):
        composite = torch.log1p(exp_off(x, ulps).double()).float()  # log1p correctly rounded
        found.append((f"correct: exp {ulps:+d} ULP (its bound), log1p", float(ulps_off(composite, exact).max())))
    naive = torch.log(1 + torch.exp(x))
    found.append(("log(1 + exp(x)) in fp32 (no log1p)", float(ulps_off(naive, exact).max())))
    return found


def main() -> None:
    print(f"torch {torch.__version__}\n")
    print("| arguments | kernel | worst error (ULP) |\n|---|---|---:|")
    grid = torch.linspace(-6, 4, 200_001, dtype=torch.float32)
    sets = [("[-6, 4], 200,001 points", grid)]
    entry = SEQ / "dump_tensor_data" / "Functional.softplus.0.forward.input.0.pt"
    if entry.exists():
        sets.append(("seq_fp32's Functional.softplus.0", torch.load(entry, weights_only=True).float().flatten()))
    for name, x in sets:
        for kernel, worst in rows(x):
            print(f"| {name} | {kernel} | {worst:.3g} |")


if __name__ == "__main__":
    sys.exit(main())
