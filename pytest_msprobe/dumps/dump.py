"""Reading msprobe dumps: dump.json -> an index of entries.

No torch, no pytest: this module only knows the file format (see
shared/spec/dump-format.md). Tensor files are never touched here.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson  # parses big dumps several times faster than json

from .. import readback
from ..untrusted import cut, printable
from . import scan as dump_scan

DUMP_FILE_NAME = "dump.json"
TENSOR_DIR_NAME = "dump_tensor_data"

FORWARD = "forward"
BACKWARD = "backward"
DIRECTIONS = (FORWARD, BACKWARD)

# Arguments nest lists in lists; no API takes them deeper (msprobe itself writes at most 400).
MAX_NESTING = 100

# Entry types whose entries describe modules or cells, not API calls.
MODULE_TYPES = frozenset({"Module", "Cell"})
# Collectives cannot be re-run alone, on one device.
DISTRIBUTED_TYPES = frozenset({"Distributed", "MintDistributed"})


class DumpError(Exception):
    """A dump file that cannot be read as a whole (names the file)."""


class DumpPathError(DumpError, ValueError):
    """A --msprobe-dump path that leads to no file or folder (mistyped, a link that loops):
    the user's to fix, a usage error before anything is written (a ValueError, as session.py's
    usage errors are)."""


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


# `<Type>.<api>`: Python names joined by dots, as msprobe writes them (`Tensor.__add__`,
# `Primitive.bias_add.BiasAdd`); anything else (`/`, `::`, spaces, control characters) is
# no API name, and never reaches a path or a lookup.
_HEAD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
MAX_NAME = 1000


def parse_entry_name(name: str) -> EntryName | None:
    """The parts of an API entry name, or None for module/cell and unknown shapes."""
    parts = name.rsplit(".", 2)
    if len(parts) != 3 or len(name) > MAX_NAME:
        return None
    head, index, direction = parts
    if direction not in DIRECTIONS or not (index.isascii() and index.isdigit()) or not _HEAD.fullmatch(head):
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
    # Entries the file holds but cannot give as they were: name -> why (nested past the
    # parser's limit, written twice). Checking such an entry is a SKIP that says so.
    faults: dict[str, str] = field(default_factory=dict, repr=False)

    def fault(self, name: EntryName) -> str | None:
        """Why an entry (or the forward entry its call is rebuilt from) cannot be checked, or None."""
        for entry in dict.fromkeys((name.full, f"{name.prefix}.forward")):
            body = self.entries.get(entry)
            why = self.faults.get(entry) or nesting_fault(body) or field_fault(body)
            if why:
                return f"{entry}: {why}"
        return None

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


def _unreachable(path: Path) -> str:
    """Why a path leads to nothing (`no such file or folder`, a link that loops), else ""."""
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link that leads back to itself (a loop): not followed"
        if exc.errno == errno.ENOENT:
            return "a link to nothing" if path.is_symlink() else "no such file or folder"
        return f"cannot be read: {exc.strerror or exc}"
    except ValueError as exc:  # a NUL in the path
        return f"not a path: {exc}"
    return ""


def find_dump_files(
    path: os.PathLike | str, refused: list[str] | None = None, passed_over: list[Path] | None = None
) -> list[Path]:
    """A dump.json itself, or every dump.json under a folder (step*/rank*/...).

    Regular files only: pytest cannot collect a FIFO or a device (and reading one could
    wait forever), and a folder named dump.json it would collect as a folder of tests.
    What is left out is said in `refused`; the other JSON files of a folder are put in
    `passed_over` (dump_folder.py says which of them are dumps). Raises DumpPathError when
    `path` itself leads nowhere.
    """
    path = Path(path)
    why = _unreachable(path)
    if why:
        raise DumpPathError(printable(f"--msprobe-dump: {path}: {why}"))
    if path.is_dir():
        found = []
        for candidate in sorted(path.rglob("*.json")):
            if candidate.name == DUMP_FILE_NAME:
                found.append(candidate)
            elif passed_over is not None:
                passed_over.append(candidate)
    else:
        found = [path]
    kept = []
    for candidate in found:
        why = (
            _unreachable(candidate)
            or ("not a regular file (a FIFO, a device or a folder)" if not candidate.is_file() else "")
            or (
                "its path holds control characters, which pytest would print raw"
                if printable(str(candidate)) != str(candidate)
                else ""
            )
        )
        if not why:
            kept.append(candidate)
        elif refused is not None:
            refused.append(printable(f"{candidate}: {why}: not read"))
    return kept


def read_dump(path: os.PathLike | str) -> Dump:
    path = Path(path)
    raw = read_regular(path)
    document, faults = parse_dump_json(raw, path)
    if not isinstance(document, dict) or not isinstance(document.get("data"), dict):
        raise DumpError(f"{path}: not an msprobe dump: no 'data' object at the top level")
    for key in ("task", "level", "framework"):
        if document.get(key) is not None and not isinstance(document[key], str):
            raise DumpError(
                f"{path}: {key}: expected a string such as {HEADER_EXAMPLES[key]!r}, "
                f"found {type(document[key]).__name__}"
            )
    entries = document["data"]
    for name in dump_scan.duplicate_entries(raw, entries):
        faults.setdefault(
            name, "written more than once in dump.json: which one is the call is not known, so none is checked"
        )
    return Dump(
        path=path,
        task=_header(document.get("task") or "statistics"),
        level=_header(document.get("level") or ""),
        framework=_header(document.get("framework") or infer_framework(entries)),
        entries=entries,
        faults=faults,
    )


HEADER_EXAMPLES = {"task": "statistics", "level": "L1", "framework": "pytorch"}


def _header(value: str) -> str:
    """A header value as it may be shown: compared with known names only, printed in the header."""
    return cut(printable(value), 100)


def read_regular(path: Path) -> bytes:
    """The bytes of a regular file (the dump.json a user named, through a link of theirs too); a
    FIFO, a device or a folder named dump.json is refused, not waited on or read forever."""
    try:
        return readback.read_bytes(path, None, follow_links=True)
    except readback.Unreadable as exc:
        raise DumpError(str(exc)) from None


def nesting_fault(body: Any, limit: int = MAX_NESTING) -> str | None:
    """`input_args: nested deeper than 100 levels` for an entry body past the limit, else None.

    Walked without recursion, before any of the (recursive) code that reads arguments.
    """
    stack = [(body, 0, "(entry)")]
    while stack:
        node, depth, where = stack.pop()
        if depth > limit:
            return f"{where}: nested deeper than {limit} levels: no API takes such arguments"
        if isinstance(node, dict):
            stack += [(value, depth + 1, key if depth == 0 else where) for key, value in node.items()]
        elif isinstance(node, list):
            stack += [(value, depth + 1, where) for value in node]
    return None


# What the fields of an argument's description hold where they are given (None: not given):
# inputs.py and the frameworks read them as such (a dtype is a key of a table, a shape is
# multiplied), so a list, an object or a number of the wrong kind is the entry's fault, named.
_NUMBER = (int, float, str, bool)  # a statistic: msprobe writes numbers, bare NaN/Infinity, bools
_SPEC_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "type": ((str,), "a type name such as 'torch.Tensor'"),
    "dtype": ((str,), "a dtype name such as 'torch.float32'"),
    "data_name": ((str,), "a file name"),
    "requires_grad": ((bool,), "a bool"),
    **{
        key: (_NUMBER, "a number") for key in ("Max", "Min", "Mean", "Norm", "Max_except_inf_nan", "Min_except_inf_nan")
    },
}
_SPEC_KEYS = ("type", "dtype", "shape")  # an object with one of them describes an argument
_MAPPINGS = ("input_kwargs",)  # objects of names: a keyword argument may be called `type`


def field_fault(body: Any) -> str | None:
    """`input_args[0].dtype: not a dtype name ...: a list ([])` for the first field of an argument's
    description that holds the wrong kind of value, else None. Walked without recursion (after
    nesting_fault); the values themselves (a known dtype, a shape's bound) are judged where read."""
    if not isinstance(body, dict):
        return None
    stack: list[tuple[Any, str, bool]] = [(value, key, key in _MAPPINGS) for key, value in body.items()]
    while stack:
        node, where, mapping = stack.pop()
        if isinstance(node, list):
            stack += [(value, f"{where}[{i}]", False) for i, value in enumerate(node)]
        elif isinstance(node, dict) and not mapping and any(key in node for key in _SPEC_KEYS):
            why = spec_fault(node)
            if why:
                return f"{where}.{why}"
        elif isinstance(node, dict):
            if mapping and not all(key.isidentifier() for key in node):  # Python passes no other name
                key = next(key for key in node if not key.isidentifier())
                return f"{where}: {cut(repr(key), 100)} is no keyword argument's name"
            stack += [(value, f"{where}.{key}", False) for key, value in node.items()]
    return None


def spec_fault(spec: dict) -> str | None:
    """`dtype: not a dtype name ...: a list ([])` for a field of one argument's description of the wrong kind."""
    for key, (kinds, what) in _SPEC_FIELDS.items():
        value = spec.get(key)
        if value is not None and not isinstance(value, kinds):
            return f"{key}: not {what}: {_kind(value)}"
    shape = spec.get("shape")
    if shape is not None and not (
        isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        if not isinstance(shape, list):
            return f"shape: not a list of sizes: {_kind(shape)}"
        # A list, then: name the element that is no size ("not a list of sizes: a list" read as a contradiction).
        i, bad = next(
            (i, n) for i, n in enumerate(shape) if not (isinstance(n, int) and not isinstance(n, bool) and n >= 0)
        )
        what = repr(bad) if isinstance(bad, int) and not isinstance(bad, bool) else _kind(bad)
        return f"shape: not a list of sizes: element {i} of {cut(repr(shape), 100)} is {what}"
    return None


def _kind(value: Any) -> str:
    """`a list ([[], 3])`: what a field holds, its text cut."""
    article = "an" if type(value).__name__[0] in "aeiou" else "a"
    return f"{article} {type(value).__name__} ({cut(repr(value), 100)})"


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
    return parse_dump_json(raw, path)[0]


def parse_dump_json(raw: bytes, path: Path) -> tuple[Any, dict[str, str]]:
    """(document, {entry: why}): an entry nested deeper than the parser takes is cut out
    (null), the rest of the dump parsed as usual."""
    with _gc_paused():
        faults: dict[str, str] = {}
        try:
            document = _parse(raw, path)
        except _TooDeep:
            try:
                cut_raw, faults = dump_scan.cut_too_deep(quote_bare_constants(raw), PARSE_DEPTH)
            except ValueError as exc:
                raise DumpError(f"{path}: {exc}") from None
            document = _parse(cut_raw, path)
    # The index lives all session: out of the GC's sight, later passes (one
    # per many item objects, five at pytest's exit) stop walking it again.
    gc.freeze()
    return document, faults


# Entries are cut past this depth (the document and data objects are two more levels):
# orjson takes 1024, Python's json what the interpreter's recursion limit leaves.
PARSE_DEPTH = 500


class _TooDeep(Exception):
    pass


def _parse(raw: bytes, path: Path) -> Any:
    try:
        return orjson.loads(quote_bare_constants(raw))
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc) or "recursion" in str(exc):
            raise _TooDeep() from None
        # else let json name the position of the fault
    try:
        return json.loads(_decoded(raw))
    except RecursionError:
        raise _TooDeep() from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise DumpError(f"{path}: not valid JSON: {exc}") from None


def _decoded(raw: bytes) -> str:
    """The text of a JSON file, bytes that are no UTF-8 (a name a tool wrote in another encoding)
    read as lone surrogates (`\\udcff`), as a `"\\ud800"` escape is: text every sink escapes
    (untrusted.py), so that only the entries holding them are odd, not the whole dump."""
    encoding = json.detect_encoding(raw)
    return raw.decode(encoding, "surrogateescape" if encoding.startswith("utf-8") else "strict")


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


def _walk_specs(node: Any, depth: int = 0) -> Iterator[dict]:
    if depth > 20:  # specs sit a few levels down; a body nested deeper tells nothing more
        return
    if isinstance(node, dict):
        if "type" in node or "dtype" in node:
            yield node
        else:
            for value in node.values():
                yield from _walk_specs(value, depth + 1)
    elif isinstance(node, list):
        for value in node:
            yield from _walk_specs(value, depth + 1)


def peek_task(path: Path, head_bytes: int = 65536) -> tuple[str | None, str | None]:
    """(task, framework) from the head of a dump.json, without parsing it all.

    msprobe writes the header keys before `data`; None where they are not there.
    """
    try:
        head = _head(path, head_bytes).decode("utf-8", "replace")
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
        head = _head(path, 65536)
    except OSError:
        return "pytorch"
    torch_at, mindspore_at = head.find(b'"torch.'), head.find(b'"mindspore.')
    if mindspore_at >= 0 and (torch_at < 0 or mindspore_at < torch_at):
        return "mindspore"
    return "pytorch"


def _head(path: Path, size: int) -> bytes:
    """The first bytes of a regular file; OSError for anything else (a FIFO is not waited on)."""
    with readback.open_regular(path, follow_links=True) as handle:
        return handle.read(size)
