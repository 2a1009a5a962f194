"""Every file a run reads back that it did not just create, opened and read one way.

A result CSV and its details, their journal and manifest, a dump's stack.json, a reference run's
CSV, a user's msprobe config: each may come from another machine (a CI artifact of another job),
a shared folder, or a hand. Reading one costs the run no more than the file, and never waits:

- no link at its name is followed (O_NOFOLLOW): a link planted where a run's file is expected
  would have it read /dev/zero or another user's file; a path the user named is read as named
  where `follow_links` says so (a dump.json);
- a regular file only: a FIFO is never waited on (opened O_NONBLOCK, then refused), a device
  (/dev/zero) or a folder never read;
- at most `limit` bytes: a file larger is refused before it is read, and one that grows while it
  is read is refused too;
- every refusal is an `Unreadable` (an OSError) whose text names the file and why.

The lowest layer of the package: dumps/ (stack.json) and reports/ (the CSVs, the journal, the
manifest) read through it alike. No pytest, no framework.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

MiB = 1024 * 1024
# The bounds of what a run reads back, far past what a real run writes (docs/hostile-input.md):
# the CSV pair of a whole LLM step is a few MB, its journal (a failing output's samples included)
# tens; a manifest and a config a few kB. What is read is parsed into rows: memory a few times this.
MAX_CSV = 256 * MiB
MAX_JOURNAL = 512 * MiB
MAX_MANIFEST = 16 * MiB
MAX_CONFIG = 16 * MiB

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO at the name: the open returns, the fstat refuses it


class Unreadable(OSError):
    """A file that is not read (missing, a link, not a regular file, too large): its text names it and why."""

    def __init__(self, path: Path | str, why: str):
        super().__init__(f"{path}: {why}")
        self.path = Path(path)
        self.why = why

    def __str__(self) -> str:
        return str(self.args[0])


def what_is_at(path: Path | str, dir_fd: int | None = None) -> str:
    """`a symbolic link to /etc/passwd`, `a folder`, `a file`: what holds a name, for a message."""
    try:
        found = os.lstat(path, dir_fd=dir_fd)
    except OSError:
        return "something"
    if stat.S_ISLNK(found.st_mode):
        try:
            return f"a symbolic link to {os.readlink(path, dir_fd=dir_fd)}"
        except OSError:
            return "a symbolic link"
    return "a folder" if stat.S_ISDIR(found.st_mode) else "a file"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a socket" if stat.S_ISSOCK(mode) else "something else"


def open_regular(path: Path | str, follow_links: bool = False) -> BinaryIO:
    """A regular file, opened for reading (binary, blocking from here on). Unreadable for a link
    at the name (unless follow_links), a FIFO, a device or a folder (none waited on), or a file
    that cannot be opened."""
    flags = os.O_RDONLY | os.O_CLOEXEC | _NONBLOCK | (0 if follow_links else _NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise Unreadable(path, f"{what_is_at(path)}: not followed (name the file itself)") from None
        raise Unreadable(path, f"cannot be read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Unreadable(path, f"not a regular file ({_kind(mode)}): not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise


def read_bytes(path: Path | str, limit: int | None, follow_links: bool = False) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (None: any size): open_regular's
    refusals, and Unreadable for a file larger, said before it is read."""
    with open_regular(path, follow_links) as handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            if limit is not None and size > limit:
                raise Unreadable(path, f"{size:,} bytes, more than the {limit:,} such a file may hold: not read")
            data = handle.read() if limit is None else handle.read(limit + 1)
        except Unreadable:
            raise
        except OSError as exc:
            raise Unreadable(path, f"cannot be read: {exc.strerror or exc}") from None
    if limit is not None and len(data) > limit:
        raise Unreadable(path, f"grew past the {limit:,} bytes such a file may hold while it was read: not read")
    return data


def read_text(path: Path | str, limit: int | None, encoding: str = "utf-8", follow_links: bool = False) -> str:
    """read_bytes, decoded; Unreadable naming the byte where the file is no text of `encoding`."""
    data = read_bytes(path, limit, follow_links)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise Unreadable(
            path, f"not {encoding} text (byte {exc.start:,} is {data[exc.start : exc.start + 1]!r})"
        ) from None
