"""The pytest nodes: a dump file and its entries."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy
import pytest

from ..dumps.dump import Dump, DumpError, entry_kind, parse_entry_name, read_dump
from ..reports.messages import entry_message
from ..reports.summary import failing, failure_text
from ..results import ERROR, SKIP, EntryResult, filtered
from ..untrusted import cut, escape, printable

if TYPE_CHECKING:
    from .session import MsprobeRun

RUN_KEY: pytest.StashKey[MsprobeRun] = pytest.StashKey()
MAX_TERMINAL = 10_000  # characters of one entry's message in the terminal


class _ConftestsLeftOut:
    """A hook relay without some conftest.py modules, as pytest's own (main.FSHookProxy)."""

    def __init__(self, plugins: pluggy.PluginManager, left_out: set[ModuleType]):
        self._plugins, self._left_out = plugins, left_out

    def __getattr__(self, name: str) -> pluggy.HookCaller:
        caller = self._plugins.subset_hook_caller(name, remove_plugins=self._left_out)
        self.__dict__[name] = caller
        return caller


class DumpHooks:
    """The hooks of a dump's nodes: the plugins', and those of the conftest.py files pytest
    imported (at startup, or for the tests the command line names) in the rootdir, a folder
    above it, or a folder above the dump that is not its own. pytest's node.ihook knows the
    conftests of the folders it walked, and it walks no dump's (session.py): it would leave out
    the rootdir's conftest.py too. A plugin: a conftest registered later is taken in."""

    def __init__(self, config: pytest.Config, dump_folders: set[Path]):
        self.config, self.dump_folders = config, dump_folders
        self._by_dump: dict[Path, Any] = {}  # node.ihook is read a dozen times an entry

    def of(self, path: Path) -> Any:
        """The hooks of the nodes of the dump at path."""
        hooks = self._by_dump.get(path)
        if hooks is None:
            plugins, rootpath = self.config.pluginmanager, self.config.rootpath
            above = {rootpath, *rootpath.parents, *path.parents} - self.dump_folders
            left_out = {
                plugin
                for name, plugin in plugins.list_name_plugin()
                # Registered under their path (PytestPluginManager._importconftest).
                if isinstance(plugin, ModuleType) and name.endswith("conftest.py") and Path(name).parent not in above
            }
            hooks = self._by_dump[path] = _ConftestsLeftOut(plugins, left_out) if left_out else self.config.hook
        return hooks

    def pytest_plugin_registered(self, plugin_name: str) -> None:
        if plugin_name and plugin_name.endswith("conftest.py"):
            self._by_dump.clear()


class DumpFile(pytest.File):
    """A dump.json: one item per API entry, in dump order."""

    dump: Dump

    @property
    def ihook(self) -> Any:
        return self.config.stash[RUN_KEY].hooks.of(self.path)

    def collect(self) -> Any:
        try:
            self.dump = read_dump(self.path)
        except DumpError as exc:
            # Not a collection error: pytest would stop the whole session.
            yield UnreadableDump.from_parent(self, name="dump", message=printable(str(exc)))
            return
        self.config.stash[RUN_KEY].collected[self.nodeid] = self.dump
        for position, name in enumerate(self.dump.entries):
            if entry_kind(name) != "module":
                # The test name is what terminals and reports show: the entry's, escaped (untrusted.py).
                item: EntryItem = EntryItem.from_parent(self, name=escape(name))
                item.entry = name
                item.position = position  # its place in the dump: the order msprobe recorded the calls
                yield item


class UnreadableDump(pytest.Item):
    def __init__(self, *, message: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.message = message

    @property
    def ihook(self) -> Any:
        return self.config.stash[RUN_KEY].hooks.of(self.path)

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
    entry: str = ""  # the entry's name in the dump (self.name is it escaped)
    position: int | None = None
    stood_for_by: str = ""  # --msprobe-filter: the entry whose check stands for this one (call_filter.py)

    @property
    def ihook(self) -> Any:
        return self.config.stash[RUN_KEY].hooks.of(self.path)

    def runtest(self) -> None:
        run = self.config.stash[RUN_KEY]
        checker = run.checker
        entry = parse_entry_name(self.entry)
        if entry is None:
            # Its row goes under the test's name: the entry's, escaped, and so safe to send and write.
            self.result = EntryResult(
                self.name,
                "forward",
                SKIP,
                f"{cut(self.name, 200)}: not an API entry name (<Type>.<api>.<n>.<forward|backward>)",
                dump=str(self.path),
            )
        elif self.stood_for_by:
            self.result = filtered(entry.prefix, entry.direction, self.stood_for_by, str(self.path), self.position)
        else:
            assert isinstance(self.parent, DumpFile)
            try:
                self.result = checker.check(self.parent.dump, entry, self.position)
            except Exception as exc:
                # A fault of the plugin: the item fails with its traceback, and its row says error as
                # the item does (a SKIP row beside a failed item would hide the fault in the CSV).
                self.result = EntryResult(
                    entry.prefix,
                    entry.direction,
                    ERROR,
                    f"pytest-msprobe failed on this entry: {type(exc).__name__}: {exc}",
                    dump=str(self.path),
                )
                raise
        # What the terminal shows: escaped, and cut (the CSV and the details rows hold the rest).
        if self.result.status == SKIP:
            pytest.skip(cut(printable(entry_message(self.result) or "nothing to compare"), MAX_TERMINAL))
        if self.result.status in failing(run.options.strict):
            # Each line escaped on its own: a newline inside one is the dump's, between them ours.
            lines = failure_text(self.result, checker.standard.name, run.options.strict)
            raise PrecisionError(cut("\n".join(printable(line) for line in lines), MAX_TERMINAL))

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, PrecisionError):
            return str(excinfo.value)
        # A plugin fault's traceback quotes the dump's text: escaped, as every line shown is.
        return printable(str(super().repr_failure(excinfo, style=style)))

    def reportinfo(self) -> Any:
        # A domain that is not the end of the node id: pytest would show the
        # entry's dots as `::` in verbose lines.
        return self.path, None, f"{self.name} of {self.path.parent.name}"
