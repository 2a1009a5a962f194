"""pytest glue of a run that checks dumps: built whole from the options, registered as a plugin.

Everything this process needs to check entries (the device, the standard, the
selection of entries) is decided here, once, before collection; the hooks
below only hand it to pytest.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from . import devices, workers
from .check import Checker
from .dump import Dump, code_beside, find_dump_files, peek_framework, peek_task
from .frameworks import RunOptions, Tested
from .items import RUN_KEY, DumpFile
from .options import RANDOM, Options
from .reporter import CsvReporter
from .results import REPORT_ATTRIBUTE
from .selection import Selection
from .standards import make_standard
from .summary import metric_properties
from .untrusted import printable


def start(config: pytest.Config, options: Options) -> None:
    """Set up this process to check the dumps `options` names (pytest_configure)."""
    threads = workers.setup_cpu(config)  # before anything imports torch
    run = MsprobeRun(config, options, [threads] if threads else [])
    config.stash[RUN_KEY] = run
    config.pluginmanager.register(run, "msprobe-run")
    config.pluginmanager.register(run.selection, "msprobe-selection")
    workers.register(config, run)
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(CsvReporter(config, run), "msprobe-reporter")
    files = [str(p) for p in run.dump_files]
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    config.args = [*config.args, *files] if explicit else files


@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
    """A device or a setting that cannot be had is the user's to fix: a usage error, not a traceback."""
    try:
        yield
    except (devices.DeviceError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None


class MsprobeRun:
    """The settings of this run, the dumps it checks, and how this process checks their entries."""

    def __init__(self, config: pytest.Config, options: Options, notes: list[str]):
        with usage_errors():
            self._build(config, options, notes)

    def _build(self, config: pytest.Config, options: Options, notes: list[str]) -> None:
        base = config.invocation_params.dir
        self.options = options
        refused: list[str] = []  # said in the header: a FIFO named dump.json, ...
        self.dump_files = [f.resolve() for p in options.dumps for f in find_dump_files(base / p, refused)]
        if not self.dump_files:
            raise pytest.UsageError(
                f"--msprobe-dump: no dump.json under {', '.join(options.dumps)}" + "".join(f"; {r}" for r in refused)
            )
        code = [str(found) for p in options.dumps for found in code_beside(base / p)]
        if code:  # pytest would import them to collect the dumps: a dump is data, never code
            raise pytest.UsageError(
                "--msprobe-dump: the dump's folders hold Python files pytest would import to collect it: "
                f"{', '.join(code)}; move dump.json and dump_tensor_data elsewhere"
            )
        if options.max_elements < 1:
            raise pytest.UsageError(f"--msprobe-max-elements must be at least 1, not {options.max_elements}")
        self.device_notes = [*refused, *notes]
        self.frameworks = {peek_framework(path) for path in self.dump_files}
        self.device_kind = devices.choose(options.device, self.device_notes, self.frameworks)
        self.check_recorded()
        self.device_ids = devices.ids_for(options.devices, workers.planned_workers(config))
        if not hasattr(config, "workerinput"):  # the controller checked them for its workers
            devices.check_ids_exist(self.device_kind, self.device_ids, self.frameworks)
        self.out_dir = options.out_dir(base)
        if len(self.dump_files) > 1 and (options.resume or options.baseline):
            # Each dump of a run has its own result CSV: a resume or a baseline is one of them.
            raise pytest.UsageError(
                f"--msprobe-{'resume' if options.resume else 'baseline'} takes the result CSV of one dump, and "
                f"{len(self.dump_files)} were given: run them one at a time (pytest --msprobe-dump "
                "step0/rank0/dump.json --msprobe-resume out/rank0/accuracy_checking_result_....csv)"
            )
        self.selection = Selection.from_config(config, base, options.resume, options.baseline)
        recorded = self.device_kind == devices.RECORDED
        run_options = RunOptions(
            self.device_kind, Tested.RECORDED if recorded else Tested.DEVICE, options.mode, options.seed
        )
        self.checker = Checker(
            run_options, make_standard(options), options.error_data_dir(base), max_elements=options.max_elements
        )
        self.collected: dict[str, Dump] = {}  # by node id, as DumpFile collects them

    def check_recorded(self) -> None:
        if self.device_kind != devices.RECORDED:
            return
        if self.options.mode == RANDOM:
            raise pytest.UsageError(
                "--msprobe-device recorded compares the outputs a tensor dump recorded: "
                "it needs the recorded inputs, not --msprobe-mode random"
            )
        for path in self.dump_files:
            task, _ = peek_task(path)
            if task == "statistics":
                raise pytest.UsageError(
                    f"--msprobe-device recorded needs a tensor dump, but {path} is a "
                    "statistics dump (no tensors); use --msprobe-device cpu, cuda or npu"
                )

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if workers.distributing(session.config) or self.checker.run.tested is Tested.RECORDED:
            return  # the controller runs no entry: it leaves the devices to its workers
        with usage_errors():
            device = devices.bind(self.device_kind, workers.device_id(session.config, self.device_ids), self.frameworks)
        self.checker = replace(self.checker, run=replace(self.checker.run, device=device))

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.resolve() in self.dump_files:
            # Named from the rootdir, also outside it ("../dumps/rank0/dump.json"): pytest would name
            # such a file from the argument that gave it, "" for each dump given itself, and the
            # rows of several dumps would then share one pair of CSV files.
            node_id = Path(os.path.relpath(file_path, parent.config.rootpath)).as_posix()
            dump_file: DumpFile = DumpFile.from_parent(parent, path=file_path, nodeid=node_id)
            return dump_file
        return None

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        run, standard = self.checker.run, self.checker.standard
        lines = [f"msprobe: device {run.tested_on}, mode {run.mode}, seed {run.seed}, standard {standard.describe()}"]
        lines += [f"msprobe: {note}" for note in self.device_notes]
        lines += [f"msprobe: {line}" for line in standard.header_lines()]
        return lines

    def pytest_report_collectionfinish(self, config: pytest.Config) -> list[str]:
        lines = []
        for path, dump in self.collected.items():
            counts = ", ".join(f"{n} {kind}" for kind, n in dump.counts().items() if n or kind != "unknown")
            lines.append(printable(f"msprobe: {path}: {dump.framework} {dump.task} dump, {counts} entries"))
        return lines

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        report = yield
        result = getattr(item, "result", None)
        if call.when == "call" and result is not None:
            # Plain data on the report: it travels to the xdist controller.
            setattr(report, REPORT_ATTRIBUTE, result.to_dict())
            if item.config.option.xmlpath:
                # junitxml writes the properties of the teardown report, which copies the
                # item's; without it they would only weigh on every report sent to xdist.
                item.user_properties.extend(metric_properties(result))
        return report
