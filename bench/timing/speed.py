"""A whole run over a real tensor dump: pytest-msprobe against msprobe and the floor, time and CPU.

On the same dump and machine, each in a fresh process, best of --repeats:

- floor:          python -m pytest -q -p no:cacheprovider -p no:msprobe -p floor_torch DUMP
                  (Python + pytest + `import torch` + one empty item per entry: floor_torch.py,
                  written into the work dir, imports torch, parses DUMP with Python's json and
                  yields one item per entry that does nothing)
- pytest-msprobe: python -m pytest -q -p no:cacheprovider [-n N] --msprobe-dump DUMP --msprobe-device cpu
                  [--msprobe-standard S] --msprobe-out OUT, once per --standard
                  (exits 1 on examples/pt_tensor_L1: a few bf16 entries fail the default rule; -n N's
                  workers get tcmalloc where installed, pytest_msprobe/distributed/allocator.py)
- msprobe:        VENV/bin/python bench/timing/msprobe_cpu_acc_check.py acc_check -api_info DUMP -o OUT
                  (msprobe 26.2.0's own pre-check, its device forced to the CPU; VENV given by
                  --msprobe-python, a separate venv made with pip install torch==2.13.0
                  mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6")

The dumps: each --dump (default examples/pt_tensor_L1, real, 66 entries) and, for each, a bigger one
of --apis API calls made of its entries: the same entries again with their call indexes renumbered
(as a second and third training step would number them) and their tensor files copied under the
new data_names. msprobe's checker is one process; a failed msprobe run is recorded as a result
(its exit status and last line), not an error of the bench.

    python -m bench.timing.speed --msprobe-python VENV/bin/python|'' [--dump PATH ...] [--apis 125]
        [--repeats 3] [--msprobe-repeats 2] [--workers N] [--standard basic [--standard dtype]]

e.g. the ResNet step with two workers, both standards, one run each:

    python -m bench.timing.speed --msprobe-python VENV/bin/python --dump tests/data/public/gpu_resnet --apis 0
        --workers 2 --standard basic --standard dtype --repeats 1 --msprobe-repeats 1
        --results bench/timing/results_speed_resnet.md

run from the repository root with the interpreter that has pytest-msprobe installed; prints a
markdown table and writes it to bench/timing/results_speed.md (--results to change).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shlex
import shutil
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench.timing.collect import MODULE_TYPES, ROOT, clean_env, load, machine, measure, write_floor_plugin
from bench.timing.workdir import work_dir

EXAMPLE = ROOT / "examples" / "pt_tensor_L1"
MSPROBE_SHIM = Path(__file__).with_name("msprobe_cpu_acc_check.py")


# ---------------------------------------------------------------- the bigger real-entry dump


def split_name(name: str) -> tuple[str, int, str]:
    head, index, direction = name.rsplit(".", 2)
    return head, int(index), direction


def replicate_dump(source: Path, target: Path, apis: int) -> Path:
    """target/dump.json + dump_tensor_data/: the API calls of source over and over, renumbered,
    until `apis` calls (each call with its forward and, where recorded, backward entry)."""
    document = json.loads((source / "dump.json").read_text())
    data = document["data"]
    calls: list[str] = []  # `<Type>.<api>.<n>` in dump order of their first entry
    stride: dict[str, int] = {}
    for name in data:
        head, index, _ = split_name(name)
        call = f"{head}.{index}"
        if call not in calls:
            calls.append(call)
        stride[head] = max(stride.get(head, 0), index + 1)
    tensors_in, tensors_out = source / "dump_tensor_data", target / "dump_tensor_data"
    if target.exists():
        shutil.rmtree(target)
    tensors_out.mkdir(parents=True)
    out: dict[str, dict] = {}
    copy = 0
    taken = 0
    while taken < apis:
        keep = set(calls[: apis - taken])
        for name, body in data.items():
            head, index, direction = split_name(name)
            if f"{head}.{index}" not in keep:
                continue
            new_name = f"{head}.{index + copy * stride[head]}.{direction}"
            text = json.dumps(body)
            for data_name in re.findall(r'"data_name": "([^"]+)"', text):
                assert data_name.startswith(name + "."), data_name
                new_data_name = new_name + data_name[len(name) :]
                shutil.copyfile(tensors_in / data_name, tensors_out / new_data_name)
                text = text.replace(f'"data_name": "{data_name}"', f'"data_name": "{new_data_name}"')
            out[new_name] = json.loads(text)
        taken += len(keep)
        copy += 1
    document["data"] = out
    if document.get("dump_data_dir"):
        document["dump_data_dir"] = str(tensors_out)
    with open(target / "dump.json", "w") as handle:
        json.dump(document, handle, indent=1)
    return target / "dump.json"


def counts(dump: Path) -> tuple[int, int]:
    """(entries, API calls) of a dump; a module's entries (a mix-level dump's) are entries, not API calls."""
    data = json.loads(dump.read_text())["data"]
    calls = {name.rsplit(".", 1)[0] for name in data}
    return len(data), len({call for call in calls if call.split(".", 1)[0] not in MODULE_TYPES})


# ---------------------------------------------------------------- commands


def pytest_outcome(tail: str) -> str:
    match = re.search(r"=* ?((?:\d+ \w+(?:, )?)+) in [\d.]+s", tail)
    return match.group(1) if match else "?"


def msprobe_outcome(out: Path) -> str:
    """Its result CSV's statuses, forward and (where the dump has backward entries) backward, and its details
    CSV's statuses per output with the Messages of those not passed: how msprobe failed is a result too."""
    results = sorted(out.glob("accuracy_checking_result_*.csv"))
    if not results:
        return "no result CSV"
    rows = read_csv(results[-1])
    parts = [f"{len(rows)} APIs"]
    for column, say in (("Forward Test Success", "forward"), ("Backward Test Success", "backward")):
        tally = Counter((row.get(column) or "").strip() or "blank (not checked)" for row in rows)
        parts.append(f"{say}: {counted(tally)}")
    details = sorted(out.glob("accuracy_checking_details_*.csv"))
    if details:
        outputs = read_csv(details[-1])
        parts.append(f"{len(outputs)} outputs: {counted(Counter(row.get('Status', '').strip() for row in outputs))}")
        messages = Counter(row.get("Message", "").strip()[:120] for row in outputs if row.get("Status") != "pass")
        if messages:
            parts.append(f"not passed: {', '.join(f'{n} x {m!r}' for m, n in messages.most_common(6))}")
    return "; ".join(parts)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:  # msprobe writes a byte order mark
        return list(csv.DictReader(handle))


def counted(tally: Counter) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(tally.items()))


def thread_env(env: dict[str, str], threads: int) -> dict[str, str]:
    """threads > 0: torch's intra-op threads (OpenMP, MKL) fixed for every tool alike."""
    if threads > 0:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def run_one(
    kind: str,
    dump: Path,
    work: Path,
    python: str,
    msprobe_python: str,
    plugins: Path,
    msprobe_path: str | None,
    threads: int = 0,
    workers: int = 0,
) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MiB, outcome) of `kind`: floor, msprobe, or pytest-msprobe[ STANDARD]."""
    out = work / f"out_{kind.replace(' ', '_')}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    log = work / f"{kind.replace(' ', '_')}.log"
    if kind == "floor":
        cmd = [
            python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:msprobe",
            "-p",
            "floor_torch",
            str(dump),
        ]
        wall, rss, cpu, rc, tail = measure(cmd, work, thread_env(clean_env(str(plugins)), threads), log)
        ok, outcome = rc == 0, pytest_outcome(tail)
    elif kind.startswith("pytest-msprobe"):
        standard = kind.partition(" ")[2]
        cmd = [
            python,
            *("-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *(("-n", str(workers)) if workers else ()),
            *("--msprobe-dump", str(dump), "--msprobe-device", "cpu"),
            *(("--msprobe-standard", standard) if standard else ()),
            *("--msprobe-out", str(out)),
        ]
        wall, rss, cpu, rc, tail = measure(cmd, work, thread_env(clean_env(msprobe_path), threads), log)
        ok, outcome = rc in (0, 1) and "error" not in pytest_outcome(tail), pytest_outcome(tail)
    else:
        cmd = [msprobe_python, str(MSPROBE_SHIM), "acc_check", "-api_info", str(dump), "-o", str(out)]
        wall, rss, cpu, rc, tail = measure(cmd, work, thread_env(clean_env(), threads), log)
        outcome = msprobe_outcome(out)
        if rc != 0:  # msprobe's own failure is a result, said with how it ended
            last = tail.strip().splitlines()[-1] if tail.strip() else ""
            outcome = f"exit {rc} ({last[:200]}); {outcome}"
        ok = True
    if not ok:
        raise SystemExit(f"{kind} on {dump}: exit {rc}:\n{tail}")
    return wall, cpu, rss, outcome


def bench(dumps: Sequence[tuple[str, Path]], work: Path, args) -> list[dict]:
    plugins = work / "plugins"
    write_floor_plugin(plugins, "floor_torch", "import torch  # the floor of a whole run imports torch")
    kinds = ["floor", *pytest_kinds(args.standard)]
    if args.msprobe_python:
        kinds.append("msprobe")
    rows = []
    for label, dump in dumps:
        entries, apis = counts(dump)
        print(f"# {label}: {dump} ({entries} entries, {apis} API calls)", flush=True)
        runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
        outcomes: dict[str, str] = {}
        loads: dict[str, list[str]] = {k: [] for k in kinds}
        for r in range(max(args.repeats, args.msprobe_repeats)):
            for kind in kinds:  # interleaved, so drift hits all three
                if r >= (args.msprobe_repeats if kind == "msprobe" else args.repeats):
                    continue
                before = load()
                wall, cpu, rss, outcome = run_one(
                    kind,
                    dump,
                    work,
                    args.python,
                    args.msprobe_python,
                    plugins,
                    args.msprobe_path,
                    args.threads,
                    args.workers,
                )
                runs[kind].append((wall, cpu, rss))
                outcomes[kind] = outcome
                loads[kind].append(f"{before}/{load()}")
                print(
                    f"  {kind:20s} run {r + 1}: {wall:7.2f} s wall {cpu:7.2f} s CPU {rss:6.0f} MiB  "
                    f"load {loads[kind][-1]}  {outcome}",
                    flush=True,
                )
        best = {
            kind: (min(v[0] for v in values), min(v[1] for v in values), max(v[2] for v in values))
            for kind, values in runs.items()
        }
        for i, kind in enumerate(pytest_kinds(args.standard)):  # a row a standard, the floor and msprobe shared
            said = (kind, "floor", "msprobe") if i == 0 else (kind,)
            row = {"label": label + (f", {kind.partition(' ')[2]}" if " " in kind else ""), "entries": entries}
            row |= {"apis": apis, "outcomes": {k: outcomes[k] for k in outcomes if k in said}}
            row |= {"loads": {k: loads[k] for k in loads if k in said}}
            row |= {"floor": best["floor"], "pytest-msprobe": best[kind]}
            if "msprobe" in best:
                row["msprobe"] = best["msprobe"]
            rows.append(row)
    return rows


def pytest_kinds(standards: Sequence[str] | None) -> list[str]:
    """pytest-msprobe's runs: one with the plugin's default standard, or one per --standard."""
    return [f"pytest-msprobe {s}" for s in standards] if standards else ["pytest-msprobe"]


def table(rows: list[dict], with_target: bool = True) -> str:
    """with_target: the 1.3x target of a serial run of the plugin's default standard against the floor."""
    with_msprobe = "msprobe" in rows[0]
    head = ["dump", "entries", "API calls", "floor s (CPU s, MiB)", "pytest-msprobe s (CPU s, MiB)"]
    if with_msprobe:
        head += ["msprobe s (CPU s, MiB)", "msprobe s per API call"]
    head += ["pytest-msprobe / floor (CPU)", *(["target <= 1.3x"] if with_target else [])]
    if with_msprobe:
        head += ["msprobe / pytest-msprobe (CPU)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]

    def cell(v):
        return f"{v[0]:.2f} ({v[1]:.2f}, {v[2]:.0f})"

    for r in rows:
        ratio = r["pytest-msprobe"][0] / r["floor"][0]
        cpu_ratio = r["pytest-msprobe"][1] / r["floor"][1]
        cells = [r["label"], str(r["entries"]), str(r["apis"]), cell(r["floor"]), cell(r["pytest-msprobe"])]
        if with_msprobe:
            cells += [cell(r["msprobe"]), f"{r['msprobe'][0] / r['apis']:.2f}"]
        cells += [f"{ratio:.2f}x ({cpu_ratio:.2f}x)", *(["met" if ratio <= 1.3 else "NOT met"] if with_target else [])]
        if with_msprobe:
            ours, theirs = r["pytest-msprobe"], r["msprobe"]
            cells += [f"{theirs[0] / ours[0]:.1f}x ({theirs[1] / ours[1]:.1f}x)"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dump",
        action="append",
        help="a dump's folder (dump.json, and dump_tensor_data/ for a tensor dump) or its dump.json; repeatable "
        f"(default: {EXAMPLE.relative_to(ROOT)})",
    )
    parser.add_argument(
        "--apis", type=int, default=125, help="API calls of the bigger dump made of --dump's entries (0: none)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of the floor and of pytest-msprobe")
    parser.add_argument("--msprobe-repeats", type=int, default=2, help="runs of msprobe (about 0.6 s an API)")
    parser.add_argument(
        "-n", "--workers", type=int, default=0, help="pytest-msprobe with -n N (pytest-xdist; default: serial)"
    )
    parser.add_argument(
        "--standard",
        action="append",
        choices=("basic", "dtype"),
        help="pytest-msprobe with --msprobe-standard S, a run (and a row) each; repeatable (default: the plugin's)",
    )
    parser.add_argument("--python", default=sys.executable, help="the interpreter with pytest-msprobe installed")
    parser.add_argument(
        "--msprobe-python",
        required=True,
        help="the interpreter of the venv with mindstudio-probe (see the docstring), or '' to leave msprobe out",
    )
    parser.add_argument(
        "--msprobe-path",
        help="PYTHONPATH for the pytest-msprobe runs, e.g. a patched copy of the package (default: the installed one)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="OMP_NUM_THREADS / MKL_NUM_THREADS for all three (default: unset, torch's default of one thread a core)",
    )
    parser.add_argument("--work", help="work dir (default: a new temp dir, removed unless --keep)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--results",
        default=str(Path(__file__).with_name("results_speed.md")),
        help="markdown file for the table ('' for none)",
    )
    args = parser.parse_args(argv)
    if args.msprobe_python and not Path(args.msprobe_python).exists():
        raise SystemExit(
            f"--msprobe-python {args.msprobe_python} is not there: pass --msprobe-python '' to leave msprobe out"
        )

    with work_dir(args.work, args.keep, "bench_speed_") as work:
        dumps = []
        for given in args.dump or [str(EXAMPLE)]:
            source = Path(given).resolve()
            if source.is_file():
                source = source.parent
            dumps.append((source.name, source / "dump.json"))
            if args.apis:
                replica = replicate_dump(source, work / f"{source.name}_{args.apis}", args.apis)
                dumps.append((f"{source.name} x{args.apis} calls", replica))
        load_before = load()
        rows = bench(dumps, work, args)
        text = table(rows, with_target=not (args.workers or args.standard))
        print("\n" + text + "\n")
        if args.results:
            write_results(Path(args.results), args, rows, text, f"{load_before} / {load()}")
    return 0


def write_results(path: Path, args, rows: list[dict], text: str, loads: str) -> None:
    when = time.strftime("%Y-%m-%d %H:%M")
    argv = shlex.join(sys.argv[1:])
    lines = [
        "# A whole run over a real dump",
        "",
        f"Written by `python -m bench.timing.speed {argv}`".rstrip() + f" on {when}; machine: {machine()}; "
        f"1-minute load average before / after: {loads}"
        + (f"; pytest-msprobe from PYTHONPATH={args.msprobe_path}" if args.msprobe_path else "")
        + (
            f"; OMP_NUM_THREADS=MKL_NUM_THREADS={args.threads} for all three"
            if args.threads
            else "; torch's default threads (one a core)"
        )
        + ".",
        "",
        "Each command in a fresh process in the work dir, the kinds interleaved; best wall time and best CPU "
        f"time (user + sys) of {args.repeats} ({args.msprobe_repeats} for msprobe), highest peak RSS:",
        "",
        "- floor: `python -m pytest -q -p no:cacheprovider -p no:msprobe -p floor_torch DUMP` (floor_torch.py "
        "on PYTHONPATH: `import torch`, parses DUMP with json, one empty item per entry)",
        "- pytest-msprobe: `python -m pytest -q -p no:cacheprovider "
        + (f"-n {args.workers} " if args.workers else "")
        + "--msprobe-dump DUMP --msprobe-device cpu "
        + ("--msprobe-standard S " if args.standard else "")
        + "--msprobe-out OUT`"
        + (f" for S in {', '.join(args.standard)}, a row each" if args.standard else "")
        + (
            f" ({args.workers} xdist workers, each on tcmalloc where installed, pytest_msprobe/distributed/allocator.py; "
            "CPU time and peak RSS: the controller's and its workers', os.wait4)"
            if args.workers
            else ""
        ),
        "- msprobe: `MSPROBE_PYTHON bench/timing/msprobe_cpu_acc_check.py acc_check -api_info DUMP "
        "-o OUT` (mindstudio-probe 26.2.0, torch 2.13.0 CPU, in its own venv; one process: msprobe's parallel "
        "mode, multi_acc_check, spreads over NPU/GPU device ids, which the CPU shim does not have)",
        "",
        text,
        "",
        "Outcomes of the last run:",
        "",
    ]
    for r in rows:
        for kind, outcome in r["outcomes"].items():
            loads = ", ".join(r["loads"][kind])
            lines.append(f"- {r['label']}, {kind}: {outcome} (1-minute load average before/after: {loads})")
    lines.append("")
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
