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
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from ..dumps.apis import Unsupported
from ..judging.compare import ExtraRuns
from ..judging.dropout import DropoutRule
from .references import Registry

if TYPE_CHECKING:
    from ..dumps.dump import Dump, EntryName
    from .torch_engine import ExtraBenchRuns


class BenchmarkFailed(Exception):
    """The CPU benchmark itself raised: nothing to judge the tested side against, SKIP."""


def built_in_references() -> Registry:
    """A registry of the built-in references alone (a run's holds the users' too: glue/session.py)."""
    from . import npu_builtins

    registry = Registry()
    npu_builtins.register(registry)
    return registry


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
    keep: bool = False  # hand the values back on Run.kept (the error data, the repro)
    probe: bool = False  # offer the fp32 probe on Run.probe (--msprobe-probe fp32)
    # The references behind the APIs without a torch counterpart (references.py).
    references: Registry = field(default_factory=built_in_references, compare=False)

    @property
    def recorded(self) -> bool:
        return self.tested is Tested.RECORDED

    @property
    def probe_device(self) -> str:
        """Where the fp32 probe runs: the device under test; the CPU when the tested side is recorded."""
        return "cpu" if self.recorded else self.device

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
    # The narrower dtype a correct kernel computed it in, where not tested_dtype's: the gradient of
    # a 0-dim input that type promotion left out of the result's dtype (frameworks/pytorch.py).
    computed_in: str = ""
    extra: ExtraRuns = field(default_factory=ExtraRuns)  # more of the bench, for a standard that asks
    dropout: DropoutRule | None = None  # a dropout that drew a mask: judged by its share dropped (judging/dropout.py)
    # A documented deficit of the kernel that may have computed the tested side (PyTorch's CPU
    # kernels: cpu_kernels.py), said beside the verdict where the output fails; it judges nothing.
    kernel_deficit: str = ""


@dataclass(frozen=True)
class Recipe:
    """How a standalone script (repro.py) rebuilds an entry's call: plain data, no callables."""

    framework: str  # "pytorch" or "mindspore": which tested side the script runs
    tested: str  # the tested callable's dotted path: "torch.nn.functional.linear", "mindspore.mint.exp"
    # Python source defining `bench(*args, **kwargs)`, the benchmark on torch (it may use the
    # script's `resolve`); "" where the script cannot rebuild it and takes the run's bench outputs.
    bench_source: str
    autocast: str = ""  # "torch.bfloat16": the tested call ran under autocast to this dtype
    grad_flags: tuple[bool, ...] = ()  # per floating input: took a gradient in the step
    inplace: bool = False  # an in-place op: its inputs are cloned before a backward
    primitive_args: tuple | None = None  # a MindSpore primitive: its constructor's arguments
    # The torch API whose magnitude model the dtype standard's extra runs use (frameworks/magnitudes.py).
    magnitude_api: str = ""
    # Why no script reproduces the verdict, where none does (a dropout's two masks, judged by their shares).
    unscripted: str = ""
    # What the run did to the tested outputs before comparing them, for the script to do the same to
    # the op's outputs it runs again: (role, where, name), role "target" (msprobe's post-processing
    # handler, called (api, output, args, kwargs)) or "unwritten" (the registered mask, called
    # (bench outputs, args, kwargs)), `where` the file the run imported it from (absolute) or a module
    # of this package, `name` its qualified name there (references.importable).
    output_functions: tuple[tuple[str, str, str], ...] = ()
    api: str = ""  # the API's name as a post-processing handler is given it ("gated_silu")


@dataclass
class Kept:
    """The values of one check in the framework's own types, kept only when error data or a repro is saved."""

    inputs: dict[str, Any]  # {"args": [...], "kwargs": {...}} as rebuilt: recorded dtypes, on CPU
    tested: list | None  # outputs (backward: gradients of the floating inputs); None if the run raised
    bench: list
    grad_outputs: list | None = None  # backward: the gradients fed to the outputs
    recipe: Recipe | None = None
    # The outputs whose bench is a gradient inside the API's graph (recorded_gradients), by index.
    at_nodes: frozenset[int] = frozenset()
    extra: ExtraBenchRuns | None = None  # the standard's extra runs of the bench, as far as it asked them


@dataclass
class Probe:
    """The fp32 probe of one entry, ready to run: the tested side again with its fp16/bf16 inputs
    in fp32 and its outputs rounded back to the recorded dtypes. check.py runs it only for a
    failing fp16/bf16 entry, so the others never pay."""

    device: str  # where it runs: the device under test, or the CPU for a recorded tested side
    pairs: Callable[[], list[OutputPair]]  # the rounded outputs beside the run's bench outputs
    # Outputs it cannot judge: gradients the run judged at a node of the API's graph, which a rerun
    # of the call does not give.
    unprobed: frozenset[int] = frozenset()


@dataclass
class Run:
    """Both sides of one entry, ready for the standard."""

    pairs: list[OutputPair]
    notes: list[str] = field(default_factory=list)
    tested_error: str = ""  # the exception of the device under test, if it raised
    kept: Kept | None = None
    probe: Probe | None = None  # asked for by RunOptions.probe
    low_precision: bool = False  # the tested call computes in fp16/bf16: its inputs, or autocast


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
