"""The scale a normalisation's mean is rounded at: the magnitude model of frameworks/magnitudes.py, measured.

layer_norm, group_norm and batch_norm (in training) subtract their rows' mean. A correct fp32 kernel computes that
mean as a sum of the row's K elements: its rounding grows with the terms it adds, |x|, not with the mean itself,
which centred rows make near 0. The dtype standard's magnitude of x - mean was |x| + |mean| (MEAN_SCALE "mean");
the U-Net of tests/data (group_norm over groups of 256 to 2,560 elements, |mean|/std 0.1 to 0.8) showed correct
fp32 kernels that sum in order or by Welford's update 1.6 to 2.4 times their budget. MEAN_SCALE "terms" takes
|x| + mean(|x|), as every sum's magnitude is the sum of its terms'. The default, "fp32", takes it where no
floating tensor of the call is bf16/fp16: there the budget's L term (PyTorch's own kernel, computing the same
fp32 statistics) carries the mean's rounding, and mean(|x|) passed a 12-bit rsqrt in the GPT's bf16/fp16
layer_norms (tests/test_deficits_e2e.py) and no correct kernel more.

This study writes, for each norm in fp32 and bf16 (rows of K = 256, 1,024 and 4,096 elements; |mean|/std 0, 1
and 10),
the correct kernels of tests/deficits.py (PyTorch's own, fp32 sums in order, pairwise, Welford's) and its
deficits (a 12-bit rsqrt, a one-pass variance, the input gradient without its mean term), forward and backward,
as msprobe entries, runs the plugin on them (recorded mode, dtype standard) with MEAN_SCALE "mean" and "terms"
("fp32" is "terms" on the fp32 rows and "mean" on the bf16 ones), and prints the worst ratio of the correct
kernels and the deficits that are no error, by norm, dtype, K and centring.

    python -m bench.studies.norm_statistics FOLDER
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import math
import re
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import deficits as d  # noqa: E402

from pytest_msprobe.frameworks import magnitudes  # noqa: E402

_RATIO = re.compile(r"(?:at|within) ([0-9.e+-]+) of its budget|([0-9.e+-]+)x its budget")
SIZES = (256, 1024, 4096)
CENTRES = (0.0, 1.0, 10.0)  # the rows' mean in units of their spread
CONTROLS = ("torch", "sequential", "pairwise", "welford")
DEFICITS = ("rsqrt12", "one_pass_variance", "missing_term")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
APIS = {name: f"Functional.{name}" for name in ("layer_norm", "group_norm", "batch_norm")}


def _call(norm: str, size: int, centre: float, seed: int, dtype: torch.dtype) -> tuple[list, dict]:
    """Inputs of one norm whose statistics rows hold `size` elements, mean `centre` times their spread."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape: int, scale: float = 1.0, mean: float = 0.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale + mean).to(dtype)

    if norm == "layer_norm":
        x = draw(4, size, mean=centre)
        return [x, [size], draw(size, scale=0.5, mean=1.0), draw(size, scale=0.1)], {}
    if norm == "group_norm":  # 4 groups of 4 channels
        x = draw(1, 16, size // 4, mean=centre)
        return [x, 4, draw(16, scale=0.5, mean=1.0), draw(16, scale=0.1)], {}
    x = draw(4, 8, size // 4, mean=centre)  # batch_norm: 8 channels of 4 samples
    stats = [torch.zeros(8, dtype=dtype), torch.ones(8, dtype=dtype)]
    return [x, *stats, draw(8, scale=0.5, mean=1.0), draw(8, scale=0.1), True, 0.1, 1e-5], {}


def _case(norm: str, dtype: str, size: int, centre: float, kind: str, direction: str) -> d.Case:
    def build() -> d.Recorded:
        args, kwargs = _call(norm, size, centre, seed=size + int(centre), dtype=DTYPES[dtype])
        api = APIS[norm]
        fn = getattr(torch.nn.functional, norm)
        running = (1, 2) if norm == "batch_norm" else ()  # batch_norm's running statistics take no gradient
        leaves = [
            a.clone().requires_grad_(i not in running) if isinstance(a, torch.Tensor) else a for i, a in enumerate(args)
        ]
        y = fn(*leaves, **kwargs)
        g = torch.randn(y.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(y.dtype)
        floats = [a for a in leaves if isinstance(a, torch.Tensor) and a.requires_grad]
        torch_grads = list(torch.autograd.grad(y, floats, g))
        outputs = [y.detach()]
        if kind == "torch":
            grads = torch_grads
        else:
            entry = d.call_entry(api, args, kwargs, direction=direction, grad_output=g, forward_output=y.detach())
            found = d.compute(kind, entry)
            if direction == d.FORWARD:
                outputs = found
                grads = torch_grads
            else:
                grads = [v if v is not None else t for v, t in zip(found, torch_grads)]
        return d.Recorded(args, kwargs, outputs, [g], grads)

    name = f"{norm}-{dtype}-{size}-{centre:g}-{kind}-{direction}"
    return d.Case(name, kind in DEFICITS, APIS[norm], direction, kind, build)


def cases() -> list[d.Case]:
    found = []
    for norm in APIS:
        for dtype in DTYPES:
            for size in SIZES:
                for centre in CENTRES:
                    for kind in CONTROLS + DEFICITS:
                        for direction in (d.FORWARD, d.BACKWARD):
                            if kind == "missing_term" and direction == d.FORWARD:
                                continue
                            found.append(_case(norm, dtype, size, centre, kind, direction))
    return found


def plugin_rows(dump: Path, out: Path) -> dict[str, tuple[str, float]]:
    """(status, ratio) of every details row of the plugin's run under the dtype standard, in this process."""
    import pytest

    options = ["--msprobe-device", "recorded", "--msprobe-standard", "dtype", "--msprobe-out", str(out)]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "pytest.log", "w") as log, contextlib.redirect_stdout(log):
        pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--msprobe-dump", str(dump), *options])
    (details,) = sorted(out.glob("accuracy_checking_details_*.csv"))
    found = {}
    with open(details, newline="", encoding="utf-8-sig") as handle:
        for row in csv.DictReader(handle):
            match = _RATIO.search(row["Message"])
            ratio = float(match.group(1) or match.group(2)) if match else math.nan
            found[row["API Name"]] = (row["Status"], ratio)
    return found


def fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3g}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where the study writes its dump and runs")
    options = parser.parse_args(argv)
    started = time.perf_counter()
    all_cases = cases()
    judged = d.write_cases(options.folder / "cases", all_cases)
    settings = ("mean", "terms")
    found = {}
    for setting in settings:
        before, magnitudes.MEAN_SCALE = magnitudes.MEAN_SCALE, setting
        try:
            found[setting] = plugin_rows(options.folder / "cases" / "dump.json", options.folder / f"out_{setting}")
        finally:
            magnitudes.MEAN_SCALE = before
    print(f"torch {torch.__version__}; {len(all_cases)} cases, fp32 and bf16\n")
    columns = " | ".join(f"correct, worst: {s} | deficits not errors: {s}" for s in settings)
    print(f"| norm | dtype | K | mean/std | {columns} |")
    print("|---|---|---|---|" + "---|---|" * len(settings))
    least: dict[tuple[str, str, str], float] = {}
    for norm, dtype, size, centre in itertools.product(APIS, DTYPES, SIZES, CENTRES):
        cells = []
        for setting in settings:
            rows = found[setting]
            worst, wrong = 0.0, []
            for case in all_cases:
                if not case.name.startswith(f"{norm}-{dtype}-{size}-{centre:g}-"):
                    continue
                entry = judged[case.name]
                mine = [value for name, value in rows.items() if name.startswith(entry + ".")]
                ratios = [ratio for _, ratio in mine if not math.isnan(ratio)]
                if case.deficit:
                    top = max(ratios, default=math.nan)
                    key = (case.what, dtype, setting)
                    least[key] = min(least.get(key, math.inf), top)
                    if "error" not in {status for status, _ in mine}:
                        wrong.append(f"{case.what} {case.direction} {fmt(top)}")
                else:
                    worst = max([worst, *ratios])
            cells += [fmt(worst), "; ".join(wrong) or "none"]
        print(f"| {norm} | {dtype} | {size} | {centre:g} | " + " | ".join(cells) + " |")
    print("\n| deficit | dtype | " + " | ".join(f"least worst-output ratio: {s}" for s in settings) + " |")
    print("|---|---|" + "---|" * len(settings))
    for kind, dtype in itertools.product(DEFICITS, DTYPES):
        print(
            f"| {kind} | {dtype} | " + " | ".join(fmt(least.get((kind, dtype, s), math.nan)) for s in settings) + " |"
        )
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
