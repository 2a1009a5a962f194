"""Join the CSV pairs of CI shards (pytest-split's `--splits N --group K`) into one pair per dump.

    python -m pytest_msprobe.merge OUT_DIR... --out DIR

Each shard ran some entries of the same dump and wrote its own pair and manifest. Pairs are
matched by their folder under their OUT_DIR (`rank0/`, as a run over several dumps lays them
out); the pairs of one folder must be of the same dump (its sha256) under the same settings
and plugin, or the merge refuses, naming both. pytest-split splits by item, so the forward and
the backward of one API may come from two shards: their halves join into one row, every API
once. The terminal summary is the one a single run prints, rebuilt from the CSVs. No pytest.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..dumps.dump import BACKWARD, FORWARD, DumpError, read_dump
from ..results import ERROR, EntryResult, OutputResult, Status
from ..untrusted import printable
from . import manifest, summary
from .csv_files import (
    DETAILS_PREFIX,
    ENCODING,
    RESULT_PREFIX,
    ReportError,
    any_field_size,
    details_path_for,
    output_of_row,
    read_csv_text,
    read_result,
    text_cell,
    timestamp,
    untext,
)
from .layouts import DEFAULT, Layout, of_details_header
from .messages import api_message, split_message
from .resume import api_of_output

_FLOOR = re.compile(r"within the (\S+) rounding budget \(--msprobe-standard dtype passes it\)")


class MergeError(ValueError):
    """Pairs that cannot be one run's (names the files and what differs)."""


@dataclass
class Pair:
    result: Path
    folder: Path  # relative to its OUT_DIR
    manifest: dict
    layout: Layout = DEFAULT  # its header's, once read


@dataclass
class Half:
    """One direction of one API, as a shard wrote it."""

    status: str
    text: str  # its part of the result row's Message
    details: list[list[str]]
    source: Path
    layout: Layout = DEFAULT


@dataclass
class Merged:
    folder: Path
    dump: dict
    pairs: list[Pair]
    apis: dict[str, dict[str, Half]] = field(default_factory=dict)  # in order of first appearance
    layout: Layout | None = None  # the pairs' one layout, written again

    def blank(self) -> str:
        return (self.layout or DEFAULT).blank


def find_pairs(out_dirs: Sequence[Path]) -> list[Pair]:
    pairs = []
    for out_dir in out_dirs:
        if not out_dir.is_dir():
            raise MergeError(f"{out_dir}: no such folder")
        found = sorted(out_dir.rglob(f"{RESULT_PREFIX}*.csv"))
        if not found:
            raise MergeError(f"{out_dir}: no {RESULT_PREFIX}*.csv in it")
        for result in found:
            try:
                pairs.append(Pair(result, result.parent.relative_to(out_dir), manifest.read(result)))
            except manifest.ManifestError as exc:
                raise MergeError(str(exc)) from None
    return pairs


def group(pairs: Sequence[Pair]) -> list[Merged]:
    """The pairs of each folder, checked to be of one dump and one set of settings."""
    groups: dict[Path, Merged] = {}
    for pair in pairs:
        merged = groups.setdefault(pair.folder, Merged(pair.folder, pair.manifest["dump"], []))
        first = merged.pairs[0] if merged.pairs else None
        if first is not None:
            if pair.manifest["dump"]["sha256"] != first.manifest["dump"]["sha256"]:
                raise MergeError(
                    f"{pair.result} and {first.result} are pairs of different dumps "
                    f"({pair.manifest['dump']['path']} and {first.manifest['dump']['path']}, "
                    "sha256 differs): merge the shards of one dump"
                )
            ours, theirs = manifest.row_settings(pair.manifest), manifest.row_settings(first.manifest)
            differ = [f"{name} {ours[name]!r} / {theirs[name]!r}" for name in ours if ours[name] != theirs[name]]
            if differ:
                raise MergeError(
                    f"{pair.result} and {first.result} were written under different settings: {', '.join(differ)}"
                )
        merged.pairs.append(pair)
    return list(groups.values())


def read_pair(pair: Pair, merged: Merged) -> None:
    try:
        layout, rows = read_result(pair.result)
        details = read_details(details_path_for(pair.result), layout or DEFAULT)
    except ReportError as exc:
        raise MergeError(str(exc)) from None
    pair.layout = layout or DEFAULT
    if merged.layout is None:
        merged.layout = pair.layout
    elif merged.layout is not pair.layout:
        first = merged.pairs[0].result
        raise MergeError(
            f"{pair.result} is in the {pair.layout.name} CSV layout, {first} in the {merged.layout.name} one: "
            "shards of one run are written in one layout (--msprobe-csv-layout)"
        )
    for api, forward, backward, message, *_ in rows:
        texts = split_message(message, forward, backward)
        halves = merged.apis.setdefault(api, {})
        for direction, status, text in ((FORWARD, forward, texts[0]), (BACKWARD, backward, texts[1])):
            if not status:
                continue
            half = Half(status, text, details.get((api, direction), []), pair.result, pair.layout)
            seen = halves.get(direction)
            if seen is not None and (seen.status, seen.text, seen.details) != (half.status, half.text, half.details):
                raise MergeError(
                    f"{api}.{direction} has different rows in {seen.source} and {pair.result}: "
                    "shards that ran the same entry disagree"
                )
            halves[direction] = half


def read_details(path: Path, layout: Layout = DEFAULT) -> dict[tuple[str, str], list[list[str]]]:
    """The rows of a details CSV in `layout` (its result CSV's), by (api, direction), as written."""
    text = read_csv_text(path)
    try:
        with any_field_size():
            rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise ReportError(f"{path}: cannot be read as a details CSV: {exc}") from None
    if not rows or of_details_header(rows[0]) is None:
        raise ReportError(f"{path}: not an accuracy_checking_details CSV")
    if of_details_header(rows[0]) is not layout:
        raise ReportError(f"{path}: not in the {layout.name} CSV layout its result CSV is written in")
    by_entry: dict[tuple[str, str], list[list[str]]] = {}
    for row in rows[1:]:
        if row:
            entry = untext(row[0]).rsplit(".output.", 1)[0]
            by_entry.setdefault((api_of_output(untext(row[0])), entry.rsplit(".", 1)[-1]), []).append(row)
    return by_entry


def write(merged: Merged, out: Path, stamp: str) -> Path:
    folder = out / merged.folder
    folder.mkdir(parents=True, exist_ok=True)
    result_path = folder / f"{RESULT_PREFIX}{stamp}.csv"
    details_path = folder / f"{DETAILS_PREFIX}{stamp}.csv"
    layout = merged.layout or DEFAULT
    blank = layout.blank
    with (
        open(result_path, "w", newline="", encoding=ENCODING) as result,
        open(details_path, "w", newline="", encoding=ENCODING) as details,
    ):
        result_rows, details_rows = csv.writer(result), csv.writer(details)
        result_rows.writerow(layout.result_columns)
        details_rows.writerow(layout.details_columns)
        for api, halves in merged.apis.items():
            forward, backward = halves.get(FORWARD), halves.get(BACKWARD)
            for half in (forward, backward):
                details_rows.writerows(half.details if half else [])
            message = api_message(as_result(api, FORWARD, forward), as_result(api, BACKWARD, backward))
            statuses = [half.status if half else blank for half in (forward, backward)]
            result_rows.writerow([text_cell(api), *statuses, text_cell(message) if message else blank])
    first = merged.pairs[0].manifest
    manifest.write(result_path, {**first, "shard": None, "merged_from": [str(p.result) for p in merged.pairs]})
    return result_path


def as_result(api: str, direction: str, half: Half | None, with_outputs: bool = False) -> EntryResult | None:
    """An entry's result as its rows tell it: its Message part as the reason, its outputs' metrics."""
    if half is None:
        return None
    outputs = [found for found in (_output(row, half.layout) for row in half.details) if found] if with_outputs else []
    return EntryResult(api, direction, Status(half.status), half.text, outputs)


def _output(row: list[str], layout: Layout) -> OutputResult | None:
    """An output's metrics as its details row tells them (its Message is the entry's, said once)."""
    read = output_of_row(layout, row)
    if read is None:
        return None
    output = read[1]
    output.reasons = []
    return output


def summary_lines(groups: Sequence[Merged]) -> list[str]:
    """The msprobe section of a single run over these APIs: counts, failures worst first, the
    rounding floor, SKIP reasons (summary.py on results rebuilt from the rows)."""
    results: list[EntryResult] = []
    floors: list[EntryResult] = []  # the same with each output's rounding floor, for the floor line alone
    for merged in groups:
        order = entry_order(merged)
        entries = [(api, direction, half) for api, halves in merged.apis.items() for direction, half in halves.items()]
        entries.sort(key=lambda entry: order.get(f"{entry[0]}.{entry[1]}", len(order)))
        for api, direction, half in entries:
            result = as_result(api, direction, half, with_outputs=True)
            assert result is not None
            results.append(result)
            floored = EntryResult(api, direction, result.status, outputs=_floored(half))
            floors.append(floored)
    lines = summary.count_lines(results)
    failures = summary.failure_lines(results)
    if failures:
        lines += ["", "failures, worst first:", *failures, *summary.floor_line(floors)]
    skips = summary.skip_lines(results)
    if skips:
        lines += ["", "SKIP reasons:", *skips]
    return lines


def entry_order(merged: Merged) -> dict[str, int]:
    """The position of each entry in the dump, where the dump is readable here as the shards read it:
    failures of equal severity then list in the order a serial run checks them (else in CSV order)."""
    path = Path(merged.dump["path"])
    try:
        if manifest.sha256(path) != merged.dump["sha256"]:
            return {}
        return {name: i for i, name in enumerate(read_dump(path).entries)}
    except (OSError, DumpError):
        return {}


def _floored(half: Half) -> list[OutputResult]:
    """The outputs of its rows, each with the rounding floor its Message names."""
    found = []
    for row in half.details:
        output = _output(row, half.layout)
        if output is not None:
            match = _FLOOR.search(untext(row[-1]))
            output.floor = match.group(1) if match else ""
            found.append(output)
    return found


def coverage_lines(groups: Sequence[Merged]) -> list[str]:
    lines = []
    for merged in groups:
        expected = merged.dump.get("api_calls")
        if expected is not None and len(merged.apis) < expected:
            where = f"{merged.folder}: " if str(merged.folder) != "." else ""
            lines.append(
                f"{where}{len(merged.apis)} of the dump's {expected} APIs have rows: no shard ran the other "
                f"{expected - len(merged.apis)} (a shard missing from the merge?)"
            )
    return lines


def merge(out_dirs: Sequence[Path], out: Path, html_path: Path | None = None) -> tuple[list[str], bool]:
    """Merge; the lines to print, and whether the run it makes passes (no error, no API missing).
    html_path: the HTML report of the merged run too, from the shards' pairs and journals (the
    journals hold what the columns do not); MergeError where it cannot be written."""
    groups = group(find_pairs(out_dirs))
    for merged in groups:
        for pair in merged.pairs:
            read_pair(pair, merged)
    stamp = timestamp()
    paths = [write(merged, out, stamp) for merged in groups]
    lines = [f"{' msprobe ':=^80}", *summary_lines(groups)]
    missing = coverage_lines(groups)
    lines += missing
    for merged, path in zip(groups, paths):
        sources = len(merged.pairs)
        lines.append(f"merged {sources} pair(s) of {merged.dump['path']}")
        lines += [f"result:  {path}", f"details: {details_path_for(path)}"]
    if html_path is not None:
        lines.append(f"html:    {write_html(html_path, groups, paths)}")
    failed = any(half.status == ERROR for m in groups for halves in m.apis.values() for half in halves.values())
    return lines, not failed and not missing


def write_html(path: Path, groups: Sequence[Merged], merged: Sequence[Path]) -> Path:
    from . import html  # plotly only where a page is asked for

    try:
        report = html.from_pairs([pair.result for m in groups for pair in m.pairs], sources=merged)
        return html.write(path, report)
    except (ReportError, OSError, ImportError) as exc:
        raise MergeError(f"the HTML report {path} is not written: {html.why(exc)}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_msprobe.merge",
        description="Join the CSV pairs of pytest-msprobe runs over shards of one dump into one pair per dump.",
    )
    parser.add_argument("out_dirs", nargs="+", type=Path, metavar="OUT_DIR", help="a shard's --msprobe-out folder")
    parser.add_argument("--out", required=True, type=Path, help="folder for the merged pair(s)")
    parser.add_argument("--html", type=Path, metavar="PATH", help="also write the merged run's HTML report there")
    args = parser.parse_args(argv)
    try:
        lines, passed = merge(args.out_dirs, args.out, args.html)
    except MergeError as exc:
        print(printable(f"pytest_msprobe.reports.merge: {exc}"), file=sys.stderr)
        return 2
    print("\n".join(printable(line) for line in lines))  # a path or a name of a CSV, escaped
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
