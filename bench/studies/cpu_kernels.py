"""Does a verdict depend on the CPU? Clean dumps recorded on one kind of x86 CPU, judged on another.

PyTorch runs bf16/fp16 convolutions and GEMMs through oneDNN where the CPU has bf16/fp16 units (AMX,
AVX512-BF16) and through ATen's own kernels elsewhere, and the two round differently (ATen sums a
conv's weight gradient sample by sample in bf16). oneDNN's `ONEDNN_MAX_CPU_ISA` makes one machine
each kind: a dump written by msprobe under a cap is what that CPU records, and the plugin run under a
cap judges as that CPU does. Every dump here comes from a correct step, so each error is a false one.

    python -m bench.studies.cpu_kernels --set NAME=FOLDER [--set ...] [--checkers DEFAULT,AVX512_CORE,AVX2]
                                        [--devices recorded,cpu] [--standard dtype] [--out FILE]

FOLDER holds the dumps one CPU kind recorded (tests/data/make's scripts under a cap: the module's
results file says how); each set x checker x device is one plugin run over the folder (clean_dumps.run),
its CSVs read back. Prints a markdown table and writes it to bench/studies/cpu_kernels.md, or --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .clean_dumps import Run, run


def report(table: list[tuple[str, str, Run]], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "| recorded on | judged on (ONEDNN_MAX_CPU_ISA) | device | rows | errors | warnings | seconds |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for recorded, checker, r in table:
        errors = "run failed: " + " ".join(r.failure.split()) if r.failure else str(len(r.errors))
        lines.append(f"| {recorded} | {checker} | {r.device} | {r.rows} | {errors} | {r.warnings} | {r.seconds:.0f} |")
    errors = [(recorded, checker, r, e) for recorded, checker, r in table for e in r.errors]
    if errors:
        lines += ["", "| recorded on | judged on | device | API | output | message |", "|---|---|---|---|---|---|"]
        for recorded, checker, r, (api, output, message) in errors:
            short = message.replace("|", "/").replace("\n", " ")[:300]
            lines.append(f"| {recorded} | {checker} | {r.device} | {api} | {output} | {short} |")
    lines += ["", f"{len(errors)} errors in {len(table)} runs."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, help="NAME=FOLDER: dumps one CPU kind recorded")
    parser.add_argument("--checkers", default="DEFAULT,AVX512_CORE,AVX2", help="ONEDNN_MAX_CPU_ISA caps; DEFAULT: none")
    parser.add_argument("--devices", default="recorded,cpu")
    parser.add_argument("--standard", default="dtype")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".md"))
    args = parser.parse_args(argv)
    sets = dict(item.split("=", 1) for item in args.set)
    command = "python -m bench.studies.cpu_kernels " + " ".join(sys.argv[1:] if argv is None else argv)
    table: list[tuple[str, str, Run]] = []
    for recorded, folder in sets.items():
        for checker in args.checkers.split(","):
            env = {} if checker == "DEFAULT" else {"ONEDNN_MAX_CPU_ISA": checker}
            for device in args.devices.split(","):
                found = run(recorded, Path(folder).resolve(), device, args.standard, args.timeout, env)
                table.append((recorded, checker, found))
                print(f"{recorded} on {checker} {device}: {len(found.errors)} errors {found.failure}", flush=True)
                args.out.write_text(report(table, command.strip()))
    print(report(table, command.strip()))


if __name__ == "__main__":
    main()
