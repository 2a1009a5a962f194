"""The memory allocator under the plugin: glibc's, glibc's tuned to keep freed memory, tcmalloc, jemalloc.

On the conv2d backward entries of the ResNet step (bench.timing.conv_work's dump: float64 buffers
of hundreds of MB allocated and freed entry after entry), each kind in a fresh process, the kinds
interleaved, --repeats rounds:

- serial: python -m pytest -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu
          --msprobe-mode random --msprobe-standard dtype -k backward (its first --calls conv2d calls)
- -n 2:   the same on its first --xdist-calls calls with -n 2 (the workers inherit the allocator)

or, with --dump PATH, on every entry of that dump (no -k; the whole ResNet step, say), with
--standard's standard (dtype unless told).

under each allocator, set by the environment the process starts with:

- glibc as started:          LD_PRELOAD= (set and empty: -n 2's workers are not given tcmalloc either;
                             the yardstick)
- glibc + mallopt:           LD_PRELOAD= MALLOC_MMAP_THRESHOLD_=32 MiB MALLOC_TRIM_THRESHOLD_=64 MiB
                             (blocks up to 32 MiB, the block reductions' temporaries among them, kept
                             in glibc's heap; torch's larger buffers mapped as before)
- glibc keeping all:         LD_PRELOAD= MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2^40 (every block
                             from the heap, nothing given back to the kernel)
- tcmalloc:                  LD_PRELOAD=libtcmalloc_minimal.so.4 (Debian's libtcmalloc-minimal4; what
                             -n 2 does by default where it is installed)
- jemalloc:                  LD_PRELOAD=libjemalloc.so.2 (Debian's libjemalloc2)

wall, user, sys and peak RSS (the largest process, os.wait4) of each run, the 1-minute load average
before it; each kind's ratios to glibc as started are taken round by round (the runs next to each other) and
the median ratio is given. The result rows of every run must be the same: the allocator moves no value.

    python -m bench.timing.allocator [--calls 8] [--xdist-calls 16] [--repeats 2] [--kinds K,...] [--xdist-kinds K,...]
        [--dump PATH --standard basic|dtype]

e.g. the whole ResNet step under -n 2 only, glibc against tcmalloc:

    python -m bench.timing.allocator --dump tests/data/public/gpu_resnet --standard basic --calls -1
        --xdist-calls 0 --repeats 1 --results bench/timing/results_allocator_step.md

run from the repository root with the interpreter that has pytest-msprobe installed; prints markdown
tables and writes them to bench/timing/results_allocator.md (--results to change).
"""

from __future__ import annotations

import argparse
import ctypes.util
import os
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.timing.collect import ROOT, clean_env, load, machine
from bench.timing.conv_work import conv_dump, measure
from bench.timing.speed import pytest_outcome
from bench.timing.workdir import work_dir
from bench.timing.xdist import result_rows

KINDS: dict[str, dict[str, str]] = {
    "glibc as started": {"LD_PRELOAD": ""},
    "glibc + mallopt": {
        "LD_PRELOAD": "",
        "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
        "MALLOC_TRIM_THRESHOLD_": str(64 << 20),
    },
    "glibc keeping all": {"LD_PRELOAD": "", "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)},
    "tcmalloc": {"LD_PRELOAD": "tcmalloc_minimal", "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 62)},
    "jemalloc": {"LD_PRELOAD": "jemalloc"},
}
BASE = "glibc as started"


def kind_env(kind: str) -> dict[str, str] | None:
    """The environment of a kind, its library by the loader's soname; None where it is not installed."""
    env = dict(KINDS[kind])
    if env["LD_PRELOAD"]:
        found = ctypes.util.find_library(env["LD_PRELOAD"])
        if found is None:
            return None
        env["LD_PRELOAD"] = found
    return env


def command(python: str, dump: Path, out: Path, workers: int, standard: str, whole: bool) -> list[str]:
    """whole: every entry of the dump; else its backward entries (conv_dump's)."""
    return [
        python,
        *("-m", "pytest", "-q", "-p", "no:cacheprovider", *(("-n", str(workers)) if workers > 1 else ())),
        *("--msprobe-dump", str(dump), "--msprobe-device", "cpu", "--msprobe-mode", "random"),
        *("--msprobe-standard", standard, *(() if whole else ("-k", "backward")), "--msprobe-out", str(out)),
    ]


def bench(modes: dict[str, tuple[Path, int, list[str]]], kinds: dict[str, dict[str, str]], work: Path, args) -> dict:
    runs: dict[tuple[str, str], list[dict]] = {(mode, kind): [] for mode, (_, _, its) in modes.items() for kind in its}
    for r in range(args.repeats):
        for mode, (dump, workers, its) in modes.items():
            for kind in its:
                extra = kinds[kind]  # interleaved: each round's runs meet the same load
                out = work / "out"
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                env = clean_env(str(ROOT))
                env.update(extra)
                before = load()
                cmd = command(args.python, dump, out, workers, args.standard, bool(args.dump))
                run = measure(cmd, work, env, work / "run.log")
                run["load"] = f"{before}/{load()}"
                run["outcome"] = pytest_outcome(run["tail"])
                if run["rc"] not in (0, 1) or "error" in run["outcome"]:
                    raise SystemExit(f"{mode} {kind}: exit {run['rc']}:\n{run['tail']}")
                run["rows"] = sorted(result_rows(out))
                runs[(mode, kind)].append(run)
                print(
                    f"  {mode:6s} {kind:12s} round {r + 1}: {run['wall']:7.2f} s wall {run['cpu']:7.2f} s CPU "
                    f"({run['user']:.2f} user, {run['sys']:.2f} sys) {run['rss']:6.0f} MiB  load {before}  "
                    f"{run['outcome']}",
                    flush=True,
                )
    return runs


def tables(runs: dict, modes: dict, kinds: dict) -> str:
    lines = [
        "| run | allocator | wall s (median) | CPU s | user s | sys s | peak RSS MiB | wall / as started | "
        "CPU / as started | sys / as started | peak RSS / as started | loads | outcome |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for mode, (_, _, its) in modes.items():
        base = runs[(mode, BASE)]
        for kind in its:
            these = runs[(mode, kind)]

            def median(key: str, of: list[dict] = these) -> float:
                return statistics.median(run[key] for run in of)

            def ratio(key: str, of: list[dict] = these, to: list[dict] = base) -> str:
                return f"{statistics.median(a[key] / b[key] for a, b in zip(of, to)):.3f}x"

            lines.append(
                f"| {mode} | {kind} | {median('wall'):.2f} | {median('cpu'):.2f} | {median('user'):.2f} | "
                f"{median('sys'):.2f} | {max(run['rss'] for run in these):.0f} | {ratio('wall')} | {ratio('cpu')} | "
                f"{ratio('sys')} | {ratio('rss')} | {', '.join(run['load'] for run in these)} | "
                f"{these[0]['outcome']} |"
            )
    same = all(run["rows"] == runs[(mode, BASE)][0]["rows"] for (mode, _), those in runs.items() for run in those)
    lines += ["", f"Result rows of every run of a dump the same, whatever the allocator: {'yes' if same else 'NO'}."]
    return "\n".join(lines)


def the_dump(args, folder: Path, calls: int) -> Path:
    if not args.dump:
        return conv_dump(folder, calls)
    given = Path(args.dump).resolve()
    return given if given.is_file() else given / "dump.json"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--calls", type=int, default=8, help="conv2d calls of the serial runs (0: all 53, or all --dump; -1: none)"
    )
    parser.add_argument("--xdist-calls", type=int, default=16, help="conv2d calls of the -n 2 runs (0: all, -1: none)")
    parser.add_argument(
        "--dump", help="every entry of this dump (its folder or dump.json) instead of conv2d calls (0 or -1 above)"
    )
    parser.add_argument("--standard", default="dtype", choices=("basic", "dtype"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, of the serial runs")
    parser.add_argument("--xdist-kinds", default=",".join([BASE, "tcmalloc"]), help="comma-separated, of the -n 2 runs")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with pytest-msprobe installed")
    parser.add_argument("--work", help="work dir (default: a new temp dir, removed unless --keep)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--results",
        default=str(Path(__file__).with_name("results_allocator.md")),
        help="markdown file for the tables ('' for none)",
    )
    args = parser.parse_args(argv)
    kinds: dict[str, dict[str, str]] = {}
    missing = []
    for kind in dict.fromkeys([*args.kinds.split(","), *args.xdist_kinds.split(",")]):
        env = kind_env(kind)
        if env is None:
            missing.append(kind)
        else:
            kinds[kind] = env
    if BASE not in kinds:
        raise SystemExit(f"--kinds must name {BASE!r}, the yardstick")
    serial_kinds = [kind for kind in dict.fromkeys([BASE, *args.kinds.split(",")]) if kind in kinds]
    xdist_kinds = [kind for kind in dict.fromkeys([BASE, *args.xdist_kinds.split(",")]) if kind in kinds]
    with work_dir(args.work, args.keep, "bench_allocator_") as work:
        modes: dict[str, tuple[Path, int, list[str]]] = {}
        if args.calls >= 0:
            modes["serial"] = (the_dump(args, work / "serial", args.calls), 1, serial_kinds)
        if args.xdist_calls >= 0:
            modes["-n 2"] = (the_dump(args, work / "xdist", args.xdist_calls), 2, xdist_kinds)
        loads = [load()]
        runs = bench(modes, kinds, work, args)
        loads.append(load())
        text = tables(runs, modes, kinds)
        if missing:
            text += f"\n\nNot measured (not installed): {', '.join(missing)}."
        print("\n" + text + "\n")
        if args.results:
            write_results(Path(args.results), args, text, kinds, " / ".join(loads), list(modes))
    return 0


def write_results(path: Path, args, text: str, kinds: dict, loads: str, modes: Sequence[str]) -> None:
    when = time.strftime("%Y-%m-%d %H:%M")
    settings = "; ".join(f"{kind}: `{' '.join(f'{k}={v}' for k, v in env.items())}`" for kind, env in kinds.items())
    if args.dump:
        title = f"on every entry of {args.dump}"
        what = f"Every entry of {args.dump} in each run ({', '.join(modes)}); the {args.standard} standard, "
        what += "random inputs"
    else:
        title = "on the conv entries of a ResNet step"
        what = (
            f"serial: the first {args.calls or 'all 53'} conv2d calls; -n 2: the first {args.xdist_calls or 'all 53'}; "
            f"the {args.standard} standard, random inputs, backward entries"
        )
    lines = [
        f"# The allocator under the plugin, {title}",
        "",
        f"Written by `python -m bench.timing.allocator {shlex.join(sys.argv[1:])}`".rstrip() + f" on {when}; "
        f"machine: {machine()}, {len(os.sched_getaffinity(0))} of them in the bench's CPU affinity; 1-minute "
        f"load average before / after: {loads}. {what}. "
        f"{args.repeats} rounds, the kinds interleaved in each; the ratios are the median of each round's ratio "
        f"to the run of glibc as started in the same round. The environments: {settings}.",
        "",
        text,
        "",
    ]
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
