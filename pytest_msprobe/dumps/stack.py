"""Where the model called an entry: the stack.json msprobe writes beside dump.json.

Two layouts are read:

- msprobe 26.x: `{"0": [[entry names], [frames]], ...}`, the calls that share
  one stack listed together;
- older versions: `{"<entry name>": [frames], ...}`.

A frame is `"File <path>, line <n>, in <function>, \\n <code>"`, innermost first.
An entry's call site is its innermost frame in the user's code: not torch,
torch_npu, mindspore or msprobe, not the standard library, nothing installed
in site-packages. A backward entry has no stack of its own: it is called where
its forward was.

The file is read only when a check first asks for a call site (a failing
entry), once per dump and process. A stack.json that is missing, unreadable,
malformed or larger than MAX_BYTES gives no call sites and changes nothing else.
No torch, no pytest.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from .. import readback
from ..results import CallSite
from .dump import BACKWARD, FORWARD, EntryName

STACK_FILE_NAME = "stack.json"
# A real model's step writes a few MB; beyond this the file is not worth the parse.
MAX_BYTES = 64 * 1024 * 1024
MAX_CODE = 160  # characters of the source line kept

_FRAME = re.compile(
    r"^File (?P<path>.+?), line (?P<line>\d{1,9}), in (?P<function>[^\n]*?),?\s*(?:\n\s*(?P<code>.*))?$", re.S
)
# Packages whose frames are never the user's call, wherever they are installed.
LIBRARIES = frozenset({"torch", "torch_npu", "mindspore", "msprobe"})
_INSTALLED = frozenset({"site-packages", "dist-packages"})
_STDLIB = re.compile(r"/lib/python\d+(?:\.\d+)?/")


def parse_frame(frame: Any) -> CallSite | None:
    """A frame string as msprobe writes it, or None if it is not one."""
    found = _FRAME.match(frame.strip()) if isinstance(frame, str) else None
    if found is None:
        return None
    code = " ".join((found.group("code") or "").split())
    if len(code) > MAX_CODE:
        code = code[: MAX_CODE - 3] + "..."
    return CallSite(found.group("path"), int(found.group("line")), found.group("function").strip(), code)


def in_user_code(path: str) -> bool:
    """Whether a frame's file is the user's: not a library, the standard library, or installed."""
    if path.startswith("<"):  # <frozen runpy>, <string>
        return False
    posix = path.replace("\\", "/")
    folders = set(PurePosixPath(posix).parts[:-1])
    return not (folders & _INSTALLED or folders & LIBRARIES or _STDLIB.search(posix))


def call_site(frames: Any) -> CallSite | None:
    """The innermost frame in the user's code."""
    if not isinstance(frames, list):
        return None
    for frame in frames:
        site = parse_frame(frame)
        if site is not None and in_user_code(site.path):
            return site
    return None


def index_stacks(document: Any) -> dict[str, list]:
    """Entry name -> its frames, from either layout; items of any other shape are passed over."""
    if not isinstance(document, dict):
        return {}
    index: dict[str, list] = {}
    for key, value in document.items():
        if isinstance(value, list) and len(value) == 2 and isinstance(value[0], list) and isinstance(value[1], list):
            for name in value[0]:  # 26.x: [[names], [frames]]
                if isinstance(name, str):
                    index[name] = value[1]
        elif isinstance(value, list):  # older: name -> frames
            index[str(key)] = value
    return index


def read_stacks(path: Path) -> dict[str, list]:
    """The stacks of one stack.json by entry name; empty when it cannot be had (see the module doc):
    read as every file a run reads back (readback: no link followed, no FIFO waited on, bounded)."""
    try:
        return index_stacks(orjson.loads(readback.read_bytes(path, MAX_BYTES)))
    except (OSError, ValueError):  # missing, a link, a FIFO, too large, not JSON (orjson's is a ValueError)
        return {}


class CallSites:
    """The call sites of every dump this process checks, each stack.json read on first need."""

    def __init__(self) -> None:
        self._stacks: dict[Path, dict[str, list]] = {}
        self._sites: dict[tuple[Path, str], CallSite | None] = {}

    def of(self, dump_path: Path, entry: EntryName) -> CallSite | None:
        """Where the model called `entry` (a backward entry: its forward), or None: a stack.json of
        any content gives a call site or none, never a fault in place of the entry's verdict."""
        stack_path = Path(dump_path).parent / STACK_FILE_NAME
        name = f"{entry.prefix}.{FORWARD}" if entry.direction == BACKWARD else entry.full
        key = (stack_path, name)
        if key not in self._sites:
            if stack_path not in self._stacks:
                self._stacks[stack_path] = read_stacks(stack_path)
            try:
                self._sites[key] = call_site(self._stacks[stack_path].get(name))
            except Exception:  # noqa: BLE001 - frames of any shape: no call site (a time-out is no Exception)
                self._sites[key] = None
        return self._sites[key]
