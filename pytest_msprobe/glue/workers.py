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
from pathlib import Path

import pytest

from ..distributed import allocator, hosts
from ..frameworks import devices
from ..reports.csv_files import crash_result
from ..results import REPORT_ATTRIBUTE
from . import lost_hosts, remote

DEVICE_ID = "msprobe_device_id"
THREADS = "msprobe_threads"
HOST_WORKERS = "msprobe_host_workers"  # how many workers share the worker's host, and its device ids
REFERENCES = "msprobe_references"  # the controller's reference registrations, each worker's checked against


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


def remote_hosts(config: pytest.Config) -> bool:
    """This controller starts workers on other hosts (`--tx ssh=...`): their devices are not its own."""
    return distributing(config) and any(hosts.is_remote(spec) for spec in config.option.tx)


def workers_per_host(config: pytest.Config) -> int:
    """How many workers share one host's device ids: the most on one host (1 without xdist)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return int(workerinput.get(HOST_WORKERS, workerinput.get("workercount", 1)))
    if not distributing(config):
        return 1
    return max(hosts.plan(config.option.tx).values())


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
        check_paths_travel(config)
        controller = Controller(config, run)
        config.pluginmanager.register(controller, "msprobe-xdist")
        config.pluginmanager.register(controller.lost, "msprobe-lost-hosts")


def check_paths_travel(config: pytest.Config) -> None:
    """A usage error for an argument xdist would fail on when it starts a worker on another host."""
    if not any(hosts.is_remote(spec) or "chdir" in hosts.spec_keys(spec) for spec in hosts.expand(config.option.tx)):
        return
    import _pytest  # xdist's rsync roots: pytest's two packages, and those named

    named = [*(config.option.rsyncdir or ()), *config.getini("rsyncdirs")]
    roots = [Path(pytest.__file__).parent, Path(_pytest.__file__).parent, *(Path(p).resolve() for p in named)]
    refused = hosts.rewritten_paths(config.invocation_params.args, roots)
    if refused:
        raise pytest.UsageError(
            f"pytest-xdist cannot hand the argument {refused[0]} to workers on other hosts: it rewrites every "
            "argument that is a path here relative to its rsync roots, and this one is outside them. Give an "
            "option and its path as one argument (--msprobe-dump=/shared/dump, --msprobe-out=out) or set it in "
            "the ini file: every host reads the dumps at the same path"
        )


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
        self.pools = hosts.HostPools(run.device_ids)
        self.plan = hosts.plan(config.option.tx)
        self.threads = devices.cpu_threads()
        self.down: dict[str, str] = {}  # worker -> why it went down, for its crashed entry
        self.shared: dict[bool, list[dict]] = {}  # the dumps as workers are told them, by remoteness
        self.lost = lost_hosts.LostHosts(config, run, self.say)
        self.judged: set[str] = set()  # node ids whose call report (the verdict) arrived
        self.allocator = allocator.choose(os.environ)

    def device(self, device_id: int | None) -> str:
        kind = self.run.device_kind
        if device_id is None:
            return kind
        if kind == devices.AUTO:
            return f"id {device_id} (auto: the host's npu, cuda or cpu)"
        name = devices.device_name(kind, device_id)
        return name if name != kind else f"{kind} (id {device_id}, unused on {kind})"

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        ids = ",".join(map(str, self.run.device_ids))
        allocator_line = f"msprobe: the workers' allocator: {self.allocator.text}"
        if len(self.plan) == 1 and hosts.LOCAL in self.plan:
            return [
                f"msprobe: {planned_workers(config)} xdist workers, one device each from ids {ids}, "
                f"{devices.threads_text(self.threads)} each",
                allocator_line,
            ]
        lines = [
            f"msprobe: {planned_workers(config)} xdist workers on {len(self.plan)} host(s), one device each "
            f"from ids {ids} of its own host"
        ]
        for host, count in self.plan.items():
            first = ",".join(map(str, self.run.device_ids[:count]))
            lines.append(f"msprobe: host {host}: {count} workers, device ids {first}")
        return [*lines, allocator_line.replace("the workers'", "this host's workers'")]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self) -> None:
        allocator.preload(self.allocator, os.environ)  # the workers start with the controller's environment

    def pytest_unconfigure(self) -> None:
        allocator.unload(os.environ)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        worker, spec = node.gateway.id, node.gateway.spec
        host = hosts.host_of(spec)
        device_id = self.pools.allocate(host, worker)
        node.workerinput[DEVICE_ID] = device_id
        threads = self.threads if self.threads or not hosts.is_remote(spec) else user_threads()
        node.workerinput[THREADS] = threads
        node.workerinput[HOST_WORKERS] = self.plan.get(host, 1)
        node.workerinput[remote.HOST] = host
        node.workerinput[remote.DUMPS] = self.dumps_for(hosts.is_remote(spec))
        node.workerinput[REFERENCES] = self.run.references.signatures()
        where = "" if set(self.plan) == {hosts.LOCAL} else f"host {host}, "
        self.say(f"msprobe: [{worker}] {where}device {self.device(device_id)}, {devices.threads_text(threads)}")

    def dumps_for(self, on_another_host: bool) -> list[dict]:
        """The dumps as this run names them; with their items for a worker on another host."""
        if on_another_host not in self.shared:
            described = remote.describe(self.run.dump_files, self.config.rootpath, with_items=on_another_host)
            self.shared[on_another_host] = [dump.to_dict() for dump in described]
        return self.shared[on_another_host]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        worker = node.gateway.id
        device_id = self.pools.release(worker)
        if error is not None:
            cause = exit_cause(node) or error
            self.down[worker] = f"{self.device(device_id)}: {cause}"
            if hosts.is_remote(node.gateway.spec):  # its ssh connection ended: the host may be gone
                host = self.pools.host(worker)
                self.down[worker] = f"{self.device(device_id)} of host {host}: its connection ended ({cause})"
                self.lost.watch()

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
        if hosts.is_remote(getattr(getattr(getattr(report, "node", None), "gateway", None), "spec", "popen")):
            message = f"the xdist worker {worker} was lost while checking this entry on {self.down.get(worker, '?')}"
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


def user_threads() -> int | None:
    """OMP_NUM_THREADS as the user set it here, for a worker on another host: the environment
    does not travel over ssh, and a worker there would run with torch's default instead."""
    try:
        return int(os.environ.get("OMP_NUM_THREADS", "")) or None
    except ValueError:
        return None


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
