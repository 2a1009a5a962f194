"""pytest-xdist glue: one device per worker, and a worker's crash as the error row of its entry.

Registered only when pytest-xdist is there and the run is distributed, as pytest-randomly
does with its xdist hooks. Data flows the xdist way: the controller hands each worker its
device id and thread count through `workerinput` (pytest_configure_node) and takes the id
back when the worker goes down (pytest_testnodedown), so a worker that replaces a crashed
one gets a free id; results come back on the workers' test reports.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess

import pytest

from . import allocator, devices
from .report import crash_result
from .results import REPORT_ATTRIBUTE

DEVICE_ID = "msprobe_device_id"
THREADS = "msprobe_threads"


def distributing(config: pytest.Config) -> bool:
    """This process is an xdist controller: it hands the items to workers and runs none."""
    return (
        not hasattr(config, "workerinput")
        and getattr(config.option, "dist", "no") != "no"
        and bool(getattr(config.option, "tx", None))
        and not config.option.collectonly
    )


def planned_workers(config: pytest.Config) -> int:
    """How many workers this run starts (1 without xdist)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return int(workerinput.get("workercount", 1))
    if not distributing(config):
        return 1
    # As xdist's NodeManager reads them: `-n 4` is four `popen`, `--tx 3*popen` three.
    count = 0
    for spec in config.option.tx:
        head, star, _ = spec.partition("*")
        count += int(head) if star and head.isdigit() else 1
    return count


def device_id(config: pytest.Config, ids: list[int]) -> int:
    """The id this process binds: the one its controller gave it, else the first named."""
    return getattr(config, "workerinput", {}).get(DEVICE_ID, ids[0])


def setup_cpu(config: pytest.Config) -> str | None:
    """Before anything imports torch, in a process that checks entries: its thread count
    (a worker's from its controller) and torch's huge pages. Returns the header note on
    the threads; None in the controller."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None and distributing(config):
        return None  # the controller checks no entry
    threads = workerinput[THREADS] if workerinput and THREADS in workerinput else devices.cpu_threads()
    devices.limit_threads(threads)
    devices.use_huge_pages()
    if workerinput is not None:
        allocator.unload(os.environ)  # preloaded at its start, if at all; its children get the user's environment
        config.pluginmanager.register(Worker(), "msprobe-worker")
    return devices.threads_text(threads)


def register(config: pytest.Config, run) -> None:
    if config.pluginmanager.hasplugin("xdist") and distributing(config):
        config.pluginmanager.register(Controller(config, run), "msprobe-xdist")


class Worker:
    """A worker's side: a process that ends with its session."""

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self) -> None:
        # Collect once, then freeze what is left (torch's ~170,000 objects, the run's): pytest's
        # five collections at exit and the interpreter's last one then skip it, a second or more
        # of CPU a worker (bench/timing/results_xdist.md). Never in-process, where it would keep cycles.
        gc.collect()
        gc.freeze()


class Controller:
    """The xdist controller's side: the device pool, the worker lines, crashed entries."""

    def __init__(self, config: pytest.Config, run):
        self.config = config
        self.run = run
        self.pool = devices.DevicePool(run.device_ids)
        self.threads = devices.cpu_threads()
        self.down: dict[str, str] = {}  # worker -> why it went down, for its crashed entry
        self.judged: set[str] = set()  # node ids whose call report (the verdict) arrived
        self.allocator = allocator.choose(os.environ)

    def device(self, device_id: int | None) -> str:
        kind = self.run.device_kind
        if device_id is None:
            return kind
        name = devices.device_name(kind, device_id)
        return name if name != kind else f"{kind} (id {device_id}, unused on {kind})"

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        ids = ",".join(map(str, self.run.device_ids))
        return [
            f"msprobe: {planned_workers(config)} xdist workers, one device each from ids {ids}, "
            f"{devices.threads_text(self.threads)} each",
            f"msprobe: the workers' allocator: {self.allocator.text}",
        ]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self) -> None:
        allocator.preload(self.allocator, os.environ)  # the workers start with the controller's environment

    def pytest_unconfigure(self) -> None:
        allocator.unload(os.environ)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        worker = node.gateway.id
        device_id = self.pool.allocate(worker)
        node.workerinput[DEVICE_ID] = device_id
        node.workerinput[THREADS] = self.threads
        self.say(f"msprobe: [{worker}] device {self.device(device_id)}, {devices.threads_text(self.threads)}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        device_id = self.pool.release(node.gateway.id)
        if error is not None:
            self.down[node.gateway.id] = f"{self.device(device_id)}: {exit_cause(node) or error}"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.judged.add(report.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "?")
        if crashitem in self.judged:
            # The worker died after the entry's verdict reached us (in its teardown, or before it
            # said it was done): the verdict and its row stand, and the crash is no second outcome.
            report.outcome, report.when, report.longrepr = "passed", "teardown", None
            self.say(
                f"msprobe: the xdist worker {worker} went down after {crashitem.partition('::')[2]} "
                "was judged: its result stands"
            )
            return
        message = (
            f"the xdist worker {worker} crashed while checking this entry on "
            f"{self.down.get(worker, 'its device')} (a segfault, an abort or the OOM killer in the API)"
        )
        result = crash_result(crashitem, message)
        if result is not None:
            setattr(report, REPORT_ATTRIBUTE, result.to_dict())  # the reporter writes its error row like any other
            entry = crashitem.partition("::")[2]
            report.longrepr = f"{entry}: {message}"
            report.location = (report.location[0], None, entry)

    def say(self, line: str) -> None:
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.ensure_newline()
            terminal.write_line(line)


def exit_cause(node) -> str:
    """`killed by SIGSEGV`, `exit status 3`: how a worker's process ended, where execnet
    started it here (its Popen is private to execnet, hence the care)."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if not isinstance(popen, subprocess.Popen):
        return ""
    try:
        code = popen.wait(timeout=2)
    except subprocess.TimeoutExpired:
        return ""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
