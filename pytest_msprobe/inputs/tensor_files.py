"""What a tensor file declares it holds, read without loading it: its sizes are bounded first.

A `.pt` of a few MB can declare a storage of 10^9 elements (a deflated record, or a size that
lies), and torch.load allocates what it declares before anything else can look. So the sizes
are read from the file's own records first:

- a `.pt` (the zip torch.save writes): its `data.pkl` read by an unpickler that imports and
  calls nothing (every global is a stub, every storage a record of its declared type, key and
  element count), and the sizes of its `data/<key>` records in the zip's directory;
- a `.npy`: its header (numpy.lib.format), the shape and dtype it declares.

Anything else (torch's legacy formats, a pickle that is no zip) is refused: its sizes cannot
be read before loading it. No framework is imported here. inputs.Rebuilder refuses a file
whose sizes are past the bound or disagree with the dump before a loader sees it.
"""

from __future__ import annotations

import math
import pickle
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"
PICKLE_LIMIT = 1 << 20  # bytes of a .pt's data.pkl: one tensor's takes about 200
GLOBALS_LIMIT = 64  # distinct globals a .pt's pickle may name
# torch.save's storage types (`torch.FloatStorage`) -> (dtype, bytes an element).
STORAGES: dict[str, tuple[str, int]] = {
    "DoubleStorage": ("float64", 8),
    "FloatStorage": ("float32", 4),
    "HalfStorage": ("float16", 2),
    "BFloat16Storage": ("bfloat16", 2),
    "LongStorage": ("int64", 8),
    "IntStorage": ("int32", 4),
    "ShortStorage": ("int16", 2),
    "CharStorage": ("int8", 1),
    "ByteStorage": ("uint8", 1),
    "BoolStorage": ("bool", 1),
    "ComplexFloatStorage": ("complex64", 8),
    "ComplexDoubleStorage": ("complex128", 16),
    "UInt16Storage": ("uint16", 2),
    "UInt32Storage": ("uint32", 4),
    "UInt64Storage": ("uint64", 8),
    "Float8_e4m3fnStorage": ("float8_e4m3fn", 1),
    "Float8_e5m2Storage": ("float8_e5m2", 1),
    "Float8_e4m3fnuzStorage": ("float8_e4m3fnuz", 1),
    "Float8_e5m2fnuzStorage": ("float8_e5m2fnuz", 1),
}
# The functions torch.save's pickle rebuilds a plain tensor with (the tensor's args, by position).
REBUILD_TENSOR = "torch._utils._rebuild_tensor_v2"
# A dtype without a typed storage (float8_*) is saved as an UntypedStorage of bytes, its dtype
# the seventh argument of _rebuild_tensor_v3 (torch.save's pickle, torch 2.x).
REBUILD_TENSOR_V3 = "torch._utils._rebuild_tensor_v3"
UNTYPED = "UntypedStorage"
WRAPPERS = ("torch._utils._rebuild_parameter", "torch._tensor._rebuild_from_type_v2")


class Unreadable(Exception):
    """A file whose sizes cannot be read before loading it: the message says why."""


@dataclass
class Declared:
    """What a tensor file says it holds."""

    elements: int = 0  # what loading it allocates: its storages' (.pt) or its array's (.npy) elements
    shape: list[int] | None = None  # the tensor's, where the file holds one
    dtype: str = ""  # "float32", where the file holds one tensor
    holds: str = "tensor"  # what the file holds at its top: "tensor", or the type it names instead
    storages: list[str] = field(default_factory=list)  # what each storage declares, in words
    # Sizes that disagree with the bytes the file holds: said after the bound (which says more).
    fault: str = ""


def declared(path: Path) -> Declared:
    """The sizes `path` declares; Unreadable where they cannot be read without loading it."""
    with open(path, "rb") as handle:
        magic = handle.read(6)
        handle.seek(0)
        if magic == NPY_MAGIC:
            return _npy(path, handle)
        if magic[:4] == ZIP_MAGIC:
            return _pt(handle)
    raise Unreadable(
        "neither a .npy array nor the zip archive torch.save writes (a legacy or raw pickle): "
        "its sizes cannot be read before loading it"
    )


# -- .npy --------------------------------------------------------------------


def _npy(path: Path, handle: BinaryIO) -> Declared:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(handle)
        reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = reader(handle)  # a header of at most numpy's 10,000 bytes
    except (ValueError, TypeError, SyntaxError, OSError) as exc:
        raise Unreadable(f"a .npy header that does not read: {_line(exc)}") from None
    start = handle.tell()
    if dtype.hasobject:
        raise Unreadable(f"a .npy of Python objects ({dtype}): no tensor holds them")
    elements = math.prod(shape)
    needed = elements * dtype.itemsize
    held = path.stat().st_size - start
    found = Declared(elements, [int(d) for d in shape], dtype.name)
    if held < needed:
        found.fault = f"its header declares {list(shape)} {dtype.name}, {needed:,} bytes, and the file holds {held:,}"
    return found


# -- .pt (zip) -----------------------------------------------------------------


class _Stub:
    """What a global of the pickle stands for: called or built, it records its arguments only."""

    qualified = ""

    def __init__(self, *args: Any, **kwargs: Any):
        self.args = args

    def __call__(self, *args: Any, **kwargs: Any) -> _Stub:  # a stub's result called (getattr(...)(...))
        return _Stub(*args)

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


_STUBS: dict[str, type] = {}  # the stubs of the globals torch.save writes, made once a process


def _stub(qualified: str) -> type:
    found = _STUBS.get(qualified)
    if found is None:
        found = type(qualified.rsplit(".", 1)[-1], (_Stub,), {"qualified": qualified})
        if len(_STUBS) < 2 * GLOBALS_LIMIT:  # a file's odd names are not kept
            _STUBS[qualified] = found
    return found


@dataclass(frozen=True)
class _Storage:
    key: str
    kind: str  # the storage type's name: "FloatStorage"
    elements: int


class _Reader(pickle.Unpickler):
    """Unpickles data.pkl with stubs: no import, no call of anything the file names."""

    def __init__(self, data: bytes):
        import io

        super().__init__(io.BytesIO(data))
        self.stubs: dict[str, type] = {}
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> type:
        qualified = f"{module}.{name}"
        if qualified not in self.stubs:
            if len(self.stubs) >= GLOBALS_LIMIT:
                raise Unreadable(f"its pickle names more than {GLOBALS_LIMIT} globals")
            self.stubs[qualified] = _stub(qualified)
        return self.stubs[qualified]

    def persistent_load(self, pid: Any) -> _Storage:
        # ('storage', storage type, key, location, elements): what torch.save writes for a storage
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise Unreadable(f"a persistent record that is no storage: {_short(pid)}")
        _, kind, key, _, elements = pid
        name = getattr(kind, "qualified", "").rsplit(".", 1)[-1]
        if not isinstance(key, str) or not isinstance(elements, int) or isinstance(elements, bool) or elements < 0:
            raise Unreadable(f"a storage record that does not read: {_short(pid)}")
        storage = _Storage(key, name, elements)
        if self.storages.setdefault(key, storage) != storage:
            raise Unreadable(f"storage {key!r} declared twice, with different sizes")
        return storage


def _pt(handle: BinaryIO) -> Declared:
    try:
        with zipfile.ZipFile(handle) as archive:
            return _pt_archive(archive)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise Unreadable(f"a zip archive that does not read: {_line(exc)}") from None


def _pt_archive(archive: zipfile.ZipFile) -> Declared:
    twice = sorted(name for name, n in Counter(info.filename for info in archive.infolist()).items() if n > 1)
    if twice:
        # zipfile takes the last record of a name, torch's reader (miniz) may take another: the sizes
        # read here would not be those torch allocates. torch.save never repeats a name.
        raise Unreadable(
            f"a zip archive holding {_short(twice[0])} twice: which record torch.load reads is not known, "
            "so its sizes cannot be read first"
        )
    members = {info.filename: info for info in archive.infolist()}
    pickles = [name for name in members if name.endswith("/data.pkl") and name.count("/") == 1]
    if len(pickles) != 1:
        raise Unreadable(f"a zip archive with {len(pickles)} <name>/data.pkl records, not the one torch.save writes")
    prefix = pickles[0][: -len("data.pkl")]
    info = members[pickles[0]]
    if info.file_size > PICKLE_LIMIT:
        raise Unreadable(f"its data.pkl declares {info.file_size:,} bytes, more than a tensor's ({PICKLE_LIMIT:,})")
    with archive.open(info) as handle:
        data = handle.read(PICKLE_LIMIT + 1)
    if len(data) > PICKLE_LIMIT:
        raise Unreadable(f"its data.pkl holds more than {PICKLE_LIMIT:,} bytes, more than a tensor's")
    reader = _Reader(data)
    try:
        top = reader.load()
    except Unreadable:
        raise
    except Exception as exc:  # noqa: BLE001 - any pickle that does not read as stubs is refused
        raise Unreadable(f"its data.pkl does not read: {type(exc).__name__}: {_line(exc)}") from None
    found = Declared(holds=_holds(top))
    for storage in reader.storages.values():
        dtype, size = STORAGES.get(storage.kind, ("", 0)) if storage.kind != UNTYPED else ("bytes", 1)
        record = members.get(f"{prefix}data/{storage.key}")
        if record is None:
            raise Unreadable(f"storage {storage.key!r} has no record data/{storage.key} in the archive")
        if size and record.file_size != storage.elements * size and not found.fault:
            found.fault = (
                f"storage {storage.key!r} declares {storage.elements:,} {dtype} elements "
                f"({storage.elements * size:,} bytes), and its record data/{storage.key} {record.file_size:,} bytes"
            )
        found.elements += storage.elements
        found.storages.append(f"{storage.elements:,} {dtype or storage.kind}")
    tensor = _tensor_args(top)
    if tensor is not None:
        storage, shape = tensor[0], tensor[2] if len(tensor) > 2 else None
        if isinstance(shape, tuple) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            found.shape = list(shape)
        if isinstance(storage, _Storage) and storage.kind == UNTYPED and len(tensor) > 6:
            found.dtype = getattr(tensor[6], "qualified", "").rsplit(".", 1)[-1]
        elif isinstance(storage, _Storage):
            found.dtype = STORAGES.get(storage.kind, (storage.kind, 0))[0]
    return found


def _tensor_args(top: Any) -> tuple | None:
    """The arguments of _rebuild_tensor_v2 (or _v3) where the pickle's top is one plain tensor (a
    Parameter, a tensor subclass: wrapped around one)."""
    for _ in range(4):
        qualified = getattr(top, "qualified", "")
        args: Any = getattr(top, "args", ())
        if qualified in (REBUILD_TENSOR, REBUILD_TENSOR_V3):
            return tuple(args)
        if qualified == WRAPPERS[0] and args:
            top = args[0]
        elif qualified == WRAPPERS[1] and len(args) > 2 and getattr(args[0], "qualified", "") == REBUILD_TENSOR:
            return tuple(args[2]) if isinstance(args[2], tuple) else None
        else:
            return None
    return None


def _holds(top: Any) -> str:
    if _tensor_args(top) is not None:
        return "tensor"
    return getattr(top, "qualified", "") or type(top).__name__


def _line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."
