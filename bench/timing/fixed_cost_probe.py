"""A pytest plugin for bench.timing.fixed_costs: where one process's CPU goes, fixed cost by fixed cost.

Loaded with `-p bench.timing.fixed_cost_probe` (the repository root on PYTHONPATH), in a run of the
plugin and in a run of the floor alike; pytest-xdist passes it on to the workers. It reads the
process's CPU time (user + sys, getrusage) at the points a run passes once (this module's import:
the interpreter and pytest started; pytest_configure's start; the session's start; collection; the
first and last entry; the session's end; the terminal summary; pytest_unconfigure; its atexit hook,
after pytest's cleanups) and, in a run of the plugin, times the calls that are a fixed cost or an
entry's (exclusive of the timed calls inside them): the dump's parse, the framework's import, the
meta device's warm-up, an entry's inputs, the API's own runs (the tested side, the float64 bench,
the extra runs of a standard), the judging, the result's trip to the reporter, the journal, the CSV
rows, the manifest and the HTML page. At pytest_unconfigure each process appends one JSON line to
the file named by $MSPROBE_BENCH_FIXED (which process it was: serial, controller, gw0, ...; the
entries it ran, the checkpoints, the timed calls), and one more at exit. A timed call costs two
clock reads; a few dozen an entry.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import resource
import sys
from collections import defaultdict
from dataclasses import replace
from typing import Any, Callable

import pytest


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


_marks: dict[str, float] = {"probe imported": cpu()}  # the interpreter started, pytest imported, its args read
_spent: dict[str, float] = defaultdict(float)
_calls: dict[str, int] = defaultdict(int)
# The timed calls by the part of the run they fell in: start (to collection), collection, entries, end.
_window = "start"
_within: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
_stack: list[float] = []  # per open timed call: the CPU of the timed calls inside it
_entries = 0
_torch_side_wrapped = False


def timed(phase: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = cpu()
        _stack.append(0.0)
        try:
            return fn(*args, **kwargs)
        finally:
            inner = _stack.pop()
            spent = cpu() - start
            _spent[phase] += spent - inner
            _within[_window][phase] += spent - inner
            _calls[phase] += 1
            if _stack:
                _stack[-1] += spent

    return wrapper


def _patch(owner: Any, name: str, phase: str) -> None:
    setattr(owner, name, timed(phase, getattr(owner, name)))


def _wrap_plugin() -> None:
    """The plugin's calls, wrapped before its pytest_configure registers anything (this hook runs first):
    the modules its configure imports anyway (numpy, no torch)."""
    from pytest_msprobe.checking import check
    from pytest_msprobe.frameworks import output_bounds
    from pytest_msprobe.glue import items, remote, reporter, warmup
    from pytest_msprobe.inputs import rebuild
    from pytest_msprobe.judging import compare
    from pytest_msprobe.reports import csv_files, html, journal, manifest
    from pytest_msprobe.results import EntryResult

    _patch(items, "read_dump", "dump parse")
    _patch(remote, "read_dump", "dump parse")
    _patch(warmup, "for_framework", "framework import")
    _patch(output_bounds, "warm_up", "meta device warm-up")
    _patch(rebuild.Rebuilder, "rebuild", "entry: inputs")
    _patch(compare, "metrics", "entry: judging")
    _patch(check, "compare", "entry: judging")
    _patch(EntryResult, "to_dict", "entry: result to the reporter")
    _patch(EntryResult, "from_dict", "entry: result to the reporter")
    for name in ("start", "end", "add", "close"):
        _patch(journal.Journal, name, "journal")
    _patch(csv_files.CsvWriter, "write_api", "CSV rows")
    _patch(csv_files.CsvWriter, "close", "CSV rows")
    _patch(manifest, "write", "manifest")
    _patch(html, "write_run", "HTML report")
    _patch(reporter.CsvReporter, "pytest_terminal_summary", "summary")


def _wrap_torch_side() -> None:
    """The API's own runs, once the warm-up imported torch (where an entry needs it)."""
    global _torch_side_wrapped
    pytorch = sys.modules.get("pytest_msprobe.frameworks.pytorch")
    if pytorch is None or _torch_side_wrapped:
        return
    _torch_side_wrapped = True
    from pytest_msprobe.frameworks import torch_engine

    _patch(torch_engine, "run_bench", "entry: API runs")
    _patch(torch_engine.ExtraBenchRuns, "output", "entry: API runs")
    run_sides = pytorch.run_sides

    def run_sides_timed(call: Any, sides: Any, options: Any) -> Any:
        return run_sides(call, replace(sides, tested=timed("entry: API runs", sides.tested)), options)

    pytorch.run_sides = run_sides_timed


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _marks["configure start"] = cpu()
    if config.getoption("msprobe_dump", None):
        _wrap_plugin()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _marks["session start"] = cpu()  # every plugin configured


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    global _window
    _window = "collection"
    _marks["collection start"] = cpu()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> Any:
    _marks["collection finish"] = cpu()  # the warm-up runs in the plugin's collection_finish
    try:
        return (yield)
    finally:
        _marks["collection done"] = cpu()
        _wrap_torch_side()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    global _entries, _window
    _window = "entries"
    start = cpu()
    _marks.setdefault("first entry", start)
    try:
        return (yield)
    finally:
        _entries += 1
        _marks["last entry done"] = cpu()
        _spent["entries (whole protocol)"] += _marks["last entry done"] - start


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    global _window
    _window = "end"
    _marks["session finish"] = cpu()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any) -> Any:
    _marks["terminal summary"] = cpu()
    try:
        return (yield)
    finally:
        _marks["terminal summary done"] = cpu()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    _marks["unconfigure"] = cpu()
    for name in ("floor_torch", "floor_frozen"):  # the floor's plugin imports torch in its pytest_configure
        floor_torch = getattr(sys.modules.get(name), "TORCH_CPU", 0.0)
        _spent["framework import"] += floor_torch
        _within["start"]["framework import"] += floor_torch
    path = os.environ.get("MSPROBE_BENCH_FIXED")
    if not path:
        return
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        process = workerinput["workerid"]
    else:
        process = "controller" if getattr(config.option, "dist", "no") != "no" else "serial"
    line = {"process": process, "entries": _entries, "marks": _marks, "spent": _spent, "within": _within}
    line["calls"] = _calls
    _append(path, line)
    # pytest's cleanups come after this hook (its unraisable-exception check collects five times);
    # the atexit hooks registered after this module's import run before this one.
    atexit.register(lambda: _append(path, {"process": process, "at exit": cpu()}))


def _append(path: str, line: dict) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
