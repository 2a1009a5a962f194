"""--msprobe-save-error-data: the values of every entry that is not pass, enough to reproduce its numbers."""

from __future__ import annotations

import json
import re
import sys

import pytest
import torch

from conftest import ROOT, read_csv, run_msprobe

FAILING = 6  # examples/pt_tensor_L1 under the default rule, on cpu and recorded alike
# Every entry that is not pass fails here: recorded, Torch.matmul.0.backward's gradient (recorded
# inside the API's graph) is judged where msprobe took it, no longer a SKIP. Nothing is saved for
# a SKIP (test_repro.py has one whose check ran).
NOT_PASS = {"cpu": FAILING, "recorded": FAILING}



def not_pass(folder):
    """Entries whose status in the result CSV is neither pass, SKIP nor empty."""
    return {f"{row['API Name']}.{direction}" for row in read_csv(folder, "result")
            for direction, column in (("forward", "Forward Test Success"), ("backward", "Backward Test Success"))
            if row[column] not in ("", "pass", "SKIP")}


@pytest.mark.slow
@pytest.mark.parametrize("device,workers", [("cpu", ["-n", "2"]), ("recorded", [])])
def test_every_entry_that_is_not_pass_has_its_values_and_manifest(pytester, copy_dump, device, workers):
    dump = copy_dump("pt_tensor_L1")
    run_msprobe(pytester, dump, "--msprobe-device", device, *workers, "--msprobe-save-error-data")
    saved = pytester.path / "out" / "msprobe_error_data" / "pt_tensor_L1"
    assert {p.name for p in saved.iterdir()} == not_pass(pytester.path / "out")
    assert len(list(saved.iterdir())) == NOT_PASS[device]
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    checked = 0
    for entry in saved.iterdir():
        manifest = json.loads((entry / "manifest.json").read_text())
        assert (manifest["entry"], manifest["device"]) == (entry.name, device)
        assert manifest["status"] == "error"
        parts = {"inputs", "tested_outputs", "bench_outputs"}
        parts |= {"grad_outputs"} if entry.name.endswith(".backward") else set()
        assert set(manifest["files"]) == parts
        values = {part: torch.load(entry / name, weights_only=True) for part, name in manifest["files"].items()}
        described = [v["shape"] for v in manifest["values"]["tested_outputs"]]
        assert described == [list(t.shape) for t in values["tested_outputs"] if t is not None]
        for row in manifest["outputs"]:
            csv_row = details[row["name"]]
            assert (row["status"], row["tested_dtype"]) == (csv_row["Status"], csv_row["Tested Dtype"])
            if row["max_abs_err"] is None:
                continue
            index = int(row["name"].rsplit(".", 1)[1])
            tested, bench = values["tested_outputs"][index], values["bench_outputs"][index]
            assert str(tested.dtype) == row["tested_dtype"] and list(tested.shape) == row["shape"]
            recomputed = (tested.double() - bench.double()).abs().max().item()
            assert recomputed == pytest.approx(float(csv_row["MaxAbsErr"]), rel=1e-12)
            checked += 1
    assert checked >= FAILING
    messages = {row["API Name"]: row["Message"] for row in read_csv(pytester.path / "out", "result")}
    assert f"error data in {saved / 'Functional.linear.1.forward'}" in messages["Functional.linear.1"]


@pytest.mark.slow
def test_off_by_default_and_a_folder_from_the_option_or_the_ini(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    run_msprobe(pytester, dump, "--msprobe-device", "recorded")
    assert not (pytester.path / "out" / "msprobe_error_data").exists()
    assert not any("error data" in row["Message"] for row in read_csv(pytester.path / "out", "result"))
    run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-out", "o2", "--msprobe-save-error-data", "saved")
    assert len(list((pytester.path / "saved" / "pt_tensor_L1").iterdir())) == NOT_PASS["recorded"]
    pytester.makeini("[pytest]\nmsprobe_save_error_data = true\n")
    run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-out", "o3")
    assert len(list((pytester.path / "o3" / "msprobe_error_data" / "pt_tensor_L1").iterdir())) == NOT_PASS["recorded"]


@pytest.mark.slow
def test_the_readme_snippet_reproduces_the_numbers(pytester, copy_dump):
    readme = (ROOT / "docs" / "reports.md").read_text()  # the Error data section
    section = readme.split("## Error data", 1)[1]
    command = re.search(r"After `(pytest [^`]+)`", section.replace("\n", " ")).group(1).split()
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    copy_dump("pt_tensor_L1", "examples/pt_tensor_L1")
    pytester.runpytest("-p", "no:cacheprovider", *command[1:])
    result = pytester.run(sys.executable, "-c", snippet)
    assert result.ret == 0, result.stderr.str()
    printed = {line.split()[0]: [float(n) for n in line.split()[1:]] for line in result.outlines}
    assert printed["MaxAbsErr"][0] == pytest.approx(printed["MaxAbsErr"][1], rel=1e-12)
    assert printed["MaxAbsErr"][0] > 1e-4  # the failure it reproduces
    assert printed["Cosine"][0] == pytest.approx(printed["Cosine"][1], abs=1e-12)
    assert printed["bench"] == [0.0] and printed["tested"] == [0.0]


@pytest.mark.slow
def test_a_folder_that_cannot_be_made_is_a_note_not_a_lost_verdict(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    pytester.path.joinpath("taken").write_text("a file where the folder should go")
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-save-error-data", "taken")
    assert result.parseoutcomes() == {"failed": FAILING, "passed": 60}
    messages = {row["API Name"]: row["Message"] for row in read_csv(pytester.path / "out", "result")}
    assert "error data not saved: NotADirectoryError" in messages["Functional.linear.1"]
