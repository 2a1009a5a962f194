"""The source coordinates a resampling kernel rounds: the constants of frameworks/coordinates.py, measured.

A correct interpolate, upsample or grid_sample computes each output's source coordinate (and, for the
cubic and antialiased modes, its weights) in fp32 (its opmath dtype, bf16 and fp16 tensors too); the
float64 benchmark in float64. This study measures

1. how far fp32 puts a source coordinate from float64's, in u (|src| + 1), u = 2^-24, for PyTorch's formula
   (`scale (d + 0.5) - 0.5`, `scale d` with align_corners), a fused offset (`d s + (s/2 - 1/2)`), the
   division (`(d + 0.5) in / out - 0.5`) and grid_sample's unnormalisation, over every input size 1..299
   and output sizes up and down: ROUNDINGS must bound it;
2. how far fp32 puts Keys' cubic weights (A = -0.75 and -0.5) from float64's, in u times the polynomial on
   absolute coefficients, over 2 million fp32 fractions: CUBIC_WEIGHT must bound it;
3. the plugin itself (recorded mode, dtype standard) on tests/deficits_resample.py's cases, correct kernels
   (PyTorch's in fp32, bf16, fp16, every mode; a fused coordinate; grid_sample, affine_grid) and deficits
   (a half-pixel offset, weights or coordinates in bf16/fp16, nearest that rounds, a grid without its half
   pixel or in bf16, a bf16 base grid), with each constant at 0, half, its value and twice it: the worst
   ratio of a correct kernel's outputs and the least of a deficit's worst output;
4. the hybrid CNN + ViT dumps of tests/data (fp32, bf16, CPU autocast; bilinear 64 -> 56, bicubic 8 -> 7,
   nearest x2, grid_sample, affine_grid) in recorded and cpu mode, each resampling entry's ratio without
   the term and with it.

    python -m bench.studies.coordinate_rounding FOLDER

writes its dumps and runs into FOLDER and prints the tables (bench/studies/coordinate_rounding.md).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import re
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import deficits as d  # noqa: E402
import deficits_resample as r  # noqa: E402

from pytest_msprobe.frameworks import coordinates  # noqa: E402

U = 2.0**-24
_RATIO = re.compile(r"(?:at|within) ([0-9.e+-]+) of its budget|([0-9.e+-]+)x its budget")


def fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3g}"


# -- 1. coordinates ------------------------------------------------------------------------------


def coordinate_errors() -> dict[str, float]:
    """The largest |fp32 coordinate - float64's| / (u (|src| + 1)) of each formula."""
    worst: dict[str, float] = {}

    def note(name: str, found: torch.Tensor, exact: torch.Tensor) -> None:
        ratio = float(((found.double() - exact).abs() / (U * (exact.abs() + 1))).max())
        worst[name] = max(worst.get(name, 0.0), ratio)

    f32 = torch.float32
    for n_in in range(1, 300):
        for n_out in sorted({*range(1, 300, 7), 2 * n_in, max(1, n_in // 2), 3 * n_in}):
            d64 = torch.arange(n_out, dtype=torch.float64)
            d32 = d64.float()
            for factor in (None, n_out / n_in):
                s64 = 1.0 / factor if factor else n_in / n_out
                s32 = torch.tensor(s64, dtype=f32)
                exact = s64 * (d64 + 0.5) - 0.5
                note("scale (d + 0.5) - 0.5 (PyTorch, CUDA)", s32 * (d32 + 0.5) - 0.5, exact)
                note("d s + (s/2 - 1/2) (a fused offset)", d32 * s32 + (0.5 * s32 - 0.5), exact)
                if factor is None:
                    division = (
                        (d32 + 0.5) * torch.tensor(float(n_in), dtype=f32) / torch.tensor(float(n_out), dtype=f32)
                    )
                    note("(d + 0.5) in / out - 0.5 (a division)", division - 0.5, exact)
            s64 = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
            note("scale d (align_corners)", torch.tensor(s64, dtype=f32) * d32, s64 * d64)
    grid = (torch.rand(1_000_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2.2 - 1.1).float()
    for size in (7, 56, 64, 224, 1000, 4097):
        g64 = grid.double()
        note("grid_sample: ((g + 1) size - 1) / 2", ((grid + 1) * size - 1) / 2, ((g64 + 1) * size - 1) / 2)
        note(
            "grid_sample: (g + 1) / 2 (size - 1) (align_corners)",
            ((grid + 1) / 2) * (size - 1),
            (g64 + 1) / 2 * (size - 1),
        )
    return worst


# -- 2. cubic weights ------------------------------------------------------------------------------


def cubic_weight_errors() -> dict[tuple[float, int], float]:
    """The largest |fp32 weight - float64's| / (u p~(|x|)) of each tap, p~ the polynomial on absolute
    coefficients, over 2 million fp32 fractions (the kernel's own: t = src - floor(src) in fp32)."""
    t = torch.rand(2_000_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64).float()
    worst = {}
    for a in (-0.75, -0.5):
        a32 = torch.tensor(a, dtype=torch.float32)

        def near(x: torch.Tensor, a: torch.Tensor | float) -> torch.Tensor:
            return ((a + 2) * x - (a + 3)) * x * x + 1

        def far(x: torch.Tensor, a: torch.Tensor | float) -> torch.Tensor:
            return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

        t64 = t.double()
        taps = [
            (far, t + 1, t64 + 1, True),
            (near, t, t64, False),
            (near, 1 - t, 1 - t64, False),
            (far, 2 - t, 2 - t64, True),
        ]
        for tap, (fn, x32, x64, is_far) in enumerate(taps):
            error = (fn(x32, a32).double() - fn(x64, a)).abs()
            terms = coordinates._cubic_terms(x64, abs(a), is_far)
            worst[(a, tap)] = float((error / (U * terms)).max())
    return worst


# -- 3. the cases, through the plugin --------------------------------------------------------------


def plugin_rows(dump: Path, out: Path, device: str = "recorded") -> dict[str, tuple[str, float]]:
    """(status, ratio) of every details row of the plugin's run under the dtype standard, in this process."""
    import pytest

    options = ["--msprobe-device", device, "--msprobe-standard", "dtype", "--msprobe-out", str(out)]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "pytest.log", "w") as log, contextlib.redirect_stdout(log):  # the tables alone on stdout
        pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--msprobe-dump", str(dump), *options])
    (details,) = sorted(out.glob("accuracy_checking_details_*.csv"))
    found = {}
    with open(details, newline="", encoding="utf-8-sig") as handle:
        for row in csv.DictReader(handle):
            match = _RATIO.search(row["Message"])
            ratio = float(match.group(1) or match.group(2)) if match else math.nan
            found[row["API Name"]] = (row["Status"], ratio)
    return found


def with_constants(roundings: float, cubic: float, run):
    before = coordinates.ROUNDINGS, coordinates.CUBIC_WEIGHT
    coordinates.ROUNDINGS, coordinates.CUBIC_WEIGHT = roundings, cubic
    try:
        return run()
    finally:
        coordinates.ROUNDINGS, coordinates.CUBIC_WEIGHT = before


SETTINGS = [
    ("term off", 0.0, 0.0),
    ("ROUNDINGS 1.5", 1.5, coordinates.CUBIC_WEIGHT),
    ("CUBIC_WEIGHT 0.75", coordinates.ROUNDINGS, 0.75),
    ("as set", coordinates.ROUNDINGS, coordinates.CUBIC_WEIGHT),
    ("both doubled", 2 * coordinates.ROUNDINGS, 2 * coordinates.CUBIC_WEIGHT),
]


def cases_table(folder: Path) -> list[str]:
    judged = d.write_cases(folder / "cases", r.RESAMPLE_CASES)
    cells: dict[str, list[str]] = {case.name: [] for case in r.RESAMPLE_CASES}
    summary = []
    for label, roundings, cubic in SETTINGS:
        out = folder / f"out_{label.replace(' ', '_')}"
        rows = with_constants(roundings, cubic, lambda out=out: plugin_rows(folder / "cases" / "dump.json", out))
        wrong = 0
        for case in r.RESAMPLE_CASES:
            entry = judged[case.name]
            prefix = entry if case.deficit else entry.rsplit(".", 1)[0]
            mine = [value for name, value in rows.items() if name.startswith(prefix + ".")]
            ratio = max((ratio for _, ratio in mine), default=math.nan)
            statuses = {status for status, _ in mine}
            right = "error" in statuses if case.deficit else statuses == {"pass"}
            wrong += not right
            cells[case.name].append(fmt(ratio) if right else f"**{fmt(ratio)}**")
        summary.append(f"{label}: {wrong} of {len(r.RESAMPLE_CASES)} cases wrong")
    lines = [
        "| case | kind | API | judged | " + " | ".join(label for label, _, _ in SETTINGS) + " |",
        "|---|---|---|---|" + "---|" * len(SETTINGS),
    ]
    for case in r.RESAMPLE_CASES:
        kind = "deficit (worst output)" if case.deficit else "correct (worst output)"
        lines.append(f"| {case.name} | {kind} | {case.api} | {case.direction} | " + " | ".join(cells[case.name]) + " |")
    return [*summary, "", *lines]


# -- 4. the hybrid dumps -------------------------------------------------------------------------


def hybrid_table(folder: Path) -> list[str]:
    lines = ["| dump | device | entry | output | term off | as set |", "|---|---|---|---|---|---|"]
    for name in ("hybrid_fp32", "hybrid_bf16", "hybrid_autocast"):
        dump = ROOT / "tests" / "data" / name / "dump.json"
        for device in ("recorded", "cpu"):
            found = []
            for label, roundings, cubic in (SETTINGS[0], SETTINGS[3]):
                out = folder / f"{name}_{device}_{label.replace(' ', '_')}"
                found.append(
                    with_constants(
                        roundings, cubic, lambda out=out, dump=dump, device=device: plugin_rows(dump, out, device)
                    )
                )
            for row in sorted(found[1]):
                if not any(api in row for api in ("interpolate", "grid_sample", "affine_grid")):
                    continue
                entry, output = row.rsplit(".output.", 1)
                before, after = found[0][row], found[1][row]
                cells = [f"{fmt(ratio)} ({status})" for status, ratio in (before, after)]
                lines.append(f"| {name} | {device} | {entry} | {output} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where the study writes its dumps and runs")
    options = parser.parse_args(argv)
    options.folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(
        f"torch {torch.__version__}; ROUNDINGS {coordinates.ROUNDINGS:g}, CUBIC_WEIGHT {coordinates.CUBIC_WEIGHT:g}\n"
    )
    print("## 1. A source coordinate in fp32: the largest |fp32 - float64| / (u (|src| + 1))\n")
    print("| formula | largest |\n|---|---|")
    for name, value in coordinate_errors().items():
        print(f"| {name} | {value:.3g} |")
    print("\n## 2. Keys' cubic weights in fp32: the largest |fp32 - float64| / (u p~(|x|))\n")
    print("| A | tap (-1, 0, 1, 2) | largest |\n|---|---|---|")
    for (a, tap), value in cubic_weight_errors().items():
        print(f"| {a:g} | {tap - 1} | {value:.3g} |")
    print("\n## 3. The cases of tests/deficits_resample.py through the plugin (recorded, dtype): worst ratio\n")
    print("\n".join(cases_table(options.folder)))
    print("\n## 4. The hybrid CNN + ViT dumps: each resampling output's ratio (status)\n")
    print("\n".join(hybrid_table(options.folder)))
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
