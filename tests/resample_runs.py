"""Each resampling deficit of deficits_resample planted in a copy of a dump, its entry run alone in
recorded mode under the dtype standard: shared by the held-out families' tests (test_hybrid.py,
test_unet_seq.py)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import deficits_resample as r
import pytest

from conftest import read_csv, run_msprobe


def not_errors(
    pytester: pytest.Pytester,
    copy_dump,
    name: str,
    planted: Sequence[tuple[str, str, str]],
    skip: Collection[str] = (),
) -> list[str]:
    """For each (entry, how, direction) but the hows in `skip`: a line where a planted output is no error
    or the run's terminal does not name the entry as failing; none where every plant is caught."""
    problems = []
    for number, (entry, how, direction) in enumerate(planted):
        if how in skip:
            continue
        dump = copy_dump(name, f"copy{number}")
        rows = [row for row in r.plant(dump.parent, entry, how) if f".{direction}." in row]
        assert rows
        result = run_msprobe(
            pytester, dump, "--msprobe-standard", "dtype", "-k", entry, out=f"out{number}", device="recorded"
        )
        details = {row["API Name"]: row for row in read_csv(pytester.path / f"out{number}", "details")}
        wrong = {
            row: details.get(row, {}).get("Status") for row in rows if details.get(row, {}).get("Status") != "error"
        }
        if wrong or f"{entry}.{direction}" not in " ".join(result.outlines):
            problems.append(f"{entry} {how} ({direction}): {wrong or 'its entry did not fail'}")
    return problems
