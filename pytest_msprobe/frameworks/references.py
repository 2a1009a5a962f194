"""The reference registry: what stands behind an API without a torch counterpart, and who said so.

For an API name, or a pattern of them (`myteam.gated_silu`, `NPU.npu_rms_norm`, `myteam.*`), a
`Reference` holds the float64 benchmark of the forward (and, where autograd cannot derive it, of the
backward), the magnitude model the dtype standard scales its budget by (or a declaration of which
kind of op it is), the elements of an output a correct kernel may leave unwritten, the outputs that
only keep the op's structure, and the device call where the dump's API path gives none. Each field
remembers where it came from (a conftest's line, a plugin, one of msprobe's YAML files, built-in),
which the run's header says.

Everything registers through one `Registry`: the built-in torch_npu references (npu_builtins.py),
a conftest's or a plugin's `pytest_msprobe_references` hook, and msprobe's YAML files
(msprobe_yaml.py). The registry only holds callables it was handed: nothing a dump names is ever
imported. No torch, no pytest: a conftest imports this module in every run, the plugin's or not.
"""

from __future__ import annotations

import enum
import fnmatch
import importlib
import inspect
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, Union

__all__ = [
    "BUILT_IN",
    "Magnitude",
    "MagnitudeModel",
    "Postprocess",
    "Reference",
    "ReferenceFailed",
    "ReferenceUnsupported",
    "Registry",
    "RegistryError",
    "Unwritten",
    "UnwrittenMask",
]

BUILT_IN = "built-in"


class ReferenceUnsupported(Exception):
    """Raised by a reference for a call it does not model (the message says which feature): the
    entry is a SKIP naming it, not an error."""


class ReferenceFailed(Exception):
    """Code registered for an API raised, or gave what cannot be judged (an output of another shape
    or dtype kind than the dump records): an error row of its entry, naming the function."""


class RegistryError(ValueError):
    """A registration that cannot stand (a pattern registered twice, a field that is not callable):
    the user's to fix, a usage error before any entry runs."""


class Magnitude(enum.Enum):
    """Declarations of which kind of op a custom kernel is, in place of a magnitude model of its own."""

    # Every floating input enters linearly (a contraction, a sum, an elementwise product, copies): the
    # reference on |inputs| is the magnitude of the terms a correct kernel adds, forward and backward.
    SUMS_AND_PRODUCTS = "sums and products"
    # The forward reference is a composition of APIs this plugin models (linear, matmul, silu, softmax,
    # elementwise math, views, ...): their models compose through it (frameworks/composed.py).
    COMPOSITION = "composition"


class MagnitudeModel(Protocol):
    """The magnitude model of an op's forward: called as the op is, with its floating arguments in
    float64 on the CPU, it gives per output (in the order of the op's flattened outputs) the
    nonnegative magnitude of the terms a correct kernel rounds at fp32, a tensor of the output's
    shape, or None where it has none (`docs/standards.md`: m_i)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


class UnwrittenMask(Protocol):
    """The elements a correct kernel may leave unwritten, from the call: given the bench's outputs
    (flattened, float64 on the CPU) and the call's arguments (recorded dtypes, CPU), a mapping of
    output index -> a boolean mask broadcastable to that output (True: may be left unwritten), or an
    `Unwritten` that also says why."""

    def __call__(self, outputs: Sequence[Any], args: Sequence[Any], kwargs: Mapping[str, Any], /) -> Any: ...


@dataclass(frozen=True)
class Unwritten:
    """An output's elements a correct kernel may leave unwritten (`mask` True), and why (the row's Message)."""

    mask: Any
    why: str = ""


@dataclass(frozen=True)
class Postprocess:
    """msprobe's per-API output post-processing (api_output_postprocess.yaml's acc_check_handlers):
    `handler(api_name, output, args, kwargs) -> output`, on the tested side's outputs (target) and on
    the bench's (golden), before they are compared."""

    target: Callable | None = None
    golden: Callable | None = None


Field = Union[Callable, "Magnitude", Postprocess, Mapping[int, str], None]

# The fields a registration may give, and what each is in words (the header's).
FIELDS = {
    "forward": "forward",
    "backward": "backward",
    "magnitude": "magnitude model",
    "backward_magnitude": "backward magnitude model",
    "unwritten": "unwritten mask",
    "postprocess": "output post-processing",
    "device": "device call",
    "uncompared": "uncompared outputs",
}


@dataclass(frozen=True)
class Reference:
    """What stands behind one API name or pattern, field by field, and where each field came from."""

    pattern: str
    # The float64 benchmark: called as the device op is, its floating tensors in float64 on the CPU.
    forward: Callable | None = None
    # backward(grad_outputs, *args, **kwargs) -> the gradient of each floating tensor input, in
    # argument order (None where it has none); None: autograd of `forward`.
    backward: Callable | None = None
    magnitude: MagnitudeModel | Magnitude | None = None
    # backward_magnitude(grad_outputs, *args, **kwargs) -> per floating input, as `backward` gives.
    backward_magnitude: Callable | None = None
    unwritten: UnwrittenMask | None = None
    postprocess: Postprocess | None = None
    # The tested side's callable where the dump's API path names none (a custom_wrap_ops.yaml prefix)
    # or another; None: torch_npu's op for NPU entries, torch.ops.<namespace>.<op> for a custom op's.
    device: Callable | None = None
    uncompared: Mapping[int, str] = field(default_factory=dict)  # output index -> why it is not compared
    origins: Mapping[str, str] = field(default_factory=dict)  # field -> where it was registered

    def given(self) -> list[str]:
        """The fields this registration gives, in FIELDS' order."""
        return [name for name in FIELDS if getattr(self, name) not in (None, {})]

    @property
    def built_in(self) -> bool:
        return all(origin == BUILT_IN for origin in self.origins.values())

    def origin_of(self, name: str) -> str:
        return self.origins.get(name, "")

    def matches(self, api_name: str) -> bool:
        return fnmatch.fnmatchcase(api_name, self.pattern)

    @property
    def exact(self) -> bool:
        return not any(char in self.pattern for char in "*?[")

    def signature(self) -> str:
        """What a worker compares with its controller's registration: each field and its origin."""
        # The file's name and line, not its folder: each host has its own copy of the team's plugin.
        fields = (
            f"{name} {os.path.basename(self.origins.get(name, '?'))} {describe(getattr(self, name))}"
            for name in self.given()
        )
        return "; ".join(fields)


class Registry:
    """Every reference of this run, by pattern. A registration of a pattern the built-ins hold
    replaces theirs (field by field); two registrations of one pattern from two places, where both
    give a field, are an error (which one wins would depend on the order pytest loads plugins)."""

    def __init__(self) -> None:
        self._by_pattern: dict[str, Reference] = {}

    def add(
        self,
        pattern: str,
        forward: Callable | None = None,
        *,
        backward: Callable | None = None,
        magnitude: MagnitudeModel | Magnitude | None = None,
        backward_magnitude: Callable | None = None,
        unwritten: UnwrittenMask | None = None,
        postprocess: Postprocess | None = None,
        device: Callable | None = None,
        uncompared: Mapping[int, str] | None = None,
        origin: str | None = None,
    ) -> Reference:
        """Register what stands behind the APIs `pattern` names (`<Type>.<api>` as the dump writes
        it, fnmatch wildcards allowed); `origin` defaults to the caller's file and line."""
        if not isinstance(pattern, str) or not pattern.strip() or "." not in pattern:
            raise RegistryError(
                f"a reference's pattern is an API name as the dump writes it (<Type>.<api>), not {pattern!r}"
            )
        origin = origin or caller(sys._getframe(1))
        given: dict[str, Any] = {
            "forward": forward,
            "backward": backward,
            "magnitude": magnitude,
            "backward_magnitude": backward_magnitude,
            "unwritten": unwritten,
            "postprocess": postprocess,
            "device": device,
            "uncompared": dict(uncompared or {}),
        }
        for name, value in given.items():
            check_field(pattern, name, value, origin)
        fresh = Reference(pattern, **given, origins={name: origin for name, v in given.items() if v not in (None, {})})
        if not fresh.given():
            raise RegistryError(f"{origin}: the registration of {pattern} gives nothing (a forward, a mask, ...)")
        known = self._by_pattern.get(pattern)
        found = fresh if known is None else merged(known, fresh)
        check_calls(found, fresh.given())
        self._by_pattern[pattern] = found
        return found

    def find(self, api_name: str) -> Reference | None:
        """The registration behind `<Type>.<api>`: an exact name before a pattern, the longest pattern
        first; ReferenceFailed where two patterns of one length match it."""
        exact = self._by_pattern.get(api_name)
        if exact is not None:
            return exact
        matching = sorted(
            (r for r in self._by_pattern.values() if not r.exact and r.matches(api_name)),
            key=lambda r: -len(r.pattern),
        )
        if len(matching) > 1 and len(matching[0].pattern) == len(matching[1].pattern):
            raise ReferenceFailed(
                f"{api_name} is matched alike by the patterns {matching[0].pattern} "
                f"({matching[0].origin_of(matching[0].given()[0])}) and {matching[1].pattern} "
                f"({matching[1].origin_of(matching[1].given()[0])}): register it by its own name"
            )
        return matching[0] if matching else None

    def __iter__(self) -> Any:
        return iter(self._by_pattern.values())

    def __len__(self) -> int:
        return len(self._by_pattern)

    def refuse(self, pattern: str, why: str) -> None:
        """Make every entry `pattern` names an error saying `why` (a worker whose registrations are
        not its controller's: `agree`)."""
        refused = Refused(why)
        self._by_pattern[pattern] = Reference(
            pattern, forward=refused, device=refused, origins={"forward": "refused", "device": "refused"}
        )

    def signatures(self) -> dict[str, str]:
        """pattern -> signature: what a worker of another process compares with its controller's."""
        return {pattern: reference.signature() for pattern, reference in self._by_pattern.items()}

    def header_lines(self) -> list[str]:
        """The run's header: the built-ins in one line, every other registration on its own."""
        built_in = [r for r in self if r.built_in]
        lines = []
        if built_in:
            lines.append(f"references: {len(built_in)} built-in (torch_npu's fused ops, docs/npu.md)")
        for reference in self:
            if reference.built_in:
                continue
            by_origin: dict[str, list[str]] = {}
            for name in reference.given():
                value = getattr(reference, name)
                said = f"{FIELDS[name]} ({value.value})" if isinstance(value, Magnitude) else FIELDS[name]
                by_origin.setdefault(reference.origin_of(name), []).append(said)
            said = "; ".join(f"{', '.join(names)} from {origin}" for origin, names in by_origin.items())
            lines.append(f"reference {reference.pattern}: {said}")
        return lines


@dataclass(frozen=True)
class Refused:
    """A reference that cannot be used: calling it is the error that says why."""

    why: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ReferenceFailed(self.why)


def agree(registry: Registry, theirs: Mapping[str, str], here: str) -> list[str]:
    """Refuse every pattern registered otherwise here than in `theirs` (the controller's signatures):
    an xdist worker on another host, without the team's plugin or with another copy of it, would
    otherwise SKIP or judge those entries unlike the others. The patterns refused back."""
    mine = registry.signatures()
    refused = []
    for pattern in sorted(set(mine) | set(theirs)):
        if mine.get(pattern) == theirs.get(pattern):
            continue
        registry.refuse(
            pattern,
            f"{pattern} is registered otherwise on {here} than on the xdist controller: here "
            f"{mine.get(pattern) or 'nothing'}; there {theirs.get(pattern) or 'nothing'} (load the same "
            "conftest, plugin and YAML files on every host)",
        )
        refused.append(pattern)
    return refused


def merged(known: Reference, fresh: Reference) -> Reference:
    """A second registration of one pattern: its fields replace the built-in ones; a field two
    registrations of the user's both give is an error."""
    changes: dict[str, Any] = {}
    origins = dict(known.origins)
    for name in fresh.given():
        before = known.origin_of(name)
        if getattr(known, name) not in (None, {}) and before != BUILT_IN:
            raise RegistryError(
                f"{fresh.pattern}: its {FIELDS[name]} is registered twice, by {before} and by "
                f"{fresh.origin_of(name)}: keep one (which would win depends on the order pytest loads them)"
            )
        changes[name] = getattr(fresh, name)
        origins[name] = fresh.origin_of(name)
    if "forward" in changes and "backward" not in changes and known.origin_of("backward") == BUILT_IN:
        # A built-in backward belongs to the built-in forward it replaced.
        changes["backward"] = None
        origins.pop("backward", None)
    return replace(known, **changes, origins=origins)


def check_field(pattern: str, name: str, value: Any, origin: str) -> None:
    if value in (None, {}):
        return
    if name == "magnitude" and isinstance(value, Magnitude):
        return
    if name == "postprocess":
        sides = (value.target, value.golden) if isinstance(value, Postprocess) else (value,)
        if not isinstance(value, Postprocess) or not all(f is None or callable(f) for f in sides):
            raise RegistryError(f"{origin}: {pattern}'s postprocess must be a Postprocess of two callables or None")
        return
    if name == "uncompared":
        if not all(isinstance(k, int) and isinstance(v, str) for k, v in dict(value).items()):
            raise RegistryError(f"{origin}: {pattern}'s uncompared outputs map an output index to why")
        return
    if not callable(value):
        kinds = " or a Magnitude (SUMS_AND_PRODUCTS, COMPOSITION)" if name == "magnitude" else ""
        raise RegistryError(
            f"{origin}: {pattern}'s {FIELDS[name]} must be a callable{kinds}, not {type(value).__name__}"
        )


# How the check calls each field, beside the op's own arguments (the forward's signature): the
# leading arguments it passes first, and whether the op's arguments follow.
CALLED_AS: dict[str, tuple[tuple[str, ...], bool]] = {
    "magnitude": ((), True),
    "backward": (("grad_outputs",), True),
    "backward_magnitude": (("grad_outputs",), True),
    "unwritten": (("outputs", "args", "kwargs"), False),
}


def check_calls(reference: Reference, fields: Sequence[str]) -> None:
    """Each user's function of `fields` can be called as the check will call it (RegistryError where
    not): what can be known before any entry runs, without running the op. A model of the op's
    arguments against the forward's signature, called both with the forward's required arguments
    alone and with all of them (an op's call may give its defaults or leave them out); a mask with
    (outputs, args, kwargs); a post-processing handler with (api_name, output, args, kwargs). What
    signature inspect cannot read (a builtin, a torch op, a built-in reference) is not checked."""
    forward = _signature(reference.forward) if not isinstance(reference.forward, Deferred) else None
    calls: list[tuple[str, Any, tuple[str, ...], bool]] = []
    for name in fields:
        value = getattr(reference, name)
        if name == "postprocess" and isinstance(value, Postprocess):
            sides = (("target", value.target), ("golden", value.golden))
            handler_args = ("api_name", "output", "args", "kwargs")
            calls += [(f"{side} output post-processing", fn, handler_args, False) for side, fn in sides if fn]
        elif name in CALLED_AS and callable(value):
            leading, with_op = CALLED_AS[name]
            calls.append((FIELDS[name], value, leading, with_op))
    for what, fn, leading, with_op in calls:
        signature = _signature(fn)
        if signature is None or (with_op and forward is None):
            continue
        ways = _op_calls(forward) if with_op and forward is not None else [((), {})]
        for positional, keywords in ways:
            try:
                signature.bind(*leading, *positional, **keywords)
            except TypeError as exc:
                given = ", ".join([*leading, *positional, *(f"{k}=" for k in keywords)])
                called = f"as the reference {describe(reference.forward)}{forward} is"
                as_what = called if with_op else "as the check calls it"
                raise RegistryError(
                    f"{reference.origin_of(_field_of(reference, fn))}: {reference.pattern}'s {what} "
                    f"{describe(fn)}{signature}{where_defined(fn)[len(describe(fn)) :]} cannot be called "
                    f"{as_what}: ({given}): {exc}"
                ) from None


def _field_of(reference: Reference, fn: Any) -> str:
    for name in FIELDS:
        value = getattr(reference, name)
        if value is fn or (isinstance(value, Postprocess) and fn in (value.target, value.golden)):
            return name
    return "forward"


def _signature(fn: Any) -> inspect.Signature | None:
    if fn is None or isinstance(fn, (Deferred, Refused)):
        return None
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin, a torch op: nothing to read
        return None


def _op_calls(forward: inspect.Signature) -> list[tuple[tuple[str, ...], dict[str, str]]]:
    """The ways the op may be called, by the forward's signature: its required arguments alone, and
    all of them; none where it takes *args or **kwargs (any call would do)."""
    kinds = inspect.Parameter
    parameters = list(forward.parameters.values())
    if any(p.kind in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD) for p in parameters):
        return []
    positional = [p for p in parameters if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    keyword = [p for p in parameters if p.kind == kinds.KEYWORD_ONLY]
    required = [p for p in positional if p.default is kinds.empty]
    return [
        (tuple(p.name for p in required), {p.name: p.name for p in keyword if p.default is kinds.empty}),
        (tuple(p.name for p in positional), {p.name: p.name for p in keyword}),
    ]


def caller(frame: Any) -> str:
    """`conftest.py:41`, the place a registration was made (relative to the working folder where under it)."""
    path = frame.f_code.co_filename
    try:
        shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    except ValueError:  # another drive
        shown = path
    return f"{shown}:{frame.f_lineno}"


def describe(value: Any) -> str:
    """A registered value in words: `myteam_ops.gated_silu_reference`, `composition`."""
    if isinstance(value, Magnitude):
        return value.value
    if isinstance(value, Postprocess):
        sides = (("target", value.target), ("golden", value.golden))
        return ", ".join(f"{side} {describe(fn)}" for side, fn in sides if fn)
    if isinstance(value, Mapping):
        return ", ".join(f"output {index}" for index in sorted(value))
    if isinstance(value, Deferred):
        return f"{value.module}.{value.name}"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type(value).__name__
    module = getattr(value, "__module__", None)
    return f"{module}.{name}" if module else str(name)


def where_defined(value: Any) -> str:
    """`myteam_ops.gated_silu_reference (examples/custom_op/myteam_ops.py:30)`: a user's function as
    an error row names it."""
    text = describe(value)
    target = inspect.unwrap(value) if callable(value) else value
    try:
        path = inspect.getsourcefile(target)
        line = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        return text
    if path is None:
        return text
    try:
        shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    except ValueError:
        shown = path
    return f"{text} ({shown}:{line})"


@dataclass(frozen=True)
class Deferred:
    """A built-in function of this package, imported when first called: the header lists the
    built-ins without importing torch (the xdist controller never runs one)."""

    module: str  # under pytest_msprobe.frameworks
    name: str

    def load(self) -> Callable:
        found: Callable = getattr(importlib.import_module(f"{__package__}.{self.module}"), self.name)
        return found

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.load()(*args, **kwargs)


def importable(fn: Any) -> tuple[str, str]:
    """(where, name) a standalone script imports `fn` by, as the run imported it: the absolute path of
    the file that defines it (a conftest, a --msprobe-functions file) and its qualified name there,
    or a module of this package for a built-in; ValueError where a script cannot find it again (a
    lambda, a function defined inside another, one its module does not hold under its name)."""
    if isinstance(fn, Deferred):
        return f"{__package__}.{fn.module}", fn.name
    target = inspect.unwrap(fn)
    name = getattr(target, "__qualname__", "")
    if not name or "<" in name:
        raise ValueError(f"{where_defined(fn)} is not a function of its module's (a lambda or a local function)")
    try:
        path = inspect.getsourcefile(target)
    except TypeError:
        path = None
    # By the globals of the file it was defined in: the module pytest or a --msprobe-functions import
    # made of that file (sys.modules may hold another file of the same name: two conftest.py).
    first, *rest = name.split(".")
    found: Any = getattr(target, "__globals__", {}).get(first)
    for part in rest:
        found = getattr(found, part, None)
    if path is None or found is not target:
        raise ValueError(f"{where_defined(fn)} is not found again under its name in the file that defines it")
    return os.path.abspath(path), name


# Where the check was when something no `except Exception` takes (the time limit's alarm) stopped it
# in a user's function: the innermost such function, for the error row.
_STOPPED_IN: list[str] = []


def guarded(fn: Callable, role: str, api_name: str) -> Callable:
    """`fn` (a user's reference, model, mask or device call) as the check calls it: an exception it
    raises is ReferenceFailed naming it (ReferenceUnsupported stays a SKIP); stopped inside it by
    the time limit, `stopped_in()` names it."""
    named = where_defined(fn)

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ReferenceUnsupported, ReferenceFailed):
            raise
        except Exception as exc:  # the user's code: any exception is its finding
            lines = str(exc).strip().splitlines()
            raise ReferenceFailed(
                f"the {role} {named} registered for {api_name} raised {type(exc).__name__}: "
                f"{lines[0][:300] if lines else ''}"
            ) from exc
        except BaseException:
            if not _STOPPED_IN:  # the innermost function it passes through
                _STOPPED_IN.append(f"the {role} {named} registered for {api_name}")
            raise

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


def stopped_in(clear: bool = True) -> str:
    """The user's function a check was stopped in ("" where none), forgotten once read."""
    found = _STOPPED_IN[0] if _STOPPED_IN else ""
    if clear:
        _STOPPED_IN.clear()
    return found
