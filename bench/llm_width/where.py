"""Where the plugin's time goes, per entry and phase (issue 32): the plugin's own serial run, timed.

    python -m bench.llm_width.where --standard basic [--dump D] [--json OUT.json] [-- PYTEST_ARGS]

Runs pytest in this process on the dump (--msprobe-device cpu, serial, as a user's run) with a few of
the plugin's functions wrapped by timers (wall and CPU, exclusive: a phase's time is what is left of it
once the phases it calls are taken out; the product code is not changed). The phases:

- inputs: Rebuilder.rebuild (the random inputs and grad_outputs of the recorded shapes)
- tested: the tested side's forward / forward and backward (torch_engine.forward, .gradients), less copies
- float64: the same on the benchmark's side (a conv's or a linear's backward kernels alone: bench_gradients)
- copies: Side.place / place_grad (each input copied to its side's dtype) and to_array (outputs to float64
  numpy arrays)
- metrics: compare.metrics (Cosine, MaxAbsErr, MaxRelativeErr in one pass)
- budget runs: the standard's extra benchmark runs (ExtraBenchRuns.output: magnitude, spread, low), with
  everything they call (their copies included)
- verdict: the standard's judge less its extra runs (the budget's looks at the arrays; under basic, its
  rule and the dtype budget it asks of a failing output)
- CSV: the result and details rows and the journal (CsvWriter.write_api, Journal's writes)
- other: the rest of the pytest item (its protocol less the above: the check's own glue, freeing the
  entry's tensors, pytest's reports)

The timers cost two clock reads per wrapped call (a few thousand calls a run). Where the JSON goes,
where_report.py makes the tables of results_where.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_DUMP = HERE / "dumps" / "llama7b" / "dump.json"
PHASES = ("inputs", "tested", "float64", "copies", "metrics", "budget runs", "verdict", "CSV", "other")
STICKY = "budget runs"  # what an extra run calls is the extra run's


class Clocks:
    """Exclusive wall and CPU time by entry and phase."""

    def __init__(self) -> None:
        self.entry = "(session)"
        self.times: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
        self.stack: list[list[Any]] = []  # [label, wall0, cpu0, child_wall, child_cpu]
        self.runs: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # extra runs' CPU s

    def timed(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.stack and self.stack[-1][0] == STICKY:
                return fn(*args, **kwargs)
            return self.run(label, fn, *args, **kwargs)

        return wrapper

    def run(self, label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        frame: list[Any] = [label, time.perf_counter(), time.process_time(), 0.0, 0.0]
        self.stack.append(frame)
        try:
            return fn(*args, **kwargs)
        finally:
            self.stack.pop()
            wall, cpu = time.perf_counter() - frame[1], time.process_time() - frame[2]
            slot = self.times[self.entry][label]
            slot[0] += wall - frame[3]
            slot[1] += cpu - frame[4]
            if self.stack:
                self.stack[-1][3] += wall
                self.stack[-1][4] += cpu


def side_label(side: Any) -> str:
    return "float64" if getattr(side, "reference", False) else "tested"


def instrument(clocks: Clocks) -> None:
    """Wrap the plugin's functions of each phase (module globals and class attributes)."""
    from pytest_msprobe.frameworks import conv, linear_grads, pytorch, torch_engine
    from pytest_msprobe.inputs import rebuild
    from pytest_msprobe.judging import compare
    from pytest_msprobe.judging.standards import basic, dtype
    from pytest_msprobe.reports import csv_files, journal

    def by_side(fn: Callable[..., Any], side_at: int) -> Callable[..., Any]:
        """fn timed as the tested or the float64 phase, by its Side argument at `side_at`."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if clocks.stack and clocks.stack[-1][0] == STICKY:
                return fn(*args, **kwargs)
            return clocks.run(side_label(args[side_at]), fn, *args, **kwargs)

        return wrapper

    for module in (pytorch, torch_engine):
        for name in ("forward", "gradients"):  # (side, call, ...)
            setattr(module, name, by_side(getattr(module, name), 0))
    # The benchmark's gradients from a conv's or a linear's backward kernels alone: (call, grad_outputs, side).
    for kernels in (conv, linear_grads):
        kernels.bench_gradients = by_side(kernels.bench_gradients, 2)  # type: ignore[attr-defined]
    rebuild.Rebuilder.rebuild = clocks.timed("inputs", rebuild.Rebuilder.rebuild)  # type: ignore[method-assign]
    torch_engine.Side.place = clocks.timed("copies", torch_engine.Side.place)  # type: ignore[method-assign]
    torch_engine.Side.place_grad = clocks.timed("copies", torch_engine.Side.place_grad)  # type: ignore[method-assign]
    torch_engine.to_array = clocks.timed("copies", torch_engine.to_array)
    compare.metrics = clocks.timed("metrics", compare.metrics)
    output = clocks.timed(STICKY, torch_engine.ExtraBenchRuns.output)

    def extra_run(self: Any, key: tuple, *args: Any, **kwargs: Any) -> Any:
        """The extra run, its time also under its name (magnitude, spread, ...): `runs` in the JSON."""
        cpu0 = time.process_time()
        try:
            return output(self, key, *args, **kwargs)
        finally:
            if not (clocks.stack and clocks.stack[-1][0] == STICKY):
                clocks.runs[clocks.entry][str(key[0])] += time.process_time() - cpu0

    torch_engine.ExtraBenchRuns.output = extra_run  # type: ignore[method-assign]
    dtype.DtypeStandard.judge = clocks.timed("verdict", dtype.DtypeStandard.judge)  # type: ignore[method-assign]
    basic.BasicStandard.judge = clocks.timed("verdict", basic.BasicStandard.judge)  # type: ignore[method-assign]
    csv_files.CsvWriter.write_api = clocks.timed("CSV", csv_files.CsvWriter.write_api)  # type: ignore[method-assign]
    for name in ("add", "start", "end"):
        setattr(journal.Journal, name, clocks.timed("CSV", getattr(journal.Journal, name)))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--standard", default="basic")
    parser.add_argument("--dump", type=Path, default=DEFAULT_DUMP)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--out", type=Path, default=Path("/tmp/where_out"))
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    import pytest

    clocks = Clocks()
    instrument(clocks)

    class ItemClock:
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Any:
            clocks.entry = item.name
            frame: list[Any] = ["other", time.perf_counter(), time.process_time(), 0.0, 0.0]
            clocks.stack.append(frame)
            try:
                return (yield)
            finally:
                clocks.stack.pop()
                slot = clocks.times[item.name]["other"]
                slot[0] += time.perf_counter() - frame[1] - frame[3]
                slot[1] += time.process_time() - frame[2] - frame[4]
                clocks.entry = "(session)"

    wall0, cpu0 = time.perf_counter(), time.process_time()
    pytest_args = [
        "-p", "no:cacheprovider", "-q", "--msprobe-dump", str(args.dump), "--msprobe-device", "cpu",
        "--msprobe-standard", args.standard, "--msprobe-out", str(args.out), *args.pytest_args,
    ]  # fmt: skip
    code = pytest.main(pytest_args, plugins=[ItemClock()])
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    record = {
        "standard": args.standard,
        "dump": str(args.dump),
        "command": "python -m bench.llm_width.where " + " ".join(argv),
        "exit": int(code),
        "wall": wall,
        "cpu": cpu,
        "user": usage.ru_utime,
        "system": usage.ru_stime,
        "peak_rss_gib": usage.ru_maxrss / 2**20,
        "load1": os.getloadavg()[0],
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "entries": {entry: dict(phases) for entry, phases in clocks.times.items()},
        "runs": {entry: dict(runs) for entry, runs in clocks.runs.items()},
    }
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s; load {record['load1']:.2f}", file=sys.stderr)
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
