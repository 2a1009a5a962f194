"""The settings of a run: every option, its ini key and its default, parsed once into `Options`.

No pytest: the plugin registers `OPTIONS` with pytest's parser and hands the
raw values (command line first, then the ini file) to `parse`; a value that
cannot be read is an OptionError naming the option, which the plugin turns
into a usage error. Each default lives here, once, as a field of `Options`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, Callable

# Input data: the dumped tensor files, random data from the recorded statistics, or real where it can.
AUTO, REAL, RANDOM = "auto", "real", "random"
# The device under test (frameworks/devices.py binds it): auto picks npu, else cuda, else cpu;
# recorded judges the outputs a tensor dump recorded.
NPU, CUDA, CPU, RECORDED = "npu", "cuda", "cpu", "recorded"
DEVICES = (AUTO, NPU, CUDA, CPU, RECORDED)
STANDARDS = ("basic", "dtype", "benchmark")  # judging/standards/ implements each (a test holds the two lists together)
MODES = (AUTO, REAL, RANDOM)
ERROR_DATA_FOLDER = "msprobe_error_data"  # under --msprobe-out
PROBES = ("off", "fp32")  # --msprobe-probe
# --msprobe-csv-layout: reports/layouts.py lays out each (a test holds the two lists together).
DEFAULT_LAYOUT, MSPROBE_PYTORCH_LAYOUT = "default", "msprobe-pytorch"
CSV_LAYOUTS = (DEFAULT_LAYOUT, MSPROBE_PYTORCH_LAYOUT)
# Random data is built from the recorded shapes: at most this many elements an entry (8 GiB as
# float64, more than any one call of a real model's step); beyond it, the entry is a SKIP.
DEFAULT_MAX_ELEMENTS = 2**30
# Seconds one entry's check may take: far past any call of a real step (a ResNet step's slowest
# entry takes seconds), so only a call asked to run for hours meets it.
DEFAULT_TIMEOUT = 600.0
# The longest --msprobe-timeout: 31 years; the process's alarm takes no more than 292 (0: no limit at all).
MAX_TIMEOUT = 1e9
# The share of entries a run may SKIP and still pass: any, so long as one output was compared.
DEFAULT_MAX_SKIP_RATIO = 1.0

_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


class OptionError(ValueError):
    """A setting that cannot be read; the message names the option."""


@dataclass(frozen=True)
class Options:
    """Every setting of a run, as read from the command line and the ini file."""

    dumps: tuple[str, ...] = ()
    mode: str = AUTO
    device: str = "auto"
    devices: str = "auto"
    seed: int = 1234
    standard: str = "basic"
    cosine: float = 0.99
    max_abs_err: float = 1e-4
    tolerances: tuple[str, ...] = ()
    out: str = "."
    resume: str = ""
    baseline: str = ""
    reference: str = ""  # --msprobe-standard benchmark: the reference run's details CSV or folder
    save_error_data: str | None = None  # None: off; "": the default folder under out; else a folder
    repro: str = ""  # the folder of the reproducers; "": none written
    probe: str = "off"
    max_elements: int = DEFAULT_MAX_ELEMENTS
    timeout: float = DEFAULT_TIMEOUT  # seconds; 0: no limit
    max_skip_ratio: float = DEFAULT_MAX_SKIP_RATIO  # more SKIPped entries than this share: exit 5
    strict: bool = False  # a warning fails its item, as an error does
    html: str = ""  # the HTML report written at the end of the run; "": none (and no plotting library loaded)
    config: str = ""  # msprobe's config.json or config.yaml: its white and black lists
    white_list: tuple[str, ...] | None = None  # None: the config's (else every API)
    black_list: tuple[str, ...] | None = None
    filter: bool = False  # msprobe's -f: one check per group of calls equal but for Max/Min
    csv_layout: str = DEFAULT_LAYOUT  # the CSV pair's columns (reports/layouts.py)
    # msprobe's own registrations of a team's operators, read as they are (frameworks/msprobe_yaml.py),
    # and the Python files their functions are imported from (no other file is).
    fusion_config: str = ""
    postprocess_config: str = ""
    functions: tuple[str, ...] = ()

    @property
    def rerun_on(self) -> str | None:
        """The device each call runs on again, or None where only the recorded outputs are judged."""
        return next((side for side in self.device.split(",") if side != RECORDED), None)

    @property
    def judges_recorded(self) -> bool:
        """Whether the outputs a tensor dump recorded are judged (alone, or beside a re-run)."""
        return RECORDED in self.device.split(",")

    def out_dir(self, base: Path) -> Path:
        return base / self.out

    def repro_dir(self, base: Path) -> Path | None:
        return base / self.repro if self.repro else None

    def html_path(self, base: Path) -> Path | None:
        return base / self.html if self.html else None

    def error_data_dir(self, base: Path) -> Path | None:
        if self.save_error_data is None:
            return None
        return self.out_dir(base) / ERROR_DATA_FOLDER if self.save_error_data == "" else base / self.save_error_data


def default(name: str) -> Any:
    field = next(f for f in fields(Options) if f.name == name)
    return field.default if field.default is not MISSING else None


@dataclass(frozen=True)
class Option:
    """One setting: `--msprobe-<name>` on the command line, `msprobe_<name>` in the ini file."""

    name: str  # the field of Options
    help: str
    choices: tuple[str, ...] = ()
    read: Callable[[str], Any] = str
    metavar: str | None = None
    bare: bool = False  # a flag: given on the command line without a value (true), in the ini file true/false
    expects: str = ""  # what a value that cannot be read must be, where more than "a number"

    @property
    def flag(self) -> str:
        return "--msprobe-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "msprobe_" + self.name

    def describe(self) -> str:
        value = default(self.name)
        choices = f": {', '.join(self.choices)}" if self.choices else ""  # pytest --help lists them
        return f"{self.help}{choices} (default {value if value not in (None, '') else 'none'}; ini {self.ini})"

    def parse(self, text: str) -> Any:
        if self.choices and text not in self.choices:
            raise OptionError(f"{self.flag} must be {_one_of(self.choices)}, not {text!r}")
        try:
            return self.read(text)
        except ValueError:
            kind = self.expects or ("an integer" if self.read is int else "true or false" if self.bare else "a number")
            where = f"{self.flag} (ini {self.ini})" if self.bare else self.flag
            raise OptionError(f"{where} must be {kind}, not {text!r}") from None


def read_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError(text)


def read_seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value <= MAX_TIMEOUT:  # NaN too
        raise ValueError(text)
    return value


def read_device(text: str) -> str:
    """One of DEVICES, or the recorded outputs and a device both (`recorded,cpu`): each entry is
    judged twice, on what the dump recorded and on a run of the call on that device."""
    sides = [side.strip() for side in text.split(",")]
    if len(sides) == 1 and sides[0] in DEVICES:
        return sides[0]
    if len(sides) == 2 and RECORDED in sides:
        device = sides[1 - sides.index(RECORDED)]
        if device in DEVICES and device != RECORDED:
            return f"{RECORDED},{device}"
    raise ValueError(text)


def read_ratio(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:  # NaN too
        raise ValueError(text)
    return value


def read_cosine(text: str) -> float:
    """A Cosine bound an output can pass: Cosine is at most 1, and it must be above the bound."""
    value = float(text)
    if not -1 <= value < 1:  # NaN too
        raise ValueError(text)
    return value


def read_positive(text: str) -> float:
    """A MaxAbsErr bound an output can pass: the error must be below it, and it is never below 0."""
    value = float(text)
    if not 0 < value < math.inf:  # NaN too
        raise ValueError(text)
    return value


def read_names(text: str) -> tuple[str, ...]:
    """API names separated by commas, spaces or lines (an ini key's lines)."""
    return tuple(dict.fromkeys(name for name in re.split(r"[\s,]+", text) if name))


def _one_of(choices: tuple[str, ...]) -> str:
    return " or ".join(choices) if len(choices) == 2 else f"one of {', '.join(choices)}"


# The options that take one value; --msprobe-dump and --msprobe-functions (repeatable),
# --msprobe-save-error-data (a bare flag or a folder) and the ini key msprobe_tolerances (lines)
# are read by `parse` too.
OPTIONS = (
    Option(
        "mode",
        "input data: real (the tensor files), random (from the statistics), auto (real where the tensor file exists)",
        MODES,
    ),
    Option(
        "device",
        f"device under test: {', '.join(DEVICES)}; or {RECORDED},<device> to judge the recorded outputs and a "
        "run on the device both",
        read=read_device,
        expects=f"one of {', '.join(DEVICES)}, or {RECORDED} and one of the others (recorded,cpu)",
    ),
    Option("devices", "device ids, one per xdist worker: 0-7 or 0,1,2,3 (auto: 0..n-1; without xdist the first)"),
    Option("seed", "seed of the random inputs (mixed with each entry's name)", read=int),
    Option(
        "cosine",
        "basic standard: an output passes when Cosine > this",
        read=read_cosine,
        expects="a number from -1 up to (not including) 1",
    ),
    Option(
        "max_abs_err",
        "basic standard: ... and MaxAbsErr < this",
        read=read_positive,
        expects="a number above 0",
    ),
    Option("standard", "standard that judges the outputs", tuple(STANDARDS)),
    Option("out", "folder for the result and details CSVs"),
    Option(
        "csv_layout",
        "the CSVs' columns: default (this plugin's 9) or msprobe-pytorch (msprobe 26.2's PyTorch acc_check: its "
        "23 columns and metrics, for its api_precision_compare); MindSpore dumps keep the 9 msprobe's MindSpore "
        "side writes",
        CSV_LAYOUTS,
    ),
    Option("resume", "result CSV of a killed run: run only its missing APIs, append to it"),
    Option("baseline", "result CSV of an earlier run: its errors are expected failures"),
    Option(
        "reference",
        "--msprobe-standard benchmark: the reference run (a GPU's) each output's msprobe metrics are compared "
        "with, as msprobe's api_precision_compare does: its details CSV or run folder in msprobe's PyTorch layout "
        "(a run of several dumps: the reference run's folder of the same dumps, rank0/, ... matched by name)",
        metavar="PATH",
    ),
    Option(
        "repro",
        "folder for a standalone reproducer of every entry that is not pass: "
        "<dump>/<entry>/ with repro.py, inputs.pt and verdict.json",
        metavar="DIR",
    ),
    Option(
        "probe",
        "fp32: run each failing fp16/bf16 entry again with its fp16/bf16 inputs in fp32, "
        "to tell autocast's rounding from a faulty kernel",
        PROBES,
    ),
    Option(
        "max_elements",
        "the most elements an entry may build: its random inputs together, each tensor file it loads, "
        "its outputs together (beyond: SKIP, before anything is allocated)",
        read=int,
    ),
    Option(
        "timeout",
        "seconds one entry's check may take: beyond, it stops there as an error row and the run goes on (0: no limit)",
        read=read_seconds,
        expects=f"a number of seconds from 0 (no limit) up to {MAX_TIMEOUT:,.0f}",
    ),
    Option(
        "max_skip_ratio",
        "the largest share of SKIPped entries a run may have and pass (beyond it, or where no "
        "output was compared at all: exit 5)",
        read=read_ratio,
        expects="a share from 0 to 1",
    ),
    Option("strict", "a warning fails its item and the run, as an error does", read=read_bool, bare=True),
    Option(
        "fusion_config",
        "msprobe's fusion_operator_config.yaml: each operator's forward (and backward) bench function, "
        "imported from the files --msprobe-functions names (docs/custom-ops.md)",
        metavar="PATH",
    ),
    Option(
        "postprocess_config",
        "msprobe's api_output_postprocess.yaml: its acc_check_handlers post-process each side's outputs "
        "before they are compared, imported from the files --msprobe-functions names",
        metavar="PATH",
    ),
    Option(
        "html",
        "one self-contained HTML file of the run, written at its end: the step as a line, a roll-up by API, "
        "every entry, and the failing outputs' figures (needs plotly: pip install 'pytest-msprobe[html]')",
        metavar="PATH",
    ),
    Option(
        "config",
        "msprobe's own config.json (its acc_check section) or config.yaml: its white_list and black_list choose "
        "the entries checked, as msprobe's acc_check -config does (the others are deselected)",
        metavar="PATH",
    ),
    Option(
        "white_list",
        "API names msprobe's way (conv2d, __add__: no type), commas between: only their entries are checked "
        "(over the config's white_list)",
        read=read_names,
        metavar="NAMES",
    ),
    Option(
        "black_list",
        "API names msprobe's way, commas between: their entries are not checked (over the config's black_list; "
        "msprobe's fixed black list, to, empty, ..., always applies with a list)",
        read=read_names,
        metavar="NAMES",
    ),
    Option(
        "filter",
        "msprobe's acc_check -f: of the calls of an API equal but for the Max and Min of their tensors, the "
        "first is checked and stands for the others (SKIP rows that name it)",
        read=read_bool,
        bare=True,
    ),
)


def parse(raw: Mapping[str, Any]) -> Options:
    """Options from raw values by field name: text for OPTIONS (None or "" where not set),
    lists for dumps, tolerances and functions, and for save_error_data True (the bare flag), a folder,
    or the ini key's text."""
    values: dict[str, Any] = {}
    for option in OPTIONS:
        text = raw.get(option.name)
        if text not in (None, ""):
            values[option.name] = option.parse(str(text))
    values["dumps"] = tuple(str(path) for path in raw.get("dumps") or ())
    values["tolerances"] = tuple(raw.get("tolerances") or ())
    values["functions"] = tuple(str(path) for path in raw.get("functions") or ())
    values["save_error_data"] = _error_data(raw.get("save_error_data"))
    return Options(**values)


def _error_data(value: Any) -> str | None:
    if value is True:
        return ""
    text = str(value or "").strip()
    if text.lower() in ("", *_FALSE):
        return None
    return "" if text.lower() in _TRUE else text
