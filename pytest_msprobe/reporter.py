"""The reporter: CSV rows and the terminal summary, in the process that sees every report."""

from __future__ import annotations

from typing import List, Optional

import pytest

from . import summary
from .outcome import EntryResult
from .report import ApiBook, CsvWriter


class CsvReporter:
    """Writes the CSVs in the process that sees every report (the xdist controller)."""

    def __init__(self, config: pytest.Config, run):
        self.config = config
        self.run = run
        self.book = ApiBook(skip=run.selection.finished)
        self.writer: Optional[CsvWriter] = None
        self.results: List[EntryResult] = []
        self.unfinished: List[str] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.book.expect(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: List[str]) -> None:
        self.book.expect(ids)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "msprobe", None)
        if data is None:
            return
        result = EntryResult.from_dict(data)
        self.results.append(result)
        row = self.book.add(result)
        if row is not None:
            self.write(*row)

    def write(self, api, forward, backward) -> None:
        self.open().write_api(api, forward, backward)

    def open(self) -> CsvWriter:
        if self.writer is None:
            resumed = self.run.selection.resumed
            self.writer = CsvWriter(resumed) if resumed else CsvWriter.in_folder(self.run.out_dir)
        return self.writer

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus) -> None:
        leftovers = self.book.leftovers()
        if exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop or session.shouldfail:
            # Cut short by Ctrl-C, -x or --maxfail: left out, so that --msprobe-resume runs them whole.
            self.unfinished = [api for api, _, _ in leftovers]
            leftovers = []
            if self.unfinished:
                self.open()  # a file to resume, even with no API finished yet
        for row in leftovers:
            self.write(*row)
        if self.writer is not None:
            self.writer.close()

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.results and self.writer is None:
            return
        terminalreporter.section("msprobe")
        lines = summary.summary_lines(self.results)
        if self.run.selection.baseline is not None:
            lines += self.run.selection.baseline.summary_lines(self.results)
        for line in lines:
            terminalreporter.write_line(line)
        if self.writer is not None:
            terminalreporter.write_line(f"result:  {self.writer.result_path}")
            terminalreporter.write_line(f"details: {self.writer.details_path}")
        if self.unfinished:
            terminalreporter.write_line(f"{len(self.unfinished)} APIs unfinished when the run stopped, not written: "
                                        f"--msprobe-resume {self.writer.result_path} runs them")
