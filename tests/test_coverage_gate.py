"""A run that compared nothing is no pass; a share of SKIPs past the allowance fails too."""

from __future__ import annotations

import fnmatch
import re
import shutil

import pytest

from conftest import ROOT, read_csv, run_msprobe
from pytest_msprobe.reports.coverage import Coverage, shortfall
from pytest_msprobe.results import EntryResult, OutputResult


def entry(*statuses: str) -> EntryResult:
    outputs = [OutputResult(i, status) for i, status in enumerate(statuses)]
    skipped = all(status == "SKIP" for status in statuses)
    return EntryResult("Torch.add.0", "forward", "SKIP" if skipped else "pass", outputs=outputs)


def test_nothing_compared_is_a_shortfall_whatever_the_allowance():
    coverage = Coverage()
    for result in (entry("SKIP"), entry(), entry("SKIP", "SKIP")):
        coverage.add(result)
    assert "nothing was compared: 3 of 3 entries SKIPped" in shortfall(coverage, 1.0)


def test_the_share_of_skips_is_held_to_the_allowance():
    coverage = Coverage()
    for result in (entry("SKIP"), entry("pass"), entry("pass", "SKIP"), entry("error")):
        coverage.add(result)
    assert shortfall(coverage, 1.0) is None and shortfall(coverage, 0.25) is None
    assert "1 of 4 entries SKIPped (25%), more than --msprobe-max-skip-ratio 0.2 allows" in shortfall(coverage, 0.2)
    assert shortfall(Coverage(), 0.0) is None  # no entry at all: pytest's own "no tests ran"


NO_TENSORS = "is a tensor dump without its dump_tensor_data/ folder: copy dump_tensor_data/ beside dump.json, or "


@pytest.mark.parametrize("dump_name", ["pt_tensor_L1", "ms_tensor_L1"])
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--msprobe-mode", "real", "--msprobe-device", "cpu"],
         "ERROR: --msprobe-mode real reads every input from the dump's tensor files, and */dump.json " + NO_TENSORS
         + "leave out --msprobe-mode real to run every entry on random data drawn from the recorded statistics"),
        (["--msprobe-device", "recorded"],
         "ERROR: --msprobe-device recorded judges the outputs the dump recorded, and */dump.json " + NO_TENSORS
         + "run each call again on random data drawn from the recorded statistics with --msprobe-device cpu"),
        (["--msprobe-device", "recorded", "--msprobe-mode", "real"], "ERROR: --msprobe-device recorded judges *"),
        (["--msprobe-device", "recorded,cpu", "--msprobe-strict"],
         "ERROR: --msprobe-device recorded,cpu judges the outputs the dump recorded, and */dump.json " + NO_TENSORS
         + "run each call again on random data drawn from the recorded statistics with --msprobe-device cpu"),
    ],
    ids=["real", "recorded", "recorded-real", "recorded,cpu"],
)
def test_a_run_that_needs_the_tensors_of_a_dump_copied_without_them_is_a_usage_error(
    pytester, copy_dump, dump_name, args, said
):
    """Real mode reads every input from the tensor files, recorded mode judges the outputs they hold:
    without dump_tensor_data/ a run would SKIP every entry, or run the few that read no tensor and go
    green. One line says what to type instead; nothing runs, nothing is written."""
    dump = copy_dump(dump_name)
    shutil.rmtree(dump.parent / "dump_tensor_data")
    result = run_msprobe(pytester, dump, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([said])
    assert [line for line in result.stderr.lines if line.strip()] == [result.stderr.lines[0]]  # one line
    assert not (pytester.path / "out").exists() or not list((pytester.path / "out").iterdir())


def test_real_mode_on_a_statistics_dump_is_a_usage_error(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    result = run_msprobe(pytester, dump, "--msprobe-mode", "real", device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --msprobe-mode real reads every input from a tensor dump's files, and "
                                 "*/dump.json is a statistics dump (no tensors): leave out --msprobe-mode real to "
                                 "run its entries on random data drawn from the recorded statistics"])


MISSING = ("*/dump.json: a tensor dump without its dump_tensor_data/ folder: no recorded tensor can be read, so every "
           "entry runs on random data drawn from the recorded statistics, not on the step's own values (copy "
           "dump_tensor_data/ beside dump.json to check them)")


@pytest.mark.parametrize("quiet", [[], ["-q"]])
def test_the_default_mode_says_in_the_header_and_the_summary_that_the_tensors_are_missing(pytester, copy_dump, quiet):
    """--msprobe-mode auto (the default) on a device: every entry on random data, said once in the header,
    once at the head of the summary (which -q does not hide), and counted among the fallbacks."""
    dump = copy_dump("pt_tensor_L1")
    shutil.rmtree(dump.parent / "dump_tensor_data")
    result = run_msprobe(pytester, dump, "-k", "relu or linear.0", *quiet, device="cpu")
    assert result.ret == pytest.ExitCode.OK
    if not quiet:
        result.stdout.fnmatch_lines([f"msprobe: {MISSING}"])
    section = [line for line in result.stdout.str().split("= msprobe =", 1)[1].splitlines()[1:] if line]
    assert fnmatch.fnmatch(section[0], "/" + MISSING) and section[1].startswith("forward ")  # first, then the counts
    result.stdout.fnmatch_lines(["fallbacks:",
                                 "   4 entries on random data: their tensor dump has no dump_tensor_data/ folder  (*"])
    rows = read_csv(pytester.path / "out", "result")
    assert rows and all("dump_tensor_data: the tensor folder is missing, random data used" in row["Message"]
                        for row in rows)


def test_random_mode_asked_for_random_data(pytester, copy_dump):
    """--msprobe-mode random reads no tensor file: a dump without them is no fallback, and nothing says so."""
    dump = copy_dump("pt_tensor_L1")
    shutil.rmtree(dump.parent / "dump_tensor_data")
    result = run_msprobe(pytester, dump, "-k", "relu", "--msprobe-mode", "random", device="cpu")
    assert result.ret == pytest.ExitCode.OK
    assert "dump_tensor_data" not in result.stdout.str()


def test_a_run_that_compared_nothing_exits_5_with_the_line_ci_md_shows(pytester, copy_dump):
    """docs/ci.md's promise, word for word: every entry selected SKIPs (an API with no PyTorch
    equivalent), so nothing was compared: exit 5, and the line the page shows."""
    dump = copy_dump("ms_cnn_mix")
    result = run_msprobe(pytester, dump, "-k", "Conv2D", device="recorded")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED == 5
    page = (ROOT / "docs" / "ci.md").read_text()
    shown = re.search(r"exits 5 .*?```\n(msprobe: nothing was compared: .*?)\n```", page, re.S)
    assert shown, "docs/ci.md shows the line of a run that compared nothing"
    result.stdout.fnmatch_lines([shown.group(1)])
    result.stdout.fnmatch_lines(["msprobe: a run in which no output is compared fails (exit 5)*"])


@pytest.mark.slow
def test_a_share_of_skips_past_the_allowance_fails(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    skipped_one = dump.parent / "dump_tensor_data" / "Functional.relu.0.forward.input.0.pt"
    skipped_one.unlink()
    allowed = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype",
                          "--msprobe-mode", "real")
    assert allowed.ret == pytest.ExitCode.OK and allowed.parseoutcomes()["skipped"] >= 1
    refused = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype",
                          "--msprobe-mode", "real", "--msprobe-max-skip-ratio", "0", "--msprobe-out", "o2")
    assert refused.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    refused.stdout.fnmatch_lines(["msprobe: a run fails (exit 5) when more than 0 of its entries SKIP*",
                                  "msprobe: * of 66 entries SKIPped (*), more than --msprobe-max-skip-ratio 0 allows"])


def test_a_tensor_dump_checked_on_a_device_says_its_recorded_outputs_are_not_judged(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    rerun = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--collect-only")
    rerun.stdout.fnmatch_lines(["msprobe: */dump.json: the dump records its outputs, and this run does not judge them: "
                                "it runs each call again on cpu; --msprobe-device recorded judges the recorded outputs"])
    recorded = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--collect-only")
    assert "does not judge them" not in recorded.stdout.str()
