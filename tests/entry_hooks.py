"""A plugin for end-to-end tests, loaded with `-p entry_hooks` (tests/ on PYTHONPATH): what a kernel
can do to the process while an entry runs, inside the entry's check as a real kernel would.

MSPROBE_CRASH_AT=<entry>: a segfault (a read of address 0) when that entry is checked.
MSPROBE_PAUSE_AT=<entry>: when that entry is checked, write the file MSPROBE_PAUSED and wait
until the file MSPROBE_GO exists (a run kept alive while another starts).
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

from pytest_msprobe.checking import check

_check = check.Checker.check


def _check_or_crash(self, dump, entry, *args, **kwargs):
    if entry.full == os.environ.get("MSPROBE_CRASH_AT"):
        ctypes.string_at(0)  # SIGSEGV
    if entry.full == os.environ.get("MSPROBE_PAUSE_AT"):
        Path(os.environ["MSPROBE_PAUSED"]).write_text(str(os.getpid()))
        go = Path(os.environ["MSPROBE_GO"])
        for _ in range(6000):
            if go.exists():
                break
            time.sleep(0.05)
    return _check(self, dump, entry, *args, **kwargs)


check.Checker.check = _check_or_crash  # type: ignore[method-assign]
