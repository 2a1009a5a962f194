"""Each fixed cost of a whole run named and measured, serially and in one `-n 2` worker, against the floor.

Issue 48: a small dump should cost what its work costs, in every process. On each --dump, in fresh
processes, the kinds interleaved round by round (--repeats rounds):

- floor:           python -m pytest -q -p no:cacheprovider -p no:msprobe -p floor_torch DUMP/dump.json
                   (Python, pytest, `import torch` and one empty item per entry: floor_torch.py, written
                   into the work dir, imports torch, parses the dump with Python's json, yields the items)
- pytest-msprobe:  python -m pytest -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu
                   --msprobe-out OUT
- the floor frozen: the same, what it imported then frozen (gc.freeze) as the plugin's warm-up does,
                   to show what the plugin costs beyond the collections it saves;
- each again with -n 2 (pytest-xdist; the floor's controller imports no torch, as the plugin's does
  not), and pytest-msprobe with --msprobe-html OUT/report.html;
- python -c pass (the interpreter's start) and python -c 'import torch' (torch's import, bare).

The dump is copied into the work dir first: as a path argument under the repository it would bring
the repository's rootdir, its ini options and the tests' conftest.py into the floor's run.

The goal's figures are CPU seconds (user + sys of the process and the workers it waited for,
os.wait4), so that other work on the machine moves them less than the wall times: the ratio of
pytest-msprobe to the floor, run by run (each run against the floor run just before it) and best
against best; the goal is 1.1x, serially and with -n 2.

The fixed costs come from the same kinds run again with bench/timing/fixed_cost_probe.py (`-p`),
which reads each process's CPU at the points a run passes once and times the plugin's calls: the
table splits the serial process and one `-n 2` worker (gw0) of the best probed run of each kind
into interpreter start, pytest, the plugins' import, the plugin's configure, the dump's parse,
torch's import, the meta device's warm-up, the rest of collection, the entries (inputs, the API's
own runs, judging, the result's trip, journal, CSV rows, the rest), the session's end (CSV, manifest,
HTML), the terminal summary and the exit. The per-entry overhead beyond the API's own work is the
entries' CPU less the API's own runs and the floor's empty entries, per entry.

    python -m bench.timing.fixed_costs [--dump DIR ...] [--repeats 5] [--probe-repeats 2] [--workers 2]
        [--no-probe] [--no-html] [--rows DIR] [--note TEXT] [--results FILE] [--work DIR --keep]

The default dumps: tests/data/gpt_fp32 (38 entries, in the repository) and, where it was written,
the GPT-2 code path of bench/zoo at 4 blocks (266 entries, fp32, tensors: the issue's size):

    BLOCKS=4 SUFFIX=_4blocks DTYPES=fp32 PYTHON=MSPROBE_VENV/bin/python sh bench/zoo/make_dumps.sh gpt2

(bench/zoo/dumps/gpt2_4blocks_fp32). --rows DIR writes each dump's details CSV of the serial run,
its rows sorted, as DIR/<dump>.csv: run it before and after a change and diff them. Run from the
repository root with the interpreter that has pytest-msprobe installed; prints markdown tables and
writes them to bench/timing/results_fixed_costs.md (--results to change).
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.timing.collect import ROOT, clean_env, load, machine, measure, write_floor_plugin
from bench.timing.speed import counts, pytest_outcome
from bench.timing.workdir import work_dir

TARGET = 1.1
PROBE = "bench.timing.fixed_cost_probe"
DEFAULT_DUMPS = (ROOT / "tests/data/gpt_fp32", ROOT / "bench/zoo/dumps/gpt2_4blocks_fp32")
# floor_torch.py: `import torch` in each process that runs items (an xdist controller runs none, and
# the plugin's imports no framework either), timed for the probe's table; FREEZE: then gc.freeze()
# as the plugin's warm-up does (the floor that freezes, floor_frozen.py).
FLOOR_IMPORT = """import gc as _gc
import resource as _resource

TORCH_CPU = 0.0


def _cpu():
    usage = _resource.getrusage(_resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pytest_configure(config):
    global TORCH_CPU
    if getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput"):
        return
    before = _cpu()
    import torch  # noqa: F401  the floor of a whole run imports torch
    TORCH_CPU = _cpu() - before
    if FREEZE:
        _gc.freeze()


FREEZE = {freeze}"""


LEGEND = """Each kind in a fresh process, the kinds interleaved round by round. floor: Python, pytest, `import torch`
and one empty item per entry (the xdist controller imports no torch, as the plugin's does not); the floor
frozen: the same, what it imported then frozen (gc.freeze) as the plugin's warm-up does. CPU seconds: user +
sys of the process and the workers it waited for. The goal's ratio is pytest-msprobe's CPU over the floor's,
run by run (each against the floor run of its round) and best against best. The table below it splits the
serial process and one -n 2 worker (gw0) of the probed run of least CPU (bench/timing/fixed_cost_probe.py);
the interpreter's start is `python -c pass`'s; a worker's own exit is not seen (its controller waits for it)."""


def kinds(workers: int, html: bool) -> list[str]:
    found = ["python", "python -c 'import torch'", "floor", "floor, frozen", "pytest-msprobe"]
    if html:
        found.append("pytest-msprobe --msprobe-html")
    if workers:
        found += [f"floor -n {workers}", f"floor, frozen -n {workers}", f"pytest-msprobe -n {workers}"]
    return found


def command(kind: str, python: str, dump: Path, out: Path, workers: int, probe: bool) -> list[str]:
    if kind == "python":
        return [python, "-c", "pass"]
    if kind.startswith("python -c"):
        return [python, "-c", "import torch"]
    base = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(("-p", PROBE) if probe else ())]
    if f"-n {workers}" in kind:
        base += ["-n", str(workers)]
    if kind.startswith("floor"):
        floor = "floor_frozen" if kind.startswith("floor, frozen") else "floor_torch"
        return [*base, "-p", "no:msprobe", "-p", floor, str(dump / "dump.json")]
    run = [*base, "--msprobe-dump", str(dump), "--msprobe-device", "cpu", "--msprobe-out", str(out)]
    return [*run, "--msprobe-html", str(out / "report.html")] if "--msprobe-html" in kind else run


def run_once(kind: str, dump: Path, work: Path, args: argparse.Namespace, probe: bool) -> dict:
    """One fresh process: wall, CPU, peak RSS, its outcome, and the probe's lines where probed."""
    out = work / "out"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    lines_file = work / "probe.jsonl"
    lines_file.unlink(missing_ok=True)
    env = clean_env(f"{work / 'plugins'}:{ROOT}")
    if probe:
        env["MSPROBE_BENCH_FIXED"] = str(lines_file)
    cmd = command(kind, args.python, dump, out, args.workers, probe)
    wall, rss, cpu, rc, tail = measure(cmd, work, env, work / "run.log")
    if rc not in (0, 1) or (kind.startswith(("floor", "pytest")) and "error" in pytest_outcome(tail)):
        raise SystemExit(f"{kind} on {dump}: exit {rc}:\n{tail}")
    lines = merged([json.loads(line) for line in lines_file.read_text().splitlines()]) if probe else []
    details = sorted(out.glob("**/accuracy_checking_details_*.csv"))
    return {
        "wall": wall,
        "cpu": cpu,
        "rss": rss,
        "outcome": pytest_outcome(tail) if kind.startswith(("floor", "pytest")) else "",
        "lines": lines,
        "rows": sorted_rows(details[0]) if details else None,
    }


def merged(lines: list[dict]) -> list[dict]:
    """The probe's lines, a process's CPU at its exit hooks put in with its marks."""
    exits = {line["process"]: line["at exit"] for line in lines if "at exit" in line}
    found = [line for line in lines if "marks" in line]
    for line in found:
        if line["process"] in exits:
            line["marks"]["at exit"] = exits[line["process"]]
    return found


def sorted_rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return [rows[0], *sorted(rows[1:])] if rows else []


# ---------------------------------------------------------------- the probe's phases


def phases(line: dict, interpreter: float, total: float | None) -> dict[str, float]:
    """One process's CPU split into the fixed costs and the entries (see the module's docstring)."""
    marks, spent, within = line["marks"], line["spent"], line.get("within", {})

    def window(start: str, end: str) -> float:
        return marks[end] - marks[start] if start in marks and end in marks else 0.0

    def timed(where: str, phase: str) -> float:
        return within.get(where, {}).get(phase, 0.0)

    floor_torch = timed("start", "framework import")  # the floor imports torch in its pytest_configure
    out: dict[str, float] = {
        "interpreter start": interpreter,
        "pytest: import, arguments": marks["probe imported"] - interpreter,
        "plugins imported (pytest11 entry points, -p)": window("probe imported", "configure start"),
        "configure (the plugin's run set up)": window("configure start", "session start") - floor_torch,
    }
    collection = (
        window("session start", "first entry") if "first entry" in marks else window("session start", "collection done")
    )
    parse, torch_import = timed("collection", "dump parse"), timed("collection", "framework import") + floor_torch
    warm = timed("collection", "meta device warm-up")
    out["dump parse"] = parse
    out["torch import"] = torch_import
    out["meta device warm-up"] = warm
    out["collection, the rest (items, -k, hooks)"] = collection - parse - warm - (torch_import - floor_torch)
    entries = spent.get("entries (whole protocol)", 0.0)
    parts = {
        name: timed("entries", name)
        for name in (
            "entry: inputs",
            "entry: API runs",
            "entry: judging",
            "entry: result to the reporter",
            "journal",
            "CSV rows",
        )
    }
    out["entries"] = entries
    for name, value in parts.items():
        out[f"  {name.removeprefix('entry: ')}"] = value
    out["  the rest (pytest's protocol, the glue)"] = entries - sum(parts.values())
    out["between entries (pytest's loop)"] = window("first entry", "session finish") - entries
    end = window("session finish", "terminal summary")
    end_parts = {name: timed("end", name) for name in ("CSV rows", "journal", "manifest", "HTML report")}
    for name, value in end_parts.items():
        out[f"session end: {name}"] = value
    out["session end: the rest"] = end - sum(end_parts.values())
    summary = window("terminal summary", "terminal summary done")
    out["terminal summary: the plugin's"] = timed("end", "summary")
    out["terminal summary: the others' (hypothesis imports itself there)"] = summary - timed("end", "summary")
    out["unconfigure"] = window("terminal summary done", "unconfigure")
    out["pytest's cleanups (its unraisable-exception check collects 5 times), atexit"] = window(
        "unconfigure", "at exit"
    )
    out["interpreter's exit"] = total - marks["at exit"] if total is not None and "at exit" in marks else 0.0
    return out


def best_probed(runs: list[dict], process: str) -> dict | None:
    """The probe line of `process` in the probed run of least CPU."""
    found = [(run["cpu"], line) for run in runs for line in run["lines"] if line["process"] == process]
    return min(found, key=lambda pair: pair[0])[1] if found else None


# ---------------------------------------------------------------- the tables


def ratio_cells(floor_runs: list[dict], plugin_runs: list[dict], key: str) -> tuple[str, str, float]:
    pairs = [p[key] / f[key] for f, p in zip(floor_runs, plugin_runs)]
    best = min(p[key] for p in plugin_runs) / min(f[key] for f in floor_runs)
    spread = f"{min(pairs):.2f}-{max(pairs):.2f}x (median {statistics.median(pairs):.2f}x)"
    return spread, f"{best:.2f}x", best


def goal_table(label: str, runs: dict[str, list[dict]], workers: int) -> list[str]:
    out = []
    for suffix in ("", f" -n {workers}") if workers else ("",):
        floor, plugin = runs.get(f"floor{suffix}"), runs.get(f"pytest-msprobe{suffix}")
        if not floor or not plugin:
            continue
        spread, best, value = ratio_cells(floor, plugin, "cpu")
        wall_spread, wall_best, _ = ratio_cells(floor, plugin, "wall")
        frozen = runs.get(f"floor, frozen{suffix}")
        against_frozen = ratio_cells(frozen, plugin, "cpu")[1] if frozen else ""
        verdict = "met" if value <= TARGET else "not met"
        out.append(
            f"| {label} | {'serial' if not suffix else suffix.strip()} | {min(f['cpu'] for f in floor):.2f} "
            f"| {min(p['cpu'] for p in plugin):.2f} | {spread} | {best} | {verdict}, <= {TARGET}x "
            f"| {against_frozen} | {wall_spread} ({wall_best}) | {plugin[-1]['outcome']} |"
        )
    return out


def phase_table(probed: dict[str, list[dict]], plain: dict[str, list[dict]], workers: int) -> list[str]:
    interpreter = min(run["cpu"] for run in plain["python"])
    columns: list[tuple[str, dict[str, float] | None]] = []
    for kind, process in [("floor", "serial"), ("floor, frozen", "serial"), ("pytest-msprobe", "serial")] + (
        [(f"floor -n {workers}", "gw0"), (f"pytest-msprobe -n {workers}", "gw0")] if workers else []
    ):
        line = best_probed(probed.get(kind, []), process)
        total = None
        if process == "serial" and line is not None:
            total = min(run["cpu"] for run in probed[kind] if line in run["lines"])
        columns.append((f"{kind} ({process})", phases(line, interpreter, total) if line else None))
    html_line = best_probed(probed.get("pytest-msprobe --msprobe-html", []), "serial")
    names = list(next(c for _, c in columns if c is not None))
    header = "| CPU s in the process | " + " | ".join(name for name, _ in columns) + " |"
    lines = [header, "|---|" + "---:|" * len(columns)]
    for name in names:
        cells = [f"{c[name]:.3f}" if c is not None else "" for _, c in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    totals = [sum(v for k, v in c.items() if not k.startswith("  ")) if c else 0.0 for _, c in columns]
    lines.append("| **total** | " + " | ".join(f"**{t:.3f}**" for t in totals) + " |")
    if html_line is not None:
        page = html_line["within"].get("end", {}).get("HTML report", 0.0)
        lines += ["", f"With --msprobe-html (serial), the HTML report: {page:.3f} s."]
    return lines


def per_entry(probed: dict[str, list[dict]], workers: int) -> list[str]:
    out = []
    for suffix, process in [("", "serial")] + ([(f" -n {workers}", "gw0")] if workers else []):
        floor, plugin = (
            best_probed(probed.get(f"floor{suffix}", []), process),
            best_probed(probed.get(f"pytest-msprobe{suffix}", []), process),
        )
        if floor is None or plugin is None or not plugin["entries"]:
            continue
        own = plugin["within"].get("entries", {}).get("entry: API runs", 0.0)
        whole = plugin["spent"].get("entries (whole protocol)", 0.0)
        empty = floor["spent"].get("entries (whole protocol)", 0.0)
        extra = (whole - own - empty) / plugin["entries"]
        out.append(
            f"- {process}{suffix}: {plugin['entries']} entries, {whole:.3f} s of CPU in them, {own:.3f} s the API's "
            f"own runs, the floor's empty items {empty:.3f} s ({floor['entries']}): {1000 * extra:.2f} ms an entry "
            "beyond the API's own work"
        )
    return out


# ---------------------------------------------------------------- the run


def bench(dumps: Sequence[Path], work: Path, args: argparse.Namespace) -> list[str]:
    write_floor_plugin(work / "plugins", "floor_torch", FLOOR_IMPORT.format(freeze=False))
    write_floor_plugin(work / "plugins", "floor_frozen", FLOOR_IMPORT.format(freeze=True))
    report: list[str] = []
    goal = [
        "| dump | run | floor CPU s | pytest-msprobe CPU s | CPU ratio, run by run | best / best | goal "
        "| best / best, the floor frozen | wall ratio, run by run (best / best) | outcome |",
        "|---|---|---:|---:|---|---:|---|---:|---|---|",
    ]
    details: list[str] = []
    for dump in dumps:
        entries, _ = counts(dump / "dump.json")
        label = f"{dump.relative_to(ROOT) if dump.is_relative_to(ROOT) else dump} ({entries} entries)"
        print(f"# {label}", flush=True)
        # A copy outside the repository: the floor's path argument would bring in the repository's
        # rootdir, its ini options and the conftest.py files above the dump (the tests' own).
        copy = work / "dump"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(dump, copy)
        plain: dict[str, list[dict]] = {}
        probed: dict[str, list[dict]] = {}
        loads = []
        for r in range(args.repeats):
            for kind in kinds(args.workers, args.html):
                probed_too = args.probe and not kind.startswith("python") and not kind.startswith("floor, frozen -n")
                for probe in (False, True) if probed_too else (False,):
                    if probe and r >= args.probe_repeats:
                        continue
                    before = load()
                    run = run_once(kind, copy, work, args, probe)
                    (probed if probe else plain).setdefault(kind, []).append(run)
                    loads.append(f"{before}/{load()}")
                    print(
                        f"  {kind}{' +probe' if probe else ''}: {run['wall']:.2f} s wall, {run['cpu']:.2f} s CPU "
                        f"({run['outcome']})",
                        flush=True,
                    )
        goal += goal_table(label, plain, args.workers)
        details += ["", f"### {label}", ""]
        details.append(
            f"The details CSV's rows, sorted, the same in every pytest-msprobe run: {rows_agree(plain, probed)}; "
            f"1-minute load average before/after each run: {', '.join(loads)}."
        )
        if args.rows:
            rows_dir = Path(args.rows)
            rows_dir.mkdir(parents=True, exist_ok=True)
            with open(rows_dir / f"{dump.name}.csv", "w", newline="", encoding="utf-8") as handle:
                csv.writer(handle).writerows(plain["pytest-msprobe"][-1]["rows"] or [])
        if probed:
            details += ["", *phase_table(probed, plain, args.workers), "", *per_entry(probed, args.workers)]
    report += goal + details
    return report


def rows_agree(*runs: dict[str, list[dict]]) -> str:
    """'yes', or the kinds whose rows differ from the first serial run's."""
    reference = runs[0]["pytest-msprobe"][0]["rows"]
    differ = {
        kind
        for by_kind in runs
        for kind, found in by_kind.items()
        if kind.startswith("pytest")
        for run in found
        if run["rows"] != reference
    }
    return "yes" if not differ else "NO: " + ", ".join(sorted(differ))


def shown_args(argv: Sequence[str] | None) -> list[str]:
    """The command's arguments as the results file shows them: the note is said below it."""
    given = list(argv if argv is not None else sys.argv[1:])
    shown: list[str] = []
    for arg in given:
        if shown and shown[-1] == "--note":
            shown.pop()
        elif not arg.startswith("--note="):
            shown.append(arg)
    return shown


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dump", action="append", type=Path, help="a dump folder (repeatable)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--probe-repeats", type=int, default=2, help="rounds with the probed runs too")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-probe", dest="probe", action="store_false")
    parser.add_argument("--no-html", dest="html", action="store_false")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--rows", help="write each dump's sorted details rows here")
    parser.add_argument("--results", default=str(Path(__file__).with_name("results_fixed_costs.md")))
    parser.add_argument("--note", default="", help="a line on the machine's state, put under the header")
    parser.add_argument("--work")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    dumps = [d.resolve() for d in args.dump] if args.dump else [d for d in DEFAULT_DUMPS if (d / "dump.json").is_file()]
    started = time.strftime("%Y-%m-%d %H:%M")
    with work_dir(args.work, args.keep, "fixed-costs-") as work:
        report = bench(dumps, work, args)
    head = [
        "# Fixed costs of a whole run against the floor",
        "",
        f"Written by `python -m bench.timing.fixed_costs {shlex.join(shown_args(argv))}` "
        f"on {started}; machine: {machine()}.",
        *(["", args.note] if args.note else []),
        "",
        LEGEND,
        "",
    ]
    text = "\n".join(head + report) + "\n"
    print(text)
    if args.results:
        Path(args.results).write_text(text)


if __name__ == "__main__":
    main()
