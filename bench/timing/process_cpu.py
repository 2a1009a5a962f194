"""A pytest plugin for bench.timing.xdist: where a run's CPU goes, process by process.

Loaded with `-p bench.timing.process_cpu` (the repository root on PYTHONPATH); pytest-xdist passes
it on to the workers. At its end each process appends one JSON line to the file named by
$MSPROBE_BENCH_CPU: which process it was (`serial`, `controller`, or the worker's id), the entries
it ran, its CPU time (user + sys) by the end of its first entry (Python, pytest, the plugin,
collection, `import torch`: what every worker pays again) and in all, and when it ended (epoch
seconds: how long one worker sat idle while another still ran, bench.timing.balance).
"""

from __future__ import annotations

import json
import os
import resource
import time

_first_entry_cpu = None
_entries = 0


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pytest_runtest_logfinish(nodeid, location) -> None:
    global _first_entry_cpu, _entries
    _entries += 1
    if _first_entry_cpu is None:
        _first_entry_cpu = cpu()


def pytest_unconfigure(config) -> None:
    path = os.environ.get("MSPROBE_BENCH_CPU")
    if not path:
        return
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        process = workerinput["workerid"]
    else:
        process = "controller" if getattr(config.option, "dist", "no") != "no" else "serial"
    line = {"process": process, "entries": _entries, "cpu": cpu(), "first_entry_cpu": _first_entry_cpu}
    line["end"] = time.time()
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
