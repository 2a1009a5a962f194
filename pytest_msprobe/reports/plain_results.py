"""A result's plain data read back from a file (a journal line): every field of its kind, or refused.

`EntryResult.to_dict` writes a result as plain data; a journal keeps it a line each, and a resume, a
merge's report and `python -m pytest_msprobe.report` read it back. The file may have been edited or
forged: a severity that is a word, a position of 4,000 digits, samples that are no lists reach code
that formats, sorts and draws them. So every field is checked here against its dataclass's own type
(results.py: a field added there is checked as it is declared), before anything reads it, and a field
of the wrong kind is a `FieldError` naming it (`outputs[0].severity: expected a number or null, found
str 'high'`). No pytest.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Union

from ..dumps.dump import DIRECTIONS
from ..results import EntryResult, Status

MAX_INT = 2**63  # an index, a line, a position, a size: what a C integer holds
MAX_ITEMS = 100_000  # of a list: a run keeps 2,000 sample points an output
STATUS_WORDS = tuple(status.value for status in Status)


class FieldError(ValueError):
    """A field of a result's plain data of the wrong kind: its text names the field."""


def entry_result(data: Any) -> EntryResult:
    """The result a journal line's object holds; FieldError naming the first field of the wrong kind."""
    return _dataclass(EntryResult, data, "")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _dataclass(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise FieldError(f"{where or 'the line'}: expected an object, found {kind(data)}")
    hints = _hints(cls)
    values = {}
    for key, value in data.items():
        name = f"{where}.{key}" if where else str(key)
        if key not in hints:
            raise FieldError(f"{_shown(name)}: not a field of {cls.__name__}")
        values[key] = _field(key, hints[key], value, name)
    for field in dataclasses.fields(cls):
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if required and field.name not in data:
            raise FieldError(f"{where + '.' if where else ''}{field.name}: missing")
    return cls(**values)


def _field(key: str, hint: Any, value: Any, where: str) -> Any:
    if key == "samples":
        return _samples(value, where)
    if key == "direction":
        return _checked(value, value in DIRECTIONS, " or ".join(DIRECTIONS), where)
    return value_of(hint, value, where)


def value_of(hint: Any, value: Any, where: str) -> Any:
    """value, checked to be of the type hint (str, int, float, bool, Status, X | None, list[X],
    tuple[X, ...], a dataclass); FieldError naming `where` otherwise."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (hint,) = [arg for arg in args if arg is not type(None)]
        return value_of(hint, value, where)
    if hint is str:
        return _checked(value, isinstance(value, str), "a string", where)
    if hint is bool:
        return _checked(value, isinstance(value, bool), "true or false", where)
    if hint is int:
        return _checked(value, _integer(value), "an integer", where)
    if hint is float:
        return _checked(value, _number(value), "a number", where)
    if hint is Status:
        return Status(_checked(value, value in STATUS_WORDS, f"one of {', '.join(STATUS_WORDS)}", where))
    if origin in (list, tuple):
        _checked(value, isinstance(value, list) and len(value) <= MAX_ITEMS, "a list", where)
        items = [value_of(args[0], item, f"{where}[{i}]") for i, item in enumerate(value)]
        return items if origin is list else tuple(items)
    if dataclasses.is_dataclass(hint):
        return _dataclass(typing.cast(type, hint), value, where)
    raise FieldError(f"{where}: a field no journal holds")


def _checked(value: Any, ok: bool, expected: str, where: str) -> Any:
    if not ok:
        raise FieldError(f"{_shown(where)}: expected {expected}, found {kind(value)}")
    return value


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT < value < MAX_INT


def _number(value: Any) -> bool:
    return isinstance(value, float) or _integer(value)


def _finite(value: Any) -> bool:
    return _number(value) and value - value == 0


# judging/samples.py's figure_samples, as the HTML report draws it: (the check, what passes it).
_SAMPLES: dict[str, tuple[typing.Callable[[Any], bool], str]] = {
    "dtype": (lambda v: isinstance(v, str), "a string"),
    "total": (_integer, "an integer"),
    "bench": (lambda v: _list_of(v, _finite), "a list of finite numbers"),
    "error": (lambda v: _list_of(v, _finite), "a list of finite numbers"),
    "ulp_of_one": (_finite, "a finite number"),
    "ulp_edges": (lambda v: _list_of(v, _finite, 64, open_end=True), "finite numbers, the last null"),
    "ulp_counts": (lambda v: _list_of(v, _integer, 64), "a list of integers"),
    "worst": (lambda v: _list_of(v, _worst, 1000), "a list of elements"),
}
_WORST = {"index": lambda v: _list_of(v, _integer, 64), "tested": _number, "bench": _number, "error": _number,
          "ulp": _number}  # fmt: skip


def _list_of(value: Any, test: typing.Callable[[Any], bool], most: int = MAX_ITEMS, open_end: bool = False) -> bool:
    if not isinstance(value, list) or len(value) > most:
        return False
    items = value[:-1] if open_end and value and value[-1] is None else value
    return all(test(item) for item in items)


def _worst(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == set(_WORST) and all(_WORST[k](v) for k, v in value.items())


def _samples(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    _checked(value, isinstance(value, dict), "an object or null", where)
    for key in ("bench", "error", "ulp_edges", "ulp_counts"):
        if key not in value:
            raise FieldError(f"{where}.{key}: missing")
    for key, item in value.items():
        if key not in _SAMPLES:
            raise FieldError(f"{_shown(f'{where}.{key}')}: not a field of the samples")
        test, expected = _SAMPLES[key]
        _checked(item, test(item), expected, f"{where}.{key}")
    if len(value["ulp_counts"]) != max(len(value["ulp_edges"]) - 1, 0):
        raise FieldError(f"{where}.ulp_counts: not one count between each two ulp_edges")
    return value


def kind(value: Any) -> str:
    """`str 'high'`, `int of 5000 digits`, `list`: what a field held, short."""
    if isinstance(value, str):
        return f"str {value[:40]!r}" + ("..." if len(value) > 40 else "")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"int {value}" if abs(value) < 10**20 else f"an int of {value.bit_length()} bits"
    if isinstance(value, float):
        return f"float {value!r}"
    return {"dict": "an object", "list": "a list"}.get(type(value).__name__, type(value).__name__)


def _shown(name: str) -> str:
    return name if len(name) <= 200 else name[:200] + "..."
