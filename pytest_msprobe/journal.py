"""The journal beside a CSV pair: every entry's result, one JSON line each, as soon as it arrives.

The result CSV holds one row per API, written once both of its directions are in; a run
killed between an API's forward and its backward kept nothing of the forward. The journal
(`accuracy_checking_journal_{timestamp}.jsonl`, the pair's stem) keeps every entry's result
the moment the process that writes the CSVs receives it, flushed, so a kill loses at most the
entries in flight, and a resume (resume.py) runs only the entries it lacks: the rows it then
writes from journal and new results are the rows an uninterrupted run writes. Lines are
`EntryResult.to_dict()` in JSON (NaN and inf as Python's json writes them). No pytest.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import IO

from .dump import DIRECTIONS
from .report import RESULT_PREFIX
from .results import EntryResult

JOURNAL_PREFIX = "accuracy_checking_journal_"


def journal_path_for(result_path: Path) -> Path:
    """`accuracy_checking_journal_{stem}.jsonl` beside `accuracy_checking_result_{stem}.csv`."""
    stem = result_path.name.replace(RESULT_PREFIX, JOURNAL_PREFIX, 1)
    return result_path.with_name(stem[: -len(".csv")] + ".jsonl" if stem.endswith(".csv") else stem + ".jsonl")


class Journal:
    """Appends the result of every finished entry, a line each, flushed."""

    def __init__(self, path: Path):
        self.path = path
        self._handle: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - the whole run

    def add(self, result: EntryResult) -> None:
        """Raises OSError when the line cannot be written (a full disk)."""
        self._handle.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._handle.close()


def read_journal(path: Path) -> list[EntryResult]:
    """The results a journal holds, in the order they came, after cutting a line torn by a kill.

    A line that does not read as a result (a torn one, a file edited by hand) is passed over:
    its entry simply runs again. Raises OSError when the file cannot be read or cut.
    """
    if not path.is_file():
        return []
    data = path.read_bytes()
    whole = data.rfind(b"\n") + 1  # a kill can only tear the last line
    if whole < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(whole)
    results = []
    for line in data[:whole].splitlines():
        try:
            result = EntryResult.from_dict(json.loads(line))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        if isinstance(result.api, str) and result.direction in DIRECTIONS:
            results.append(result)
    return results
