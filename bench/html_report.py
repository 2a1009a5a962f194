"""Which plotting library draws the HTML report's figures: plotly's offline bundle or matplotlib's inline SVG.

    python -m bench.html_report [--entries 387] [--failing 10] [--points 3000] [--rounds 3]
    python -m bench.html_report --cost examples/pt_tensor_L1/dump.json [--device cpu] [--rounds 5]

Both draw the same figures of a synthetic run as the report has them: the step as a line
(`--entries` points, the ResNet step's 387 by default) and, per failing output, a scatter of
|t - b| against |b| (`--points`) and a histogram of the error in ULP. Each variant is one
self-contained HTML file; measured: its size, the CPU time to make it, and the wall time headless
Chromium takes to load and render it (`--dump-dom`, best of `--rounds`; the browser's own start is
measured on an empty page and given beside). Prints a markdown table; the results are kept in
bench/html_report_results.md.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np


def data(entries: int, failing: int, points: int) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(0)
    ratios = 10 ** rng.normal(-2, 1, entries)
    outputs = []
    for _ in range(failing):
        bench = np.abs(rng.normal(0, 1, points))
        outputs.append((bench, bench * 2**-8 * np.abs(rng.normal(0, 1, points))))
    return ratios, outputs


def plotly_page(ratios: np.ndarray, outputs: list[tuple[np.ndarray, np.ndarray]], webgl: bool = False) -> str:
    import plotly.graph_objects as go
    import plotly.io as pio

    parts = []
    step = go.Figure(go.Scatter(y=ratios, mode="lines+markers", text=[f"entry {i}" for i in range(len(ratios))]))
    step.update_yaxes(type="log")
    parts.append(pio.to_html(step, include_plotlyjs=True, full_html=False))
    for bench, error in outputs:
        scatter = go.Figure((go.Scattergl if webgl else go.Scatter)(x=bench, y=error, mode="markers"))
        scatter.update_xaxes(type="log")
        scatter.update_yaxes(type="log")
        histogram = go.Figure(go.Histogram(x=error / (np.abs(bench) * 2**-8 + 1e-30)))
        parts += [pio.to_html(fig, include_plotlyjs=False, full_html=False) for fig in (scatter, histogram)]
    return "<!doctype html><html><head><meta charset='utf-8'></head><body>" + "".join(parts) + "</body></html>"


def bundle_page(ratios: np.ndarray, outputs: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """The step figure alone: what a page that draws the outputs' figures as they are scrolled to costs at load."""
    return plotly_page(ratios, [])


def matplotlib_page(ratios: np.ndarray, outputs: list[tuple[np.ndarray, np.ndarray]]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def svg(fig) -> str:
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg")
        plt.close(fig)
        text = buffer.getvalue()
        return text[text.index("<svg") :]

    parts = []
    fig, ax = plt.subplots(figsize=(10, 3))
    ax.semilogy(ratios, marker=".")
    parts.append(svg(fig))
    for bench, error in outputs:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.loglog(bench, error, ".", markersize=2)
        parts.append(svg(fig))
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.hist(error / (np.abs(bench) * 2**-8 + 1e-30), bins=50)
        parts.append(svg(fig))
    return "<!doctype html><html><head><meta charset='utf-8'></head><body>" + "".join(parts) + "</body></html>"


def render_seconds(chromium: str, page: Path, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as profile:
            start = time.perf_counter()
            subprocess.run(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", "--dump-dom",
                 page.as_uri()],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
            best = min(best, time.perf_counter() - start)
    return best


def run_cost(dump: str, device: str, rounds: int) -> None:
    """A whole run of `dump` with and without --msprobe-html, interleaved fresh processes: wall and CPU."""
    import os
    import resource
    import statistics
    import sys

    times: dict[str, list[tuple[float, float]]] = {"without": [], "with --msprobe-html": []}
    size = 0
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            for name in times:
                extra = ["--msprobe-html", f"{folder}/r.html"] if name != "without" else []
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--msprobe-dump", dump,
                     "--msprobe-device", device, "--msprobe-out", f"{folder}/out", *extra],
                    capture_output=True, check=False, cwd=os.getcwd(),
                )  # fmt: skip
                wall = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                times[name].append((wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime))
                if extra:
                    size = Path(f"{folder}/r.html").stat().st_size
    print(f"{dump} on {device}, {rounds} interleaved rounds; the page {size / 2**20:.2f} MiB\n")
    print("| run | wall (median) | CPU (median) |")
    print("|---|---|---|")
    for name, pairs in times.items():
        walls, cpus = zip(*pairs)
        print(f"| {name} | {statistics.median(walls):.2f} s | {statistics.median(cpus):.2f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=387)
    parser.add_argument("--failing", type=int, default=10)
    parser.add_argument("--points", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cost", metavar="DUMP", help="instead: a whole run of DUMP with and without --msprobe-html")
    parser.add_argument("--device", default="cpu", help="--msprobe-device of --cost's runs")
    args = parser.parse_args()
    if args.cost:
        run_cost(args.cost, args.device, args.rounds)
        return
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    ratios, outputs = data(args.entries, args.failing, args.points)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        empty = Path(folder) / "empty.html"
        empty.write_text("<!doctype html><html><body></body></html>")
        start_up = render_seconds(chromium, empty, args.rounds) if chromium else None
        variants = (
            ("plotly (offline bundle, SVG traces)", plotly_page),
            ("plotly-webgl (offline bundle, the scatters in WebGL)", lambda r, o: plotly_page(r, o, webgl=True)),
            ("plotly, the step figure alone (the outputs' figures drawn when scrolled to)", bundle_page),
            ("matplotlib (inline SVG)", matplotlib_page),
        )
        for name, page in variants:
            cpu = time.process_time()
            text = page(ratios, outputs)
            made = time.process_time() - cpu
            path = Path(folder) / f"{name.split()[0]}.html"
            path.write_text(text, encoding="utf-8")
            shown = render_seconds(chromium, path, args.rounds) if chromium else None
            rows.append((name, len(text.encode()), made, shown))
    print(f"{args.entries} entries, {args.failing} failing outputs of {args.points} points each; "
          f"Chromium: {chromium or 'not found'}, an empty page {start_up and f'{start_up:.2f} s'}\n")  # fmt: skip
    print(f"| library | file size | CPU to make it | Chromium load and render (best of {args.rounds}) |")
    print("|---|---|---|---|")
    for name, size, made, shown in rows:
        render = f"{shown:.2f} s" if shown is not None else "n/a"
        print(f"| {name} | {size / 2**20:.2f} MiB | {made:.2f} s | {render} |")


if __name__ == "__main__":
    main()
