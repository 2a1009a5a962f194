"""--msprobe-standard dtype on real bf16 dumps, fault-injected copies, fp16 dumps and per-API tolerances."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from dumpwriter import DumpWriter

from conftest import read_csv, run_msprobe


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", "recorded"])
def test_a_correct_bf16_model_fails_basic_on_rounding_and_passes_dtype(pytester, copy_dump, device):
    dump = copy_dump("pt_tensor_L1_bf16")
    basic = run_msprobe(pytester, dump, "--msprobe-device", device, out="basic")
    assert basic.parseoutcomes()["failed"] >= 20
    basic.stdout.fnmatch_lines(["* of * failing outputs are at the rounding floor of their dtype (* bfloat16*); "
                                "--msprobe-standard dtype would pass them"])
    failing = [d for d in read_csv(pytester.path / "basic", "details") if d["Status"] == "error"]
    assert [d for d in failing if "rounding budget (--msprobe-standard dtype passes it)" not in d["Message"]] == []

    dtype = run_msprobe(pytester, dump, "--msprobe-device", device, "--msprobe-standard", "dtype", out="dtype")
    outcomes = dtype.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes["passed"] >= 60
    dtype.stdout.fnmatch_lines(["msprobe: device *, standard dtype (*"])
    rows = read_csv(pytester.path / "dtype", "details")
    assert all(row["Message"].startswith("within budget") for row in rows if row["Status"] == "pass"
               and row["Tested Dtype"].startswith("torch.b"))


def scaled(t):
    return t * 1.03


def one_off(t):
    t = t.clone()
    t.view(-1)[1] += 1.0
    return t


def mantissa_cut(t):
    bits = t.to(torch.float32).view(torch.int32) & ~((1 << 20) - 1)  # keep 3 mantissa bits
    return bits.view(torch.float32).to(t.dtype)


def swapped_rows(t):
    return t.flip(0)


FAULTS = {
    "Functional.linear.0.forward": scaled,
    "Functional.layer_norm.0.forward": one_off,
    "Functional.gelu.0.forward": mantissa_cut,
    "Torch.softmax.0.forward": swapped_rows,
}


@pytest.mark.slow
def test_faults_in_a_bf16_dump_are_caught_and_controls_pass(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1_bf16")
    tensors = dump.parent / "dump_tensor_data"
    for entry, fault in FAULTS.items():
        path = tensors / f"{entry}.output.0.pt"
        torch.save(fault(torch.load(path, weights_only=True)), path)
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype")
    failed = {line.split("::")[1].split(" ")[0] for line in result.outlines if line.startswith("FAILED")}
    assert failed == set(FAULTS)
    rows = {r["API Name"]: r for r in read_csv(pytester.path / "out", "result")}
    assert all(rows[entry.rsplit(".", 1)[0]]["Forward Test Success"] == "error" for entry in FAULTS)


def write_fp16_dump(folder):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 64, generator=g).half()
    w, b = (torch.randn(32, 64, generator=g) * 0.1).half(), torch.randn(32, generator=g).half()
    writer = DumpWriter(folder)
    h = writer.record("Functional.linear.0", F.linear, [x, w, b])
    h = writer.record("Functional.layer_norm.0", F.layer_norm, [h.detach(), [32]], {"eps": 1e-5})
    h = writer.record("Functional.gelu.0", F.gelu, [h.detach()])
    writer.record("Torch.softmax.0", torch.softmax, [h.detach(), -1])
    writer.record("Tensor.mean.0", torch.Tensor.mean, [h.detach()])
    return writer.write()


def test_an_fp16_dump_of_correct_kernels_passes_the_dtype_standard(pytester):
    dump = write_fp16_dump(pytester.path / "fp16")
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype")
    result.assert_outcomes(passed=5)
    tested = {row["Tested Dtype"] for row in read_csv(pytester.path / "out", "details")}
    assert tested == {"torch.float16"}


@pytest.mark.slow
def test_per_api_tolerances_from_the_ini_file(pytester, copy_dump):
    dump = copy_dump("pt_tensor_L1_bf16")
    pytester.makeini("[pytest]\nmsprobe_standard = dtype\nmsprobe_tolerances =\n"
                     "    Torch.matmul.*: rtol=0, atol=0\n")
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded")
    result.stdout.fnmatch_lines(["msprobe: tolerance Torch.matmul.*: rtol=0*atol=0*"])
    failed = {line.split("::")[1].split(" ")[0] for line in result.outlines if line.startswith("FAILED")}
    assert failed and all(name.startswith("Torch.matmul.") for name in failed)


def test_a_bad_tolerance_line_is_a_usage_error(pytester, copy_dump):
    dump = copy_dump("pt_stats_L1")
    pytester.makeini("[pytest]\nmsprobe_tolerances =\n    Torch.matmul.*: rtol=fast\n")
    result = run_msprobe(pytester, dump, "--msprobe-standard", "dtype")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*msprobe_tolerances*rtol*"])
