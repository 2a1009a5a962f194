"""What pytest-msprobe costs a pytest run that does not use it: `pytest --co` of an unrelated suite.

Installed, the plugin is loaded by every pytest run of the environment (its pytest11 entry
point), whether or not a run names a dump. Such a run should not pay for it measurably: the
target is < 50 ms. In a work folder holding a small unrelated suite (--files test files of
--tests-per-file test functions each, an empty pytest.ini), this times, in a fresh process each,
the two kinds interleaved, --repeats times:

- without: `python -m pytest --co -q -p no:cacheprovider -p no:msprobe` (pluggy skips a blocked
  entry point before importing it: the run of an environment without the plugin, bar the one
  line of metadata pytest reads for every installed distribution);
- with:    `python -m pytest --co -q -p no:cacheprovider` (the plugin loaded, its options
  registered, its pytest_configure run with no dump named).

wall time and CPU time (user + sys, os.wait4) of each process; the cost is the median of the
paired differences (with - without of the same round), whose spread the table shows too. It
also times `import pytest_msprobe.plugin` alone after `import pytest` (a fresh process each) and
lists what that import brings into sys.modules, which must hold no numpy, torch or mindspore.

    python -m bench.timing.load_cost [--repeats 30] [--files 10] [--tests-per-file 10] [--work DIR] [--keep]

run from the repository root with the interpreter that has pytest-msprobe installed; prints a
markdown table and writes it to bench/timing/results_load_cost.md (--results to change).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench.timing.workdir import work_dir

ROOT = Path(__file__).resolve().parents[2]
TARGET_MS = 50.0
HEAVY = ("numpy", "torch", "mindspore", "torch_npu", "orjson")

IMPORT_PROBE = """
import json, sys, time
import pytest
before = set(sys.modules)
start = time.perf_counter()
import pytest_msprobe.plugin
took = time.perf_counter() - start
print(json.dumps({"ms": took * 1000, "modules": sorted(set(sys.modules) - before)}))
"""


def write_suite(work: Path, files: int, tests: int) -> None:
    """An unrelated suite: plain test functions, an empty pytest.ini so no other config is found."""
    (work / "pytest.ini").write_text("[pytest]\n")
    for i in range(files):
        body = "\n\n".join(f"def test_{i}_{j}():\n    assert {j} + 1 > {j}\n" for j in range(tests))
        (work / f"test_unrelated_{i}.py").write_text(body)


def timed(command: Sequence[str], cwd: Path) -> tuple[float, float, str]:
    """Wall and CPU seconds of one fresh process, and its stdout."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = process.stdout.read() if process.stdout else ""
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{shlex.join(command)} failed:\n{out}")
    return wall, usage.ru_utime + usage.ru_stime, out


def loadavg() -> float:
    return os.getloadavg()[0]


def measure(work: Path, repeats: int, expected: int) -> dict[str, dict[str, list[float]]]:
    base = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"]
    kinds = {"without": [*base, "-p", "no:msprobe"], "with": base}
    found: dict[str, dict[str, list[float]]] = {kind: {"wall": [], "cpu": []} for kind in kinds}
    timed(base, work)  # a first run warms the page cache and writes the .pyc files
    for round_ in range(repeats):
        order = list(kinds) if round_ % 2 == 0 else list(kinds)[::-1]  # neither always goes first
        for kind in order:
            wall, cpu, out = timed(kinds[kind], work)
            if f"{expected} tests collected" not in out:
                raise SystemExit(f"{kind}: expected {expected} tests collected, got:\n{out}")
            found[kind]["wall"].append(wall)
            found[kind]["cpu"].append(cpu)
    return found


def import_alone(repeats: int) -> tuple[list[float], list[str]]:
    times, modules = [], []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", IMPORT_PROBE], check=True, capture_output=True, text=True).stdout
        probe = json.loads(out)
        times.append(probe["ms"])
        modules = probe["modules"]
    return times, modules


def ms(values: Sequence[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f}"


def paired(found: dict[str, dict[str, list[float]]], what: str) -> list[float]:
    return [w - wo for w, wo in zip(found["with"][what], found["without"][what])]


def quartiles(values: Sequence[float]) -> str:
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1 * 1000:+.0f} .. {q3 * 1000:+.0f}"


def table(found: dict[str, dict[str, list[float]]]) -> list[str]:
    lines = [
        "| run | wall ms, median | CPU ms, median | wall ms, min | CPU ms, min |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, label in (("without", "`-p no:msprobe` (not loaded)"), ("with", "plugin loaded, unused")):
        wall, cpu = found[kind]["wall"], found[kind]["cpu"]
        lines.append(f"| {label} | {ms(wall)} | {ms(cpu)} | {min(wall) * 1000:.0f} | {min(cpu) * 1000:.0f} |")
    lines.append("")
    lines.append("| cost (with - without, paired by round) | median ms | quartiles ms | target |")
    lines.append("|---|---:|---:|---|")
    for what in ("wall", "cpu"):
        diff = paired(found, what)
        cost = statistics.median(diff) * 1000
        verdict = "met" if cost < TARGET_MS else "missed"
        lines.append(f"| {what} | {cost:+.0f} | {quartiles(diff)} | < {TARGET_MS:.0f} ms: {verdict} |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--tests-per-file", type=int, default=10)
    parser.add_argument("--work", help="work folder (kept); default a temporary one")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--results", default=str(ROOT / "bench/timing/results_load_cost.md"))
    args = parser.parse_args(argv)

    load_before = loadavg()
    with work_dir(args.work, args.keep, "msprobe-load-cost-") as work:
        write_suite(work, args.files, args.tests_per_file)
        found = measure(work, args.repeats, args.files * args.tests_per_file)
    import_ms, modules = import_alone(args.repeats)
    load_after = loadavg()

    heavy = [name for name in modules if name.split(".")[0] in HEAVY]
    command = "python -m bench.timing.load_cost " + shlex.join(argv if argv is not None else sys.argv[1:])
    lines = [
        "# Load cost: what the plugin costs a pytest run that does not use it",
        "",
        f"Written by `{command.strip()}` on {time.strftime('%Y-%m-%d %H:%M')}; machine: {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, pytest {pytest.__version__}; 1-minute load average before / after: "
        f"{load_before:.2f} / {load_after:.2f}.",
        "",
        f"`python -m pytest --co -q -p no:cacheprovider` of an unrelated suite ({args.files} files of "
        f"{args.tests_per_file} test functions, an empty pytest.ini), a fresh process each, with and without "
        f"`-p no:msprobe`, interleaved, {args.repeats} rounds; CPU is user + sys of the process (os.wait4):",
        "",
        *table(found),
        "",
        f"`import pytest_msprobe.plugin` alone, after `import pytest`, a fresh process each: median "
        f"{statistics.median(import_ms):.1f} ms, min {min(import_ms):.1f} ms of {args.repeats}. It imports "
        f"{len(modules)} modules: {', '.join(modules)}; of numpy, torch, mindspore, torch_npu, orjson: "
        f"{', '.join(heavy) if heavy else 'none'}.",
        "",
        "The import is what the plugin adds for sure; the paired differences of whole runs scatter by more "
        "than it (their quartiles) when other work shares the machine, so their median is the figure to "
        "read, over many rounds, and the import's minimum the floor.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.results).write_text(text)


if __name__ == "__main__":
    main()
