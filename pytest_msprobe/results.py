"""What the check of one entry found, kept as data until the CSV and the terminal.

No framework, no pytest, no text assembly: an entry's verdict, its outputs, the
reasons and notes stay apart here, and messages.py turns them into text at the
two boundaries (the CSV files, the terminal). Results travel from xdist workers
to the controller as plain dicts (`to_dict`), which execnet can serialise.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .untrusted import encodable


class Status(str, enum.Enum):
    """The words of reports.md; a str, so a status reads and compares as its word."""

    PASS = "pass"
    WARNING = "warning"
    ERROR = "error"
    SKIP = "SKIP"

    def __str__(self) -> str:
        return self.value


PASS, WARNING, ERROR, SKIP = Status.PASS, Status.WARNING, Status.ERROR, Status.SKIP
# How the notes of a fallback end or start, where they are made (inputs.py, the frameworks) and
# where they are counted (fallbacks.py).
RANDOM_DATA = "random data used"  # `input_args[0]: tensor file x.pt missing, random data used`
# The note of every input of a tensor dump copied without its dump_tensor_data/ folder.
NO_TENSOR_FOLDER = f"dump_tensor_data: the tensor folder is missing, {RANDOM_DATA}"
BENCH_FALLBACK = "benchmark ran in"  # `benchmark ran in torch.float32: float64 raised ...`
# What a recorded-mode SKIP of a gradient msprobe took where no input's is (the one arriving at the output,
# through a view: 3-D linear, matmul) says to run instead (recorded_gradients.py); the summary counts them.
RUN_THE_CALL = "--msprobe-device recorded,cpu judges it by running the call"
# The attribute of a pytest report that carries an entry's result (to_dict) to the xdist controller.
REPORT_ATTRIBUTE = "msprobe"
_SEVERITY = {PASS: 0, WARNING: 1, ERROR: 2}


def worst_status(statuses: Iterable[Status]) -> Status:
    """An API's status from its outputs': error beats warning beats pass; all SKIP is SKIP."""
    judged = [Status(s) for s in statuses if s != SKIP]
    return max(judged, key=_SEVERITY.__getitem__) if judged else SKIP


@dataclass(frozen=True)
class MsprobeMetrics:
    """The 17 metric cells of a row of msprobe 26.2's PyTorch details CSV, in its column order and
    by its CompareColumn's names (judging/msprobe_metrics.py computes them; reports write them).

    None where msprobe writes a blank cell (" "): a metric its rule does not compute for this
    dtype, or one its acc_check stops before (MaxAbsErr < 0.001 leaves the 双百/双千/双万 ratios
    blank). An int where msprobe holds a Python int (a ratio over an empty set is its `0`);
    `single` names the fields msprobe holds as numpy float32 (written as str() writes them, not
    with its 14 decimals)."""

    cosine_sim: float | None = None  # 余弦相似度
    max_abs_err: float | None = None  # 最大绝对误差
    rel_err_hundredth: float | None = None  # 双百指标
    rel_err_thousandth: float | None = None  # 双千指标
    rel_err_ten_thousandth: float | None = None  # 双万指标
    error_rate: float | None = None  # 二进制一致错误率
    eb: float | None = None  # 误差均衡性
    rmse: float | None = None  # 均方根误差
    small_value_err_ratio: float | None = None  # 小值域错误占比
    max_rel_error: float | None = None  # 相对误差最大值
    mean_rel_error: float | None = None  # 相对误差平均值
    inf_nan_error_ratio: float | None = None  # inf/nan错误率
    rel_err_ratio: float | None = None  # 相对误差错误率
    abs_err_ratio: float | None = None  # 绝对误差错误率
    max_ulp_error: float | None = None  # ULP误差最大值
    mean_ulp_error: float | None = None  # ULP误差平均值
    ulp_error_proportion: float | None = None  # ULP误差大于阈值占比
    # Which of msprobe's standards filled the rule's cells: benchmark, ulp, absolute_threshold,
    # binary, or "" (none: float64, complex, an output it cannot compare).
    rule: str = ""
    single: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MsprobeMetrics:
        return cls(**{**data, "single": tuple(data.get("single", ()))})


METRIC_FIELDS = tuple(f for f in MsprobeMetrics.__dataclass_fields__ if f not in ("rule", "single"))


@dataclass
class OutputResult:
    """A row of accuracy_checking_details: one compared output of an entry."""

    index: int  # output i; for a backward, the gradient of the i-th floating input
    status: Status
    bench_dtype: str = ""
    tested_dtype: str = ""
    shape: list[int] | None = None
    cosine: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    # Why it is what it is: the rules it broke, what it stayed within, why it was skipped.
    reasons: list[str] = field(default_factory=list)
    # A failure within the rounding budget of this dtype ("bf16"): rounding alone, not a fault.
    floor: str = ""
    note: str = ""  # how it was paired (a gradient msprobe recorded inside the API's graph)
    ratio: float | None = None  # the dtype standard's: the worst element's error over its budget (repro.py's)
    # How many times its budget the output is off, from the standard (the dtype standard's ratio
    # of its worst element; basic: the larger of MaxAbsErr and 1 - Cosine over their thresholds'):
    # above 1 it broke the rule. inf for a fault no budget measures (a shape or an integer
    # mismatch); None where nothing was judged (a SKIP).
    severity: float | None = None
    nonfinite: bool = False  # NaN or inf where the other side has none
    bench_note: str = ""  # why the bench is not in float64, where it is not
    # Which of an entry's two checks it is of, in a run that judges the recorded outputs and a
    # re-run both (--msprobe-device recorded,cpu): "recorded" or the device; "" in any other run.
    side: str = ""
    # --msprobe-html only: a bounded sample of the output's elements for the report's figures
    # (judging/samples.py), or None; it rides to the xdist controller with the rest.
    samples: dict[str, Any] | None = None
    # msprobe's own metrics of this output (judging/msprobe_metrics.py), computed only where a run
    # asks for them: the msprobe-pytorch CSV layout, the benchmark standard. None elsewhere.
    msprobe: MsprobeMetrics | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        if isinstance(self.msprobe, dict):  # from to_dict, across xdist or from the journal
            self.msprobe = MsprobeMetrics.from_dict(self.msprobe)

    @property
    def label(self) -> str:
        """`output.0`, or `output.0 (recorded)` in a run that judges each entry twice."""
        return f"output.{self.index}" + (f" ({self.side})" if self.side else "")


@dataclass(frozen=True)
class CallSite:
    """Where the model called an entry: the innermost frame of the user's code in msprobe's stack.json."""

    path: str
    line: int
    function: str
    code: str = ""


@dataclass
class ProbeResult:
    """The fp32 probe of a failing fp16/bf16 entry: its tested side run again with the fp16/bf16
    inputs in fp32, the outputs rounded back to the recorded dtypes and judged by the run's standard."""

    api: str  # "Functional.linear": what to keep out of autocast
    device: str  # where it ran: the device under test, or "cpu" for a recorded tested side
    recorded: bool = False  # the tested side was recorded: the probe ran on the CPU instead
    status: Status | None = None  # the worst of its outputs; None when it could not run
    outputs: list[OutputResult] = field(default_factory=list)
    error: str = ""  # why it could not run

    def __post_init__(self) -> None:
        if self.status is not None:
            self.status = Status(self.status)

    @property
    def floor(self) -> str:
        """The dtype whose rounding budget holds every failing output ("bf16"), else ""."""
        failed = [o for o in self.outputs if o.status == ERROR]
        floors = {o.floor for o in failed}
        return floors.pop() if failed and len(floors) == 1 and "" not in floors else ""


@dataclass
class EntryResult:
    """The verdict on one entry: one direction of one API call."""

    api: str  # "Functional.relu.0", the API Name of the result CSV
    direction: str  # "forward" or "backward"
    status: Status
    # Why the entry as a whole has no verdict, or failed without one per output:
    # a SKIP's reason, the exception of the tested run, a crashed worker.
    reason: str = ""
    outputs: list[OutputResult] = field(default_factory=list)
    # What the check had to do or tell: fallbacks, autocast, where error data went.
    notes: list[str] = field(default_factory=list)
    dump: str = ""  # the dump's part of the node id
    position: int | None = None  # the entry's place in the dump, the order msprobe recorded the calls
    call_site: CallSite | None = None  # where the model called it (entries that are not pass)
    probe: ProbeResult | None = None  # --msprobe-probe fp32, for a failing fp16/bf16 entry
    # --msprobe-filter: the entry whose check stands for this one (the same call but for the Max and
    # Min of its tensors); this one is not compared, its status is SKIP.
    stood_for_by: str = ""
    # A backward in msprobe's PyTorch layout (reports/msprobe_pytorch.py): for each of msprobe's
    # output numbers (the call's positional tensor arguments), the index of the output it is, None
    # where msprobe writes a SKIP row of its own; None where not asked or not known.
    msprobe_outputs: list[int | None] | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        if not self.stood_for_by and self.status == SKIP and self.reason.startswith(_FILTERED_HEAD):
            # Read back from a CSV (resume, merge, the report), where only the Message is left.
            found = _FILTERED_REASON.fullmatch(self.reason)
            self.stood_for_by = found.group(1) if found else ""

    @property
    def filtered(self) -> bool:
        """Left unchecked by --msprobe-filter: another entry's check stands for it."""
        return bool(self.stood_for_by)

    @property
    def entry(self) -> str:
        return f"{self.api}.{self.direction}"

    def output_name(self, output: OutputResult) -> str:
        """`Functional.relu.0.forward.output.0`, the API Name of the details CSV."""
        return f"{self.entry}.output.{output.index}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (statuses as their words, text encodable), which execnet can send and the
        journal write: a reason quoting a dump's `\\ud800` would stop either with an error."""
        data = asdict(self)
        _words(data)
        if data["probe"] is not None:
            _words(data["probe"])
        return _encodable(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EntryResult:
        outputs = [OutputResult(**row) for row in data.get("outputs", [])]
        site = data.get("call_site")
        probe = data.get("probe")
        if probe is not None:
            probe = ProbeResult(**{**probe, "outputs": [OutputResult(**row) for row in probe.get("outputs", [])]})
        return cls(
            **{**data, "outputs": outputs, "call_site": None if site is None else CallSite(**site), "probe": probe}
        )


def _encodable(data: Any) -> Any:
    """Every str of plain data made encodable (untrusted.encodable), keys too."""
    if isinstance(data, str):
        return encodable(data)
    if isinstance(data, dict):
        return {_encodable(key): _encodable(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_encodable(value) for value in data]
    return data


def _words(data: dict[str, Any]) -> None:
    """The statuses of a result's dict (and of its outputs') as their words."""
    if data["status"] is not None:
        data["status"] = data["status"].value
    for row in data["outputs"]:
        row["status"] = row["status"].value


RECORDED_SIDE = "recorded"


_FILTERED_HEAD = "not checked (--msprobe-filter): the same call as "
_FILTERED_TAIL = " but for the Max and Min of its tensors, whose check stands for it"
_FILTERED_REASON = re.compile(re.escape(_FILTERED_HEAD) + r"(\S+)" + re.escape(_FILTERED_TAIL))


def filtered(
    name: str, direction: str, representative: str, dump: str = "", position: int | None = None
) -> EntryResult:
    """An entry --msprobe-filter leaves unchecked: a SKIP row that names the entry standing for it."""
    reason = f"{_FILTERED_HEAD}{representative}{_FILTERED_TAIL}"
    return EntryResult(name, direction, SKIP, reason, dump=dump, position=position, stood_for_by=representative)


def judged_twice(recorded: EntryResult, rerun: EntryResult, device: str) -> EntryResult:
    """One entry judged on the outputs its dump recorded and on a run of the call on `device`:
    one result holding both sides' outputs, each with its side, failing where either fails (a
    side that SKIPs leaves the other's verdict). Reasons and notes say their side."""
    sides = ((RECORDED_SIDE, recorded), (device, rerun))
    outputs = [replace(output, side=side) for side, result in sides for output in result.outputs]
    # A side that SKIPs says it was not judged: "recorded: <why>" beside a pass read as a reason of the pass.
    reason = "; ".join(
        f"{side}: {'not judged: ' if result.status == SKIP else ''}{result.reason}"
        for side, result in sides
        if result.reason
    )
    notes = list(dict.fromkeys(note for _, result in sides for note in result.notes))
    return replace(
        rerun,
        status=worst_status([recorded.status, rerun.status]),
        reason=reason,
        outputs=outputs,
        notes=notes,
        call_site=rerun.call_site or recorded.call_site,
        probe=rerun.probe or recorded.probe,
    )
