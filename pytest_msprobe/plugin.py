"""pytest glue: options, one item per dump entry, the reports.

Logic lives in the core modules (dump, inputs, frameworks, compare, report,
summary); this module only wires them to pytest's hooks.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import pytest

from . import devices, summary, workers
from .check import Settings
from .compare import BasicStandard
from .dump import code_beside, find_dump_files, peek_framework, peek_task
from .inputs import DEFAULT_MAX_ELEMENTS, MODES, RANDOM
from .items import RUN_KEY, DumpFile
from .reporter import CsvReporter
from .selection import Selection
from .untrusted import printable

# (option, ini key, help, default); every option is also an ini key, as in
# pytest-rerunfailures, so a team can pin its rule in pytest.ini.
OPTIONS = [
    ("--msprobe-mode", "msprobe_mode", f"input data: {'|'.join(MODES)} (auto: real where the tensor file exists)",
     "auto"),
    ("--msprobe-device", "msprobe_device", f"device under test: {'|'.join(devices.CHOICES)}", "auto"),
    ("--msprobe-devices", "msprobe_devices", "device ids, one per xdist worker: 0-7 or 0,1,2,3 (auto: 0..n-1; "
     "without xdist the first)", "auto"),
    ("--msprobe-seed", "msprobe_seed", "seed of the random inputs (mixed with each entry's name)", "1234"),
    ("--msprobe-cosine", "msprobe_cosine", "basic standard: an output passes when Cosine > this", "0.99"),
    ("--msprobe-max-abs-err", "msprobe_max_abs_err", "basic standard: ... and MaxAbsErr < this", "1e-4"),
    ("--msprobe-standard", "msprobe_standard", "standard that judges the outputs: basic|dtype", "basic"),
    ("--msprobe-out", "msprobe_out", "folder for the result and details CSVs", "."),
    ("--msprobe-resume", "msprobe_resume", "result CSV of a killed run: run only its missing APIs, append to it", ""),
    ("--msprobe-baseline", "msprobe_baseline", "result CSV of an earlier run: its errors are expected failures", ""),
    ("--msprobe-max-elements", "msprobe_max_elements", "random mode: the most elements an entry's inputs may have "
     "(beyond: SKIP)", str(DEFAULT_MAX_ELEMENTS)),
]
ERROR_DATA_FOLDER = "msprobe_error_data"  # under --msprobe-out


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("msprobe", "precision pre-check of msprobe dumps")
    group.addoption("--msprobe-dump", action="append", metavar="PATH", default=[],
                    help="a dump.json, or a folder searched for dump.json files; repeatable")
    parser.addini("msprobe_dump", "dump.json files or folders to check", type="paths", default=[])
    for flag, ini, text, default in OPTIONS:
        group.addoption(flag, dest=ini, default=None, help=f"{text} (default {default or 'none'}; ini {ini})")
        parser.addini(ini, text, default=default)
    group.addoption("--msprobe-save-error-data", dest="msprobe_save_error_data", nargs="?", const=True,
                    default=None, metavar="DIR", help="save inputs and outputs of every entry that is not pass, "
                    f"with a manifest (default DIR: {ERROR_DATA_FOLDER} under --msprobe-out; "
                    "ini msprobe_save_error_data)")
    parser.addini("msprobe_save_error_data", "folder for the error data, or true for the default", default="")
    parser.addini("msprobe_tolerances", "dtype standard: per-API budgets, lines `pattern: rtol=.., atol=..`",
                  type="linelist", default=[])


def setting(config: pytest.Config, ini: str) -> str:
    value = config.getoption(ini)
    return str(value if value is not None else config.getini(ini))


def pytest_configure(config: pytest.Config) -> None:
    paths = config.getoption("msprobe_dump") or [str(p) for p in config.getini("msprobe_dump")]
    if not paths:
        return
    threads = workers.setup_cpu(config)  # before anything imports torch
    run = MsprobeRun(config, paths)
    if threads:
        run.device_notes.append(threads)
    config.stash[RUN_KEY] = run
    config.pluginmanager.register(run, "msprobe-run")
    resume, baseline = setting(config, "msprobe_resume"), setting(config, "msprobe_baseline")
    if len(run.dump_files) > 1 and (resume or baseline):
        # Each dump of a run has its own result CSV: a resume or a baseline is one of them.
        raise pytest.UsageError(f"--msprobe-{'resume' if resume else 'baseline'} takes the result CSV of one dump, "
                                f"and {len(run.dump_files)} were given: run them one at a time "
                                "(pytest --msprobe-dump step0/rank0/dump.json --msprobe-resume out/rank0/accuracy_checking_result_....csv)")
    run.selection = Selection.from_config(config, config.invocation_params.dir, resume, baseline)
    config.pluginmanager.register(run.selection, "msprobe-selection")
    run.settings.error_data = error_data_folder(config, run.out_dir)
    workers.register(config, run)
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(CsvReporter(config, run), "msprobe-reporter")
    files = [str(p) for p in run.dump_files]
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    config.args = [*config.args, *files] if explicit else files


class MsprobeRun:
    """The settings of this run and the dumps this process collected."""

    def __init__(self, config: pytest.Config, paths: List[str]):
        base = config.invocation_params.dir
        refused: List[str] = []
        self.dump_files = [f.resolve() for p in paths for f in find_dump_files(base / p, refused)]
        if not self.dump_files:
            raise pytest.UsageError(f"--msprobe-dump: no dump.json under {', '.join(paths)}"
                                    + "".join(f"; {line}" for line in refused))
        code = [str(found) for p in paths for found in code_beside(base / p)]
        if code:  # pytest would import them to collect the dumps: a dump is data, never code
            raise pytest.UsageError(f"--msprobe-dump: the dump's folders hold Python files pytest would import to "
                                    f"collect it: {', '.join(code)}; move dump.json and dump_tensor_data elsewhere")
        self.mode = setting(config, "msprobe_mode")
        if self.mode not in MODES:
            raise pytest.UsageError(f"--msprobe-mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        self.device_notes: List[str] = refused  # said in the header with the device
        try:
            self.frameworks = {peek_framework(path) for path in self.dump_files}
            self.device_kind = devices.choose(setting(config, "msprobe_device"), self.device_notes, self.frameworks)
        except devices.DeviceError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.check_recorded()
        self.device_ids = self.choose_ids(config)
        self.settings = Settings(self.device_kind, self.mode, self.int_setting(config, "msprobe_seed"),
                                 make_standard(config))
        self.settings.max_elements = self.int_setting(config, "msprobe_max_elements")
        if self.settings.max_elements < 1:
            raise pytest.UsageError(f"msprobe_max_elements must be at least 1, not {self.settings.max_elements}")
        self.out_dir = base / setting(config, "msprobe_out")
        self.dumps = {}

    def check_recorded(self) -> None:
        if self.device_kind != devices.RECORDED:
            return
        if self.mode == RANDOM:
            raise pytest.UsageError("--msprobe-device recorded compares the outputs a tensor dump recorded: "
                                    "it needs the recorded inputs, not --msprobe-mode random")
        for path in self.dump_files:
            task, _ = peek_task(path)
            if task == "statistics":
                raise pytest.UsageError(f"--msprobe-device recorded needs a tensor dump, but {path} is a "
                                        "statistics dump (no tensors); use --msprobe-device cpu, cuda or npu")

    def choose_ids(self, config: pytest.Config) -> List[int]:
        try:
            ids = devices.ids_for(setting(config, "msprobe_devices"), workers.planned_workers(config))
            if not hasattr(config, "workerinput"):  # the controller checked them for its workers
                devices.check_ids_exist(self.device_kind, ids, self.frameworks)
        except devices.DeviceError as exc:
            raise pytest.UsageError(str(exc)) from None
        return ids

    @staticmethod
    def int_setting(config: pytest.Config, ini: str) -> int:
        try:
            return int(setting(config, ini))
        except ValueError:
            raise pytest.UsageError(f"{ini} must be an integer, not {setting(config, ini)!r}") from None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if workers.distributing(session.config):
            return  # the controller runs no entry: it leaves the devices to its workers
        try:
            self.settings.device = devices.bind(self.device_kind, workers.device_id(session.config, self.device_ids),
                                                self.frameworks)
        except devices.DeviceError as exc:
            raise pytest.UsageError(str(exc)) from None

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
        if file_path.resolve() in self.dump_files:
            return DumpFile.from_parent(parent, path=file_path)
        return None

    def pytest_report_header(self, config: pytest.Config) -> List[str]:
        s = self.settings
        lines = [f"msprobe: device {s.device}, mode {s.mode}, seed {s.seed}, standard {s.standard.describe()}"]
        lines += [f"msprobe: {note}" for note in self.device_notes]
        tolerances = getattr(s.standard, "tolerances", None)
        if tolerances is not None:
            lines += [f"msprobe: tolerance {line}" for line in tolerances.describe()]
        return lines

    def pytest_report_collectionfinish(self, config: pytest.Config) -> List[str]:
        lines = []
        for path, dump in self.dumps.items():
            counts = ", ".join(f"{n} {kind}" for kind, n in dump.counts().items() if n or kind != "unknown")
            lines.append(printable(f"msprobe: {path}: {dump.framework} {dump.task} dump, {counts} entries"))
        return lines

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        result = getattr(item, "result", None)
        if call.when == "call" and result is not None:
            # Plain data on the report: it travels to the xdist controller.
            report.msprobe = result.to_dict()
            if item.config.option.xmlpath:
                # junitxml writes the properties of the teardown report, which copies the
                # item's; without it they would only weigh on every report sent to xdist.
                item.user_properties.extend(summary.metric_properties(result))
        return report


def error_data_folder(config: pytest.Config, out_dir: Path) -> Optional[Path]:
    """The option's DIR (bare: the default folder); the ini key: a folder, true, or empty/false for off."""
    value = config.getoption("msprobe_save_error_data")
    if value is None:
        value = config.getini("msprobe_save_error_data").strip()
        if value.lower() in ("", "false", "no", "0"):
            return None
        if value.lower() in ("true", "yes", "1"):
            value = True
    return out_dir / ERROR_DATA_FOLDER if value is True else config.invocation_params.dir / value


def make_standard(config: pytest.Config):
    name = setting(config, "msprobe_standard")
    try:
        cosine, max_abs = float(setting(config, "msprobe_cosine")), float(setting(config, "msprobe_max_abs_err"))
    except ValueError as exc:
        raise pytest.UsageError(f"msprobe thresholds must be numbers: {exc}") from None
    if name == "basic":
        return BasicStandard(cosine, max_abs)
    if name == "dtype":
        from .dtype_standard import DtypeStandard, Tolerances

        try:
            return DtypeStandard(Tolerances.parse(config.getini("msprobe_tolerances")))
        except ValueError as exc:
            raise pytest.UsageError(f"msprobe_tolerances: {exc}") from None
    raise pytest.UsageError(f"--msprobe-standard must be basic or dtype, not {name!r}")
