"""False errors: the plugin's verdicts on the clean real dumps of the repository.

Every dump here was written by a correct step (PyTorch's CPU kernels, msprobe 26.2.0), so each error
is a false one and each warning a near miss. For each dump x device (recorded: the dump's own outputs
judged; cpu: PyTorch's CPU kernels re-run) x standard, the plugin runs as a user runs it
(`./run-pytest --msprobe-dump D --msprobe-device X --msprobe-standard S -p no:cacheprovider -q`, in a
subprocess) and its result and details CSVs are read back: errors and warnings per run, and for each
error its API, output and message (the budget's ratio is in it).

    python -m bench.studies.clean_dumps [--dumps NAME ...] [--devices recorded,cpu]
                                        [--standards dtype,basic] [--out FILE]

prints a markdown report and writes it (as each run ends) to bench/studies/clean_dumps.md, or --out.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
FAMILIES = ("gpt_", "gpt512_", "cnn_", "pt_", "llama_", "moe_")


def clean_dumps() -> dict[str, Path]:
    """name -> folder: the PyTorch dumps of tests/data and examples/ written by correct steps, and
    public/'s (statistics: random inputs, nothing recorded to judge)."""
    found = {p.name: p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(FAMILIES)}
    found["examples/pt_tensor_L1"] = ROOT / "examples" / "pt_tensor_L1"
    found["public"] = DATA / "public"
    zoo = ROOT / "bench" / "zoo" / "dumps"  # bench/zoo/make_dumps.sh writes them (git-ignored)
    if zoo.is_dir():
        found.update({f"zoo/{p.name}": p for p in sorted(zoo.iterdir()) if (p / "dump.json").is_file()})
    return found


@dataclass
class Run:
    dump: str
    device: str
    standard: str
    rows: int = 0
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (API, output, message)
    warnings: int = 0
    seconds: float = 0.0
    failure: str = ""  # the run itself went wrong (no CSV)


def read_rows(out: Path, kind: str) -> list[dict[str, str]]:
    files = sorted(out.rglob(f"accuracy_checking_{kind}_*.csv"))  # several dumps: a folder each
    rows: list[dict[str, str]] = []
    for path in files:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            rows += list(csv.DictReader(handle))
    return rows


def run(name: str, folder: Path, device: str, standard: str, timeout: float, env: dict[str, str] | None = None) -> Run:
    """One plugin run as a user runs it, in a subprocess; `env`: variables set for it (cpu_kernels.py's
    ONEDNN_MAX_CPU_ISA)."""
    found = Run(name, device, standard)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        command = [
            str(ROOT / "run-pytest"),
            "--msprobe-dump",
            str(folder),
            "--msprobe-device",
            device,
            "--msprobe-standard",
            standard,
            "--msprobe-out",
            str(out),
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            tmp,
        ]
        start = time.perf_counter()
        try:
            done = subprocess.run(
                command, cwd=tmp, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
            )
        except subprocess.TimeoutExpired:
            found.failure = f"over {timeout:.0f} s"
            return found
        found.seconds = time.perf_counter() - start
        results, details = read_rows(out, "result"), read_rows(out, "details")
        if not results and "is a statistics dump" in done.stdout + done.stderr:
            found.failure = "n/a: a statistics dump (recorded mode needs tensors)"
        elif not results:
            found.failure = f"no result CSV (exit {done.returncode}): {done.stdout[-300:]} {done.stderr[-300:]}"
            return found
        found.rows = len(results)
        for row in results:
            verdicts = (row.get("Forward Test Success", ""), row.get("Backward Test Success", ""))
            found.warnings += verdicts.count("warning")
        for row in details:
            if row.get("Status") == "error":
                api, _, output = row["API Name"].partition(".forward.")
                if not output:
                    api, _, output = row["API Name"].partition(".backward.")
                    output = "backward." + output
                else:
                    output = "forward." + output
                found.errors.append((api, output, row.get("Message", "")))
        errored = {
            row["API Name"]
            for row in results
            if "error" in (row.get("Forward Test Success"), row.get("Backward Test Success"))
        }
        listed = {api for api, _, _ in found.errors}
        for api in sorted(errored - listed):  # an error without a details row (a raised check)
            message = next(r.get("Message", "") for r in results if r["API Name"] == api)
            found.errors.append((api, "", message))
    return found


def report(runs: list[Run], command: str) -> str:
    lines = [
        "# False errors on the clean real dumps",
        "",
        f"`{command}`: each dump was written by a correct step, so every error is a false one.",
        "",
        "| dump | device | standard | rows | errors | warnings | seconds |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in runs:
        errors = "run failed: " + " ".join(r.failure.split()) if r.failure else str(len(r.errors))
        lines.append(f"| {r.dump} | {r.device} | {r.standard} | {r.rows} | {errors} | {r.warnings} | {r.seconds:.0f} |")
    lines += [
        "",
        "## The errors",
        "",
        "| dump | device | standard | API | output | message |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        for api, output, message in r.errors:
            short = message.replace("|", "/").replace("\n", " ")[:400]
            lines.append(f"| {r.dump} | {r.device} | {r.standard} | {api} | {output} | {short} |")
    total = sum(len(r.errors) for r in runs)
    lines += ["", f"{total} errors in {len(runs)} runs."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dumps", nargs="*", help="names (folders of tests/data, examples/pt_tensor_L1, public)")
    parser.add_argument("--devices", default="recorded,cpu")
    parser.add_argument("--standards", default="dtype,basic")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one run may take")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".md"))
    args = parser.parse_args(argv)
    dumps = clean_dumps()
    names = args.dumps or list(dumps)
    unknown = [n for n in names if n not in dumps]
    if unknown:
        sys.exit(f"unknown dumps {unknown}; known: {sorted(dumps)}")
    command = "python -m bench.studies.clean_dumps " + " ".join(sys.argv[1:] if argv is None else argv)
    runs: list[Run] = []
    for standard in args.standards.split(","):
        for name in names:
            for device in args.devices.split(","):
                runs.append(run(name, dumps[name], device, standard, args.timeout))
                r = runs[-1]
                print(
                    f"{name} {device} {standard}: {len(r.errors)} errors, {r.warnings} warnings "
                    f"{r.failure} ({r.seconds:.0f} s)",
                    flush=True,
                )
                args.out.write_text(report(runs, command.strip()))
    print(report(runs, command.strip()))


if __name__ == "__main__":
    main()
