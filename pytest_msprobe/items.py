"""The pytest nodes: a dump file and its entries."""

from __future__ import annotations

from typing import Optional

import pytest

from . import summary
from .check import check_entry
from .compare import ERROR, SKIP
from .dump import DumpError, entry_kind, parse_entry_name, read_dump
from .outcome import EntryResult
from .untrusted import cut, escape, printable

RUN_KEY = pytest.StashKey["MsprobeRun"]()


class DumpFile(pytest.File):
    """A dump.json: one item per API entry, in dump order."""

    def collect(self):
        try:
            self.dump = read_dump(self.path)
        except DumpError as exc:
            # Not a collection error: pytest would stop the whole session.
            yield UnreadableDump.from_parent(self, name="dump", message=printable(str(exc)))
            return
        self.config.stash[RUN_KEY].dumps[self.nodeid] = self.dump
        for name in self.dump.entries:
            if entry_kind(name) != "module":
                # The test name is what terminals and reports show: the entry's, escaped (untrusted.py).
                item = EntryItem.from_parent(self, name=escape(name))
                item.entry = name
                yield item


class UnreadableDump(pytest.Item):
    def __init__(self, *, message: str, **kwargs):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise DumpError(self.message)

    def repr_failure(self, excinfo, style=None) -> str:
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: unreadable dump"


class PrecisionError(AssertionError):
    """An API whose outputs break the standard (or whose tested run raised)."""


class EntryItem(pytest.Item):
    """One API entry of a dump, checked on the device under test against the bench."""

    result: Optional[EntryResult] = None
    entry: str = ""  # the entry's name in the dump (self.name is it escaped)

    def runtest(self) -> None:
        settings = self.config.stash[RUN_KEY].settings
        entry = parse_entry_name(self.entry)
        if entry is None:
            self.result = EntryResult(self.name, "forward", SKIP, f"{cut(self.name, 200)}: not an API entry name "
                                      "(<Type>.<api>.<n>.<forward|backward>)", dump=str(self.path))
        else:
            try:
                self.result = check_entry(self.parent.dump, entry, settings)
            except Exception as exc:
                # A fault of the plugin: the item fails with its traceback, the CSV still gets a row.
                self.result = EntryResult(entry.prefix, entry.direction, SKIP,
                                          f"pytest-msprobe failed on this entry: {type(exc).__name__}: {exc}",
                                          dump=str(self.path))
                raise
        if self.result.status == SKIP:
            pytest.skip(printable(self.result.message or "nothing to compare"))
        if self.result.status == ERROR:
            raise PrecisionError(printable(summary.failure_text(self.result, settings.standard.describe())))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, PrecisionError):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        # A domain that is not the end of the node id: pytest would show the
        # entry's dots as `::` in verbose lines.
        return self.path, None, f"{self.name} of {self.path.parent.name}"
