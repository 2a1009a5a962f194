"""pytest -n 2 on real dumps, read as a user reads it: the CSV rows, the worker lines, a crashed worker."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from conftest import read_csv, run_msprobe

pytest.importorskip("xdist")



def rows(folder: Path, kind: str):
    """The rows of every dump's CSV under folder, with the dump's folder beside them."""
    dumps = sorted({path.parent for path in folder.rglob(f"accuracy_checking_{kind}_*.csv")})
    return {(dump.name, *row.items()) for dump in dumps for row in read_csv(dump, kind)}


@pytest.fixture
def default_threads(monkeypatch):
    """The plugin's own thread count, no OMP_NUM_THREADS of the user's; the in-process serial
    run sets this process's torch threads, restored after."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_two_workers_write_the_rows_of_a_serial_run(pytester, copy_dump, default_threads):
    dumps = [str(copy_dump("pt_tensor_L1")), str(copy_dump("pt_tensor_mix"))]
    dump_args = [arg for dump in dumps for arg in ("--msprobe-dump", dump)]
    serial = run_msprobe(pytester, None, *dump_args, out="serial", device="cpu")
    spread = run_msprobe(pytester, None, "-n", "2", *dump_args, out="xdist", device="cpu")
    assert serial.parseoutcomes() == spread.parseoutcomes()
    assert spread.ret == serial.ret == 1  # the bf16 outputs fail the default rule in both
    for kind in ("result", "details"):
        assert rows(pytester.path / "xdist", kind) == rows(pytester.path / "serial", kind)
    assert len(rows(pytester.path / "xdist", "result")) == 37 + 26
    # The header names each dump and its entries, as a serial run's does (the controller collects nothing).
    told = [[line for line in run.outlines if re.match(r"msprobe: \S+/dump\.json: \w+ \w+ dump, ", line)] for run in (serial, spread)]
    assert told[0] == told[1] and len(told[0]) == 2, told
    # Each worker's device, pytest's own progress, and the msprobe section ending with the two CSVs.
    spread.stdout.fnmatch_lines([
        "msprobe: 2 xdist workers, one device each from ids 0,1, 1 intra-op thread(s) of * cores each",
        "msprobe: [[]gw?[]] device cpu (id ?, unused on cpu), 1 intra-op thread(s) of * cores",
        "msprobe: [[]gw?[]] device cpu (id ?, unused on cpu), 1 intra-op thread(s) of * cores",
        "*[[]100%[]]",
        "*= msprobe =*",
    ])
    section = spread.outlines[spread.outlines.index(next(l for l in spread.outlines if " msprobe " in l)):]
    paths = [line.split(None, 1) for line in section if line.startswith(("result:", "details:"))]
    assert [name for name, _ in paths] == ["result:", "details:"] * 2  # a pair per dump
    assert all(Path(path).parent.parent == pytester.path / "xdist" and Path(path).exists() for _, path in paths)
    end = max(i for i, line in enumerate(section) if line.startswith("details:"))
    assert section[end + 1].startswith("=")  # the paths close the section


CRASHING_RELU = '''
import os
import signal

import torch
import torch.nn.functional as F

_relu = F.relu


def relu(x, *args, **kwargs):
    """Kills its worker on the tested side (the bench runs in float64): forward by SIGSEGV,
    backward as the OOM killer would. Never the test process, which loads this conftest too."""
    if x.dtype != torch.float64 and os.getpid() != int(os.environ["MSPROBE_TEST_PID"]):
        os.kill(os.getpid(), signal.SIGKILL if x.requires_grad else signal.SIGSEGV)
    return _relu(x, *args, **kwargs)


F.relu = relu


def pytest_runtest_setup(item):
    """What each worker's torch really runs with: torch is imported here before the plugin sets it."""
    with open(f"threads_{os.getpid()}", "w") as handle:
        handle.write(str(torch.get_num_threads()))


def pytest_unconfigure(config):
    """Whether a worker that ran to its end froze its heap for a cheap exit."""
    if os.getpid() != int(os.environ["MSPROBE_TEST_PID"]):
        with open(f"frozen_{os.getpid()}", "w") as handle:
            handle.write(str(__import__("gc").get_freeze_count()))
'''


@pytest.mark.slow
def test_a_crashed_worker_fails_its_entry_and_the_others_run(pytester, copy_dump, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MSPROBE_TEST_PID", str(os.getpid()))
    monkeypatch.setattr(torch.nn.functional, "relu", torch.nn.functional.relu)  # undone after the test
    dump = copy_dump("pt_tensor_L1")
    pytester.makeconftest(CRASHING_RELU)
    result = run_msprobe(pytester, dump, "-n", "2", out="xdist", device="cpu")
    assert result.ret == 1
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 6 + 2  # the six bf16 rounding failures, relu forward and backward
    assert outcomes["failed"] + outcomes["passed"] == 66  # every entry has its verdict
    result.stdout.fnmatch_lines(["Functional.relu.0.forward: the xdist worker gw? crashed while checking this "
                                 "entry on cpu (id ?, unused on cpu): killed by SIGSEGV (a segfault, an abort or "
                                 "the OOM killer in the API)"])
    result.stdout.fnmatch_lines(["FAILED *::Functional.relu.0.forward*"])
    result.stdout.fnmatch_lines(["FAILED *::Functional.relu.0.backward*"])
    assert "INTERNALERROR" not in result.stdout.str()
    by_api = {row["API Name"]: row for row in read_csv(pytester.path / "xdist", "result")}
    data = json.loads(dump.read_text())["data"]
    assert set(by_api) == {name.rsplit(".", 1)[0] for name in data if not name.startswith("Module.")}
    relu = by_api["Functional.relu.0"]
    assert (relu["Forward Test Success"], relu["Backward Test Success"]) == ("error", "error")
    # The summary counts what the CSV holds, and names the crashed entries among the failures.
    for direction, column in (("forward ", "Forward Test Success"), ("backward", "Backward Test Success")):
        errors = sum(row[column] == "error" for row in by_api.values())
        passes = sum(row[column] == "pass" for row in by_api.values())
        result.stdout.fnmatch_lines([f"{direction} {passes} pass, {errors} error, 0 warning, 0 SKIP"])
    result.stdout.fnmatch_lines(["failures, worst first:", "Functional.relu.0.*: the xdist worker gw? crashed *"])
    assert re.search(r"forward: the xdist worker gw\d crashed while checking this entry on cpu \(id \d, "
                     r"unused on cpu\): killed by SIGSEGV", relu["Message"])
    assert "backward: the xdist worker" in relu["Message"] and "killed by SIGKILL" in relu["Message"]
    # Without OMP_NUM_THREADS every worker computes with one thread, as a serial run does.
    threads = 1
    result.stdout.fnmatch_lines([f"msprobe: [[]gw0[]] device cpu (id 0, unused on cpu), {threads} intra-op "
                                 "thread(s) of * cores"])
    seen = [path.read_text() for path in pytester.path.glob("threads_*")]
    assert len(seen) >= 2 and set(seen) == {str(threads)}  # every worker, the replacements included
    frozen = [int(path.read_text()) for path in pytester.path.glob("frozen_*")]
    assert frozen and all(count > 0 for count in frozen)  # the replacements, which ran to the end
    # Each replacement worker takes the id its crashed predecessor freed, never one still held: also
    # where another worker finished while the last entry crashed its worker (devices.DevicePool).
    held = dict(re.findall(r"msprobe: \[(gw\d+)\] device cpu \(id (\d)", result.stdout.str()))
    crashed = re.findall(r"\[(gw\d+)\] node down", result.stdout.str())
    replacements = [w for w in held if w not in ("gw0", "gw1")]
    assert len(crashed) == len(replacements) == 2
    for down, replacement in zip(crashed, replacements):
        assert held[replacement] == held[down]


def test_device_ids_that_do_not_parse_are_a_usage_error(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1")
    result = run_msprobe(pytester, dump, "--msprobe-devices", "0-x", device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--msprobe-devices: '0-x' is not an id or a range like 0-7"])


@pytest.mark.parametrize("where", ["option", "ini"])
def test_more_workers_than_device_ids_is_a_usage_error(pytester, copy_dump, where):
    dump = copy_dump("pt_tensor_L1")
    if where == "ini":
        pytester.makeini("[pytest]\nmsprobe_devices = 0,1\n")
    ids = ["--msprobe-devices", "0,1"] if where == "option" else []
    result = run_msprobe(pytester, dump, "-n", "3", *ids, device="cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*3 xdist workers but 2 device ids (0,1): each worker needs its own device; "
                                 "run with -n 2 or name 3 ids"])


def dump_path_of_two_ranks(pytester, copy_dump):
    """A dump_path as msprobe writes it for two ranks: step0/rank0, step0/rank1, the same APIs."""
    copy_dump("pt_tensor_L1", "dump_path/step0/rank0")
    rank1 = copy_dump("pt_tensor_L1", "dump_path/step0/rank1")
    return rank1


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_each_rank_of_a_dump_path_gets_its_own_rows(pytester, copy_dump, workers):
    rank1 = dump_path_of_two_ranks(pytester, copy_dump)
    # rank1's relu output, off by 1.0 in one element: rank0's relu is untouched.
    output = rank1.parent / "dump_tensor_data" / "Functional.relu.0.forward.output.0.pt"
    tensor = torch.load(output, weights_only=True)
    tensor.view(-1)[0] += 1.0
    torch.save(tensor, output)
    result = pytester.runpytest("--msprobe-dump", "dump_path", "--msprobe-device", "recorded",
                                "--msprobe-out", "out", *workers)
    rows = {rank: read_csv(pytester.path / "out" / rank, "result") for rank in ("rank0", "rank1")}
    assert [len(r) for r in rows.values()] == [37, 37]  # every API of both ranks, none lost
    relu = {rank: next(r for r in rows[rank] if r["API Name"] == "Functional.relu.0") for rank in rows}
    assert relu["rank0"]["Forward Test Success"] == "pass"
    assert relu["rank1"]["Forward Test Success"] == "error"
    # 79: Torch.matmul.0.backward has one row, its gradient judged where msprobe recorded it.
    assert {len(read_csv(pytester.path / "out" / rank, "details")) for rank in rows} == {79}
    result.stdout.fnmatch_lines(["*result:  *out/rank0/accuracy_checking_result_*.csv",
                                 "*details: *out/rank0/accuracy_checking_details_*.csv",
                                 "*result:  *out/rank1/accuracy_checking_result_*.csv",
                                 "*details: *out/rank1/accuracy_checking_details_*.csv"])
    # One timestamp for the run: the two pairs differ only by folder.
    names = {p.name for p in (pytester.path / "out").rglob("*.csv")}
    assert len(names) == 2


def test_a_resume_of_several_dumps_is_a_usage_error(pytester, copy_dump):
    dump_path_of_two_ranks(pytester, copy_dump)
    result = pytester.runpytest("--msprobe-dump", "dump_path", "--msprobe-device", "recorded",
                                "--msprobe-resume", "out/accuracy_checking_result_1.csv")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--msprobe-resume takes the result CSV of one dump, and 2 were given*"])


def failures_block(result) -> list[str]:
    return result.stdout.str().split("failures, worst first:\n", 1)[1].split("\n\n", 1)[0].splitlines()


@pytest.mark.slow
def test_failures_of_equal_maxabserr_list_alike_serially_and_under_two_workers(pytester, copy_dump):
    """The example's bf16 matmul called six times more on the same tensors, spread through the step:
    seven failures of one MaxAbsErr, which two workers finish in another order than the dump's.
    Both runs list them alike: by severity, then in dump order."""
    dump = copy_dump("pt_tensor_L1")
    data = json.loads(dump.read_text())
    entries = list(data["data"].items())
    matmul = data["data"]["Torch.matmul.1.forward"]
    for copy in range(2, 8):  # one every few entries of the forward pass
        entries.insert(3 * copy, (f"Torch.matmul.{copy}.forward", matmul))
    data["data"] = dict(entries)
    dump.write_text(json.dumps(data))
    order = [name for name, _ in entries if name.startswith("Torch.matmul.") and name.endswith(".forward")]
    args = ["-k", "matmul or float or relu or linear"]
    serial = run_msprobe(pytester, dump, *args, out="serial", device="recorded")
    spread = run_msprobe(pytester, dump, "-n", "2", *args, out="xdist", device="recorded")
    assert serial.ret == spread.ret == 1
    listed = failures_block(serial)
    assert failures_block(spread) == listed
    copies = [line.split(":", 1)[0] for line in listed if re.match(r"Torch\.matmul\.\d\.forward:", line)]
    assert copies == [name for name in order if name != "Torch.matmul.0.forward"]  # dump order, 1 first
    assert len({line.split(": ", 1)[1] for line in listed if line.split(":", 1)[0] in copies}) == 1  # one MaxAbsErr
