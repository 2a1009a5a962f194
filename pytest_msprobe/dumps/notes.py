"""What the report header says of a run's dumps before any entry runs: what the run will not
check, once, rather than by every entry. No pytest; reads only each dump's head.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..untrusted import printable
from .dump import peek_task

TENSOR_FOLDER = "dump_tensor_data"


def header_notes(
    dump_files: Sequence[Path], reruns_on: str | None, mode: str = "auto", runs_calls: bool | None = None
) -> list[str]:
    """A line for each tensor dump without its tensor folder (a dump.json copied alone), for
    each whose recorded outputs this run does not judge: it runs the calls again on `reruns_on`
    (None: it judges the recorded outputs); and for each statistics dump, whose entries run on
    random data (`mode`, --msprobe-mode: "real" refuses them entry by entry instead). `runs_calls`:
    whether the run calls the APIs at all (a re-run beside the recorded outputs too); by default,
    where it re-runs them."""
    runs_calls = reruns_on is not None if runs_calls is None else runs_calls
    lines = []
    for path in dump_files:
        task = peek_task(path)[0]
        if task == "statistics" and mode != "real":
            lines.append(
                f"{path}: a statistics dump records no tensors: every entry runs on random data drawn from "
                "its inputs' recorded shape, dtype, Min and Max, not on the step's own values"
            )
        if task != "tensor":
            continue
        if not (path.parent / TENSOR_FOLDER).is_dir():
            # What the run does instead, and the file named as given (public dumps are not all dump.json).
            if not runs_calls or mode == "real":
                instead = "no entry can be judged"
            elif reruns_on is None:  # the recorded outputs judged beside a re-run
                instead = "its recorded outputs cannot be judged, and each call runs again on random data"
            else:
                instead = "every entry runs on random data drawn from the recorded statistics"
            lines.append(
                f"{path}: a tensor dump without its {TENSOR_FOLDER}/ folder: no recorded tensor can be "
                f"read, {instead} (copy {TENSOR_FOLDER}/ beside {path.name})"
            )
        elif reruns_on is not None:
            lines.append(
                f"{path}: the dump records its outputs, and this run does not judge them: it runs each "
                f"call again on {reruns_on}; --msprobe-device recorded judges the recorded outputs"
            )
    return [printable(line) for line in lines]
