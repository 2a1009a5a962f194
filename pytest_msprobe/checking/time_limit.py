"""A bound on the time one entry's check takes (--msprobe-timeout): past it, the check stops.

An alarm (SIGALRM) raises `TimeUp` in the thread that checks the entry, wherever Python runs
next: in a loop of Python, a sleep, between two kernels, or the moment a long kernel returns.
It cannot stop a kernel inside C: one that never returns holds the check past the limit (its
process may then be ended from outside; xdist makes that worker's entry an error row). TimeUp is
a BaseException, so that no `except Exception` of the frameworks takes it for a kernel's error;
and `expired` says the limit was reached even where one made it some other exception.

Only where an alarm can be had: a main thread, on a system with SIGALRM (not Windows), and no
other alarm set (pytest-timeout's: a process has one timer); elsewhere `armed` is False and
nothing is bounded. No pytest, no framework.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any


class TimeUp(BaseException):
    """The check of an entry ran past --msprobe-timeout."""


class TimeLimit:
    """`with TimeLimit(seconds):` raises TimeUp in the body once `seconds` have passed (0: never)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expired = False
        self.started = 0.0
        self.armed = (
            seconds > 0 and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
        )
        self._previous: Any = None
        self._set = False

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _alarm(self, signum: int, frame: FrameType | None) -> None:
        if self._set and not self.expired:
            self.expired = True
            raise TimeUp(f"ran past --msprobe-timeout {self.seconds:g} s")

    def __enter__(self) -> TimeLimit:
        self.started = time.monotonic()
        if self.armed and signal.getitimer(signal.ITIMER_REAL)[0] > 0:
            self.armed = False  # another's alarm is set (pytest-timeout's): one timer a process, left to it
        if self.armed:
            self._previous = signal.signal(signal.SIGALRM, self._alarm)
            self._set = True
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Disarm and put the previous handler back; again, it does nothing."""
        if not self._set:
            return
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            self._set = False
            signal.signal(signal.SIGALRM, self._previous)
