"""pytest-html's report of a run with many failures: its size, and how long headless Chromium takes to render it.

    python -m bench.pytest_html_rows [--failures 68 200] [--rounds 3]

The example dump (examples/pt_tensor_L1) with its bf16 matmul called N - 6 times more on the same
tensors (N failing items under basic, on rounding alone; tests/test_html_extras.py's many_failures),
judged in recorded mode with `--html pytest.html --msprobe-html report.html`. Measured: the two
files' sizes, the size of each row's msprobe part (from pytest-html's data in its page), and the
wall time from Chromium's start until it has rendered pytest-html's page
(`--dump-dom` after `--virtual-time-budget=30000`, which lets the page's scripts and frames finish;
best of `--rounds`), beside Chromium on an empty page. Prints a markdown table; the results are
kept in bench/pytest_html_rows_results.md.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 300.0  # seconds Chromium is given a page


def render_seconds(chromium: str, page: Path, rounds: int) -> float | None:
    """The best wall time of `rounds` renders, or None where none finished within TIMEOUT."""
    best: float | None = None
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as profile:
            start = time.perf_counter()
            try:
                subprocess.run(
                    [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                     "--virtual-time-budget=30000", "--window-size=1366,900", "--host-resolver-rules=MAP * ~NOTFOUND",
                     "--dump-dom", page.as_uri()],
                    check=True, capture_output=True, timeout=TIMEOUT,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                continue
            took = time.perf_counter() - start
            best = took if best is None else min(best, took)
    return best


def row_sizes(page: Path) -> list[int]:
    """The bytes of the msprobe extra of each row, from pytest-html's data in its page."""
    blob = re.search(r'data-jsonblob="([^"]*)"', page.read_text(encoding="utf-8"))
    if blob is None:
        return []
    tests = json.loads(html.unescape(blob.group(1)))["tests"]
    extras = [extra for reports in tests.values() for report in reports for extra in report["extras"]]
    return [len(extra["content"].encode()) for extra in extras if extra["name"] == "msprobe"]


def run(folder: Path, failures: int) -> tuple[int, int]:
    """The run's pytest.html and report.html sizes, in bytes."""
    shutil.copytree(ROOT / "examples" / "pt_tensor_L1", folder / "dump")
    dump = folder / "dump" / "dump.json"
    document = json.loads(dump.read_text())
    matmul = document["data"]["Torch.matmul.1.forward"]
    document["data"].update({f"Torch.matmul.{k}.forward": matmul for k in range(2, 2 + failures - 6)})
    dump.write_text(json.dumps(document))
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--msprobe-dump", str(dump),
         "--msprobe-device", "recorded", "--msprobe-out", str(folder / "out"), "--html", str(folder / "pytest.html"),
         "--msprobe-html", str(folder / "report.html")],
        cwd=folder, capture_output=True, check=False,
    )  # fmt: skip
    return (folder / "pytest.html").stat().st_size, (folder / "report.html").stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", type=int, nargs="+", default=[68, 200])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("headless Chromium is not installed (Debian's chromium package)")
    with tempfile.TemporaryDirectory() as scratch:
        empty = Path(scratch) / "empty.html"
        empty.write_text("<!doctype html><title>empty</title>")
        print(
            f"Chromium on an empty page: {render_seconds(chromium, empty, args.rounds):.2f} s (best of {args.rounds})"
        )
        print("\n| failing items | pytest.html | its msprobe rows | report.html | Chromium renders pytest.html |")
        print("|---|---|---|---|---|")
        for failures in args.failures:
            folder = Path(scratch) / f"n{failures}"
            folder.mkdir()
            theirs, ours = run(folder, failures)
            took = render_seconds(chromium, folder / "pytest.html", args.rounds)
            shown = f"{took:.2f} s" if took is not None else f"not within {TIMEOUT:.0f} s"
            rows = row_sizes(folder / "pytest.html")
            sizes = (
                f"{min(rows) / 1e3:.1f}-{max(rows) / 1e3:.1f} kB, mean {sum(rows) / len(rows) / 1e3:.1f}"
                if rows
                else ""
            )
            print(f"| {failures} | {theirs / 2**20:.2f} MiB | {sizes} | {ours / 2**20:.2f} MiB | {shown} |", flush=True)


if __name__ == "__main__":
    main()
