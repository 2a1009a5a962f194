"""pytest glue for resume and baseline: which entries run, which are expected to fail.

Both files are read once, by the process that writes the CSVs, and shipped to
xdist workers in `workerinput`: every worker, a worker restarted after a crash
included, must collect and deselect exactly the same items while the controller
keeps appending rows to the resumed file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from . import resume
from .baseline import Baseline
from .dump import parse_entry_name
from .items import EntryItem
from .report import ReportError, read_entry_statuses, read_finished_apis
from .results import ERROR

FINISHED_KEY = "msprobe_finished"
BASELINE_KEY = "msprobe_baseline_failed"


class Selection:
    def __init__(
        self,
        resumed: Path | None = None,
        finished: Iterable[str] = (),
        baseline: Baseline | None = None,
        earlier: Iterable[tuple[str, str, str]] = (),
    ):
        self.resumed = resumed  # the result CSV new rows are appended to
        self.finished = set(finished)
        self.baseline = baseline
        # (api, direction, status) of the rows the resumed file held: the controller's, for the verdict
        self.earlier = list(earlier)
        self.deselected = 0

    @classmethod
    def from_config(cls, config: pytest.Config, base: Path, resume_arg: str, baseline_arg: str) -> Selection:
        worker = getattr(config, "workerinput", None)
        resumed = base / resume_arg if resume_arg else None
        try:
            finished = _finished(resumed, worker) if resumed else set()
            earlier = read_entry_statuses(resumed) if resumed and worker is None else []
        except ReportError as exc:
            raise pytest.UsageError(f"--msprobe-resume: {exc}") from None
        try:
            baseline = _baseline(base / baseline_arg, worker) if baseline_arg else None
        except ReportError as exc:
            raise pytest.UsageError(f"--msprobe-baseline: {exc}") from None
        return cls(resumed, finished, baseline, earlier)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[FINISHED_KEY] = sorted(self.finished)
        if self.baseline is not None:
            node.workerinput[BASELINE_KEY] = sorted(list(pair) for pair in self.baseline.failed)

    def pytest_collection_modifyitems(self, config: pytest.Config, items) -> None:
        kept, done = [], []
        for item in items:
            entry = parse_entry_name(item.entry) if isinstance(item, EntryItem) else None
            # A name that is no API name has its row under the test's name (items.py).
            if isinstance(item, EntryItem) and (entry.prefix if entry else item.name) in self.finished:
                done.append(item)
                continue
            if entry is not None and self.baseline and self.baseline.failed_before(entry.prefix, entry.direction):
                # Non-strict: a known failure that now passes is reported, never a CI failure.
                item.add_marker(pytest.mark.xfail(reason=self.baseline.reason(), strict=False))
            kept.append(item)
        if done:
            config.hook.pytest_deselected(items=done)
            items[:] = kept
        self.deselected = len(done)

    def earlier_errors(self) -> list[tuple[str, str]]:
        """Entries the resumed file holds as error that no baseline expects."""
        return [
            (api, direction)
            for api, direction, status in self.earlier
            if status == ERROR and not (self.baseline and self.baseline.failed_before(api, direction))
        ]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A resumed run's verdict is its whole file's: the rows it held count as the new ones do.

        Nothing left to run is not "no tests": the file is finished, and its errors fail the run.
        """
        if self.resumed is None or hasattr(session.config, "workerinput"):
            return
        status = session.exitstatus
        if status == pytest.ExitCode.OK or (status == pytest.ExitCode.NO_TESTS_COLLECTED and self.deselected):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if self.earlier_errors() else pytest.ExitCode.OK

    def pytest_report_header(self, config: pytest.Config):
        lines = []
        if self.resumed is not None:
            lines.append(
                f"msprobe: resuming {self.resumed}: {len(self.finished)} APIs already finished are not run again"
            )
        if self.baseline is not None:
            lines.append(f"msprobe: {self.baseline.describe()}")
        return lines


def _finished(resumed: Path, worker: dict | None) -> set[str]:
    if worker is None:
        return resume.prepare(resumed)  # the one process that writes: it also cuts a torn tail
    return set(worker[FINISHED_KEY]) if FINISHED_KEY in worker else read_finished_apis(resumed)


def _baseline(path: Path, worker: dict | None) -> Baseline:
    if worker is not None and BASELINE_KEY in worker:
        return Baseline(path, worker[BASELINE_KEY])
    return Baseline.read(path)
