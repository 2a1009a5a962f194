"""The msprobe 26.2.0 environment the interop tests run msprobe's own tools in (tests/msprobe_venv.py)."""

from __future__ import annotations

import pytest
from msprobe_venv import MSPROBE_VERSION, MsprobeVenv


@pytest.mark.slow
def test_msprobe_runs_in_its_environment(msprobe_venv: MsprobeVenv) -> None:
    version = msprobe_venv.run("-c", "import importlib.metadata as m; print(m.version('mindstudio-probe'))")
    assert version.stdout.strip() == MSPROBE_VERSION
    answered = msprobe_venv.msprobe("api_precision_compare", "-h")
    assert answered.returncode == 0, answered.stderr
    assert "-npu" in answered.stdout and "api_precision_compare_result_" in answered.stdout
