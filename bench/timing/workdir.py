"""The work folder of a benchmark: the one named (kept), or a temporary one."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def work_dir(named: str | None, keep: bool, prefix: str) -> Iterator[Path]:
    """`named` is made if missing and kept; a temporary folder is removed unless `keep`."""
    if named:
        work = Path(named).resolve()
        work.mkdir(parents=True, exist_ok=True)
        yield work
        return
    temp = tempfile.TemporaryDirectory(prefix=prefix)
    try:
        yield Path(temp.name)
    finally:
        if keep:
            print(f"kept {temp.name}")
        else:
            temp.cleanup()
