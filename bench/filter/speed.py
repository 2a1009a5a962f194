"""What --msprobe-filter (msprobe's `acc_check -f`) saves: a whole run with it over the same run without.

The dump: bench/filter/make_dump.py's statistics dump of a 24-layer LLaMA-style decoder written by
msprobe 26.2.0 (git-ignored, bench/filter/dumps/llama24/: write it first). Each command in a fresh
process in the work dir, with and without the option in turn, so that a drift of the machine's
speed moves both; the ratio is taken pair by pair:

    python -m pytest -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu --msprobe-out OUT
        [--msprobe-filter]

The table gives wall and CPU seconds (user + sys of pytest and its children), the entries each run
compared and those the filter left to another's check (from the run's terminal summary), and whether
both runs gave the same verdict to every entry the filtered run compared (their result rows). Below
it: the same command with --collect-only (what a run costs before any check), and the share of the
unfiltered run's test time (pytest's durations, from --junitxml) that the filtered run's left-out
entries took: what the filter can save, read inside one run, which a loaded machine moves less than
the difference of two runs.

    python -m bench.filter.speed [--dump PATH] [--repeats 3] [--warmup 1] [--work DIR] [--keep]

run from the repository root with the interpreter that has pytest-msprobe installed; prints a markdown
table and writes it to bench/filter/results_speed.md (--results to change).
"""

from __future__ import annotations

import argparse
import csv
import re
import shlex
import statistics
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.timing.collect import ROOT, clean_env, load, machine, measure
from bench.timing.workdir import work_dir

DUMP = Path(__file__).resolve().parent / "dumps" / "llama24" / "dump.json"
SIDES = ("without", "with")
FILTERED = "not checked (--msprobe-filter)"


@dataclass
class Runs:
    wall: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SIDES})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SIDES})
    counts: dict[str, str] = field(default_factory=dict)  # the terminal's count lines
    verdicts: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)  # API -> (forward, backward)
    filtered: dict[str, int] = field(default_factory=dict)  # the filtered run's stood-for entries, by API
    stood_for: set[str] = field(default_factory=set)  # those entries' names
    shares: list[float] = field(default_factory=list)  # their share of the unfiltered run's test time
    collect_cpu: list[float] = field(default_factory=list)  # pytest --collect-only: what no check costs

    def ratios(self, kind: str) -> list[float]:
        runs = self.wall if kind == "wall" else self.cpu
        return [w / o for o, w in zip(runs["without"], runs["with"])]


def command(python: str, dump: Path, out: Path, side: str) -> list[str]:
    base = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--msprobe-dump", str(dump)]
    return [
        *base,
        "--msprobe-device",
        "cpu",
        "--msprobe-out",
        str(out),
        *(["--msprobe-filter"] if side == "with" else ["--junitxml", str(out / "junit.xml")]),
    ]


def counts(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if re.match(r"(forward|backward) +\d+ pass", line))


def result_rows(out: Path) -> list[dict[str, str]]:
    (path,) = out.glob("accuracy_checking_result_*.csv")
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return list(csv.DictReader(handle))


def verdicts(rows: list[dict[str, str]]) -> dict[str, tuple[str, str]]:
    return {row["API Name"]: (row["Forward Test Success"], row["Backward Test Success"]) for row in rows}


def stood_for(rows: list[dict[str, str]]) -> set[str]:
    """The entries the filtered run left to another's check: its rows' forward and backward Messages."""
    found = set()
    for row in rows:
        directions = [d for d in ("forward", "backward") if row[f"{d.capitalize()} Test Success"]]
        message = row["Message"]
        parts = re.split(r" \| backward: ", message.removeprefix("forward: ")) if len(directions) == 2 else [message]
        found |= {f"{row['API Name']}.{d}" for d, part in zip(directions, parts) if part.startswith(FILTERED)}
    return found


def by_api(entries: set[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for entry in entries:
        api = entry.rsplit(".", 2)[0]
        found[api] = found.get(api, 0) + 1
    return dict(sorted(found.items(), key=lambda item: -item[1]))


def test_times(junit: Path) -> dict[str, float]:
    """pytest's duration of each test (its setup, call and teardown) from a JUnit XML, by test name."""
    return {case.get("name", ""): float(case.get("time", 0)) for case in ET.parse(junit).iter("testcase")}


def bench(dump: Path, work: Path, python: str, repeats: int, warmup: int) -> Runs:
    runs, env = Runs(), clean_env()
    for number in range(-warmup, repeats):  # the warm-up pairs (file cache) are not counted
        for side in reversed(SIDES):  # the filtered run first: which entries it leaves out
            out = work / f"{side}_{number}"
            log = out.with_suffix(".log")
            wall, _, cpu, code, _ = measure(command(python, dump, out, side), work, env, log)
            if code not in (0, 1):
                raise SystemExit(f"{side}: exit {code}\n{log.read_text()[-3000:]}")
            if number >= 0:
                runs.wall[side].append(wall)
                runs.cpu[side].append(cpu)
            runs.counts[side] = counts(log.read_text(errors="replace"))
            rows = result_rows(out)
            runs.verdicts[side] = verdicts(rows)
            if side == "with":
                runs.stood_for = stood_for(rows)
                runs.filtered = by_api(runs.stood_for)
            elif runs.stood_for and number >= 0:
                times = test_times(out / "junit.xml")
                runs.shares.append(sum(times.get(e, 0.0) for e in runs.stood_for) / sum(times.values()))
            print(f"{side} run {number}: {wall:.1f} s ({cpu:.1f} CPU s)", file=sys.stderr)
        collect = [*command(python, dump, work / "collect", "without"), "--collect-only"]
        _, _, cpu, _, _ = measure(collect, work, env, work / "collect.log")
        if number >= 0:
            runs.collect_cpu.append(cpu)
    return runs


def same_verdicts(runs: Runs) -> str:
    """Whether every entry the filtered run compared has the unfiltered run's verdict."""
    filtered, whole = runs.verdicts["with"], runs.verdicts["without"]
    differ = [
        api
        for api, statuses in filtered.items()
        for direction, status in enumerate(statuses)
        if status not in ("SKIP", "") and whole.get(api, ("", ""))[direction] != status
    ]
    return "yes" if not differ else f"no: {', '.join(differ[:5])}"


def table(runs: Runs) -> str:
    lines = [
        "| run | wall s, median (best) | CPU s, median | entries (the terminal's counts) |",
        "|---|---:|---:|---|",
    ]
    for side in SIDES:
        wall, cpu = runs.wall[side], runs.cpu[side]
        label = "--msprobe-filter" if side == "with" else "without"
        lines.append(
            f"| {label} | {statistics.median(wall):.1f} ({min(wall):.1f}) | {statistics.median(cpu):.1f} "
            f"| {runs.counts[side]} |"
        )
    wall, cpu = runs.ratios("wall"), runs.ratios("cpu")
    collect = statistics.median(runs.collect_cpu)
    checking = [statistics.median(runs.cpu[side]) - collect for side in SIDES]
    filtered = ", ".join(f"{api} {n}" for api, n in runs.filtered.items())
    lines += [
        "",
        f"The same command with `--collect-only` (Python, pytest, torch's import, the dump read; no entry checked): "
        f"{collect:.1f} CPU s, median. Past it, the checks: {checking[0]:.1f} CPU s without, {checking[1]:.1f} with "
        f"({checking[1] / checking[0]:.3f}x). The entries the filter left to another's check, by API: {filtered}; "
        f"in the runs without it, their tests took {statistics.median(runs.shares):.1%} of the time of all tests "
        f"(median; {min(runs.shares):.1%} .. {max(runs.shares):.1%}; pytest's durations, --junitxml), what the "
        "filter can save of the checks.",
        "",
        f"With over without, pair by pair: wall {statistics.median(wall):.3f}x ({min(wall):.3f} .. {max(wall):.3f}), "
        f"CPU {statistics.median(cpu):.3f}x ({min(cpu):.3f} .. {max(cpu):.3f}). The entries the filtered run "
        f"compared have the whole run's verdicts: {same_verdicts(runs)}.",
    ]
    return "\n".join(lines)


def write_results(path: Path, dump: Path, text: str, args: argparse.Namespace, loads: str) -> None:
    when = time.strftime("%Y-%m-%d %H:%M")
    lines = [
        "# What --msprobe-filter saves: a whole run with it over the same run without",
        "",
        f"Written by `{shlex.join(['python', '-m', 'bench.filter.speed', *sys.argv[1:]])}` on {when}; machine: "
        f"{machine()}; 1-minute load average before / after: {loads}.",
        "",
        f"The dump: `{display(dump)}` (bench/filter/make_dump.py: a 24-layer LLaMA-style decoder, fp32, one training "
        "step, statistics, L1, msprobe 26.2.0). Each command in a fresh process (`python -m pytest -q -p "
        "no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu --msprobe-out OUT [--msprobe-filter]`), with "
        f"and without in turn, {args.repeats} pairs after {args.warmup} not counted; CPU = user + sys of the process "
        "and its children; the run without also writes a JUnit XML for its tests' durations.",
        "",
        text,
        "",
        "Why so few: msprobe's `-f` (and so the option) takes only Max and Min out of a call before comparing; "
        "a statistics dump records Mean and Norm too, which tell apart any two calls on different values. What "
        "groups is a call on the same values in every layer (the rotary cos and sin this model, as transformers' "
        "LLaMA up to 4.35, computes again in each) or whose Mean and Norm are the same (its softmax over scores "
        "masked with finfo.min: Mean -inf, Norm inf in every layer). The saving is the share of the checks' time "
        "those calls take. On a machine with other work on its cores the wall times and the ratio of two runs "
        "move by more than that share; the share read inside one run moves less.",
        "",
    ]
    path.write_text("\n".join(lines))


def display(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", default=str(DUMP), help="the statistics dump.json (default: make_dump.py's)")
    parser.add_argument("--repeats", type=int, default=3, help="pairs of runs (without, with) counted")
    parser.add_argument("--warmup", type=int, default=1, help="pairs run first and not counted")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with pytest-msprobe installed")
    parser.add_argument("--work", help="work dir (default: a new temp dir, removed unless --keep)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--results", default=str(Path(__file__).with_name("results_speed.md")), help="markdown file ('' for none)"
    )
    args = parser.parse_args(argv)
    dump = Path(args.dump).resolve()
    if not dump.is_file():
        raise SystemExit(f"{dump}: no dump; write it with /work/msprobe-venv/bin/python bench/filter/make_dump.py")
    with work_dir(args.work, args.keep, "bench_filter_") as work:
        before = load()
        runs = bench(dump, work, args.python, args.repeats, args.warmup)
        text = table(runs)
        print("\n" + text + "\n")
        if args.results:
            write_results(Path(args.results), dump, text, args, f"{before} / {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
