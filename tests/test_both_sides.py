"""--msprobe-device recorded,cpu: each entry judged on what the dump recorded and on a run on the CPU."""

from __future__ import annotations

import pytest
from test_e2e_torch import ALTERATIONS, alter, failed_ids

from conftest import read_csv, run_msprobe
from pytest_msprobe.results import EntryResult, OutputResult, judged_twice


def test_an_entry_judged_twice_fails_where_either_side_fails():
    recorded = EntryResult("Torch.add.0", "forward", "error", outputs=[OutputResult(0, "error", reasons=["NaN at 1"])])
    rerun = EntryResult("Torch.add.0", "forward", "pass", outputs=[OutputResult(0, "pass")], notes=["a note"])
    both = judged_twice(recorded, rerun, "cpu")
    assert both.status == "error"
    assert [(o.label, o.status) for o in both.outputs] == [("output.0 (recorded)", "error"), ("output.0 (cpu)", "pass")]
    assert both.notes == ["a note"]
    skipped = EntryResult("Torch.add.0", "forward", "SKIP", "no recorded output")
    assert judged_twice(skipped, rerun, "cpu").status == "pass"  # the other side's verdict stands
    assert judged_twice(skipped, rerun, "cpu").reason == "recorded: not judged: no recorded output"


@pytest.mark.slow
@pytest.mark.parametrize("spelling", ["recorded,cpu", "cpu,recorded"])
def test_faults_in_the_recorded_outputs_fail_a_run_that_also_reruns_the_calls(pytester, copy_dump, spelling):
    dump = copy_dump("pt_tensor_L1")
    for entry, fn in ALTERATIONS.items():
        alter(dump.parent / "dump_tensor_data" / f"{entry}.output.0.pt", fn)
    rerun = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", device="cpu", out="cpu")
    assert not failed_ids(rerun) & set(ALTERATIONS)  # the re-run alone never looks at them
    rerun.stdout.fnmatch_lines(["msprobe: */dump.json: the dump records its outputs, and this run does not judge them*"])
    both = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", "-rf", device=spelling, out="both")
    assert failed_ids(both) == set(ALTERATIONS)
    both.stdout.fnmatch_lines(["msprobe: each entry judged twice, on the outputs the dump recorded and on a run on cpu*"])
    assert "does not judge them" not in both.stdout.str()
    details = {(row["API Name"], row["Message"].split(":")[0]): row for row in read_csv(pytester.path / "both", "details")}
    nan = details[("Torch.softmax.0.forward.output.0", "recorded")]
    assert nan["Status"] == "error" and nan["MaxAbsErr"] == "nan"
    assert details[("Torch.softmax.0.forward.output.0", "cpu")]["Status"] == "pass"
    results = {row["API Name"]: row for row in read_csv(pytester.path / "both", "result")}
    assert results["Torch.softmax.0"]["Forward Test Success"] == "error"
    assert len(results) == 37
