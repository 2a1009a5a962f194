"""What a failing item's row carries in pytest-html's report (`--html`): that entry alone.

pytest-html expands every failing row, and a row holding the whole msprobe page (5-7 MB, most of
it plotly's bundle) in a frame made the browser load that page once per failure: a report of 206
failures did not render in 300 s. A row holds what its entry needs and no script: the entry's
message, a table of its outputs, and for each failing output whose samples the run took
(`--msprobe-html`) its error in ULP as a small inline SVG and its worst elements; then a link to
the entry in the msprobe page, where its interactive figures are. A few kB a row. No pytest: the
glue hands these dicts to pytest-html as its `extras`.
"""

from __future__ import annotations

import math
from typing import Any

from ..results import ERROR, WARNING, EntryResult, OutputResult
from .html import anchor
from .html_markup import Html, tag, url
from .messages import call_site_text, join, notes, output_text, probe_text

BAR_WIDTH, BAR_GAP, CHART_HEIGHT, TOP = 24, 4, 60, 12  # the ULP chart's bars and the room above them, in px
STATUS_COLOUR = {"error": "#c62828", "warning": "#ef6c00"}
OUTPUT_COLUMNS = ("output", "status", "dtype", "shape", "Cosine", "MaxAbsErr", "MaxRelativeErr", "ratio", "message")


def pytest_html_extras(result: EntryResult, page: str) -> list[dict[str, str | None]]:
    """pytest-html's extras of a failing item (its `extras.extra` dicts, made here: the core imports
    no pytest plugin). `page`: the msprobe page's URL relative to the pytest-html report, or ""."""
    # The entry's own words; its outputs' are in the table below, once.
    said = join([result.reason, call_site_text(result.call_site), probe_text(result.probe), *notes(result)])
    parts = [tag("p", None, tag("b", None, "msprobe"), ": ", said), _outputs_table(result)]
    parts += [_output_samples(result, o) for o in result.outputs if o.status in (ERROR, WARNING) and o.samples]
    if page:
        link = tag(
            "a", {"href": url(f"{page}#{anchor(result)}"), "target": "_blank"}, f"{result.entry} in the msprobe report"
        )
        parts.append(tag("p", None, link, ": its step, its figures zoomed and hovered, the run's other entries"))
    content = str(tag("div", {"class": "msprobe", "style": "font-size:13px"}, *parts))
    return [{"name": "msprobe", "format_type": "html", "content": content, "mime_type": None, "extension": None}]


def _outputs_table(result: EntryResult) -> Html:
    """One row per output, as its details row: status, dtype, shape, the metrics, the ratio, why."""
    rows = []
    for output in result.outputs:
        cells = (
            output.label,
            output.status.value,
            output.tested_dtype.rsplit(".", 1)[-1],
            "" if output.shape is None else str(output.shape),
            _number(output.cosine, 6),
            _number(output.max_abs_err, 4),
            _number(output.max_rel_err, 4),
            _ratio(output.severity),
            output_text(output),
        )
        colour = STATUS_COLOUR.get(output.status.value)
        rows.append(tag("tr", {"style": colour and f"color:{colour}"}, *(tag("td", None, cell) for cell in cells)))
    head = tag("thead", None, tag("tr", None, *(tag("th", None, name) for name in OUTPUT_COLUMNS)))
    style = "border-collapse:collapse;margin:4px 0"
    return tag("table", {"class": "msprobe-outputs", "style": style}, head, tag("tbody", None, *rows))


def _output_samples(result: EntryResult, output: OutputResult) -> Html:
    samples: dict[str, Any] = output.samples or {}
    title = f"{result.output_name(output)}: error in ULP of {samples.get('dtype', output.tested_dtype)}"
    figure = tag("figure", {"style": "margin:0"}, tag("figcaption", None, title), ulp_chart(samples))
    style = "display:flex;gap:16px;flex-wrap:wrap;align-items:flex-start"
    return tag("div", {"style": style}, figure, _worst_table(samples))


def ulp_chart(samples: dict[str, Any]) -> Html:
    """The count of elements in each bin of error in ULP, as bars on a log scale: a few hundred bytes
    of SVG, drawn by the browser without a script."""
    counts = [int(c) for c in samples.get("ulp_counts", [])]
    edges = [math.inf if edge is None else float(edge) for edge in samples.get("ulp_edges", [])]
    if not counts or len(edges) != len(counts) + 1:
        return Html("")
    top = math.log10(max(max(counts), 1) + 1)
    width = len(counts) * (BAR_WIDTH + BAR_GAP)
    shapes = []
    for i, count in enumerate(counts):
        height = 0.0 if not count else max(1.0, CHART_HEIGHT * math.log10(count + 1) / top)
        x = i * (BAR_WIDTH + BAR_GAP)
        middle = {"x": x + BAR_WIDTH / 2, "font-size": 9, "text-anchor": "middle"}
        label = f"{_edge(edges[i])}-{_edge(edges[i + 1])} ULP: {count} elements"
        bar = {"x": x, "y": f"{TOP + CHART_HEIGHT - height:.1f}", "width": BAR_WIDTH, "height": f"{height:.1f}"}
        shapes.append(tag("rect", {**bar, "fill": "#1565c0"}, tag("title", None, label)))
        shapes.append(tag("text", {**middle, "y": TOP + CHART_HEIGHT + 11}, _edge(edges[i])))
        if count:  # the count above its bar
            shown = count if count < 100_000 else f"{count:.0e}"
            shapes.append(tag("text", {**middle, "y": f"{TOP + CHART_HEIGHT - height - 2:.1f}"}, shown))
    svg = {
        "xmlns": "http://www.w3.org/2000/svg",
        "width": width,
        "height": TOP + CHART_HEIGHT + 14,
        "role": "img",
        "aria-label": "elements by error in ULP, from the lower edge of each bin",
    }
    return tag("svg", svg, *shapes)


def _worst_table(samples: dict[str, Any]) -> Html:
    rows = [
        tag(
            "tr",
            None,
            *(
                tag("td", None, cell)
                for cell in (
                    f"[{', '.join(str(i) for i in w.get('index', []))}]",
                    _number(w.get("tested"), 8),
                    _number(w.get("bench"), 8),
                    _number(w.get("error"), 4),
                    _number(w.get("ulp"), 3),
                )
            ),
        )
        for w in samples.get("worst", [])
    ]
    head = tag("tr", None, *(tag("th", None, name) for name in ("index", "tested", "bench", "|t - b|", "ULP")))
    return tag("table", {"class": "msprobe-worst"}, tag("caption", None, "worst elements"), head, *rows)


def _edge(value: float) -> str:
    """A bin's edge in ULP as a bar's label holds it: 0.5, 16, 1k, 1M."""
    return "inf" if math.isinf(value) else _compact(value)


def _compact(value: float) -> str:
    for scale, suffix in ((2.0**20, "M"), (2.0**10, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:g}"


def _number(value: object, digits: int) -> str:
    if not isinstance(value, (int, float)):
        return ""
    return f"{value:.{digits}g}"


def _ratio(value: float | None) -> str:
    if value is None:
        return ""
    return "beyond any budget" if math.isinf(value) or math.isnan(value) else f"{value:.3g}x"
