"""The repository's test configuration beside pyproject.toml's [tool.pytest.ini_options].

pytester comes from `-p pytester` there (not `pytest_plugins` here: this file is
also loaded, as a conftest below the rootdir, when a run started elsewhere
checks one of the dumps in examples/). The frameworks are imported once by
tests/conftest.py, where only the tests pay for them.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", 'slow: starts processes (pytest-xdist workers, subprocess runs); -m "not slow" leaves them out'
    )
