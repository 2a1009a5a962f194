"""The comparison of two runs: `python -m pytest_msprobe.compare` against msprobe's own `api_precision_compare`.

Both read the same pair of details CSVs (msprobe's PyTorch layout) of N outputs each, written here:
benchmark-rule rows (fp32) of N / 2 APIs with a forward and a backward output, the NPU's metrics
the GPU's times a factor drawn per row (one row in ten over the L0 thresholds). Each command in a
fresh process, the two in turn; wall and CPU (user + sys) seconds, median (best) of --repeats, and
whether the two gave every row the same status. msprobe matches each NPU row by filtering the whole
GPU table (`gpu_data[gpu_data['API Name'] == name]`), this plugin by a dict: the sizes show how that
grows.

    python -m bench.timing.compare_speed --msprobe-python VENV/bin/python [--sizes 1000,10000] [--repeats 3]

run from the repository root with the interpreter that has pytest-msprobe installed; VENV an
environment with mindstudio-probe 26.2.0 (tests/msprobe_venv.py makes one); prints a markdown
table and writes it to bench/timing/results_compare_speed.md (--results to change).
"""

from __future__ import annotations

import argparse
import csv
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.timing.collect import ROOT, clean_env, load, machine, measure
from bench.timing.workdir import work_dir
from pytest_msprobe.reports.layouts import MSPROBE_PYTORCH

MSPROBE = "import sys; from msprobe.msprobe import main; sys.argv[0] = 'msprobe'; sys.exit(main())"


def write_pair(folder: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    """The NPU's and the GPU's details CSVs of n outputs."""
    rng = random.Random(seed)
    sides: dict[str, list[list[str]]] = {"npu": [], "gpu": []}
    for i in range(n):
        api, direction = f"Functional.relu.{i // 2}", ("forward", "backward")[i % 2]
        gpu = {"rmse": rng.uniform(1e-4, 1e-3), "sv": rng.uniform(0, 0.1), "max": rng.uniform(1e-3, 1e-2)}
        factor = rng.uniform(2.5, 4.0) if rng.random() < 0.1 else rng.uniform(0.5, 1.5)
        for side, scale in (("gpu", 1.0), ("npu", factor)):
            m = {key: value * scale for key, value in gpu.items()}
            metrics = [" "] * 17
            metrics[6:11] = [
                f"{0.1:.14f}",
                f"{m['rmse']:.14f}",
                f"{m['sv']:.14f}",
                f"{m['max']:.14f}",
                f"{m['max'] / 10:.14f}",
            ]
            name = f"{api}.{direction}.output.0"
            sides[side].append([name, "torch.float64", "torch.float32", "(8, 16)", *metrics, "pass", " "])
    paths = []
    for side, rows in sides.items():
        path = folder / side / "accuracy_checking_details_20260101000000.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8-sig") as handle:
            writer = csv.writer(handle)
            writer.writerow(MSPROBE_PYTORCH.details_columns)
            writer.writerows(rows)
        paths.append(path)
    return paths[0], paths[1]


def statuses(folder: Path) -> dict[str, str]:
    (path,) = sorted(folder.glob("api_precision_compare_details_*.csv"))
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return {row["API Name"]: row["比对结果"] for row in csv.DictReader(handle)}


def bench(sizes: Sequence[int], repeats: int, msprobe_python: str, work: Path) -> list[str]:
    env = clean_env()
    rows = []
    for n in sizes:
        npu, gpu = write_pair(work / f"pair_{n}", n)
        commands = {
            "pytest_msprobe.compare": [
                sys.executable,
                "-m",
                "pytest_msprobe.compare",
                "--npu",
                str(npu),
                "--gpu",
                str(gpu),
            ],
            "msprobe api_precision_compare": [
                msprobe_python,
                "-c",
                MSPROBE,
                "api_precision_compare",
                "-npu",
                str(npu),
                "-gpu",
                str(gpu),
            ],
        }
        wall: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        outs = {}
        for r in range(repeats):
            for name, command in commands.items():
                out = work / f"out_{n}_{r}_{name.split()[0]}"
                out.mkdir(parents=True)
                seconds, _rss, cpu_s, code, tail = measure([*command, "-o", str(out)], work, env, out / "log.txt")
                if code not in (0, 1):
                    raise SystemExit(f"{name} exited {code} on {n} outputs:\n{tail}")
                wall[name].append(seconds)
                cpu[name].append(cpu_s)
                outs[name] = out
        same = statuses(outs["pytest_msprobe.compare"]) == statuses(outs["msprobe api_precision_compare"])
        errors = sum(status == "error" for status in statuses(outs["pytest_msprobe.compare"]).values())
        for name in commands:
            rows.append(
                f"| {n:,} | {name} | {statistics.median(wall[name]):.2f} ({min(wall[name]):.2f}) | "
                f"{statistics.median(cpu[name]):.2f} ({min(cpu[name]):.2f}) | {errors:,} | {'yes' if same else 'NO'} |"
            )
        print(rows[-2], rows[-1], sep="\n", flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.timing.compare_speed", description=__doc__.split("\n")[0])
    parser.add_argument("--msprobe-python", required=True, help="the interpreter of an environment with msprobe 26.2.0")
    parser.add_argument("--sizes", default="1000,10000", help="outputs per CSV, comma separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "timing" / "results_compare_speed.md")
    parser.add_argument("--work", help="where the CSVs go (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    before = load()
    header = [
        "| outputs | command | wall s, median (best) | CPU s, median (best) | error outputs | same status every row |",
        "|---:|---|---:|---:|---:|---|",
    ]
    print(*header, sep="\n", flush=True)
    with work_dir(args.work, False, "compare_speed_") as work:
        rows = bench(sizes, args.repeats, args.msprobe_python, work)
    command = " ".join(["python -m bench.timing.compare_speed", *(argv if argv is not None else sys.argv[1:])])
    text = "\n".join(
        [
            "# Comparing two runs: pytest_msprobe.compare against msprobe's api_precision_compare",
            "",
            f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M')}; machine: {machine()}; "
            f"1-minute load average before / after: {before} / {load()}.",
            "",
            "Each command in a fresh process, the two in turn, on the same pair of details CSVs (fp32 benchmark-rule "
            "rows, one in ten over the L0 thresholds); CPU = user + sys of the process and its children.",
            "",
            *header,
            *rows,
            "",
        ]
    )
    args.results.write_text(text)
    print(f"\nwritten to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
