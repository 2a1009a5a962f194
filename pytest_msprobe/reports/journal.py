"""The journal beside a CSV pair: every entry's result, one JSON line each, as soon as it arrives.

The result CSV holds one row per API, written once both of its directions are in; a run
killed between an API's forward and its backward kept nothing of the forward. The journal
(`accuracy_checking_journal_{timestamp}.jsonl`, the pair's stem) keeps every entry's result
the moment the process that writes the CSVs receives it, flushed, so a kill loses at most the
entries in flight, and a resume (resume.py) runs only the entries it lacks: the rows it then
writes from journal and new results are the rows an uninterrupted run writes. Lines are
`EntryResult.to_dict()` in JSON (NaN and inf as Python's json writes them).

A serial run also writes `{"running": {...}}` before each entry runs: where the process dies in
the entry (a segfault or an abort in a kernel, the OOM killer), nothing closes that line, and a
resume records the entry as an error instead of running it again (the xdist controller does the
same for a worker that dies). The line is cut as soon as the entry's call returns or raises, so it
marks only a death inside the API's call; its result line, when it comes, is a line of its own. No pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import readback
from ..dumps.dump import DIRECTIONS
from ..results import EntryResult
from ..untrusted import cut, printable
from . import files, plain_results
from .csv_files import RESULT_PREFIX, ReportError

JOURNAL_PREFIX = "accuracy_checking_journal_"
RUNNING = "running"  # `{"running": {"api": ..., "direction": ..., "dump": ..., "pid": ...}}`


def journal_path_for(result_path: Path) -> Path:
    """`accuracy_checking_journal_{stem}.jsonl` beside `accuracy_checking_result_{stem}.csv`."""
    stem = result_path.name.replace(RESULT_PREFIX, JOURNAL_PREFIX, 1)
    return result_path.with_name(stem[: -len(".csv")] + ".jsonl" if stem.endswith(".csv") else stem + ".jsonl")


class Journal:
    """Appends the result of every finished entry, a line each, on disk at once; and, in a serial
    run, the entry about to run (`start`), so that a run the entry crashes leaves its name behind.

    fresh: the file is new, made exclusively (a link or a file already at its name is refused);
    else the journal of a resumed pair, appended to (never through a link). Unbuffered: nothing
    a full disk refused is written again later, after a cut.
    """

    def __init__(self, path: Path, fresh: bool = False):
        self.path = path
        self._fd: int | None = files.create(path, append=True) if fresh else files.append_fd(path)
        self._running: tuple[str, int] | None = None  # the entry running, and where its line starts

    def add(self, result: EntryResult) -> None:
        """Raises OSError when the line cannot be written (a full disk)."""
        self._write(result.to_dict())
        if self._running is not None and self._running[0] == result.entry:
            self._running = None  # its result closes its `running` line

    def start(self, api: str, direction: str, dump: str) -> None:
        """The entry about to run, on disk before it runs. Raises OSError when the line cannot be
        written (what a full disk took of it, `end` cuts)."""
        assert self._fd is not None
        self._running = (f"{api}.{direction}", os.fstat(self._fd).st_size)
        self._write({RUNNING: {"api": api, "direction": direction, "dump": dump, "pid": os.getpid()}})

    def end(self) -> None:
        """The entry's call returned or raised (or the run ends in order: Ctrl-C, -x, a full disk):
        its `running` line is cut (appends go on at the new end: O_APPEND). A kill after this, before
        its result line, leaves no mark: a resume runs it again, as before. A cut needs no room on
        the disk, as a line would."""
        if self._running is not None and self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._running[1])
            self._running = None

    def _write(self, record: dict) -> None:
        # ASCII: a lone surrogate of a hostile name is written as its escape, and read back as it was.
        data = (json.dumps(record) + "\n").encode("ascii")
        assert self._fd is not None
        while data:
            data = data[os.write(self._fd, data) :]

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


@dataclass
class Running:
    """The entry a run was running when its process died (a `running` line nothing closed)."""

    api: str
    direction: str
    dump: str = ""
    pid: int | None = None

    @property
    def entry(self) -> str:
        return f"{self.api}.{self.direction}"


@dataclass
class JournalContents:
    results: list[EntryResult] = field(default_factory=list)  # in the order they came
    crashed: Running | None = None
    lines: list[int] = field(default_factory=list)  # the line of each result, for a message naming it
    crashed_line: int = 0


class JournalError(ReportError):
    """A journal line that is no line a run writes: its text names the file, the line and the field."""


def read_journal(path: Path) -> list[EntryResult]:
    """The results a journal holds, in the order they came, after cutting a line torn by a kill."""
    return read_contents(path).results


def read_contents(path: Path) -> JournalContents:
    """What a journal holds, after cutting a line torn by a kill: the results in the order they
    came, and the entry running when the process died, where one was.

    Only the last line can be torn (a kill while it was written): it is cut, its entry runs again.
    Any other line that is no result, no `running` line, or holds a field of the wrong kind is a
    JournalError naming the file, the line and the field: a journal edited or forged is refused,
    never half read. Raises OSError when the file cannot be read or cut (read as every file read
    back is: readback; a link at its name is never followed).
    """
    if not os.path.lexists(path):
        return JournalContents()
    data = readback.read_bytes(path, readback.MAX_JOURNAL)
    whole = data.rfind(b"\n") + 1  # a kill can only tear the last line
    if whole < len(data):
        with files.open_existing(path) as handle:
            handle.truncate(whole)
    return parse(path, data[:whole])


def peek(path: Path) -> JournalContents:
    """What a journal holds, read only (a report leaves a run's files as they are: a torn last line
    is passed over, not cut); nothing where there is no journal. Raises OSError (readback),
    JournalError."""
    if not os.path.lexists(path):
        return JournalContents()
    data = readback.read_bytes(path, readback.MAX_JOURNAL)
    return parse(path, data[: data.rfind(b"\n") + 1])


def parse(path: Path, data: bytes) -> JournalContents:
    """The whole lines of a journal, each checked (plain_results); JournalError at the first that is
    no line a run writes."""
    contents = JournalContents()
    for number, line in enumerate(data.split(b"\n")[:-1], 1):
        try:
            record = json.loads(line)
            if isinstance(record, dict) and RUNNING in record:
                contents.crashed, contents.crashed_line = _running(record), number
                continue
            result = plain_results.entry_result(record)
        except (ValueError, RecursionError) as exc:  # FieldError, JSON's own (a line of 5,000 digits too)
            why = exc if isinstance(exc, plain_results.FieldError) else f"not JSON ({exc})"
            raise JournalError(f"{path}: line {number}: {printable(cut(str(why), 500))}: not read") from None
        contents.results.append(result)
        contents.lines.append(number)
        if contents.crashed and contents.crashed.entry == result.entry:
            contents.crashed = None  # the entry ended after all (its result came)
    return contents


def _running(record: dict) -> Running:
    """A `{"running": {"api": ..., "direction": ..., "dump": ..., "pid": ...}}` line, checked."""
    body = record[RUNNING]
    kinds = {"api": str, "direction": str, "dump": str, "pid": int}
    if len(record) != 1 or not isinstance(body, dict) or not {"api", "direction"} <= set(body) <= set(kinds):
        raise plain_results.FieldError(f"{RUNNING}: not the entry a run was running (api, direction, dump, pid)")
    for key, value in body.items():
        if not isinstance(value, kinds[key]) or isinstance(value, bool):
            raise plain_results.FieldError(f"{RUNNING}.{key}: expected {'an integer' if key == 'pid' else 'a string'}")
    if body["direction"] not in DIRECTIONS:
        raise plain_results.FieldError(f"{RUNNING}.direction: expected {' or '.join(DIRECTIONS)}")
    return Running(**body)
