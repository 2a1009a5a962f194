"""A pytest plugin for the test suite's own time (issue 29): each test's wall and CPU seconds.

Loaded with `-p bench.timing.per_test_cpu` (the repository root is on sys.path in a run from it);
pytest-xdist passes it on to the workers. Where $MSPROBE_BENCH_TESTS names a folder, each process
that runs tests appends a line per test to `tests_<worker>.tsv` there: the node id, its wall seconds
and its CPU seconds, the process's and those of the children it waited for (a test's subprocesses
and the xdist workers of a nested run). Then

    python -m bench.timing.per_test_cpu FOLDER [--top 70]

prints the sums, how the CPU splits at 1 and 5 seconds a test, and the costliest tests:

    MSPROBE_BENCH_TESTS=/tmp/t ./run-pytest -p bench.timing.per_test_cpu -n auto -q -p no:cacheprovider
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

FOLDER = "MSPROBE_BENCH_TESTS"


def cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, Any, Any]:
    folder = os.environ.get(FOLDER)
    wall, used = time.perf_counter(), cpu()
    try:
        return (yield)
    finally:
        if folder:
            name = f"tests_{os.environ.get('PYTEST_XDIST_WORKER', 'serial')}.tsv"
            with open(Path(folder) / name, "a", encoding="utf-8") as out:
                out.write(f"{item.nodeid}\t{time.perf_counter() - wall:.2f}\t{cpu() - used:.2f}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Sum the per-test times this plugin wrote.")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=70)
    args = parser.parse_args(argv)
    tests = []
    for path in sorted(args.folder.glob("tests_*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            nodeid, wall, used = line.rsplit("\t", 2)
            tests.append((float(used), float(wall), nodeid))
    tests.sort(reverse=True)
    total = sum(used for used, _, _ in tests)
    print(f"{len(tests)} tests, {total:.1f} CPU s, {sum(wall for _, wall, _ in tests):.1f} wall s summed")
    for low, high in ((5, None), (1, 5), (0, 1)):
        part = [used for used, _, _ in tests if used >= low and (high is None or used < high)]
        span = f">= {low} s" if high is None else f"{low}-{high} s"
        print(f"  tests of {span} CPU: {len(part)}, {sum(part):.1f} CPU s")
    print("| CPU s | wall s | test |\n|---:|---:|---|")
    for used, wall, nodeid in tests[: args.top]:
        print(f"| {used:.2f} | {wall:.2f} | {nodeid} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
