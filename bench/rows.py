"""Snapshot the CSV rows of every real dump in the repository, to compare two versions of the plugin.

    python -m bench.rows DIR [--dumps NAME,...]

A name may also be a dump folder's path (bench/zoo/dumps/gpt2_4blocks_fp32): its rows go under its
folder's name.

For each dump (examples/ and tests/data/, the ResNet step left out: minutes of float64 convolutions),
each tested side (cpu; recorded where the dump has tensors) and each standard (basic, dtype), one
pytest run in a fresh process; its two CSVs are copied to DIR/<dump>/<side>-<standard>/ under fixed
names, beside outcome.txt (exit status and pytest's last line). `diff -r BEFORE AFTER` then shows
every row a change moved.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # bench/rows.py: the repository root
LEFT_OUT = {"gpu_resnet"}


def real_dumps() -> dict[str, Path]:
    found = {"pt_tensor_L1": ROOT / "examples" / "pt_tensor_L1" / "dump.json"}
    for path in sorted((ROOT / "tests" / "data").rglob("*.json")):
        if path.parent.name in LEFT_OUT or "make" in path.parts or "hostile" in path.parts:
            continue
        head = path.read_bytes()[:4096]
        if b'"data"' not in head and path.name != "dump.json":
            continue
        name = path.parent.name if path.name == "dump.json" else path.stem.split("__")[-1]
        found[name] = path
    return found


def has_tensors(dump: Path) -> bool:
    return (dump.parent / "dump_tensor_data").is_dir() and json.loads(dump.read_text()).get("task") == "tensor"


def snapshot(dump: Path, side: str, standard: str, target: Path) -> None:
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--msprobe-dump",
            str(dump),
            "--msprobe-device",
            side,
            "--msprobe-standard",
            standard,
            "--msprobe-out",
            out,
        ]
        done = subprocess.run(command, cwd=out, capture_output=True, text=True)
        target.mkdir(parents=True, exist_ok=True)
        for kind in ("result", "details"):
            files = sorted(Path(out).rglob(f"accuracy_checking_{kind}_*.csv"))
            for i, path in enumerate(files):
                shutil.copy(path, target / f"{kind}{i or ''}.csv")
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        (target / "outcome.txt").write_text(f"exit {done.returncode}\n{last.split(' in ')[0]}\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--dumps", default="", help="comma-separated dump names (default: all)")
    args = parser.parse_args(argv)
    dumps = real_dumps()
    wanted = [d for d in args.dumps.split(",") if d] or list(dumps)
    for name in wanted:
        dump = dumps.get(name) or Path(name).resolve() / "dump.json"
        name = name if name in dumps else dump.parent.name
        for side in ("cpu", "recorded") if has_tensors(dump) else ("cpu",):
            for standard in ("basic", "dtype"):
                snapshot(dump, side, standard, Path(args.dir) / name / f"{side}-{standard}")
                print(
                    name,
                    side,
                    standard,
                    (Path(args.dir) / name / f"{side}-{standard}" / "outcome.txt").read_text().replace("\n", " "),
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
