"""Reading msprobe dumps: dump.json -> an index of entries.

No torch, no pytest: this module only knows the file format (see
shared/spec/dump-format.md). Tensor files are never touched here.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson  # parses big dumps several times faster than json

DUMP_FILE_NAME = "dump.json"
TENSOR_DIR_NAME = "dump_tensor_data"

FORWARD = "forward"
BACKWARD = "backward"
DIRECTIONS = (FORWARD, BACKWARD)

# Entry types whose entries describe modules or cells, not API calls.
MODULE_TYPES = frozenset({"Module", "Cell"})
# Collectives cannot be re-run alone, on one device.
DISTRIBUTED_TYPES = frozenset({"Distributed", "MintDistributed"})


class DumpError(Exception):
    """A dump file that cannot be read as a whole (names the file)."""


@dataclass(frozen=True)
class EntryName:
    """`<Type>.<api>.<n>.<direction>`, e.g. `Torch.linalg.inv.0.forward`."""

    full: str
    api_type: str
    api: str
    index: int
    direction: str

    @property
    def prefix(self) -> str:
        """The API call without direction, the `API Name` of the result CSV."""
        return self.full[: -len(self.direction) - 1]


def parse_entry_name(name: str) -> EntryName | None:
    """The parts of an API entry name, or None for module/cell and unknown shapes."""
    parts = name.rsplit(".", 2)
    if len(parts) != 3:
        return None
    head, index, direction = parts
    if direction not in DIRECTIONS or not index.isdigit() or "." not in head:
        return None
    api_type, api = head.split(".", 1)
    if api_type in MODULE_TYPES:
        return None
    return EntryName(name, api_type, api, int(index), direction)


def entry_kind(name: str) -> str:
    """`forward`, `backward`, `module` or `unknown`, for the report header counts."""
    if name.split(".", 1)[0] in MODULE_TYPES:
        return "module"
    parsed = parse_entry_name(name)
    return parsed.direction if parsed else "unknown"


@dataclass
class Dump:
    """One parsed dump.json: its header and its entries in call order."""

    path: Path
    task: str
    level: str
    framework: str
    entries: dict[str, Any] = field(repr=False)

    @property
    def tensor_dir(self) -> Path:
        # The recorded dump_data_dir points to the machine that dumped; the
        # files travel next to dump.json.
        return self.path.parent / TENSOR_DIR_NAME

    def api_names(self) -> Iterator[EntryName]:
        for name in self.entries:
            parsed = parse_entry_name(name)
            if parsed is not None:
                yield parsed

    def counts(self) -> dict[str, int]:
        counts = {"forward": 0, "backward": 0, "module": 0, "unknown": 0}
        for name in self.entries:
            counts[entry_kind(name)] += 1
        return counts


def find_dump_files(path: os.PathLike | str) -> list[Path]:
    """A dump.json itself, or every dump.json under a folder (step*/rank*/...)."""
    path = Path(path)
    if path.is_dir():
        return sorted(path.rglob(DUMP_FILE_NAME))
    return [path]


def read_dump(path: os.PathLike | str) -> Dump:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DumpError(f"{path}: cannot read: {exc.strerror or exc}") from None
    document = parse_json(raw, path)
    if not isinstance(document, dict) or not isinstance(document.get("data"), dict):
        raise DumpError(f"{path}: not an msprobe dump: no 'data' object at the top level")
    entries = document["data"]
    return Dump(
        path=path,
        task=str(document.get("task") or "statistics"),
        level=str(document.get("level") or ""),
        framework=document.get("framework") or infer_framework(entries),
        entries=entries,
    )


# msprobe writes Python's bare NaN / Infinity / -Infinity, which strict parsers
# reject. Quoted, they reach the statistics as strings that float() reads back.
_BARE_WORDS = (b"NaN", b"Infinity")
_SPACE = b" \t\r\n"


def quote_bare_constants(raw: bytes) -> bytes:
    """`"Max": NaN` -> `"Max": "NaN"`; words inside strings are left alone.

    bytes.find and a look at the neighbours of each hit: a regex with a
    lookbehind tries every offset and took 1.4 s on a 77 MB dump, this 0.2 s.
    """
    spans = []
    for word in _BARE_WORDS:
        start = raw.find(word)
        while start != -1:
            end = start + len(word)
            begin = start - 1 if start and raw[start - 1] == 0x2D else start  # "-Infinity"
            if _is_bare_value(raw, begin, end):
                spans.append((begin, end))
            start = raw.find(word, end)
    if not spans:
        return raw
    parts, last = [], 0
    for begin, end in sorted(spans):
        parts += [raw[last:begin], b'"', raw[begin:end], b'"']
        last = end
    parts.append(raw[last:])
    return b"".join(parts)


def _is_bare_value(raw: bytes, begin: int, end: int) -> bool:
    before, after = begin - 1, end
    while before >= 0 and raw[before] in _SPACE:
        before -= 1
    while after < len(raw) and raw[after] in _SPACE:
        after += 1
    return before >= 0 and raw[before] in b":[," and after < len(raw) and raw[after] in b",]}"


@contextlib.contextmanager
def _gc_paused():
    """The parse makes millions of containers, each allocation a chance for a
    GC pass over all of them: orjson takes 1.07 s on a 77 MB dump with GC on,
    0.34 s with it paused."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse_json(raw: bytes, path: Path) -> Any:
    with _gc_paused():
        document = _parse(raw, path)
    # The index lives all session: out of the GC's sight, later passes (one
    # per many item objects, five at pytest's exit) stop walking it again.
    gc.freeze()
    return document


def _parse(raw: bytes, path: Path) -> Any:
    try:
        return orjson.loads(quote_bare_constants(raw))
    except orjson.JSONDecodeError:
        pass  # let json name the position of the fault
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DumpError(f"{path}: not valid JSON: {exc}") from None


def infer_framework(entries: dict[str, Any]) -> str:
    """Older dumps have no `framework` key: the tensor spelling tells."""
    for body in _first_bodies(entries, 50):
        for spec in _walk_specs(body):
            spec_type = str(spec.get("type", ""))
            if spec_type.startswith("torch."):
                return "pytorch"
            if spec_type.startswith("mindspore."):
                return "mindspore"
            dtype = str(spec.get("dtype", ""))
            if dtype.startswith("torch."):
                return "pytorch"
            if dtype[:1].isupper():
                return "mindspore"
    return "pytorch"


def _first_bodies(entries: dict[str, Any], limit: int) -> Iterator[Any]:
    for i, body in enumerate(entries.values()):
        if i >= limit:
            return
        yield body


def _walk_specs(node: Any) -> Iterator[dict]:
    if isinstance(node, dict):
        if "type" in node or "dtype" in node:
            yield node
        else:
            for value in node.values():
                yield from _walk_specs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk_specs(value)


def peek_task(path: Path, head_bytes: int = 65536) -> tuple[str | None, str | None]:
    """(task, framework) from the head of a dump.json, without parsing it all.

    msprobe writes the header keys before `data`; None where they are not there.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(head_bytes).decode("utf-8", "replace")
    except OSError:
        return None, None
    head = head.split('"data"', 1)[0]
    task = re.search(r'"task"\s*:\s*"([^"]*)"', head)
    framework = re.search(r'"framework"\s*:\s*"([^"]*)"', head)
    return (task.group(1) if task else None, framework.group(1) if framework else None)


def peek_framework(path: Path) -> str:
    """The framework of a dump from its head: the `framework` key, else the
    spelling of its first tensors (older dumps have no key), else pytorch."""
    task_and_framework = peek_task(path)
    if task_and_framework[1]:
        return task_and_framework[1]
    try:
        with open(path, "rb") as handle:
            head = handle.read(65536)
    except OSError:
        return "pytorch"
    torch_at, mindspore_at = head.find(b'"torch.'), head.find(b'"mindspore.')
    if mindspore_at >= 0 and (torch_at < 0 or mindspore_at < torch_at):
        return "mindspore"
    return "pytorch"
