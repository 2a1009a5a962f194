"""The reporter: CSV rows and the terminal summary, in the process that sees every report."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import manifest, summary
from .report import ApiBook, ApiRow, CsvWriter, dump_folders, timestamp
from .results import REPORT_ATTRIBUTE, EntryResult


class CsvReporter:
    """Writes the CSVs in the process that sees every report (the xdist controller)."""

    def __init__(self, config: pytest.Config, run):
        self.config = config
        self.run = run
        self.book = ApiBook(skip=run.selection.finished)
        self.folders = dump_folders(run.dump_files)
        self.stamp = timestamp()  # one for the run, whatever the number of dumps
        self.writers: dict[str, CsvWriter] = {}  # by the dump's part of the node id
        self.results: list[EntryResult] = []
        self.unfinished: list[ApiRow] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.book.expect(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        self.book.expect(ids)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, REPORT_ATTRIBUTE, None)
        if data is None:
            return
        result = EntryResult.from_dict(data)
        self.results.append(result)
        row = self.book.add(report.nodeid.rpartition("::")[0], result)
        if row is not None:
            self.write(row)

    def write(self, row: ApiRow) -> None:
        self.open(row.dump).write_api(row.api, row.forward, row.backward)

    def open(self, dump: str) -> CsvWriter:
        if dump not in self.writers:
            resumed = self.run.selection.resumed
            folder = self.folders.get((self.config.rootpath / dump).resolve(), Path())
            self.writers[dump] = (
                CsvWriter(resumed) if resumed else CsvWriter.in_folder(self.run.out_dir / folder, self.stamp)
            )
            if not manifest.path_for(self.writers[dump].result_path).exists():  # a resumed pair keeps its own
                manifest.write(self.writers[dump].result_path, self.run.describe(dump))
        return self.writers[dump]

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus) -> None:
        leftovers = self.book.leftovers()
        if exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop or session.shouldfail or self.run.lost_hosts:
            # Cut short by Ctrl-C, -x, --maxfail or a lost host: left out, so that --msprobe-resume runs them whole.
            self.unfinished, leftovers = leftovers, []
            for row in self.unfinished:
                self.open(row.dump)  # a file to resume, even with no API finished yet
        for row in leftovers:
            self.write(row)
        for writer in self.writers.values():
            writer.close()

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.results and not self.writers:
            return
        terminalreporter.section("msprobe")
        lines = summary.summary_lines(self.results)
        if self.run.selection.baseline is not None:
            lines += self.run.selection.baseline.summary_lines(self.results)
        for line in lines:
            terminalreporter.write_line(line)
        for dump in sorted({row.dump for row in self.unfinished}):
            count = sum(row.dump == dump for row in self.unfinished)
            where = f"{dump}: " if len(self.writers) > 1 else ""
            terminalreporter.write_line(
                f"{where}{count} APIs unfinished when the run stopped, not written: "
                f"--msprobe-resume {self.writers[dump].result_path} runs them"
            )
        for writer in self.writers.values():
            terminalreporter.write_line(f"result:  {writer.result_path}")
            terminalreporter.write_line(f"details: {writer.details_path}")
