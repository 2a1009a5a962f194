"""The reporter: CSV rows and the terminal summary, in the process that sees every report."""

from __future__ import annotations

import contextlib
import functools
import os
import types
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ..dumps.dump import parse_entry_name
from ..reports import files, html, html_extras, layouts, manifest, summary
from ..reports.csv_files import (
    ApiBook,
    ApiRow,
    CsvWriter,
    ReportError,
    details_path_for,
    dump_folders,
    result_layout,
    split_node_id,
    timestamp,
)
from ..reports.journal import Journal, journal_path_for
from ..reports.layouts import Layout
from ..results import REPORT_ATTRIBUTE, EntryResult
from ..untrusted import cut, printable

MAX_LINE = 1000  # characters of one summary line: a 200,000-character entry name is cut there
MAX_RUNNING = 400  # characters of the frame name that says which entry ran when the process died


def _entry_frame(function: Callable[[], Any]) -> Any:
    __tracebackhide__ = True  # pytest's tracebacks of a failing entry leave it out
    return function()


def call_named(label: str, function: Callable[[], Any]) -> Any:
    """function() from a frame whose function name is label. A segfault or an abort kills the
    process where nothing of Python runs again, but the traceback of faulthandler (pytest's, on
    stderr) names every frame: so `Fatal Python error` comes with `msprobe: running <entry>`."""
    code = _entry_frame.__code__.replace(co_name=label)
    return types.FunctionType(code, {})(function)


def layout_lines(asked: str, written: Layout, framework: str) -> list[str]:
    """Where a pair is not in the layout --msprobe-csv-layout asked for, why (said once per pair)."""
    if written.name == asked:
        return []
    if framework not in layouts.PYTORCH_FRAMEWORKS:
        return [
            f"         in the {written.name} layout: a MindSpore dump keeps the 9 columns of msprobe's MindSpore "
            f"pre-check (--msprobe-csv-layout {asked} is its PyTorch one)"
        ]
    return [f"         in the {written.name} layout of the resumed file (--msprobe-csv-layout {asked} not applied)"]


class CsvReporter:
    """Writes the CSVs in the process that sees every report (the xdist controller).

    Every dump's pair of files is created when the run is configured, so a folder that
    cannot hold them is a usage error before the first entry runs.
    """

    def __init__(self, config: pytest.Config, run):
        self.config = config
        self.run = run
        self.dumps: dict[str, str] = {}  # a node id's dump part -> the dump's resolved path
        resumed = run.selection.state
        self.book = ApiBook(skip=resumed.complete if resumed else (), dump_of=self.dump_key)
        if resumed is not None:  # one dump: the entries its journal holds of APIs without a row
            self.book.preload(str(run.dump_files[0]), resumed.waiting)
        self.folders = dump_folders(run.dump_files)
        self.stamp = timestamp()  # one for the run, whatever the number of dumps
        self.writers: dict[Path, CsvWriter] = {}  # by the dump's resolved path
        self.journals: dict[Path, Journal] = {}  # beside each pair: every entry as it arrives
        self.results: list[EntryResult] = []
        self.unfinished: list[ApiRow] = []
        self.selected: set[tuple[str, str]] = set()  # (dump, entry) of every entry item this run selected
        self.stop_lines: list[str] = []  # what a run that stopped early left unchecked (stopped_lines)
        self.session: pytest.Session | None = None
        self.stopped = ""  # why the rows stopped (a full disk)
        self.locks: list[files.ResultLock] = []  # of the fresh pairs (a resumed one's is its Resumed's)
        self.late: list[str] = []  # what could not be written at the end (a manifest), for the summary
        self.html: Path | None = None  # the HTML report, once written (--msprobe-html)
        # pytest-html's report (its --html): each failing item's row gets its message, and its details in
        # the msprobe page where there is one (the page's URL from pytest-html's folder); None: no pytest-html.
        page = run.options.html_path(Path(config.invocation_params.dir))
        if page is not None and html.unavailable():  # said before the run, not after it
            raise pytest.UsageError(f"--msprobe-html: {html.unavailable()}")
        theirs = getattr(config.option, "htmlpath", None)
        base = Path(config.invocation_params.dir)
        self.extras_page = None if not theirs else html.relative_url(page, base / theirs) if page else ""
        config.add_cleanup(self.release)
        baseline = run.selection.baseline
        if baseline is not None and baseline.path.resolve() != (run.selection.resumed or Path()).resolve():
            holder = files.holder_of(baseline.path)
            if holder is not None:  # rows it has not written yet, a row half written
                raise pytest.UsageError(
                    f"--msprobe-baseline: {baseline.path} is being written by another run: {holder}; wait for it to end"
                )
        self.finishing = False
        self.stopped_late = False
        if not config.option.collectonly:
            for path in run.dump_files:
                self.open(path)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.expect([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        self.expect(ids)

    def expect(self, node_ids: list[str]) -> None:
        """The entries this run selected: each should get a result (the book pairs them by API)."""
        self.book.expect(node_ids)
        for node_id in node_ids:
            dump, entry = split_node_id(node_id)
            if parse_entry_name(entry) is not None:
                self.selected.add((self.dump_key(dump), entry))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        """A serial run's entry (the xdist controller runs none: a worker that dies is its
        workers.py's): its name in the journal before it runs, and on the stack while it runs,
        so that a crash in the API leaves it behind (journal.py) and in faulthandler's traceback."""
        entry = parse_entry_name(getattr(item, "entry", "") or "")
        if entry is None or self.stopped:
            return (yield)
        dump = self.dump_key(split_node_id(item.nodeid)[0])
        writer = self.open(Path(dump))
        try:
            self.journals[writer.result_path].start(entry.prefix, entry.direction, dump)
        except OSError as exc:
            self.stop(
                f"msprobe: cannot write {self.journals[writer.result_path].path} ({exc.strerror or exc}): stopped; "
                f"the rows written are whole, --msprobe-resume {writer.result_path} runs the rest"
            )
        label = cut(
            printable(f"msprobe: running {entry.full} (journal {self.journals[writer.result_path].path})"), MAX_RUNNING
        )
        journal = self.journals[writer.result_path]
        item.runtest = functools.partial(self._run_entry, journal, label, item.runtest)  # type: ignore[method-assign]
        try:
            return (yield)
        finally:
            with contextlib.suppress(AttributeError):
                del item.runtest

    @staticmethod
    def _run_entry(journal: Journal, label: str, runtest: Callable[[], Any]) -> Any:
        """The entry's call, under its name; once it returns or raises, its `running` line is cut:
        a death after this (in a hook, a kill) is no crash of the API, and a resume runs it again."""
        __tracebackhide__ = True
        try:
            return call_named(label, runtest)
        finally:
            journal.end()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, REPORT_ATTRIBUTE, None)
        if data is None:
            return
        result = EntryResult.from_dict(data)
        result.dump = self.dump_key(split_node_id(report.nodeid)[0])  # one name a dump, for the summary
        self.results.append(result)
        if self.extras_page is not None and result.status in summary.failing(self.run.selection.strict):
            extras = [*getattr(report, "extras", []), *html_extras.pytest_html_extras(result, self.extras_page)]
            report.extras = extras  # type: ignore[attr-defined]  # pytest-html's attribute
        self.journal(result)
        row = self.book.add(result.dump, result)
        if row is not None:
            self.write(row)

    def dump_key(self, dump: str) -> str:
        """The dump of a node id's dump part, as the book and the summary name it: its resolved path."""
        if dump not in self.dumps:
            self.dumps[dump] = str(self.dump_path(dump))
        return self.dumps[dump]

    def journal(self, result: EntryResult) -> None:
        """The entry's result in its pair's journal, before any row: a kill from now on loses nothing of it."""
        if self.stopped:
            return
        writer = self.open(Path(result.dump))
        try:
            self.journals[writer.result_path].add(result)
        except OSError as exc:
            self.stop(
                f"msprobe: cannot write {self.journals[writer.result_path].path} ({exc.strerror or exc}): stopped; "
                f"the rows written are whole, --msprobe-resume {writer.result_path} runs the rest"
            )

    def write(self, row: ApiRow) -> None:
        if self.stopped:
            return
        writer = self.open(Path(row.dump))  # resolved (dump_key)
        try:
            writer.write_api(row.api, row.forward, row.backward)
        except OSError as exc:
            self.stop(
                f"msprobe: cannot write {writer.result_path} ({exc.strerror or exc}): stopped; the rows "
                f"written are whole, --msprobe-resume {writer.result_path} runs the rest"
            )

    def stop(self, why: str) -> None:
        """End the run after this entry (serial), or after the entries running now (xdist):
        pytest says why, as `Interrupted: ...`."""
        self.stopped = why
        if self.finishing:
            self.stopped_late = True  # nothing left to interrupt: the summary says it
            return
        if self.session is not None:
            self.session.shouldstop = why
        dsession = self.config.pluginmanager.get_plugin("dsession")
        if dsession is not None:
            dsession.shouldstop = why

    def dump_path(self, dump: str) -> Path:
        return (self.config.rootpath / dump).resolve()

    def open(self, path: Path) -> CsvWriter:
        """The pair of files of one dump; raises pytest.UsageError when it cannot be created."""
        if path not in self.writers:
            resumed = self.run.selection.resumed
            folder = self.run.out_dir / self.folders.get(path, Path())
            try:
                if resumed:  # appended to in the layout it was written in, whatever the option says
                    writer = CsvWriter(resumed, layout=result_layout(resumed) or self.layout_of(path))
                else:
                    writer = CsvWriter.in_folder(folder, self.stamp, self.layout_of(path))
            except ReportError as exc:
                raise pytest.UsageError(f"--msprobe-out: {exc}") from None
            except OSError as exc:
                raise pytest.UsageError(
                    f"--msprobe-resume: {resumed}: cannot append to it: {exc.strerror or exc}"
                ) from None
            option = "--msprobe-resume" if resumed else "--msprobe-out"
            try:
                if not resumed:  # a resumed pair is locked from before its files were read (resume.py)
                    self.locks.append(files.ResultLock.acquire(writer.result_path))
                    taken = manifest.path_for(writer.result_path)
                    if os.path.lexists(taken):  # written at the end: a link there now is refused now
                        raise files.FileTaken(taken, f"{files.what_is_at(taken)} is already there: not written through")
                journal = Journal(journal_path_for(writer.result_path), fresh=not resumed)
            except OSError as exc:
                writer.close()
                if not resumed:  # just made, empty: nothing of them stays
                    for made in (writer.result_path, details_path_for(writer.result_path)):
                        with contextlib.suppress(OSError):
                            made.unlink()
                self.release()
                raise pytest.UsageError(f"{option}: {exc}") from None
            self.journals[writer.result_path] = journal
            self.writers[path] = writer
        return self.writers[path]

    def layout_of(self, path: Path) -> Layout:
        return layouts.for_dump(self.run.csv_layout, self.run.framework_of.get(path, ""))

    def release(self) -> None:
        """The locks of the pairs this run wrote: another run may write them now."""
        for lock in self.locks:
            lock.release()
        if self.run.selection.state is not None:
            self.run.selection.state.release()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus) -> None:
        self.finishing = True
        leftovers = self.book.leftovers()
        stopped = self.stop_reason(session, exitstatus)
        if stopped:
            # Cut short by Ctrl-C, -x, --maxfail or a lost host: left out, so that --msprobe-resume runs them whole.
            self.unfinished, leftovers = leftovers, []
        for row in leftovers:
            self.write(row)
        self.stop_lines = self.stopped_lines(stopped)
        for path, writer in self.writers.items():
            writer.close()
            left = self.left_undone(stopped, path)
            written = manifest.path_for(writer.result_path)
            # A resumed pair keeps its own manifest, but for what is left undone: whole again once all ran.
            kept = bool(self.run.selection.resumed) and os.path.lexists(written)
            try:
                if kept:
                    manifest.restate(writer.result_path, left)
                else:
                    plain = None if left is None else left.plain()
                    manifest.write(writer.result_path, {**self.run.describe(path), "stopped": plain})
            except manifest.ManifestError as exc:  # a forged one: its text names the file and the field
                self.late.append(f"msprobe: {exc}; what this run left unchecked is not written into it")
            except OSError as exc:  # a link at its name, a full disk
                why = exc if isinstance(exc, files.FileRefused) else f"{exc.strerror or exc}"
                self.late.append(f"msprobe: the manifest {written} is not {'updated' if kept else 'written'}: {why}")
        for journal in self.journals.values():
            journal.end()  # nothing runs any more: no entry of this run crashed
            journal.close()
        self.write_html()

    def stop_reason(self, session: pytest.Session, exitstatus: int | pytest.ExitCode) -> str:
        """Why the run ended before its last entry ("" where it did not): pytest's own words where it has them."""
        dsession = self.config.pluginmanager.get_plugin("dsession")  # xdist's controller stops on its own
        for reason in (session.shouldfail, session.shouldstop, getattr(dsession, "shouldstop", None)):
            if reason:
                return reason if isinstance(reason, str) else "stopped"
        if self.run.lost_hosts:
            return f"hosts lost: {', '.join(sorted(self.run.lost_hosts))}"
        return "interrupted" if exitstatus == pytest.ExitCode.INTERRUPTED else ""

    def left_undone(self, why: str, path: Path) -> manifest.Stopped | None:
        """What a run that stopped early left undone of one dump's pair, for its manifest (None: a whole run).
        A pair of every dump says it, though it lacks nothing: a report of all its pairs counts every entry."""
        if not why:
            return None
        dump = str(path)
        selected = {(d, entry) for d, entry in self.selected if d == dump}
        missing = summary.unchecked(selected, [result for result in self.results if result.dump == dump])
        unfinished = sum(row.dump == dump for row in self.unfinished)
        return manifest.Stopped(cut(why, 200), len(selected), dict(missing), unfinished)

    def stopped_lines(self, why: str) -> list[str]:
        """What the terminal and the HTML report say of a run that stopped early: the entries never
        checked, and per dump the APIs left without a row and how to finish them."""
        if not why:
            return []
        lines = []
        if self.selected - {(result.dump, result.entry) for result in self.results}:
            lines.append(summary.stopped_line(cut(printable(why), 200), self.selected, self.results))
        for path, dump in sorted({self.dump_path(row.dump): row.dump for row in self.unfinished}.items()):
            count = sum(row.dump == dump for row in self.unfinished)
            where = f"{dump}: " if len(self.writers) > 1 else ""
            lines.append(summary.unfinished_line(count, self.open(path).result_path, where))
        return lines

    def write_html(self) -> None:
        """--msprobe-html: the page of every entry the pairs hold (a resumed pair's earlier ones too)."""
        path = self.run.options.html_path(Path(self.config.invocation_params.dir))
        if path is None or not self.writers:
            return
        pairs = [writer.result_path for writer in self.writers.values()]
        try:
            unchecked = summary.unchecked(self.selected, self.results) if self.stop_lines else None
            # A resumed pair is one dump's (resume.py checks its journal against it): its earlier entries are
            # that dump's, whatever dump a journal line names (a forged one would place them apart).
            dump = str(Path(self.run.dump_files[0]).resolve()) if self.run.dump_files else ""
            results = [*(replace(r, dump=dump) for r in self.run.selection.earlier), *self.results]
            self.html = html.write_run(path, results, pairs, self.stop_lines, unchecked)
        except (OSError, ImportError, ValueError) as exc:  # a folder it cannot write, plotly missing, a forged manifest
            self.late.append(f"msprobe: the HTML report {path} is not written: {html.why(exc)}")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.results and not self.writers:
            return
        terminalreporter.section("msprobe")
        selection = self.run.selection
        lines = [*self.run.summary_notes, *summary.summary_lines(self.results, selection.strict)]
        if selection.earlier:
            lines += ["", f"resumed {selection.resumed}: the entries it held before this run:"]
            lines += summary.inherited_lines(selection.earlier, selection.strict)
        if selection.baseline is not None:
            lines += selection.baseline.summary_lines(self.results)
        if self.stopped_late:
            lines += ["", self.stopped]
        lines += self.late
        lines += self.stop_lines
        for path, writer in self.writers.items():
            lines += [f"result:  {writer.result_path}", f"details: {writer.details_path}"]
            lines += layout_lines(self.run.options.csv_layout, writer.layout, self.run.framework_of.get(path, ""))
        lines += [f"html:    {self.html}"] if self.html else []
        for line in lines:
            terminalreporter.write_line(cut(printable(line), MAX_LINE))
