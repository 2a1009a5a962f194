"""What the dtype standard costs: the whole run with --msprobe-standard dtype over the same run with basic.

The dtype standard judges every element against its budget and asks extra benchmark runs
(magnitude, spread, low: pytest_msprobe/judging/standards/budget.py) only for an output still over its
budget without them; basic compares MaxAbsErr and cosine. Per dump, each command in a fresh
process in the work dir, basic and dtype in turn (basic, dtype, basic, dtype, ...) so that a drift
of the machine's speed moves both; the ratio is taken pair by pair and its median printed, with the
median and best wall time of each side:

    python -m pytest -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device DEVICE
        --msprobe-out OUT --msprobe-standard basic|dtype

The dumps (--dump NAME=PATH:DEVICE, repeatable; default the three below):

- examples/pt_tensor_L1 in recorded mode (the tested side is the recorded output: the run is the
  float64 benchmark, the judgement and the reports) and in cpu mode (PyTorch's CPU kernels as the
  device under test);
- the public ResNet step (tests/data/public/gpu_resnet/dump.json: Ascend/msprobe's quick-start
  ResNet training step dumped on a GPU, examples/quick_start/gpu_dump/step0/proc2016/dump.json at
  commit 8ff00da3; statistics only, so cpu mode, inputs drawn to its statistics): 228 forward and
  159 backward API entries, conv2d on 32x3x224x224 fp32; its benchmark dominates the run.

    python -m bench.timing.standard_cost [--repeats 5] [--warmup 1] [--dump NAME=PATH:DEVICE ...] [-k EXPR] [--work DIR]

run from the repository root with the interpreter that has pytest-msprobe installed; prints a
markdown table and writes it to bench/timing/results_standard_cost.md (--results to change).
"""

from __future__ import annotations

import argparse
import re
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.timing.collect import ROOT, clean_env, load, machine, measure
from bench.timing.workdir import work_dir

DUMPS = [
    f"pt_tensor_L1 recorded={ROOT / 'examples' / 'pt_tensor_L1' / 'dump.json'}:recorded",
    f"pt_tensor_L1 cpu={ROOT / 'examples' / 'pt_tensor_L1' / 'dump.json'}:cpu",
    f"public ResNet step={ROOT / 'tests' / 'data' / 'public' / 'gpu_resnet' / 'dump.json'}:cpu",
]
STANDARDS = ("basic", "dtype")
TARGET = 1.15


@dataclass
class Row:
    name: str
    dump: Path
    device: str
    wall: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STANDARDS})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STANDARDS})
    outcome: dict[str, str] = field(default_factory=dict)

    def ratios(self, kind: str = "wall") -> list[float]:
        runs = self.wall if kind == "wall" else self.cpu
        return [d / b for b, d in zip(runs["basic"], runs["dtype"])]


def parse_dump(text: str) -> tuple[str, Path, str]:
    name, _, rest = text.partition("=")
    path, _, device = rest.rpartition(":")
    if not name or not path or device not in ("recorded", "cpu"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=PATH:recorded|cpu")
    return name, Path(path).resolve(), device


def command(python: str, row: Row, standard: str, out: Path, keyword: str = "") -> list[str]:
    return [
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--msprobe-dump",
        str(row.dump),
        "--msprobe-device",
        row.device,
        "--msprobe-out",
        str(out),
        "--msprobe-standard",
        standard,
        *(["-k", keyword] if keyword else []),
    ]


def outcome(tail: str) -> str:
    lines = [line for line in tail.splitlines() if re.search(r"\d+ (passed|failed|skipped)", line)]
    return lines[-1].strip("= ") if lines else "no summary line"


def bench(rows: list[Row], work: Path, python: str, repeats: int, warmup: int, keyword: str = "") -> None:
    env = clean_env()
    for row in rows:
        for number in range(-warmup, repeats):  # the warm-up pairs (file cache) are not counted
            for standard in STANDARDS:
                out = work / f"{row.name}_{standard}_{number}".replace(" ", "_")
                log = out.with_suffix(".log")
                wall, _, cpu, code, tail = measure(command(python, row, standard, out, keyword), work, env, log)
                if code not in (0, 1):
                    raise SystemExit(f"{row.name} {standard}: exit {code}\n{tail}")
                if number >= 0:
                    row.wall[standard].append(wall)
                    row.cpu[standard].append(cpu)
                row.outcome[standard] = outcome(tail)
                print(f"{row.name} {standard} run {number}: {wall:.2f} s ({cpu:.2f} CPU s)", file=sys.stderr)


def table(rows: list[Row]) -> str:
    lines = [
        "| dump | device | basic s (best) | dtype s (best) | dtype / basic, wall (pairs' median) "
        "| dtype / basic, CPU | target <= 1.15x |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        wall, cpu = statistics.median(row.ratios("wall")), statistics.median(row.ratios("cpu"))
        b, d = row.wall["basic"], row.wall["dtype"]
        lines.append(
            f"| {row.name} | {row.device} | {statistics.median(b):.2f} ({min(b):.2f}) "
            f"| {statistics.median(d):.2f} ({min(d):.2f}) | {wall:.3f}x ({min(row.ratios()):.3f} .. "
            f"{max(row.ratios()):.3f}) | {cpu:.3f}x | {'met' if wall <= TARGET else 'NOT met'} |"
        )
    return "\n".join(lines)


def write_results(path: Path, rows: list[Row], text: str, args: argparse.Namespace, loads: str) -> None:
    when = time.strftime("%Y-%m-%d %H:%M")
    lines = [
        "# What the dtype standard costs over basic: a whole run",
        "",
        f"Written by `{shlex.join(['python', '-m', 'bench.timing.standard_cost', *sys.argv[1:]])}`"
        + f" on {when}; machine: {machine()}; 1-minute load average before / after: {loads}; torch's default "
        "threads.",
        "",
        "Each command in a fresh process in the work dir (`python -m pytest -q -p no:cacheprovider --msprobe-dump "
        "DUMP --msprobe-device DEVICE --msprobe-out OUT --msprobe-standard basic|dtype`), basic and dtype in turn, "
        f"{args.repeats} pairs after {args.warmup} not counted; wall seconds as median (best); the ratio is taken "
        "pair by pair, its median (lowest .. highest); CPU = user + sys of the process and its children.",
        "",
        text,
        "",
        "The dumps:",
        "",
        *(f"- {row.name}: `{display(row.dump)}`, --msprobe-device {row.device}" for row in rows),
        "",
        "Outcomes of the last run:",
        "",
        *(f"- {row.name}, {standard}: {row.outcome.get(standard, '')}" for row in rows for standard in STANDARDS),
        "",
    ]
    path.write_text("\n".join(lines))


def display(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dump",
        action="append",
        type=parse_dump,
        help="NAME=PATH:recorded|cpu, a dump.json and the device to run it on (repeatable; default: the three of "
        "the docstring)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="pairs of runs (basic, dtype) counted per dump")
    parser.add_argument("--warmup", type=int, default=1, help="pairs run first and not counted")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with pytest-msprobe installed")
    parser.add_argument("--work", help="work dir (default: a new temp dir, removed unless --keep)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("-k", dest="keyword", default="", help="pytest's -k: a subset of every dump's entries")
    parser.add_argument(
        "--results",
        default=str(Path(__file__).with_name("results_standard_cost.md")),
        help="markdown file for the table ('' for none)",
    )
    args = parser.parse_args(argv)
    dumps = args.dump or [parse_dump(text) for text in DUMPS]
    rows = [Row(name, path, device) for name, path, device in dumps]
    with work_dir(args.work, args.keep, "bench_standard_cost_") as work:
        before = load()
        bench(rows, work, args.python, args.repeats, args.warmup, args.keyword)
        text = table(rows)
        print("\n" + text + "\n")
        if args.results:
            write_results(Path(args.results), rows, text, args, f"{before} / {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
