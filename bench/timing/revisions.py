"""A run without new options, two revisions of the package side by side: is the change slower?

The package of a git revision (--base, default main) and the package of the working tree
(the change) each run the same command, in fresh processes, interleaved, on the same dumps:

    python -m pytest -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu --msprobe-out OUT

with PYTHONPATH pointing at the revision's copy of pytest_msprobe/ (checked: the plugin
imports from there). A whole run is mostly Python, pytest and torch starting, and on a busy
machine its time varies by more than the change could cost; so each revision also times,
in one process, what the change touches per entry (ENTRY_SCRIPT: the check, the result's
round trip to a dict as under xdist, its CSV rows, then the terminal summary), every entry
--rounds times, keeping each entry's best. The dumps:

- examples/pt_tensor_L1 with its stack.json (66 entries, 6 failing: the change reads
  stack.json once and names the call sites of the failures);
- the same entries renumbered into a dump of --apis API calls (bench_speed.replicate_dump),
  with a stack.json giving each renumbered entry its original's frames.

    python -m bench.timing.revisions [--base main] [--apis 500] [--repeats 5]

prints a markdown table and writes it to bench/timing/results_revisions.md (--results to change).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.timing.collect import ROOT, clean_env, load, machine, measure
from bench.timing.speed import EXAMPLE, replicate_dump
from bench.timing.workdir import work_dir


def export(revision: str | None, target: Path) -> Path:
    """pytest_msprobe/ of a git revision (None: the working tree) under target; returns target."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    if revision is None:
        shutil.copytree(
            ROOT / "pytest_msprobe", target / "pytest_msprobe", ignore=shutil.ignore_patterns("__pycache__")
        )
    else:
        archive = subprocess.run(
            ["git", "archive", revision, "pytest_msprobe"], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def replicated_stack(dump: Path) -> None:
    """stack.json beside a replicated dump: each renumbered forward entry with its original's frames."""
    original = json.loads((EXAMPLE / "stack.json").read_text())
    frames = {name: stack for names, stack in original.values() for name in names}
    stride: dict[str, int] = {}
    for name in json.loads((EXAMPLE / "dump.json").read_text())["data"]:
        head, index, _ = name.rsplit(".", 2)
        stride[head] = max(stride.get(head, 0), int(index) + 1)
    out = {}
    for name in json.loads(dump.read_text())["data"]:
        head, index, direction = name.rsplit(".", 2)
        source = f"{head}.{int(index) % stride[head]}.{direction}"
        if direction == "forward" and source in frames:
            out[str(len(out))] = [[name], frames[source]]
    (dump.parent / "stack.json").write_text(json.dumps(out, indent=1))


# Run in a child with PYTHONPATH at one revision: what a run does per entry, in that revision's code.
ENTRY_SCRIPT = """
import cProfile, inspect, pstats, sys, time
from pathlib import Path
import pytest_msprobe.frameworks.torch_engine  # torch, once, before the clock
from pytest_msprobe.reports import summary
from pytest_msprobe.checking.check import Checker
from pytest_msprobe.dumps.dump import parse_entry_name, read_dump
from pytest_msprobe.frameworks import RunOptions, Tested
from pytest_msprobe.reports.csv_files import CsvWriter
from pytest_msprobe.results import EntryResult
from pytest_msprobe.judging.standards.basic import BasicStandard

pytest_msprobe.frameworks.torch_engine.torch.set_num_threads(1)
dump = read_dump(Path(sys.argv[1]))
rounds = int(sys.argv[2])
names = [(i, parse_entry_name(n)) for i, n in enumerate(dump.entries) if parse_entry_name(n)]
positional = "position" in inspect.signature(Checker.check).parameters
best = [float("inf")] * len(names)
best_summary = float("inf")


def one_round(clock):
    global best_summary
    checker = Checker(RunOptions("cpu", Tested.DEVICE, "auto", 1234), BasicStandard())
    writer = CsvWriter(Path(sys.argv[3]))
    results = []
    for k, (position, name) in enumerate(names):
        start = time.perf_counter()
        result = checker.check(dump, name, position) if positional else checker.check(dump, name)
        result = EntryResult.from_dict(result.to_dict())
        writer.write_api(result.api, result, None)
        if clock:
            best[k] = min(best[k], time.perf_counter() - start)
        results.append(result)
    writer.close()
    start = time.perf_counter()
    summary.summary_lines(results)
    if clock:
        best_summary = min(best_summary, time.perf_counter() - start)


for _ in range(rounds):
    one_round(True)
profile = cProfile.Profile()  # Python function calls: what the code does, whatever the machine's load
profile.enable()
one_round(False)
profile.disable()
print("RESULT", sum(best), best_summary, pstats.Stats(profile).total_calls / len(names))
"""


def per_entry(work: Path, packages: dict[str, Path], dump: Path, rounds: int) -> dict[str, tuple[float, float]]:
    """Per revision: the sum over the dump's entries of each one's best time plus the summary's
    (seconds), and the Python function calls of a round per entry (ENTRY_SCRIPT)."""
    script = work / "entries.py"
    script.write_text(ENTRY_SCRIPT)
    found = {}
    for label, folder in packages.items():
        csv = work / "entries" / label.split()[0] / "accuracy_checking_result_1.csv"
        csv.parent.mkdir(parents=True, exist_ok=True)
        for stale in csv.parent.iterdir():
            stale.unlink()
        done = subprocess.run(
            [sys.executable, str(script), str(dump), str(rounds), str(csv)],
            env=clean_env(str(folder)),
            cwd=work,
            capture_output=True,
            text=True,
        )
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        if done.returncode != 0 or not last.startswith("RESULT"):
            raise SystemExit(f"{label}: per-entry timing failed:\n{done.stderr[-2000:]}")
        entries, summary_s, calls = map(float, last.split()[1:])
        found[label] = (entries + summary_s, calls)
        print(
            f"  per entry, {label}: {entries:.4f} s over the entries + {summary_s:.5f} s summary, "
            f"{calls:.0f} Python calls an entry",
            flush=True,
        )
    return found


def outcome(tail: str) -> str:
    found = re.findall(r"(\d+ (?:failed|passed|skipped))", tail.strip().splitlines()[-1] if tail.strip() else "")
    return ", ".join(found)


def bench(work: Path, base: str, apis: int, repeats: int, rounds: int) -> list[dict]:
    python = sys.executable
    packages = {f"{base} ({rev_of(base)})": export(base, work / "base"), "working tree": export(None, work / "head")}
    for label, folder in packages.items():
        where = subprocess.run(
            [python, "-c", "import pytest_msprobe.plugin as p; print(p.__file__)"],
            env=clean_env(str(folder)),
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        )
        assert where.stdout.strip().startswith(str(folder)), (label, where.stdout)
    example = work / "pt_tensor_L1"
    if example.exists():
        shutil.rmtree(example)
    shutil.copytree(EXAMPLE, example)
    big = replicate_dump(EXAMPLE, work / f"pt_tensor_L1_x{apis}", apis)
    replicated_stack(big)
    dumps = {"pt_tensor_L1": example / "dump.json", f"pt_tensor_L1 x{apis} calls": big}
    rows = []
    for dump_label, dump in dumps.items():
        entries = len(json.loads(dump.read_text())["data"])
        runs: dict[str, list[tuple]] = {label: [] for label in packages}
        outcomes: dict[str, str] = {}
        for r in range(repeats):
            for label, folder in packages.items():  # interleaved, so drift hits both
                out = work / "out" / label.split()[0]
                cmd = [
                    python,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "--msprobe-dump",
                    str(dump),
                    "--msprobe-device",
                    "cpu",
                    "--msprobe-out",
                    str(out),
                ]
                wall, rss, cpu, rc, tail = measure(cmd, work, clean_env(str(folder)), work / "run.log")
                if rc not in (0, 1):
                    raise SystemExit(f"{label} on {dump_label}: exit {rc}\n{tail}")
                outcomes[label] = outcome(tail)
                runs[label].append((wall, cpu, rss))
                print(f"  {dump_label} {label:24s} run {r + 1}: {wall:6.2f} s wall {cpu:6.2f} s CPU", flush=True)
        row = {"dump": dump_label, "entries": entries, "outcomes": outcomes}
        inside = per_entry(work, packages, dump, rounds)
        for key, label in zip(("base", "head"), packages):
            row[f"{key}_s"] = min(v[0] for v in runs[label])
            row[f"{key}_cpu"] = min(v[1] for v in runs[label])
            row[f"{key}_mib"] = max(v[2] for v in runs[label])
            row[f"{key}_entries"], row[f"{key}_calls"] = inside[label]
        rows.append(row)
    return rows


def rev_of(revision: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", revision], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def table(rows: list[dict], base: str) -> str:
    lines = [
        f"| dump | entries | run: {base} s (CPU s, MiB) | run: working tree s (CPU s, MiB) | wall ratio | CPU ratio "
        f"| per entry: {base} s | per entry: working tree s | ratio | Python calls an entry: {base} / working tree |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dump']} | {r['entries']} | {r['base_s']:.2f} ({r['base_cpu']:.2f}, {r['base_mib']:.0f}) "
            f"| {r['head_s']:.2f} ({r['head_cpu']:.2f}, {r['head_mib']:.0f}) "
            f"| {r['head_s'] / r['base_s']:.3f}x | {r['head_cpu'] / r['base_cpu']:.3f}x "
            f"| {r['base_entries']:.4f} | {r['head_entries']:.4f} | {r['head_entries'] / r['base_entries']:.3f}x "
            f"| {r['base_calls']:.0f} / {r['head_calls']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="the git revision to compare with (default main)")
    parser.add_argument("--apis", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5, help="whole runs per revision and dump")
    parser.add_argument("--rounds", type=int, default=20, help="per-entry timing: rounds over the dump")
    parser.add_argument("--work", help="work folder (kept); default a temporary one")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--results",
        default=str(Path(__file__).with_name("results_revisions.md")),
        help="the results file ('' writes none)",
    )
    args = parser.parse_args(argv)
    before = load()
    with work_dir(args.work, args.keep, "bench_revisions_") as work:
        rows = bench(work, args.base, args.apis, args.repeats, args.rounds)
    text = table(rows, args.base)
    print(text)
    lines = [
        "# A run without new options: the base revision against the working tree",
        "",
        f"Written by `python -m bench.timing.revisions --base {args.base} --apis {args.apis} --repeats {args.repeats} "
        f"--rounds {args.rounds}` "
        f"on {time.strftime('%Y-%m-%d %H:%M')}; base {args.base} = {rev_of(args.base)}, working tree on "
        f"{rev_of('HEAD')}; machine: {machine()}; 1-minute load average before / after: {before} / {load()}.",
        "",
        "Each run `python -m pytest -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu --msprobe-out OUT`"
        " in a fresh process, PYTHONPATH at the revision's pytest_msprobe/, the two interleaved; best wall and best "
        f"CPU time (user + sys) of {args.repeats}, highest peak RSS. Per entry: in one process per revision, "
        "each entry's check, its result's round trip through a dict (as under xdist) and its CSV rows, "
        f"best of {args.rounds} rounds for each entry, summed, plus the terminal summary's lines; and the Python "
        "function calls of one more round (cProfile), per entry, which no load on the machine changes:",
        "",
        text,
        "",
        "Outcomes of the last runs (the same for both):",
        "",
        *[f"- {r['dump']}: " + "; ".join(f"{label}: {o}" for label, o in r["outcomes"].items()) for r in rows],
        "",
    ]
    if args.results:
        Path(args.results).write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
