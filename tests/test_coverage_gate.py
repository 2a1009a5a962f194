"""A run that compared nothing is no pass; a share of SKIPs past the allowance fails too."""

from __future__ import annotations

import shutil

import pytest

from conftest import read_csv, run_msprobe
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


@pytest.mark.parametrize("strict", [[], ["--msprobe-strict"]])
def test_a_tensor_dump_without_its_tensors_fails_with_one_line(pytester, copy_dump, strict):
    dump = copy_dump("pt_tensor_L1")
    shutil.rmtree(dump.parent / "dump_tensor_data")
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", *strict)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert result.parseoutcomes() == {"skipped": 66}
    result.stdout.fnmatch_lines(["msprobe: */dump.json: a tensor dump without its dump_tensor_data/ folder: *",
                                 "msprobe: a run in which no output is compared fails (exit 5)*",
                                 "msprobe: nothing was compared: 66 of 66 entries SKIPped; *"])
    result.stdout.fnmatch_lines(["  66 x dump_tensor_data: the tensor folder * does not exist  (*"])  # one group
    assert len(read_csv(pytester.path / "out", "result")) == 37  # every API has its row


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
