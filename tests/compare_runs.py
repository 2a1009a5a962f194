"""Runs of this plugin and of both comparisons, as the round-trip tests take them: pytest with this
plugin on a dump in a process of its own (--msprobe-device recorded), msprobe 26.2.0's own
`api_precision_compare` (in its environment, tests/msprobe_venv.py) and `python -m pytest_msprobe.compare`
on a pair of runs, and the statuses each wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from compare_cases import read_rows
from msprobe_venv import MsprobeVenv

from pytest_msprobe.reports import compare


def only(folder: Path, pattern: str) -> Path:
    (path,) = sorted(folder.glob(pattern))
    return path


def msprobe_compare(msprobe_venv: MsprobeVenv, npu: Path, gpu: Path, out: Path) -> subprocess.CompletedProcess:
    done = msprobe_venv.msprobe("api_precision_compare", "-npu", str(npu), "-gpu", str(gpu), "-o", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Analyse csv Error" not in done.stdout + done.stderr  # it read both files to the end
    return done


def ours(npu: Path, gpu: Path, out: Path) -> tuple[int, Path]:
    status = compare.main(["--npu", str(npu), "--gpu", str(gpu), "-o", str(out)])
    return status, out


def statuses(folder: Path) -> dict[str, str]:
    return {row["API Name"]: row["比对结果"] for row in read_rows(only(folder, "api_precision_compare_details_*.csv"))}


def results(folder: Path) -> list[tuple[str, str, str]]:
    rows = read_rows(only(folder, "api_precision_compare_result_*.csv"))
    return [(row["API Name"], row["Forward Test Success"], row["Backward Test Success"]) for row in rows]


def run_plugin(dump: Path, out: Path, *args: str, device: str = "recorded") -> subprocess.CompletedProcess:
    """pytest with this plugin on a dump (--msprobe-device recorded unless told), in a fresh process."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest"]
    command += ["--rootdir", str(out.parent), "--msprobe-dump", str(dump), "--msprobe-device", device]
    command += ["--msprobe-out", str(out), *args]
    done = subprocess.run(command, cwd=out.parent, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    return done
