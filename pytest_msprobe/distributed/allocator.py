"""The memory allocator of the xdist workers: tcmalloc where it is installed and the user chose none.

A real model's entries allocate and free float64 buffers of hundreds of MB each. glibc's malloc
gives such a buffer back to the kernel at its free (mmap above its threshold), so the next entry
takes page faults on fresh memory again. tcmalloc keeps freed pages for the next buffer: on the
ResNet step's conv entries, a third of the system time and 0.87x the CPU serially, 0.95x the CPU
under -n 2, for 1.17x and 1.35x the peak memory of a process (bench/timing/results_allocator.md;
jemalloc and glibc's own thresholds saved no CPU there). The rows never depend on the allocator.

An allocator is chosen when a process starts (LD_PRELOAD), so the plugin can choose one only for
the processes it starts: the xdist workers, which pytest-xdist starts with the controller's
environment. The user's LD_PRELOAD, set at all (`LD_PRELOAD=` for glibc's), is their choice and
is left as it is. A worker takes the preload out of its environment again at its start, so what
its entries start (a subprocess) gets the environment the user gave. A serial run keeps the
allocator it was started with; the README says how to preload one.
"""

from __future__ import annotations

import ctypes.util
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass

PRELOAD = "LD_PRELOAD"
PRELOADED = "MSPROBE_PRELOADED"  # what the controller added to the workers' environment, to take out again
LIBRARY = "tcmalloc_minimal"  # gperftools' tcmalloc without the profiler (Debian: libtcmalloc-minimal4)
# tcmalloc reports every allocation of 1 GiB and more on stderr, which a large entry's float64
# benchmark makes: a line on the terminal per buffer, not a problem.
QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 62)}


@dataclass(frozen=True)
class Choice:
    """The workers' allocator: `library` to preload (None: the workers start as the controller did)."""

    library: str | None
    text: str  # for the header


def choose(environ: MutableMapping[str, str], platform: str = sys.platform) -> Choice:
    if PRELOAD in environ:
        value = environ[PRELOAD]
        return Choice(None, f"as LD_PRELOAD says ({value})" if value else "glibc's malloc (LD_PRELOAD is empty)")
    if not platform.startswith("linux"):
        return Choice(None, "the system's malloc")
    found = ctypes.util.find_library(LIBRARY)  # a soname on the loader's path, from ldconfig's cache
    if found is None:
        return Choice(None, "glibc's malloc (tcmalloc, libtcmalloc-minimal4, is not installed)")
    return Choice(found, f"tcmalloc ({found}, preloaded; LD_PRELOAD= keeps glibc's)")


def preload(choice: Choice, environ: MutableMapping[str, str]) -> None:
    """Before the workers start: they inherit `environ` (the controller's os.environ)."""
    if choice.library is None:
        return
    environ[PRELOAD] = environ[PRELOADED] = choice.library
    for name, value in QUIET.items():
        environ.setdefault(name, value)


def unload(environ: MutableMapping[str, str]) -> None:
    """Take the preload out of `environ` again: in a worker at its start (the preload is in effect,
    and what its entries start gets the user's environment), in the controller at its end."""
    added = environ.pop(PRELOADED, None)
    if added is not None and environ.get(PRELOAD) == added:
        del environ[PRELOAD]
        for name, value in QUIET.items():
            if environ.get(name) == value:
                del environ[name]
