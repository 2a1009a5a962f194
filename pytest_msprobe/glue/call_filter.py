"""pytest glue of --msprobe-filter: which items another item's check stands for (dumps/call_groups.py).

Decided once the items of the run are final (after -k, resume, msprobe's lists, a shard's split),
from the dump and the items alone: every xdist worker collects the same items and comes to the same
answer, so an item stood for by one that runs on another worker needs nothing from it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ..dumps.call_groups import group_key
from ..dumps.dump import parse_entry_name
from .items import DumpFile, EntryItem


class CallFilter:
    def __init__(self) -> None:
        self.stood_for = 0  # items another's check stands for
        self.standing = 0  # items whose check stands for others

    def pytest_report_header(self) -> list[str]:
        return [
            "msprobe: --msprobe-filter: of the calls of an API equal but for the Max and Min of their tensors, "
            "the first stands for the others, which SKIP naming it (msprobe's acc_check -f)"
        ]

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> Iterator[None]:
        yield  # every other plugin first: the items this run checks, whatever deselected the rest
        first: dict[tuple[Any, ...], EntryItem] = {}
        standing = set()
        for item in sorted(_entry_items(items), key=lambda item: item.position or 0):
            dump = item.parent.dump  # type: ignore[union-attr]
            name = parse_entry_name(item.entry)
            # An entry the dump cannot give whole (nested past the parser's depth) SKIPs saying so: in no group.
            key = group_key(dump.entries, name) if name is not None and not dump.fault(name) else None
            if key is None:
                continue
            representative = first.setdefault((item.path, *key), item)
            if representative is not item:
                item.stood_for_by = representative.entry
                standing.add(id(representative))
                self.stood_for += 1
        self.standing = len(standing)

    def pytest_report_collectionfinish(self, config: pytest.Config) -> list[str]:
        if hasattr(config, "workerinput"):
            return []
        return [f"msprobe: --msprobe-filter: {self.stood_for} entries stood for by {self.standing} checked ones"]


def _entry_items(items: list[pytest.Item]) -> Iterator[EntryItem]:
    for item in items:
        if isinstance(item, EntryItem) and isinstance(item.parent, DumpFile) and hasattr(item.parent, "dump"):
            yield item
