"""Join the CSV pairs of CI shards (pytest-split's `--splits N --group K`) into one pair per dump.

    python -m pytest_msprobe.merge OUT_DIR... --out DIR

Each shard ran some entries of the same dump and wrote its own pair and manifest. Pairs are
matched by their folder under their OUT_DIR (`rank0/`, as a run over several dumps lays them
out); the pairs of one folder must be of the same dump (its sha256) under the same settings
and plugin, or the merge refuses, naming both. pytest-split splits by item, so the forward and
the backward of one API may come from two shards: their halves join into one row, every API
once. The terminal summary is the one a single run prints, rebuilt from the CSVs; where a shard's
run stopped early (its manifest's `stopped`), the merge says so as that run's terminal did, its
merged manifest carries it (a report of the merged pair is partial too), and it exits 1. No pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..dumps.dump import BACKWARD, DIRECTIONS, FORWARD, DumpError, read_dump
from ..readback import what_is_at
from ..results import ERROR, EntryResult, OutputResult, Status
from ..untrusted import cut, printable
from . import files, manifest, pair_rows, provenance, summary
from .cells import MAX_CELL, untext
from .csv_files import (
    RESULT_PREFIX,
    ReportError,
    cells,
    details_path_for,
    output_of_row,
    text_cell,
    timestamp,
)
from .layouts import DEFAULT, Layout
from .messages import api_message, split_message

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
    details: list[list[str]]  # its outputs' details rows, cells as written (checked: pair_rows)
    source: Path
    layout: Layout = DEFAULT


@dataclass
class Merged:
    folder: Path
    dump: dict
    pairs: list[Pair]
    apis: dict[str, dict[str, Half]] = field(default_factory=dict)  # in order of first appearance
    layout: Layout | None = None  # the pairs' one layout, written again
    dump_read: tuple[dict[str, int], set[tuple[str, str]] | None] | None = None  # dump_of's, once read

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
    """The pair's rows into merged: each row checked, the two files against each other and, where the
    dump is here as the shards read it, against the dump (pair_rows); MergeError naming the file and
    the row otherwise, or where two shards that ran one entry disagree."""
    try:
        read = pair_rows.read(pair.result, details_path_for(pair.result), manifest.sides(pair.manifest))
    except ReportError as exc:
        raise MergeError(str(exc)) from None
    pair.layout = read.layout or DEFAULT
    if merged.layout is None:
        merged.layout = pair.layout
    elif merged.layout is not pair.layout:
        first = merged.pairs[0].result
        raise MergeError(
            f"{pair.result} is in the {pair.layout.name} CSV layout, {first} in the {merged.layout.name} one: "
            "shards of one run are written in one layout (--msprobe-csv-layout)"
        )
    outputs = pair_rows.by_entry(read.details)
    entries = dump_of(merged)[1]
    for row in read.results:
        forward, backward = row.statuses.get(FORWARD, ""), row.statuses.get(BACKWARD, "")
        texts = dict(zip(DIRECTIONS, split_message(row.message, forward, backward)))
        halves = merged.apis.setdefault(row.api, {})
        for direction, status in row.statuses.items():
            if entries is not None and (row.api, direction) not in entries:
                raise MergeError(
                    f"{pair.result}: row {row.number}: {_shown(row.api)} {direction} is no entry of the dump "
                    f"{merged.dump['path']}: rows of another dump"
                )
            raw = [output.raw for output in outputs.get((row.api, direction), [])]
            half = Half(status, texts[direction], raw, pair.result, pair.layout)
            seen = halves.get(direction)
            if seen is not None and (seen.status, seen.text, seen.details) != (half.status, half.text, half.details):
                raise MergeError(
                    f"{_shown(row.api)}.{direction} has different rows in {seen.source} and {pair.result}: "
                    "shards that ran the same entry disagree"
                )
            halves[direction] = half


def _shown(text: str) -> str:
    return cut(printable(text), 200)


def texts(merged: Merged) -> tuple[str, str]:
    """The merged pair's result and details CSVs, in the shards' layout, every text cell written as a
    run writes it (cells.py: formula starts neutralised, control characters escaped, a Message cut)."""
    layout = merged.layout or DEFAULT
    blank = layout.blank
    result, details = io.StringIO(newline=""), io.StringIO(newline="")
    result_rows, details_rows = csv.writer(result), csv.writer(details)
    result.write("\ufeff")
    details.write("\ufeff")
    result_rows.writerow(layout.result_columns)
    details_rows.writerow(layout.details_columns)
    for api, halves in merged.apis.items():
        forward, backward = halves.get(FORWARD), halves.get(BACKWARD)
        for half in (forward, backward):
            details_rows.writerows(_details_cells(layout, raw) for raw in (half.details if half else []))
        message = api_message(as_result(api, FORWARD, forward), as_result(api, BACKWARD, backward))
        statuses = [half.status if half else blank for half in (forward, backward)]
        cut_note = " cut: every output's message is in its details row"
        result_rows.writerow([text_cell(api), *statuses, text_cell(message, MAX_CELL, cut_note) if message else blank])
    return result.getvalue(), details.getvalue()


def _details_cells(layout: Layout, raw: list[str]) -> list[str]:
    """A details row written again: its text cells escaped as a run escapes them, its numbers (checked
    to be numbers) and its status as they were."""
    text = cells(layout, raw)
    status_at, message_at = layout.column("Status"), layout.column("Message")
    written = [text_cell(cell) if cell else layout.blank for cell in text[:4]]
    written += raw[4 : status_at + 1]
    written.append(text_cell(text[message_at], MAX_CELL, " cut") if text[message_at] else layout.blank)
    return written


def write(groups: Sequence[Merged], out: Path, stamp: str, page: tuple[Path, str] | None = None) -> list[Path]:
    """Every group's merged pair and manifest in out (its folder below), whole or not at all: each file
    made new beside its name and moved there once all are written; anything at a name (a link, an
    earlier file) is refused, never written through. page: the HTML report, written last of all
    before the moves. Raises MergeError."""
    made: list[tuple[files.Folder, str, str]] = []  # (folder, temporary, name)
    folders: list[files.Folder] = []
    moved: list[tuple[files.Folder, str]] = []
    paths = []
    try:
        for merged in groups:
            folder = files.Folder.make(out, merged.folder.parts)
            folders.append(folder)
            result_path = folder.path / f"{RESULT_PREFIX}{stamp}.csv"
            result, details = texts(merged)
            left = stopped_of(merged)
            description = {
                **merged.pairs[0].manifest,
                "shard": None,
                "merged_from": [str(p.result) for p in merged.pairs],
                "stopped": None if left is None else left.plain(),  # the shards' together: partial if one is
            }
            contents = {
                result_path.name: result,
                details_path_for(result_path).name: details,
                manifest.path_for(result_path).name: manifest.render(result_path, description),
            }
            for name, text in contents.items():
                made.append((folder, _temporary(folder, name, text), name))
            paths.append(result_path)
        if page is not None:
            from . import html  # plotly only where a page is asked for

            html.write_page(*page)
        for folder, temporary, name in made:
            os.replace(temporary, name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
            moved.append((folder, name))
    except OSError as exc:
        for folder, name in [*((f, t) for f, t, _ in made), *moved]:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=folder.fd)
        raise MergeError(
            f"the merged pair is not written: {exc if isinstance(exc, files.FileRefused) else exc.strerror or exc}"
        ) from None
    finally:
        for folder in folders:
            folder.close()
    return paths


def _temporary(folder: files.Folder, name: str, text: str) -> str:
    """text in a new file beside name (refused where anything has name: a link, an earlier file)."""
    if os.path.lexists(folder.path / name):
        raise files.FileRefused(
            folder.path / name, f"{what_is_at(name, folder.fd)} is already there: not written through"
        )
    temporary = f".{name}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary, dir_fd=folder.fd)  # one a killed merge left
    fd = files.create(temporary, folder.fd, folder.path / temporary)
    with os.fdopen(fd, "wb") as handle:
        handle.write(text.encode("utf-8"))
    return temporary


def stopped_of(merged: Merged) -> manifest.Stopped | None:
    """What the shards of one folder that stopped early left undone, together (None: every shard ran whole)."""
    found = [left for left in (manifest.stopped_of(pair.manifest) for pair in merged.pairs) if left is not None]
    if not found:
        return None
    return manifest.Stopped(
        "; ".join(dict.fromkeys(left.why for left in found)),
        sum(left.selected for left in found),
        {d: n for d in DIRECTIONS if (n := sum(left.unchecked.get(d, 0) for left in found))},
        sum(left.unfinished for left in found),
    )


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
    return dump_of(merged)[0]


def dump_of(merged: Merged) -> tuple[dict[str, int], set[tuple[str, str]] | None]:
    """(each entry's position, every (API Name, direction) of the dump) where the dump is readable here
    as the shards read it (its sha256 the manifest's), else ({}, None); read once."""
    if merged.dump_read is None:
        merged.dump_read = {}, None
        path = Path(merged.dump["path"])
        try:
            if manifest.sha256(path) == merged.dump["sha256"]:
                dump = read_dump(path)
                merged.dump_read = {name: i for i, name in enumerate(dump.entries)}, provenance.entries_of(dump)
        except (OSError, DumpError):
            pass
    return merged.dump_read


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
            # A shard that stopped early left APIs without a row: its lines below say which to resume.
            cause = "a shard that stopped early, below, or one missing" if stopped_of(merged) else "a shard missing"
            lines.append(
                f"{where}{len(merged.apis)} of the dump's {expected} APIs have rows: no shard ran the other "
                f"{expected - len(merged.apis)} ({cause} from the merge?)"
            )
    return lines


def merge(out_dirs: Sequence[Path], out: Path, html_path: Path | None = None) -> tuple[list[str], bool]:
    """Merge; the lines to print, and whether the run it makes passes (no error, no API missing).
    html_path: the HTML report of the merged run too, from the shards' pairs and journals (the
    journals hold what the columns do not). Every pair is read and checked, and the page built,
    before anything is written: MergeError, and nothing written, where one cannot be."""
    groups = group(find_pairs(out_dirs))
    for merged in groups:
        for pair in merged.pairs:
            read_pair(pair, merged)
    stamp = timestamp()
    finals = [out / merged.folder / f"{RESULT_PREFIX}{stamp}.csv" for merged in groups]
    page = None if html_path is None else (html_path, build_html(html_path, groups, finals))
    paths = write(groups, out, stamp, page)
    lines = [f"{' msprobe ':=^80}", *summary_lines(groups)]
    missing = coverage_lines(groups)
    lines += missing
    # Shards that stopped early (their manifests say so): the merged run is partial, and fails as theirs did.
    shards = [(pair.result, manifest.stopped_of(pair.manifest)) for merged in groups for pair in merged.pairs]
    partial, _ = manifest.stopped_lines(shards)
    lines += partial
    for merged, path in zip(groups, paths):
        sources = len(merged.pairs)
        lines.append(f"merged {sources} pair(s) of {merged.dump['path']}")
        lines += [f"result:  {path}", f"details: {details_path_for(path)}"]
    if html_path is not None:
        lines.append(f"html:    {html_path}")
    failed = any(half.status == ERROR for m in groups for halves in m.apis.values() for half in halves.values())
    return lines, not failed and not missing and not partial


def build_html(path: Path, groups: Sequence[Merged], merged: Sequence[Path]) -> str:
    from . import html  # plotly only where a page is asked for

    try:
        return html.build(html.from_pairs([pair.result for m in groups for pair in m.pairs], sources=merged))
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
