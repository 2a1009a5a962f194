"""Fixtures shared by the tests: real dumps copied where pytester runs."""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Dict, List, Optional, Union

import pytest
from msprobe_venv import msprobe_venv  # noqa: F401  (the fixture of the tests that run msprobe's own tools)

from pytest_msprobe.distributed import allocator


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """pytester's in-process runs forget the modules a run imported, and torch does not survive a
    second import in one process: import it once, up front, for the test suite. MindSpore likewise,
    where it is installed: in PyNative mode, with kernel errors raised at the op that caused them
    (launch_blocking).

    Not in a run of the plugin itself from the checkout (the README's main command loads this file
    through testpaths): the plugin sets the threads and torch's huge pages before torch is
    imported, and a hook of this file that imported it at load would come first."""
    if config.pluginmanager.hasplugin("msprobe") and (config.getoption("msprobe_dump") or config.getini("msprobe_dump")):
        return
    if config.getoption("dist", "no") != "no" and not hasattr(config, "workerinput"):
        # The controller hands the tests out one at a time as the workers free up, the slow ones first
        # (pytest_collection_modifyitems): xdist's first batches would give one worker every slow test.
        config.option.maxschedchunk = 1
        # The workers on the allocator the plugin gives its own (tcmalloc where it is installed and the
        # user chose none): the in-process runs of whole dumps take 0.85x the CPU, half the system time
        # (bench/timing/results_suite.md).
        allocator.preload(allocator.choose(os.environ), os.environ)
        config.add_cleanup(lambda: allocator.unload(os.environ))
        return  # the xdist controller runs no test (its workers do): 8 s of CPU before they start
    # In a worker the preload is in effect: the processes its tests start get the user's environment
    # again, as a plugin worker's entries do (nothing to take out in a serial run).
    allocator.unload(os.environ)
    import pytest_msprobe.frameworks.torch_engine  # noqa: F401
    from pytest_msprobe.frameworks import output_bounds

    # The meta device's first call imports torch._dynamo and its operator libraries, which do not
    # survive a second import either (a plugin run in process pays it at its session's start).
    output_bounds.warm_up()

    if importlib.util.find_spec("mindspore") is not None:
        from pytest_msprobe.frameworks import mindspore as ms_framework

        ms_framework.mindspore()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first (a stable sort: the file order otherwise), handed out one at a time under
    xdist (pytest_configure). The suite is CPU-bound on two workers; a long test handed out last keeps
    one worker busy while the other has nothing left."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# The pytest runs the tests start (pytester's, in process or not, their xdist workers, the docs'
# commands) check dumps: none uses Hypothesis, whose plugin costs each process 0.45 CPU s to import.
WITHOUT_HYPOTHESIS = "-p no:hypothesispytest"


@pytest.fixture(autouse=True)
def _child_runs_without_hypothesis(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")  # it clears PYTEST_ADDOPTS: set it after
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    if WITHOUT_HYPOTHESIS not in addopts:
        monkeypatch.setenv("PYTEST_ADDOPTS", f"{addopts} {WITHOUT_HYPOTHESIS}".strip())


ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
DUMPS = {
    "pt_tensor_L1": ROOT / "examples" / "pt_tensor_L1",
    **{p.name: p for p in DATA.iterdir() if p.is_dir()},
}


@pytest.fixture
def copy_dump(pytester: pytest.Pytester):
    """Copy a shipped dump folder into the pytester directory; returns its dump.json."""

    def copy(name: str, dest: str = "") -> Path:
        target = pytester.path / (dest or name)
        shutil.copytree(DUMPS[name], target)
        for path in target.rglob("*"):
            path.chmod(0o644 if path.is_file() else 0o755)
        return target / "dump.json"

    return copy


def run_msprobe(pytester: pytest.Pytester, dump: Union[Path, Sequence[Path], None], *args: str, out: str = "out",
                device: Optional[str] = None, subprocess: bool = False) -> pytest.RunResult:
    """pytest on `dump` (a dump.json, a folder, several, or None when args name them) in the
    pytester folder, its CSVs in `out`: the one way the tests run the plugin. In process,
    unless `subprocess` (a run that must be killed, or must not share this process's torch)."""
    dumps = [] if dump is None else [dump] if isinstance(dump, (str, Path)) else list(dump)
    command = [arg for path in dumps for arg in ("--msprobe-dump", str(path))]
    command += ["--msprobe-device", device] if device else []
    runner = pytester.runpytest_subprocess if subprocess else pytester.runpytest
    return runner("-p", "no:cacheprovider", *command, "--msprobe-out", out, *args)


def read_csv(folder: Path, kind: str) -> List[Dict[str, str]]:
    """The rows of the single accuracy_checking_<kind>_*.csv in folder."""
    files = sorted(folder.glob(f"accuracy_checking_{kind}_*.csv"))
    assert len(files) == 1, f"expected one {kind} CSV in {folder}, found {files}"
    with open(files[0], newline="", encoding="utf-8-sig") as handle:
        return list(csv.DictReader(handle))
