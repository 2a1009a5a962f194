"""msprobe's second step: an NPU run judged against a GPU run of the same dump, from their details CSVs.

    python -m pytest_msprobe.compare --npu A --gpu B -o OUT

A and B are details CSVs in msprobe's PyTorch layout (written by this plugin with
`--msprobe-csv-layout msprobe-pytorch`, or by msprobe's own acc_check), a result CSV (its details
beside it), or a run's folder: every details CSV under it, grouped by folder (`rank0/`, as a run over
several dumps lays them out, as the merge groups them), the folders of A matched to B's by name.
For each folder the pair msprobe's `api_precision_compare` writes, in OUT/<folder>/:
`api_precision_compare_result_{ts}.csv` (one row per API) and `api_precision_compare_details_{ts}.csv`
(one per output, msprobe's 28 columns, then `Closer to float64` where both runs are this plugin's).
The rules are judging/precision_compare.py's. Exit status: 1 where an API is `error`, 2 for a usage
error (a file missing or not a details CSV of msprobe's layout), 0 otherwise. No pytest.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .. import readback
from ..dumps.dump import BACKWARD, FORWARD
from ..judging import precision_compare as rules
from ..judging.precision_compare import Judged, Row
from ..results import ERROR, METRIC_FIELDS, PASS, SKIP, WARNING, MsprobeMetrics, Status, worst_status
from ..untrusted import printable
from . import files, layouts, manifest
from .csv_files import (
    DETAILS_PREFIX,
    ENCODING,
    RESULT_PREFIX,
    any_field_size,
    details_path_for,
    text_cell,
    timestamp,
    untext,
)

RESULT_PREFIX_OUT = "api_precision_compare_result_"
DETAILS_PREFIX_OUT = "api_precision_compare_details_"
# api_precision_compare's files (compare_utils.py, ApiPrecisionCompareColumn), as it spells them.
RESULT_COLUMNS = ("API Name", "Forward Test Success", "Backward Test Success", "Message")
# The details' 28 columns: the name, then (column, Judged cell) pairs, then the verdict's three.
CELLS = (
    ("小值域错误比值", "small_value_err_ratio"),
    ("小值域判定结果", "small_value_err_status"),
    ("均方根误差比值", "rmse_ratio"),
    ("均方根误差判定结果", "rmse_status"),
    ("相对误差最大值比值", "max_rel_err_ratio"),
    ("相对误差最大值判定结果", "max_rel_err_status"),
    ("相对误差平均值比值", "mean_rel_err_ratio"),
    ("相对误差平均值判定结果", "mean_rel_err_status"),
    ("误差均衡性比值", "eb_ratio"),
    ("误差均衡性判定结果", "eb_status"),
    ("inf/nan错误率", "inf_nan_error_ratio"),
    ("inf/nan判定结果", "inf_nan_error_ratio_status"),
    ("相对误差错误率", "rel_err_ratio"),
    ("相对误差判定结果", "rel_err_ratio_status"),
    ("绝对误差错误率", "abs_err_ratio"),
    ("绝对误差判定结果", "abs_err_ratio_status"),
    ("二进制一致错误率", "error_rate"),
    ("二进制一致错误率判定结果", "error_rate_status"),
    ("ULP误差平均值", "mean_ulp_err"),
    ("ULP误差大于阈值占比", "ulp_err_proportion"),
    ("ULP误差大于阈值占比比值", "ulp_err_proportion_ratio"),
    ("ULP误差判定结果", "ulp_err_status"),
    ("双千指标", "rel_err_thousandth"),
    ("双千指标判定结果", "rel_err_thousandth_status"),
)
DETAILS_COLUMNS = ("API Name", *(column for column, _ in CELLS), "比对结果", "比对算法", "Message")
FLOAT64 = "torch.float64"
CLOSER = "Closer to float64"  # a 29th column, after msprobe's 28: which run is nearer the float64 bench
BLANK = " "  # msprobe's blank cell
PRECISION = 14  # msprobe's config `precision`: a float written "{:.14f}"


class CompareError(ValueError):
    """A usage error: a file missing, unreadable, or not a details CSV of msprobe's PyTorch layout."""


# Each metric's column in msprobe's PyTorch details CSV (layouts.MSPROBE_PYTORCH), in its order.
METRIC_COLUMNS = dict(zip(METRIC_FIELDS, layouts.MSPROBE_PYTORCH.details_columns[4:21]))


@dataclass(frozen=True)
class Output:
    """One details row as read: its name, the rules' Row, and what was wrong with its cells, if anything."""

    name: str
    row: Row
    bench: str  # Bench Dtype: what the bench ran in
    source: Path
    line: int
    fault: str = ""


@dataclass
class Run:
    """One folder of one side: its details CSVs' rows by output name, and whether this plugin wrote them."""

    folder: Path
    files: list[Path]
    outputs: dict[str, Output] = field(default_factory=dict)
    by_this_plugin: bool = True  # every file is this plugin's: its manifest is beside its result CSV


@dataclass
class Compared:
    """One output of the NPU run, judged."""

    name: str
    api: str
    direction: str
    judged: Judged
    closer: str = ""


@dataclass
class FolderPair:
    """The two runs' CSVs of one folder (".", or a dump's `rank0/`), and the NPU run's outputs judged."""

    folder: Path
    npu: Run
    gpu: Run | None
    outputs: list[Compared] = field(default_factory=list)
    result: Path | None = None


def details_files(path: Path) -> dict[Path, list[Path]]:
    """The details CSVs a --npu or --gpu argument names, by folder relative to it ("." for a file)."""
    if path.is_dir():
        found: dict[Path, list[Path]] = {}
        for details in sorted(path.rglob(f"{DETAILS_PREFIX}*.csv")):
            found.setdefault(details.parent.relative_to(path), []).append(details)
        if not found:
            raise CompareError(f"{path}: no {DETAILS_PREFIX}*.csv in this folder or below it")
        return found
    if not path.exists():
        raise CompareError(f"{path}: no such file or folder")
    if path.name.startswith(RESULT_PREFIX):
        path = details_path_for(path)  # a result CSV: the details beside it hold the metrics
    return {Path("."): [path]}


def read_run(folder: Path, files: list[Path], side: str, named: bool = False) -> Run:
    """named: the user named the file itself (a link there is followed; never one found in a folder)."""
    run = Run(folder, files)
    for path in files:
        for output in read_details(path, side, named):
            seen = run.outputs.get(output.name)
            if seen is not None:
                where = f"{seen.source} line {seen.line}" if seen.source != path else f"line {seen.line}"
                raise CompareError(
                    f"{path} line {output.line}: {output.name} has a row already ({where}): "
                    "one run's files hold each output once (two runs in one folder? give one run's CSV)"
                )
            run.outputs[output.name] = output
        run.by_this_plugin = run.by_this_plugin and _by_this_plugin(path)
    return run


def _by_this_plugin(details: Path) -> bool:
    """Whether this plugin wrote the pair (its manifest beside the result CSV reads as one)."""
    result = details.with_name(details.name.replace(DETAILS_PREFIX, RESULT_PREFIX, 1))
    try:
        return bool(manifest.read(result).get("plugin"))
    except manifest.ManifestError:
        return False


def read_details(path: Path, side: str, named: bool = False) -> Iterator[Output]:
    """The rows of a details CSV in msprobe's PyTorch layout (read through readback: a regular file,
    bounded, no link followed but one the user named); a usage error for any other file."""
    try:
        text = readback.read_text(path, readback.MAX_CSV, ENCODING, follow_links=named)
    except OSError as exc:  # readback.Unreadable names the file
        raise CompareError(f"{side} {exc}") from None
    try:
        with any_field_size():
            rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise CompareError(f"{side} {path}: cannot be read as a details CSV: {exc}") from None
    header = rows[0] if rows else []
    columns = _columns(path, side, header)
    for line, cells in enumerate(rows[1:], start=2):
        if any(cell.strip() for cell in cells):
            yield _output(path, line, columns, cells)


def _columns(path: Path, side: str, header: list[str]) -> dict[str, int]:
    if layouts.of_details_header(header) is layouts.DEFAULT:
        raise CompareError(
            f"{side} {path}: a details CSV of this plugin's default layout, without msprobe's metrics: "
            "run pytest with --msprobe-csv-layout msprobe-pytorch to write them"
        )
    place = {name: i for i, name in enumerate(header)}
    missing = [name for name in layouts.MSPROBE_PYTORCH.details_columns if name not in place]
    if missing:
        raise CompareError(
            f"{side} {path}: not a details CSV of msprobe's PyTorch layout (accuracy_checking_details): "
            f"it has no column {', '.join(missing)}"
        )
    return place


def _output(path: Path, line: int, columns: dict[str, int], cells: list[str]) -> Output:
    def cell(name: str) -> str:
        at = columns[name]
        return untext(cells[at]) if at < len(cells) else ""

    values: dict[str, float | None] = {}
    faults = []
    for name, column in METRIC_COLUMNS.items():
        text = cell(column).strip()
        try:
            values[name] = float(text) if text else None
        except ValueError:
            values[name] = None
            faults.append(f"{column} {text[:40]!r} is not a number")
    row = Row(
        cell("DEVICE Dtype").strip(),
        cell("Shape").strip(),
        cell("Status").strip(),
        cell("Message").strip(),
        MsprobeMetrics.from_dict(values),
    )
    fault = f"{path} line {line}: {'; '.join(faults)}" if faults else ""
    return Output(cell("API Name").strip(), row, cell("Bench Dtype").strip(), path, line, fault)


def pair_runs(npu: Path, gpu: Path) -> tuple[list[FolderPair], list[Path]]:
    """The folders to compare: A's, each with B's folder of the same name (None where B lacks it);
    and B's folders that A lacks."""
    npu_files, gpu_files = details_files(npu), details_files(gpu)
    npu_named, gpu_named = not npu.is_dir(), not gpu.is_dir()
    if set(npu_files).isdisjoint(gpu_files):
        raise CompareError(
            f"--npu {npu} and --gpu {gpu} have no folder in common (NPU: {_names(npu_files)}; "
            f"GPU: {_names(gpu_files)}): give two runs of the same dumps, files or folders alike"
        )
    folders = [
        FolderPair(
            folder,
            read_run(folder, files, "--npu", npu_named),
            read_run(folder, gpu_files[folder], "--gpu", gpu_named) if folder in gpu_files else None,
        )
        for folder, files in npu_files.items()
    ]
    return folders, [folder for folder in gpu_files if folder not in npu_files]


def read_reference(path: Path) -> rules.Reference:
    """--msprobe-reference: one run's details rows (a file, or a folder holding one run's), by output
    name, for the benchmark standard; a CompareError naming the file where it cannot be one."""
    found = details_files(path)
    if len(found) > 1:
        raise CompareError(
            f"--msprobe-reference {path}: the runs of {len(found)} folders are in it ({_names(found)}): "
            "name the folder of this dump's reference run"
        )
    ((folder, files),) = found.items()
    run = read_run(folder, files, "--msprobe-reference", named=not path.is_dir())
    return rules.Reference({name: output.row for name, output in run.outputs.items()}, ", ".join(map(str, files)))


def read_references(path: Path, folders: Mapping[Path, Path]) -> dict[Path, rules.Reference]:
    """--msprobe-reference of a run over several dumps: a folder holding a reference run of the same
    dumps, each dump's rows in the folder of the same name as its CSVs' (`folders`: each dump's
    folder under --msprobe-out, `rank0/`), as python -m pytest_msprobe.compare matches two runs'
    folders. A dump whose folder it lacks gets a Reference without rows saying so; none in common,
    or a file, is a CompareError."""
    found = details_files(path)
    if not path.is_dir() or set(found).isdisjoint(folders.values()):
        raise CompareError(
            f"--msprobe-reference {path}: a run of {len(folders)} dumps takes the reference run of the same "
            f"dumps, a folder with one of theirs (theirs: {_names(dict.fromkeys(folders.values()))}; it holds: "
            f"{_names(found)})"
        )
    references = {}
    for dump, folder in folders.items():
        if folder in found:
            run = read_run(folder, found[folder], "--msprobe-reference")
            rows = {name: output.row for name, output in run.outputs.items()}
            references[dump] = rules.Reference(rows, ", ".join(map(str, found[folder])))
        else:
            missing = f"the reference run {path} has no folder {folder}: nothing to compare this dump's outputs with"
            references[dump] = rules.Reference({}, str(path / folder), missing)
    return references


def _names(found: Mapping[Path, object]) -> str:
    names = [str(folder) for folder in found]
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def compare_folder(folder: FolderPair) -> None:
    """Judge every output of the NPU run against the GPU run's row of the same name."""
    for output in folder.npu.outputs.values():
        named = rules.output_name(output.name)
        api, direction = (named.api, named.direction) if named else (output.name, FORWARD)
        judged = _judge(folder, output, named)
        closer = (
            _closer(output, folder.gpu.outputs.get(output.name))
            if folder.gpu and folder.npu.by_this_plugin and folder.gpu.by_this_plugin
            else ""
        )
        folder.outputs.append(Compared(output.name, api, direction, judged, closer))


def _judge(folder: FolderPair, output: Output, named: rules.OutputName | None) -> Judged:
    if named is None:
        return Judged(SKIP, message=f"{output.name!r} is not an output's name (<api>.forward.output.<i>)")
    reason = rules.skip_reason(output.row)
    if reason is not None:  # msprobe's own SKIPs first: they need no GPU row
        return Judged(SKIP, message=reason)
    if output.fault:
        return Judged(SKIP, message=output.fault)
    if folder.gpu is None:
        return Judged(SKIP, message=f"the GPU run has no folder {folder.folder}: nothing to compare with")
    gpu = folder.gpu.outputs.get(output.name)
    if gpu is None:
        where = ", ".join(str(path) for path in folder.gpu.files)
        return Judged(SKIP, message=f"no row {output.name} in {where}: the GPU run has no such output")
    if gpu.fault:
        return Judged(SKIP, message=gpu.fault)
    return rules.judge(named.api_name, output.row, gpu.row)


def _closer(npu: Output, gpu: Output | None) -> str:
    """`GPU (RMSE 3.2x smaller: 1.2e-07 against 3.9e-07)`: which run's output is nearer the float64
    bench, by how much; "" where a row lacks the metrics or its bench was not float64 (a fallback)."""
    if gpu is None or npu.bench != FLOAT64 or gpu.bench != FLOAT64:
        return ""
    closer = rules.closer_to_float64(npu.row.metrics, gpu.row.metrics)
    if closer is None:
        return ""
    if not closer.side:
        return f"as near ({closer.metric} {closer.npu:.3g})"
    small, large = sorted((closer.npu, closer.gpu))
    by = f"{large / small:.3g}x smaller: " if small > 0 else ""
    return f"{closer.side} ({closer.metric} {by}{small:.3g} against {large:.3g})"


@dataclass
class ApiRow:
    api: str
    outputs: dict[str, list[Compared]] = field(default_factory=lambda: {FORWARD: [], BACKWARD: []})

    def status(self, direction: str) -> str:
        """error > warning > pass over its outputs, all SKIP SKIP; " " for a direction with no row."""
        outputs = self.outputs[direction]
        return worst_status(o.judged.status for o in outputs).value if outputs else BLANK

    def message(self) -> str:
        """The failing rules of each failed output; the SKIP reason of a direction with nothing judged;
        msprobe's note on the API, where it has one and the forward failed."""
        parts = []
        for direction in (FORWARD, BACKWARD):
            outputs = self.outputs[direction]
            status = self.status(direction)
            for compared in outputs:
                if compared.judged.status == ERROR:
                    label = compared.name[len(self.api) + 1 :]
                    parts.append(f"{label}: {', '.join(f.text() for f in compared.judged.failures)}")
            if status == SKIP:
                parts.append(f"{direction}: {outputs[0].judged.message}")
        name = rules.OutputName(self.api, FORWARD, 0).api_name
        if self.status(FORWARD) == ERROR and name in rules.API_NOTES:
            parts.append(rules.API_NOTES[name])
        return "; ".join(parts)


def api_rows(outputs: Sequence[Compared]) -> list[ApiRow]:
    """One row per API, in order of its first output (msprobe groups only adjacent rows)."""
    rows: dict[str, ApiRow] = {}
    for compared in outputs:
        rows.setdefault(compared.api, ApiRow(compared.api)).outputs[compared.direction].append(compared)
    return list(rows.values())


def cell_text(value: rules.Cell | Status) -> str:
    """A cell as msprobe writes it: a blank as " ", a float with its 14 decimals."""
    if value is None:
        return BLANK
    if isinstance(value, float) and not isinstance(value, bool):
        return f"{value:.{PRECISION}f}"
    return str(value)


def details_row(compared: Compared, with_closer: bool) -> list[str]:
    judged = compared.judged
    cells = [cell_text(judged.cells.get(key)) for _, key in CELLS]
    message = " ".join(line.strip() for line in judged.message.splitlines() if line.strip())
    row = [text_cell(compared.name), *cells, str(judged.status), judged.algorithm or BLANK, text_cell(message)]
    return [*row, text_cell(compared.closer)] if with_closer else row


def write(folder: FolderPair, out: Path, stamp: str) -> Path:
    target = out / folder.folder
    target.mkdir(parents=True, exist_ok=True)
    result_path, result, details = new_pair(target, stamp)
    with_closer = bool(folder.gpu and folder.npu.by_this_plugin and folder.gpu.by_this_plugin)
    with result, details:
        result_rows, details_rows = csv.writer(result), csv.writer(details)
        result_rows.writerow(RESULT_COLUMNS)
        details_rows.writerow([*DETAILS_COLUMNS, CLOSER] if with_closer else DETAILS_COLUMNS)
        details_rows.writerows(details_row(compared, with_closer) for compared in folder.outputs)
        for api in api_rows(folder.outputs):
            result_rows.writerow(
                [text_cell(api.api), api.status(FORWARD), api.status(BACKWARD), text_cell(api.message())]
            )
    folder.result = result_path
    return result_path


def new_pair(target: Path, stamp: str) -> tuple[Path, IO[str], IO[str]]:
    """The two files, new (never written through a link, never over another comparison's): `_{stamp}`
    or, where that is taken (two comparisons in one second), `_{stamp}_1`, ...; each begun with the BOM."""
    for n in range(1000):
        suffix = f"{stamp}{f'_{n}' if n else ''}.csv"
        result_path, details_path = target / f"{RESULT_PREFIX_OUT}{suffix}", target / f"{DETAILS_PREFIX_OUT}{suffix}"
        try:
            result = files.open_new(result_path, newline="")
        except FileExistsError:
            continue
        try:
            details = files.open_new(details_path, newline="")
        except FileExistsError:
            result.close()
            result_path.unlink()
            continue
        for handle in (result, details):
            handle.write("\ufeff")  # UTF-8 with a BOM, as msprobe writes them (utf-8-sig)
        return result_path, result, details
    raise FileExistsError(f"{target}: {RESULT_PREFIX_OUT}{stamp}.csv to _999.csv all exist")


def summary_lines(folders: Sequence[FolderPair]) -> list[str]:
    """Counts per direction, the failed APIs with their failing rules, the SKIP reasons by count."""
    apis = [api for folder in folders for api in api_rows(folder.outputs)]
    lines = []
    for direction in (FORWARD, BACKWARD):
        statuses = [api.status(direction) for api in apis if api.outputs[direction]]
        if statuses:
            counts = ", ".join(f"{statuses.count(str(s))} {s}" for s in (PASS, ERROR, WARNING, SKIP))
            lines.append(f"{direction:<8} {counts}")
    failed = [api for api in apis if ERROR in (api.status(FORWARD), api.status(BACKWARD))]
    if failed:
        lines += ["", "errors:"] + [f"  {api.api}: {api.message()}" for api in failed]
    reasons: dict[str, int] = {}
    for folder in folders:
        for compared in folder.outputs:
            if compared.judged.status == SKIP:
                reason = re.sub(r"\d+", "N", compared.judged.message.splitlines()[0] if compared.judged.message else "")
                reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        lines += ["", "SKIP reasons (outputs):"]
        lines += [f"  {count:>5}  {reason}" for reason, count in sorted(reasons.items(), key=lambda r: -r[1])[:10]]
    return lines


def unmatched_lines(folders: Sequence[FolderPair], extra_folders: Sequence[Path] = ()) -> list[str]:
    """What the GPU run has that the NPU run lacks (outputs, folders): never judged, said once."""
    lines = [f"{folder}: the NPU run has no such folder: not compared" for folder in extra_folders]
    for folder in folders:
        if folder.gpu is None:
            continue
        extra = [name for name in folder.gpu.outputs if name not in folder.npu.outputs]
        if extra:
            where = f"{folder.folder}: " if str(folder.folder) != "." else ""
            lines.append(f"{where}{len(extra)} output(s) of the GPU run have no row in the NPU run (first: {extra[0]})")
    return lines


def compare(npu: Path, gpu: Path, out: Path) -> tuple[list[str], bool]:
    """Compare and write; the lines to print, and whether no API is `error`."""
    folders, gpu_only = pair_runs(npu, gpu)
    for folder in folders:
        compare_folder(folder)
    stamp = timestamp()
    try:
        paths = [write(folder, out, stamp) for folder in folders]
    except OSError as exc:
        raise CompareError(f"{out}: the comparison cannot be written there: {exc}") from None
    lines = [f"{' msprobe api_precision_compare ':=^80}", *summary_lines(folders), *unmatched_lines(folders, gpu_only)]
    for path in paths:
        lines += [
            f"result:  {path}",
            f"details: {path.with_name(path.name.replace(RESULT_PREFIX_OUT, DETAILS_PREFIX_OUT, 1))}",
        ]
    failed = any(c.judged.status == ERROR for folder in folders for c in folder.outputs)
    return lines, not failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_msprobe.compare",
        description="Judge an NPU run against a GPU run of the same dump by msprobe's api_precision_compare "
        "rules, from their details CSVs in msprobe's PyTorch layout.",
    )
    parser.add_argument(
        "--npu", "-npu", required=True, type=Path, metavar="A", help="the NPU run: a details CSV or a run's folder"
    )
    parser.add_argument(
        "--gpu", "-gpu", required=True, type=Path, metavar="B", help="the GPU run: a details CSV or a run's folder"
    )
    parser.add_argument(
        "-o", "--out", "-out", default=Path("."), type=Path, metavar="OUT", help="folder for the two CSVs (default: .)"
    )
    args = parser.parse_args(argv)
    try:
        lines, passed = compare(args.npu, args.gpu, args.out)
    except CompareError as exc:
        print(printable(f"pytest_msprobe.compare: {exc}"), file=sys.stderr)
        return 2
    print("\n".join(printable(line) for line in lines))
    return 0 if passed else 1
