"""Serial against `pytest -n N` over a real tensor dump, and what each worker pays to collect.

On one dump, each command in a fresh process, the kinds interleaved, best of --repeats:

- serial:    python -m pytest -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu --msprobe-out OUT
- -n N:      the same with -n N (pytest-xdist; each worker gets cores/N intra-op threads)
- collect:   python -m pytest --collect-only -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu
             (what every worker does before its first entry: Python, pytest, the plugin, the dump's items)

The dump: the API calls of --dump (default examples/pt_tensor_L1) over and over, renumbered, with
their tensor files copied (bench.timing.speed.replicate_dump), --apis calls in all; fewer calls than the
dump has take its first --apis calls, and --apis 0 takes the dump as it is, every call once
(tests/data/public/gpu_resnet --apis 0: a real ResNet-50 training step at batch 32, statistics, random
inputs of the recorded shapes). CPU time is user + sys of the process and of
the workers it waited for (os.wait4); the 1-minute load average is read before and after each run,
since other processes on the machine share its cores. Each checking run loads bench/timing/process_cpu.py,
which splits its CPU time by process (serial; controller and workers), and what each process had
spent by the end of its first entry (its start: Python, pytest, collection, `import torch`).

    python -m bench.timing.xdist [--dump DIR] [--apis 250|0] [--workers 2] [--repeats 3] [--compare-env NAME=VALUE]

run from the repository root with the interpreter that has pytest-msprobe installed; prints a
markdown table and writes it to bench/timing/results_xdist.md (--results to change).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.timing.collect import ROOT, clean_env, collected, load, machine, measure
from bench.timing.speed import EXAMPLE, counts, pytest_outcome, replicate_dump
from bench.timing.workdir import work_dir

TARGET = 1.6  # -n 2 against serial on a 2-core machine
# The plugin that splits the CPU time by process, as the child pytest runs import it (-p).
PROCESS_CPU = "bench.timing.process_cpu"


def api_entries_only(source: Path, target: Path) -> Path:
    """A copy of source's dump.json without its Module/Cell entries (not items, and not in the
    `<Type>.<api>.<n>.<direction>` form replicate_dump renumbers), beside its tensor folder."""
    document = json.loads((source / "dump.json").read_text())
    document["data"] = {
        name: body for name, body in document["data"].items() if name.split(".", 1)[0] not in ("Module", "Cell")
    }
    target.mkdir(parents=True, exist_ok=True)
    (target / "dump.json").write_text(json.dumps(document, indent=1))
    if (source / "dump_tensor_data").is_dir() and not (target / "dump_tensor_data").exists():
        (target / "dump_tensor_data").symlink_to(source / "dump_tensor_data")
    return target


def commands(
    python: str, dump: Path, out: Path, workers: int, threads: int = 0, settings: Sequence[str] = ()
) -> dict[str, list[str]]:
    run = [
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        PROCESS_CPU,
        "--msprobe-dump",
        str(dump),
        "--msprobe-device",
        "cpu",
    ]
    kinds = {
        "serial": [*run, "--msprobe-out", str(out / "serial")],
        f"-n {workers}": [*run, "--msprobe-out", str(out / "xdist"), "-n", str(workers)],
    }
    if threads:  # the same -n run with the threads the user fixed instead of the split
        kinds[f"-n {workers} OMP={threads}"] = kinds[f"-n {workers}"]
    for setting in settings:  # both runs again under NAME=VALUE (kind_env sets it)
        kinds[f"serial {setting}"] = kinds["serial"]
        kinds[f"-n {workers} {setting}"] = kinds[f"-n {workers}"]
    kinds["collect"] = [
        python,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        "--msprobe-dump",
        str(dump),
        "--msprobe-device",
        "cpu",
    ]
    return kinds


def kind_env(kind: str, pythonpath: str | None, split: Path) -> dict[str, str]:
    # The repository root, where the child finds PROCESS_CPU, after the package under test where one is given
    # (the root holds pytest_msprobe too: without --msprobe-path the child runs the checkout's).
    env = clean_env(os.pathsep.join(filter(None, [pythonpath, str(ROOT)])))
    env["MSPROBE_BENCH_CPU"] = str(split)
    for setting in kind.split()[1:]:  # `-n 2 OMP=2`, `serial THP_MEM_ALLOC_ENABLE=0`
        if "=" in setting:
            name, value = setting.split("=", 1)
            env.update(dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS") if name == "OMP" else (name,), value))
    return env


def result_rows(folder: Path) -> set[tuple[str, ...]]:
    (path,) = folder.glob("accuracy_checking_result_*.csv")
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return {tuple(row) for row in csv.reader(handle)}


def bench(dump: Path, work: Path, args) -> dict[str, dict]:
    out = work / "out"
    cmds = commands(args.python, dump, out, args.workers, args.compare_threads, args.compare_env)
    runs: dict[str, list[tuple[float, float, str, str]]] = {kind: [] for kind in cmds}
    outcomes: dict[str, str] = {}
    for r in range(args.repeats):
        for kind, cmd in cmds.items():  # interleaved, so drift in the load hits all kinds
            if out.exists():
                shutil.rmtree(out)
            out.mkdir()
            before = load()
            split = work / "process_cpu.jsonl"
            split.unlink(missing_ok=True)
            wall, _, cpu, rc, tail = measure(cmd, work, kind_env(kind, args.msprobe_path, split), work / f"{kind}.log")
            loads = f"{before}/{load()}"
            outcome = f"{collected(tail)} collected" if kind == "collect" else pytest_outcome(tail)
            if rc not in (0, 1) or "error" in outcome:
                raise SystemExit(f"{kind}: exit {rc}:\n{tail}")
            if kind != "collect":
                outcomes[kind] = outcome
                rows = result_rows(out / ("serial" if kind.startswith("serial") else "xdist"))
                outcomes[f"{kind} rows"] = str(len(rows))
                runs[kind].append((wall, cpu, loads, sorted(rows), process_split(split)))
            else:
                runs[kind].append((wall, cpu, loads, [], []))
            print(f"  {kind:8s} run {r + 1}: {wall:7.2f} s wall {cpu:7.2f} s CPU  load {loads}  {outcome}", flush=True)
    tables = [run[3] for kind in cmds if kind != "collect" for run in runs[kind]]
    same_rows = all(rows == tables[0] for rows in tables)
    # API and verdicts: the Message quotes float32 metrics, whose last bits follow the thread count.
    same_verdicts = all([row[:3] for row in rows] == [row[:3] for row in tables[0]] for rows in tables)
    best = {}
    for kind, values in runs.items():
        fastest = min(values, key=lambda v: v[0])
        best[kind] = {
            "wall": fastest[0],
            "cpu": min(v[1] for v in values),
            "load": fastest[2],
            "walls": [v[0] for v in values],
            "split": fastest[4],
        }
    best["same_rows"] = same_rows
    best["same_verdicts"] = same_verdicts
    best["outcomes"] = outcomes
    return best


def process_split(path: Path) -> list[dict]:
    """The lines process_cpu wrote, the controller or the serial process first."""
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(lines, key=lambda line: (line["process"].startswith("gw"), line["process"]))


def split_table(best: dict[str, dict]) -> str:
    lines = [
        "| kind | process | entries run | CPU s by the end of its first entry | CPU s |",
        "|---|---|---:|---:|---:|",
    ]
    for kind, b in best.items():
        for p in b.get("split", []) if isinstance(b, dict) else []:
            first = "" if p["first_entry_cpu"] is None else f"{p['first_entry_cpu']:.2f}"
            lines.append(f"| {kind} | {p['process']} | {p['entries']} | {first} | {p['cpu']:.2f} |")
    return "\n".join(lines)


def table(label: str, entries: int, apis: int, best: dict[str, dict], workers: int) -> str:
    xdist = f"-n {workers}"
    head = ["dump", "entries", "kind", "best wall s", "all wall s", "best CPU s", "load avg before/after (best)"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---|---:|---|---:|---|"]
    for kind in [k for k in best if isinstance(best[k], dict) and "wall" in best[k]]:
        b = best[kind]
        walls = ", ".join(f"{w:.2f}" for w in b["walls"])
        lines.append(f"| {label} | {entries} | {kind} | {b['wall']:.2f} | {walls} | {b['cpu']:.2f} | {b['load']} |")
    speedup = best["serial"]["wall"] / best[xdist]["wall"]
    target = TARGET if workers == 2 else None
    verdict = "" if target is None else f" (target >= {target}x: {'met' if speedup >= target else 'NOT met'})"
    lines += [
        "",
        f"serial / {xdist} wall: {speedup:.2f}x{verdict}; CPU {xdist} / serial: "
        f"{best[xdist]['cpu'] / best['serial']['cpu']:.2f}x; a worker's collection "
        f"{best['collect']['wall']:.2f} s wall; verdicts of every run equal: "
        f"{'yes' if best['same_verdicts'] else 'NO'}, whole result rows: {'yes' if best['same_rows'] else 'no'} "
        f"({apis} API calls)",
    ]
    lines += [
        "",
        "Where the CPU went in the fastest run of each kind (the controller counts the entries its workers reported):",
        "",
        split_table(best),
        "",
    ]
    for kind in [k for k in best if isinstance(best[k], dict) and "=" in k]:  # a run under NAME=VALUE
        base, setting = kind.rsplit(" ", 1)
        gain = " (the thread split's gain)" if setting.startswith("OMP=") else ""
        lines.append(
            f"{kind} / {base}{gain}: wall {best[kind]['wall'] / best[base]['wall']:.2f}x, CPU "
            f"{best[kind]['cpu'] / best[base]['cpu']:.2f}x"
        )
        if base == "serial":
            spread = best[f"{xdist} {setting}"]
            lines.append(f"{kind} / {xdist} {setting} wall: {best[kind]['wall'] / spread['wall']:.2f}x")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", default=str(EXAMPLE), help="folder of a real tensor dump")
    parser.add_argument(
        "--apis",
        type=int,
        default=250,
        help="API calls of the dump made of --dump's entries (0: the dump as it is, every call once)",
    )
    parser.add_argument("--workers", type=int, default=2, help="-n of the xdist run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--compare-threads",
        type=int,
        default=0,
        help="also run -n N with OMP_NUM_THREADS set "
        "to this (2: torch's default on 2 cores, no split), to measure the thread split",
    )
    parser.add_argument(
        "--compare-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="also run serial and -n N with this variable set (THP_MEM_ALLOC_ENABLE=0: "
        "without the huge pages the plugin turns on); repeatable",
    )
    parser.add_argument("--python", default=sys.executable, help="the interpreter with pytest-msprobe installed")
    parser.add_argument("--msprobe-path", help="PYTHONPATH for the runs, e.g. a patched copy of the package")
    parser.add_argument("--work", help="work dir (default: a new temp dir, removed unless --keep)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--results",
        default=str(Path(__file__).with_name("results_xdist.md")),
        help="markdown file for the table ('' for none)",
    )
    args = parser.parse_args(argv)

    with work_dir(args.work, args.keep, "bench_xdist_") as work:
        source = Path(args.dump).resolve()
        source = api_entries_only(source, work / f"{source.name}_apis")
        calls = args.apis or counts(source / "dump.json")[1]
        dump = replicate_dump(source, work / f"{Path(args.dump).name}_{calls}", calls)
        entries, apis = counts(dump)
        name = Path(args.dump).name
        label = f"{name} x{calls} calls" if args.apis else f"{name}, all {apis} calls"
        print(f"# {label}: {dump} ({entries} entries, {apis} API calls)", flush=True)
        load_before = load()
        best = bench(dump, work, args)
        text = table(label, entries, apis, best, args.workers)
        print("\n" + text + "\n")
        if args.results:
            write_results(Path(args.results), args, text, best, f"{load_before} / {load()}")
    return 0


def write_results(path: Path, args, text: str, best: dict[str, dict], loads: str) -> None:
    when = time.strftime("%Y-%m-%d %H:%M")
    lines = [
        "# Serial against pytest-xdist over a real tensor dump",
        "",
        f"Written by `python -m bench.timing.xdist {shlex.join(sys.argv[1:])}`".rstrip() + f" on {when}; machine: "
        f"{machine()}, {len(os.sched_getaffinity(0))} of them in the bench's CPU affinity; "
        f"1-minute load average before / after the whole bench: {loads}.",
        "",
        f"Each command in a fresh process, the kinds interleaved, {args.repeats} runs each; the best wall time "
        "(with the load average around that run), every wall time, and the best CPU time (user + sys, "
        "workers included):",
        "",
        "- serial: `python -m pytest -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu "
        "--msprobe-out OUT`",
        f"- -n {args.workers}: the same with `-n {args.workers}`",
        "- collect: `python -m pytest --collect-only -q -p no:cacheprovider --msprobe-dump DUMP "
        "--msprobe-device cpu` (what each worker pays before its first entry)",
        "",
        text,
        "",
        "Outcomes of the last runs: " + "; ".join(f"{k}: {v}" for k, v in best["outcomes"].items()),
        "",
    ]
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
