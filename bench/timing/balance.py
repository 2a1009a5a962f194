"""`--dist load` against `--dist worksteal` over a real dump whose entries differ 10^4x in cost.

pytest-xdist hands items out two ways: `load` sends each worker chunks of consecutive items and
more as it runs low, `worksteal` splits them evenly up front and lets an idle worker take half
of another's queue. The ResNet step (tests/data/public/gpu_resnet, statistics, random inputs of
the recorded shapes) has 387 entries from a 7x7 conv's backward at batch 32 (seconds) down to a
reshape (a millisecond), in dump order: the heavy ones cluster. Each command in a fresh process,
the kinds interleaved, --repeats times:

- serial:          python -m pytest -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu
                   --msprobe-mode random --msprobe-out OUT
- -n N load:       the same with -n N --dist load (xdist's default)
- -n N worksteal:  the same with -n N --dist worksteal

For each run: the wall time, the CPU time (user + sys, workers included), and from
bench/timing/process_cpu.py each worker's entries, CPU and the moment it ended; the idle tail is
the time from the first worker's end to the last's, the part of the run where a core had
nothing to do. Rows of every run must be equal.

    python -m bench.timing.balance [--dump tests/data/public/gpu_resnet] [--workers 2] [--repeats 1]

run from the repository root with the interpreter that has pytest-msprobe installed; prints a
markdown table and writes it to bench/timing/results_balance.md (--results to change).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.timing.collect import ROOT, load, machine, measure
from bench.timing.speed import counts, pytest_outcome
from bench.timing.workdir import work_dir
from bench.timing.xdist import PROCESS_CPU, api_entries_only, kind_env, result_rows

RESNET = ROOT / "tests" / "data" / "public" / "gpu_resnet"
MODES = ("load", "worksteal")


def commands(python: str, dump: Path, out: Path, workers: int) -> dict[str, list[str]]:
    run = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", PROCESS_CPU]
    run += ["--msprobe-dump", str(dump), "--msprobe-device", "cpu", "--msprobe-mode", "random"]
    kinds = {"serial": [*run, "--msprobe-out", str(out / "serial")]}
    for mode in MODES:
        kinds[f"-n {workers} {mode}"] = [*run, "--msprobe-out", str(out / mode), "-n", str(workers), "--dist", mode]
    return kinds


def workers_of(split: Path) -> list[dict]:
    if not split.exists():
        return []
    lines = [json.loads(line) for line in split.read_text().splitlines() if line.strip()]
    return sorted((line for line in lines if line["process"].startswith("gw")), key=lambda line: line["process"])


def bench(dump: Path, work: Path, args) -> dict[str, list[dict]]:
    out = work / "out"
    cmds = commands(args.python, dump, out, args.workers)
    runs: dict[str, list[dict]] = {kind: [] for kind in cmds}
    for r in range(args.repeats):
        for kind, cmd in cmds.items():  # interleaved, so drift in the load hits every kind
            if out.exists():
                shutil.rmtree(out)
            out.mkdir()
            split = work / "process_cpu.jsonl"
            split.unlink(missing_ok=True)
            before = load()
            start = time.time()
            env = kind_env(kind, args.msprobe_path, split)
            wall, _, cpu, rc, tail = measure(cmd, work, env, work / f"{kind}.log")
            outcome = pytest_outcome(tail)
            if rc not in (0, 1):
                raise SystemExit(f"{kind}: exit {rc}:\n{tail}")
            folder = out / ("serial" if kind == "serial" else kind.rsplit(" ", 1)[1])
            workers = workers_of(split)
            ends = [w["end"] - start for w in workers]
            run = {
                "wall": wall,
                "cpu": cpu,
                "load": f"{before}/{load()}",
                "outcome": outcome,
                "rows": sorted(result_rows(folder)),
                "workers": workers,
                "idle_tail": max(ends) - min(ends) if ends else 0.0,
            }
            runs[kind].append(run)
            print(
                f"  {kind:14s} run {r + 1}: {wall:7.2f} s wall {cpu:7.2f} s CPU  idle tail "
                f"{run['idle_tail']:6.2f} s  load {run['load']}  {outcome}",
                flush=True,
            )
    return runs


def table(label: str, entries: int, runs: dict[str, list[dict]]) -> str:
    lines = [
        "| dump | entries | kind | run | wall s | CPU s | per worker: entries, CPU s | idle tail s | load before/after |",
        "|---|---:|---|---:|---:|---:|---|---:|---|",
    ]
    for kind, values in runs.items():
        for i, run in enumerate(values, 1):
            per_worker = "; ".join(f"{w['process']} {w['entries']}, {w['cpu']:.1f}" for w in run["workers"]) or "-"
            tail = f"{run['idle_tail']:.1f}" if run["workers"] else "-"
            lines.append(
                f"| {label} | {entries} | {kind} | {i} | {run['wall']:.1f} | {run['cpu']:.1f} | {per_worker} | "
                f"{tail} | {run['load']} |"
            )
    serial = min(run["wall"] for run in runs["serial"])
    lines.append("")
    for kind, values in runs.items():
        if kind != "serial":
            best = min(run["wall"] for run in values)
            tails = ", ".join(f"{run['idle_tail']:.1f}" for run in values)
            lines.append(f"- {kind}: best {best:.1f} s, serial / it {serial / best:.2f}x, idle tails {tails} s")
    tables = [run["rows"] for values in runs.values() for run in values]
    lines.append(f"- result rows of every run equal: {'yes' if all(t == tables[0] for t in tables) else 'NO'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", default=str(RESNET), help="folder of a dump.json")
    parser.add_argument("--workers", type=int, default=2, help="-n of the xdist runs")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--python", default=sys.executable, help="the interpreter with pytest-msprobe installed")
    parser.add_argument("--msprobe-path", help="PYTHONPATH for the runs, e.g. a frozen copy of the package")
    parser.add_argument("--work", help="work dir (default: a new temp dir, removed unless --keep)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--results",
        default=str(Path(__file__).with_name("results_balance.md")),
        help="markdown file for the table ('' for none)",
    )
    args = parser.parse_args(argv)
    with work_dir(args.work, args.keep, "bench_balance_") as work:
        source = Path(args.dump).resolve()
        dump = api_entries_only(source, work / f"{source.name}_apis") / "dump.json"
        entries, apis = counts(dump)
        label = f"{source.name}, all {apis} calls"
        print(f"# {label}: {dump} ({entries} entries)", flush=True)
        load_before = load()
        runs = bench(dump, work, args)
        text = table(label, entries, runs)
        print("\n" + text + "\n")
        if args.results:
            write_results(Path(args.results), args, text, runs, f"{load_before} / {load()}")
    return 0


def write_results(path: Path, args, text: str, runs: dict[str, list[dict]], loads: str) -> None:
    when = time.strftime("%Y-%m-%d %H:%M")
    outcomes = "; ".join(f"{kind}: {values[-1]['outcome']}" for kind, values in runs.items())
    lines = [
        "# `--dist load` against `--dist worksteal`",
        "",
        f"Written by `python -m bench.timing.balance {shlex.join(sys.argv[1:])}`".rstrip() + f" on {when}; machine: "
        f"{machine()}, {len(os.sched_getaffinity(0))} of them in the bench's CPU affinity; 1-minute load "
        f"average before / after the whole bench: {loads}.",
        "",
        text,
        "",
        f"Outcomes of the last runs: {outcomes}",
        "",
    ]
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
