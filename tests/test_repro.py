"""--msprobe-repro: a folder per entry that is not pass, whose repro.py, copied alone into a fresh
place and run by an interpreter that has torch and numpy but not pytest-msprobe, prints the run's
metrics and verdict."""

from __future__ import annotations

import ast
import builtins
import functools
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
from deficits import build_corpus
from dumpwriter import DumpWriter, bf16_accumulating_matmul, matmul_add_dump, mindspore_mul_dump
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DUMPS, read_csv, run_msprobe
from pytest_msprobe.artifacts import repro, repro_sources
from pytest_msprobe.judging.compare import Comparison, ExtraRuns, compare
from pytest_msprobe.judging.standards.basic import BasicStandard
from pytest_msprobe.judging.standards.dtype import DtypeStandard
from pytest_msprobe.judging.standards.tolerances import Tolerances
from pytest_msprobe.reports.messages import output_message
from pytest_msprobe.results import EntryResult, OutputResult

RTOL = 1e-12  # the repro's metrics against the CSV's, on the CPU
METRICS = {"Cosine": "cosine", "MaxAbsErr": "max_abs_err", "MaxRelativeErr": "max_rel_err"}


def load_template():
    spec = importlib.util.spec_from_file_location("repro_template", repro.TEMPLATE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
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


def isolated_run(args: list, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """A fresh interpreter without site-packages beyond torch and numpy (isolated_env), as the kernel team's."""
    return subprocess.run(
        [sys.executable, "-S", *args], cwd=cwd, env=env or isolated_env(), capture_output=True, text=True, timeout=300
    )


def copied_alone(folder: Path, fresh: Path) -> Path:
    """One repro folder copied alone to `fresh`: its three files and nothing else."""
    target = fresh / folder.name
    shutil.copytree(folder, target)
    assert sorted(p.name for p in target.iterdir()) == ["inputs.pt", "repro.py", "verdict.json"]
    return target


def isolated_env_with(env: dict | None) -> dict:
    """isolated_env and `env` (more of the environment; a PYTHONPATH goes before the site-packages')."""
    environment = isolated_env()
    for key, value in (env or {}).items():
        environment[key] = value + os.pathsep + environment[key] if key == "PYTHONPATH" else value
    return environment


def run_alone(folder: Path, fresh: Path, *args: str, env: dict | None = None) -> dict:
    """Copy one repro folder alone to `fresh` and run its repro.py there with --json (`env`: more
    of the environment; a PYTHONPATH goes before the site-packages')."""
    target = copied_alone(folder, fresh)
    done = isolated_run(["repro.py", "--json", *args], target, isolated_env_with(env))
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == (1 if report["status"] == "error" else 0)
    return report


# Runs copied folders' repro.py one after another in one fresh interpreter (isolated_env, python -S):
# each as `python -S repro.py --json ARGS` would, in its own folder, with its own __main__ namespace.
# It fails if anything imported pytest-msprobe. A process per script costs torch's import each time.
BATCH = """
import contextlib, io, json, os, runpy, sys
answers = []
for folder, args in json.loads(sys.argv[1]):
    os.chdir(folder)
    sys.argv = ["repro.py", "--json", *args]
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            runpy.run_path("repro.py", run_name="__main__")
        code = 0
    except SystemExit as exit:
        code = 0 if exit.code is None else exit.code if isinstance(exit.code, int) else 1  # as python would
    answers.append({"code": code, "stdout": said.getvalue()})
assert not any(name.split(".")[0] == "pytest_msprobe" for name in sys.modules), "pytest-msprobe was imported"
print(json.dumps(answers))
"""


def run_batch(runs: list[tuple[Path, Path, tuple[str, ...]]], env: dict | None = None) -> list[dict]:
    """run_alone for each (folder, fresh, args), the scripts in one fresh interpreter (BATCH)."""
    planned = [(str(copied_alone(folder, fresh)), list(args)) for folder, fresh, args in runs]
    done = isolated_run(["-c", BATCH, json.dumps(planned)], runs[0][1], isolated_env_with(env))
    assert done.returncode == 0, done.stderr
    reports = []
    for answer in json.loads(done.stdout.splitlines()[-1]):
        report = json.loads(answer["stdout"].splitlines()[-1])
        assert answer["code"] == (1 if report["status"] == "error" else 0)
        reports.append(report)
    return reports


@pytest.mark.slow
def test_the_isolated_interpreter_has_torch_and_numpy_but_not_pytest_msprobe(tmp_path):
    probe = "import torch, numpy\ntry:\n    import pytest_msprobe\nexcept ImportError:\n    print('absent')\n"
    done = isolated_run(["-c", probe], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "absent"


def assert_reproduces(report: dict, details: dict, entry: str) -> None:
    """The repro's metrics equal the details rows of `entry` within RTOL, and its verdict their status."""
    rows = {
        name: row for name, row in details.items() if name.rsplit(".output.", 1)[0] == entry and row["Status"] != "SKIP"
    }
    assert [f"{entry}.output.{o['index']}" for o in report["outputs"]] == sorted(
        rows, key=lambda n: int(n.rsplit(".", 1)[1])
    )
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


FOUR = [
    ("forward", "torch.float32"),
    ("forward", "torch.bfloat16"),
    ("backward", "torch.float32"),
    ("backward", "torch.bfloat16"),
]


def repro_run(pytester, dump, *args, out="out", subprocess=False):
    result = run_msprobe(pytester, dump, "--msprobe-repro", "repro", *args, out=out, subprocess=subprocess)
    details = {row["API Name"]: row for row in read_csv(pytester.path / out, "details")}
    return result, details, pytester.path / "repro" / dump.parent.name


@pytest.mark.slow
def test_pytorch_repros_print_the_run_metrics_and_verdict(pytester, copy_dump, tmp_path):
    """Real mode on the CPU, with a MaxAbsErr budget fp32 outputs break too."""
    dump = copy_dump("pt_tensor_L1")
    _, details, folders = repro_run(pytester, dump, "--msprobe-device", "cpu", "--msprobe-max-abs-err", "1e-7")
    failing = {name.rsplit(".output.", 1)[0] for name, row in details.items() if row["Status"] == "error"}
    assert {p.name for p in folders.iterdir()} == failing
    entries = list(pick(details, FOUR).values())
    for entry, report in zip(entries, run_batch([(folders / entry, tmp_path, ()) for entry in entries])):
        assert_reproduces(report, details, entry)
    # What the folder holds, as plain data.
    entry = folders / "Functional.linear.1.backward"
    inputs = torch.load(entry / "inputs.pt", weights_only=True)
    assert set(inputs) == {"args", "kwargs", "grads"} and all(isinstance(t, torch.Tensor) for t in inputs["args"])
    verdict = json.loads((entry / "verdict.json").read_text())
    assert (verdict["entry"], verdict["status"], verdict["device"], verdict["mode"]) == (
        "Functional.linear.1.backward",
        "error",
        "cpu",
        "auto",
    )
    assert verdict["call_site"] == {
        "path": "/home/user/train/pt_dump.py",
        "line": 31,
        "function": "forward",
        "code": "z = self.fc2(y)",
    }
    assert [o["max_abs_err"] for o in verdict["outputs"]] == [
        float(details[f"Functional.linear.1.backward.output.{i}"]["MaxAbsErr"]) for i in range(3)
    ]
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
    entries = ("Functional.linear.1.forward", "Torch.matmul.1.backward", "Functional.linear.1.backward")
    reports = run_batch([(folders / entry, tmp_path / "recorded", ()) for entry in entries])
    for entry, report in zip(entries, reports):
        assert set(torch.load(folders / entry / "inputs.pt", weights_only=True)) >= {"args", "recorded"}
        assert report["device"] == "recorded"  # its default: the recorded outputs
        assert_reproduces(report, details, entry)
    again = run_alone(folders / "Functional.linear.1.forward", tmp_path / "on-cpu", "--device", "cpu")
    assert again["device"] == "cpu" and again["status"] == "error"  # the call itself, re-run
    random = copy_dump("pt_stats_L1")
    _, details, folders = repro_run(
        pytester, random, "--msprobe-device", "cpu", "--msprobe-max-abs-err", "1e-7", out="random"
    )
    entries = list(pick(details, [("forward", "torch.float32"), ("backward", "torch.bfloat16")]).values())
    for entry, report in zip(entries, run_batch([(folders / entry, tmp_path / "random", ()) for entry in entries])):
        assert_reproduces(report, details, entry)


RATIO_RTOL = 1e-9  # the repro's dtype-standard ratio against the run's


def assert_same_verdict(report: dict, folder: Path, probe: bool = False) -> None:
    """The repro's verdict, and each output's status and worst-element ratio (the dtype standard's),
    equal the run's (verdict.json; with probe, its fp32 probe's)."""
    run = json.loads((folder / "verdict.json").read_text())
    if probe:
        run = {**run["probe"], "outputs": [{**o, "name": f"output.{o['index']}"} for o in run["probe"]["outputs"]]}
    assert report["status"] == run["status"], folder.name
    ran = [row for row in run["outputs"] if row["status"] != "SKIP"]
    assert [o["index"] for o in report["outputs"]] == [int(row["name"].rsplit(".", 1)[1]) for row in ran]
    for mine, theirs in zip(report["outputs"], ran):
        assert mine["status"] == theirs["status"], (folder.name, mine["index"])
        if theirs["ratio"] is None:
            assert mine.get("ratio") is None
        else:
            assert mine["ratio"] == pytest.approx(theirs["ratio"], rel=RATIO_RTOL, abs=0), (folder.name, mine["index"])


def scale_recorded(dump: Path, data_name: str, factor: float) -> None:
    """What a faulty kernel would have recorded: one recorded output, scaled."""
    path = dump.parent / "dump_tensor_data" / data_name
    tensor = torch.load(path, weights_only=True)
    torch.save((tensor.double() * factor).to(tensor.dtype), path)


# Real dumps whose recorded outputs a deficient kernel gave (tests/deficits.py: bf16 partial sums,
# a missing gradient term, tanh GELU, softmax summed low, TF32 operands, a 12-bit rsqrt), beside
# the outputs correct kernels gave; and examples/pt_tensor_L1 with outputs a few fp32 ULP off:
# sums and products (the magnitude is the bench on |inputs|), softmax / layer_norm / gelu (their
# formula), the rest (the spread under perturbed inputs), and its autocast linear's weight gradient,
# which msprobe took inside the graph.
CORPUS = {
    "gpt_bf16": [
        ("Functional.linear.3.forward", "accumulate_low"),
        ("Functional.layer_norm.1.backward", "missing_term"),
        ("Functional.gelu.0.forward", "gelu_tanh"),
        ("Torch.softmax.0.backward", "softmax_sum_low"),
        ("Functional.linear.2.backward", "accumulate_low"),
    ],
    "gpt_fp32": [
        ("Functional.linear.2.forward", "tf32"),
        ("Functional.layer_norm.0.forward", "rsqrt12"),
        ("Functional.linear.4.backward", "tf32"),
    ],
}
SCALED = [
    ("Functional.conv2d.0.forward.output.0.pt", 1 + 1e-4),
    ("Torch.softmax.0.forward.output.0.pt", 1 + 1e-4),
    ("Functional.layer_norm.0.backward.output.0.pt", 1 + 1e-4),
    ("Functional.scaled_dot_product_attention.0.forward.output.0.pt", 1 + 1e-4),
    ("Tensor.pow.0.backward.output.0.pt", 1 + 1e-4),
    ("Functional.linear.1.backward.output.2.pt", 1.05),  # the weight's, at addmm's input, transposed
]


def deficient_dumps(pytester, copy_dump) -> dict[str, Path]:
    dumps = {}
    for name, plan in CORPUS.items():
        planted = build_corpus(DUMPS[name], pytester.path / name, plan)
        assert [p.expected for p in planted] == ["error"] * len(plan)
        dumps[name] = pytester.path / name / "dump.json"
    dumps["pt_tensor_L1"] = copy_dump("pt_tensor_L1")
    for data_name, factor in SCALED:
        scale_recorded(dumps["pt_tensor_L1"], data_name, factor)
    return dumps


@pytest.mark.slow
def test_dtype_standard_repros_give_the_run_verdict_and_worst_element_ratio(pytester, copy_dump, tmp_path):
    """Run alone, each repro.py of a recorded dump judged by the dtype standard prints the run's
    metrics, verdict, and each output's status and worst-element ratio (1e-9): the standard's own
    code and its extra runs, bf16 and fp32, forward and backward, failing and passing outputs."""
    seen: dict[str, set] = {"dtype": set(), "direction": set(), "status": set(), "asked": set()}
    planned: list[tuple[str, dict, Path]] = []
    for name, dump in deficient_dumps(pytester, copy_dump).items():
        _, details, folders = repro_run(
            pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype", out=name
        )
        failing = {row["API Name"].rsplit(".output.", 1)[0] for row in details.values() if row["Status"] == "error"}
        planted = {entry for entry, _ in CORPUS.get(name, [])} or {d.rsplit(".output.", 1)[0] for d, _ in SCALED}
        assert planted <= failing <= {p.name for p in folders.iterdir()}
        planned += [(name, details, folder) for folder in sorted(folders.iterdir())]
    # Every dump's scripts in one fresh interpreter: a process a dump costs torch's import each time.
    reports = run_batch([(folder, tmp_path / name, ()) for name, _, folder in planned])
    for (_, details, folder), report in zip(planned, reports):
        assert report["device"] == "recorded"
        assert_reproduces(report, details, folder.name)
        assert_same_verdict(report, folder)
        for output in report["outputs"]:
            seen["dtype"].add(output["tested_dtype"])
            seen["status"].add(output["status"])
            seen["asked"].update(output.get("asked", []))
        seen["direction"].add(folder.name.rsplit(".", 1)[1])
    assert seen["dtype"] >= {"torch.bfloat16", "torch.float32"}
    assert seen["direction"] == {"forward", "backward"}
    assert seen["status"] >= {"error", "pass"}
    assert seen["asked"] == {"magnitude", "structural", "spread", "low"}  # structural: softmax, attention
    # The gradient at a node of the graph: its bench and extra runs are the run's, and said so.
    folder = pytester.path / "repro" / "pt_tensor_L1" / "Functional.linear.1.backward"
    saved = torch.load(folder / "inputs.pt", weights_only=True)
    assert saved["at_nodes"] == [1] and set(saved["extra"]) == {1}
    said = subprocess.run(
        [sys.executable, "-S", "repro.py"],
        cwd=tmp_path / "pt_tensor_L1" / folder.name,
        env=isolated_env(),
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "output 1: the run's float64 gradient at a node of the graph (inputs.pt, with its extra runs)" in said


@pytest.mark.slow
def test_the_fp32_probe_is_reproduced_on_the_new_standard(pytester, copy_dump, tmp_path):
    """--fp32 gives the run's probe: a recorded bf16 accumulation, and examples/pt_tensor_L1's
    autocast linear (its bench without autocast's rounding) recorded 3% off."""
    accumulated = matmul_add_dump(pytester.path / "acc", torch.bfloat16, bf16_accumulating_matmul)
    autocast = copy_dump("pt_tensor_L1")
    scale_recorded(autocast, "Functional.linear.1.forward.output.0.pt", 1.03)
    for dump, entry in ((accumulated, "Torch.matmul.0.forward"), (autocast, "Functional.linear.1.forward")):
        args = ("--msprobe-device", "recorded", "--msprobe-standard", "dtype", "--msprobe-probe", "fp32")
        _, details, folders = repro_run(pytester, dump, *args, out=dump.parent.name)
        report, probed = run_batch(
            [
                (folders / entry, tmp_path / "run" / dump.parent.name, ()),
                (folders / entry, tmp_path / "probe" / dump.parent.name, ("--fp32",)),
            ]
        )
        assert_reproduces(report, details, entry)
        assert_same_verdict(report, folders / entry)
        assert probed["status"] == "pass" and probed["device"] == "recorded" and probed["fp32"]
        assert_same_verdict(probed, folders / entry, probe=True)


def npu_rms_norm_dump(folder: Path) -> Path:
    """torch_npu's fused RMSNorm in bf16, recorded 3% off (its forward and its input's gradient)."""
    from pytest_msprobe.frameworks.npu_ops import lookup

    generator = torch.Generator().manual_seed(0)
    x, weight = (torch.randn(shape, generator=generator).to(torch.bfloat16) for shape in ((4, 32), (32,)))
    writer = DumpWriter(folder)
    writer.record("NPU.npu_rms_norm.0", lookup("npu_rms_norm"), [x, weight], {"epsilon": 1e-6}, backward=True)
    dump = writer.write()
    for data_name in ("NPU.npu_rms_norm.0.forward.output.0.pt", "NPU.npu_rms_norm.0.backward.output.0.pt"):
        scale_recorded(dump, data_name, 1.03)
    return dump


@pytest.mark.slow
def test_an_npu_op_repro_judges_with_the_run_bench_and_extra_runs(pytester, tmp_path):
    """An NPU op's float64 reference is pytest-msprobe's: inputs.pt keeps its outputs and the
    answers of the standard's extra runs, and the script says whose they are."""
    dump = npu_rms_norm_dump(pytester.path / "npu")
    _, details, folders = repro_run(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype")
    assert {p.name for p in folders.iterdir()} == {"NPU.npu_rms_norm.0.forward", "NPU.npu_rms_norm.0.backward"}
    ordered = sorted(folders.iterdir())
    for folder, report in zip(ordered, run_batch([(folder, tmp_path, ()) for folder in ordered])):
        assert "repro.py" in {p.name for p in folder.iterdir()} and "torch_npu" in (folder / "repro.py").read_text()
        assert report["bench"] == [
            "the run's: the float64 reference of this fused op (from inputs.pt, with its extra runs)"
        ]
        assert_reproduces(report, details, folder.name)
        assert_same_verdict(report, folder)


NPU_SIM = Path(__file__).resolve().parent / "npu_sim"


@pytest.mark.slow
def test_repros_on_the_simulated_npu_rerun_the_device(pytester, copy_dump, monkeypatch, tmp_path):
    """tests/npu_sim's NPU with an mm and addmm that sum into bf16 and an RMSNorm with the wrong epsilon:
    repro.py runs the tested side on the npu (torch_npu imported then), the benchmark on the CPU
    (the fused op's: the run's, from inputs.pt), and gives the run's verdict, ratios and probe."""
    deficits = {
        "PYTHONPATH": str(NPU_SIM),
        "MSPROBE_NPU_SIM_DEFICITS": "aten::addmm=bf16_accumulate,aten::mm=bf16_accumulate,npu_rms_norm=epsilon:1e-2",
    }
    for key, value in deficits.items():
        monkeypatch.setenv(key, value, prepend=os.pathsep if key == "PYTHONPATH" else None)
    model, fused = copy_dump("pt_tensor_L1_bf16"), copy_dump("npu_fused_sim")
    runs: list[tuple[dict, Path, Path, tuple[str, ...]]] = []
    probes: list[tuple[dict, Path, Path, tuple[str, ...]]] = []
    args = (
        "--msprobe-device",
        "npu",
        "--msprobe-standard",
        "dtype",
        "--msprobe-probe",
        "fp32",
        "-p",
        "no:hypothesispytest",
    )
    for dump, entries in (
        (model, ["Functional.linear.0.forward", "Functional.linear.0.backward"]),
        (fused, ["NPU.npu_rms_norm.0.forward"]),
    ):
        _, details, folders = repro_run(pytester, dump, *args, out=dump.parent.name, subprocess=True)
        probed = [e for e in entries if json.loads((folders / e / "verdict.json").read_text())["probe"] is not None]
        runs += [(details, folders / entry, tmp_path / "run" / dump.parent.name, ()) for entry in entries]
        probes += [(details, folders / entry, tmp_path / "probe" / dump.parent.name, ("--fp32",)) for entry in probed]
    # Both dumps' scripts in one fresh interpreter: a process costs torch's import each time.
    reports = run_batch([(folder, fresh, flags) for _, folder, fresh, flags in runs + probes], env=deficits)
    for (details, folder, _, _), report in zip(runs, reports):
        assert "torch_npu" in (folder / "repro.py").read_text()
        assert report["device"] == "npu" and report["status"] == "error"
        assert_reproduces(report, details, folder.name)
        assert_same_verdict(report, folder)
    for (_, folder, _, _), report in zip(probes, reports[len(runs) :]):  # fp16/bf16 only
        assert_same_verdict(report, folder, probe=True)
    assert len(probes) == 2  # the simulated addmm and mm sum into bf16 in fp32 too: "fails in fp32 too"


@pytest.mark.slow
def test_mindspore_repros_print_the_run_metrics_and_verdict(pytester, copy_dump, tmp_path):
    """The runs in fresh processes, as a user's: this process's MindSpore has run the other tests'
    entries, and after some (a kernel it lacks) its LayerNorm gradients come out otherwise. The
    scripts share a fresh interpreter (run_batch): each MindSpore entry's, in call order, then
    the bf16 mul's."""
    pytest.importorskip("mindspore")
    dump = copy_dump("ms_tensor_L1")
    _, details, folders = repro_run(
        pytester, dump, "--msprobe-device", "cpu", "--msprobe-max-abs-err", "1e-7", subprocess=True
    )
    # (the run's details, the entry's folder, where it runs alone), the scripts of both runs together
    planned = [(details, folders / entry, tmp_path / "fp32")
               for entry in pick(details, [("forward", "torch.float32"), ("backward", "torch.float32")]).values()]
    assert all("mindspore" in (folder / "repro.py").read_text() for _, folder, _ in planned)
    # bf16: MindSpore's CPU kernels for mul, forward and backward, on real values of ms_tensor_L1.
    bf16 = mindspore_mul_dump(pytester.path / "ms_bf16", torch.bfloat16)
    _, details, folders = repro_run(pytester, bf16, "--msprobe-device", "cpu", out="bf16", subprocess=True)
    planned += [(details, folders / entry, tmp_path / "bf16")
                for entry in pick(details, [("forward", "torch.bfloat16"), ("backward", "torch.bfloat16")]).values()]
    reports = run_batch([(folder, fresh, ()) for _, folder, fresh in planned])
    for (details, folder, _), report in zip(planned, reports):
        assert_reproduces(report, details, folder.name)


@pytest.mark.slow
def test_a_mindspore_entry_recorded_3_percent_off_gives_the_run_dtype_verdict(pytester, tmp_path):
    """Its benchmark is PyTorch's (the mapping table's source in the script), its extra runs too."""
    dump = mindspore_mul_dump(pytester.path / "ms", torch.bfloat16, scale=1.03)
    _, details, folders = repro_run(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype")
    assert [p.name for p in folders.iterdir()] == ["Mint.mul.0.forward"]
    report = run_alone(folders / "Mint.mul.0.forward", tmp_path)
    assert report["status"] == "error" and report["outputs"][0]["asked"] == ["magnitude", "structural", "spread", "low"]
    assert_reproduces(report, details, "Mint.mul.0.forward")
    assert_same_verdict(report, folders / "Mint.mul.0.forward")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_folder_for_every_failing_entry_and_the_ini_key(pytester, copy_dump, workers):
    """Under pytest-xdist the workers write the folders."""
    dump = copy_dump("pt_tensor_L1")
    pytester.makeini("[pytest]\nmsprobe_repro = from-ini\n")
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", *workers, subprocess=bool(workers))
    result.stdout.fnmatch_lines(["msprobe: a reproducer of every entry that is not pass in */from-ini"])
    written = {p.name for p in (pytester.path / "from-ini" / "pt_tensor_L1").iterdir()}
    statuses = {
        f"{row['API Name']}.{d}": row[f"{d.capitalize()} Test Success"]
        for row in read_csv(pytester.path / "out", "result")
        for d in ("forward", "backward")
    }
    assert written == {entry for entry, status in statuses.items() if status in ("error", "warning")}
    assert len(written) == 6


def test_nothing_is_saved_for_a_skip_whose_check_ran(pytester):
    """A backward whose gradients msprobe recorded none of runs both sides and has nothing to
    compare: a SKIP. Neither --msprobe-repro nor --msprobe-save-error-data saves it (they did once)."""
    writer = DumpWriter(pytester.path / "dump")
    x, y = torch.randn(4, 4).to(torch.bfloat16), torch.randn(4, 4).to(torch.bfloat16)
    writer.record("Torch.mul.0", torch.mul, [x, y], backward=True)
    writer.data["Torch.mul.0.backward"]["output"] = [None, None]
    result = run_msprobe(
        pytester,
        writer.write(),
        "--msprobe-device",
        "cpu",
        "--msprobe-repro",
        "repro",
        "--msprobe-save-error-data",
        "saved",
        "-rs",
    )
    assert result.parseoutcomes() == {"failed": 1, "skipped": 1}  # the bf16 forward breaks MaxAbsErr < 1e-4
    result.stdout.fnmatch_lines(["*1 x no output to compare  (Torch.mul.0.backward)"])
    for folder in ("repro", "saved"):
        assert [p.name for p in (pytester.path / folder / "dump").iterdir()] == ["Torch.mul.0.forward"]


# -- the template ------------------------------------------------------------------------


@pytest.mark.slow
def test_the_template_runs_its_own_example_and_a_written_script_compiles(tmp_path):
    template = repro.TEMPLATE.read_text()
    assert template.count(repro.BEGIN) == 1 and template.count(repro.END) == 1
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    torch.save({"args": [a, b], "kwargs": {}}, tmp_path / "inputs.pt")
    shutil.copy(repro.TEMPLATE, tmp_path / "repro.py")
    done = isolated_run(["repro.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "verdict: pass" in done.stdout


def floats(shape: tuple[int, ...]):
    values = st.floats(-1e3, 1e3, allow_nan=False, width=32) | st.sampled_from([0.0, float("nan"), float("inf")])
    return st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))).map(
        lambda v: np.asarray(v, dtype=np.float64).reshape(shape)
    )


def answers(shape: tuple[int, ...]):
    """What an extra run may answer: None, or non-negative values of the output's shape."""
    values = st.floats(0, 1.0, allow_nan=False)
    arrays = st.lists(values, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))).map(
        lambda v: np.asarray(v, dtype=np.float64).reshape(shape)
    )
    return st.none() | arrays


STANDARDS = {
    "basic": lambda: BasicStandard(),
    "basic-strict": lambda: BasicStandard(0.9999, 1e-6),
    "dtype": lambda: DtypeStandard(),
    "dtype-tolerance": lambda: DtypeStandard(Tolerances.parse(["Torch.add.*: rtol=1e-3, atol=1e-5"])),
    "dtype-allowance": lambda: DtypeStandard(Tolerances.parse(["Torch.add.*: accumulate=fp16"])),
    "dtype-no-warning": lambda: DtypeStandard(warning=False),
}


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    tested=floats((3, 4)),
    noise=floats((3, 4)),
    scale=st.sampled_from([0.0, 1e-6, 1e-3, 1e-1]),
    dtype=st.sampled_from(["torch.float32", "torch.bfloat16", "torch.float16", "torch.float64", "torch.int64"]),
    standard=st.sampled_from(sorted(STANDARDS)),
    magnitude=answers((3, 4)),
    spread=answers((3, 4)),
    low=answers((3, 4)),
)
def test_the_script_judges_as_the_package(tested, noise, scale, dtype, standard, magnitude, spread, low):
    """The template's verdict with what repro.py writes in (the package's code, the standard's data)
    equals the package's: status, ratio and message, given the same answers of the extra runs."""
    bench = tested + np.nan_to_num(noise, nan=0.0, posinf=1.0, neginf=-1.0) * scale
    bench[np.isnan(tested) & (noise > 0)] = 1.0  # now and then a NaN on one side only
    if dtype == "torch.int64":
        tested, bench = (np.nan_to_num(a, posinf=7, neginf=-7).astype(np.int64) for a in (tested, bench))
    chosen = STANDARDS[standard]()
    result = EntryResult("Torch.add.0", "forward", "error", outputs=[OutputResult(0, "error", "", dtype)])
    script = written_template(chosen, result)
    extra = ExtraRuns(lambda: magnitude, lambda relative: spread, lambda: low)
    found = script.judge(tested, bench, dtype, 0, extra)
    expected_m, verdict = compare(Comparison(tested, bench, dtype, "Torch.add.0.forward.output.0", extra), chosen)
    assert found["status"] == verdict.status.value
    assert found.get("ratio") == verdict.ratio
    assert found["why"] == output_message(OutputResult(0, verdict.status, reasons=verdict.reasons, floor=verdict.floor))
    np.testing.assert_equal(  # NaN equals NaN here: a non-finite fault's numbers are NaN on both
        [found["cosine"], found["max_abs_err"], found["max_rel_err"]],
        [expected_m.cosine, expected_m.max_abs_err, expected_m.max_rel_err],
    )


def written_template(standard, result):
    """The template as a module, with what repro.py writes into a script for `standard`."""
    script = template_with_sources()
    script.STANDARD = repro.standard_data(standard, result)  # read at each call: nothing keeps it
    return script


@functools.cache
def template_with_sources():
    """The template as a module with the package's code written in, loaded once for all the examples:
    its load and the package modules it builds from SOURCES were two thirds of the property's CPU."""
    script = load_template()
    script.SOURCES = repro_sources.sources()
    script.USES = {part.name: list(part.uses) for part in repro_sources.PARTS if part.uses}
    return script


def test_the_package_code_in_a_script_is_the_package_source():
    """One source of truth: the code a script runs is the package's own text, its imports of the
    package left out; what it keeps of a module is what the script needs and nothing it cannot have."""
    for part in repro_sources.PARTS:
        text = repro_sources.source(part)
        compile(text, part.name, "exec")
        module = repro_sources.module_path(part.module).read_text()
        kept = [line for line in text.splitlines() if line.strip() and not line.startswith("# pytest_msprobe/")]
        assert all(line in module.splitlines() for line in kept), part.name
        assert "from ." not in text and "import pytest_msprobe" not in text
    # budget.py whole: every line but its import of the package, in order.
    (budget_part,) = [part for part in repro_sources.PARTS if part.name == "budget"]
    whole = repro_sources.source(budget_part).splitlines()[1:]
    budget = repro_sources.module_path("pytest_msprobe.judging.standards.budget").read_text().splitlines()
    assert [line for line in budget if line.strip() and not line.startswith("from ..")] == [
        line for line in whole if line.strip()
    ]
    with pytest.raises(ValueError, match="no top-level Nothing"):
        repro_sources.source(repro_sources.Part("x", "pytest_msprobe.judging.standards.dtype", frozenset({"Nothing"})))
    with pytest.raises(ValueError, match="Tolerances"):
        repro_sources.source(
            repro_sources.Part("x", "pytest_msprobe.judging.standards.dtype", frozenset({"DtypeStandard"}))
        )


def test_every_name_the_scripts_code_reads_is_written_with_it():
    """A kept function brings the module's definitions it reads (repro_sources.closure): a constant added
    beside a formula (magnitudes' _NORMS) was once left out, the script's NameError fell back to a smaller
    budget, and its verdict parted from the run's. Every global a part reads is defined in the script."""
    provided = set(dir(builtins)) | set(repro_sources.STATUS_WORDS) | {"__name__", "__file__"}
    for part in repro_sources.PARTS:
        text = repro_sources.source(part)
        tree = ast.parse(text)
        defined = provided | repro_sources.defined_names(text)
        for earlier in part.uses:
            defined |= repro_sources.defined_names(repro_sources.sources()[earlier])
        for statement in tree.body:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                defined |= {(alias.asname or alias.name).split(".")[0] for alias in statement.names}
        local = {
            node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        } | {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)} | {
            node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))
        }
        unknown = repro_sources.used_names(tree.body) - defined - local
        assert not unknown, (part.name, sorted(unknown))
    (fused,) = [part for part in repro_sources.PARTS if part.name == "npu_reference"]
    assert {"check_count", "check_heads"} <= repro_sources.defined_names(repro_sources.source(fused))
