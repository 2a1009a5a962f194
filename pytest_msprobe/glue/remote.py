"""Dumps read by path on every host: what the controller tells its workers, and how a worker on
another host collects a dump it cannot read there.

pytest-xdist runs a test only once every worker collected the same node ids, so every worker,
on any host, must name the same items whatever it finds on its disk. The controller names each
dump (its path relative to the controller's rootdir, else the absolute path, as a serial run
there names it) and sends a worker on another host the path, that name and the entry names it
read. That worker reads the dump at that path (shared storage, as clusters have); where it
cannot, or finds another dump there, it still collects the same items, and each fails naming
the host and the path: a clear error per entry instead of a worker that cannot start, or an
xdist run that stops on "different tests collected".
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..dumps.dump import DumpError, entry_kind, parse_entry_name, read_dump
from ..results import ERROR, EntryResult
from ..untrusted import escape, unescape
from .items import RUN_KEY, DumpFile, EntryItem, PrecisionError

DUMPS = "msprobe_dumps"  # workerinput: the dumps as the controller named them
HOST = "msprobe_host"  # workerinput: the host the worker runs on, as its gateway spec says


def dump_nodeid(path: Path, rootpath: Path) -> str:
    """The node id of a dump: relative to the rootdir, also outside it (`../dumps/rank0/dump.json`),
    where pytest would name every dump alike, `::<entry>`, and their rows would share one CSV pair.
    Relative, so that runners with their checkouts elsewhere (CI shards) name it alike."""
    return Path(os.path.relpath(path, rootpath)).as_posix()


def item_names(path: Path) -> list[str]:
    """The names of the items of a dump, in dump order (module entries are none)."""
    return [name for name in read_dump(path).entries if entry_kind(name) != "module"]


@dataclass(frozen=True)
class SharedDump:
    """A dump as the controller names it to its workers."""

    path: str
    nodeid: str
    items: tuple[str, ...] | None = None  # for a worker on another host

    def to_dict(self) -> dict[str, Any]:
        # Names escaped on the way (execnet sends UTF-8, and a name may hold a lone surrogate).
        items = None if self.items is None else [escape(name) for name in self.items]
        return {"path": self.path, "nodeid": self.nodeid, "items": items}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SharedDump:
        items = data.get("items")
        return cls(data["path"], data["nodeid"], None if items is None else tuple(map(unescape, items)))


def describe(dump_files: Sequence[Path], rootpath: Path, with_items: bool) -> list[SharedDump]:
    return [
        SharedDump(str(path), dump_nodeid(path, rootpath), _items(path) if with_items else None) for path in dump_files
    ]


def _items(path: Path) -> tuple[str, ...] | None:
    try:
        return tuple(item_names(path))
    except DumpError:
        return None  # unreadable here too: every worker collects it as pytest does, one failing item


def shipped(workerinput: dict | None) -> list[SharedDump] | None:
    """The dumps the controller sent this worker (None outside xdist, or from an older controller)."""
    if not workerinput or DUMPS not in workerinput:
        return None
    return [SharedDump.from_dict(data) for data in workerinput[DUMPS]]


class RemoteDumpFile(DumpFile):
    """A dump on a worker of another host: the controller's items, whatever this host reads."""

    shared: SharedDump
    host: str

    def collect(self) -> Any:
        names = self.shared.items or ()
        problem = ""
        try:
            self.dump = read_dump(self.path)
        except DumpError as exc:
            problem = f"the dump cannot be read on host {self.host}: {exc}"
        else:
            found = [name for name in self.dump.entries if entry_kind(name) != "module"]
            if found != list(names):
                problem = (
                    f"{self.path} on host {self.host} is not the dump the controller read there: "
                    f"{len(found)} entries on {self.host}, {len(names)} on the controller (shared storage out of sync?)"
                )
        # Test names as the controller's: the entries' names, escaped (untrusted.py).
        if problem:
            for name in names:
                unreadable = UnreadableEntry.from_parent(self, name=escape(name), problem=problem)
                unreadable.entry = name
                yield unreadable
            return
        self.config.stash[RUN_KEY].collected[self.nodeid] = self.dump
        for name in names:
            item = EntryItem.from_parent(self, name=escape(name))
            item.entry = name
            yield item


class UnreadableEntry(EntryItem):
    """An entry of a dump this host cannot read: an error naming the host and the path."""

    def __init__(self, *, problem: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.problem = problem

    def runtest(self) -> None:
        entry = parse_entry_name(self.entry)
        api, direction = (entry.prefix, entry.direction) if entry else (self.name, "forward")
        self.result = EntryResult(api, direction, ERROR, self.problem, dump=str(self.path))
        raise PrecisionError(f"{self.name}: {self.problem}")


def collector(parent: pytest.Collector, path: Path, shared: SharedDump, host: str) -> DumpFile:
    """The collector of a dump on this worker, under the controller's node id, a child of the
    session: named by that id, so -k matches its folders' names, as it does a test file's."""
    if shared.items is None:
        local: DumpFile = DumpFile.from_parent(parent, path=path, nodeid=shared.nodeid, name=shared.nodeid)
        return local
    remote: RemoteDumpFile = RemoteDumpFile.from_parent(parent, path=path, nodeid=shared.nodeid, name=shared.nodeid)
    remote.shared, remote.host = shared, host
    return remote


def in_dump_order(session: pytest.Session, items: list[pytest.Item], dumps: Sequence[SharedDump], host: str) -> None:
    """Add the items of the dumps missing on this host, so that every worker lists the same
    items in the same order: the collected ones by dump, the missing ones where their dump goes."""
    missing = [shared for shared in dumps if shared.items is not None and not Path(shared.path).is_file()]
    if not missing:
        return
    by_dump: dict[str, list[pytest.Item]] = {}
    others: list[pytest.Item] = []
    for item in items:
        dump = item.nodeid.rpartition("::")[0]
        (by_dump.setdefault(dump, []) if isinstance(item, EntryItem) else others).append(item)
    for shared in missing:
        by_dump[shared.nodeid] = list(_collect(collector(session, Path(shared.path), shared, host)))
    items[:] = [*others, *(item for shared in dumps for item in by_dump.get(shared.nodeid, []))]


def _collect(node: pytest.Collector) -> Iterator[pytest.Item]:
    for child in node.collect():
        if isinstance(child, pytest.Item):
            yield child
