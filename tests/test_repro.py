"""--msprobe-repro: a folder per entry that is not pass, whose repro.py, copied alone into a fresh
place and run by an interpreter that has torch and numpy but not pytest-msprobe, prints the run's
metrics and verdict."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
from dumpwriter import DumpWriter, mindspore_mul_dump
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import read_csv, run_msprobe
from pytest_msprobe import repro
from pytest_msprobe.compare import Comparison, compare
from pytest_msprobe.results import EntryResult, OutputResult
from pytest_msprobe.standards.basic import BasicStandard
from pytest_msprobe.standards.dtype import DtypeStandard
from pytest_msprobe.standards.tolerances import Tolerances

RTOL = 1e-12  # the repro's metrics against the CSV's, on the CPU
METRICS = {"Cosine": "cosine", "MaxAbsErr": "max_abs_err", "MaxRelativeErr": "max_rel_err"}


def load_template():
    spec = importlib.util.spec_from_file_location("repro_template", repro.TEMPLATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the script alone -------------------------------------------------------------------


def isolated_env() -> dict:
    """torch, numpy and MindSpore from this environment's site-packages, without its .pth files
    (python -S): pytest-msprobe's editable install is such a file, so it is not importable."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "OMP_", "MKL_"))}
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_alone(folder: Path, fresh: Path, *args: str) -> dict:
    """Copy one repro folder alone to `fresh` and run its repro.py there with --json."""
    target = fresh / folder.name
    shutil.copytree(folder, target)
    assert sorted(p.name for p in target.iterdir()) == ["inputs.pt", "repro.py", "verdict.json"]
    done = subprocess.run([sys.executable, "-S", "repro.py", "--json", *args], cwd=target, env=isolated_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == (1 if report["status"] == "error" else 0)
    return report


def test_the_isolated_interpreter_has_torch_and_numpy_but_not_pytest_msprobe(tmp_path):
    probe = "import torch, numpy\ntry:\n    import pytest_msprobe\nexcept ImportError:\n    print('absent')\n"
    done = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, env=isolated_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "absent"


def assert_reproduces(report: dict, details: dict, entry: str) -> None:
    """The repro's metrics equal the details rows of `entry` within RTOL, and its verdict their status."""
    rows = {name: row for name, row in details.items()
            if name.rsplit(".output.", 1)[0] == entry and row["Status"] != "SKIP"}
    assert [f"{entry}.output.{o['index']}" for o in report["outputs"]] == sorted(rows, key=lambda n: int(n.rsplit(".", 1)[1]))
    for output in report["outputs"]:
        row = rows[f"{entry}.output.{output['index']}"]
        assert (output["status"], output["tested_dtype"]) == (row["Status"], row["Tested Dtype"]), entry
        for column, key in METRICS.items():
            if row[column] == "":
                assert output[key] is None
            else:
                assert output[key] == pytest.approx(float(row[column]), rel=RTOL, abs=0), (entry, column)


def pick(details: dict, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The first failing entry of each (direction, tested dtype), in the details' order."""
    found: dict[tuple[str, str], str] = {}
    for name, row in details.items():
        entry = name.rsplit(".output.", 1)[0]
        key = (entry.rsplit(".", 1)[1], row["Tested Dtype"])
        if row["Status"] == "error" and key in wanted and key not in found:
            found[key] = entry
    assert set(found) == set(wanted), found
    return found


FOUR = [("forward", "torch.float32"), ("forward", "torch.bfloat16"),
        ("backward", "torch.float32"), ("backward", "torch.bfloat16")]


def repro_run(pytester, dump, *args, out="out", subprocess=False):
    result = run_msprobe(pytester, dump, "--msprobe-repro", "repro", *args, out=out, subprocess=subprocess)
    details = {row["API Name"]: row for row in read_csv(pytester.path / out, "details")}
    return result, details, pytester.path / "repro" / dump.parent.name


@pytest.mark.slow
def test_pytorch_repros_print_the_run_metrics_and_verdict(pytester, copy_dump, tmp_path):
    """Real mode on the CPU, with a MaxAbsErr budget fp32 outputs break too."""
    dump = copy_dump("pt_tensor_L1")
    result, details, folders = repro_run(pytester, dump, "--msprobe-device", "cpu", "--msprobe-max-abs-err", "1e-7")
    failing = {name.rsplit(".output.", 1)[0] for name, row in details.items() if row["Status"] == "error"}
    assert {p.name for p in folders.iterdir()} == failing
    for entry in pick(details, FOUR).values():
        assert_reproduces(run_alone(folders / entry, tmp_path), details, entry)
    # What the folder holds, as plain data.
    entry = folders / "Functional.linear.1.backward"
    inputs = torch.load(entry / "inputs.pt", weights_only=True)
    assert set(inputs) == {"args", "kwargs", "grads"} and all(isinstance(t, torch.Tensor) for t in inputs["args"])
    verdict = json.loads((entry / "verdict.json").read_text())
    assert (verdict["entry"], verdict["status"], verdict["device"], verdict["mode"]) == (
        "Functional.linear.1.backward", "error", "cpu", "auto")
    assert verdict["call_site"] == {"path": "/home/user/train/pt_dump.py", "line": 31, "function": "forward",
                                    "code": "z = self.fc2(y)"}
    assert [o["max_abs_err"] for o in verdict["outputs"]] == [
        float(details[f"Functional.linear.1.backward.output.{i}"]["MaxAbsErr"]) for i in range(3)]
    messages = {row["API Name"]: row["Message"] for row in read_csv(pytester.path / "out", "result")}
    assert f"repro in {entry}" in messages["Functional.linear.1"]


@pytest.mark.slow
def test_recorded_and_random_mode_repros(pytester, copy_dump, tmp_path):
    recorded = copy_dump("pt_tensor_L1")
    _, details, folders = repro_run(pytester, recorded, "--msprobe-device", "recorded", out="recorded")
    assert not (folders / "Torch.matmul.0.backward").exists()  # a SKIP has no repro
    # linear's weight gradient: msprobe took it inside the API's graph, transposed; the run judged it
    # against the float64 gradient there, which inputs.pt keeps for the script.
    assert "recorded_bench" in torch.load(folders / "Functional.linear.1.backward" / "inputs.pt", weights_only=True)
    for entry in ("Functional.linear.1.forward", "Torch.matmul.1.backward", "Functional.linear.1.backward"):
        assert set(torch.load(folders / entry / "inputs.pt", weights_only=True)) >= {"args", "recorded"}
        report = run_alone(folders / entry, tmp_path / "recorded")  # its default: the recorded outputs
        assert report["device"] == "recorded"
        assert_reproduces(report, details, entry)
    again = run_alone(folders / "Functional.linear.1.forward", tmp_path / "on-cpu", "--device", "cpu")
    assert again["device"] == "cpu" and again["status"] == "error"  # the call itself, re-run
    random = copy_dump("pt_stats_L1")
    _, details, folders = repro_run(pytester, random, "--msprobe-device", "cpu", "--msprobe-max-abs-err", "1e-7",
                                    out="random")
    for entry in pick(details, [("forward", "torch.float32"), ("backward", "torch.bfloat16")]).values():
        assert_reproduces(run_alone(folders / entry, tmp_path / "random"), details, entry)


@pytest.mark.slow
def test_the_dtype_standard_and_the_fp32_probe_are_reproduced(pytester, copy_dump, tmp_path):
    dump = copy_dump("pt_tensor_L1")
    _, details, folders = repro_run(pytester, dump, "--msprobe-device", "cpu", "--msprobe-standard", "dtype",
                                    "--msprobe-probe", "fp32")
    entry = "Functional.linear.1.backward"  # the autocast linear: over the fp32 budget, within it in fp32
    assert [p.name for p in folders.iterdir()] == [entry]
    assert_reproduces(run_alone(folders / entry, tmp_path / "run"), details, entry)
    probed = run_alone(folders / entry, tmp_path / "probe", "--fp32")
    probe = json.loads((folders / entry / "verdict.json").read_text())["probe"]
    assert probed["status"] == probe["status"] == "pass"
    assert len(probed["outputs"]) == len(probe["outputs"]) == 3
    for mine, theirs in zip(probed["outputs"], probe["outputs"]):
        assert mine["max_abs_err"] == pytest.approx(theirs["max_abs_err"], rel=RTOL, abs=0)
        assert mine["cosine"] == pytest.approx(theirs["cosine"], rel=RTOL, abs=0)


@pytest.mark.slow
def test_mindspore_repros_print_the_run_metrics_and_verdict(pytester, copy_dump, tmp_path):
    """The runs in fresh processes, as a user's: this process's MindSpore has run the other tests'
    entries, and after some (a kernel it lacks) its LayerNorm gradients come out otherwise."""
    pytest.importorskip("mindspore")
    dump = copy_dump("ms_tensor_L1")
    _, details, folders = repro_run(pytester, dump, "--msprobe-device", "cpu", "--msprobe-max-abs-err", "1e-7",
                                    subprocess=True)
    for entry in pick(details, [("forward", "torch.float32"), ("backward", "torch.float32")]).values():
        assert "mindspore" in (folders / entry / "repro.py").read_text()
        assert_reproduces(run_alone(folders / entry, tmp_path / "fp32"), details, entry)
    # bf16: MindSpore's CPU kernels for mul, forward and backward, on real values of ms_tensor_L1.
    bf16 = mindspore_mul_dump(pytester.path / "ms_bf16", torch.bfloat16)
    _, details, folders = repro_run(pytester, bf16, "--msprobe-device", "cpu", out="bf16", subprocess=True)
    for entry in pick(details, [("forward", "torch.bfloat16"), ("backward", "torch.bfloat16")]).values():
        assert_reproduces(run_alone(folders / entry, tmp_path / "bf16"), details, entry)


@pytest.mark.parametrize("workers", [[], pytest.param(["-n", "2"], marks=pytest.mark.slow)])
def test_a_folder_for_every_failing_entry_and_the_ini_key(pytester, copy_dump, workers):
    """Under pytest-xdist the workers write the folders."""
    dump = copy_dump("pt_tensor_L1")
    pytester.makeini("[pytest]\nmsprobe_repro = from-ini\n")
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", *workers, subprocess=bool(workers))
    result.stdout.fnmatch_lines(["msprobe: a reproducer of every entry that is not pass in */from-ini"])
    written = {p.name for p in (pytester.path / "from-ini" / "pt_tensor_L1").iterdir()}
    statuses = {f"{row['API Name']}.{d}": row[f"{d.capitalize()} Test Success"]
                for row in read_csv(pytester.path / "out", "result") for d in ("forward", "backward")}
    assert written == {entry for entry, status in statuses.items() if status in ("error", "warning")}
    assert len(written) == 6


def test_nothing_is_saved_for_a_skip_whose_check_ran(pytester):
    """A backward whose gradients msprobe recorded none of runs both sides and has nothing to
    compare: a SKIP. Neither --msprobe-repro nor --msprobe-save-error-data saves it (they did once)."""
    writer = DumpWriter(pytester.path / "dump")
    x, y = torch.randn(4, 4).to(torch.bfloat16), torch.randn(4, 4).to(torch.bfloat16)
    writer.record("Torch.mul.0", torch.mul, [x, y], backward=True)
    writer.data["Torch.mul.0.backward"]["output"] = [None, None]
    result = run_msprobe(pytester, writer.write(), "--msprobe-device", "cpu", "--msprobe-repro", "repro",
                         "--msprobe-save-error-data", "saved", "-rs")
    assert result.parseoutcomes() == {"failed": 1, "skipped": 1}  # the bf16 forward breaks MaxAbsErr < 1e-4
    result.stdout.fnmatch_lines(["*1 x no output to compare  (Torch.mul.0.backward)"])
    for folder in ("repro", "saved"):
        assert [p.name for p in (pytester.path / folder / "dump").iterdir()] == ["Torch.mul.0.forward"]


# -- the template ------------------------------------------------------------------------


def test_the_template_runs_its_own_example_and_a_written_script_compiles(tmp_path):
    template = repro.TEMPLATE.read_text()
    assert template.count(repro.BEGIN) == 1 and template.count(repro.END) == 1
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    torch.save({"args": [a, b], "kwargs": {}}, tmp_path / "inputs.pt")
    shutil.copy(repro.TEMPLATE, tmp_path / "repro.py")
    done = subprocess.run([sys.executable, "-S", "repro.py"], cwd=tmp_path, env=isolated_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "verdict: pass" in done.stdout


def floats(shape: tuple[int, ...]):
    values = st.floats(-1e3, 1e3, allow_nan=False, width=32) | st.sampled_from([0.0, float("nan"), float("inf")])
    return st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))).map(
        lambda v: np.asarray(v, dtype=np.float64).reshape(shape))


@settings(max_examples=150, deadline=None)
@given(tested=floats((3, 4)), noise=floats((3, 4)), scale=st.sampled_from([0.0, 1e-6, 1e-3, 1e-1]),
       dtype=st.sampled_from(["torch.float32", "torch.bfloat16", "torch.float16", "torch.float64"]),
       standard=st.sampled_from(["basic", "basic-strict", "dtype", "dtype-tolerance", "dtype-no-warning"]),
       input_scale=st.sampled_from([0.0, 1.0, 1e4]))
def test_the_script_judges_as_the_package(tested, noise, scale, dtype, standard, input_scale):
    """The template's metrics and verdict, with the data repro.py inlines, equal the package's."""
    bench = tested + np.nan_to_num(noise, nan=0.0, posinf=1.0, neginf=-1.0) * scale
    bench[np.isnan(tested) & (noise > 0)] = 1.0  # now and then a NaN on one side only
    chosen = {
        "basic": BasicStandard(),
        "basic-strict": BasicStandard(0.9999, 1e-6),
        "dtype": DtypeStandard(),
        "dtype-tolerance": DtypeStandard(Tolerances.parse(["Torch.add.*: rtol=1e-3, atol=1e-5"])),
        "dtype-no-warning": DtypeStandard(warning=False),
    }[standard]
    result = EntryResult("Torch.add.0", "forward", "error", outputs=[OutputResult(0, "error", "", dtype)])
    script = TEMPLATE_MODULE
    script.STANDARD = repro.standard_data(chosen, result)
    m, status, _ = script.judge(tested, bench, dtype, 0, input_scale)
    expected_m, verdict = compare(Comparison(tested, bench, dtype, "Torch.add.0.forward.output.0", input_scale), chosen)
    assert status == verdict.status.value
    assert m["cosine"] == expected_m.cosine
    np.testing.assert_equal([m["max_abs_err"], m["max_rel_err"]], [expected_m.max_abs_err, expected_m.max_rel_err])


TEMPLATE_MODULE = load_template()
