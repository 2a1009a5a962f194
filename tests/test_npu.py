"""The NPU path without an NPU: device choice, torch_npu failures, and recorded NPU dumps.

The dumps are written by the suite itself in msprobe's format, outputs computed
in the recorded dtype (by the CPU references, which stand in for the NPU).
"""

from __future__ import annotations

import os

import pytest
import torch
from dumpwriter import DumpWriter

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks import devices
from pytest_msprobe.frameworks.npu_ops import lookup


def test_auto_chooses_cuda_where_torch_sees_it_else_cpu():
    assert devices.choose("auto") == ("cuda" if torch.cuda.is_available() else "cpu")


def test_npu_without_torch_npu_is_a_clear_error():
    with pytest.raises(devices.DeviceError, match="needs torch_npu, which is not installed"):
        devices.choose("npu")


@pytest.mark.parametrize("text, ids", [("0,1,2,3", [0, 1, 2, 3]), ("0-7", list(range(8))), ("0-2,6", [0, 1, 2, 6])])
def test_device_ids(text, ids):
    assert devices.parse_ids(text) == ids


def test_device_ids_are_checked():
    with pytest.raises(devices.DeviceError, match="not an id"):
        devices.parse_ids("0,x")
    with pytest.raises(devices.DeviceError, match="twice"):
        devices.parse_ids("0-3,2")


@pytest.fixture
def broken_torch_npu(pytester, monkeypatch):
    """A torch_npu that fails to import as it does without the CANN toolkit."""
    package = pytester.path / "fake_site" / "torch_npu"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        'raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")\n')
    monkeypatch.setenv("PYTHONPATH", str(package.parent), prepend=os.pathsep)


@pytest.mark.slow
def test_npu_with_a_broken_torch_npu_says_what_to_set(pytester, copy_dump, broken_torch_npu):
    dump = copy_dump("pt_stats_L1")
    result = pytester.runpytest_subprocess("--msprobe-dump", str(dump), "--msprobe-device", "npu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*torch_npu is installed but cannot be imported (libhccl.so*"
                                 "*set_env.sh*TORCH_DEVICE_BACKEND_AUTOLOAD=0*"])
    assert "Traceback" not in result.stderr.str()


@pytest.mark.slow
def test_auto_passes_over_a_broken_torch_npu_and_says_so(pytester, copy_dump, broken_torch_npu):
    dump = copy_dump("pt_stats_L1")
    result = pytester.runpytest_subprocess("--msprobe-dump", str(dump), "--msprobe-device", "auto",
                                           "--collect-only")
    assert result.ret == 0
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    result.stdout.fnmatch_lines([f"msprobe: device {device},*",
                                 "msprobe: auto did not choose npu: torch_npu is installed*"])


def npu_calls():
    """(prefix, op, args, kwargs, backward) of fused ops as a training step calls them."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    q, k, v = randn(1, 2, 8, 16), randn(1, 2, 8, 16), randn(1, 2, 8, 16)
    causal = torch.triu(torch.ones(8, 8, dtype=torch.bool), diagonal=1)
    return [
        ("NPU.npu_rms_norm.0", "npu_rms_norm", [randn(4, 32), randn(32)], {"epsilon": 1e-6}, True),
        ("NPU.npu_swiglu.0", "npu_swiglu", [randn(4, 64)], {"dim": -1}, True),
        ("NPU.npu_rotary_mul.0", "npu_rotary_mul", [randn(1, 8, 2, 16), randn(1, 8, 1, 16), randn(1, 8, 1, 16)],
         {}, True),
        ("NPU.npu_fast_gelu.0", "npu_fast_gelu", [randn(4, 32)], {}, True),
        ("NPU.npu_fusion_attention.0", "npu_fusion_attention", [q, k, v, 2, "BNSD"],
         {"atten_mask": causal, "scale": 0.25, "sparse_mode": 0}, True),
        ("NPU.npu_layer_norm_eval.0", "npu_layer_norm_eval", [randn(4, 32), [32], randn(32), randn(32)],
         {"eps": 1e-5}, False),
        ("NPU.npu_moe_gating_top_k_softmax.0", "npu_moe_gating_top_k_softmax", [randn(6, 8)], {"k": 2}, False),
    ]


def write_npu_dump(folder):
    writer = DumpWriter(folder)
    for prefix, op, args, kwargs, backward in npu_calls():
        writer.record(prefix, lookup(op), args, kwargs, backward=backward)
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
    writer.record("Functional.gelu.0", torch.nn.functional.gelu, [x], {}, backward=True)
    return writer.write()



def test_recorded_npu_dump_passes_where_outputs_are_right(pytester):
    dump = write_npu_dump(pytester.path / "npu")
    result = run_msprobe(pytester, dump, "-rs", device="recorded")
    result.assert_outcomes(passed=14)
    rows = {r["API Name"]: r for r in read_csv(pytester.path / "out", "result")}
    assert rows["NPU.npu_rms_norm.0"]["Forward Test Success"] == "pass"
    assert rows["NPU.npu_rms_norm.0"]["Backward Test Success"] == "pass"
    details = {d["API Name"]: d for d in read_csv(pytester.path / "out", "details")}
    # softmax_max and softmax_sum are compared; the placeholders say why they are not
    assert details["NPU.npu_fusion_attention.0.forward.output.1"]["Status"] == "pass"
    assert details["NPU.npu_fusion_attention.0.forward.output.4"]["Status"] == "SKIP"
    assert "seed" in details["NPU.npu_fusion_attention.0.forward.output.4"]["Message"]
    # integer outputs (expert indices) are compared exactly
    assert details["NPU.npu_moe_gating_top_k_softmax.0.forward.output.1"]["Tested Dtype"] == "torch.int32"


def scale(path, factor):
    torch.save(torch.load(path, weights_only=True) * factor, path)


def bump(path):
    tensor = torch.load(path, weights_only=True)
    tensor.view(-1)[0] += 1.0
    torch.save(tensor, path)


def test_recorded_npu_dump_fails_where_outputs_were_perturbed(pytester):
    dump = write_npu_dump(pytester.path / "npu")
    tensors = dump.parent / "dump_tensor_data"
    scale(tensors / "NPU.npu_rms_norm.0.forward.output.0.pt", 1.03)
    bump(tensors / "NPU.npu_swiglu.0.forward.output.0.pt")
    scale(tensors / "NPU.npu_fusion_attention.0.forward.output.0.pt", 0.97)
    scale(tensors / "NPU.npu_rotary_mul.0.backward.output.0.pt", 1.05)
    result = run_msprobe(pytester, dump, "-rs", device="recorded")
    result.assert_outcomes(passed=10, failed=4)
    rows = {r["API Name"]: r for r in read_csv(pytester.path / "out", "result")}
    assert rows["NPU.npu_rms_norm.0"]["Forward Test Success"] == "error"
    assert rows["NPU.npu_rms_norm.0"]["Backward Test Success"] == "pass"
    assert rows["NPU.npu_rotary_mul.0"]["Backward Test Success"] == "error"
    assert rows["Functional.gelu.0"]["Forward Test Success"] == "pass"


def test_npu_ops_off_the_npu_are_skipped_with_the_reason(pytester):
    dump = write_npu_dump(pytester.path / "npu")
    result = run_msprobe(pytester, dump, "-rs", device="cpu")
    result.assert_outcomes(passed=2, skipped=12)
    result.stdout.fnmatch_lines(["*NPU op npu_rms_norm runs only on an NPU: use --msprobe-device npu, or recorded*"])


def test_an_npu_op_without_reference_is_a_skip_naming_it(pytester):
    writer = DumpWriter(pytester.path / "npu")
    writer.record("NPU.npu_geglu.0", torch.add, [torch.ones(2), torch.ones(2)])
    result = run_msprobe(pytester, writer.write(), "-rs", device="recorded")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*NPU op npu_geglu has no CPU reference*"])


@pytest.fixture
def installed(monkeypatch):
    """Pretend which of torch_npu and mindspore are installed."""

    def set_installed(*names):
        real = devices.has_module
        monkeypatch.setattr(devices, "has_module",
                            lambda name: name in names if name in ("torch_npu", "mindspore") else real(name))

    return set_installed


def test_mindspore_dumps_on_the_npu_need_mindspore_not_torch_npu(installed):
    installed("mindspore")
    assert devices.choose("npu", frameworks={"mindspore"}) == "npu"
    with pytest.raises(devices.DeviceError, match="needs torch_npu"):
        devices.choose("npu", frameworks={"mindspore", "pytorch"})  # the PyTorch dump does
    installed()
    with pytest.raises(devices.DeviceError, match="MindSpore dumps need MindSpore, which is not installed"):
        devices.choose("npu", frameworks={"mindspore"})


def test_auto_runs_mindspore_dumps_on_the_cpu_and_says_so(installed):
    installed("mindspore", "torch_npu")
    notes = []
    assert devices.choose("auto", notes, frameworks={"mindspore"}) == "cpu"
    assert notes == ["auto chose cpu for MindSpore dumps: use --msprobe-device npu on Ascend"]


def test_binding_the_npu_for_mindspore_dumps_goes_through_mindspore(monkeypatch):
    from pytest_msprobe.frameworks import mindspore

    bound = []
    monkeypatch.setattr(mindspore, "bind", lambda device: bound.append(device) or device)
    monkeypatch.setattr(devices, "import_torch_npu", lambda: pytest.fail("torch_npu imported for MindSpore dumps"))
    assert devices.bind("npu", 3, frameworks={"mindspore"}) == "npu:3"
    assert bound == ["npu:3"]
    assert devices.device_count("npu", frameworks={"mindspore"}) is None  # MindSpore checks the id itself


def test_the_framework_is_read_from_the_head_of_a_dump():
    from conftest import DATA
    from pytest_msprobe.dumps.dump import peek_framework

    assert peek_framework(DATA / "ms_tensor_L1" / "dump.json") == "mindspore"
    assert peek_framework(DATA / "pt_stats_L1" / "dump.json") == "pytorch"
    # No framework key: the tensor spelling tells.
    assert peek_framework(DATA / "public" / "ascend-mstt__msprobe_test_mindspore_ut_api_accuracy_checker_files__"
                                         "api_info_statistics.json") == "mindspore"
    assert peek_framework(DATA / "public" / "ascend-mstt__msprobe_test_pytorch_ut_api_accuracy_checker_run_ut__"
                                         "dump.json") == "pytorch"
