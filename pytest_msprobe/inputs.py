"""Argument specs of a dump entry -> concrete values, real or seeded random.

Framework-neutral: tensors are made through a codec (frameworks/torch.py,
frameworks/mindspore.py) from a file or from a numpy array. No pytest here.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from .options import RANDOM, REAL

TENSOR_TYPE_SUFFIXES = ("Tensor", "Parameter", "StubTensor")


class InputError(Exception):
    """An argument that cannot be rebuilt; the message names entry and field."""


class Codec(Protocol):
    """What a framework provides to turn specs into its values."""

    def dtype(self, name: str) -> Any: ...  # raises KeyError for an unknown name
    def dtype_kind(self, name: str) -> str: ...  # "f", "i", "b" or "c"
    def load(self, path: Path) -> Any: ...  # a tensor file -> tensor
    def from_array(self, array: np.ndarray, dtype: Any) -> Any: ...
    def shape_of(self, tensor: Any) -> list[int]: ...
    def size(self, dims: list[int]) -> Any: ...


@dataclass(frozen=True)
class Device:
    """A device argument: replaced by the device of the run, never replayed literally."""

    recorded: str


@dataclass(frozen=True)
class Undescribed:
    """`{}`: an argument msprobe could not describe (26.x writes it for some dtypes)."""

    field: str


@dataclass
class Rebuilt:
    """The decoded arguments and what the rebuild had to say."""

    args: list
    kwargs: dict
    notes: list[str] = field(default_factory=list)


def is_tensor_spec(spec: Any) -> bool:
    return (
        isinstance(spec, dict)
        and "shape" in spec
        and "dtype" in spec
        and str(spec.get("type", "")).endswith(TENSOR_TYPE_SUFFIXES)
    )


def tensor_seed(seed: int, entry: str, field_path: str) -> int:
    """A seed per tensor: data never depends on order, selection or worker."""
    digest = hashlib.blake2b(f"{seed}|{entry}|{field_path}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def as_float(value: Any) -> float | None:
    """A statistic as a float: msprobe writes numbers, bare NaN/Infinity, bools or null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class Rebuilder:
    """Rebuilds the arguments of one entry."""

    def __init__(self, codec: Codec, entry: str, tensor_dir: Path, mode: str, seed: int):
        self.codec = codec
        self.entry = entry
        self.tensor_dir = tensor_dir
        self.mode = mode
        self.seed = seed
        self.notes: list[str] = []

    def error(self, field_path: str, what: str) -> InputError:
        return InputError(f"{self.entry}: {field_path}: {what}")

    def rebuild(self, body: dict, args_key: str = "input_args", kwargs_key: str = "input_kwargs") -> Rebuilt:
        if not isinstance(body, dict):
            raise self.error("(entry)", "the entry is not an object")
        args = body.get(args_key, [])
        kwargs = body.get(kwargs_key, {}) if kwargs_key else {}
        if not isinstance(args, list):
            raise self.error(args_key, f"expected a list, found {type(args).__name__}")
        if not isinstance(kwargs, dict):
            raise self.error(kwargs_key, f"expected an object, found {type(kwargs).__name__}")
        values = [self.value(spec, f"{args_key}[{i}]") for i, spec in enumerate(args)]
        named = {key: self.value(spec, f"{kwargs_key}.{key}") for key, spec in kwargs.items()}
        return Rebuilt(values, named, self.notes)

    def value(self, spec: Any, field_path: str) -> Any:
        if spec is None:
            return None
        if isinstance(spec, list):
            return [self.value(item, f"{field_path}[{i}]") for i, item in enumerate(spec)]
        if not isinstance(spec, dict):
            raise self.error(field_path, f"unexpected {type(spec).__name__} {spec!r}")
        if not spec:
            return Undescribed(field_path)
        if is_tensor_spec(spec):
            return self.tensor(spec, field_path)
        return self.scalar(spec, field_path)

    def scalar(self, spec: dict, field_path: str) -> Any:
        kind = spec.get("type")
        if "value" not in spec and kind != "ellipsis":
            raise self.error(f"{field_path}.value", f"missing in a {kind!r} argument")
        value = spec.get("value")
        decoder = _SCALARS.get(kind)
        if decoder is None:
            raise self.error(f"{field_path}.type", f"unsupported argument type {kind!r}")
        try:
            return decoder(self, value)
        except (TypeError, ValueError, KeyError) as exc:
            raise self.error(f"{field_path}.value", f"cannot read {value!r} as {kind}: {exc}") from None

    # -- tensors ----------------------------------------------------------

    def tensor(self, spec: dict, field_path: str) -> Any:
        dtype_name = str(spec.get("dtype"))
        try:
            dtype = self.codec.dtype(dtype_name)
        except (KeyError, TypeError):
            raise self.error(f"{field_path}.dtype", f"unknown dtype {dtype_name!r}") from None
        shape = spec.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise self.error(f"{field_path}.shape", f"not a list of sizes: {shape!r}")
        path = self.tensor_path(spec, field_path)
        if path is not None:
            return self.load(path, shape, dtype, field_path)
        array = random_array(spec, self.codec.dtype_kind(dtype_name), tensor_seed(self.seed, self.entry, field_path))
        return self.codec.from_array(array, dtype)

    def tensor_path(self, spec: dict, field_path: str) -> Path | None:
        """The tensor file to load, or None for random data (saying why)."""
        if self.mode == RANDOM:
            return None
        data_name = spec.get("data_name")
        if not data_name:
            if self.mode == REAL:
                raise self.error(f"{field_path}.data_name", "missing: real mode needs a tensor dump")
            return None
        path = self.safe_path(data_name, field_path)
        if not path.is_file():
            if self.mode == REAL:
                raise self.error(f"{field_path}.data_name", f"tensor file {path} does not exist")
            self.notes.append(f"{field_path}: tensor file {data_name} missing, random data used")
            return None
        return path

    def safe_path(self, data_name: str, field_path: str) -> Path:
        # A data_name is data from a file we did not write: never let it leave
        # the dump's own tensor folder.
        root = self.tensor_dir.resolve()
        path = (root / str(data_name)).resolve()
        if root not in path.parents:
            raise self.error(f"{field_path}.data_name", f"{data_name!r} points outside {root}")
        return path

    def load(self, path: Path, shape: list[int], dtype: Any, field_path: str) -> Any:
        try:
            tensor = self.codec.load(path)
        except Exception as exc:  # noqa: BLE001 - a broken file is a fault of that entry only
            raise self.error(f"{field_path}.data_name", f"cannot load {path.name}: {exc}") from None
        found = self.codec.shape_of(tensor)
        if found != list(shape):
            raise self.error(f"{field_path}.shape", f"recorded {shape} but {path.name} holds {found}")
        # A file format without every dtype (.npy has no bfloat16) stores a
        # wider one: the codec casts back to the recorded dtype.
        cast = getattr(self.codec, "cast", None)
        return tensor if cast is None else cast(tensor, dtype)


_SCALARS: dict = {
    "int": lambda r, v: int(v),
    "float": lambda r, v: float(v),
    "bool": lambda r, v: bool(v),
    "str": lambda r, v: str(v),
    "complex": lambda r, v: complex(v),
    "slice": lambda r, v: slice(*v),
    "ellipsis": lambda r, v: Ellipsis,
    "torch.Size": lambda r, v: r.codec.size([int(d) for d in v]),
    "torch.dtype": lambda r, v: r.codec.dtype(v),
    "torch.device": lambda r, v: Device(str(v)),
    "mindspore.dtype": lambda r, v: r.codec.dtype(v),
}


# -- random data -------------------------------------------------------------


def random_array(spec: dict, kind: str, seed: int) -> np.ndarray:
    """msprobe's rule, made order-free and inf/NaN-safe.

    Floats: uniform in [Min, Max] with Min written into the first element and
    Max into the last. Ints: randint(Min, Max + 1). Bools: randint(Min, Max + 1) > 0.
    A recorded inf/NaN is planted at those two places; the rest stays finite.
    """
    shape = tuple(spec["shape"])
    rng = np.random.default_rng(seed)
    low, high = as_float(spec.get("Min")), as_float(spec.get("Max"))
    if kind == "b":
        lo, hi = int(bool(low)) if low is not None else 0, int(bool(high)) if high is not None else 1
        return np.asarray(rng.integers(lo, hi + 1, size=shape) > 0)
    if kind == "i":
        lo, hi = _int_bounds(low, high)
        return np.asarray(rng.integers(lo, hi + 1, size=shape, dtype=np.int64))
    lo, hi = _finite_bounds(spec, low, high)
    array = np.asarray(rng.uniform(lo, hi, size=shape), dtype=np.float64)
    if array.size:
        flat = array.reshape(-1)
        flat[0] = low if low is not None else lo
        flat[-1] = high if high is not None else hi
    return array


def _int_bounds(low: float | None, high: float | None) -> tuple:
    lo = int(low) if low is not None and math.isfinite(low) else 0
    hi = int(high) if high is not None and math.isfinite(high) else lo + 1
    return min(lo, hi), max(lo, hi)


def _finite_bounds(spec: dict, low: float | None, high: float | None) -> tuple:
    """Finite [lo, hi] for the bulk of a tensor whose Min/Max may be inf, NaN or absent."""
    low_finite = as_float(spec.get("Min_except_inf_nan"))
    high_finite = as_float(spec.get("Max_except_inf_nan"))
    lo = low if _finite(low) else low_finite if _finite(low_finite) else None
    hi = high if _finite(high) else high_finite if _finite(high_finite) else None
    if lo is None and hi is None:
        return -1.0, 1.0
    if lo is None:
        assert hi is not None
        lo = hi - max(1.0, abs(hi))
    if hi is None:
        hi = lo + max(1.0, abs(lo))
    return (lo, hi) if lo <= hi else (hi, lo)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """Apply fn to every leaf of nested lists, tuples and dicts."""
    if isinstance(tree, list):
        return [tree_map(fn, item) for item in tree]
    if isinstance(tree, tuple):
        return (
            type(tree)(*(tree_map(fn, item) for item in tree))
            if hasattr(tree, "_fields")
            else tuple(tree_map(fn, item) for item in tree)
        )
    if isinstance(tree, dict):
        return {key: tree_map(fn, item) for key, item in tree.items()}
    return fn(tree)


def leaves(tree: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts, in order."""
    found: list[Any] = []
    tree_map(found.append, tree)
    return found
