"""pytest glue of a run that checks dumps: built whole from the options, registered as a plugin.

Everything this process needs to check entries (the device, the standard, the
selection of entries) is decided here, once, before collection; the hooks
below only hand it to pytest.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ..checking.check import Checker
from ..dumps import trees as dump_trees
from ..dumps.dump import Dump, DumpError, find_dump_files, parse_entry_name, peek_framework, peek_task, read_dump
from ..dumps.folder import companion_given, passed_over_lines
from ..dumps.notes import header_notes, missing_tensors_line, refusal, without_tensors
from ..frameworks import RunOptions, Tested, devices, msprobe_yaml
from ..frameworks.references import Registry, RegistryError, agree
from ..judging.precision_compare import Reference
from ..judging.standards import make_standard
from ..options import RANDOM, Options
from ..reports import layouts, manifest
from ..reports.compare import CompareError, read_reference, read_references
from ..reports.csv_files import ReportError, dump_folders, result_layout
from ..reports.summary import metric_properties
from ..results import REPORT_ATTRIBUTE
from ..untrusted import printable
from . import remote, workers
from .call_filter import CallFilter
from .gate import CoverageGate
from .items import RUN_KEY, DumpHooks, EntryItem
from .last_failed import LastFailed
from .reporter import CsvReporter
from .selection import Selection
from .warmup import thaw, warm_up


def start(config: pytest.Config, options: Options) -> None:
    """Set up this process to check the dumps `options` names (pytest_configure)."""
    threads = workers.setup_cpu(config)  # before anything imports torch
    run = MsprobeRun(config, options, [threads] if threads else [])
    config.stash[RUN_KEY] = run
    config.pluginmanager.register(run, "msprobe-run")
    config.pluginmanager.register(run.hooks, "msprobe-dump-hooks")
    config.pluginmanager.register(run.selection, "msprobe-selection")
    if options.filter:
        config.pluginmanager.register(CallFilter(), "msprobe-filter")
    workers.register(config, run)
    # After pytest's own cleanups (they run last first): its unraisable-exception check collects
    # five times at the end, each pass over torch's objects unless they are still frozen (warmup.py).
    config.add_cleanup(thaw)
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(CsvReporter(config, run), "msprobe-reporter")
        config.pluginmanager.register(LastFailed(config, options), "msprobe-last-failed")
        config.pluginmanager.register(CoverageGate(options.max_skip_ratio), "msprobe-coverage-gate")
    # The dumps are not pytest's paths to collect: pytest would walk their folders and import the
    # Python files there (dump_trees.py). The session collects them (MsprobeRun.pytest_make_collect_report).
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args = []  # the dumps alone, not the folder pytest was run from


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
        self.config = config
        self.options = options
        workerinput = getattr(config, "workerinput", None)
        shared = remote.shipped(workerinput)  # the controller's paths, read as they are on every host
        self.host = (workerinput or {}).get(remote.HOST, "")
        refused: list[str] = []  # said in the header: a FIFO named dump.json, other JSON files, ...
        if shared is None:
            self.dump_files = []
            for given in options.dumps:
                companion = companion_given(base / given, given)  # stack.json: the dump.json beside it
                if companion:
                    raise pytest.UsageError(companion)
                others: list[Path] = []
                self.dump_files += [f.resolve() for f in find_dump_files(base / given, refused, others)]
                refused += passed_over_lines(base / given, others, given)
            shared = remote.describe(self.dump_files, config.rootpath, with_items=False)
        else:
            self.dump_files = [Path(dump.path) for dump in shared]
        self.shared = {Path(dump.path): dump for dump in shared}
        self.remote = any(dump.items is not None for dump in shared)  # a worker on another host
        if not self.dump_files:
            raise pytest.UsageError(
                f"--msprobe-dump: no dump.json under {', '.join(options.dumps)}" + "".join(f"; {r}" for r in refused)
            )
        # Never walked by pytest (pytest_ignore_collect), so nothing there is imported; said in the header.
        self.dump_folders = dump_trees.all_dump_folders(base / p for p in options.dumps)
        self.hooks = DumpHooks(config, self.dump_folders)  # the dump items' node.ihook
        refused += [
            f"{printable(str(p))}: beside a dump, not imported" for p in dump_trees.python_files(self.dump_folders)
        ]
        if options.max_elements < 1:
            raise pytest.UsageError(f"--msprobe-max-elements must be at least 1, not {options.max_elements}")
        self.references, self.reference_notes = self.registrations(config, options, base, workerinput)
        self.device_notes = [*refused, *notes]
        self.passed_over = refused  # files given and not checked: said again at the end under -q
        self.framework_of = {path: peek_framework(path) for path in self.dump_files}
        self.frameworks = set(self.framework_of.values())
        device = options.rerun_on or devices.RECORDED  # the tested side: a device, else what was recorded
        if workers.remote_hosts(config):
            self.device_kind = device  # the controller's devices are not its workers': each host chooses
        else:
            self.device_kind = devices.choose(device, self.device_notes, self.frameworks)
        self.check_recorded()
        reruns_on = None if options.judges_recorded else self.device_kind
        self.device_notes += header_notes(self.dump_files, reruns_on, options.mode)
        # Said again under the counts: the header scrolls away, and -q hides it.
        self.summary_notes = [
            missing_tensors_line(path) for path in self.dump_files if options.mode != RANDOM and without_tensors(path)
        ]
        self.device_ids = devices.ids_for(options.devices, workers.workers_per_host(config))
        if not hasattr(config, "workerinput") and not workers.remote_hosts(config):
            # The controller checked them for its workers on this host.
            devices.check_ids_exist(self.device_kind, self.device_ids, self.frameworks)
        self.out_dir = options.out_dir(base)
        if len(self.dump_files) > 1 and (options.resume or options.baseline):
            # Each dump of a run has its own result CSV: a resume or a baseline is one of them.
            raise pytest.UsageError(
                f"--msprobe-{'resume' if options.resume else 'baseline'} takes the result CSV of one dump, and "
                f"{len(self.dump_files)} were given: run them one at a time (pytest --msprobe-dump "
                "step0/rank0/dump.json --msprobe-resume out/rank0/accuracy_checking_result_....csv)"
            )
        self.selection = Selection.from_config(
            config, base, options.resume, options.baseline, self.dump_files, options.strict, options
        )
        self.csv_layout = csv_layout(options, base)
        recorded = self.device_kind == devices.RECORDED
        run_options = RunOptions(
            self.device_kind,
            Tested.RECORDED if recorded else Tested.DEVICE,
            options.mode,
            options.seed,
            probe=options.probe == "fp32",
            references=self.references,
        )
        self.checker = Checker(
            run_options,
            make_standard(options, reference_run(options, base, self.dump_files)),
            options.error_data_dir(base),
            options.repro_dir(base),
            max_elements=options.max_elements,
            timeout=options.timeout,
            samples=bool(options.html),
            msprobe=wants_msprobe_metrics(self.csv_layout, self.frameworks),
        )
        if options.judges_recorded and not recorded:  # recorded,<device>: each entry judged twice
            self.checker = replace(
                self.checker,
                error_data=_side_folder(self.checker.error_data, self.device_kind),
                repro=_side_folder(self.checker.repro, self.device_kind),
                recorded_too=replace(
                    self.checker,
                    run=replace(run_options, device=devices.RECORDED, tested=Tested.RECORDED, probe=False),
                    error_data=_side_folder(self.checker.error_data, devices.RECORDED),
                    repro=_side_folder(self.checker.repro, devices.RECORDED),
                ),
            )
        self.collected: dict[str, Dump] = {}  # by node id, as DumpFile collects them
        self.dumps_told = False  # the xdist controller's header lines on the dumps

        self.lost_hosts: dict[str, str] = {}  # host -> why no worker could start there (lost_hosts.py)

    def registrations(
        self, config: pytest.Config, options: Options, base: Path, workerinput: dict | None
    ) -> tuple[Registry, list[str]]:
        """The reference registry: the hooks' registrations (the built-ins first), then msprobe's YAML
        files; a worker's checked against its controller's (references.agree)."""
        registry = Registry()
        try:
            config.hook.pytest_msprobe_references(registry=registry, config=config)
        except RegistryError:
            raise  # a usage error (usage_errors) naming the registration
        except Exception as exc:  # noqa: BLE001 - the user's hook: whatever it raises is theirs to fix
            where = traceback.extract_tb(exc.__traceback__)[-1]
            raise pytest.UsageError(
                f"a pytest_msprobe_references hook raised {type(exc).__name__}: {exc} ({where.filename}:{where.lineno})"
            ) from None
        notes = msprobe_yaml.read(
            options.fusion_config, options.postprocess_config, options.functions, base, self.dump_folders, registry
        )
        theirs = (workerinput or {}).get(workers.REFERENCES)
        if theirs is not None:
            here = f"worker {workerinput.get('workerid', '?')}" + (f" of host {self.host}" if self.host else "")  # type: ignore[union-attr]
            agree(registry, theirs, here)
        return registry, notes

    def describe(self, path: Path) -> dict[str, Any]:
        """The manifest of the CSV pair of a dump: the dump, the settings, the shard."""
        collected = next((d for d in self.collected.values() if d.path.resolve() == path), None)
        try:
            names = [name.full for name in collected.api_names()] if collected else remote.item_names(path)
            api_calls: int | None = len({entry.prefix for entry in map(parse_entry_name, names) if entry})
        except DumpError:
            api_calls = None
        splits = getattr(self.config.option, "splits", None)
        shard = {"splits": splits, "group": self.config.option.group} if splits else None
        return manifest.describe(path, self.options, self.device_kind, api_calls, shard)

    def check_recorded(self) -> None:
        """What the dumps cannot give the run it was asked for: a usage error, before anything runs."""
        if not hasattr(self.config, "workerinput"):  # the controller refused it for its workers
            why = refusal(self.dump_files, self.options.mode, self.options.device, self.options.judges_recorded)
            if why is not None:
                raise pytest.UsageError(why)
        if not self.options.judges_recorded:
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
        if workers.distributing(session.config):
            return  # the controller runs no entry: it leaves the devices to its workers
        recorded = self.checker.run.tested is Tested.RECORDED
        if not recorded:
            with usage_errors():
                device_id = workers.device_id(session.config, self.device_ids)
                device = devices.bind(self.device_kind, device_id, self.frameworks)
            self.checker = replace(self.checker, run=replace(self.checker.run, device=device))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """After -k, the resume and the others deselected: what the entries left need, imported
        before the first of them starts its time."""
        if workers.distributing(session.config) or session.config.option.collectonly:
            return
        recorded = self.checker.run.tested is Tested.RECORDED
        warm_up(self.selected_apis(session.items), recorded)

    def selected_apis(self, items: list[pytest.Item]) -> list[tuple[str, str]]:
        """(framework, API with its type: `Functional.unfold`) of each entry item; an item whose name
        is no entry name runs nothing."""
        selected = []
        for item in items:
            name = parse_entry_name(item.entry) if isinstance(item, EntryItem) else None
            if name is not None:  # its collector's dump file
                selected.append((self.framework_of[item.path], f"{name.api_type}.{name.api}"))
        return selected

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        """The dumps, children of the session after what the command line names: pytest never
        walks their folders, so it imports no conftest.py or __init__.py there."""
        report = yield
        if isinstance(collector, pytest.Session) and report.passed:
            report.result += [
                remote.collector(collector, path, self.shared[path], self.host)
                for path in self.dump_files
                # A worker on another host collects a dump missing there by the controller's word (remote.py).
                if not self.remote or path.is_file()
            ]
        return report

    def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
        """A dump's folders are data, also inside a folder of tests the command line names."""
        return True if collection_path in self.dump_folders else None

    @pytest.hookimpl(tryfirst=True)  # before -k, resume and the others deselect
    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        if self.remote:
            remote.in_dump_order(session, items, list(self.shared.values()), self.host)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        run, standard = self.checker.run, self.checker.standard
        lines = [f"msprobe: device {run.tested_on}, mode {run.mode}, seed {run.seed}, standard {standard.describe()}"]
        if run.tested is Tested.DEVICE and self.checker.recorded_too is not None:
            lines.append(
                f"msprobe: each entry judged twice, on the outputs the dump recorded and on a run on {run.tested_on}: "
                "its item fails where either fails"
            )
        lines += [f"msprobe: {note}" for note in self.device_notes]
        lines += [f"msprobe: {line}" for line in standard.header_lines()]
        lines += [f"msprobe: {line}" for line in [*self.references.header_lines(), *self.reference_notes]]
        if self.checker.repro is not None:
            lines.append(f"msprobe: a reproducer of every entry that is not pass in {self.checker.repro}")
        if run.probe:
            where = " on the CPU (the tested side is recorded)" if run.recorded else ""
            lines.append(f"msprobe: fp32 probe of every failing fp16/bf16 entry{where}")
        return lines

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """-q hides the header, where the files given and not taken as dumps are named."""
        if self.config.option.verbose < 0:
            for line in self.passed_over:
                terminalreporter.write_line(f"msprobe: {line}")

    def pytest_report_collectionfinish(self, config: pytest.Config) -> list[str]:
        return dump_lines(self.collected)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        """The controller collects nothing: it reads the dumps for the header lines a serial run
        prints, once its first worker has collected them (the same files)."""
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.dumps_told or terminal is None or not workers.distributing(self.config):
            return
        self.dumps_told = True
        dumps = {}  # not kept: the controller checks no entry
        for path in self.dump_files:
            try:
                dumps[_node_path(self.config, path)] = read_dump(path)
            except DumpError:
                continue  # the workers' collection fails it, naming why
        terminal.ensure_newline()
        for line in dump_lines(dumps):
            terminal.write_line(line)

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


def reference_run(options: Options, base: Path, dump_files: list[Path]) -> Reference | dict[Path, Reference] | None:
    """--msprobe-reference's rows, read for the benchmark standard (judging reads no CSV)."""
    if not options.reference:
        return None  # the benchmark standard without one: make_standard says what is missing
    if options.standard != "benchmark":
        raise pytest.UsageError(
            f"--msprobe-reference {options.reference} is read by --msprobe-standard benchmark only "
            f"(this run's standard is {options.standard})"
        )
    try:
        if len(dump_files) > 1:  # each dump against the folder of the same name in the reference run
            return read_references(base / options.reference, dump_folders(dump_files))
        return read_reference(base / options.reference)
    except CompareError as exc:
        raise pytest.UsageError(str(exc)) from None


def csv_layout(options: Options, base: Path) -> str:
    """The layout the run writes in: a resumed file's own (its header's), else the one asked."""
    if options.resume:
        with contextlib.suppress(ReportError):  # Selection says what is wrong with the file
            found = result_layout(base / options.resume)
            if found is not None:
                return found.name
    return options.csv_layout


def wants_msprobe_metrics(layout: str, frameworks: set[str]) -> bool:
    """msprobe's own metrics are computed only for a CSV in its PyTorch layout (a MindSpore
    dump keeps the default one): a run that writes none pays nothing for them."""
    return any(layouts.for_dump(layout, framework) is layouts.MSPROBE_PYTORCH for framework in frameworks)


def dump_lines(dumps: dict[str, Dump]) -> list[str]:
    """`msprobe: <dump>: pytorch tensor dump, 37 forward, 29 backward, 0 module entries`, a line a dump."""
    lines = []
    for path, dump in dumps.items():
        counts = ", ".join(f"{n} {kind}" for kind, n in dump.counts().items() if n or kind != "unknown")
        lines.append(printable(f"msprobe: {path}: {dump.framework} {dump.task} dump, {counts} entries"))
    return lines


def _node_path(config: pytest.Config, path: Path) -> str:
    """The dump as its node id names it: relative to the rootdir where it is under it."""
    try:
        return path.relative_to(config.rootpath.resolve()).as_posix()
    except ValueError:
        return str(path)


def _side_folder(folder: Path | None, side: str) -> Path | None:
    """Where one side's error data or reproducers go when an entry is judged twice."""
    return None if folder is None else folder / side
