"""What the checks of a dump's bytes cost beside its parse (collect's 100,000-entry dump).

read_dump looks for entry names written twice (dump_scan.duplicate_entries): a regex
count over the bytes when the file holds no backslash, the structural scan (dump_scan.Layout)
when it does or when the count disagrees; and a dump with an entry nested past the parser's
depth is cut (dump_scan.cut_too_deep) and parsed again. This times, in fresh processes, best
CPU time (process_time) of --repeats:

- parse: dump.parse_dump_json alone (NaN quoting + orjson)
- duplicate check: dump_scan.duplicate_entries on the dump as msprobe writes it; with one
  backslash in a string value (still the count); with one key written with an escape
  (`...forwar\\u0064`: the structural scan)
- read_dump: the whole of it (parse, header checks, duplicate check)
- read_dump of the dump with one entry nested 10,000 deep (cut and parsed again)

    python -m bench.timing.dump_checks [--entries 100000] [--repeats 5] [--work DIR]

run from the repository root with the interpreter that has pytest-msprobe installed; prints a
markdown table and writes it to bench/timing/results_dump_checks.md (--results to change).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from pathlib import Path

from bench.timing.collect import ROOT, make_dump
from bench.timing.workdir import work_dir

BACKSLASH_IN_A_VALUE = 'raw.replace(b\'"task": "statistics"\', b\'"task": "stat\\\\\\\\istics"\', 1)'
ESCAPED_KEY = "raw.replace(b'\"Functional.relu.0.forward\":', b'\"Functional.relu.0.forwar\\\\u0064\":', 1)"
STEPS = {
    "parse": "from pytest_msprobe.dumps.dump import parse_dump_json\nparse_dump_json(raw, path)",
    "duplicate check, as msprobe writes": "from pytest_msprobe import dump_scan\n"
    "dump_scan.duplicate_entries(raw, entries)",
    "duplicate check, a backslash in a value": "from pytest_msprobe import dump_scan\n"
    f"dump_scan.duplicate_entries({BACKSLASH_IN_A_VALUE}, entries)",
    "duplicate check, a key written with an escape (structural scan)": "from pytest_msprobe import dump_scan\n"
    f"dump_scan.duplicate_entries({ESCAPED_KEY}, entries)",
    "read_dump": "from pytest_msprobe.dumps.dump import read_dump\nread_dump(path)",
    "read_dump, one entry 10,000 deep": "from pytest_msprobe.dumps.dump import read_dump\nread_dump(deep)",
}

RUNNER = """
import json, sys, time
from pathlib import Path
path, deep = Path(sys.argv[1]), Path(sys.argv[2])
raw = path.read_bytes()
entries = json.loads(raw)["data"] if {needs_entries} else None
start = time.process_time()
{step}
print(time.process_time() - start)
"""


def deep_copy(path: Path, folder: Path) -> Path:
    """The dump with one more entry whose input_args nest 10,000 levels."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "dump.json"
    if not target.exists():
        text = path.read_text()
        cut = text.rindex("}")  # the end of `data`'s object is the last-but-one brace
        cut = text.rindex("}", 0, cut)
        entry = '"Functional.relu.999999.forward": {"input_args": ' + "[" * 10_000 + "]" * 10_000 + "}"
        target.write_text(text[:cut] + ", " + entry + text[cut:])
    return target


def measure(step: str, path: Path, deep: Path, repeats: int) -> float:
    code = RUNNER.format(step=STEPS[step], needs_entries="'entries' in " + repr(STEPS[step]))
    times = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code, str(path), str(deep)], capture_output=True, text=True, check=True, cwd=ROOT
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work", help="work dir for the dumps (default: a temp dir)")
    parser.add_argument("--results", default=str(Path(__file__).with_name("results_dump_checks.md")))
    args = parser.parse_args()
    with work_dir(args.work, False, "bench_dump_checks") as work:
        path = make_dump(args.entries, work / f"dump_{args.entries}")
        deep = deep_copy(path, work / f"deep_{args.entries}")
        rows = [(step, measure(step, path, deep, args.repeats)) for step in STEPS]
    parse = rows[0][1]
    lines = [
        f"| step | CPU s (best of {args.repeats}) | / parse |",
        "|---|---:|---:|",
        *[f"| {step} | {seconds:.3f} | {seconds / parse:.2f}x |" for step, seconds in rows],
    ]
    head = (
        f"# The checks of a dump's bytes\n\nWritten by `python -m bench.timing.dump_checks "
        f"--entries {args.entries} --repeats {args.repeats}` on {time.strftime('%Y-%m-%d %H:%M')}; "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; a "
        f"{path.stat().st_size / 1e6:.1f} MB dump of {args.entries:,} entries made by bench.timing.collect.\n\n"
    )
    text = head + "\n".join(lines) + "\n"
    print(text)
    Path(args.results).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
