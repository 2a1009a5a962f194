"""A CSV pair read back row by row, every cell checked: what a merge, the report and a resume take
from a pair a run may not have written as it is (a CI artifact of another job, a file edited by hand).
Either layout (layouts.py), the one its result CSV's header names; its details CSV must be in it too.

- a result row has its 4 cells, names its API once in the file, and each status is a word of
  reports.md (`pass`, `error`, `warning`, `SKIP`) or blank;
- a details row has its cells (9, or msprobe's 23), names `<api>.<direction>.output.<i>`, its numbers
  are numbers (or blank) and its status a word; an output has one row (two in a run that judges each
  entry twice, `--msprobe-device recorded,<device>`: one a side, never the same row twice);
- the two agree: a details row's entry has a status in its API's result row, and an entry's status is
  no better than its worst output's (an error edited to pass, its details left as they were, is
  caught; an entry worse than its outputs is not: a side that raised has no output rows).

A refusal is a PairError naming the file, the row (as a spreadsheet numbers it: the header is row 1)
and the cell. No pytest.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..dumps.dump import BACKWARD, DIRECTIONS, FORWARD
from ..results import SKIP, OutputResult, Status, worst_status
from ..untrusted import cut, printable
from .csv_files import ReportError, any_field_size, cells, output_of_row, read_csv_text
from .layouts import Layout, of_details_header, of_result_header

STATUS_WORDS = tuple(status.value for status in Status)
_RANK = {SKIP: 0, Status.PASS: 1, Status.WARNING: 2, Status.ERROR: 3}


class PairError(ReportError):
    """A row of a pair that is not one a run writes, or rows that disagree: names the file and the row."""


@dataclass
class ResultRow:
    number: int  # the row's number in its file, the header being 1
    api: str
    statuses: dict[str, str]  # by direction, the directions the row holds a status for
    message: str


@dataclass
class DetailsRow:
    number: int
    name: str  # `<api>.<direction>.output.<i>`
    api: str
    direction: str
    raw: list[str]  # its cells as written
    status: str
    message: str


def _table(path: Path, kind: str, layout: Layout | None = None) -> tuple[Layout | None, list[tuple[int, list[str]]]]:
    """The file's layout (its header's; it must be `layout` where given) and (row number, raw cells) of
    every whole row but the header; blank lines passed over, a last line a kill tore left out."""
    text = read_csv_text(path)
    torn = text[text.rfind("\n") + 1 :]  # a run killed mid-write: its last line, cut short, is not read
    text = text[: len(text) - len(torn)]
    try:
        with any_field_size():
            rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise PairError(f"{path}: not a CSV file ({exc})") from None
    if not rows:
        return layout, []  # killed before its header reached the disk
    found = (of_result_header if kind == "result" else of_details_header)(rows[0])
    if found is None:
        raise PairError(
            f"{path}: not an accuracy_checking_{kind} CSV of pytest-msprobe: its header is {_shown(rows[0][:4])}"
        )
    if layout is not None and found is not layout:
        raise PairError(f"{path}: in the {found.name} CSV layout, its result CSV in the {layout.name} one")
    width = len(found.result_columns if kind == "result" else found.details_columns)
    table = []
    for number, row in enumerate(rows[1:], 2):
        if not row:
            continue
        if len(row) != width:
            raise PairError(f"{path}: row {number}: {len(row)} cells, not {width}")
        table.append((number, row))
    return found, table


def result_rows(path: Path) -> tuple[Layout | None, list[ResultRow]]:
    """The layout of a result CSV (None: no header yet) and its rows, each checked (the module's rules)."""
    layout, table = _table(path, "result")
    found: list[ResultRow] = []
    first: dict[str, int] = {}
    for number, raw in table:
        assert layout is not None
        api, forward, backward, message = cells(layout, raw)
        for column, status in zip(layout.result_columns[1:3], (forward, backward)):
            if status and status not in STATUS_WORDS:
                raise PairError(f"{path}: row {number}: {column}: {_shown(status)} is not one of {_words()}")
        if not api or not (forward or backward):
            raise PairError(f"{path}: row {number}: {'no API name' if not api else 'no status'}")
        if api in first:
            raise PairError(f"{path}: row {number}: {_shown(api)} also in row {first[api]}: an API has one row")
        first[api] = number
        statuses = {d: s for d, s in ((FORWARD, forward), (BACKWARD, backward)) if s}
        found.append(ResultRow(number, api, statuses, message))
    return layout, found


def details_rows(path: Path, layout: Layout | None = None, sides: int = 1) -> list[DetailsRow]:
    """The rows of a details CSV (in `layout`, its result CSV's, where given), each checked (the
    module's rules); `sides`: the rows an output may have (2 where each entry is judged twice)."""
    found_layout, table = _table(path, "details", layout)
    found: list[DetailsRow] = []
    first: dict[str, list[int]] = {}
    for number, raw in table:
        assert found_layout is not None
        text = cells(found_layout, raw)
        status_at = found_layout.column("Status")
        name, status, message = text[0], text[status_at], text[found_layout.column("Message")]
        entry, _, index = name.rpartition(".output.")
        api, _, direction = entry.rpartition(".")
        if not api or direction not in DIRECTIONS or not index.isdigit() or len(index) > 9:
            raise PairError(f"{path}: row {number}: API Name: {_shown(name)} is no <api>.<direction>.output.<i>")
        for column, cell in zip(found_layout.details_columns[4:status_at], text[4:status_at]):
            if cell and not _number(cell):
                raise PairError(f"{path}: row {number}: {column}: {_shown(cell)} is not a number")
        if status not in STATUS_WORDS:
            raise PairError(f"{path}: row {number}: Status: {_shown(status)} is not one of {_words()}")
        earlier = first.setdefault(name, [])
        twice = [n for n in earlier if found[_at(found, n)].raw == raw]
        if twice or len(earlier) >= sides:
            again = twice[0] if twice else earlier[0]
            raise PairError(f"{path}: row {number}: {_shown(name)} also in row {again}: an output has one row a side")
        earlier.append(number)
        found.append(DetailsRow(number, name, api, direction, raw, status, message))
    return found


def _at(rows: list[DetailsRow], number: int) -> int:
    return next(i for i, row in enumerate(rows) if row.number == number)


def by_entry(rows: Iterable[DetailsRow]) -> dict[tuple[str, str], list[DetailsRow]]:
    found: dict[tuple[str, str], list[DetailsRow]] = {}
    for row in rows:
        found.setdefault((row.api, row.direction), []).append(row)
    return found


def disagreement(status: str, output_statuses: Iterable[str]) -> str:
    """Why an entry's status cannot be its outputs' ("" where it can): better than its worst output."""
    statuses = [Status(s) for s in output_statuses]
    if not statuses or status not in STATUS_WORDS:
        return ""
    worst = worst_status(statuses)
    if _RANK[Status(status)] < _RANK[worst]:
        return f"{status} in the result row, and its details rows hold {worst.value}"
    return ""


def check_agreement(result_path: Path, results: list[ResultRow], details_path: Path, details: list[DetailsRow]) -> None:
    """PairError where the pair's two files disagree (the module's rules), naming the row."""
    statuses = {(row.api, d): (row, s) for row in results for d, s in row.statuses.items()}
    for row in details:
        if (row.api, row.direction) not in statuses:
            raise PairError(
                f"{details_path}: row {row.number}: {_shown(row.name)}: no row of {result_path.name} holds "
                f"{_shown(row.api)} {row.direction}"
            )
    for (api, direction), outputs in by_entry(details).items():
        result, status = statuses[(api, direction)]
        why = disagreement(status, (output.status for output in outputs))
        if why:
            raise PairError(f"{result_path}: row {result.number}: {_shown(api)} {direction}: {why}")


@dataclass
class Pair:
    layout: Layout | None
    results: list[ResultRow]
    details: list[DetailsRow]

    def outputs(self) -> dict[tuple[str, str], list[OutputResult]]:
        """Each entry's outputs as its details rows tell them (output_of_row)."""
        found: dict[tuple[str, str], list[OutputResult]] = {}
        for row in self.details:
            read = output_of_row(self.layout, row.raw) if self.layout is not None else None
            if read is not None:
                found.setdefault((row.api, row.direction), []).append(read[1])
        return found


def read(result_path: Path, details_path: Path, sides: int = 1) -> Pair:
    """Both files of a pair, each row checked and the two against each other. The details rows of the
    API being written when a run was killed (at the end of the file, its result row never written)
    are left out, as a resume leaves them."""
    layout, results = result_rows(result_path)
    details = details_rows(details_path, layout, sides)
    held = {(row.api, direction) for row in results for direction in row.statuses}
    while details and (details[-1].api, details[-1].direction) not in held:
        details.pop()
    check_agreement(result_path, results, details_path, details)
    return Pair(layout, results, details)


def faults_by_api(
    layout: Layout | None, results: list[list[str]], details: list[list[str]], journal: dict[tuple[str, str], Status]
) -> tuple[dict[str, str], set[str]]:
    """What a resume must not keep of a pair: by API, why its rows cannot stand (read as the module's
    rules read them, and against the journal's status of each entry); and the APIs that have details
    rows and no result row. Rows are cells as read (cells()), without the header."""
    faults: dict[str, str] = {}
    statuses: dict[str, dict[str, str]] = {}
    for row in results:
        api, forward, backward = [*row, "", "", ""][:3]
        if api in statuses:
            faults.setdefault(api, "its result row is in the file twice")
        statuses[api] = {d: s for d, s in ((FORWARD, forward), (BACKWARD, backward)) if s}
        for direction, status in statuses[api].items():
            if status not in STATUS_WORDS:
                faults.setdefault(api, f"{direction} {_shown(status)} is no status")
            elif (api, direction) in journal and journal[(api, direction)].value != status:
                said = journal[(api, direction)].value
                faults.setdefault(api, f"{direction} {status} in the result row, {said} in the journal")
    outputs: dict[tuple[str, str], list[str]] = {}
    seen: dict[str, list[list[str]]] = {}
    orphans: set[str] = set()
    width = len(layout.details_columns) if layout else 0
    status_at = layout.column("Status") if layout else 0
    for row in details:
        name = row[0] if row else ""
        entry, _, index = name.rpartition(".output.")
        api, _, direction = entry.rpartition(".")
        if api not in statuses:
            orphans.add(api or name)
            continue
        if len(row) != width or direction not in DIRECTIONS or not index.isdigit():
            faults.setdefault(api, f"a details row of {len(row)} cells is no details row ({_shown(name)})")
        elif row[status_at] not in STATUS_WORDS:
            faults.setdefault(api, f"{_shown(name)}: {_shown(row[status_at])} is no status")
        elif row in seen.get(name, []) or len(seen.get(name, [])) >= 2:
            faults.setdefault(api, f"{_shown(name)} has its details row twice")
        elif direction not in statuses[api]:
            faults.setdefault(api, f"{_shown(name)}: its result row holds no {direction}")
        else:
            outputs.setdefault((api, direction), []).append(row[status_at])
        seen.setdefault(name, []).append(row)
    for (api, direction), found in outputs.items():
        why = disagreement(statuses[api][direction], found)
        if why:
            faults.setdefault(api, f"{direction} {why}")
    return faults, orphans


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _words() -> str:
    return ", ".join(STATUS_WORDS)


def _shown(text: object) -> str:
    return repr(cut(printable(str(text)), 200))
