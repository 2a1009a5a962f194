"""A baseline: the entries an earlier run's result CSV says failed, so CI fails only on new ones.

Judged per entry (one direction of one API): a backward that breaks where only
the forward failed before is a new failure. No pytest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, List, Sequence, Set, Tuple

from .compare import ERROR, PASS
from .outcome import EntryResult
from .report import read_entry_statuses


class Baseline:
    def __init__(self, path: Path, failed: Iterable[Tuple[str, str]]):
        self.path = path
        self.failed: Set[Tuple[str, str]] = {tuple(pair) for pair in failed}

    @classmethod
    def read(cls, path: Path) -> "Baseline":
        """Raises report.ReportError naming the file when it is missing or not a result CSV."""
        return cls(path, [(api, direction) for api, direction, status in read_entry_statuses(path)
                          if status == ERROR])

    def failed_before(self, api: str, direction: str) -> bool:
        return (api, direction) in self.failed

    def reason(self) -> str:
        return f"error in the baseline {self.path}"

    def describe(self) -> str:
        return f"baseline {self.path}: {len(self.failed)} known failures, expected to fail (xfail)"

    def summary_lines(self, results: Sequence[EntryResult], limit: int = 20) -> List[str]:
        """Known failures that still fail, the ones that now pass, the new ones."""
        known = [r for r in results if self.failed_before(r.api, r.direction)]
        fixed = [f"{r.api}.{r.direction}" for r in known if r.status == PASS]
        still = sum(r.status == ERROR for r in known)
        new = [f"{r.api}.{r.direction}" for r in results
               if r.status == ERROR and not self.failed_before(r.api, r.direction)]
        lines = ["", f"baseline {self.path}:",
                 f"{still} known failures still fail (xfailed), {len(fixed)} now pass, {len(new)} new failures"]
        if fixed:
            lines += ["now pass although the baseline failed them:", *_listed(fixed, limit)]
        if new:
            lines += ["new failures (not in the baseline):", *_listed(new, limit)]
        return lines


def _listed(names: List[str], limit: int) -> List[str]:
    return [f"  {name}" for name in names[:limit]] + (
        [f"  ... and {len(names) - limit} more"] if len(names) > limit else [])
