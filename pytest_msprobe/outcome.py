"""What a check of one entry produced, as plain data that travels between processes.

No framework and no pytest: the framework modules fill `OutputPair`s, check.py
turns them into `EntryResult`s, the plugin and report.py read those.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np


class Unsupported(Exception):
    """The check cannot be made (an API without a callable, a collective, ...): SKIP."""


class BenchmarkFailed(Exception):
    """The CPU benchmark itself raised: nothing to judge the tested side against, SKIP."""


@dataclass
class OutputPair:
    """One output of the API: the tested value beside the bench value."""

    index: int
    tested: Optional[np.ndarray] = None
    bench: Optional[np.ndarray] = None
    tested_dtype: str = ""
    bench_dtype: str = ""
    shape: Optional[List[int]] = None
    skip: str = ""  # why this output cannot be compared


@dataclass
class Kept:
    """The values of one check in the framework's own types, kept only when error data is saved."""

    inputs: Dict[str, Any]  # {"args": [...], "kwargs": {...}} as rebuilt: recorded dtypes, on CPU
    tested: Optional[list]  # outputs (backward: gradients of the floating inputs); None if the run raised
    bench: list
    grad_outputs: Optional[list] = None  # backward: the gradients fed to the outputs


@dataclass
class Run:
    """Both sides of one entry, ready for the standard."""

    pairs: List[OutputPair]
    notes: List[str] = field(default_factory=list)
    input_scale: float = 0.0
    tested_error: str = ""  # the exception of the device under test, if it raised
    kept: Optional[Kept] = None


@dataclass
class OutputRow:
    """A row of accuracy_checking_details: one compared output."""

    name: str
    bench_dtype: str
    tested_dtype: str
    shape: Optional[List[int]]
    cosine: Optional[float]
    max_abs_err: Optional[float]
    max_rel_err: Optional[float]
    status: str
    message: str = ""
    at_floor: bool = False  # failed the basic rule, but within its dtype's rounding budget


@dataclass
class EntryResult:
    """The verdict on one entry (one direction of one API call)."""

    api: str  # "Functional.relu.0"
    direction: str  # "forward" or "backward"
    status: str  # pass, error, warning or SKIP
    message: str = ""
    outputs: List[OutputRow] = field(default_factory=list)
    dump: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "EntryResult":
        outputs = [OutputRow(**row) for row in data.get("outputs", [])]
        return cls(**{**data, "outputs": outputs})
