"""The figures of the HTML report, drawn by plotly (its offline bundle, inlined once per page).

Plotly is imported here, on first call, only when a report is written: a run without
--msprobe-html never loads it. Each figure is handed back as plain JSON (plotly's own
figure spec), which the page draws with the one bundle; bench/html_report.md says why plotly
and not matplotlib's SVG. Plotly reads the text of a figure (titles, names, hover text) as HTML:
each is Html here, escaped where it is made (html_markup). No pytest.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..results import ERROR, PASS, SKIP, WARNING
from .html_markup import Html

COLOURS = {ERROR.value: "#d62728", WARNING.value: "#ff7f0e", PASS.value: "#2ca02c", SKIP.value: "#7f7f7f"}
FLOOR = 1e-6  # the step's y axis starts here: a ratio of 0 (exact) or below sits on it
MAX_SVG_POINTS = 5000


class PlottingMissing(ImportError):
    """plotly is not installed: the report cannot be drawn (the message says how to get it)."""


def unavailable() -> str:
    """Why no page can be drawn here (plotly is not installed), found without importing it; "" where it can."""
    if importlib.util.find_spec("plotly") is None:
        return (
            "the HTML report draws its figures with plotly, which is not installed: pip install 'pytest-msprobe[html]'"
        )
    return ""


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise PlottingMissing(unavailable() or "plotly cannot be imported") from None
    return go


def bundle() -> str:
    """plotly.js, minified, to inline once in the page."""
    _plotly()
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


@dataclass
class StepPoint:
    """One entry on the step's line."""

    x: int  # its place in the call order
    ratio: float | None  # its worst output's share of its budget; None: nothing judged (a SKIP)
    status: str
    hover: Html  # the entry and its call site (plotly reads hover text as HTML)


def _figure_json(figure: Any) -> dict[str, Any]:
    figure.update_layout(modebar={"orientation": "v"})  # beside the plot: over it, it hid the title on a phone
    data: dict[str, Any] = json.loads(figure.to_json())
    data.pop("template", None)
    data.get("layout", {}).pop("template", None)  # plotly's default theme: 8 kB a figure, the page sets its own
    return data


def step_figure(points: Sequence[StepPoint], title: Html, first_failure: int | None) -> dict[str, Any]:
    """Every entry in call order, its ratio to its budget on a log axis, coloured by status; the
    first failure marked. Ratios beyond the axis (inf: a shape fault, NaN where the other side has
    none) sit at its top, SKIPs at its floor, each said in its hover."""
    go = _plotly()
    finite = [p.ratio for p in points if p.ratio is not None and math.isfinite(p.ratio) and p.ratio > 0]
    top = max([*finite, 10.0]) * 10
    figure = go.Figure()
    # A step of thousands of entries is drawn by WebGL: an SVG element a point would stall the page.
    scatter = go.Scattergl if len(points) > MAX_SVG_POINTS else go.Scatter
    figure.add_trace(
        scatter(
            x=[p.x for p in points],
            y=[_placed(p.ratio, top) for p in points],
            mode="lines",
            line={"color": "#c7c7c7", "width": 1},
            hoverinfo="skip",
            showlegend=False,
        )
    )
    for status in (ERROR.value, WARNING.value, PASS.value, SKIP.value):
        chosen = [p for p in points if p.status == status]
        if not chosen:
            continue
        figure.add_trace(
            scatter(
                x=[p.x for p in chosen],
                y=[_placed(p.ratio, top) for p in chosen],
                mode="markers",
                name=f"{status} ({len(chosen)})",
                marker={"color": COLOURS[status], "size": 7 if status in (ERROR.value, WARNING.value) else 5},
                text=[p.hover for p in chosen],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    figure.add_hline(
        y=1, line={"dash": "dash", "color": "#444"}, annotation_text="budget", annotation_position="top left"
    )
    if first_failure is not None:
        figure.add_vline(
            x=first_failure,
            line={"color": COLOURS[ERROR.value], "dash": "dot"},
            annotation_text="first failure",
            annotation_position="top right",
        )
    figure.update_layout(
        title={"text": title, "font": {"size": 14}},
        xaxis={"title": {"text": "entry, in call order"}},
        yaxis={
            "title": {"text": "worst output / its budget"},
            "type": "log",
            "exponentformat": "power",
            "range": [math.log10(FLOOR) - 0.3, math.log10(top) + 0.3],
        },
        margin={"l": 60, "r": 20, "t": 40, "b": 40},
        height=360,
        legend={"orientation": "h", "y": -0.2},
        hovermode="closest",
    )
    return _figure_json(figure)


def _placed(ratio: float | None, top: float) -> float:
    if ratio is None:
        return FLOOR
    if math.isnan(ratio) or math.isinf(ratio):
        return top
    return max(ratio, FLOOR)


def error_figure(
    bench: Sequence[float],
    error: Sequence[float],
    lines: Sequence[tuple[Html, Sequence[float], Sequence[float]]],
    title: Html,
) -> dict[str, Any]:
    """|t - b| against |b| on log axes, with the bounds as lines (the basic threshold, one ULP of
    the output dtype): each line a name and its points."""
    go = _plotly()
    floor = min([e for e in error if e > 0] or [1e-30]) / 10
    figure = go.Figure(
        go.Scattergl(
            x=[max(b, 1e-45) for b in bench],
            y=[max(e, floor) for e in error],
            mode="markers",
            marker={"size": 4, "color": "#1f77b4", "opacity": 0.6},
            name="elements (sampled)",
            hovertemplate="|b| %{x:.4g}<br>|t - b| %{y:.4g}<extra></extra>",
        )
    )
    for name, xs, ys in lines:
        figure.add_trace(go.Scatter(x=list(xs), y=list(ys), mode="lines", name=name, line={"dash": "dash"}))
    figure.update_layout(
        title={"text": title, "font": {"size": 13}, "x": 0.01, "xanchor": "left"},
        xaxis={"title": {"text": "|bench|"}, "type": "log", "exponentformat": "power"},
        yaxis={"title": {"text": "|tested - bench|"}, "type": "log", "exponentformat": "power"},
        margin={"l": 60, "r": 10, "t": 36, "b": 40},
        height=320,
        legend={"orientation": "h", "y": -0.25},
    )
    return _figure_json(figure)


def ulp_figure(edges: Sequence[float], counts: Sequence[int], dtype: Html) -> dict[str, Any]:
    """The per-element error in ULP of the output dtype, counted over every element in bins."""
    go = _plotly()
    labels = [_bin_label(low, high) for low, high in zip(edges[:-1], edges[1:])]
    figure = go.Figure(
        go.Bar(x=labels, y=list(counts), marker={"color": "#9467bd"}, hovertemplate="%{x} ULP: %{y}<extra></extra>")
    )
    figure.update_layout(
        title={
            "text": Html("error in ULP of {}, every element").format(dtype),
            "font": {"size": 13},
            "x": 0.01,
            "xanchor": "left",
        },
        xaxis={"title": {"text": "|tested - bench| / ULP(bench)"}, "type": "category"},
        yaxis={"title": {"text": "elements"}, "type": "log", "exponentformat": "power", "dtick": 1},
        margin={"l": 60, "r": 10, "t": 36, "b": 60},
        height=320,
    )
    return _figure_json(figure)


def _bin_label(low: float, high: float) -> str:
    if math.isinf(high):
        return f">= {_edge(low)}"
    return f"[{_edge(low)}, {_edge(high)})"


def _edge(value: float) -> str:
    """`2^14` for the large edges, `0.5` for the small."""
    return f"2^{int(math.log2(value))}" if value >= 1024 else f"{value:g}"
