"""The seam between a framework and the check: what it is asked, what it hands back.

A framework (PyTorch, MindSpore) rebuilds an entry's call, runs it on the
tested side and as the float64 benchmark, and hands both back as numpy arrays
(`Run`); check.py judges them. Each framework's module is imported only when a
dump of it is checked.
"""

from __future__ import annotations

import enum
import functools
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..compare import ExtraRuns

if TYPE_CHECKING:
    from ..dump import Dump, EntryName


class Unsupported(Exception):
    """The check cannot be made (an API without a callable, a collective, ...): SKIP."""


class BenchmarkFailed(Exception):
    """The CPU benchmark itself raised: nothing to judge the tested side against, SKIP."""


class Tested(enum.Enum):
    """Where the tested outputs come from."""

    __test__ = False  # not a test class, whatever its name

    DEVICE = "device"  # the API run again on the device under test, in the recorded dtypes
    RECORDED = "recorded"  # the outputs a tensor dump recorded: nothing runs on a device


@dataclass(frozen=True)
class RunOptions:
    """How a framework runs one entry."""

    device: str  # the device under test: "cpu", "cuda:0", "npu:3" (unused when recorded)
    tested: Tested
    mode: str  # input data: real, random, or auto (options.MODES)
    seed: int  # of the random inputs, mixed with each entry's name
    keep: bool = False  # hand the values back on Run.kept (the error data)

    @property
    def recorded(self) -> bool:
        return self.tested is Tested.RECORDED

    @property
    def tested_on(self) -> str:
        """The tested side in words: `npu:3`, `recorded`."""
        return Tested.RECORDED.value if self.recorded else self.device


@dataclass
class OutputPair:
    """One output of the API: the tested value beside the bench value."""

    index: int
    tested: np.ndarray | None = None
    bench: np.ndarray | None = None
    tested_dtype: str = ""
    bench_dtype: str = ""
    shape: list[int] | None = None
    skip: str = ""  # why this output cannot be compared
    note: str = ""  # what the pairing had to do (a gradient judged at another node of the graph)
    extra: ExtraRuns = field(default_factory=ExtraRuns)  # more of the bench, for a standard that asks


@dataclass
class Kept:
    """The values of one check in the framework's own types, kept only when error data is saved."""

    inputs: dict[str, Any]  # {"args": [...], "kwargs": {...}} as rebuilt: recorded dtypes, on CPU
    tested: list | None  # outputs (backward: gradients of the floating inputs); None if the run raised
    bench: list
    grad_outputs: list | None = None  # backward: the gradients fed to the outputs


@dataclass
class Run:
    """Both sides of one entry, ready for the standard."""

    pairs: list[OutputPair]
    notes: list[str] = field(default_factory=list)
    tested_error: str = ""  # the exception of the device under test, if it raised
    kept: Kept | None = None


class Framework(Protocol):
    """Runs the entries of one framework's dumps."""

    name: str

    def run(self, dump: Dump, entry: EntryName, options: RunOptions) -> Run:
        """Both sides of the entry; Unsupported (and inputs.InputError, BenchmarkFailed) when
        there is nothing to judge."""
        ...


# dump.json's `framework` -> "module:Class" under this package, imported on first use.
FRAMEWORKS = {
    "pytorch": "pytorch:PyTorch",
    "mindtorch": "pytorch:PyTorch",
    "mindspore": "mindspore:MindSpore",
}


@functools.cache
def for_framework(framework: str) -> Framework:
    """The framework that runs entries of dumps written by `framework`."""
    target = FRAMEWORKS.get(framework) if isinstance(framework, str) else None
    if target is None:
        raise Unsupported(f"dumps of framework {framework!r} are not supported")
    module, _, cls = target.partition(":")
    found: Framework = getattr(importlib.import_module(f"{__name__}.{module}"), cls)()
    return found
