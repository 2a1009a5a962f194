"""A host that drops out of a distributed run: the other hosts finish it.

pytest-xdist (3.8) replaces a worker that went down by starting another on the same gateway
spec (DSession.worker_errordown calls _clone_node), with no limit under `--tx` (the default
`--max-worker-restart` is 4 x `-n`, and None without `-n`). When the worker's connection died
with its host, starting one there raises (execnet.HostNotFound: ssh cannot connect) out of
xdist's event loop, and the whole run ends in an INTERNALERROR, every host with it. LostHosts
wraps that one method of the running DSession: a worker that cannot start on its host is
reported and its host counted lost; the entries it had queued go to the live workers, and when
none is left to take them the run ends cleanly (those entries never ran: `--msprobe-resume`
runs them). The entry each lost worker was checking is its error row, written by the Controller.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from ..distributed import hosts


class LostHosts:
    """The controller's side of hosts that drop out (registered beside the Controller)."""

    def __init__(self, config: pytest.Config, run: Any, say: Callable[[str], None]):
        self.config = config
        self.run = run  # its lost_hosts: host -> why, read by the reporter
        self.say = say
        self.wrapped = False
        self.collected: list[str] = []
        self.reported: set[str] = set()

    def watch(self) -> None:
        """Called when a worker on another host went down, before xdist starts its replacement."""
        dsession = self.config.pluginmanager.getplugin("dsession")
        if self.wrapped or dsession is None or not callable(getattr(dsession, "_clone_node", None)):
            return  # another xdist: its own behaviour
        start = dsession._clone_node

        def clone_or_give_up(node: Any) -> Any:
            try:
                return start(node)
            except Exception as exc:  # noqa: BLE001 - HostNotFound, OSError, EOFError: any way it cannot start
                self.give_up(dsession, node, exc)
                return None

        dsession._clone_node = clone_or_give_up
        self.wrapped = True

    def give_up(self, dsession: Any, node: Any, exc: BaseException) -> None:
        host = hosts.host_of(node.gateway.spec)
        self.run.lost_hosts[host] = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
        self.say(
            f"msprobe: host {host} lost: no worker starts there in place of {node.gateway.id} "
            f"({self.run.lost_hosts[host]}); the other hosts go on"
        )
        live = [other for other in dsession._active_nodes if other is not node and not other.shutting_down]
        if not live:
            dsession.triggershutdown()  # nobody can take what is queued: end, instead of waiting for nobody

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.collected:
            self.collected = list(ids)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reported.add(report.nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.run.lost_hosts:
            return
        never = [node_id for node_id in self.collected if node_id not in self.reported]
        reporter = self.config.pluginmanager.get_plugin("msprobe-reporter")
        files = [str(writer.result_path) for writer in getattr(reporter, "writers", {}).values()]
        resume = f": --msprobe-resume {files[0]} runs them" if len(files) == 1 else ": --msprobe-resume runs them"
        lost = ", ".join(sorted(self.run.lost_hosts))
        terminalreporter.write_line(f"hosts lost: {lost}; {len(never)} entries never ran{resume if never else ''}")
