"""CI gating: the exit status, --junitxml metrics, and a baseline of known failures."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from test_e2e_torch import ALTERATIONS, alter

from conftest import read_csv, run_msprobe

# examples/pt_tensor_L1 under the default rule: bf16 outputs fail on rounding alone.
CLEAN_FAILURES = {"Torch.matmul.1.forward", "Functional.linear.1.forward", "Tensor.float.2.backward",
                  "Functional.linear.1.backward", "Tensor.float.0.backward", "Torch.matmul.1.backward"}



def entries(result, word):
    """Entry names of the short summary lines that start with word (FAILED, XFAIL, XPASS)."""
    return {line.split("::", 1)[1].split(" ")[0] for line in result.outlines if line.startswith(f"{word} ")}


@pytest.fixture
def altered(copy_dump):
    dump = copy_dump("pt_tensor_L1", "altered")
    for entry, fn in ALTERATIONS.items():
        alter(dump.parent / "dump_tensor_data" / f"{entry}.output.0.pt", fn)
    return dump


@pytest.mark.slow
def test_exit_status_is_zero_when_all_pass_and_one_on_an_error(pytester, copy_dump, altered):
    clean = copy_dump("pt_tensor_L1", "clean")
    loose = ("--msprobe-max-abs-err", "1e-2")  # the bf16 rounding of the clean dump passes
    assert run_msprobe(pytester, clean, *loose, out="clean_out", device="recorded").ret == pytest.ExitCode.OK
    broken = run_msprobe(pytester, altered, *loose, "-rf", out="altered_out", device="recorded")
    assert broken.ret == pytest.ExitCode.TESTS_FAILED
    assert entries(broken, "FAILED") == set(ALTERATIONS)


@pytest.mark.slow
def test_junitxml_carries_every_output_metric(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    run_msprobe(pytester, dump, "--junitxml", "junit.xml", out="out", device="recorded")
    cases = {case.get("name"): case for case in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")}
    assert len(cases) == 66
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    for entry in ("Functional.linear.1.forward", "Functional.relu.0.backward"):
        props = {p.get("name"): p.get("value") for p in cases[entry].iter("property")}
        row = details[f"{entry}.output.0"]
        assert props[f"{entry}.output.0.status"] == row["Status"]
        for metric, column in (("cosine", "Cosine"), ("max_abs_err", "MaxAbsErr"),
                               ("max_rel_err", "MaxRelativeErr")):
            assert float(props[f"{entry}.output.0.{metric}"]) == float(row[column])
    assert cases["Functional.linear.1.forward"].find("failure") is not None


@pytest.mark.slow
def test_baseline_failures_are_xfail_and_only_new_ones_fail(pytester, copy_dump, altered):
    clean = copy_dump("pt_tensor_L1", "clean")
    run_msprobe(pytester, clean, out="base", device="recorded")
    baseline = next((pytester.path / "base").glob("accuracy_checking_result_*.csv"))
    result = run_msprobe(pytester, altered, "--msprobe-baseline", str(baseline), "-rfxX", out="out", device="recorded")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert entries(result, "FAILED") == set(ALTERATIONS)
    assert entries(result, "XFAIL") == CLEAN_FAILURES
    assert result.parseoutcomes() == {"failed": 4, "xfailed": 6, "passed": 56}
    result.stdout.fnmatch_lines([
        f"msprobe: baseline {baseline}: 6 known failures, expected to fail (xfail)",
        "*= msprobe =*",
        "forward  31 pass, 6 error, 0 warning, 0 SKIP",  # xfailed entries still count as error
        "backward 25 pass, 4 error, 0 warning, 0 SKIP",
        f"baseline {baseline}:",
        "6 known failures still fail (xfailed), 0 now pass, 4 new failures",
        "new failures (not in the baseline):",
    ])
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    assert rows["Functional.linear.1"]["Forward Test Success"] == "error"  # the CSV stays the truth


@pytest.mark.slow
def test_fixed_apis_are_reported_and_do_not_fail_under_xdist(pytester, copy_dump, altered):
    """Workers mark the xfails, the controller counts and lists: both must agree."""
    run_msprobe(pytester, altered, out="base", device="recorded")
    baseline = next((pytester.path / "base").glob("accuracy_checking_result_*.csv"))
    clean = copy_dump("pt_tensor_L1", "clean")
    pytester.makeini(f"[pytest]\nmsprobe_baseline = {baseline.relative_to(pytester.path)}\n")
    result = run_msprobe(pytester, clean, "-n", "2", "-rxX", out="out", device="recorded")
    assert result.ret == pytest.ExitCode.OK
    assert result.parseoutcomes() == {"xfailed": 6, "xpassed": 4, "passed": 56}
    result.stdout.fnmatch_lines([
        "forward  35 pass, 2 error, 0 warning, 0 SKIP",
        "backward 25 pass, 4 error, 0 warning, 0 SKIP",
        "6 known failures still fail (xfailed), 4 now pass, 0 new failures",
        "now pass although the baseline failed them:",
    ])
    fixed = {line.strip() for line in result.outlines if line.startswith("  ") and line.strip() in ALTERATIONS}
    assert fixed == set(ALTERATIONS)
