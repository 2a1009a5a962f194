"""The two CSV files of shared/spec/reports.md, and the bookkeeping that fills them.

One row per API in accuracy_checking_result, one per compared output in
accuracy_checking_details; a row is written and flushed as soon as its API is
finished, so a run killed at any moment keeps every finished API. No pytest,
no framework.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Callable, NamedTuple

from .. import readback
from ..dumps.dump import BACKWARD, FORWARD, parse_entry_name
from ..results import ERROR, EntryResult, OutputResult, Status
from ..untrusted import unescape
from . import files, msprobe_pytorch
from .cells import MAX_CELL, text_cell, untext
from .layouts import DEFAULT, LAYOUTS, MSPROBE_PYTORCH, Layout, of_result_header
from .messages import api_message, details_message

# This plugin's own layout (reports.md); msprobe's PyTorch one is in layouts.py beside it.
RESULT_COLUMNS = list(DEFAULT.result_columns)
DETAILS_COLUMNS = list(DEFAULT.details_columns)
# The headers a reader takes: either layout's (a pair is read in the layout its header names).
RESULT_HEADERS = [list(layout.result_columns) for layout in LAYOUTS]
DETAILS_HEADERS = [list(layout.details_columns) for layout in LAYOUTS]
RESULT_PREFIX = "accuracy_checking_result_"
DETAILS_PREFIX = "accuracy_checking_details_"
ENCODING = "utf-8-sig"  # msprobe's choice: spreadsheet programs open it right
STATUS_WORDS = {status.value for status in Status}


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


def read_entry_statuses(result_path: Path) -> list[tuple[str, str, str]]:
    """(api, direction, status) of every entry a result CSV holds a status for."""
    found = []
    for row in read_result_rows(result_path):
        row = row + [""] * (3 - len(row))
        found += [
            (row[0], direction, status) for direction, status in ((FORWARD, row[1]), (BACKWARD, row[2])) if status
        ]
    return found


@contextlib.contextmanager
def any_field_size() -> Iterator[None]:
    """The csv module refuses fields over 131,072 characters by default; a row this plugin
    wrote (an API name, an older run's uncut Message) may hold more, and is still a row."""
    previous = csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def read_csv_text(path: Path) -> str:
    """The text of a CSV file a run reads back (readback: no link followed, a regular file, at most
    readback.MAX_CSV bytes), its BOM taken off. Raises ReportError naming the file."""
    try:
        return readback.read_text(path, readback.MAX_CSV, ENCODING)
    except OSError as exc:  # readback.Unreadable names the file
        raise ReportError(str(exc)) from None


def read_result_rows(result_path: Path) -> list[list[str]]:
    """The rows of a result CSV in either layout, header checked, cells as written (text_cell
    undone; a blank cell, msprobe's " ", as ""; four cells a row)."""
    return read_result(result_path)[1]


def result_layout(result_path: Path) -> Layout | None:
    """The layout a result CSV is written in, by its header; None for a file without one yet."""
    return read_result(result_path)[0]


def read_result(result_path: Path) -> tuple[Layout | None, list[list[str]]]:
    """read_result_rows, and the layout its header names (None: no header yet)."""
    text = read_csv_text(result_path)
    try:
        with any_field_size():
            rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise ReportError(f"{result_path}: cannot be read as a result CSV: {exc}") from None
    if not rows:
        return None, []  # created, then killed before its header reached the disk
    layout = of_result_header(rows[0])
    if layout is None:
        raise ReportError(
            f"{result_path}: not an accuracy_checking_result CSV: its header is {rows[0][:4]}, "
            f"expected {' or '.join(str(header) for header in RESULT_HEADERS)}"
        )
    width = len(layout.result_columns)
    return layout, [[*cells(layout, row), *[""] * (width - len(row))][:width] for row in rows[1:] if row]


def cells(layout: Layout, row: list[str]) -> list[str]:
    """A row's cells as written: text_cell undone, a blank (msprobe's " ") as ""."""
    return ["" if cell == layout.blank else untext(cell) for cell in row]


def output_of_row(layout: Layout, row: list[str]) -> tuple[str, OutputResult] | None:
    """(the API Name, the output) a details row of either layout tells, as far as its columns do;
    None for a row that is not one (too short, an unknown status, a name without an output number)."""
    if len(row) != len(layout.details_columns):
        return None
    text = cells(layout, row)
    name, status, message = text[0], text[layout.column("Status")], text[layout.column("Message")]
    number = name.rpartition(".output.")[2]
    if status not in STATUS_WORDS or not number.isdigit():
        return None
    if layout is MSPROBE_PYTORCH:
        if not any(text[1:21]):
            return None  # msprobe's row of a direction without outputs, or of a tensor without a gradient
        output = msprobe_pytorch.output_of_cells(int(number), Status(status), row)
    else:
        cosine, max_abs, max_rel = (_number(cell) for cell in text[4:7])
        output = OutputResult(int(number), Status(status), text[1], text[2], None, cosine, max_abs, max_rel)
    output.reasons = [message] if message else []
    return name, output


def _number(cell: str) -> float | None:
    try:
        return float(cell) if cell else None
    except ValueError:
        return None


class CsvWriter:
    """Appends rows to one result file and its details file, flushing each API.

    exclusive: both files are new, created with O_EXCL (a name another run holds is never
    shared); else a resumed pair, appended to. layout: the columns and cells (layouts.py); a
    resumed pair's is its header's.
    """

    def __init__(self, result_path: Path, exclusive: bool = False, layout: Layout = DEFAULT):
        self.result_path = result_path
        self.details_path = details_path_for(result_path)
        self.layout = layout
        self._result = self._open(self.result_path, list(layout.result_columns), exclusive)
        try:
            self._details = self._open(self.details_path, list(layout.details_columns), exclusive)
        except BaseException:
            self._result.close()
            if exclusive:
                self.result_path.unlink()
            raise

    @classmethod
    def in_folder(cls, folder: Path, stamp: str | None = None, layout: Layout = DEFAULT) -> CsvWriter:
        """A new pair in folder, `_{stamp}` or, where another run took that, `_{stamp}_1`, ...

        Raises ReportError when the folder cannot hold them (read-only, a file in its place).
        """
        stamp = stamp or timestamp()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for n in range(1000):
                try:
                    return cls(folder / f"{RESULT_PREFIX}{stamp}{f'_{n}' if n else ''}.csv", True, layout)
                except FileExistsError:
                    continue
            raise FileExistsError(f"{RESULT_PREFIX}{stamp}_0.csv to _999.csv all exist")
        except OSError as exc:
            raise ReportError(f"{folder}: cannot write the CSV files there: {exc.strerror or exc}") from None

    @staticmethod
    def _open(path: Path, columns: list[str], exclusive: bool) -> IO[str]:
        # Never through a link planted at the name (files.py); FileExistsError where anything has it.
        handle = files.open_new(path, newline="") if exclusive else files.open_append(path, newline="")
        try:
            if exclusive or handle.tell() == 0:
                handle.write("\ufeff")
                csv.writer(handle).writerow(columns)
                handle.flush()  # a file to resume from the start, and a full disk found now
        except BaseException:
            handle.close()
            raise
        return handle

    def write_api(self, api: str, forward: EntryResult | None, backward: EntryResult | None) -> None:
        """Raises OSError when a file cannot take the rows (a full disk): what is on disk
        before them stays whole, and resume cuts a torn last row."""
        details = csv.writer(self._details)
        for result in (r for r in (forward, backward) if r is not None):
            details.writerows(self._details_rows(result))
        # Details first, on disk before the result row is even buffered: a result row on disk
        # always has its details beside it, and a details flush a full disk refuses takes no
        # result row down with it later (at close).
        self._details.flush()
        csv.writer(self._result).writerow(self._result_row(api, forward, backward))
        self._result.flush()

    def _details_rows(self, result: EntryResult) -> Iterable[list[str]]:
        if self.layout is MSPROBE_PYTORCH:
            return msprobe_pytorch.details_rows(result)
        return (
            [
                text_cell(result.output_name(row)),
                text_cell(row.bench_dtype),
                text_cell(row.tested_dtype),
                text_cell(row.shape if row.shape is not None else ""),
                number_cell(row.cosine),
                number_cell(row.max_abs_err),
                number_cell(row.max_rel_err),
                row.status.value,
                text_cell(details_message(result, row), MAX_CELL, " cut"),
            ]
            for row in result.outputs
        )

    def _result_row(self, api: str, forward: EntryResult | None, backward: EntryResult | None) -> list[str]:
        if self.layout is MSPROBE_PYTORCH:
            return msprobe_pytorch.result_row(api, forward, backward)
        message = api_message(forward, backward)
        return [
            text_cell(api),
            forward.status.value if forward else "",
            backward.status.value if backward else "",
            text_cell(message, MAX_CELL, " cut: every output's message is in its details row"),
        ]

    def close(self) -> None:
        """Closes both files; an error flushing what a full disk refused is not raised again."""
        for handle in (self._details, self._result):
            with contextlib.suppress(OSError):
                handle.close()


def split_node_id(node_id: str) -> tuple[str, str]:
    """(dump part, entry name) of an item's node id: the entry name may hold `::` itself,
    and the test name is the entry's escaped (items.py)."""
    dump, _, entry = node_id.partition("::")
    return dump, unescape(entry)


def crash_result(node_id: str, message: str) -> EntryResult | None:
    """The result of an entry whose process died while checking it (a segfault, an abort,
    the OOM killer): an error, so the API gets its row and the run its failure."""
    dump, entry = split_node_id(node_id)
    name = parse_entry_name(entry)
    if name is None:
        return None
    return EntryResult(name.prefix, name.direction, ERROR, reason=message, dump=dump)


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

    def __init__(self, skip: Iterable[str] = (), dump_of: Callable[[str], str] = str):
        self.expected: dict[tuple[str, str], set[str]] = {}
        self.results: dict[tuple[str, str], dict[str, EntryResult]] = {}
        self.written: set[tuple[str, str]] = set()
        self.skip = set(skip)  # APIs a resumed file already holds whole
        self.dump_of = dump_of  # a node id's dump part -> the dump as `add` names it

    def expect(self, node_ids: Iterable[str]) -> None:
        for node_id in node_ids:
            dump, entry = split_node_id(node_id)
            name = parse_entry_name(entry)
            if name is not None:
                self.expected.setdefault((self.dump_of(dump), name.prefix), set()).add(name.direction)

    def preload(self, dump: str, results: dict[str, dict[str, EntryResult]]) -> None:
        """Results an earlier run of this dump finished (a resumed journal), by API and direction:
        an API's row takes them beside the ones this run adds, or alone at the end."""
        for api, by_direction in results.items():
            self.results.setdefault((dump, api), {}).update(by_direction)

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
