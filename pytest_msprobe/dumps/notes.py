"""What the report header says of a run's dumps before any entry runs: what the run will not
check, once, rather than by every entry. No pytest; reads only each dump's head.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..options import RANDOM, REAL, RECORDED
from ..untrusted import printable
from .dump import peek_task

TENSOR_FOLDER = "dump_tensor_data"


def without_tensors(path: Path) -> bool:
    """A tensor dump whose dump_tensor_data/ folder is not beside it: a dump.json copied alone."""
    return peek_task(path)[0] == "tensor" and not (path.parent / TENSOR_FOLDER).is_dir()


def refusal(dump_files: Sequence[Path], mode: str, device: str, judges_recorded: bool) -> str | None:
    """Why this run cannot do what it was asked, before any entry runs, or None: real mode reads
    every input from the dump's tensor files, recorded mode judges the outputs they hold, and a
    dump without them would SKIP every entry (or, in real mode, run the few that read no tensor
    and go green). `device` is --msprobe-device as given. One line: what to type instead."""
    for path in dump_files:
        task = peek_task(path)[0]
        if mode == REAL and task == "statistics":
            return printable(
                f"--msprobe-mode real reads every input from a tensor dump's files, and {path} is a statistics "
                "dump (no tensors): leave out --msprobe-mode real to run its entries on random data drawn from "
                "the recorded statistics"
            )
        if task != "tensor" or (path.parent / TENSOR_FOLDER).is_dir():
            continue
        missing = f"{path} is a tensor dump without its {TENSOR_FOLDER}/ folder"
        copy = f"copy {TENSOR_FOLDER}/ beside {path.name}"
        if judges_recorded:
            rerun = ",".join(side for side in device.split(",") if side != RECORDED) or "cpu"
            return printable(
                f"--msprobe-device {device} judges the outputs the dump recorded, and {missing}: {copy}, or "
                f"run each call again on random data drawn from the recorded statistics with --msprobe-device {rerun}"
            )
        if mode == REAL:
            return printable(
                f"--msprobe-mode real reads every input from the dump's tensor files, and {missing}: {copy}, or "
                "leave out --msprobe-mode real to run every entry on random data drawn from the recorded statistics"
            )
    return None


def header_notes(dump_files: Sequence[Path], reruns_on: str | None, mode: str = "auto") -> list[str]:
    """A line for each tensor dump without its tensor folder (a dump.json copied alone: what the
    run does instead), for each whose recorded outputs this run does not judge: it runs the calls
    again on `reruns_on` (None: it judges the recorded outputs); and for each statistics dump,
    whose entries run on random data (`mode`, --msprobe-mode). What refusal() refuses is not said."""
    lines = []
    for path in dump_files:
        task = peek_task(path)[0]
        if task == "statistics" and mode != REAL:
            lines.append(
                f"{path}: a statistics dump records no tensors: every entry runs on random data drawn from "
                "its inputs' recorded shape, dtype, Min and Max, not on the step's own values"
            )
        if task != "tensor":
            continue
        if without_tensors(path):
            if mode != RANDOM:  # random data is what was asked for
                lines.append(missing_tensors_line(path))
        elif reruns_on is not None:
            lines.append(
                f"{path}: the dump records its outputs, and this run does not judge them: it runs each "
                f"call again on {reruns_on}; --msprobe-device recorded judges the recorded outputs"
            )
    return [printable(line) for line in lines]


def missing_tensors_line(path: Path) -> str:
    """The header's and the summary's line on a tensor dump without its tensors (public dumps are
    not all dump.json: the file named as given)."""
    return printable(
        f"{path}: a tensor dump without its {TENSOR_FOLDER}/ folder: no recorded tensor can be read, so "
        "every entry runs on random data drawn from the recorded statistics, not on the step's own values "
        f"(copy {TENSOR_FOLDER}/ beside {path.name} to check them)"
    )
