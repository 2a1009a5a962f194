"""pytest glue for resume and baseline: which entries run, which are expected to fail.

Both files are read once, by the process that writes the CSVs, and shipped to
xdist workers in `workerinput`: every worker, a worker restarted after a crash
included, must collect and deselect exactly the same items while the controller
keeps appending rows to the resumed file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from ..dumps.dump import FORWARD, parse_entry_name
from ..reports import provenance, resume
from ..reports.baseline import Baseline
from ..reports.csv_files import ReportError, read_finished_apis
from ..reports.summary import failing
from ..results import EntryResult
from ..untrusted import encodable
from .items import EntryItem

FINISHED_KEY = "msprobe_finished"
BASELINE_KEY = "msprobe_baseline_failed"


class Selection:
    def __init__(
        self,
        resumed: resume.Resumed | None = None,
        finished: Iterable[tuple[str, str]] = (),
        baseline: Baseline | None = None,
        strict: bool = False,
        notes: Sequence[str] = (),
    ):
        self.state = resumed  # the controller's (or a serial run's): what the resumed files held
        self.resumed = resumed.result_path if resumed else None  # the result CSV new rows are appended to
        self.finished = {(api, direction) for api, direction in finished}  # entries not run again
        self.baseline = baseline
        self.strict = strict
        self.notes = list(notes)  # for the header: a CSV with APIs the dump lacks
        self.deselected = 0

    @property
    def earlier(self) -> list[EntryResult]:
        """The results of the entries the resumed files held before this run."""
        return self.state.earlier if self.state else []

    @classmethod
    def from_config(
        cls,
        config: pytest.Config,
        base: Path,
        resume_arg: str,
        baseline_arg: str,
        dumps: Sequence[Path] = (),
        strict: bool = False,
    ) -> Selection:
        worker = getattr(config, "workerinput", None)
        resumed_path = base / resume_arg if resume_arg else None
        # The dump's entries: a CSV of another dump is refused, and a row a partial run left
        # without a direction is completed. Read by the process that writes, as the files are.
        read = worker is None and len(dumps) == 1 and bool(resume_arg or baseline_arg)
        entries = provenance.dump_entries(dumps[0]) if read else None
        notes: list[str] = []
        state, finished = None, set()
        if resumed_path is not None:
            try:
                if worker is None:
                    _check("--msprobe-resume", resumed_path, dumps, entries, notes)
                    state = resume.resume(resumed_path, entries)
                    finished = state.finished
                else:
                    finished = _finished(resumed_path, worker)
            except ReportError as exc:
                raise pytest.UsageError(f"--msprobe-resume: {exc}") from None
        try:
            baseline = _baseline(base / baseline_arg, worker, strict) if baseline_arg else None
            if baseline is not None and worker is None:
                _check("--msprobe-baseline", baseline.path, dumps, entries, notes)
        except ReportError as exc:
            raise pytest.UsageError(f"--msprobe-baseline: {exc}") from None
        return cls(state, finished, baseline, strict, notes)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        # Encodable: execnet sends UTF-8, and a hand-made CSV's name may hold a lone surrogate (no entry's).
        node.workerinput[FINISHED_KEY] = sorted([encodable(api), direction] for api, direction in self.finished)
        if self.baseline is not None:
            node.workerinput[BASELINE_KEY] = sorted(list(pair) for pair in self.baseline.failed)

    def pytest_collection_modifyitems(self, config: pytest.Config, items) -> None:
        kept, done = [], []
        for item in items:
            entry = parse_entry_name(item.entry) if isinstance(item, EntryItem) else None
            # A name that is no API name has its row under the test's name (items.py).
            key = (entry.prefix, entry.direction) if entry else (item.name, FORWARD)
            if isinstance(item, EntryItem) and key in self.finished:
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
        """Entries the resumed files hold as error (and warning, strict) that no baseline expects."""
        return [
            (result.api, result.direction)
            for result in self.earlier
            if result.status in failing(self.strict)
            and not (self.baseline and self.baseline.failed_before(result.api, result.direction))
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
        if self.state is not None:
            lines.append(f"msprobe: resuming {self.resumed}: {resume.describe(self.state)}")
        if self.baseline is not None:
            lines.append(f"msprobe: {self.baseline.describe()}")
        lines += [f"msprobe: {note}" for note in self.notes]
        return lines


def _finished(resumed: Path, worker: dict) -> set[tuple[str, str]]:
    """A worker's: its controller's word, which the controller's appending does not change."""
    if FINISHED_KEY in worker:
        return {(api, direction) for api, direction in worker[FINISHED_KEY]}
    return resume.finished_entries(resumed)


def _baseline(path: Path, worker: dict | None, strict: bool) -> Baseline:
    if worker is not None and BASELINE_KEY in worker:
        return Baseline(path, worker[BASELINE_KEY])
    return Baseline.read(path, failing(strict))


def _check(
    option: str,
    csv: Path,
    dumps: Sequence[Path],
    entries: set[tuple[str, str]] | None,
    notes: list[str],
) -> None:
    """A CSV of another dump is a usage error; one with some APIs the dump lacks, a header note."""
    if entries is None or not csv.is_file():
        return  # the dump's collection, or reading the CSV, says what is wrong
    apis = read_finished_apis(csv)  # a ReportError: the caller names the option
    try:
        note = provenance.check_csv_of_dump(option, csv, apis, dumps[0], entries)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if note:
        notes.append(note)
