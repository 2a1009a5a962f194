"""Resume a run that was killed or cut short: what its files hold, and a clean end to append to.

Rows are written per API, details before result and each flushed, so a kill can
leave at most: a record cut off mid-write at the end of either file, and the
details rows of the one API whose result row never made it. `prepare` cuts
both away; that API then runs again and gets all its rows once.

`resume` works per entry: the journal beside the pair (journal.py) holds every
entry the killed run finished, so only the entries it lacks run again, and a row
a partial run wrote without a direction the dump has (`-k forward`) is written
again, whole. No pytest.
"""

from __future__ import annotations

import codecs
import csv
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import readback
from ..dumps.dump import BACKWARD, FORWARD
from ..results import ERROR, SKIP, EntryResult, OutputResult, Status
from ..untrusted import cut, printable
from . import files, pair_rows
from .csv_files import (
    DETAILS_HEADERS,
    RESULT_HEADERS,
    STATUS_WORDS,
    ReportError,
    any_field_size,
    cells,
    details_path_for,
    output_of_row,
    read_finished_apis,
    read_result_rows,
    untext,
)
from .journal import Journal, JournalContents, JournalError, journal_path_for, read_contents, read_journal
from .layouts import Layout, of_details_header, of_result_header
from .messages import split_message


def prepare(result_path: Path) -> set[str]:
    """The APIs finished in result_path, after cutting a killed run's torn tail from both files.

    Called once, by the process that writes the CSVs, before anything runs.
    """
    if not os.path.lexists(result_path):
        raise ReportError(f"{result_path}: no such result CSV")
    try:
        return _prepare(result_path)
    except OSError as exc:  # unreadable, or read-only where a torn tail must go
        raise ReportError(f"{result_path}: cannot resume into it: {exc}") from None


def _prepare(result_path: Path) -> set[str]:
    rows, ends = complete_records(result_path, RESULT_HEADERS)
    finished = {untext(row[0]) for row in rows[1:] if row}
    layout = of_result_header(rows[0]) if rows else None
    _truncate(result_path, ends[-1] if ends else 0)
    details = details_path_for(result_path)
    if os.path.lexists(details):
        rows, ends = complete_records(details, DETAILS_HEADERS)
        if layout is not None and rows and of_details_header(rows[0]) is not layout:
            raise ReportError(
                f"{details}: its header is not of the {layout.name} layout its result CSV {result_path.name} "
                "is written in: not a pair, nothing cut"
            )
        # Orphans can only sit at the end: the rows of the API being written when the run died.
        while len(rows) > 1 and api_of_output(untext(rows[-1][0])) not in finished:
            rows.pop()
            ends.pop()
        _truncate(details, ends[-1] if ends else 0)
    return finished


def api_of_output(name: str) -> str:
    """`Functional.relu.0.backward.output.1` -> `Functional.relu.0`."""
    return name.rsplit(".output.", 1)[0].rsplit(".", 1)[0]


def complete_records(
    path: Path, headers: list[list[str]], data: bytes | None = None
) -> tuple[list[list[str]], list[int]]:
    """The complete CSV records of a file (header first, one of `headers`: a layout's) and the
    byte offset where each ends. Raises ReportError naming the file (not one this plugin writes,
    or unreadable: readback's)."""
    data = read_csv_bytes(path) if data is None else data
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
    if rows and rows[0] not in headers:
        expected = " or ".join(str(header[:4]) + ("..." if len(header) > 4 else "") for header in headers)
        raise ReportError(
            f"{path}: not an accuracy_checking CSV of pytest-msprobe: its header is {rows[0][:4]}, expected {expected}"
        )
    torn = data[start:].rstrip(b"\r\n")
    if not rows and not any(",".join(header).encode().startswith(torn) for header in headers):
        # Only a header torn mid-write is no header at all.
        raise ReportError(f"{path}: not an accuracy_checking CSV of pytest-msprobe: no header line")
    return rows, ends


def read_csv_bytes(path: Path) -> bytes:
    """A CSV file's bytes, read back as every such file is (readback). Raises ReportError naming it."""
    try:
        return readback.read_bytes(path, readback.MAX_CSV)
    except OSError as exc:  # readback.Unreadable names the file
        raise ReportError(str(exc)) from None


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
    """Cut path to length (0: no header left, killed before it was flushed: the writer starts
    the file afresh), never through a link."""
    with files.open_existing(path) as handle:
        if os.fstat(handle.fileno()).st_size > length:
            handle.truncate(length)


# -- per entry: the journal, and rows a partial run left without a direction ------------------


@dataclass
class Resumed:
    """What a resumed pair of files holds, once made ready to append to (`resume`)."""

    result_path: Path
    # Entries not to run again: (api, direction). The APIs of `complete` have every direction in it.
    finished: set[tuple[str, str]] = field(default_factory=set)
    complete: set[str] = field(default_factory=set)  # APIs whose rows stay as they are
    # Results the journal holds of APIs that have no row (now): their rows are written once the
    # entries they lack have run, as an uninterrupted run writes them.
    waiting: dict[str, dict[str, EntryResult]] = field(default_factory=dict)
    reopened: list[str] = field(default_factory=list)  # APIs whose rows lacked a direction the dump has
    rerun: dict[str, str] = field(default_factory=dict)  # APIs whose rows cannot stand, and why: run again
    # APIs with an entry --msprobe-filter left unchecked, checked now (a run without the filter): also reopened
    unfiltered: list[str] = field(default_factory=list)
    earlier: list[EntryResult] = field(default_factory=list)  # every entry not run again, for the verdict
    # The entry the resumed run was running when its process died (the journal's open `running`
    # line): an error now, not run again.
    crashed: list[EntryResult] = field(default_factory=list)
    # This run's hold on the pair and its journal, from before they are touched to the run's end.
    lock: files.ResultLock | None = None

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def resume(result_path: Path, dump_entries: set[tuple[str, str]] | None = None, filtering: bool = False) -> Resumed:
    """Make a killed or partial run's files ready to append to, and say what is left to run.

    `dump_entries`, the (api, direction) of the dump's entries (None where the dump cannot be
    read), tells a row that lacks a direction the dump has (a run with `-k forward`): such a
    row is cut from both files and written again, whole, once the entries it lacks have run;
    the results it held come back from the journal (an API the journal lacks runs whole).
    Details rows go first, so a kill between the two rewrites leaves a row whose details a
    next resume writes again. Unless the resuming run `filtering` (--msprobe-filter), an entry
    the filter left unchecked is not finished: its row is written again the same way, with its
    own verdict.

    The pair and its journal are locked first, for the whole run (Resumed.lock: release it at the
    end): a second run that writes them is refused. Raises ReportError (resuming cannot start).
    """
    if not os.path.lexists(result_path):
        raise ReportError(f"{result_path}: no such result CSV")
    try:
        lock = files.ResultLock.acquire(result_path)
    except OSError as exc:  # LockHeld names the holder, FileRefused the link
        raise ReportError(f"cannot resume into it: {exc}" if isinstance(exc, files.LockHeld) else str(exc)) from None
    try:
        state = _resume(result_path, dump_entries, filtering)
    except BaseException:
        lock.release()
        raise
    state.lock = lock
    return state


def _resume(result_path: Path, dump_entries: set[tuple[str, str]] | None, filtering: bool) -> Resumed:
    kept_apis = prepare(result_path)
    journal_path = journal_path_for(result_path)
    try:
        contents = read_contents(journal_path)
        rows = read_result_rows(result_path)
    except OSError as exc:
        raise ReportError(f"{result_path}: cannot resume into it: {exc}") from None
    if dump_entries is not None:
        _check_journal_entries(journal_path, contents, dump_entries)
    state = Resumed(result_path)
    # Rows that cannot stand (a status that is no word, a row twice, a row better than its details or
    # other than its journal): their API runs again, whole; details rows of no API's row are cut.
    journal = _latest(contents.results)
    layout, details = _details_cells(result_path)
    faults, orphans = pair_rows.faults_by_api(
        layout, rows, details, {key: result.status for key, result in journal.items()}
    )
    state.rerun = {api: why for api, why in faults.items() if api in kept_apis}
    kept_apis -= set(state.rerun)
    journal = {key: result for key, result in journal.items() if key[0] not in state.rerun}
    rows = [row for row in rows if row[0] not in state.rerun]
    crashed = contents.crashed
    if crashed is not None and crashed.api not in kept_apis and (crashed.api, crashed.direction) not in journal:
        result = EntryResult(crashed.api, crashed.direction, ERROR, crash_message(journal_path), dump=crashed.dump)
        try:  # a result like any other from now on: a next resume finds it there
            writer = Journal(journal_path)
            writer.add(result)
            writer.close()
        except OSError as exc:
            raise ReportError(f"{journal_path}: cannot write to it: {exc}") from None
        journal[(crashed.api, crashed.direction)] = result
        state.crashed.append(result)
    directions: dict[str, set[str]] = {}
    for api, direction in dump_entries or ():
        directions.setdefault(api, set()).add(direction)
    statuses: dict[str, dict[str, str]] = {}
    messages: dict[str, str] = {}
    for row in rows:
        row = row + [""] * (4 - len(row))
        statuses[row[0]] = {d: s for d, s in ((FORWARD, row[1]), (BACKWARD, row[2])) if s}
        messages[row[0]] = row[3]
    for api in (api for api in statuses if api in kept_apis):  # in file order
        held = statuses[api]
        lacking = directions.get(api, set()) - set(held) if dump_entries is not None else set()
        unfiltered = set() if filtering else _filtered(api, held, journal, messages[api])
        if not lacking | unfiltered:
            state.complete.add(api)
            state.finished |= {(api, FORWARD), (api, BACKWARD)}
            continue
        state.reopened.append(api)
        if unfiltered:
            state.unfiltered.append(api)
        kept = [d for d in held if d not in unfiltered]
        if all((api, d) in journal for d in kept):
            state.waiting[api] = {d: journal[(api, d)] for d in kept}
    for (api, direction), result in journal.items():
        if api not in kept_apis and (filtering or not result.filtered):
            state.waiting.setdefault(api, {})[direction] = result
    for api, results in state.waiting.items():
        state.finished |= {(api, direction) for direction in results}
    if state.reopened or state.rerun or orphans:
        _cut_apis(result_path, set(state.reopened) | set(state.rerun) | orphans)
    state.earlier = _earlier(result_path, state, statuses, rows, journal)
    return state


def _check_journal_entries(journal_path: Path, contents: JournalContents, dump_entries: set[tuple[str, str]]) -> None:
    """A journal names only the dump's entries: a line of another's would add a row the dump has not."""
    named = [(line, result.api, result.direction) for line, result in zip(contents.lines, contents.results)]
    if contents.crashed is not None:
        named.append((contents.crashed_line, contents.crashed.api, contents.crashed.direction))
    for line, api, direction in named:
        if (api, direction) not in dump_entries:
            raise JournalError(
                f"{journal_path}: line {line}: {printable(cut(api, 200))}.{direction} is no entry of the dump: "
                "a journal of another dump, or edited; not resumed"
            )


def _details_cells(result_path: Path) -> tuple[Layout | None, list[list[str]]]:
    """The layout of the details rows beside a result CSV (after prepare) and the rows, cells as
    read (csv_files.cells), without the header."""
    details = details_path_for(result_path)
    if not os.path.lexists(details):
        return None, []
    rows, _ = complete_records(details, DETAILS_HEADERS)
    layout = of_details_header(rows[0]) if rows else None
    if layout is None:
        return None, []
    return layout, [cells(layout, row) for row in rows[1:] if row]


def _filtered(api: str, held: dict[str, str], journal: dict[tuple[str, str], EntryResult], message: str) -> set[str]:
    """The directions of an API's row that --msprobe-filter left unchecked: a SKIP naming the entry
    that stood for it, in the journal, or in the row's Message where the journal lacks it."""
    texts = dict(zip((FORWARD, BACKWARD), split_message(message, held.get(FORWARD, ""), held.get(BACKWARD, ""))))
    found = set()
    for direction, status in held.items():
        result = journal.get((api, direction))
        if result is None and status == SKIP.value:
            result = EntryResult(api, direction, SKIP, texts[direction])  # its entry read from the Message
        if result is not None and result.filtered:
            found.add(direction)
    return found


def describe(state: Resumed) -> str:
    """For the report header: what is not run again, and which rows are written again."""
    entries = sum(len(results) for results in state.waiting.values())
    text = f"{len(state.complete)} APIs already finished"
    if entries:
        text += f" and {entries} entries of APIs without a row (its journal)"
    text += " are not run again"
    lacking = len(state.reopened) - len(state.unfiltered)
    if lacking:
        text += f"; {lacking} rows without a direction the dump has are written again, whole"
    if state.unfiltered:
        text += (
            f"; {len(state.unfiltered)} rows with entries --msprobe-filter left unchecked are checked now and "
            "written again, whole"
        )
    if state.rerun:
        named = "; ".join(f"{printable(cut(api, 200))}: {why}" for api, why in list(state.rerun.items())[:3])
        more = f"; and {len(state.rerun) - 3} more" if len(state.rerun) > 3 else ""
        text += f"; {len(state.rerun)} rows that disagree with their details or journal run again ({named}{more})"
    for result in state.crashed:  # a name from the dump, through the journal: escaped, cut
        text += f"; {cut(printable(result.entry), 1000)} is an error, not run again: {result.reason}"
    return text


def crash_message(journal_path: Path) -> str:
    """The reason of the entry a serial run was running when its process died."""
    return (
        "the process ended while this entry ran (a crash in the API: a segfault or an abort; or a kill: "
        f"the OOM killer, kill -9): not run again; see the run's journal {journal_path.name}"
    )


def _latest(results: list[EntryResult]) -> dict[tuple[str, str], EntryResult]:
    return {(result.api, result.direction): result for result in results}


def _cut_apis(result_path: Path, apis: set[str]) -> None:
    """Both files without the rows of `apis`, each replaced whole (details first)."""
    details = details_path_for(result_path)
    if os.path.lexists(details):
        _rewrite_without(details, DETAILS_HEADERS, lambda row: api_of_output(untext(row[0])) in apis)
    _rewrite_without(result_path, RESULT_HEADERS, lambda row: untext(row[0]) in apis)


def _rewrite_without(path: Path, headers: list[list[str]], dropped: Callable[[list[str]], bool]) -> None:
    """The file with the records `dropped` says out, every other byte as it was."""
    data = read_csv_bytes(path)
    rows, ends = complete_records(path, headers, data)
    keep = bytearray(data[: ends[0]]) if ends else bytearray()  # the BOM and the header
    for i in range(1, len(rows)):
        if rows[i] and not dropped(rows[i]):
            keep += data[ends[i - 1] : ends[i]]
    temporary = files.replace_temporary(path)
    files.write_new(temporary, bytes(keep))
    os.replace(temporary, path)


def _earlier(
    result_path: Path,
    state: Resumed,
    statuses: dict[str, dict[str, str]],
    rows: list[list[str]],
    journal: dict[tuple[str, str], EntryResult],
) -> list[EntryResult]:
    """The results of every entry that is not run again: from the journal where it holds them,
    else from the result row's status and the details rows' outputs (the file of a run without one)."""
    earlier = [result for results in state.waiting.values() for result in results.values()]
    messages = {row[0]: row[3] if len(row) > 3 else "" for row in rows}
    outputs = read_details_outputs(details_path_for(result_path)) if state.complete - {a for a, _ in journal} else {}
    for api in (api for api in statuses if api in state.complete):  # in file order
        for direction, status in statuses.get(api, {}).items():
            found = journal.get((api, direction))
            if found is None:
                if status not in STATUS_WORDS:
                    continue  # not a row this plugin wrote: nothing to count
                rows_of = outputs.get((api, direction), [])
                message = "" if rows_of else messages.get(api, "")
                found = EntryResult(api, direction, Status(status), message, rows_of)
            earlier.append(found)
    return earlier


def read_details_outputs(details: Path) -> dict[tuple[str, str], list[OutputResult]]:
    """The outputs of a details CSV of either layout by (api, direction), as far as its columns tell them."""
    found: dict[tuple[str, str], list[OutputResult]] = {}
    if not os.path.lexists(details):
        return found
    rows, _ = complete_records(details, DETAILS_HEADERS)
    layout = of_details_header(rows[0]) if rows else None
    if layout is None:
        return found
    for row in rows[1:]:
        read = output_of_row(layout, row)
        if read is None:
            continue
        name, output = read
        api, _, direction = name.rpartition(".output.")[0].rpartition(".")
        found.setdefault((api, direction), []).append(output)
    return found


def finished_entries(result_path: Path) -> set[tuple[str, str]]:
    """The entries a result CSV and its journal hold, read only (a worker without its controller's word)."""
    found = {(api, direction) for api in read_finished_apis(result_path) for direction in (FORWARD, BACKWARD)}
    return found | set(_latest(read_journal(journal_path_for(result_path))))
