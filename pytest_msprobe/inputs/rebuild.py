"""Argument specs of a dump entry -> concrete values, real or seeded random.

Framework-neutral: tensors are made through a codec (frameworks/torch.py,
frameworks/mindspore.py) from a file or from a numpy array. No pytest here.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from ..dumps.apis import QUANTIZED_DTYPES
from ..dumps.dump import MAX_NESTING
from ..options import DEFAULT_MAX_ELEMENTS, RANDOM, REAL
from ..results import NO_TENSOR_FOLDER, RANDOM_DATA
from ..untrusted import printable
from . import tensor_files

TENSOR_TYPE_SUFFIXES = ("Tensor", "Parameter", "StubTensor")

# The bound on the random elements one entry may build (--msprobe-max-elements) and how many
# it built, [bound, built], shared by the rebuilds of one check (its forward call, its
# grad_outputs) inside element_budget: a shape of 10**15 elements is a SKIP of its entry, not a
# process killed for memory. Outside one, each Rebuilder counts against the default alone.
_budget: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("element_budget", default=None)


def _numpy_max_dims() -> int:
    """numpy's own limit on an array's dimensions: 32 before numpy 2, 64 from it."""
    try:
        np.empty((1,) * 64)
    except ValueError:
        return 32
    return 64


MAX_DIMS = _numpy_max_dims()
# What numpy and torch hold: sizes whose product, in bytes of the widest dtype (complex128: 16), fits
# an index (np.intp); one dimension past it is "array is too big" even where another is 0.
MAX_BYTES = 2**63 - 1


def shape_fault(shape: list[int]) -> str:
    """Why no array of this shape can be made ("" where one can): more dimensions than numpy holds,
    or sizes whose product no index holds (whatever the element count: a 0 beside them too)."""
    if len(shape) > MAX_DIMS:
        return f"{len(shape)} dimensions, more than numpy's arrays hold ({MAX_DIMS})"
    if math.prod(d for d in shape if d) * 16 > MAX_BYTES:
        return f"{_short(shape)}: sizes whose product no array holds (numpy's and torch's index is 64 bits)"
    return ""


# The largest finite value of each floating dtype, the range of each integer one: a statistic
# beyond it cannot come from a tensor of that dtype.
FLOAT_MAX: dict[str, float] = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308,
    "complex32": 65504.0,
    "complex64": 3.4028234663852886e38,
    "complex128": 1.7976931348623157e308,
    "float8_e4m3fn": 448.0,
    "float8_e5m2": 57344.0,
    "float8_e4m3fnuz": 240.0,
    "float8_e5m2fnuz": 57344.0,
}
# Dtypes a dump names that no framework here builds a tensor of, by the last part of the name,
# lower case: what the message says instead of "unknown" (the dtype standard judges such an
# output's float values by the format's ULP where they arrive: judging/standards/formats8.py).
NO_TENSOR_HERE: dict[str, str] = {
    "hifloat8tensor": "is HiFloat8, torch_npu's own format: no tensor of it can be built without torch_npu",
    "hifloat8": "is HiFloat8, Ascend's own format: no tensor of it can be built here",
    **{
        name: "is a PyTorch quantized dtype (integers with a scale and zero point that dump.json does not "
        "record): pytest-msprobe neither rebuilds nor judges quantized tensors"
        for name in QUANTIZED_DTYPES
    },
}
INT_RANGE: dict[str, tuple[int, int]] = {
    name: (int(np.iinfo(name).min), int(np.iinfo(name).max))
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
}


class InputError(Exception):
    """An argument that cannot be rebuilt; the message names entry and field."""


@contextlib.contextmanager
def element_budget(max_elements: int) -> Iterator[None]:
    """The bound on the random elements an entry may build, for the checks run inside."""
    token = _budget.set([max_elements, 0])
    try:
        yield
    finally:
        _budget.reset(token)


def element_bound() -> int:
    """The bound of the entry being checked (--msprobe-max-elements): its inputs, outputs and files."""
    budget = _budget.get()
    return DEFAULT_MAX_ELEMENTS if budget is None else budget[0]


class Codec(Protocol):
    """What a framework provides to turn specs into its values."""

    def dtype(self, name: str) -> Any: ...  # raises KeyError for an unknown name
    def dtype_kind(self, name: str) -> str: ...  # "f", "i", "b" or "c"
    def load(self, path: Path) -> Any: ...  # a tensor file -> tensor
    def from_array(self, array: np.ndarray, dtype: Any) -> Any: ...
    def drawn_dtype(self, dtype: Any) -> Any: ...  # the numpy dtype random floats of a floating dtype are drawn into
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


@dataclass(frozen=True)
class IndexBound:
    """What an index argument of a call may hold, from the call's other arguments (a codec's
    `index_bounds`): [low, high] and `extras` (an ignore_index); `ordered`, non-decreasing from low."""

    field: str  # input_args[1], input_kwargs.offsets
    position: int | None
    key: str | None
    low: int
    high: int
    what: str  # what bounds it: "the 5 rows of weight"
    extras: frozenset[int] = frozenset()
    ordered: bool = False


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
    except (TypeError, ValueError, OverflowError):  # an integer of 400 digits is out of range, not a number
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
        self.drawn: dict[str, dict] = {}  # field path -> spec of each tensor drawn at random
        self._own_budget = [DEFAULT_MAX_ELEMENTS, 0]  # outside element_budget

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
        if args_key == "input_args":
            self.index_safe(values, named)
        return Rebuilt(values, named, self.notes)

    def index_safe(self, args: list, kwargs: dict) -> None:
        """Index arguments inside what they index (frameworks/index_checks.py): random ones drawn
        there, as a real run's are, where the recorded Min/Max reach it; then every one checked,
        random or real, and an entry whose indices leave their range refused before any call."""
        bounds = getattr(self.codec, "index_bounds", None)
        if bounds is None:
            return
        for bound in bounds(self.entry, args, kwargs):
            spec = self.drawn.get(bound.field)
            if spec is not None:
                drawn = self.draw_indices(spec, bound)
                if drawn is not None:
                    if bound.key is None:
                        args[bound.position or 0] = drawn
                    else:
                        kwargs[bound.key] = drawn
        found = self.codec.index_refusal(self.entry, args, kwargs)  # type: ignore[attr-defined]
        if found:
            raise self.error(*found)

    def draw_indices(self, spec: dict, bound: IndexBound) -> Any:
        """The random index tensor drawn again in [Min, Max] and [low, high] both; None where the
        first draw stands (already inside) or the recorded range misses the valid one (refused)."""
        if self.codec.dtype_kind(str(spec.get("dtype"))) != "i":
            return None  # class probabilities, a mask: no indices
        low, high = as_float(spec.get("Min")), as_float(spec.get("Max"))
        lo = bound.low if low is None or not math.isfinite(low) else max(int(low), bound.low)
        hi = bound.high if high is None or not math.isfinite(high) else min(int(high), bound.high)
        ignored = low is not None and math.isfinite(low) and int(low) in bound.extras

        def taken(value: float | None) -> bool:
            return value is not None and (bound.low <= value <= bound.high or value in bound.extras)

        inside = taken(low) and taken(high)
        if lo > hi or (inside and not bound.ordered and not ignored):
            return None
        seed = tensor_seed(self.seed, self.entry, bound.field)
        array = random_array({**spec, "Min": lo, "Max": hi}, "i", seed)
        if bound.ordered:  # offsets: from low, non-decreasing, as a real run's
            array = np.sort(array, axis=None).reshape(array.shape)
            if array.size:
                array.reshape(-1)[0] = bound.low
        elif array.size and ignored:
            array.reshape(-1)[0] = int(low or 0)  # the ignored value (ignore_index) the run had, kept once
        if not inside:
            self.notes.append(
                f"{bound.field}: recorded indices [{_number(low)}, {_number(high)}] reach outside "
                f"[{bound.low}, {bound.high}] ({bound.what}): drawn inside"
            )
        return self.codec.from_array(array, self.codec.dtype(str(spec.get("dtype"))))

    def value(self, spec: Any, field_path: str, depth: int = 0) -> Any:
        if spec is None:
            return None
        if isinstance(spec, list):
            if depth >= MAX_NESTING:
                raise self.error(field_path, f"lists nested deeper than {MAX_NESTING} levels: no API takes that")
            return [self.value(item, f"{field_path}[{i}]", depth + 1) for i, item in enumerate(spec)]
        if not isinstance(spec, dict):
            raise self.error(field_path, f"unexpected {type(spec).__name__} {spec!r}")
        if not spec:
            return Undescribed(field_path)
        if is_tensor_spec(spec):
            return self.tensor(spec, field_path)
        return self.scalar(spec, field_path)

    def scalar(self, spec: dict, field_path: str) -> Any:
        kind = spec.get("type")
        if not isinstance(kind, str):  # a list or an object is no type name, and no key of _SCALARS
            raise self.error(f"{field_path}.type", f"not a type name such as 'int': {_short(kind)}")
        decoder = _SCALARS.get(kind)
        if decoder is None:
            raise self.error(f"{field_path}.type", f"unsupported argument type {_short(kind)}")
        if "value" not in spec and kind != "ellipsis":
            raise self.error(f"{field_path}.value", f"missing in a {kind!r} argument")
        value = spec.get("value")
        try:
            return decoder(self, value)
        except (TypeError, ValueError, KeyError, OverflowError) as exc:  # float(10**400): out of range
            raise self.error(f"{field_path}.value", f"cannot read {_short(value)} as {kind}: {exc}") from None

    # -- tensors ----------------------------------------------------------

    def tensor(self, spec: dict, field_path: str) -> Any:
        dtype_name = str(spec.get("dtype"))
        # A dtype the codec may know (torch.qint8, for torch.dtype arguments) with no tensor of it here.
        why = NO_TENSOR_HERE.get(dtype_name.rsplit(".", 1)[-1].lower())
        try:
            dtype = None if why else self.codec.dtype(dtype_name)
        except (KeyError, TypeError):
            dtype = None
        if dtype is None:
            what = f"dtype {dtype_name!r} {why}" if why else f"unknown dtype {dtype_name!r}"
            raise self.error(f"{field_path}.dtype", what)
        shape = spec.get("shape")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise self.error(f"{field_path}.shape", f"not a list of sizes: {_short(shape)}")
        why = shape_fault(shape)
        if why:
            raise self.error(f"{field_path}.shape", why)
        path = self.tensor_path(spec, field_path)
        if path is not None:
            return self.load(path, shape, dtype, field_path)
        self.budget(shape, field_path)
        short = str(dtype).rsplit(".", 1)[-1]  # "float16"
        check_statistics(spec, short, lambda key, what: self.error(f"{field_path}.{key}", what))
        kind = self.codec.dtype_kind(dtype_name)
        seed = tensor_seed(self.seed, self.entry, field_path)
        largest = FLOAT_MAX.get(short, math.inf)
        array = random_array(spec, kind, seed, self.codec.drawn_dtype(dtype) if kind == "f" else np.float64, largest)
        self.drawn[field_path] = spec
        return self.codec.from_array(array, dtype)

    def budget(self, shape: list[int], field_path: str) -> None:
        """Count a random tensor against the entry's bound, before anything is allocated."""
        budget = _budget.get() or self._own_budget
        count = math.prod(shape)
        budget[1] += count
        if budget[1] > budget[0]:
            raise self.error(
                f"{field_path}.shape",
                f"{shape} is {count:,} elements: random data for this entry would be {budget[1]:,}, "
                f"more than --msprobe-max-elements {budget[0]:,}",
            )

    def tensor_path(self, spec: dict, field_path: str) -> Path | None:
        """The tensor file to load, or None for random data (saying why)."""
        if self.mode == RANDOM:
            return None
        data_name = spec.get("data_name")
        if not data_name:
            if self.mode == REAL:
                raise self.error(f"{field_path}.data_name", "missing: real mode needs a tensor dump")
            return None
        if not isinstance(data_name, str) or printable(data_name) != data_name:
            raise self.error(f"{field_path}.data_name", f"not a file name: {_short(data_name)}")
        path = self.safe_path(data_name, field_path)
        try:
            found = path.is_file()
        except OSError as exc:  # a name longer than the file system takes
            raise self.error(f"{field_path}.data_name", f"{_short(data_name)}: {exc.strerror or exc}") from None
        if not found:
            if not self.tensor_dir.is_dir():  # the dump copied alone: one reason for every entry
                if self.mode == REAL:
                    raise self.error("dump_tensor_data", f"the tensor folder {self.tensor_dir} does not exist")
                self.notes.append(NO_TENSOR_FOLDER)
                return None
            if self.mode == REAL:
                raise self.error(f"{field_path}.data_name", f"tensor file {path} does not exist")
            self.notes.append(f"{field_path}: tensor file {data_name} missing, {RANDOM_DATA}")
            return None
        return path

    def safe_path(self, data_name: str, field_path: str) -> Path:
        # A data_name is data from a file we did not write: never let it leave the dump's own
        # tensor folder (by `..`, an absolute path, a link), nor that folder leave the dump's.
        folder = self.tensor_dir.parent.resolve()
        try:
            root = self.tensor_dir.resolve()
            path = (root / str(data_name)).resolve()
        except (OSError, RuntimeError) as exc:  # a link that loops
            raise self.error(f"{field_path}.data_name", f"{_short(data_name)}: not followed: {exc}") from None
        if folder not in root.parents:
            raise self.error(
                f"{field_path}.data_name",
                f"{self.tensor_dir.name} is a link to {root}, outside the dump's folder {folder}: not followed",
            )
        if root not in path.parents:
            raise self.error(f"{field_path}.data_name", f"{_short(data_name)} points outside {root}")
        return path

    def load(self, path: Path, shape: list[int], dtype: Any, field_path: str) -> Any:
        self.check_file(path, shape, field_path)
        try:
            tensor = self.codec.load(path)
        except Exception as exc:  # noqa: BLE001 - a broken file is a fault of that entry only
            raise self.error(f"{field_path}.data_name", f"cannot load {path.name}: {load_error(exc)}") from None
        found = self.codec.shape_of(tensor)
        if found != list(shape):
            raise self.error(f"{field_path}.shape", f"recorded {shape} but {path.name} holds {found}")
        # A file format without every dtype (.npy has no bfloat16) stores a
        # wider one: the codec casts back to the recorded dtype.
        cast = getattr(self.codec, "cast", None)
        held = getattr(tensor, "dtype", dtype)
        stored_wider = cast is not None and str(dtype).endswith("bfloat16") and str(held).endswith("float32")
        if held != dtype and not stored_wider:
            self.notes.append(
                f"{field_path}: {path.name} holds {held}, dump.json records {dtype}: cast to the recorded dtype"
            )
            return tensor.to(dtype) if cast is None else cast(tensor, dtype)
        return tensor if cast is None else cast(tensor, dtype)

    def check_file(self, path: Path, shape: list[int], field_path: str) -> None:
        """What the file declares, read before a loader allocates it: within the bound, and the
        recorded shape (tensor_files.py)."""
        bound = (_budget.get() or self._own_budget)[0]
        try:
            held = tensor_files.declared(path)
        except (tensor_files.Unreadable, OSError) as exc:
            raise self.error(f"{field_path}.data_name", f"cannot load {path.name}: {exc}") from None
        if held.elements > bound:
            raise self.error(
                f"{field_path}.data_name",
                f"{path.name} declares {held.elements:,} elements ({', '.join(held.storages) or held.dtype}), "
                f"more than --msprobe-max-elements {bound:,}: not loaded",
            )
        if held.fault:
            raise self.error(f"{field_path}.data_name", f"cannot load {path.name}: {held.fault}")
        if held.holds != "tensor":
            raise self.error(f"{field_path}.data_name", f"cannot load {path.name}: holds a {held.holds}, not a tensor")
        if held.shape is not None and held.shape != list(shape):
            raise self.error(f"{field_path}.shape", f"recorded {shape} but {path.name} holds {held.shape}")


def load_error(exc: Exception) -> str:
    """The line of a loader's error that says what is wrong with the file. torch's refusal of a
    pickle that would run code is a page of advice (to load it unsafely, among others): its
    line naming the refused global, or the unpickler's own error, is the finding."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for marker in ("GLOBAL", "Unsupported", "WeightsUnpickler error"):
        found = [line for line in lines if marker in line]
        if found:
            return f"{type(exc).__name__}: not a file torch.load(weights_only=True) loads: {found[0][:300]}"
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def _text(value: Any) -> str:
    text = str(value)
    if any("\ud800" <= char <= "\udfff" for char in text):
        raise ValueError("a lone surrogate: no file, report or terminal holds it")
    return text


def _number(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def check_statistics(spec: dict, dtype: str, error: Callable[[str, str], InputError]) -> None:
    """A finite Max or Min beyond what the dtype holds (1e308 for float16) cannot be a tensor's."""
    for key in ("Max", "Min"):
        raw = spec.get(key)
        value = as_float(raw)
        if value is None and raw is not None and not isinstance(raw, str):
            raise error(key, f"not a number: {_short(raw)}")
        if value is None or not math.isfinite(value):
            continue
        if dtype in FLOAT_MAX and abs(value) > FLOAT_MAX[dtype]:
            raise error(
                key, f"{value:g} is beyond the largest {dtype} ({FLOAT_MAX[dtype]:g}): no {dtype} tensor holds it"
            )
        if dtype in INT_RANGE and not INT_RANGE[dtype][0] <= value <= INT_RANGE[dtype][1]:
            raise error(key, f"{value:g} is outside the range of {dtype} {list(INT_RANGE[dtype])}")


_SCALARS: dict = {
    "int": lambda r, v: int(v),
    "float": lambda r, v: float(v),
    "bool": lambda r, v: bool(v),
    "str": lambda r, v: _text(v),
    "complex": lambda r, v: complex(v),
    "slice": lambda r, v: slice(*v),
    "ellipsis": lambda r, v: Ellipsis,
    "torch.Size": lambda r, v: r.codec.size([int(d) for d in v]),
    "torch.dtype": lambda r, v: r.codec.dtype(v),
    "torch.device": lambda r, v: Device(str(v)),
    "mindspore.dtype": lambda r, v: r.codec.dtype(v),
}


# -- random data -------------------------------------------------------------


def random_array(spec: dict, kind: str, seed: int, floating: Any = np.float64, largest: float = math.inf) -> np.ndarray:
    """msprobe's rule, made order-free and inf/NaN-safe.

    Floats: uniform in [Min, Max] with Min written into the first element and
    Max into the last, drawn in float64 and rounded once into an array of the
    numpy dtype `floating` (float32 for a float32 tensor: no float64 copy is
    made). Ints: randint(Min, Max + 1). Bools: randint(Min, Max + 1) > 0.
    A recorded inf/NaN is planted at those two places; the rest stays finite. A bound the
    statistics lack is made up within +-largest, the tensor dtype's largest finite value.
    """
    shape = tuple(spec["shape"])
    rng = np.random.default_rng(seed)
    low, high = as_float(spec.get("Min")), as_float(spec.get("Max"))
    if kind == "b":
        lo, hi = int(bool(low)) if low is not None else 0, int(bool(high)) if high is not None else 1
        lo, hi = min(lo, hi), max(lo, hi)  # Min true, Max false: from a dump no tensor wrote
        return np.asarray(rng.integers(lo, hi + 1, size=shape) > 0)
    if kind == "i":
        lo, hi = _int_bounds(low, high)
        return np.asarray(rng.integers(lo, hi, size=shape, dtype=np.int64, endpoint=True))
    lo, hi = _finite_bounds(spec, low, high, largest)
    array = np.empty(shape, dtype=floating)
    flat = array.reshape(-1)
    # A finite bound beyond float32's range (Min_except_inf_nan is not checked) rounds to inf,
    # as torch's conversion did, without numpy's overflow warning.
    with np.errstate(over="ignore"):
        _fill_uniform(rng, lo, hi, flat)
        if array.size:
            flat[0] = low if low is not None else lo
            flat[-1] = high if high is not None else hi
    return array


DRAW_BLOCK = 1 << 16  # random elements drawn at a time, in a float64 block that stays in the cache


def _fill_uniform(rng: np.random.Generator, lo: float, hi: float, out: np.ndarray) -> None:
    """out[:] = rng.uniform(lo, hi, out.size), a block at a time: numpy's uniform is lo + (hi - lo) u
    with one double u an element, in order, so the blocks draw the very same values."""
    width = hi - lo
    scratch = None if out.dtype == np.float64 else np.empty(min(DRAW_BLOCK, out.size))
    for start in range(0, out.size, DRAW_BLOCK):
        part = out[start : start + DRAW_BLOCK]
        u = part if scratch is None else scratch[: part.size]
        rng.random(out=u)
        if math.isfinite(width):
            u *= width
            np.add(u, lo, out=part)  # in float64, rounded once (to nearest even) into part's dtype
        else:  # [-1e308, 1e308]: the width overflows, the mix of the ends does not
            part[...] = lo * (1 - u) + hi * u


_INT64 = INT_RANGE["int64"]


def _int_bounds(low: float | None, high: float | None) -> tuple:
    lo = int(low) if low is not None and math.isfinite(low) else 0
    hi = int(high) if high is not None and math.isfinite(high) else lo + 1
    lo, hi = (min(max(v, _INT64[0]), _INT64[1]) for v in (lo, hi))  # a uint64 past int64: its top
    return min(lo, hi), max(lo, hi)


def _finite_bounds(spec: dict, low: float | None, high: float | None, largest: float = math.inf) -> tuple:
    """Finite [lo, hi] for the bulk of a tensor whose Min/Max may be inf, NaN or absent; a made-up
    bound stays within +-largest (float16's Max -38217 alone: Min -65504, not -76434, which is -inf)."""
    low_finite = as_float(spec.get("Min_except_inf_nan"))
    high_finite = as_float(spec.get("Max_except_inf_nan"))
    lo = low if _finite(low) else low_finite if _finite(low_finite) else None
    hi = high if _finite(high) else high_finite if _finite(high_finite) else None
    if lo is None and hi is None:
        return -1.0, 1.0
    if lo is None:
        assert hi is not None
        lo = max(hi - max(1.0, abs(hi)), -largest)
    if hi is None:
        hi = min(lo + max(1.0, abs(lo)), largest)
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
