"""Core units: reading a baseline, and the error-data saver for values that are not torch's."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_msprobe.artifacts import error_data
from pytest_msprobe.checking.check import Checker
from pytest_msprobe.frameworks import Kept, RunOptions, Tested
from pytest_msprobe.judging.standards.basic import BasicStandard
from pytest_msprobe.reports.baseline import Baseline
from pytest_msprobe.reports.csv_files import CsvWriter, ReportError
from pytest_msprobe.results import EntryResult, OutputResult


def result(api, direction, status):
    return EntryResult(api, direction, status)


def test_baseline_knows_failures_per_direction_and_sums_up_a_run(tmp_path):
    path = tmp_path / "accuracy_checking_result_1.csv"
    writer = CsvWriter(path)
    writer.write_api("Torch.a.0", result("Torch.a.0", "forward", "error"), result("Torch.a.0", "backward", "pass"))
    writer.write_api("=Torch.b.0", result("=Torch.b.0", "forward", "pass"), result("=Torch.b.0", "backward", "error"))
    writer.write_api("Torch.c.0", result("Torch.c.0", "forward", "SKIP"), None)
    writer.close()
    baseline = Baseline.read(path)
    assert baseline.failed == {("Torch.a.0", "forward"), ("=Torch.b.0", "backward")}  # formula guard undone
    now = [result("Torch.a.0", "forward", "pass"), result("Torch.a.0", "backward", "error"),
           result("=Torch.b.0", "backward", "error"), result("Torch.c.0", "forward", "pass")]
    lines = baseline.summary_lines(now)
    assert "1 known failures still fail (xfailed), 1 now pass, 1 new failures" in lines
    assert lines[lines.index("now pass although the baseline failed them:") + 1] == "  Torch.a.0.forward"
    assert lines[lines.index("new failures (not in the baseline):") + 1] == "  Torch.a.0.backward"


def test_baseline_refuses_a_details_csv(tmp_path):
    path = tmp_path / "accuracy_checking_result_1.csv"
    CsvWriter(path).close()
    with pytest.raises(ReportError, match="accuracy_checking_details_1.csv: not an accuracy_checking_result"):
        Baseline.read(tmp_path / "accuracy_checking_details_1.csv")


def test_error_data_of_a_framework_without_torch_is_numpy(tmp_path):
    dump = SimpleNamespace(path=Path("/data/step0/rank0/dump.json"), framework="mindspore")
    entry = EntryResult("Mint.add.0", "forward", "error", "output.0: ...", [
        OutputResult(0, "error", "Float64", "Float16", [2], 0.5, 1.0, 2.0)])
    x, y = np.arange(2, dtype=np.float16), np.ones(2, dtype=np.float16)
    kept = Kept({"args": [x, y], "kwargs": {"alpha": 1}}, [x + y], [np.array([1.0, 2.0])])
    checker = Checker(RunOptions("cpu", Tested.DEVICE, "auto", 1234), BasicStandard())
    folder = error_data.save(tmp_path, dump, entry, kept, checker)
    assert folder.name == "Mint.add.0.forward"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["files"] == {"inputs": "inputs.npz", "tested_outputs": "tested_outputs.npz",
                                 "bench_outputs": "bench_outputs.npz"}
    assert manifest["values"]["inputs"] == [{"at": "args[0]", "dtype": "float16", "shape": [2]},
                                            {"at": "args[1]", "dtype": "float16", "shape": [2]}]
    assert manifest["outputs"][0]["max_abs_err"] == 1.0
    inputs = np.load(folder / "inputs.npz")
    assert sorted(inputs.files) == ["args[0]", "args[1]", "kwargs['alpha']"]
    np.testing.assert_array_equal(inputs["args[0]"], x)
    np.testing.assert_array_equal(np.load(folder / "tested_outputs.npz")["[0]"], x + y)
