"""pytest glue for resume, baseline and msprobe's API lists: which entries run, which are expected to fail.

The files are read once, by the process that writes the CSVs, and shipped to
xdist workers in `workerinput`: every worker, a worker restarted after a crash
included, must collect and deselect exactly the same items while the controller
keeps appending rows to the resumed file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from ..dumps.acc_check_config import ApiLists, ConfigError, run_lists
from ..dumps.dump import FORWARD, parse_entry_name
from ..options import Options
from ..reports import provenance, resume
from ..reports.baseline import Baseline
from ..reports.csv_files import ReportError, read_finished_apis
from ..reports.summary import failing
from ..results import EntryResult
from ..untrusted import encodable
from .items import EntryItem

FINISHED_KEY = "msprobe_finished"
BASELINE_KEY = "msprobe_baseline_failed"
LISTS_KEY = "msprobe_api_lists"


class Selection:
    def __init__(
        self,
        resumed: resume.Resumed | None = None,
        finished: Iterable[tuple[str, str]] = (),
        baseline: Baseline | None = None,
        strict: bool = False,
        notes: Sequence[str] = (),
        lists: ApiLists | None = None,
    ):
        self.state = resumed  # the controller's (or a serial run's): what the resumed files held
        self.resumed = resumed.result_path if resumed else None  # the result CSV new rows are appended to
        self.finished = {(api, direction) for api, direction in finished}  # entries not run again
        self.baseline = baseline
        self.strict = strict
        self.notes = list(notes)  # for the header: a CSV with APIs the dump lacks
        self.lists = lists  # msprobe's white and black lists (--msprobe-config, --msprobe-white-list, ...)
        self.deselected = 0
        self.left_out: dict[str, int] = {}  # entries the lists deselected, by why

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
        options: Options | None = None,
    ) -> Selection:
        worker = getattr(config, "workerinput", None)
        lists, notes = _api_lists(worker, base, options) if options is not None else (None, [])
        resumed_path = base / resume_arg if resume_arg else None
        # The dump's entries: a CSV of another dump is refused, and a row a partial run left
        # without a direction is completed. Read by the process that writes, as the files are.
        read = worker is None and len(dumps) == 1 and bool(resume_arg or baseline_arg)
        entries = provenance.dump_entries(dumps[0]) if read else None
        state, finished = None, set()
        if resumed_path is not None:
            try:
                if worker is None:
                    _check("--msprobe-resume", resumed_path, dumps, entries, notes)
                    # Without --msprobe-filter, the entries a filtered run left unchecked are checked now.
                    state = resume.resume(resumed_path, entries, filtering=bool(options and options.filter))
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
        return cls(state, finished, baseline, strict, notes, lists)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        # Encodable: execnet sends UTF-8, and a hand-made CSV's name may hold a lone surrogate (no entry's).
        node.workerinput[FINISHED_KEY] = sorted([encodable(api), direction] for api, direction in self.finished)
        if self.baseline is not None:
            node.workerinput[BASELINE_KEY] = sorted(list(pair) for pair in self.baseline.failed)
        if self.lists is not None:
            node.workerinput[LISTS_KEY] = self.lists.to_dict()

    def pytest_collection_modifyitems(self, config: pytest.Config, items) -> None:
        kept, done = [], []
        for item in items:
            entry = parse_entry_name(item.entry) if isinstance(item, EntryItem) else None
            # A name that is no API name has its row under the test's name (items.py).
            key = (entry.prefix, entry.direction) if entry else (item.name, FORWARD)
            if isinstance(item, EntryItem) and key in self.finished:
                done.append(item)
                continue
            why = self.lists.why_left_out(entry) if self.lists and isinstance(item, EntryItem) else None
            if why:
                self.left_out[why] = self.left_out.get(why, 0) + 1
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

    def pytest_report_collectionfinish(self, config: pytest.Config) -> list[str]:
        """What msprobe's lists left out, as msprobe's acc_check would: deselected, no row."""
        if self.lists is None or hasattr(config, "workerinput"):
            return []
        counts = ", ".join(f"{n} {why}" for why, n in self.left_out.items()) or "none"
        return [f"msprobe: entries deselected by the API lists: {counts}"]


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


def _api_lists(worker: dict | None, base: Path, options: Options) -> tuple[ApiLists | None, list[str]]:
    """msprobe's white and black lists of this run, and the header's lines on them. A worker takes its
    controller's (the config may not be on its host)."""
    if worker is not None and LISTS_KEY in worker:
        return ApiLists.from_dict(worker[LISTS_KEY]), []
    try:
        return run_lists(base, options)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
