"""pytest glue of coverage.py: the exit status of a run that compared too little.

Its own exit status, 5 (pytest's "no tests ran"), where the run found no failure: the run
checked nothing, or less than the user allows. A run with failures keeps their status, 1.
"""

from __future__ import annotations

import pytest

from ..reports import coverage
from ..results import REPORT_ATTRIBUTE, EntryResult

NOTHING_CHECKED = pytest.ExitCode.NO_TESTS_COLLECTED


class CoverageGate:
    def __init__(self, max_skip_ratio: float):
        self.max_skip_ratio = max_skip_ratio
        self.coverage = coverage.Coverage()
        self.shortfall: str | None = None

    def pytest_report_header(self) -> list[str]:
        return [f"msprobe: {coverage.allowance(self.max_skip_ratio)}"]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, REPORT_ATTRIBUTE, None)
        if report.when == "call" and data is not None:
            self.coverage.add(EntryResult.from_dict(data))

    @pytest.hookimpl(trylast=True)  # after the baseline's own say on the status (selection.py)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.shortfall = coverage.shortfall(self.coverage, self.max_skip_ratio)
        if self.shortfall and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = NOTHING_CHECKED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.shortfall:
            terminalreporter.write_line(f"msprobe: {self.shortfall}", red=True, bold=True)
