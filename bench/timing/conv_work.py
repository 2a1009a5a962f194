"""The plugin's whole check of a real step's convolutions against the bare work, side by side.

The 53 `Functional.conv2d` backward entries of tests/data/public/gpu_resnet (a ResNet-50 training
step at batch 32, statistics): a dump of its conv2d entries alone (the backward entries rebuild
their call from the forward ones), then, each in a fresh process, the kinds interleaved, best of
--repeats:

- bare:   python -m bench.timing.conv_bare DUMP (the work alone: random float32 inputs of the recorded
          shapes, float32 forward and backward, float64 forward and backward, one thread): the target's
- bare, float64 backward alone: the same with --backward-alone (the float64 gradients from the
          backward kernel alone, as the plugin's benchmark computes them): the plugin's own cost
- basic:  python -m pytest -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu
          --msprobe-mode random --msprobe-standard basic -k backward --msprobe-out OUT
- dtype:  the same with --msprobe-standard dtype

wall, CPU (user and sys, os.wait4) and peak RSS of each process, and the 1-minute load average
around it. The plugin's runs load bench/timing/phases.py, which splits their CPU by phase (the
inputs, the float64 benchmark, the tested run, the standard's extra benchmark runs, the pairing,
the metrics, the standard). Then the largest entry's float64 working set (conv_bare --working-set,
a fresh process), against which the plugin's peak RSS is held, and with --profile one more run of
each standard under cProfile (not timed), its top functions.

    python -m bench.timing.conv_work [--repeats 3] [--profile] [--work DIR --keep] [--results FILE]

run from the repository root with the interpreter that has pytest-msprobe installed; prints markdown
tables and writes them to bench/timing/results_conv_work.md (--results to change).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.timing.collect import ROOT, clean_env, load, machine
from bench.timing.phases import EXTRA
from bench.timing.speed import pytest_outcome
from bench.timing.workdir import work_dir
from bench.timing.xdist import result_rows

SOURCE = ROOT / "tests" / "data" / "public" / "gpu_resnet" / "dump.json"
TARGET = 1.10  # the plugin's whole check against the bare work
MEMORY_TARGET = 2.5  # peak RSS against the largest entry's float64 working set
STANDARDS = ("basic", "dtype")
# The bare work with the float64 gradients from the backward kernel alone, as the plugin's benchmark
# computes a conv's: against it, the plugin's own cost on top of the work it does.
BARE_ALONE = "bare, float64 backward alone"
BARES = ("bare", BARE_ALONE)
PHASES = "bench.timing.phases"
# The bare script's parts of the work, by the plugin's phase that does the same.
WORK = {"inputs": "inputs (rebuild)", "float32": "tested run", "float64": "benchmark (float64)"}


def conv_dump(target: Path, calls: int = 0) -> Path:
    """target/dump.json: the conv2d entries of the ResNet step, forward and backward (its first
    `calls` calls, 0: all)."""
    document = json.loads(SOURCE.read_text())
    data = {name: body for name, body in document["data"].items() if name.startswith("Functional.conv2d.")}
    kept = list(dict.fromkeys(name.rsplit(".", 1)[0] for name in data))[: calls or None]
    document["data"] = {name: body for name, body in data.items() if name.rsplit(".", 1)[0] in kept}
    target.mkdir(parents=True, exist_ok=True)
    (target / "dump.json").write_text(json.dumps(document, indent=1))
    return target / "dump.json"


def commands(python: str, dump: Path, out: Path) -> dict[str, list[str]]:
    kinds = {
        "bare": [python, "-m", "bench.timing.conv_bare", str(dump)],
        BARE_ALONE: [python, "-m", "bench.timing.conv_bare", str(dump), "--backward-alone"],
    }
    for standard in STANDARDS:
        kinds[standard] = [
            python,
            *("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", PHASES),
            *("--msprobe-dump", str(dump), "--msprobe-device", "cpu", "--msprobe-mode", "random"),
            *("--msprobe-standard", standard, "-k", "backward", "--msprobe-out", str(out / standard)),
        ]
    return kinds


def run_env(phases: Path) -> dict[str, str]:
    env = clean_env(str(ROOT))  # the checkout's package and bench, as the bare script is
    env["MSPROBE_BENCH_PHASES"] = str(phases)
    return env


def measure(cmd: Sequence[str], cwd: Path, env: dict[str, str], log: Path) -> dict:
    """wall, user, sys, CPU (s), peak RSS (MiB), exit status and output tail of one fresh process."""
    with open(log, "w") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    return {
        "wall": wall,
        "user": usage.ru_utime,
        "sys": usage.ru_stime,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss": usage.ru_maxrss / 1024,
        "rc": os.waitstatus_to_exitcode(status),
        "tail": log.read_text(errors="replace")[-2000:],
    }


def bench(dump: Path, work: Path, args) -> dict[str, list[dict]]:
    out = work / "out"
    cmds = commands(args.python, dump, out)
    runs: dict[str, list[dict]] = {kind: [] for kind in cmds}
    for r in range(args.repeats):
        for kind, cmd in cmds.items():  # interleaved, so drift in the load hits every kind
            if out.exists():
                shutil.rmtree(out)
            out.mkdir()
            phases = work / "phases.jsonl"
            phases.unlink(missing_ok=True)
            before = load()
            run = measure(cmd, work, run_env(phases), work / f"{kind}.log")
            run["load"] = f"{before}/{load()}"
            if kind in BARES:
                ok = run["rc"] == 0
                if ok:
                    done = json.loads(run["tail"].strip().splitlines()[-1])
                    run["outcome"], run["phases"] = f"{done['entries']} entries", {"cpu": done["cpu"]}
            else:
                run["outcome"] = pytest_outcome(run["tail"])
                run["rows"] = sorted(result_rows(out / kind))
                lines = phases.read_text().splitlines() if phases.exists() else []
                run["phases"] = json.loads(lines[-1]) if lines else {}
                ok = run["rc"] in (0, 1) and "error" not in run["outcome"]
            if not ok:
                raise SystemExit(f"{kind}: exit {run['rc']}:\n{run['tail']}")
            runs[kind].append(run)
            print(
                f"  {kind:6s} run {r + 1}: {run['wall']:7.2f} s wall {run['cpu']:7.2f} s CPU "
                f"({run['user']:.2f} user, {run['sys']:.2f} sys) {run['rss']:6.0f} MiB  load {run['load']}  "
                f"{run['outcome']}",
                flush=True,
            )
    return runs


def working_set(python: str, dump: Path, work: Path) -> dict:
    cmd = [python, "-m", "bench.timing.conv_bare", str(dump), "--working-set"]
    run = measure(cmd, work, run_env(work / "unused.jsonl"), work / "working_set.log")
    if run["rc"] != 0:
        raise SystemExit(f"working set: exit {run['rc']}:\n{run['tail']}")
    return json.loads(run["tail"].strip().splitlines()[-1])


def profile(python: str, dump: Path, work: Path, standard: str, top: int) -> str:
    """The top functions by own time of one plugin run under cProfile."""
    stats = work / f"profile_{standard}.out"
    out = work / f"out_profile_{standard}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = commands(python, dump, out)[standard]
    cmd = [python, "-m", "cProfile", "-o", str(stats), *cmd[1:]]
    run = measure(cmd, work, run_env(work / "unused.jsonl"), work / f"profile_{standard}.log")
    if run["rc"] not in (0, 1):
        raise SystemExit(f"profile {standard}: exit {run['rc']}:\n{run['tail']}")
    loaded = pstats.Stats(str(stats))
    total = loaded.total_tt  # type: ignore[attr-defined]
    rows = sorted(loaded.stats.items(), key=lambda item: item[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    lines = [
        f"`{standard}` under cProfile: {total:.1f} s profiled, {run['wall']:.1f} s wall, load {load()}",
        "",
        "| own s | share | calls | function |",
        "|---:|---:|---:|---|",
    ]
    for (path, line, name), (_, calls, own, _, _) in rows:
        where = f"{Path(path).name}:{line}" if line else "~"
        lines.append(f"| {own:.2f} | {own / total:.0%} | {calls} | `{name}` ({where}) |")
    return "\n".join(lines)


def best(runs: list[dict]) -> dict:
    fastest = min(runs, key=lambda run: run["wall"])
    least = min(runs, key=lambda run: run["cpu"])
    return {
        "wall": fastest["wall"],
        "load": fastest["load"],
        "cpu": least["cpu"],
        "user": least["user"],
        "sys": least["sys"],
        "rss": max(run["rss"] for run in runs),
        "walls": [run["wall"] for run in runs],
        "cpus": [run["cpu"] for run in runs],
        "phases": least.get("phases", {}),
        "cpu_of_least": least["cpu"],
        "outcome": fastest["outcome"],
    }


def verdict(ratio: float, target: float) -> str:
    return f"met, <= {target:.2f}x" if ratio <= target else f"NOT met: {ratio / target - 1:.1%} over {target:.2f}x"


def tables(runs: dict[str, list[dict]], footprint: dict) -> str:
    kinds = {kind: best(values) for kind, values in runs.items()}
    bare = kinds["bare"]
    lines = [
        "| kind | best wall s | all wall s | best CPU s | user s | sys s | all CPU s | peak RSS MiB | "
        "load before/after (best wall) | outcome |",
        "|---|---:|---|---:|---:|---:|---|---:|---|---|",
    ]
    for kind, b in kinds.items():
        walls = ", ".join(f"{w:.1f}" for w in b["walls"])
        cpus = ", ".join(f"{c:.1f}" for c in b["cpus"])
        lines.append(
            f"| {kind} | {b['wall']:.2f} | {walls} | {b['cpu']:.2f} | {b['user']:.2f} | {b['sys']:.2f} | {cpus} | "
            f"{b['rss']:.0f} | {b['load']} | {b['outcome']} |"
        )
    working = footprint["working_set"] / 2**20
    lines += [
        "",
        "| standard | wall / bare | CPU / bare | target | CPU less the extra benchmark runs / bare | "
        "peak RSS / float64 working set | target | wall / bare, float64 backward alone | CPU / the same |",
        "|---|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    alone = kinds.get(BARE_ALONE)
    for standard in STANDARDS:
        b = kinds[standard]
        wall, cpu, memory = b["wall"] / bare["wall"], b["cpu"] / bare["cpu"], b["rss"] / working
        extra = b["phases"].get("cpu", {}).get(EXTRA, 0.0)
        lines.append(
            f"| {standard} | {wall:.3f}x | {cpu:.3f}x | {verdict(max(wall, cpu), TARGET)} | "
            f"{(b['cpu_of_least'] - extra) / bare['cpu']:.3f}x | {memory:.2f}x | {verdict(memory, MEMORY_TARGET)} | "
            + (f"{b['wall'] / alone['wall']:.3f}x | {b['cpu'] / alone['cpu']:.3f}x |" if alone else " | |")
        )
    lines += [
        "",
        f"The largest entry's float64 working set: {working:.0f} MiB, {footprint['entry']}'s float64 forward and "
        f"backward alone (conv_bare --working-set: its peak RSS above the {footprint['rss_before'] / 2**20:.0f} MiB "
        "before it; its float64 inputs, output, grad_output and input gradients are "
        f"{footprint['float64_bytes'] / 2**20:.0f} MiB, the kernel's workspace the rest; the largest such tensors "
        f"of any entry {footprint['largest_float64_bytes'] / 2**20:.0f} MiB). The plugin's peak RSS is the whole "
        "process's (Python, pytest and torch included).",
        "",
        "Where the CPU went (the run of least CPU of each kind; the plugin's split by bench/timing/phases.py, "
        "each phase exclusive of the others inside it, the bare script's by its own clock): the work side by "
        "side, then what the plugin adds. The rest: Python, `import torch`, and for the plugin pytest, "
        "collection and the reports.",
        "",
    ]
    lines.append(
        "| phase | bare CPU s | bare, float64 backward alone CPU s | "
        + " | ".join(f"{s} CPU s | {s} wall s" for s in STANDARDS)
        + " |"
    )
    lines.append("|---|---:|---:|" + "---:|" * (2 * len(STANDARDS)))
    names: list[str] = []
    for standard in STANDARDS:
        names += [name for name in kinds[standard]["phases"].get("cpu", {}) if name not in names]
    names = [*WORK.values(), *sorted((n for n in names if n not in WORK.values()), key=str), "the rest"]
    parts_of = {}
    for kind in BARES:
        if kind in kinds:
            spent = kinds[kind]["phases"].get("cpu", {})
            parts_of[kind] = {WORK[part]: cpu for part, cpu in spent.items()}
            parts_of[kind]["the rest"] = kinds[kind]["cpu_of_least"] - sum(spent.values())
    for name in names:
        cells = [f"{parts_of[kind][name]:.2f}" if name in parts_of.get(kind, {}) else "" for kind in BARES]
        for standard in STANDARDS:
            phases = kinds[standard]["phases"]
            if name == "the rest":
                cpu = phases.get("process_cpu", 0.0) - sum(phases.get("cpu", {}).values())
                cells += [f"{cpu:.2f}", ""]
            else:
                cells += [f"{phases.get('cpu', {}).get(name, 0.0):.2f}", f"{phases.get('wall', {}).get(name, 0.0):.2f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    same = all(run["rows"] == runs[s][0]["rows"] for s in STANDARDS for run in runs[s])
    lines += ["", f"Result rows of every run of a standard the same: {'yes' if same else 'NO'}."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=0, help="only the first conv2d calls (a trial; 0: all 53)")
    parser.add_argument("--profile", action="store_true", help="also one run of each standard under cProfile")
    parser.add_argument("--top", type=int, default=25, help="functions of each profile")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with pytest-msprobe installed")
    parser.add_argument("--work", help="work dir (default: a new temp dir, removed unless --keep)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--results",
        default=str(Path(__file__).with_name("results_conv_work.md")),
        help="markdown file for the tables ('' for none)",
    )
    args = parser.parse_args(argv)
    with work_dir(args.work, args.keep, "bench_conv_work_") as work:
        dump = conv_dump(work / "conv", args.calls)
        loads = [load()]
        print(f"# {dump}: {sum(1 for _ in json.loads(dump.read_text())['data'])} conv2d entries", flush=True)
        runs = bench(dump, work, args)
        footprint = working_set(args.python, dump, work)
        loads.append(load())
        text = tables(runs, footprint)
        profiles = [profile(args.python, dump, work, s, args.top) for s in STANDARDS] if args.profile else []
        print("\n" + text + "\n")
        for block in profiles:
            print(block + "\n")
        if args.results:
            write_results(Path(args.results), args, text, profiles, " / ".join(loads))
    return 0


def write_results(path: Path, args, text: str, profiles: list[str], loads: str) -> None:
    when = time.strftime("%Y-%m-%d %H:%M")
    lines = [
        "# The conv entries of a ResNet step: the plugin's whole check against the bare work",
        "",
        f"Written by `python -m bench.timing.conv_work {shlex.join(sys.argv[1:])}`".rstrip() + f" on {when}; "
        f"machine: {machine()}, {len(os.sched_getaffinity(0))} of them in the bench's CPU affinity; 1-minute "
        f"load average before / after the timed runs: {loads}.",
        "",
        f"Each command in a fresh process, the kinds interleaved, {args.repeats} runs each; best wall (with the "
        "load around that run), best CPU (user + sys), the highest peak RSS. The ratios take the best of each "
        f"kind; the target (at most {TARGET:.2f}x) holds both wall and CPU to it.",
        "",
        text,
        "",
        *[block + "\n" for block in profiles],
    ]
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
