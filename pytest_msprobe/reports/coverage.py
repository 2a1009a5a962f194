"""How much of a run was compared: a run that compared nothing is no pass.

A tensor dump copied without its dump_tensor_data/ folder, checked against its recorded outputs,
SKIPs every entry: pytest would exit 0 and a CI gate would go green having checked nothing. The
run's share of SKIPped entries is held to the user's allowance (--msprobe-max-skip-ratio); the
default allows any share but none at all compared. No pytest: the glue is gate.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..results import SKIP, EntryResult


@dataclass
class Coverage:
    entries: int = 0
    skipped: int = 0  # entries whose every output was SKIPped (or that had none to compare)
    compared: int = 0  # outputs judged pass, warning or error against their bench

    def add(self, result: EntryResult) -> None:
        if result.filtered:
            return  # --msprobe-filter: another entry's check stands for it, as a deselected one is not run
        self.entries += 1
        judged = sum(1 for output in result.outputs if output.status != SKIP)
        self.compared += judged
        if result.status == SKIP:
            self.skipped += 1

    @property
    def skip_ratio(self) -> float:
        return self.skipped / self.entries if self.entries else 0.0


def of(results: Iterable[EntryResult]) -> Coverage:
    coverage = Coverage()
    for result in results:
        coverage.add(result)
    return coverage


def shortfall(coverage: Coverage, max_skip_ratio: float) -> str | None:
    """Why the run fails for what it did not compare, or None. A run with no entry at all is
    pytest's own 'no tests ran'."""
    if not coverage.entries:
        return None
    if coverage.compared == 0:
        return (
            f"nothing was compared: {coverage.skipped} of {coverage.entries} entries SKIPped; "
            "a run that checks nothing is no pass"
        )
    if coverage.skip_ratio > max_skip_ratio:
        return (
            f"{coverage.skipped} of {coverage.entries} entries SKIPped ({coverage.skip_ratio:.0%}), "
            f"more than --msprobe-max-skip-ratio {max_skip_ratio:g} allows"
        )
    return None


def allowance(max_skip_ratio: float) -> str:
    """The header's line on it."""
    if max_skip_ratio >= 1.0:
        return "a run in which no output is compared fails (exit 5); --msprobe-max-skip-ratio bounds the SKIPs"
    return f"a run fails (exit 5) when more than {max_skip_ratio:g} of its entries SKIP, or none is compared"
