"""`python -m pytest_msprobe.report RESULT.csv... --html PATH`: the HTML report of an existing run.

The details CSV beside each result CSV (the same timestamp) and, where it is there, the journal
give the rows; the page is reports/html.py's, the one --msprobe-html writes at the end of a run.
A missing file or one that is not a result CSV is an error naming it (exit status 2). Where a pair's
run stopped early (its manifest says so), the page and the lines printed say the run was partial and
how many entries it never checked, as its terminal did. No pytest.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .untrusted import printable


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_msprobe.report",
        description="Write the HTML report of pytest-msprobe CSV pairs (a run, or its shards).",
    )
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULT_CSV", help="an accuracy_checking_result CSV")
    parser.add_argument("--html", required=True, type=Path, metavar="PATH", help="the HTML file to write")
    args = parser.parse_args(argv)
    from .reports import html
    from .reports.csv_files import ReportError
    from .reports.html_figures import PlottingMissing

    try:
        report = html.from_pairs(args.results)
        path = html.write(args.html, report)
    except (ReportError, PlottingMissing) as exc:
        print(printable(f"pytest_msprobe.report: {exc}"), file=sys.stderr)
        return 2
    except OSError as exc:
        print(printable(f"pytest_msprobe.report: {args.html}: cannot be written: {exc}"), file=sys.stderr)
        return 2
    for line in report.stopped:  # a pair of a run that stopped early: the page is partial, and says so
        print(printable(line))
    print(printable(f"html: {path} ({len(report.entries)} entries{', a partial run' if report.stopped else ''})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
