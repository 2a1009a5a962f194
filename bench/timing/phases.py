"""A pytest plugin for bench.timing.conv_work: where a check's CPU goes, phase by phase.

Loaded with `-p bench.timing.phases` (the repository root on PYTHONPATH). Once the items are
collected (the plugin has set the threads and the huge pages by then, and imported nothing heavy),
it wraps the functions a PyTorch check runs through and times each call, exclusive of the wrapped
calls inside it: the rebuild of the inputs, the float64 benchmark, the tested run, the standard's
extra benchmark runs, the pairing (outputs to numpy), the metrics, and the rest of the comparison
(the structural checks and the standard). At the end it appends one JSON line to the file named by
$MSPROBE_BENCH_PHASES: CPU seconds (process time) and wall seconds by phase, and the whole process's.
A wrapper costs two clock reads a call, a few dozen calls an entry.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import time
from collections import defaultdict
from dataclasses import replace
from typing import Any, Callable

EXTRA = "extra benchmark runs"
_cpu: dict[str, float] = defaultdict(float)
_wall: dict[str, float] = defaultdict(float)
_stack: list[list[float]] = []  # per open call: [cpu, wall] of the wrapped calls inside it


def timed(phase: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        _stack.append([0.0, 0.0])
        try:
            return fn(*args, **kwargs)
        finally:
            inner = _stack.pop()
            spent_cpu, spent_wall = time.process_time() - cpu, time.perf_counter() - wall
            _cpu[phase] += spent_cpu - inner[0]
            _wall[phase] += spent_wall - inner[1]
            if _stack:
                _stack[-1][0] += spent_cpu
                _stack[-1][1] += spent_wall

    return wrapper


def pytest_collection_finish(session) -> None:
    from pytest_msprobe.checking import check
    from pytest_msprobe.frameworks import pytorch, torch_engine
    from pytest_msprobe.inputs import rebuild as inputs
    from pytest_msprobe.judging import compare

    inputs.Rebuilder.rebuild = timed("inputs (rebuild)", inputs.Rebuilder.rebuild)
    torch_engine.run_bench = timed("benchmark (float64)", torch_engine.run_bench)
    torch_engine.ExtraBenchRuns.output = timed(EXTRA, torch_engine.ExtraBenchRuns.output)
    compare.metrics = timed("metrics", compare.metrics)
    check.compare = timed("standard and checks", check.compare)
    run_sides = pytorch.run_sides

    def run_sides_timed(call, sides, keep):
        sides = replace(sides, tested=timed("tested run", sides.tested), pair=timed("pairs (to numpy)", sides.pair))
        return run_sides(call, sides, keep)

    pytorch.run_sides = run_sides_timed


def pytest_unconfigure(config) -> None:
    path = os.environ.get("MSPROBE_BENCH_PHASES")
    if not path:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = {
        "cpu": dict(_cpu),
        "wall": dict(_wall),
        "process_cpu": usage.ru_utime + usage.ru_stime,
        "process_user": usage.ru_utime,
        "process_sys": usage.ru_stime,
    }
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
