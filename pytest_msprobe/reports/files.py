"""Every file the run writes, made without following links, and the lock of a result CSV.

An output folder may be shared (a CI runner's, /tmp): a link planted at the name a file of the
run will have would have the run write wherever it points. So a new file is created with
O_EXCL | O_NOFOLLOW (anything at its name, a link included, is refused), a file appended to
is opened O_NOFOLLOW and must be a regular file of this user with one link, and a folder below
a root the user chose is made and entered part by part, never through a link (Folder).

The lock (ResultLock): one run writes a result CSV, its details and its journal at a time. The
run that writes them (a fresh run, a resume) holds an flock on `<result CSV>.lock` for its whole
length; it holds the holder's pid, host and start, for the message that refuses a second run.
No pytest.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from ..readback import what_is_at

NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
EXISTING = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO at the name does not hang the run


class FileRefused(OSError):
    """A path the run does not write through: its text names the path and why."""

    def __init__(self, path: Path | str, why: str):
        super().__init__(f"{path}: {why}")
        self.path = Path(path)

    def __str__(self) -> str:
        return str(self.args[0])


class FileTaken(FileRefused, FileExistsError):
    """Anything, a link included, already has the name of a new file (a caller may pick another)."""


def _open(path: Path | str, flags: int, dir_fd: int | None = None, shown: Path | str | None = None) -> int:
    try:
        return os.open(path, flags, 0o666, dir_fd=dir_fd)
    except FileExistsError:
        raise FileTaken(shown or path, f"{what_is_at(path, dir_fd)} is already there: not written through") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise FileRefused(shown or path, f"{what_is_at(path, dir_fd)}: not followed") from None
        raise


def check_own(fd: int, path: Path | str, kind: int = stat.S_IFREG) -> os.stat_result:
    """The file behind fd is of `kind`, this user's, and (a regular file) has one name: else FileRefused."""
    found = os.fstat(fd)
    why = ""
    if stat.S_IFMT(found.st_mode) != kind:
        why = f"not a {'folder' if kind == stat.S_IFDIR else 'regular file'}"
    elif found.st_uid != os.geteuid():
        why = f"owned by another user (uid {found.st_uid})"
    elif kind == stat.S_IFREG and found.st_nlink != 1:
        why = f"a file with {found.st_nlink} hard links"
    if why:
        os.close(fd)
        raise FileRefused(path, f"{why}: not written")
    return found


def create(path: Path | str, dir_fd: int | None = None, shown: Path | str | None = None, append: bool = False) -> int:
    """A new file's descriptor, write only. FileRefused where anything has the name (a link too)."""
    return _open(path, NEW | (os.O_APPEND if append else 0), dir_fd, shown)


def open_new(path: Path, binary: bool = False, newline: str | None = None) -> IO[Any]:
    """A new file (create), as a text (utf-8) or binary file object."""
    return _wrap(create(path), "wb" if binary else "w", newline)


def append_fd(path: Path) -> int:
    """A file to append to, write only: made new where nothing has the name, else it must be a
    regular file of this user with one name, reached without a link."""
    try:
        return os.open(path, NEW | os.O_APPEND, 0o666)
    except FileExistsError:
        fd = _open(path, os.O_WRONLY | os.O_APPEND | EXISTING)
        check_own(fd, path)
        os.set_blocking(fd, True)
        return fd


def open_append(path: Path, newline: str | None = None) -> IO[str]:
    """A text file to append to (append_fd)."""
    return _wrap(append_fd(path), "a", newline)


def open_existing(path: Path, binary_mode: str = "r+b") -> IO[bytes]:
    """A file of this run's own to read and cut (a resumed CSV, a journal), reached without a link."""
    fd = _open(path, os.O_RDWR | EXISTING)
    check_own(fd, path)
    os.set_blocking(fd, True)
    return os.fdopen(fd, binary_mode)


def write_new(path: Path, data: str | bytes) -> None:
    """A whole new file (the manifest, a temporary copy); none at all where it cannot be written
    whole (a full disk): a part of one would be taken for the file."""
    handle = open_new(path, binary=isinstance(data, bytes))
    try:
        with handle:
            handle.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def _wrap(fd: int, mode: str, newline: str | None) -> IO[Any]:
    try:
        if "b" in mode:
            return os.fdopen(fd, mode)
        return os.fdopen(fd, mode, encoding="utf-8", newline=newline)
    except BaseException:
        os.close(fd)
        raise


def replace_temporary(path: Path) -> Path:
    """`<name>.resume` beside path, free for a new file: one left by a killed run is removed
    (removing a link removes the link, never what it points to)."""
    temporary = path.with_name(path.name + ".resume")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    return temporary


class Folder:
    """A folder below a root the user chose (the error data's, the repros'), every part below the
    root made and entered without following a link; its files are made through its descriptor."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self.fd = fd

    @classmethod
    def make(cls, root: Path, parts: Iterable[str]) -> Folder:
        with contextlib.suppress(FileExistsError):  # a file there: the open below says NotADirectoryError
            root.mkdir(parents=True, exist_ok=True)  # the user's own path: links in it are theirs
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        path = root
        try:
            for part in parts:
                if part in ("", ".") or "/" in part or part == ".." or "\0" in part:
                    raise FileRefused(path / part, "not a folder name")
                path = path / part
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                try:
                    inner = _open(part, os.O_RDONLY | os.O_DIRECTORY | EXISTING, fd, path)
                except NotADirectoryError:
                    raise FileRefused(path, f"{what_is_at(part, fd)} is there, not a folder") from None
                check_own(inner, path, stat.S_IFDIR)
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def open_new(self, name: str, binary: bool = False) -> IO[Any]:
        """A file of the folder, made new: a regular file of this user's of that name (an earlier
        run's) is replaced, anything else there (a link) is refused."""
        shown = self.path / name
        try:
            fd = create(name, self.fd, shown)
        except FileTaken:
            try:
                old = os.open(name, os.O_RDONLY | EXISTING, dir_fd=self.fd)
            except OSError:
                raise FileRefused(shown, f"{what_is_at(name, self.fd)} is already there: not written through") from None
            check_own(old, shown)
            os.close(old)
            os.unlink(name, dir_fd=self.fd)
            fd = create(name, self.fd, shown)
        return _wrap(fd, "wb" if binary else "w", None)

    def write_text(self, name: str, text: str) -> None:
        with self.open_new(name) as handle:
            handle.write(text)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- one writer per result CSV ---------------------------------------------------------------------


class LockHeld(OSError):
    """Another live run writes the result CSV: its text names the holder."""

    def __str__(self) -> str:
        return str(self.args[0])


def lock_path_for(result_path: Path) -> Path:
    return result_path.with_name(result_path.name + ".lock")


def _holder(fd: int) -> str:
    """`pid 1234 on host ci-7, started 2026-11-27 21:40:03 UTC`, from a lock file's text."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 4096).decode("utf-8", errors="replace"))
        return f"pid {int(data['pid'])} on host {data['host']!s:.200}, started {data['started']!s:.40}"
    except (OSError, ValueError, TypeError, KeyError):
        return "a run that has not said who it is yet"


class ResultLock:
    """An exclusive flock on `<result CSV>.lock`, held from before the run touches the pair and its
    journal to its end. The file is removed on release; a run that locked a file removed meanwhile
    locks the new one."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self.fd: int | None = fd

    @classmethod
    def acquire(cls, result_path: Path) -> ResultLock:
        """Raises LockHeld naming the holder, FileRefused for a link at the lock's name, OSError."""
        path = lock_path_for(result_path)
        for _ in range(100):
            fd = _open(path, os.O_RDWR | os.O_CREAT | EXISTING)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise LockHeld(
                    f"{result_path} is being written by another run: {holder} (its lock {path.name}); "
                    "one run writes a result CSV at a time: wait for it to end"
                ) from None
            found = check_own(fd, path)
            try:
                now = os.lstat(path)
            except FileNotFoundError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (found.st_dev, found.st_ino):
                os.close(fd)  # its holder removed it as it ended: lock the file now at the name
                continue
            who = {"pid": os.getpid(), "host": socket.gethostname(), "started": _now()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(who).encode() + b"\n", 0)
            return cls(path, fd)
        raise LockHeld(f"{path}: removed and made again 100 times while this run tried to lock it")

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            now, ours = os.lstat(self.path), os.fstat(self.fd)
            if (now.st_dev, now.st_ino) == (ours.st_dev, ours.st_ino):
                os.unlink(self.path)
        os.close(self.fd)
        self.fd = None

    def __del__(self) -> None:  # a run that ended before its reporter existed (a usage error)
        self.release()


def holder_of(result_path: Path) -> str | None:
    """Who writes result_path now, where a live run does (for a run that only reads it), else None."""
    path = lock_path_for(result_path)
    try:
        fd = os.open(path, os.O_RDONLY | EXISTING)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
