"""--msprobe-probe fp32: a failing fp16/bf16 entry run again with its fp16/bf16 inputs in fp32
tells a low-precision computation (keep it out of autocast) from a faulty kernel."""

from __future__ import annotations

import pytest
import torch
from dumpwriter import DumpWriter, mindspore_mul_dump

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks import for_framework

PASSES = "passes when run in fp32: keep {api} out of autocast or cast it to fp32"
PASSES_ON_CPU = (
    "passes when run in fp32 (on the CPU: the tested side was recorded, there is no device to re-run): "
    "keep {api} out of autocast or cast it to fp32"
)
KERNEL = "fails in fp32 too: the kernel itself"


def bf16_accumulating_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A matmul whose running sum is rounded to bf16 at every step: a low-precision accumulation."""
    total = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        total = (total + a[:, k : k + 1].float() * b[k : k + 1, :].float()).to(torch.bfloat16).float()
    return total.to(torch.bfloat16)


def write_dump(folder, dtype, matmul=torch.matmul):
    """A matmul over 1024 terms and an add, both in `dtype`; the matmul's output as `matmul` computed it.
    Summed in bf16, 1024 terms are off by 4.8 ULP RMS: over the bf16 budget's error limit (2.5)."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(shape, generator=generator).to(dtype) for shape in ((16, 1024), (1024, 16)))
    x, y = (torch.randn(8, 8, generator=generator).to(dtype) for _ in range(2))
    writer = DumpWriter(folder)
    writer.record("Torch.matmul.0", matmul, [a, b])
    writer.record("Torch.add.0", torch.add, [x, y])
    return writer.write()


def messages(folder):
    return {row["API Name"]: row["Message"] for row in read_csv(folder, "result")}


@pytest.fixture
def probe_runs(monkeypatch):
    """How many entries the probe ran for: PyTorch's probes all call in_fp32 once."""
    globals_of_pytorch = type(for_framework("pytorch")).run.__globals__
    real = globals_of_pytorch["in_fp32"]
    runs = []

    def counted(call):
        runs.append(call.name.full)
        return real(call)

    monkeypatch.setitem(globals_of_pytorch, "in_fp32", counted)
    return runs


def test_a_recorded_bf16_accumulation_passes_in_fp32_on_the_cpu(pytester, probe_runs):
    dump = write_dump(pytester.path / "acc", torch.bfloat16, bf16_accumulating_matmul)
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype",
                         "--msprobe-probe", "fp32")
    assert result.parseoutcomes() == {"failed": 1, "passed": 1}
    result.stdout.fnmatch_lines(["msprobe: fp32 probe of every failing fp16/bf16 entry on the CPU (the tested side is recorded)"])
    text = PASSES_ON_CPU.format(api="Torch.matmul")
    result.stdout.fnmatch_lines([f"  fp32 probe: {text}"])  # the failure message
    result.stdout.fnmatch_lines(["Torch.matmul.0.forward: *", f"    {text}"])  # the summary
    assert text in messages(pytester.path / "out")["Torch.matmul.0"]
    assert "fp32" not in messages(pytester.path / "out")["Torch.add.0"]
    assert probe_runs == ["Torch.matmul.0.forward"]  # the passing entry does not pay


def test_a_kernel_accumulating_in_bf16_passes_in_fp32_on_the_device(pytester, probe_runs):
    dump = write_dump(pytester.path / "acc", torch.bfloat16)
    # The device under test (here the CPU) with a kernel that accumulates bf16 matmuls in bf16.
    pytester.makeconftest("""
        import torch
        from probe_kernels import bf16_accumulating
        real = torch.matmul

        def pytest_configure(config):
            torch.matmul = bf16_accumulating(real)

        def pytest_unconfigure(config):
            torch.matmul = real
    """)
    pytester.makepyfile(probe_kernels=KERNELS)
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-standard", "dtype",
                         "--msprobe-probe", "fp32")
    assert result.parseoutcomes() == {"failed": 1, "passed": 1}
    assert PASSES.format(api="Torch.matmul") in messages(pytester.path / "out")["Torch.matmul.0"]
    assert probe_runs == ["Torch.matmul.0.forward"]


def test_a_kernel_off_in_fp32_too_fails_in_fp32_too(pytester, probe_runs):
    dump = write_dump(pytester.path / "off", torch.float16)
    # A kernel that computes in fp32 and is off by 1% (its float64 path, the bench's, is right).
    pytester.makeconftest("""
        import torch
        from probe_kernels import scaled
        real = torch.matmul

        def pytest_configure(config):
            torch.matmul = scaled(real)

        def pytest_unconfigure(config):
            torch.matmul = real
    """)
    pytester.makepyfile(probe_kernels=KERNELS)
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-probe", "fp32")
    assert result.parseoutcomes()["failed"] >= 1
    found = messages(pytester.path / "out")
    assert KERNEL in found["Torch.matmul.0"]
    result.stdout.fnmatch_lines([f"  fp32 probe: {KERNEL}"])
    assert "Torch.matmul.0.forward" in probe_runs


KERNELS = '''
import torch

def bf16_accumulating(real):
    def matmul(a, b, **kwargs):
        if a.dtype != torch.bfloat16:
            return real(a, b, **kwargs)
        total = torch.zeros(a.shape[0], b.shape[1])
        for k in range(a.shape[1]):
            total = (total + a[:, k : k + 1].float() * b[k : k + 1, :].float()).to(torch.bfloat16).float()
        return total.to(torch.bfloat16)
    return matmul

def scaled(real):
    def matmul(a, b, **kwargs):
        out = real(a, b, **kwargs)
        return out if out.dtype == torch.float64 else out * 1.01
    return matmul
'''


def test_without_the_option_nothing_is_probed(pytester, probe_runs):
    dump = write_dump(pytester.path / "acc", torch.bfloat16, bf16_accumulating_matmul)
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype")
    assert result.parseoutcomes() == {"failed": 1, "passed": 1}
    assert probe_runs == [] and "fp32" not in messages(pytester.path / "out")["Torch.matmul.0"]


def test_the_option_takes_fp32_or_off_and_an_ini_key(pytester):
    dump = write_dump(pytester.path / "acc", torch.bfloat16, bf16_accumulating_matmul)
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-probe", "fp16")
    result.stderr.fnmatch_lines(["*--msprobe-probe must be off or fp32, not 'fp16'*"])
    pytester.makeini("[pytest]\nmsprobe_probe = fp32\nmsprobe_standard = dtype\n")
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded")
    assert PASSES_ON_CPU.format(api="Torch.matmul") in messages(pytester.path / "out")["Torch.matmul.0"]


def test_a_real_autocast_backward_passes_in_fp32(pytester, copy_dump):
    """examples/pt_tensor_L1: the autocast linear's gradients break the fp32 budget; run in fp32 they do not."""
    dump = copy_dump("pt_tensor_L1")
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-standard", "dtype",
                         "--msprobe-probe", "fp32")
    assert result.parseoutcomes() == {"failed": 1, "passed": 65}
    assert PASSES.format(api="Functional.linear") in messages(pytester.path / "out")["Functional.linear.1"]


# -- MindSpore ---------------------------------------------------------------------


def test_mindspore_recorded_bf16_off_by_3_percent_passes_in_fp32_on_the_cpu(pytester):
    pytest.importorskip("mindspore")
    dump = mindspore_mul_dump(pytester.path / "ms", torch.bfloat16, scale=1.03)
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype",
                         "--msprobe-probe", "fp32")
    assert result.parseoutcomes() == {"failed": 1, "passed": 1}
    assert PASSES_ON_CPU.format(api="Mint.mul") in messages(pytester.path / "out")["Mint.mul.0"]


def test_mindspore_kernel_off_in_fp32_too(pytester):
    pytest.importorskip("mindspore")
    dump = mindspore_mul_dump(pytester.path / "ms", torch.float16)
    pytester.makeconftest("""
        from mindspore import mint
        real = mint.mul

        def pytest_configure(config):
            mint.mul = lambda *args, **kwargs: real(*args, **kwargs) * 1.01

        def pytest_unconfigure(config):
            mint.mul = real
    """)
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-probe", "fp32")
    found = messages(pytester.path / "out")["Mint.mul.0"]
    assert found.startswith("forward: ") and KERNEL in found.split(" | ")[0]
    result.stdout.fnmatch_lines(["Mint.mul.0.forward: 1 of 1 outputs break*", f"  fp32 probe: {KERNEL}"])
