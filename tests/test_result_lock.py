"""One writer per result CSV: a run that writes a pair and its journal holds a lock on it for its
whole length; a resume or a baseline of it started meanwhile is refused, naming the holder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT, read_csv, run_msprobe
from pytest_msprobe.reports import files


def paused_run(pytester: pytest.Pytester, dump: Path, at: str, *args: str) -> subprocess.Popen:
    """A serial run that stops in the check of entry `at` until the file `go` exists."""
    for name in ("paused", "go"):
        (pytester.path / name).unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "tests"),
        "MSPROBE_PAUSE_AT": at,
        "MSPROBE_PAUSED": str(pytester.path / "paused"),
        "MSPROBE_GO": str(pytester.path / "go"),
    }
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "entry_hooks"]
    command += ["--msprobe-dump", str(dump), "--msprobe-device", "cpu", "--msprobe-out", "out", *args]
    run = subprocess.Popen(
        command, cwd=pytester.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for _ in range(3000):
        if (pytester.path / "paused").exists() or run.poll() is not None:
            break
        time.sleep(0.1)
    assert (pytester.path / "paused").exists(), run.communicate()[0][-3000:]
    return run


def refused(pytester: pytest.Pytester, dump: Path, option: str, csv: Path, holder: int) -> None:
    result = run_msprobe(pytester, dump, option, str(csv), out="other", device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: {option}: *{csv} is being written by another run: pid {holder} on host "
            f"{socket.gethostname()}, started 20*UTC*"
        ]
    )
    assert not list((pytester.path / "other").glob("accuracy_checking_*"))


@pytest.mark.slow
def test_a_resume_or_baseline_of_a_csv_another_run_writes_is_refused_naming_it(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    first = paused_run(pytester, dump, "Torch.softmax.0.backward")
    result_csv = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    try:
        before = result_csv.read_bytes()
        refused(pytester, dump, "--msprobe-resume", result_csv, first.pid)
        refused(pytester, dump, "--msprobe-baseline", result_csv, first.pid)
        assert result_csv.read_bytes() == before  # nothing cut, nothing appended
    finally:
        first.kill()  # SIGKILL: its lock file stays, unheld
        first.communicate()
    assert files.lock_path_for(result_csv).exists()

    # Two resumes at once: the second is refused while the first runs; a lock left by a killed run is no hold.
    second = paused_run(pytester, dump, "Functional.conv2d.0.backward", "--msprobe-resume", str(result_csv))
    try:
        refused(pytester, dump, "--msprobe-resume", result_csv, second.pid)
    finally:
        (pytester.path / "go").write_text("go")
        output = second.communicate(timeout=600)[0]
    assert second.returncode == pytest.ExitCode.TESTS_FAILED, output[-3000:]
    names = Counter(row["API Name"] for row in read_csv(pytester.path / "out", "result"))
    assert len(names) == 26 and set(names.values()) == {1}  # every API once
    assert not files.lock_path_for(result_csv).exists()  # released as the run ended
    assert run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="cpu").ret == 1  # free again


def test_the_lock_names_its_holder_and_is_gone_once_released(tmp_path):
    result_csv = tmp_path / "accuracy_checking_result_1.csv"
    lock = files.ResultLock.acquire(result_csv)
    with pytest.raises(files.LockHeld, match=rf"pid {os.getpid()} on host .*, started 20\d\d-"):
        files.ResultLock.acquire(result_csv)
    assert files.holder_of(result_csv) is not None
    lock.release()
    assert not files.lock_path_for(result_csv).exists() and files.holder_of(result_csv) is None
    files.lock_path_for(result_csv).write_text("left by a killed run")
    files.ResultLock.acquire(result_csv).release()  # a lock nobody holds is taken


def test_a_link_at_the_locks_name_is_refused_and_left_alone(tmp_path):
    result_csv = tmp_path / "accuracy_checking_result_1.csv"
    target = tmp_path / "victim"
    target.write_text("theirs")
    files.lock_path_for(result_csv).symlink_to(target)
    with pytest.raises(files.FileRefused, match=rf"{files.lock_path_for(result_csv)}: a symbolic link to {target}"):
        files.ResultLock.acquire(result_csv)
    assert target.read_text() == "theirs"
