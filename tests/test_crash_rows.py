"""A serial run that an entry crashes (a segfault in the API): the crashed run's terminal names the
entry, and a resume records it as an error row naming the crash, without running it again."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT, read_csv, run_msprobe
from pytest_msprobe.reports.journal import Journal, journal_path_for, read_contents
from pytest_msprobe.results import EntryResult

CRASH_AT = "Functional.gelu.0.forward"  # its API has a backward too, which runs after the resume


def by_api(folder: Path) -> dict[str, dict[str, str]]:
    found = read_csv(folder, "result")
    names = Counter(row["API Name"] for row in found)
    assert [name for name, n in names.items() if n > 1] == []  # no row doubled
    return {row["API Name"]: row for row in found}


@pytest.mark.slow
def test_a_segfault_in_an_entry_is_named_then_resumed_as_its_error_row(pytester, copy_dump, monkeypatch):
    dump = copy_dump("pt_stats_L1")
    run_msprobe(pytester, dump, out="full", device="cpu")
    full = by_api(pytester.path / "full")
    full_details = Counter(tuple(row.values()) for row in read_csv(pytester.path / "full", "details"))

    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))
    monkeypatch.setenv("MSPROBE_CRASH_AT", CRASH_AT)
    crashed = run_msprobe(pytester, dump, "-p", "entry_hooks", device="cpu", subprocess=True)
    assert crashed.ret == -signal.SIGSEGV
    # pytest's faulthandler prints the traceback of the crash: a frame of it names the entry.
    crashed.stderr.fnmatch_lines(["*Fatal Python error: Segmentation fault*", f"*msprobe: running {CRASH_AT} *"])
    result_csv = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    assert "Functional.gelu.0" not in by_api(pytester.path / "out")

    # Still crashing at it: the resume must not run it again.
    resumed = run_msprobe(
        pytester, dump, "-p", "entry_hooks", "--msprobe-resume", str(result_csv), device="cpu", subprocess=True
    )
    assert resumed.ret == pytest.ExitCode.TESTS_FAILED, resumed.stdout.str()[-3000:]
    resumed.stdout.fnmatch_lines([f"msprobe: resuming *: *{CRASH_AT} is an error, not run again: the process ended*"])
    assert "Fatal Python error" not in resumed.stderr.str()
    rows = by_api(pytester.path / "out")
    assert set(rows) == set(full)
    gelu = rows.pop("Functional.gelu.0")
    assert gelu["Forward Test Success"] == "error" and gelu["Backward Test Success"] == "pass"
    assert (
        "the process ended while this entry ran" in gelu["Message"]
        and result_csv.name.replace("result", "journal").removesuffix(".csv") in gelu["Message"]
    )
    full.pop("Functional.gelu.0")
    assert rows == full  # every other API as an uninterrupted run writes it
    details = Counter(tuple(row.values()) for row in read_csv(pytester.path / "out", "details"))
    assert {k: n for k, n in details.items() if not k[0].startswith("Functional.gelu.0.forward")} == {
        k: n for k, n in full_details.items() if not k[0].startswith("Functional.gelu.0.forward")
    }

    # A second resume finds the file finished: nothing runs, nothing is written twice.
    again = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="cpu")
    assert again.ret == pytest.ExitCode.TESTS_FAILED
    assert by_api(pytester.path / "out")["Functional.gelu.0"] == gelu


def result(api: str, direction: str = "forward") -> EntryResult:
    return EntryResult(api, direction, "pass")


def test_the_journal_tells_the_entry_a_run_died_in_from_one_it_finished_or_left_in_order(tmp_path):
    """Only a process that died leaves an open `running` line: a result closes it, an orderly end cuts it."""
    path = journal_path_for(tmp_path / "accuracy_checking_result_1.csv")
    journal = Journal(path, fresh=True)
    journal.start("Functional.relu.0", "forward", "d")
    journal.add(result("Functional.relu.0"))
    assert read_contents(path).crashed is None  # its result closed it
    size = path.stat().st_size
    journal.start("Functional.gelu.0", "forward", "d")
    journal.end()  # Ctrl-C, -x, a full disk: the process ends in order, its line is cut
    assert read_contents(path).crashed is None and path.stat().st_size == size
    journal.start("Functional.\ud800.0", "backward", "d")  # a lone surrogate: written escaped, read back
    journal.close()
    contents = read_contents(path)
    assert (contents.crashed.api, contents.crashed.direction) == ("Functional.\ud800.0", "backward")
    assert [r.api for r in contents.results] == ["Functional.relu.0"]
    assert all(json.loads(line) for line in path.read_text(encoding="ascii").splitlines())
