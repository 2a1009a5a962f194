"""Runs that a hostile dump, a full disk or a crash used to turn against the reports: long
cells through a kill and a resume, names that look like formulas, two runs into one folder, an
output folder that cannot be written, a disk that fills, a worker that dies after its verdict,
a resume with nothing left, Python files in a dump's folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_resume import KILLER

from conftest import read_csv, run_msprobe
from pytest_msprobe.reports import manifest
from pytest_msprobe.reports.csv_files import read_result_rows


def rows(folder: Path, kind: str = "result") -> Counter:
    return Counter(tuple(row.values()) for row in read_csv(folder, kind))


def bf16(shape=(4, 4)) -> dict:
    return {
        "type": "torch.Tensor",
        "dtype": "torch.bfloat16",
        "shape": list(shape),
        "Max": 1.0,
        "Min": -1.0,
        "Mean": 0.0,
        "Norm": 1.0,
        "requires_grad": False,
    }


def with_entries(dump_json: Path, entries: dict, first: bool = True) -> None:
    document = json.loads(dump_json.read_text())
    document["data"] = {**entries, **document["data"]} if first else {**document["data"], **entries}
    dump_json.write_text(json.dumps(document))


def foreach_mul(n: int = 1200) -> dict:
    """One call over 1,200 bf16 tensors: every output off by bf16 rounding, a Message of ~180,000 characters."""
    return {
        "Aten._foreach_mul.0.forward": {
            "input_args": [[bf16() for _ in range(n)], {"type": "float", "value": 1.7}],
            "input_kwargs": {},
            "output": [[bf16() for _ in range(n)]],
        }
    }


@pytest.mark.slow
def test_cells_past_the_csv_limit_survive_a_kill_and_a_resume_and_a_baseline(pytester, copy_dump, monkeypatch):
    dump = copy_dump("pt_stats_L1")
    with_entries(dump, foreach_mul())
    run_msprobe(pytester, dump, out="full", device="cpu")
    full, full_details = rows(pytester.path / "full"), rows(pytester.path / "full", "details")
    long = next(row for row in full if row[0] == "Aten._foreach_mul.0")
    assert long[1] == "error" and 30_000 < len(long[3]) <= 32_000 and long[3].endswith("in its details row]")
    assert sum(row[0].startswith("Aten._foreach_mul.0.forward.output.") for row in full_details) == 1200

    pytester.makeconftest(KILLER)
    monkeypatch.setenv("KILL_AT", "12")
    killed = run_msprobe(pytester, dump, device="cpu", subprocess=True)
    assert killed.ret == -9
    result_csv = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    partial = read_result_rows(result_csv)
    assert "Aten._foreach_mul.0" in {row[0] for row in partial} and len(partial) < len(full)
    monkeypatch.setenv("KILL_AT", "0")
    resumed = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="cpu")
    resumed.stdout.fnmatch_lines([f"msprobe: resuming *: {len(partial)} APIs already finished* are not run again"])
    assert rows(pytester.path / "out") == full and rows(pytester.path / "out", "details") == full_details

    baseline = run_msprobe(pytester, dump, "--msprobe-baseline", str(result_csv), out="again", device="cpu")
    assert baseline.ret == 0 and baseline.parseoutcomes()["xfailed"] == 5  # _foreach_mul and the bf16 four


def test_a_name_that_looks_like_a_formula_gets_one_row_through_a_resume(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    names = ["'=cmd|' /C calc'!A0", "\n=1+2", '=HYPERLINK("x")', "'", "+1", "\t-2", "@SUM(A1)"]
    with_entries(dump, {name: {"input_args": []} for name in names})
    first = run_msprobe(pytester, dump, device="cpu")
    result_csv = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    written = rows(pytester.path / "out")
    for row in read_csv(pytester.path / "out", "result"):
        assert not row["API Name"].startswith(("=", "+", "-", "@", "\t", "\n"))  # text, for a spreadsheet
    resumed = run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="cpu")
    assert resumed.parseoutcomes()["deselected"] == first.parseoutcomes()["passed"] + 4 + len(names)  # all of them
    assert rows(pytester.path / "out") == written
    assert max(Counter(row[0] for row in read_result_rows(result_csv)).values()) == 1


SAME_SECOND = """
import pytest_msprobe.glue.reporter
pytest_msprobe.glue.reporter.timestamp = lambda: "20260101000000"  # both runs start in the same second
"""


@pytest.mark.slow
def test_two_runs_at_once_into_one_folder_never_share_a_file(pytester, copy_dump):
    stats, tensor = copy_dump("pt_stats_L1"), copy_dump("pt_tensor_L1")
    pytester.makeconftest(SAME_SECOND)
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "--msprobe-dump",
                str(path),
                "--msprobe-device",
                "cpu",
                "--msprobe-out",
                "shared",
            ],
            cwd=pytester.path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for path in (stats, tensor)
    ]
    assert [run.wait(timeout=600) for run in runs] == [1, 1]  # each has its bf16 rounding failures
    files = sorted((pytester.path / "shared").glob("accuracy_checking_result_*.csv"))
    assert [f.name for f in files] == [
        "accuracy_checking_result_20260101000000.csv",
        "accuracy_checking_result_20260101000000_1.csv",
    ]
    expected = {
        frozenset(name.rsplit(".", 1)[0] for name in json.loads(path.read_text())["data"]) for path in (stats, tensor)
    }
    found = set()
    for path in files:
        apis = [row[0] for row in read_result_rows(path)]
        assert len(apis) == len(set(apis))  # no API twice
        found.add(frozenset(apis))
        assert (path.parent / path.name.replace("result", "details")).is_file()
    assert found == expected  # each file holds one run, whole


@pytest.mark.parametrize("workers", [[], pytest.param(["-n", "2"], marks=pytest.mark.slow)], ids=["serial", "xdist"])
@pytest.mark.parametrize("where", ["a file in its place", "below a file"])
def test_an_output_folder_that_cannot_be_written_is_a_usage_error_before_any_entry(pytester, copy_dump, where, workers):
    dump = copy_dump("pt_stats_L1")
    (pytester.path / "taken").write_text("a file where the folder should be")
    out = "taken" if where == "a file in its place" else "taken/below"
    result = run_msprobe(pytester, dump, *workers, out=out, device="cpu", subprocess=bool(workers))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --msprobe-out: *{out}: cannot write the CSV files there: *"])
    assert "passed" not in result.stdout.str() and "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_output_folder_is_a_usage_error(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    (pytester.path / "ro").mkdir(mode=0o555)
    result = run_msprobe(pytester, dump, out="ro", device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --msprobe-out: *ro: cannot write the CSV files there: Permission denied"])


# A disk that fills: past 6,000 bytes a file of this process takes no more (EFBIG, as ENOSPC would).
FULL_DISK = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))
"""


@pytest.mark.slow
def test_a_disk_that_fills_stops_the_run_with_one_line_and_resume_recovers_every_row(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    run_msprobe(pytester, dump, out="full", device="cpu")
    full, full_details = rows(pytester.path / "full"), rows(pytester.path / "full", "details")
    pytester.makeconftest(FULL_DISK)
    # Output through pipes: the limit is on files, and pytester's would be one.
    stopped = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--msprobe-dump",
            str(dump),
            "--msprobe-device",
            "cpu",
            "--msprobe-out",
            "out",
        ],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert stopped.returncode == pytest.ExitCode.INTERRUPTED, stopped.stdout[-3000:]
    output = stopped.stdout + stopped.stderr
    # Said once, as pytest's interruption, and quoted once by the summary of what it left unchecked:
    # not once per entry that came after it.
    said = [line for line in output.splitlines() if "msprobe: cannot write" in line]
    assert len(said) == 2 and "File too large): stopped" in said[-1], said
    assert said[0].startswith("the run stopped early (msprobe: cannot write") and "Interrupted" in said[1], said
    assert "INTERNALERROR" not in output and "Traceback" not in output
    result_csv = next((pytester.path / "out").glob("accuracy_checking_result_*.csv"))
    # Its manifest (a few hundred bytes, a new file) keeps what it left unchecked, for a later report.
    left = manifest.stopped_of(manifest.read(result_csv))
    assert left is not None and left.why.startswith("msprobe: cannot write")
    assert manifest.stopped_lines([(result_csv, left)])[0][0] == said[0]  # what a later report says: the terminal's
    (pytester.path / "conftest.py").unlink()
    run_msprobe(pytester, dump, "--msprobe-resume", str(result_csv), device="cpu")
    assert rows(pytester.path / "out") == full and rows(pytester.path / "out", "details") == full_details
    assert manifest.read(result_csv)["stopped"] is None  # whole again


# Kills its worker in the teardown of one entry: the verdict was sent, the worker never says it is done.
DIES_AFTER_VERDICT = """
import os, signal
from pathlib import Path

def pytest_runtest_teardown(item):
    flag = Path(os.environ["CRASH_FLAG"])
    if hasattr(item.config, "workerinput") and item.name == os.environ["CRASH_AT"] and not flag.exists():
        flag.write_text("once")
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_a_worker_that_dies_after_its_verdict_leaves_counts_exit_status_and_rows_agreeing(
    pytester, copy_dump, monkeypatch
):
    dump = copy_dump("pt_stats_L1")
    pytester.makeconftest(DIES_AFTER_VERDICT)
    monkeypatch.setenv("CRASH_AT", "Functional.relu.0.forward")
    monkeypatch.setenv("CRASH_FLAG", str(pytester.path / "crashed"))
    result = run_msprobe(pytester, dump, "-n", "2", device="cpu")
    result.stdout.fnmatch_lines(["*went down after Functional.relu.0.forward was judged: its result stands*"])
    by_api = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    assert by_api["Functional.relu.0"]["Forward Test Success"] == "pass"
    errors = sum(
        row[key] == "error" for row in by_api.values() for key in ("Forward Test Success", "Backward Test Success")
    )
    outcomes = result.parseoutcomes()
    assert (outcomes["failed"], outcomes["passed"]) == (errors, 44 - errors) and result.ret == 1
    result.stdout.fnmatch_lines(
        [
            f"forward  * pass, {sum(r['Forward Test Success'] == 'error' for r in by_api.values())}"
            " error, 0 warning, 0 SKIP"
        ]
    )


@pytest.mark.slow
def test_a_resume_with_nothing_left_exits_as_its_file_says(pytester, copy_dump):
    """5 (no tests) was the exit status of a finished file, its errors or not: now 1 with errors, 0 without."""
    dump = copy_dump("pt_stats_L1")
    document = json.loads(dump.read_text())
    failing = ("Torch.matmul.1", "Functional.linear.1")  # bf16 rounding under the basic standard
    document["data"] = {name: body for name, body in document["data"].items() if not name.startswith(failing)}
    dump.write_text(json.dumps(document))
    assert run_msprobe(pytester, dump, out="clean", device="cpu").ret == 0
    clean_csv = next((pytester.path / "clean").glob("accuracy_checking_result_*.csv"))
    assert run_msprobe(pytester, dump, "--msprobe-resume", str(clean_csv), device="cpu").ret == 0
    failing_dump = copy_dump("pt_stats_L1", "with_errors")
    assert run_msprobe(pytester, failing_dump, out="failing", device="cpu").ret == 1
    failing_csv = next((pytester.path / "failing").glob("accuracy_checking_result_*.csv"))
    again = run_msprobe(pytester, failing_dump, "--msprobe-resume", str(failing_csv), device="cpu")
    assert again.ret == pytest.ExitCode.TESTS_FAILED
    # Something left, and it passes: the errors the file held still fail the run.
    lines = failing_csv.read_bytes().splitlines(keepends=True)
    last = next(i for i in range(len(lines) - 1, 0, -1) if b"error" not in lines[i])
    failing_csv.write_bytes(b"".join(lines[:last] + lines[last + 1 :]))
    resumed = run_msprobe(pytester, failing_dump, "--msprobe-resume", str(failing_csv), device="cpu")
    assert resumed.parseoutcomes().get("failed", 0) == 0 and resumed.ret == pytest.ExitCode.TESTS_FAILED
    resumed.stdout.fnmatch_lines(["resumed *: the entries it held before this run:"])


@pytest.mark.parametrize("code", ["conftest.py", "__init__.py"])
@pytest.mark.parametrize("given", ["the dump.json", "the dump folder"])
def test_python_files_in_a_dumps_folders_are_never_imported(pytester, copy_dump, code, given):
    """pytest does not walk a dump's folders to collect it: the file is said, not imported
    (tests/test_code_beside.py runs the other layouts, and from inside the folders)."""
    dump = copy_dump("pt_stats_L1", "dump_path/step0/rank0")
    mark = pytester.path / "ran"
    (pytester.path / "dump_path" / code).write_text(f"open({str(mark)!r}, 'w')\n")
    target = dump if given == "the dump.json" else pytester.path / "dump_path"
    result = run_msprobe(pytester, target, "-k", "relu", device="cpu")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"msprobe: *dump_path/{code}: beside a dump, not imported"])
    assert [row["API Name"] for row in read_csv(pytester.path / "out", "result")] == ["Functional.relu.0"]
    assert not mark.exists()


def test_the_element_bound_is_an_option_and_an_ini_key(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    result = run_msprobe(pytester, dump, "--msprobe-max-elements", "100", "-rs", device="cpu")
    # Outputs are sized first (their recorded shapes), then the inputs random data would fill.
    result.stdout.fnmatch_lines(
        [
            "*Functional.conv2d.0.forward: output[[]0[]].shape: recorded [[]2, 4, 4, 4[]] is 128 elements, "
            "more than --msprobe-max-elements 100: not run (nothing was allocated for it)*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*Functional.linear.0.forward: input_args[[]0[]].shape: [[]2, 64[]] is 128 elements: random data "
            "for this entry would be 128, more than --msprobe-max-elements 100*",
        ]
    )
    pytester.makeini("[pytest]\nmsprobe_max_elements = 0\n")
    refused = run_msprobe(pytester, dump, device="cpu")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--msprobe-max-elements must be at least 1, not 0*"])
