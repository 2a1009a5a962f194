"""A run killed with SIGKILL, then resumed: every API gets its rows exactly once."""

from __future__ import annotations

from collections import Counter

import pytest

from conftest import read_csv, run_msprobe
from pytest_msprobe.reports import resume
from pytest_msprobe.reports.csv_files import details_path_for
from pytest_msprobe.reports.journal import journal_path_for

# Kills the process that writes the CSVs (the xdist controller under -n) when the
# KILL_AT-th test report arrives: a run killed at an arbitrary moment.
KILLER = """
import os, signal
seen = []

def pytest_configure(config):
    seen.append(config)

def pytest_runtest_logreport(report):
    if hasattr(seen[0], "workerinput") or report.when != "call":
        return
    seen.append(report)
    if len(seen) - 1 == int(os.environ["KILL_AT"]):
        os.kill(os.getpid(), signal.SIGKILL)
"""


def rows(folder, kind):
    return Counter(tuple(row.values()) for row in read_csv(folder, kind))


@pytest.fixture
def full_run(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    run_msprobe(pytester, dump, out="full", device="recorded")
    return dump, rows(pytester.path / "full", "result"), rows(pytester.path / "full", "details")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_killed_then_resumed_run_has_every_row_once(pytester, full_run, monkeypatch, workers):
    dump, full_result, full_details = full_run
    pytester.makeconftest(KILLER)
    monkeypatch.setenv("KILL_AT", "50")
    killed = run_msprobe(pytester, dump, *workers, device="recorded", subprocess=True)
    assert killed.ret == -9
    partial = rows(pytester.path / "out", "result")
    assert 0 < sum(partial.values()) < sum(full_result.values())
    # A result row never stands without its details rows.
    details = read_csv(pytester.path / "out", "details")
    apis_with_details = {resume.api_of_output(d["API Name"]) for d in details}
    full_apis_with_details = {resume.api_of_output(d[0]) for d in full_details}
    assert {row[0] for row in partial} & full_apis_with_details <= apis_with_details

    monkeypatch.setenv("KILL_AT", "0")
    result_csv = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    resumed = run_msprobe(pytester, dump, *workers, "--msprobe-resume", str(result_csv), device="recorded")
    resumed.stdout.fnmatch_lines([f"msprobe: resuming *{result_csv.name}: {sum(partial.values())} APIs already "
                                  "finished and * entries of APIs without a row (its journal) are not run again"])
    # Per entry: the 50 entries whose results reached the CSVs' writer before the kill are not run
    # again, whether their API has a row or not (the journal). Under xdist the workers deselect.
    resumed.stdout.fnmatch_lines(["*2 workers [[]16 items[]]" if workers else "collected 66 items / 50 deselected *"])
    assert rows(pytester.path / "out", "result") == full_result
    assert rows(pytester.path / "out", "details") == full_details
    assert not list(pytester.path.glob("accuracy_checking_*.csv"))  # appended, no new files
    # The file holds the six bf16 errors, some from before the kill: the exit status says so.
    assert resumed.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.slow
def test_resume_of_a_finished_run_runs_nothing_by_option_or_ini(pytester, full_run):
    dump, full_result, _ = full_run
    result_csv = next((pytester.path / "full").glob("accuracy_checking_result_*.csv"))
    result = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="recorded")
    # Nothing left to run, and the file holds the six bf16 errors: the run fails as the file does.
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes() == {"deselected": 66}
    result.stdout.fnmatch_lines([
        f"resumed {result_csv}: the entries it held before this run:",
        "forward  35 pass, 2 error, 0 warning, 0 SKIP",
        "backward 25 pass, 4 error, 0 warning, 0 SKIP",
        "failures it held, worst first:",  # by name, as the failures of a run
        "Functional.linear.1.forward: output.0: MaxAbsErr 0.00192 >= 0.0001 *",
    ])
    assert rows(pytester.path / "full", "result") == full_result
    pytester.makeini(f"[pytest]\nmsprobe_resume = {result_csv.relative_to(pytester.path)}\n")
    assert run_msprobe(pytester, dump, device="recorded").parseoutcomes() == {"deselected": 66}


@pytest.mark.slow
def test_torn_tail_is_cut_and_its_api_runs_again(pytester, full_run):
    """Killed between the details flush and the result flush, mid-row: prepare cuts both tails."""
    dump, full_result, full_details = full_run
    result_csv = next((pytester.path / "full").glob("accuracy_checking_result_*.csv"))
    details_csv = details_path_for(result_csv)
    lines = result_csv.read_bytes().splitlines(keepends=True)
    last_api = lines[-1].split(b",")[0].decode()
    result_csv.write_bytes(b"".join(lines[:-1]) + lines[-1][:7])  # the last result row, torn
    with open(details_csv, "ab") as handle:
        handle.write(b"Torch.relu.9.forward.output.0,torch.float64,torch.bf")  # an orphan, torn
    finished = resume.prepare(result_csv)
    assert last_api not in finished and len(finished) == sum(full_result.values()) - 1
    assert result_csv.read_bytes() == b"".join(lines[:-1])
    assert all(resume.api_of_output(d["API Name"]) in finished for d in read_csv(pytester.path / "full", "details"))

    run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="recorded")
    assert rows(pytester.path / "full", "result") == full_result
    assert rows(pytester.path / "full", "details") == full_details


@pytest.mark.parametrize("option", ["--msprobe-resume", "--msprobe-baseline"])
def test_a_missing_or_foreign_file_is_a_usage_error_naming_it(pytester, copy_dump, option):
    dump = copy_dump("pt_tensor_L1")
    missing = run_msprobe(pytester, dump, option, "nowhere.csv", device="recorded")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines([f"*{option}: *nowhere.csv*"])
    pytester.path.joinpath("other.csv").write_text("name,value\nx,1\n")
    foreign = run_msprobe(pytester, dump, option, "other.csv", device="recorded")
    assert foreign.ret == pytest.ExitCode.USAGE_ERROR
    foreign.stderr.fnmatch_lines([f"*{option}: *other.csv: not an accuracy_checking*"])
    assert "INTERNALERROR" not in missing.stdout.str() + foreign.stdout.str()


CRASHER = """
import os, signal
from pathlib import Path

def pytest_runtest_setup(item):
    flag = Path(os.environ["CRASH_FLAG"])
    if hasattr(item.config, "workerinput") and item.name == os.environ["CRASH_AT"] and not flag.exists():
        flag.write_text("crashed once")
        os.kill(os.getpid(), signal.SIGKILL)

def pytest_collection_finish(session):
    worker = getattr(session.config, "workerinput", None)
    if worker:
        ids = "\\n".join(item.nodeid for item in session.items)
        Path(os.environ["CRASH_FLAG"] + "." + worker["workerid"]).write_text(ids)
"""


@pytest.mark.slow
def test_a_worker_restarted_mid_resume_deselects_what_the_others_did(pytester, full_run, monkeypatch):
    """The controller appends rows while a crashed worker is replaced and re-collects: same items."""
    dump, full_result, full_details = full_run
    result_csv = next((pytester.path / "full").glob("accuracy_checking_result_*.csv"))
    details_csv = details_path_for(result_csv)
    lines = result_csv.read_bytes().splitlines(keepends=True)
    result_csv.write_bytes(b"".join(lines[:15]))  # a run killed after 14 APIs
    finished = {line.split(b",")[0].decode() for line in lines[1:15]}
    kept = [line for i, line in enumerate(details_csv.read_bytes().splitlines(keepends=True))
            if i == 0 or resume.api_of_output(line.split(b",")[0].decode()) in finished]
    details_csv.write_bytes(b"".join(kept))
    journal_path_for(result_csv).unlink()  # a file of a run without a journal: per API, from the CSV
    crashed = next(row[0] for row in full_result if row[0] not in finished and row[2] == "")  # forward only
    pytester.makeconftest(CRASHER)
    monkeypatch.setenv("CRASH_AT", f"{crashed}.forward")
    monkeypatch.setenv("CRASH_FLAG", str(pytester.path / "crashed"))
    # In process: the crash kills a worker, never this one.
    result = run_msprobe(pytester, dump, "-n", "2", "--msprobe-resume", str(result_csv), device="recorded")
    result.stdout.fnmatch_lines(["*replacing crashed worker*"])
    assert "Different tests were collected" not in result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str()
    collected = {path.name: path.read_text() for path in pytester.path.glob("crashed.gw*")}
    assert len(collected) == 3 and len(set(collected.values())) == 1, collected.keys()  # gw2 replaced the crashed
    written = rows(pytester.path / "full", "result")
    assert max(Counter(row[0] for row in written).values()) == 1  # no API twice
    assert {row for row in written if row[0] != crashed} == {row for row in full_result if row[0] != crashed}


@pytest.mark.slow
def test_a_run_stopped_by_x_leaves_unfinished_apis_out_and_resume_completes_them(pytester, full_run):
    """-x stops after the first failure with many forwards done and no backward: those APIs are not finished."""
    dump, full_result, full_details = full_run
    stopped = run_msprobe(pytester, dump, "-x", device="recorded")
    assert stopped.ret == pytest.ExitCode.TESTS_FAILED
    result_csv = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    stopped.stdout.fnmatch_lines([f"* APIs unfinished when the run stopped, not written: --msprobe-resume "
                                  f"{result_csv} runs them"])
    partial = rows(pytester.path / "out", "result")
    assert all(partial[row] <= full_result[row] for row in partial)  # only whole, final rows
    run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="recorded")
    assert rows(pytester.path / "out", "result") == full_result
    assert rows(pytester.path / "out", "details") == full_details


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_partial_run_resumes_to_the_rows_of_a_whole_one(pytester, full_run, workers):
    """-k forward writes rows with no backward; resumed, only the 29 backward entries run and each
    such row is written again, whole, with the forward the journal kept: the rows of a whole run."""
    dump, full_result, full_details = full_run
    run_msprobe(pytester, dump, "-k", "forward", *workers, device="recorded")
    result_csv = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    partial = read_csv(pytester.path / "out", "result")
    assert len(partial) == 37 and all(row["Backward Test Success"] == "" for row in partial)

    # A resume that runs some of the backward entries (-k linear): the rows it reopens and does not
    # complete are written again as they were, none lost.
    some = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), "-k", "linear", *workers,
                       device="recorded")
    some.stdout.fnmatch_lines(["msprobe: resuming *: 8 APIs already finished and 29 entries of APIs without a row "
                               "(its journal) are not run again; 29 rows without a direction the dump has are "
                               "written again, whole"])
    assert Counter(row["API Name"] for row in read_csv(pytester.path / "out", "result")) == Counter(
        row["API Name"] for row in partial)
    linear = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}["Functional.linear.0"]
    assert linear["Backward Test Success"] == "pass"

    resumed = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), *workers, device="recorded")
    # The 27 backward entries -k linear left: Functional.linear.0 and .1 are whole already.
    if workers:
        resumed.stdout.fnmatch_lines(["*2 workers [[]27 items[]]"])
    else:
        resumed.stdout.fnmatch_lines(["collected 66 items / 39 deselected / 27 selected"])
    assert rows(pytester.path / "out", "result") == full_result
    assert rows(pytester.path / "out", "details") == full_details
    assert resumed.ret == pytest.ExitCode.TESTS_FAILED  # the four bf16 backward errors, and two held before
    again = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), *workers, device="recorded")
    assert again.parseoutcomes() == {"deselected": 66} or workers
    assert rows(pytester.path / "out", "result") == full_result
