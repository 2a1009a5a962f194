"""A baseline: the entries an earlier run's result CSV says failed, so CI fails only on new ones.

Judged per entry (one direction of one API): a backward that breaks where only
the forward failed before is a new failure. No pytest.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from ..results import ERROR, PASS, EntryResult
from ..untrusted import encodable
from .csv_files import read_entry_statuses


class Baseline:
    def __init__(self, path: Path, failed: Iterable[tuple[str, str]]):
        self.path = path
        # Encodable: sent to xdist workers, and a name a CSV holds as `\\ud800` is no API's anyway.
        self.failed: set[tuple[str, str]] = {(encodable(api), encodable(direction)) for api, direction in failed}

    @classmethod
    def read(cls, path: Path, failing: Collection[str] = (ERROR,)) -> Baseline:
        """The entries whose status fails an item (error; and warning, strict). Raises
        report.ReportError naming the file when it is missing or not a result CSV."""
        statuses = read_entry_statuses(path)  # read back as every such file is: a FIFO never waited on
        return cls(path, [(api, direction) for api, direction, status in statuses if status in failing])

    def failed_before(self, api: str, direction: str) -> bool:
        return (api, direction) in self.failed

    def reason(self) -> str:
        return f"error in the baseline {self.path}"

    def describe(self) -> str:
        return f"baseline {self.path}: {len(self.failed)} known failures, expected to fail (xfail)"

    def summary_lines(self, results: Sequence[EntryResult], limit: int = 20) -> list[str]:
        """Known failures that still fail, the ones that now pass, the new ones."""
        known = [r for r in results if self.failed_before(r.api, r.direction)]
        fixed = [f"{r.api}.{r.direction}" for r in known if r.status == PASS]
        still = sum(r.status == ERROR for r in known)
        new = [
            f"{r.api}.{r.direction}"
            for r in results
            if r.status == ERROR and not self.failed_before(r.api, r.direction)
        ]
        lines = [
            "",
            f"baseline {self.path}:",
            f"{still} known failures still fail (xfailed), {len(fixed)} now pass, {len(new)} new failures",
        ]
        if fixed:
            lines += ["now pass although the baseline failed them:", *_listed(fixed, limit)]
        if new:
            lines += ["new failures (not in the baseline):", *_listed(new, limit)]
        return lines


def _listed(names: list[str], limit: int) -> list[str]:
    return [f"  {name}" for name in names[:limit]] + (
        [f"  ... and {len(names) - limit} more"] if len(names) > limit else []
    )
