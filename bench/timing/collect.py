"""Collection scale of pytest-msprobe against the floor: time and peak RSS of `--collect-only` on big dumps.

Builds synthetic statistics dumps of 1,000 / 10,000 / 100,000 API entries from real msprobe
entry bodies (tests/data/pt_stats_L1 and tests/data/public/gpu_resnet, written by msprobe
26.2.0), renumbered into distinct calls (forward and backward), with some bare
NaN / Infinity / -Infinity statistics as msprobe writes them, serialised exactly as msprobe
does (Python's json, indent=1). Then times, in a fresh process each and best of --repeats:

- floor:     pytest --collect-only -q -p no:cacheprovider -p no:msprobe -p floor_plugin DUMP
             (a plugin written into the work dir that parses DUMP with Python's json and
             yields one empty item per entry)
- msprobe:   pytest --collect-only -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu

wall time and peak RSS (os.wait4's ru_maxrss of that process). It also times the parsers
on the largest dump, each in a fresh process: Python's json, orjson with the NaN quoting
that pytest_msprobe.dumps.dump does, and any other parser importable here.

    python -m bench.timing.collect [--sizes 1000,10000,100000] [--repeats 3]

run from the repository root with the interpreter that has pytest-msprobe installed; prints
markdown tables and writes them to bench/timing/results_collect.md (--results to change).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.timing.workdir import work_dir

ROOT = Path(__file__).resolve().parents[2]  # bench/timing/collect.py: the repository root
TEMPLATES = (ROOT / "tests/data/pt_stats_L1/dump.json", ROOT / "tests/data/public/gpu_resnet/dump.json")
MODULE_TYPES = ("Module", "Cell")
# One entry in NAN_EVERY gets non-finite statistics, rotating through these (as msprobe
# writes them for a tensor holding inf / NaN values).
NAN_EVERY = 37
# Average bytes per entry in the file: the scale target's dump is 77 MB for 100,000 entries.
MEAN_ENTRY_BYTES = 770
SPECIALS = (
    {"Max": float("inf"), "Min": float("-inf")},
    {"Max": float("nan"), "Min": float("nan"), "Mean": float("nan"), "Norm": float("nan")},
    {"Max": float("inf"), "Min": -3.5, "Mean": float("inf"), "Norm": float("inf")},
    {"Max": 2.0, "Min": float("-inf"), "Mean": float("-inf"), "Norm": float("inf")},
)

FLOOR_PLUGIN = '''\
"""The floor of collection: a bare plugin that parses the dump with Python's json and
yields one empty item per entry."""
import json
import pytest
{extra_import}

class FloorItem(pytest.Item):
    def runtest(self):
        pass

    def reportinfo(self):
        return self.path, None, self.name


class FloorFile(pytest.File):
    def collect(self):
        entries = json.loads(self.path.read_bytes())["data"]
        for name in entries:
            yield FloorItem.from_parent(self, name=name)


def pytest_collect_file(file_path, parent):
    if file_path.name == "dump.json":
        return FloorFile.from_parent(parent, path=file_path)
'''


# ---------------------------------------------------------------- synthetic dumps


def load_templates() -> list[tuple[str, int, str, dict]]:
    """(type.api, call index, direction, body) of every API entry of the template dumps."""
    out = []
    for path in TEMPLATES:
        for name, body in json.loads(path.read_text())["data"].items():
            head, index, direction = name.rsplit(".", 2)
            if head.split(".", 1)[0] in MODULE_TYPES or not index.isdigit():
                continue
            out.append((head, int(index), direction, body))
    return out


def tensor_specs(node) -> Iterator[dict]:
    if isinstance(node, dict):
        if "Max" in node and node.get("Mean") is not None:
            yield node
        else:
            for value in node.values():
                yield from tensor_specs(value)
    elif isinstance(node, list):
        for value in node:
            yield from tensor_specs(value)


def entry_bytes(name: str, body: dict) -> int:
    """Bytes the entry takes in dump.json (indent=1, two levels deep)."""
    text = json.dumps(body, indent=1)
    return len(text) + 2 * (text.count("\n") + 1) + len(name) + 8


def synthetic_entries(n: int, mean_bytes: int = MEAN_ENTRY_BYTES) -> dict[str, dict]:
    """n distinct API entries: the templates over and over, each round with its call
    indexes shifted past the last round's (so forward/backward pairs stay pairs).

    With mean_bytes, the templates larger than that (the ResNet's conv2d / batch_norm
    bodies) are each taken in the fraction of rounds that brings the mean entry to
    mean_bytes (the scale target's dump: 77 MB for 100,000 entries); 0 takes every template
    every round.
    """
    templates = load_templates()
    stride: dict[str, int] = {}
    for head, index, _, _ in templates:
        stride[head] = max(stride.get(head, 0), index + 1)
    sizes = [entry_bytes(f"{h}.{i}.{d}", body) for h, i, d, body in templates]
    keep = 1.0
    if mean_bytes:
        small = [s for s in sizes if s <= mean_bytes]
        large = [s for s in sizes if s > mean_bytes]
        if large and small:
            keep = min(1.0, (mean_bytes * len(small) - sum(small)) / (sum(large) - mean_bytes * len(large)))
    entries: dict[str, dict] = {}
    special = 0
    round_ = 0
    while len(entries) < n:
        take_large = int((round_ + 1) * keep) > int(round_ * keep)
        for (head, index, direction, body), size in zip(templates, sizes):
            if len(entries) >= n:
                break
            if mean_bytes and size > mean_bytes and not take_large:
                continue
            name = f"{head}.{index + round_ * stride[head]}.{direction}"
            if len(entries) % NAN_EVERY == NAN_EVERY - 1:
                specs = list(tensor_specs(body))
                if specs:
                    body = copy.deepcopy(body)
                    list(tensor_specs(body))[-1].update(SPECIALS[special % len(SPECIALS)])
                    special += 1
            entries[name] = body
        round_ += 1
    return entries


def make_dump(n: int, folder: Path) -> Path:
    """folder/dump.json with n entries, written as msprobe writes it; reused if there."""
    path = folder / "dump.json"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    document = {
        "task": "statistics",
        "level": "L1",
        "framework": "pytorch",
        "dump_data_dir": None,
        "data": synthetic_entries(n),
    }
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as handle:
        json.dump(document, handle, indent=1)  # msprobe: json.dump(..., indent=1), bare NaN
    tmp.rename(path)
    return path


# ---------------------------------------------------------------- measuring


def clean_env(pythonpath: str | None = None) -> dict[str, str]:
    """This environment less PYTEST_* and PYTHONPATH, and with bytecode caching on as on a
    user's machine (PYTHONDONTWRITEBYTECODE would make pytest rewrite and compile its
    plugins' modules again in every run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def measure(cmd: Sequence[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, float, float, int, str]:
    """(wall s, peak RSS MiB, CPU s (user + sys), exit code, output tail) of one fresh process."""
    with open(log, "w") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text(errors="replace")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, proc.returncode, text[-2000:]


def collected(tail: str) -> int | None:
    match = re.search(r"(\d+) tests? collected", tail)
    return int(match.group(1)) if match else None


def write_floor_plugin(folder: Path, name: str = "floor_plugin", extra_import: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(FLOOR_PLUGIN.format(extra_import=extra_import))


def collect_commands(python: str, dump: Path) -> dict[str, list[str]]:
    base = [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    return {
        "floor": [*base, "-p", "no:msprobe", "-p", "floor_plugin", str(dump)],
        "msprobe": [*base, "--msprobe-dump", str(dump), "--msprobe-device", "cpu"],
    }


def bench_collect(
    python: str, work: Path, sizes: Sequence[int], repeats: int, msprobe_path: str | None = None
) -> list[dict]:
    plugins = work / "plugins"
    write_floor_plugin(plugins)
    rows = []
    for n in sizes:
        t0 = time.perf_counter()
        dump = make_dump(n, work / f"dump_{n}")
        print(
            f"# {n} entries: {dump} ({dump.stat().st_size / 1e6:.1f} MB, "
            f"made/found in {time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        commands = collect_commands(python, dump)
        envs = {"floor": clean_env(str(plugins)), "msprobe": clean_env(msprobe_path)}
        runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in commands}
        for r in range(repeats):
            for kind, cmd in commands.items():  # interleaved, so drift hits both
                wall, rss, cpu, rc, tail = measure(cmd, work, envs[kind], work / f"{kind}_{n}.log")
                count = collected(tail)
                if rc != 0 or count != n:
                    raise SystemExit(f"{kind} on {n} entries: exit {rc}, collected {count}:\n{tail}")
                runs[kind].append((wall, rss, cpu))
                print(f"  {kind:8s} run {r + 1}: {wall:7.2f} s wall {cpu:7.2f} s CPU {rss:7.0f} MiB", flush=True)
        row = {"n": n, "mb": dump.stat().st_size / 1e6}
        for kind, values in runs.items():
            row[f"{kind}_s"] = min(v[0] for v in values)
            row[f"{kind}_mib"] = max(v[1] for v in values)
            row[f"{kind}_cpu"] = min(v[2] for v in values)
        row["ratio"] = row["msprobe_s"] / row["floor_s"]
        row["cpu_ratio"] = row["msprobe_cpu"] / row["floor_cpu"]
        rows.append(row)
    return rows


# ---------------------------------------------------------------- parsers alone

PARSER_SCRIPT = textwrap.dedent("""\
    import gc, json, re, sys, time
    path, which, gc_mode = sys.argv[1], sys.argv[2], sys.argv[3]
    raw = open(path, "rb").read()

    if gc_mode == "paused":
        gc.disable()
    start = time.perf_counter()
    if which == "json.loads":
        doc = json.loads(raw)
    elif which.startswith("pytest_msprobe.dumps.dump.parse_json"):
        from pathlib import Path
        from pytest_msprobe.dumps.dump import parse_json
        doc = parse_json(raw, Path(path))
        if isinstance(doc, tuple):
            doc = doc[0]
    elif which.startswith("NaN quoting alone"):
        from pytest_msprobe.dumps.dump import quote_bare_constants
        doc = quote_bare_constants(raw)
    elif which.startswith("orjson.loads alone"):
        import orjson
        from pytest_msprobe.dumps.dump import quote_bare_constants
        text = quote_bare_constants(raw)
        start = time.perf_counter()
        doc = orjson.loads(text)
    elif which == "ujson.loads":
        import ujson
        doc = ujson.loads(raw)
    elif which == "rapidjson.loads":
        import rapidjson
        doc = rapidjson.loads(raw)
    elif which == "simdjson.loads":
        import simdjson
        doc = simdjson.loads(raw)
    elif which == "msgspec.json.decode":
        import msgspec
        doc = msgspec.json.decode(raw)
    else:
        raise SystemExit("unknown parser " + which)
    took = time.perf_counter() - start
    gc.enable()
    if isinstance(doc, dict):
        data = doc["data"]
        nan = sum(1 for b in data.values() for s in [json.dumps(b)] if "NaN" in s or "Infinity" in s)
        print(f"RESULT {took:.4f} {len(data)} {nan}")
    else:
        print(f"RESULT {took:.4f} - -")
""")

PARSERS = (
    ("json.loads", None),
    ("pytest_msprobe.dumps.dump.parse_json (quoting + orjson, GC paused inside)", "orjson"),
    ("NaN quoting alone (pytest_msprobe.dumps.dump.quote_bare_constants)", None),
    ("orjson.loads alone (input already quoted)", "orjson"),
    ("ujson.loads", "ujson"),
    ("rapidjson.loads", "rapidjson"),
    ("simdjson.loads", "simdjson"),
    ("msgspec.json.decode", "msgspec"),
)


def bench_parsers(
    python: str, work: Path, dump: Path, repeats: int, extra_path: str | None, msprobe_path: str | None
) -> list[dict]:
    script = work / "parse_one.py"
    script.write_text(PARSER_SCRIPT)
    pythonpath = os.pathsep.join(p for p in (msprobe_path, extra_path) if p)
    env = clean_env(pythonpath)
    rows = []
    for label, module in PARSERS:
        if module:
            probe = subprocess.run([python, "-c", f"import {module}"], env=env, capture_output=True)
            if probe.returncode != 0:
                rows.append({"parser": label, "note": f"`{module}` not importable here: not measured"})
                continue
        row = {"parser": label, "note": ""}
        for gc_mode in ("on", "paused"):
            times, rss = [], []
            for _ in range(repeats):
                _, peak, _, rc, tail = measure(
                    [python, str(script), str(dump), label, gc_mode], work, env, work / "parse.log"
                )
                found = re.search(r"RESULT (\S+) (\S+) (\S+)", tail)
                if rc != 0 or not found:
                    last = tail.strip().splitlines()[-1] if tail.strip() else f"exit {rc}"
                    row["note"] = f"rejects the dump: {last[:110]}"
                    break
                times.append(float(found.group(1)))
                rss.append(peak)
                if found.group(2) != "-":
                    row["note"] = f"{found.group(2)} entries, {found.group(3)} with non-finite statistics"
            if not times:
                break
            row[f"s_{gc_mode}"] = min(times)
            row[f"mib_{gc_mode}"] = max(rss)
        rows.append(row)
        print(
            f"  {label}: {row.get('s_on', '-')} s GC on, {row.get('s_paused', '-')} s GC paused; {row['note']}",
            flush=True,
        )
    return rows


# ---------------------------------------------------------------- report


def collect_table(rows: list[dict]) -> str:
    lines = [
        "| entries | dump.json MB | floor wall s | floor CPU s | floor peak MiB | pytest-msprobe wall s "
        "| pytest-msprobe CPU s | pytest-msprobe peak MiB | wall / floor | CPU / floor "
        "| target (<= 1.5x, < 1 GiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ok = r["ratio"] <= 1.5 and r["msprobe_mib"] < 1024
        lines.append(
            f"| {r['n']:,} | {r['mb']:.1f} | {r['floor_s']:.2f} | {r['floor_cpu']:.2f} | {r['floor_mib']:.0f} "
            f"| {r['msprobe_s']:.2f} | {r['msprobe_cpu']:.2f} | {r['msprobe_mib']:.0f} | {r['ratio']:.2f}x "
            f"| {r['cpu_ratio']:.2f}x | {'met' if ok else 'NOT met'} |"
        )
    return "\n".join(lines)


def parser_table(rows: list[dict]) -> str:
    lines = [
        "| parser | s, GC on | peak MiB, GC on | s, GC paused | peak MiB, GC paused | notes |",
        "|---|---:|---:|---:|---:|---|",
    ]

    def cell(row, key, fmt):
        return fmt.format(row[key]) if row.get(key) is not None else "-"

    for r in rows:
        lines.append(
            f"| {r['parser']} | {cell(r, 's_on', '{:.2f}')} | {cell(r, 'mib_on', '{:.0f}')} "
            f"| {cell(r, 's_paused', '{:.2f}')} | {cell(r, 'mib_paused', '{:.0f}')} | {r.get('note', '')} |"
        )
    return "\n".join(lines)


def load() -> str:
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({model}), {mem:.0f} GiB, Python {platform.python_version()}"


def versions(python: str) -> str:
    code = (
        "import pytest, orjson, sys; print(f'pytest {pytest.__version__}, orjson {orjson.__version__}, '"
        "f'python {sys.version.split()[0]}')"
    )
    return subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="entry counts, comma separated")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command; the best time is kept")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with pytest-msprobe installed")
    parser.add_argument("--work", help="work dir for the dumps (default: a new temp dir, removed unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the temp work dir")
    parser.add_argument("--no-parsers", action="store_true", help="skip the parser table")
    parser.add_argument(
        "--parser-path",
        default=os.environ.get("BENCH_PARSER_PATH"),
        help="extra sys.path entry where other JSON parsers are installed (pip --target)",
    )
    parser.add_argument(
        "--msprobe-path",
        help="PYTHONPATH for the pytest-msprobe runs, e.g. a patched copy of the package (default: the installed one)",
    )
    parser.add_argument(
        "--results",
        default=str(Path(__file__).with_name("results_collect.md")),
        help="markdown file for the tables ('' for none)",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]

    with work_dir(args.work, args.keep, "bench_collect_") as work:
        load_before = load()
        rows = bench_collect(args.python, work, sizes, args.repeats, args.msprobe_path)
        table = collect_table(rows)
        print("\n" + table + "\n")
        ptable = ""
        if not args.no_parsers:
            biggest = work / f"dump_{max(sizes)}" / "dump.json"
            print(f"# parsers on {biggest} ({biggest.stat().st_size / 1e6:.1f} MB)", flush=True)
            ptable = parser_table(
                bench_parsers(args.python, work, biggest, args.repeats, args.parser_path, args.msprobe_path)
            )
            print("\n" + ptable + "\n")
        if args.results:
            write_results(Path(args.results), args, sizes, table, ptable, f"{load_before} / {load()}")
    return 0


def write_results(path: Path, args, sizes: Sequence[int], table: str, ptable: str, loads: str) -> None:
    when = time.strftime("%Y-%m-%d %H:%M")
    argv = shlex.join(sys.argv[1:])
    text = [
        "# Collection scale",
        "",
        f"Written by `python -m bench.timing.collect {argv}`".rstrip() + f" on {when}; machine: {machine()}; "
        f"{versions(args.python)}; 1-minute load average before / after: {loads}"
        + (f"; pytest-msprobe from PYTHONPATH={args.msprobe_path}" if args.msprobe_path else "")
        + ".",
        "",
        f"Synthetic statistics dumps of {', '.join(f'{n:,}' for n in sizes)} distinct API entries (real msprobe "
        f"26.2.0 entry bodies from tests/data/pt_stats_L1 and tests/data/public/gpu_resnet, call indexes "
        f"renumbered, the larger ResNet bodies thinned to a mean of {MEAN_ENTRY_BYTES} bytes an entry as in the "
        f"scale target's 77 MB / 100,000-entry dump, one entry in {NAN_EVERY} with bare NaN / Infinity / -Infinity "
        "statistics, written with json.dump(indent=1) as msprobe writes). Each command runs in a fresh process "
        f"in the dumps' work dir, the two kinds interleaved; best wall time and best CPU time (user + sys) of "
        f"{args.repeats}, highest peak RSS (ru_maxrss of that process) of {args.repeats}. The target is checked "
        "on wall time; the CPU column is steadier when other work shares the machine:",
        "",
        "- floor: `pytest --collect-only -q -p no:cacheprovider -p no:msprobe -p floor_plugin DUMP` "
        "(PYTHONPATH holds floor_plugin.py: parses DUMP with Python's json, one empty item per entry)",
        "- pytest-msprobe: `pytest --collect-only -q -p no:cacheprovider --msprobe-dump DUMP --msprobe-device cpu`",
        "",
        table,
        "",
    ]
    if ptable:
        text += [
            f"Parsers alone on the {max(sizes):,}-entry dump (read into memory first; parse time only, "
            f"best of {args.repeats}, each in a fresh process; peak RSS of that process, file bytes included):",
            "",
            ptable,
            "",
        ]
    path.write_text("\n".join(text))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
