"""Resume a run that was killed: which APIs its result CSV holds, and a clean end to append to.

Rows are written per API, details before result and each flushed, so a kill can
leave at most: a record cut off mid-write at the end of either file, and the
details rows of the one API whose result row never made it. `prepare` cuts
both away; that API then runs again and gets all its rows once. No pytest.
"""

from __future__ import annotations

import codecs
import csv
from collections.abc import Iterator
from pathlib import Path

from .report import DETAILS_COLUMNS, RESULT_COLUMNS, ReportError, any_field_size, details_path_for, untext


def prepare(result_path: Path) -> set[str]:
    """The APIs finished in result_path, after cutting a killed run's torn tail from both files.

    Called once, by the process that writes the CSVs, before anything runs.
    """
    if not result_path.is_file():
        raise ReportError(f"{result_path}: no such result CSV")
    try:
        return _prepare(result_path)
    except OSError as exc:  # unreadable, or read-only where a torn tail must go
        raise ReportError(f"{result_path}: cannot resume into it: {exc}") from None


def _prepare(result_path: Path) -> set[str]:
    rows, ends = complete_records(result_path, RESULT_COLUMNS)
    finished = {untext(row[0]) for row in rows[1:] if row}
    _truncate(result_path, ends[-1] if ends else 0)
    details = details_path_for(result_path)
    if details.is_file():
        rows, ends = complete_records(details, DETAILS_COLUMNS)
        # Orphans can only sit at the end: the rows of the API being written when the run died.
        while len(rows) > 1 and api_of_output(untext(rows[-1][0])) not in finished:
            rows.pop()
            ends.pop()
        _truncate(details, ends[-1] if ends else 0)
    return finished


def api_of_output(name: str) -> str:
    """`Functional.relu.0.backward.output.1` -> `Functional.relu.0`."""
    return name.rsplit(".output.", 1)[0].rsplit(".", 1)[0]


def complete_records(path: Path, columns: list[str]) -> tuple[list[list[str]], list[int]]:
    """The complete CSV records of a file (header first) and the byte offset where each ends."""
    data = path.read_bytes()
    bom = codecs.BOM_UTF8
    start = len(bom) if data.startswith(bom) else len(data) if bom.startswith(data) else 0  # a torn BOM too
    read_to = [start]
    rows: list[list[str]] = []
    ends: list[int] = []
    try:
        with any_field_size():
            for row in csv.reader(_lines(data, start, read_to), strict=True):
                if not data[: read_to[0]].endswith(b"\n"):
                    break  # the last line, cut off mid-write
                rows.append(row)
                ends.append(read_to[0])
    except csv.Error as exc:
        # A kill can only tear the last record: a record that does not parse with more
        # of the file after it is no torn tail, and cutting there would drop whole rows.
        if read_to[0] < len(data):
            raise ReportError(
                f"{path}: record {len(rows) + 1} is not a CSV row pytest-msprobe writes ({exc}): "
                "not resumed, nothing cut"
            ) from None
    if rows and rows[0] != columns:
        raise ReportError(
            f"{path}: not an accuracy_checking CSV of pytest-msprobe: its header is {rows[0][:4]}, expected {columns}"
        )
    if not rows and not ",".join(columns).encode().startswith(data[start:].rstrip(b"\r\n")):
        # Only a header torn mid-write is no header at all.
        raise ReportError(f"{path}: not an accuracy_checking CSV of pytest-msprobe: no header line")
    return rows, ends


def _lines(data: bytes, start: int, read_to: list[int]) -> Iterator[str]:
    """The text lines of data, recording in read_to how far the csv reader has read."""
    pos = start
    while pos < len(data):
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end + 1
        read_to[0] = end
        yield data[pos:end].decode("utf-8", errors="replace")
        pos = end


def _truncate(path: Path, length: int) -> None:
    if path.stat().st_size > length:
        with open(path, "r+b") as handle:
            handle.truncate(length)
    # No header left (killed before it was flushed): the writer starts the file afresh.
    if length == 0:
        path.write_bytes(b"")
