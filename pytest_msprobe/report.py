"""The two CSV files of shared/spec/reports.md, and the bookkeeping that fills them.

One row per API in accuracy_checking_result, one per compared output in
accuracy_checking_details; a row is written and flushed as soon as its API is
finished, so a run killed at any moment keeps every finished API. No pytest,
no framework.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from .dump import BACKWARD, FORWARD, parse_entry_name
from .messages import api_message, output_message
from .results import ERROR, EntryResult

RESULT_COLUMNS = ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
DETAILS_COLUMNS = [
    "API Name",
    "Bench Dtype",
    "Tested Dtype",
    "Shape",
    "Cosine",
    "MaxAbsErr",
    "MaxRelativeErr",
    "Status",
    "Message",
]
RESULT_PREFIX = "accuracy_checking_result_"
DETAILS_PREFIX = "accuracy_checking_details_"
ENCODING = "utf-8-sig"  # msprobe's choice: spreadsheet programs open it right

# A cell starting with one of these is run as a formula by spreadsheet programs.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def text_cell(value: object) -> str:
    """Dump data is untrusted: a name like `=HYPERLINK(...)` must stay text."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def number_cell(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "" if value is None else "nan"
    return repr(float(value))


def timestamp() -> str:
    return time.strftime("%Y%m%d%H%M%S")


def details_path_for(result_path: Path) -> Path:
    return result_path.with_name(result_path.name.replace(RESULT_PREFIX, DETAILS_PREFIX, 1))


class ReportError(ValueError):
    """A file given as a result CSV that is missing or is not one."""


def read_finished_apis(result_path: Path) -> set[str]:
    """API names already in a result CSV (for resume)."""
    return {row[0] for row in read_result_rows(result_path)}


def read_result_rows(result_path: Path) -> list[list[str]]:
    """The rows of a result CSV, header checked, cells as written (formula guard undone)."""
    try:
        with open(result_path, newline="", encoding=ENCODING) as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ReportError(f"{result_path}: cannot be read as a result CSV: {exc}") from None
    if not rows:
        return []  # created, then killed before its header reached the disk
    if rows[0] != RESULT_COLUMNS:
        raise ReportError(
            f"{result_path}: not an accuracy_checking_result CSV: its header is {rows[0][:4]}, "
            f"expected {RESULT_COLUMNS}"
        )
    return [[untext(cell) for cell in row] for row in rows[1:] if row]


def untext(cell: str) -> str:
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(_FORMULA_START) else cell


class CsvWriter:
    """Appends rows to one result file and its details file, flushing each API."""

    def __init__(self, result_path: Path):
        self.result_path = result_path
        self.details_path = details_path_for(result_path)
        self._result = self._open(self.result_path, RESULT_COLUMNS)
        self._details = self._open(self.details_path, DETAILS_COLUMNS)

    @classmethod
    def in_folder(cls, folder: Path, stamp: str | None = None) -> CsvWriter:
        folder.mkdir(parents=True, exist_ok=True)
        return cls(folder / f"{RESULT_PREFIX}{stamp or timestamp()}.csv")

    @staticmethod
    def _open(path: Path, columns: list[str]):
        new = not path.exists() or path.stat().st_size == 0
        handle = open(path, "a", newline="", encoding="utf-8")  # noqa: SIM115 - open for the whole run
        if new:
            handle.write("\ufeff")
            csv.writer(handle).writerow(columns)
        return handle

    def write_api(self, api: str, forward: EntryResult | None, backward: EntryResult | None) -> None:
        details = csv.writer(self._details)
        for result in (r for r in (forward, backward) if r is not None):
            for row in result.outputs:
                details.writerow(
                    [
                        text_cell(result.output_name(row)),
                        text_cell(row.bench_dtype),
                        text_cell(row.tested_dtype),
                        text_cell(row.shape if row.shape is not None else ""),
                        number_cell(row.cosine),
                        number_cell(row.max_abs_err),
                        number_cell(row.max_rel_err),
                        row.status.value,
                        text_cell(output_message(row)),
                    ]
                )
        csv.writer(self._result).writerow(
            [
                text_cell(api),
                forward.status.value if forward else "",
                backward.status.value if backward else "",
                text_cell(api_message(forward, backward)),
            ]
        )
        # Details first: a result row on disk always has its details beside it.
        self._details.flush()
        self._result.flush()

    def close(self) -> None:
        self._details.close()
        self._result.close()


def crash_result(node_id: str, message: str) -> EntryResult | None:
    """The result of an entry whose process died while checking it (a segfault, an abort,
    the OOM killer): an error, so the API gets its row and the run its failure."""
    name = parse_entry_name(node_id.rsplit("::", 1)[-1])
    if name is None:
        return None
    return EntryResult(name.prefix, name.direction, ERROR, reason=message, dump=node_id.split("::", 1)[0])


def dump_folders(dump_files: Sequence[Path]) -> dict[Path, Path]:
    """The CSV folder of each dump, relative to --msprobe-out.

    One dump writes in --msprobe-out itself. Several (the ranks and steps of a
    dump_path) share API names, so each gets its own pair of files, in its
    folder relative to what the dumps' folders have in common: `rank0/`, `rank1/`.
    """
    if len(dump_files) <= 1:
        return {path: Path() for path in dump_files}
    common = Path(os.path.commonpath([path.parent for path in dump_files]))
    return {path: path.parent.relative_to(common) for path in dump_files}


class ApiRow(NamedTuple):
    """A row of the result CSV: one API call of one dump, both directions."""

    dump: str  # the dump's part of the node id, `step0/rank0/dump.json`
    api: str
    forward: EntryResult | None
    backward: EntryResult | None


class ApiBook:
    """Pairs the forward and backward results of each API and says when one is complete.

    An API is complete once every direction that was collected for it has a
    result, whatever the order or process its items ran in. APIs are told apart
    by dump too: the ranks of one step call the same APIs.
    """

    def __init__(self, skip: Iterable[str] = ()):
        self.expected: dict[tuple[str, str], set[str]] = {}
        self.results: dict[tuple[str, str], dict[str, EntryResult]] = {}
        self.written: set[tuple[str, str]] = set()
        self.skip = set(skip)  # APIs a resumed file already holds

    def expect(self, node_ids: Iterable[str]) -> None:
        for node_id in node_ids:
            dump, _, entry = node_id.rpartition("::")
            name = parse_entry_name(entry)
            if name is not None:
                self.expected.setdefault((dump, name.prefix), set()).add(name.direction)

    def add(self, dump: str, result: EntryResult) -> ApiRow | None:
        """The API's row once this result completes it, else None."""
        key = (dump, result.api)
        if key in self.written or result.api in self.skip:
            return None
        got = self.results.setdefault(key, {})
        got[result.direction] = result
        if self.expected.get(key, {result.direction}) <= set(got):
            return self._take(key)
        return None

    def leftovers(self) -> list[ApiRow]:
        """APIs with some results but not all (an interrupted run)."""
        return [self._take(key) for key in list(self.results) if key not in self.written]

    def _take(self, key: tuple[str, str]) -> ApiRow:
        got = self.results.pop(key)
        self.written.add(key)
        return ApiRow(*key, got.get(FORWARD), got.get(BACKWARD))
