"""The repository's test configuration: pytester, and the frameworks imported once.

pytester's in-process runs forget the modules a run imported, and torch does not
survive a second import in one process: it is imported once, here, before any test.
MindSpore likewise, where it is installed: imported once, in PyNative mode, with
kernel errors raised at the op that caused them (launch_blocking).

Tests that start processes (pytest-xdist workers, subprocess runs) are marked
`slow`: `pytest -m "not slow"` is the quick set.
"""

from __future__ import annotations

import importlib.util

import pytest_msprobe.frameworks.torch_engine  # noqa: F401

pytest_plugins = ["pytester"]

if importlib.util.find_spec("mindspore") is not None:
    from pytest_msprobe.frameworks import mindspore as ms_framework

    ms_framework.mindspore()
