"""The tables of results_where.md from where.py's JSON files: the time by phase, per entry, per standard.

    python -m bench.llm_width.where_report BASIC.json DTYPE.json [--top 25]

Prints markdown: the sums by phase of each run (CPU and wall), then one table per run of every entry's
CPU seconds by phase (entries in dump order), then the entries where dtype costs most over basic.

With two runs, also dtype over basic as read inside the dtype run: its standard's own work (budget runs
and verdict, less basic's) over the rest of the same run. Both sides of that ratio ran in one process at
one time, so it does not move with the machine's speed from one run to the next (a shared host's CPU
seconds for the same work differ by up to 25% between runs minutes apart: results_plugin.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.llm_width.where import PHASES


def cpu(phases: dict[str, list[float]], phase: str) -> float:
    return phases.get(phase, [0.0, 0.0])[1]


def wall(phases: dict[str, list[float]], phase: str) -> float:
    return phases.get(phase, [0.0, 0.0])[0]


def total(phases: dict[str, list[float]], at: int = 1) -> float:
    return sum(v[at] for v in phases.values())


def sums(run: dict[str, Any]) -> dict[str, list[float]]:
    found = {p: [0.0, 0.0] for p in PHASES}
    for phases in run["entries"].values():
        for phase, (w, c) in phases.items():
            found[phase][0] += w
            found[phase][1] += c
    return found


STANDARD_OWN = ("budget runs", "verdict")  # what the dtype standard adds; every other phase both runs do alike


def within_run(a: dict[str, list[float]], b: dict[str, list[float]]) -> tuple[float, float]:
    """(b's standard's own CPU s over a's, b's CPU over b's less that): b over a read inside run b."""
    extra = sum(b[p][1] - a[p][1] for p in STANDARD_OWN)
    whole = total(b)
    return extra, whole / (whole - extra)


def header(run: dict[str, Any]) -> str:
    return (
        f"`{run['command']}` ({run['when']}, load average {run['load1']:.2f} at the end): pytest exit "
        f"{run['exit']}; wall {run['wall']:.1f} s, CPU {run['cpu']:.1f} s (user {run['user']:.1f}, system "
        f"{run['system']:.1f}), peak RSS {run['peak_rss_gib']:.2f} GiB"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    runs = [json.loads(p.read_text()) for p in args.runs]
    out = [f"- {r['standard']}: {header(r)}" for r in runs]
    out += [
        "",
        "## By phase (sum over the entries; CPU s / wall s)",
        "",
        "| phase | " + " | ".join(r["standard"] for r in runs) + " |",
        "|---|" + "---:|" * len(runs),
    ]
    totals = [sums(r) for r in runs]
    for phase in PHASES:
        out.append(f"| {phase} | " + " | ".join(f"{t[phase][1]:.1f} / {t[phase][0]:.1f}" for t in totals) + " |")
    out.append(
        "| **all** | "
        + " | ".join(f"**{sum(v[1] for v in t.values()):.1f} / {sum(v[0] for v in t.values()):.1f}**" for t in totals)
        + " |"
    )
    if len(runs) == 2:
        a, b = runs
        extra, ratio = within_run(totals[0], totals[1])
        out += [
            "",
            f"{b['standard']} over {a['standard']} inside the {b['standard']} run: its budget runs and verdict "
            f"{extra:.1f} s of CPU more than {a['standard']}'s, **{ratio:.3f}x** the rest of that run; between "
            f"the runs' totals {total(totals[1]) / total(totals[0]):.3f}x.",
        ]
        diffs = []
        for entry, phases in b["entries"].items():
            other = a["entries"].get(entry, {})
            diffs.append((total(phases) - total(other), entry, phases, other))
        diffs.sort(reverse=True)
        out += [
            "",
            f"## Where {b['standard']} costs more than {a['standard']}: the {args.top} largest, CPU s",
            "",
            f"| entry | {a['standard']} | {b['standard']} | more | of it: budget runs | verdict | other phases |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for more, entry, phases, other in diffs[: args.top]:
            runs_more = cpu(phases, "budget runs") - cpu(other, "budget runs")
            verdict_more = cpu(phases, "verdict") - cpu(other, "verdict")
            out.append(
                f"| {entry} | {total(other):.2f} | {total(phases):.2f} | {more:+.2f} | {runs_more:+.2f} | "
                f"{verdict_more:+.2f} | {more - runs_more - verdict_more:+.2f} |"
            )
    for run in runs:
        out += [
            "",
            f"## Per entry, {run['standard']}: CPU s by phase",
            "",
            "| entry | " + " | ".join(PHASES) + " | all (wall) |",
            "|---|" + "---:|" * (len(PHASES) + 1),
        ]
        for entry, phases in run["entries"].items():
            cells = " | ".join(f"{cpu(phases, p):.2f}" for p in PHASES)
            out.append(f"| {entry} | {cells} | {total(phases):.2f} ({total(phases, 0):.2f}) |")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
