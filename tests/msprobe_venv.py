"""msprobe 26.2.0 in a virtual environment of its own, for the tests that run msprobe's own tools.

The `msprobe_venv` fixture (session scope, registered in tests/conftest.py) gives an environment
holding `mindstudio-probe==26.2.0` and what shared/tools/README.md installs beside it (torch 2.13,
numpy<2, pandas<3, ml_dtypes<0.6), apart from the test suite's own: msprobe pins what the plugin's
environment must not. Where to find it, first hit wins:

1. `$PYTEST_MSPROBE_MSPROBE_VENV`: a ready one (for development: /work/msprobe-venv);
2. `.msprobe-venv/venv` in the checkout (ignored by git), made by an earlier session;
3. made there now, from the package index, by pip with its own configuration (a machine without an
   NVIDIA GPU takes the CPU build of torch with `PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu`).

So a fresh clone (CI) pays for the install once, and every later session on that machine reuses it;
workers of one `pytest -n N` wait for the one that makes it (a file lock). Where it cannot be had
(no network, pip fails, a ready one without msprobe 26.2.0) the tests that ask for it are skipped,
saying why; the environment counts as made only once its marker is written, last.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import venv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ("torch==2.13.0", "mindstudio-probe==26.2.0", "numpy<2", "pandas<3", "ml_dtypes<0.6")
MSPROBE_VERSION = "26.2.0"
READY = "PYTEST_MSPROBE_MSPROBE_VENV"
CACHE = ROOT / ".msprobe-venv"
INSTALL_TIMEOUT = 3600  # seconds: torch is a large download
# msprobe's acc_check with the CPU as its device (msprobe has none); shared/tools/README.md.
CPU_ACC_CHECK = ROOT / "bench" / "timing" / "msprobe_cpu_acc_check.py"
FAULTY_ACC_CHECK = ROOT / "tests" / "msprobe_faulty_device.py"


@dataclass(frozen=True)
class MsprobeVenv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def run(
        self, *args: str, cwd: Path | None = None, timeout: float = 900, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """This environment's interpreter on args, env added to this process's environment (less its
        PYTHON* variables); its output captured as text."""
        environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
        environment.update(env or {}, PYTHONIOENCODING="utf-8")
        return subprocess.run(
            [str(self.python), *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout
        )

    def msprobe(self, *args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
        """msprobe's command line: `msprobe api_precision_compare -npu A -gpu B -o OUT`, ..."""
        main = "import sys; from msprobe.msprobe import main; sys.argv[0] = 'msprobe'; sys.exit(main())"
        return self.run("-c", main, *args, cwd=cwd, timeout=timeout)

    def acc_check_cpu(
        self, dump_json: Path, out: Path, faulty: Sequence[str] = (), timeout: float = 900
    ) -> subprocess.CompletedProcess:
        """msprobe's own PyTorch pre-check of a dump, the CPU standing for its device; the CSV pair in
        out. faulty: msprobe's names of APIs whose tested outputs come out off by a relative 1e-3
        (tests/msprobe_faulty_device.py), for a faulty NPU's run."""
        out.mkdir(parents=True, exist_ok=True)
        script, env = (FAULTY_ACC_CHECK, {"MSPROBE_FAULTY_APIS": ",".join(faulty)}) if faulty else (CPU_ACC_CHECK, {})
        command = (str(script), "acc_check", "-api_info", str(dump_json), "-o", str(out))
        return self.run(*command, timeout=timeout, env=env)


def _has_msprobe(root: Path) -> str:
    """Why root is not an environment with msprobe 26.2.0, or "" where it is."""
    python = root / "bin" / "python"
    if not python.is_file():
        return f"{root}: no bin/python in it"
    probe = "import importlib.metadata as m; print(m.version('mindstudio-probe'))"
    try:
        found = MsprobeVenv(root).run("-c", probe, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python}: does not run: {exc}"
    version = found.stdout.strip()
    if found.returncode != 0 or version != MSPROBE_VERSION:
        return f"{root}: holds mindstudio-probe {version or '(none)'}, not {MSPROBE_VERSION}"
    return ""


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _make(root: Path) -> str:
    """Make the environment at root; why it could not be made, or ""."""
    marker = root / ".installed"
    wanted = "\n".join(REQUIREMENTS)
    if marker.is_file() and marker.read_text() == wanted and not _has_msprobe(root):
        return ""
    marker.unlink(missing_ok=True)
    try:
        venv.EnvBuilder(clear=True, with_pip=True).create(root)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"python -m venv {root} failed: {exc}"
    pip = [str(root / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", *REQUIREMENTS]
    try:
        installed = subprocess.run(pip, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"pip install {' '.join(REQUIREMENTS)} ran past {INSTALL_TIMEOUT} s"
    if installed.returncode != 0:
        return f"pip install {' '.join(REQUIREMENTS)} failed (no network?): {_tail(installed.stderr)}"
    why = _has_msprobe(root)
    if not why:
        marker.write_text(wanted)
    return why


def find_or_make() -> MsprobeVenv:
    """The environment, or a pytest skip saying why there is none."""
    ready = os.environ.get(READY)
    if ready:
        why = _has_msprobe(Path(ready))
        if why:
            pytest.skip(f"${READY}: {why}")
        return MsprobeVenv(Path(ready))
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers of this run wait for the one that makes it
        why = _make(CACHE / "venv")
    if why:
        pytest.skip(f"no msprobe {MSPROBE_VERSION} environment: {why}")
    return MsprobeVenv(CACHE / "venv")


@pytest.fixture(scope="session")
def msprobe_venv() -> MsprobeVenv:
    if sys.platform == "win32":
        pytest.skip("the msprobe environment is made on POSIX systems only")
    return find_or_make()
