"""The pytest nodes: a dump file and its entries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from .dump import Dump, DumpError, entry_kind, parse_entry_name, read_dump
from .messages import entry_message
from .results import ERROR, SKIP, EntryResult
from .summary import failure_text

if TYPE_CHECKING:
    from .session import MsprobeRun

RUN_KEY: pytest.StashKey[MsprobeRun] = pytest.StashKey()


class DumpFile(pytest.File):
    """A dump.json: one item per API entry, in dump order."""

    dump: Dump

    def collect(self) -> Any:
        try:
            self.dump = read_dump(self.path)
        except DumpError as exc:
            # Not a collection error: pytest would stop the whole session.
            yield UnreadableDump.from_parent(self, name="dump", message=str(exc))
            return
        self.config.stash[RUN_KEY].collected[self.nodeid] = self.dump
        for name in self.dump.entries:
            if entry_kind(name) != "module":
                yield EntryItem.from_parent(self, name=name)


class UnreadableDump(pytest.Item):
    def __init__(self, *, message: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise DumpError(self.message)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        return str(excinfo.value)

    def reportinfo(self) -> Any:
        return self.path, None, f"{self.path.name}: unreadable dump"


class PrecisionError(AssertionError):
    """An API whose outputs break the standard (or whose tested run raised)."""


class EntryItem(pytest.Item):
    """One API entry of a dump, checked on the device under test against the bench."""

    result: EntryResult | None = None

    def runtest(self) -> None:
        checker = self.config.stash[RUN_KEY].checker
        entry = parse_entry_name(self.name)
        if entry is None:
            self.result = EntryResult(
                self.name,
                "forward",
                SKIP,
                f"{self.name}: not an API entry name (<Type>.<api>.<n>.<forward|backward>)",
                dump=str(self.path),
            )
        else:
            assert isinstance(self.parent, DumpFile)
            try:
                self.result = checker.check(self.parent.dump, entry)
            except Exception as exc:
                # A fault of the plugin: the item fails with its traceback, the CSV still gets a row.
                self.result = EntryResult(
                    entry.prefix,
                    entry.direction,
                    SKIP,
                    f"pytest-msprobe failed on this entry: {type(exc).__name__}: {exc}",
                    dump=str(self.path),
                )
                raise
        if self.result.status == SKIP:
            pytest.skip(entry_message(self.result) or "nothing to compare")
        if self.result.status == ERROR:
            raise PrecisionError(failure_text(self.result, checker.standard.describe()))

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, PrecisionError):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> Any:
        # A domain that is not the end of the node id: pytest would show the
        # entry's dots as `::` in verbose lines.
        return self.path, None, f"{self.name} of {self.path.parent.name}"
