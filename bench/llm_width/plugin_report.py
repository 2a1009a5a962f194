"""The plugin's own run on an LLM-width dump, as markdown: outcomes, every output that is not a pass, time.

    python -m bench.llm_width.plugin_report OUT_DIR TIME_FILE PYTEST_OUTPUT --title T --command C [--bare-md F]

OUT_DIR is the run's --msprobe-out (its accuracy_checking_details_*.csv and _result_*.csv), TIME_FILE
what `/usr/bin/time -v` wrote, PYTEST_OUTPUT pytest's terminal output (its last line: the outcome
counts). It prints a markdown section: the counts by outcome (pytest's items, the result CSV's APIs and
the details CSV's outputs), each output that is not a pass with its Message (where it names the ratio
to the budget and the elements over, they are pulled out into their own columns), the passes nearest
their budget, and wall, CPU and
peak RSS, against the bare run's sums (bare.py's results file) where --bare-md is given.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import Counter
from pathlib import Path

RATIO = re.compile(r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)x (?:its|the) budget|at (\d+(?:\.\d+)?(?:e[-+]?\d+)?) of its budget")
NEAR = re.compile(r"worst element at (\d+(?:\.\d+)?(?:e[-+]?\d+)?) of its budget")
OVER = re.compile(r"([\d,]+) (?:of [\d,]+ )?elements? (?:over|above)")


def newest(folder: Path, prefix: str) -> Path:
    found = sorted(folder.glob(f"{prefix}*.csv"))
    if not found:
        raise SystemExit(f"{folder}: no {prefix}*.csv")
    return found[-1]


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8-sig") as f:
        return list(csv.DictReader(f))


def time_v(path: Path) -> dict[str, float]:
    wanted = {
        "User time (seconds)": "user",
        "System time (seconds)": "sys",
        "Maximum resident set size (kbytes)": "rss_kb",
        "Elapsed (wall clock) time (h:mm:ss or m:ss)": "wall",
    }
    got: dict[str, float] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.strip().rpartition(": ")
        if key in wanted:
            if wanted[key] == "wall":
                seconds = 0.0
                for part in value.split(":"):
                    seconds = seconds * 60 + float(part)
                got["wall"] = seconds
            else:
                got[wanted[key]] = float(value)
    return got


def bare_sums(path: Path) -> tuple[float, float, float] | None:
    """(wall, CPU, peak RSS GiB) of bare.py's results file."""
    text = path.read_text()
    sums = re.search(r"entries run: ([\d.]+) s wall, ([\d.]+) s CPU", text)
    peak = re.search(r"Peak RSS of the process: ([\d.]+) GiB", text)
    if not (sums and peak):
        return None
    return float(sums[1]), float(sums[2]), float(peak[1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("time_file", type=Path)
    parser.add_argument("pytest_output", type=Path)
    parser.add_argument("--title", required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--bare-md", type=Path)
    args = parser.parse_args(argv)
    details = rows(newest(args.out, "accuracy_checking_details_"))
    results = rows(newest(args.out, "accuracy_checking_result_"))
    summary = [line for line in args.pytest_output.read_text().splitlines() if line.strip()][-1:]
    t = time_v(args.time_file)
    cpu = t.get("user", 0) + t.get("sys", 0)
    out = [
        f"## {args.title}",
        "",
        f"`{args.command}`",
        "",
        f"pytest: `{summary[0].strip('= ') if summary else '?'}`",
        "",
        f"Wall {t.get('wall', 0):.0f} s, CPU {cpu:.0f} s (user {t.get('user', 0):.0f}, system "
        f"{t.get('sys', 0):.0f}), peak RSS {t.get('rss_kb', 0) / 2**20:.2f} GiB (/usr/bin/time -v).",
    ]
    if args.bare_md and (bare := bare_sums(args.bare_md)):
        wall, bare_cpu, peak = bare
        out.append(
            f"Against the bare work ({args.bare_md.name}: {wall:.0f} s wall, {bare_cpu:.0f} s CPU, peak "
            f"{peak:.2f} GiB): wall {t.get('wall', 0) / wall:.2f}x, CPU {cpu / bare_cpu:.2f}x, peak RSS "
            f"{t.get('rss_kb', 0) / 2**20 / peak:.2f}x."
        )
    by_api = Counter()
    for r in results:
        for key in ("Forward Test Success", "Backward Test Success"):
            if r.get(key):
                by_api[f"{key.split()[0].lower()} {r[key]}"] += 1
    by_output = Counter(r["Status"] for r in details)
    out += [
        "",
        "Result CSV (per API call and direction): " + ", ".join(f"{k}: {v}" for k, v in sorted(by_api.items())),
        "",
        "Details CSV (per output): " + ", ".join(f"{k}: {v}" for k, v in sorted(by_output.items())),
        "",
    ]
    flagged = [r for r in details if r["Status"] not in ("pass",)]
    if flagged:
        out += [
            "| entry output | status | shape | Cosine | MaxAbsErr | ratio to budget | elements over | Message |",
            "|---|---|---|---|---|---|---|---|",
        ]
        order = {"error": 0, "warning": 1}
        for r in sorted(flagged, key=lambda r: order.get(r["Status"], 2)):
            message = r["Message"].replace("|", "/").replace("\n", " ")
            ratio = RATIO.search(message)
            over = OVER.search(message)
            out.append(
                f"| {r['API Name']} | {r['Status']} | {r['Shape']} | {r['Cosine']} | {r['MaxAbsErr']} | "
                f"{(ratio[1] or ratio[2]) if ratio else ''} | {over[1] if over else ''} | {message} |"
            )
    else:
        out.append("Every output a pass.")
    nearest = sorted(
        ((float(m[1]), r["API Name"]) for r in details if r["Status"] == "pass" and (m := NEAR.search(r["Message"]))),
        reverse=True,
    )[:8]
    if nearest:
        out += ["", "Passes nearest their budget: " + ", ".join(f"{name} at {share:g}" for share, name in nearest)]
    print("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
