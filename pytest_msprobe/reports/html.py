"""One self-contained HTML file of a run: where in the step precision is lost, and how.

Built from the entries' results (EntryResult), whichever way they come: the run's own, in the
process that writes the CSVs (--msprobe-html), or read back from CSV pairs (`python -m
pytest_msprobe.report`, the merge of shards), each pair's journal giving what its columns do not
(call sites, each output's share of its budget, the per-output samples). The page, the most
telling first: the header (dumps, settings, counts), the step as a line, the roll-up by API,
the table of entries (filter, sort), and the failing outputs' details with their figures.
Every script and style is inline: it opens from a CI artifact with no network. No pytest.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..dumps.dump import BACKWARD, FORWARD, DumpError, read_dump
from ..results import ERROR, PASS, SKIP, WARNING, EntryResult, OutputResult, Status
from ..untrusted import cut
from . import files, html_figures, journal, manifest, pair_rows
from .csv_files import ReportError, details_path_for
from .html_markup import Html, escape, json_script, script, style, tag, url
from .journal import journal_path_for
from .messages import call_site_text, join, notes, output_findings, output_text, probe_text, split_message
from .summary import dump_labels, floor_line

STATUS_ORDER = (ERROR, WARNING, PASS, SKIP)
MAX_FIGURES = 50  # failing outputs drawn with their samples, worst first: the file stays a few MB
MAX_PASS_ROWS = 20_000  # passing entries in the table (every other one is there): a browser keeps up
MAX_MESSAGE = 600  # characters of a Message in the table; a failing entry's whole one is in its details


@dataclass
class Entry:
    """One entry as the page shows it."""

    result: EntryResult
    message: str  # what the result row says of it (entry_message, or the CSV's own text)
    x: int = 0  # its place in the call order of its dump
    anchor: str = ""  # the id of its detail, where it has one

    @property
    def api_type(self) -> str:
        """`Functional.linear` of `Functional.linear.3`: the roll-up's key."""
        head, _, tail = self.result.api.rpartition(".")
        return head if head and tail.isdigit() else self.result.api


@dataclass
class Report:
    """What the page is made of: the entries, and the manifests of the dumps they are of."""

    entries: list[Entry]
    manifests: list[dict[str, Any]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # the result CSVs the rows are in
    # A run that stopped early (Ctrl-C, -x, a lost host): the lines its terminal said of what it left
    # unchecked (summary.stopped_line, the APIs without a row and how to finish them); [] for a whole run.
    stopped: list[str] = field(default_factory=list)
    unchecked: dict[str, int] = field(default_factory=dict)  # of those, the entries never checked, by direction


def esc(text: object) -> Html:
    """Dump text on its way into the page: control characters escaped, then HTML's own."""
    return escape(text)


# -- the results, from a run or from files --------------------------------------------------------


def from_results(results: Sequence[EntryResult], manifests: Sequence[dict[str, Any]], sources: Sequence[str]) -> Report:
    """The report of a run's own results (in the order they came; placed by their position)."""
    if len(manifests) == 1:  # a resumed pair's entries read from its CSVs alone name no dump
        dump = str(manifests[0]["dump"]["path"])
        results = [r if r.dump else replace(r, dump=dump) for r in results]
    return _placed([Entry(r, table_message(r)) for r in results], list(manifests), list(sources))


def table_message(result: EntryResult) -> str:
    """An entry's message in the table: entry_message but the call site, which has a column of its own."""
    return join([result.reason, *output_findings(result), probe_text(result.probe), *notes(result)])


def from_pairs(result_paths: Sequence[Path], sources: Sequence[Path] = ()) -> Report:
    """The report of CSV pairs (a run's, or the shards of one merge): their rows, each entry the
    journal beside its pair holds taken from there (it has what the columns do not). sources: the
    pairs the header names, where not these (a merge's own). A pair whose run stopped early (its
    manifest's `stopped`) makes the page say it is partial, in the words that run's terminal said.

    Raises ReportError naming the file that is missing or is not one of a pair."""
    entries: dict[tuple[str, str, str], Entry] = {}
    manifests: list[dict[str, Any]] = []
    stopped: list[tuple[Path, manifest.Stopped | None]] = []
    for result_path in result_paths:
        document = _manifest(result_path)
        stopped.append((result_path, manifest.stopped_of(document)))
        dump = str(document["dump"]["path"]) if document else str(result_path)
        if document and all(m["dump"].get("sha256") != document["dump"].get("sha256") for m in manifests):
            manifests.append(document)
        order = _entry_order(document)
        for entry in _pair_entries(result_path, manifest.sides(document)):
            entry.result.dump = dump
            if entry.result.position is None:
                entry.result.position = order.get(entry.result.entry)
            entries.setdefault((dump, entry.result.api, entry.result.direction), entry)
    report = _placed(list(entries.values()), manifests, [str(p) for p in sources or result_paths])
    report.stopped, report.unchecked = manifest.stopped_lines(stopped)
    return report


def _pair_entries(result_path: Path, sides: int = 1) -> list[Entry]:
    """The entries a pair holds, its rows checked (pair_rows: a row of another kind, rows that disagree,
    are a ReportError naming the file and the row), each from its journal line where the journal holds
    it with the row's status."""
    if not os.path.lexists(result_path):
        raise ReportError(f"{result_path}: no such result CSV")
    details = details_path_for(result_path)
    if not os.path.lexists(details):
        raise ReportError(f"{details}: no details CSV beside the result CSV {result_path.name}")
    pair = pair_rows.read(result_path, details, sides)
    results, outputs = pair.results, pair.outputs()
    journal = _journal(journal_path_for(result_path))
    found = []
    for row in results:
        forward, backward = row.statuses.get(FORWARD, ""), row.statuses.get(BACKWARD, "")
        texts = dict(zip((FORWARD, BACKWARD), split_message(row.message, forward, backward)))
        for direction, status in row.statuses.items():
            known = journal.get((row.api, direction))
            if known is not None and known.status.value == status:
                found.append(Entry(known, table_message(known)))
            else:
                rows_of = outputs.get((row.api, direction), [])
                found.append(Entry(EntryResult(row.api, direction, Status(status), "", rows_of), texts[direction]))
    return found


def _journal(path: Path) -> dict[tuple[str, str], EntryResult]:
    """The latest result of each entry a journal holds, read only (journal.peek: a report leaves the
    files of a run as they are); {} where there is none. Raises ReportError naming it (readback's)."""
    try:
        results = journal.peek(path).results
    except OSError as exc:
        raise ReportError(str(exc)) from None
    return {(result.api, result.direction): result for result in results}


def _manifest(result_path: Path) -> dict[str, Any] | None:
    try:
        return manifest.read(result_path)
    except manifest.ManifestMissing:
        return None  # an older run's pair: the header says less
    except manifest.ManifestError as exc:
        raise ReportError(str(exc)) from None


def _entry_order(document: dict[str, Any] | None) -> dict[str, int]:
    """The position of each entry in its dump, where the dump is still there as it was."""
    if not document:
        return {}
    path = Path(document["dump"]["path"])
    try:
        if manifest.sha256(path) != document["dump"].get("sha256"):
            return {}
        return {name: i for i, name in enumerate(read_dump(path).entries)}
    except (OSError, DumpError):
        return {}


def _placed(entries: list[Entry], manifests: list[dict[str, Any]], sources: list[str]) -> Report:
    """Entries in call order per dump (their position, else as they came), each with its x and anchor."""
    by_dump: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        by_dump[entry.result.dump].append(entry)
    ordered = []
    for dump in sorted(by_dump):
        came = by_dump[dump]
        came.sort(key=lambda e: (e.result.position is None, e.result.position or 0))
        for x, entry in enumerate(came):
            entry.x = entry.result.position if entry.result.position is not None else x
            ordered.append(entry)
    for entry in ordered:
        if entry.result.status in (ERROR, WARNING):
            entry.anchor = anchor(entry.result)
    return Report(ordered, manifests, sources)


def anchor(result: EntryResult) -> str:
    """The id of an entry's detail: the same in every page of the run, so a pytest-html row links it."""
    return "d-" + hashlib.sha1(f"{result.dump}\0{result.entry}".encode("utf-8", "replace")).hexdigest()[:12]


# -- figures of a share of the budget ---------------------------------------------------------------


def _settings(report: Report) -> dict[str, Any]:
    return report.manifests[0].get("settings", {}) if report.manifests else {}


def output_ratio(output: OutputResult, settings: dict[str, Any]) -> float | None:
    """How many times its budget the output is off: the standard's own figure where the run kept
    it, else (a row read back from a CSV) basic's from the metrics and the run's thresholds."""
    if output.status == SKIP:
        return None
    if output.severity is not None:
        return output.severity
    if output.max_abs_err is None:
        return math.inf if output.status == ERROR else None
    if math.isnan(output.max_abs_err) or math.isinf(output.max_abs_err):
        return math.inf
    bound = float(settings.get("max_abs_err") or 1e-4)
    ratios = [output.max_abs_err / bound]
    if output.cosine is not None and not math.isnan(output.cosine):
        ratios.append((1 - output.cosine) / max(1 - float(settings.get("cosine") or 0.99), 1e-300))
    return max(ratios)


def entry_ratio(result: EntryResult, settings: dict[str, Any]) -> tuple[float | None, OutputResult | None]:
    """The worst output's ratio, and that output; an error with no output judged is beyond any budget."""
    rated = [(output_ratio(o, settings), o) for o in result.outputs]
    rated = [(r, o) for r, o in rated if r is not None]
    if rated:
        return max(rated, key=lambda pair: (pair[1].status in (ERROR, WARNING), _sortable(pair[0])))
    return (math.inf, None) if result.status == ERROR else (None, None)


def _sortable(value: float | None) -> float:
    if value is None:
        return -math.inf
    return math.inf if math.isnan(value) else value


def _ratio_text(value: float | None) -> str:
    if value is None:
        return ""
    if math.isinf(value) or math.isnan(value):
        return "beyond any budget"
    return f"{value:.3g}"


def _number(value: float | None, digits: int = 6) -> str:
    return "" if value is None else f"{value:.{digits}g}"


# -- the page: every value through html_markup (escaped by construction) ---------------------------


def build(report: Report) -> str:
    """The whole page, one string."""
    settings = _settings(report)
    figures: list[dict[str, Any]] = []
    body = [
        _header(report, settings),
        _step(report, settings, figures),
        _rollup(report, settings),
        _table(report, settings),
        _details(report, settings, figures),
    ]
    head = Html("").join(
        [
            tag("meta", {"charset": "utf-8"}),
            tag("meta", {"name": "viewport", "content": "width=device-width, initial-scale=1"}),
            tag("title", None, "pytest-msprobe report: ", _title(report)),
            style(_asset("html_page.css")),
            # Before anything else runs: every script error of the page lands in #script-errors.
            script(_asset("html_errors.js")),
        ]
    )
    page = Html("").join(
        [
            tag("div", {"id": "script-errors", "hidden": True}),
            *body,
            json_script("msprobe-figures", _finite(figures)),
            script(html_figures.bundle()),
            script(_asset("html_page.js")),
        ]
    )
    return Html("<!DOCTYPE html>\n<html lang='en'><head>{}</head><body>{}</body></html>\n").format(head, page)


def write(path: Path, report: Report) -> Path:
    """The page at path, whole or not at all: made beside it and moved over it (a link at the
    name is replaced, never written through). Raises OSError, PlottingMissing."""
    return write_page(path, build(report))


def write_page(path: Path, text: str) -> Path:
    """A page built (build) at path, as `write` writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    files.write_new(temporary, text.encode("utf-8"))
    try:
        os.replace(temporary, path)
    except OSError:  # a folder at the name: nothing of the page is left behind
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


def relative_url(page: Path, report: Path) -> str:
    """The msprobe page's URL from the folder of another report (pytest-html's)."""
    return urllib.parse.quote(os.path.relpath(page.resolve(), report.resolve().parent).replace(os.sep, "/"))


def write_run(
    path: Path,
    results: Sequence[EntryResult],
    result_paths: Sequence[Path],
    stopped: Sequence[str] = (),
    unchecked: Mapping[str, int] | None = None,
) -> Path:
    """The page of a run's own results, its pairs' manifests for the header (--msprobe-html); `stopped`:
    what the terminal said of what a run that stopped early left unchecked, `unchecked` how many
    entries it never checked, by direction."""
    described = [document for document in map(_manifest, result_paths) if document]
    report = from_results(results, described, [str(p) for p in result_paths])
    report.stopped = list(stopped)
    report.unchecked = dict(unchecked or {})
    return write(path, report)


def unavailable() -> str:
    """Why no page can be written here ("" where one can): plotly missing, said before a run."""
    return html_figures.unavailable()


def why(exc: BaseException) -> str:
    """What stopped the page, in words: plotly missing (how to get it), a path it would not write through."""
    if isinstance(exc, OSError) and not isinstance(exc, files.FileRefused):
        return f"{exc.strerror or exc}"
    return str(exc)


def _title(report: Report) -> str:
    """The dumps by their folder and name (`rank0/dump.json`): the header gives each whole path."""
    paths = [str(m["dump"]["path"]) for m in report.manifests] or sorted({e.result.dump for e in report.entries})
    dumps = ["/".join(Path(path).parts[-2:]) for path in paths]
    return ", ".join(dumps[:3]) + (f" and {len(dumps) - 3} more" if len(dumps) > 3 else "")


def _header(report: Report, settings: dict[str, Any]) -> Html:
    rows: list[tuple[str, str]] = []
    for document in report.manifests:
        dump = document["dump"]
        calls = f", {dump['api_calls']} API calls" if dump.get("api_calls") is not None else ""
        rows.append(("dump", f"{dump['path']} (sha256 {str(dump.get('sha256', ''))[:12]}{calls})"))
    if not report.manifests:
        rows += [("dump", dump) for dump in sorted({e.result.dump for e in report.entries})]
    if settings:
        standard = str(settings.get("standard", ""))
        if standard == "basic":
            standard += f": Cosine > {settings.get('cosine')} and MaxAbsErr < {settings.get('max_abs_err')}"
        else:
            standard += ": a per-element budget of the output dtype's rounding"
        rows += [
            ("device", settings.get("device", "")),
            ("inputs", f"{settings.get('mode', '')} (seed {settings.get('seed', '')})"),
            ("standard", standard),
        ]
        rows += [("tolerance", line) for line in settings.get("tolerances") or []]
        rows.append(("plugin", f"pytest-msprobe {report.manifests[0].get('plugin', __version__)}"))
    rows += [("rows", source) for source in report.sources]
    rows.append(("written", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())))
    counts = []
    for direction in (FORWARD, BACKWARD):
        got = Counter(e.result.status for e in report.entries if e.result.direction == direction)
        missing = report.unchecked.get(direction, 0)
        if got or missing:
            cells = [tag("td", {"class": f"s-{s.value}"}, f"{got.get(s, 0)} {s.value}") for s in STATUS_ORDER]
            if report.unchecked:  # a run that stopped early: what it never reached
                cells.append(tag("td", {"class": "unchecked"}, f"{missing} not checked"))
            counts.append(tag("tr", None, tag("th", None, direction), *cells))
    table = [tag("tr", None, tag("th", None, name), tag("td", None, value)) for name, value in rows]
    floor = floor_line([entry.result for entry in report.entries])
    return tag(
        "header",
        None,
        tag("h1", None, "pytest-msprobe: ", _title(report)),
        _stopped(report),
        tag("table", {"class": "meta"}, *table),
        tag("table", {"class": "counts", "id": "counts"}, *counts),
        *(tag("p", {"id": "floor"}, line) for line in floor),
    )


def _stopped(report: Report) -> Html:
    """A run that stopped before its last entry says so first, in the terminal's words: the page is partial."""
    if not report.stopped:
        return Html("")
    lines = [tag("p", None, line) for line in report.stopped]
    return tag("div", {"id": "stopped"}, tag("p", None, tag("b", None, "A partial run.")), *lines)


def _step(report: Report, settings: dict[str, Any], figures: list[dict[str, Any]]) -> Html:
    parts = [
        tag("h2", None, "The step, entry by entry"),
        tag(
            "p",
            {"class": "hint"},
            "Every entry in call order; up: its worst output's share of its budget (1: at the budget). "
            "A fault beyond any budget (NaN, a shape) sits at the top, a SKIP at the floor.",
        ),
    ]
    read_back = any(o.severity is None and o.max_abs_err is not None for e in report.entries for o in e.result.outputs)
    if read_back:
        parts.append(
            tag(
                "p",
                {"class": "hint"},
                "Some rows were read back from a CSV pair without its journal: their ratio is "
                "basic's (the larger of MaxAbsErr and 1 - Cosine over the run's thresholds), whatever the standard.",
            )
        )
    by_dump: dict[str, list[Entry]] = defaultdict(list)
    for entry in report.entries:
        by_dump[entry.result.dump].append(entry)
    for dump, entries in by_dump.items():
        points = []
        for entry in entries:
            ratio, worst = entry_ratio(entry.result, settings)
            where = call_site_text(entry.result.call_site)
            hover = Html("<b>{}</b> ({})<br>{} ratio {}").format(
                entry.result.entry, entry.result.status.value, worst.label if worst else "", _ratio_text(ratio)
            )
            hover += Html("<br>{}").format(where[:160]) if where else ""
            points.append(html_figures.StepPoint(entry.x, ratio, entry.result.status.value, hover))
        failures = [e.x for e in entries if e.result.status == ERROR]
        title = escape(dump) if len(by_dump) > 1 else Html("")
        figures.append(html_figures.step_figure(points, title, min(failures, default=None)))
        parts.append(tag("div", {"class": "fig step", "data-fig": len(figures) - 1}))
        first = next((e for e in entries if e.result.status == ERROR), None)
        if first is not None:
            site = call_site_text(first.result.call_site)
            parts.append(
                tag(
                    "p",
                    {"id": "first-failure"},
                    "First failure in call order: ",
                    tag("a", {"href": url(f"#{first.anchor}")}, first.result.entry),
                    f" (entry {first.x + 1}) ",
                    site,
                )
            )
    return tag("section", {"id": "step"}, *parts)


def _rollup(report: Report, settings: dict[str, Any]) -> Html:
    groups: dict[str, list[Entry]] = defaultdict(list)
    for entry in report.entries:
        groups[entry.api_type].append(entry)
    rows = []
    for api_type, entries in groups.items():
        counts = Counter(e.result.status for e in entries)
        worst = max((_sortable(entry_ratio(e.result, settings)[0]) for e in entries), default=-math.inf)
        worst_value = None if worst == -math.inf else worst
        calls = len({(e.result.dump, e.result.api) for e in entries})
        cells = [
            _cell(api_type),
            _cell(calls, calls),
            *(_cell(counts.get(s, 0), counts.get(s, 0), f"s-{s.value}" if counts.get(s) else "") for s in STATUS_ORDER),
            _cell(_ratio_text(worst_value), _sortable(worst_value)),
        ]
        rows.append(tag("tr", None, *cells))
    head = _head(["API", "calls", "error", "warning", "pass", "SKIP", "worst ratio"])
    table = tag("table", {"class": "sortable", "id": "api-table"}, head, tag("tbody", None, *rows))
    return tag("section", {"id": "apis"}, tag("h2", None, "By API"), tag("div", {"class": "scroll"}, table))


def _table(report: Report, settings: dict[str, Any]) -> Html:
    rows = []
    labels = dump_labels([entry.result for entry in report.entries])  # `rank1: ` in a run over several dumps
    passed = [e for e in report.entries if e.result.status == PASS]
    left_out = {id(e) for e in passed[MAX_PASS_ROWS:]}
    for entry in report.entries:
        if id(entry) in left_out:
            continue
        result = entry.result
        ratio, worst = entry_ratio(result, settings)
        name = labels.get(result.dump, "") + result.entry
        link = tag("a", {"href": url(f"#{entry.anchor}")}, name) if entry.anchor else name
        cells = [
            _cell(result.status.value, STATUS_ORDER.index(result.status), f"s-{result.status.value}"),
            tag("td", {"data-v": result.entry}, link),
            _cell(result.direction),
            _cell(worst.label if worst else ""),
            _cell(_ratio_text(ratio), _sortable(ratio)),
            _cell(_number(worst.cosine if worst else None), _sortable(worst.cosine if worst else None)),
            _cell(_number(worst.max_abs_err if worst else None, 4), _sortable(worst.max_abs_err if worst else None)),
            _cell(call_site_text(result.call_site)),
            _cell(cut(entry.message, MAX_MESSAGE, " in the result CSV"), cls="msg"),
        ]
        rows.append(tag("tr", {"data-status": result.status.value, "data-x": entry.x}, *cells))
    head = _head(
        ["status", "entry", "direction", "worst output", "ratio", "Cosine", "MaxAbsErr", "call site", "message"]
    )
    choices = (("", "every status"), ("not-pass", "not pass"), *((s.value, s.value) for s in STATUS_ORDER))
    options = [tag("option", {"value": value}, label) for value, label in choices]
    controls = tag(
        "div",
        {"class": "controls"},
        tag("label", None, "status ", tag("select", {"id": "status-filter"}, *options)),
        " ",
        tag(
            "label",
            None,
            "text ",
            tag("input", {"id": "text-filter", "type": "search", "placeholder": "API, call site, message"}),
        ),
        " ",
        tag("span", {"id": "shown-count"}),
    )
    hint = (
        tag(
            "p",
            {"class": "hint"},
            f"The table holds the first {MAX_PASS_ROWS:,} passing entries; "
            f"the other {len(left_out):,} are in the result CSV.",
        )
        if left_out
        else ""
    )
    table = tag("table", {"class": "sortable", "id": "entry-table"}, head, tag("tbody", None, *rows))
    return tag(
        "section", {"id": "entries"}, tag("h2", None, "Entries"), controls, hint, tag("div", {"class": "scroll"}, table)
    )


def _details(report: Report, settings: dict[str, Any], figures: list[dict[str, Any]]) -> Html:
    failing = [e for e in report.entries if e.anchor]
    heading = tag("h2", None, "Failing entries")
    if not failing:
        return tag("section", {"id": "details"}, heading, tag("p", None, "None: every entry passed or was skipped."))
    drawn = _drawn_outputs(failing, settings)
    labels = dump_labels([entry.result for entry in report.entries])
    articles = []
    for entry in failing:
        result = entry.result
        status = result.status.value
        parts = [
            tag(
                "h3",
                None,
                tag("span", {"class": f"s-{status}"}, status),
                " ",
                labels.get(result.dump, "") + result.entry,
            )
        ]
        site = call_site_text(result.call_site)
        if site:
            parts.append(tag("p", {"class": "site"}, site))
        # What the entry says beside its outputs' own words (below): why it has no verdict per output,
        # or, read back from a CSV without outputs, the row's Message.
        said = result.reason or ("" if result.outputs else entry.message)
        if said:
            parts.append(tag("p", {"class": "msg"}, said))
        if result.probe is not None:
            parts.append(tag("p", None, "fp32 probe: ", probe_text(result.probe)))
        told = notes(result)  # fallbacks, autocast, where its error data and its repro went
        if told:
            parts.append(tag("ul", {"class": "notes"}, *(tag("li", None, note) for note in told)))
        for output in result.outputs:
            parts.append(_output_detail(result, output, settings, (id(output) in drawn), figures))
        article = {"class": f"detail s-border-{status}", "id": entry.anchor, "data-entry": result.entry}
        articles.append(tag("article", article, *parts))
    hint = ""
    if len(drawn) < sum(1 for e in failing for o in e.result.outputs if o.samples):
        hint = tag("p", {"class": "hint"}, f"Figures are drawn for the {MAX_FIGURES} worst failing outputs.")
    return tag("section", {"id": "details"}, heading, *articles, hint)


def _drawn_outputs(failing: Iterable[Entry], settings: dict[str, Any]) -> set[int]:
    sampled = [o for e in failing for o in e.result.outputs if o.samples and o.status in (ERROR, WARNING)]
    sampled.sort(key=lambda o: -_sortable(output_ratio(o, settings)))
    return {id(o) for o in sampled[:MAX_FIGURES]}


def _output_detail(
    result: EntryResult, output: OutputResult, settings: dict[str, Any], draw: bool, figures: list
) -> Html:
    ratio = output_ratio(output, settings)
    metrics = (
        f"{output.tested_dtype} {output.shape if output.shape is not None else ''}, "
        f"Cosine {_number(output.cosine)}, MaxAbsErr {_number(output.max_abs_err, 4)}, "
        f"MaxRelativeErr {_number(output.max_rel_err, 4)}, ratio {_ratio_text(ratio)}"
    )
    text = output_text(output)
    status = output.status.value
    heading = tag(
        "h4",
        None,
        tag("span", {"class": f"s-{status}"}, status),
        " ",
        result.output_name(output),
        f" ({output.side})" if output.side else "",
    )
    parts = [heading, tag("p", None, metrics), tag("p", {"class": "msg"}, text) if text else ""]
    samples = output.samples
    if draw and samples:
        figures.extend(sample_figures(samples, output, settings))
        first = len(figures) - 2
        pair = [tag("div", {"class": "fig", "data-fig": first}), tag("div", {"class": "fig", "data-fig": first + 1})]
        parts.append(tag("div", {"class": "pair"}, *pair))
        parts.append(_worst_table(samples))
    return tag("div", {"class": "output"}, *parts)


def sample_figures(samples: dict[str, Any], output: OutputResult, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The scatter of |t - b| against |b| with the bounds as lines, and the histogram in ULP."""
    bench, error = samples["bench"], samples["error"]
    dtype = str(samples.get("dtype", output.tested_dtype)).rsplit(".", 1)[-1]
    lines: list[tuple[Html, list[float], list[float]]] = []
    if bench:
        low, high = max(min(bench), 1e-30), max(max(bench), 1e-30)
        xs = [low * (high / low) ** (i / 40) for i in range(41)] if high > low else [low]
        ulp = samples.get("ulp_of_one")
        if ulp:
            lines.append((Html("1 ULP of {}").format(dtype), xs, [ulp * _pow2_floor(x) for x in xs]))
        if settings.get("standard", "basic") == "basic" and settings.get("max_abs_err"):
            bound = float(settings["max_abs_err"])
            lines.append((Html("MaxAbsErr < {}").format(f"{bound:g}"), [xs[0], xs[-1]], [bound, bound]))
    kept = samples.get("total", len(bench))
    title = Html("|t - b| against |b|: {} of {} elements").format(len(bench), kept)
    return [
        html_figures.error_figure(bench, error, lines, title),
        html_figures.ulp_figure(
            [math.inf if edge is None else edge for edge in samples["ulp_edges"]],
            samples["ulp_counts"],
            escape(dtype),
        ),
    ]


def _pow2_floor(x: float) -> float:
    return 2.0 ** math.floor(math.log2(x)) if x > 0 else 0.0


def _worst_table(samples: dict[str, Any]) -> Html:
    rows = [
        tag(
            "tr",
            None,
            tag("td", None, f"[{', '.join(str(i) for i in w['index'])}]"),
            tag("td", None, f"{w['tested']:.8g}"),
            tag("td", None, f"{w['bench']:.8g}"),
            tag("td", None, f"{w['error']:.4g}"),
            tag("td", None, f"{w['ulp']:.3g}"),
        )
        for w in samples.get("worst", [])
    ]
    head = tag("tr", None, *(tag("th", None, name) for name in ("index", "tested", "bench", "|t - b|", "ULP")))
    table = tag("table", {"class": "worst"}, tag("caption", None, "worst elements"), head, *rows)
    return tag("div", {"class": "scroll"}, table)


def _cell(text: object, sort: object = None, cls: str = "") -> Html:
    key = None if sort is None else sort if not isinstance(sort, float) else repr(sort)
    return tag("td", {"class": cls or None, "data-v": key}, text)


def _head(names: Sequence[str]) -> Html:
    return tag("thead", None, tag("tr", None, *(tag("th", None, name) for name in names)))


def _finite(data: Any) -> Any:
    """JSON has no NaN or inf: they become null (plotly leaves such a point out)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_finite(value) for value in data]
    return data


def _asset(name: str) -> str:
    """A script or style of the package's own, shipped beside this module."""
    return (Path(__file__).parent / name).read_text(encoding="utf-8")
