"""--msprobe-probe fp32: a failing fp16/bf16 entry run again with its fp16/bf16 inputs in fp32
tells a low-precision computation (keep it out of autocast) from a faulty kernel."""

from __future__ import annotations

import pytest
import torch
from dumpwriter import bf16_accumulating_matmul, matmul_add_dump, mindspore_mul_dump

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks import for_framework, pytorch

PASSES = "passes when run in fp32: keep {api} out of autocast or cast it to fp32"
PASSES_ON_CPU = (
    "passes when run in fp32 (on the CPU: the tested side was recorded, there is no device to re-run): "
    "keep {api} out of autocast or cast it to fp32"
)
KERNEL = "fails in fp32 too: the kernel itself"


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
    dump = matmul_add_dump(pytester.path / "acc", torch.bfloat16, bf16_accumulating_matmul)
    result = run_msprobe(
        pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype", "--msprobe-probe", "fp32"
    )
    assert result.parseoutcomes() == {"failed": 1, "passed": 1}
    result.stdout.fnmatch_lines(
        ["msprobe: fp32 probe of every failing fp16/bf16 entry on the CPU (the tested side is recorded)"]
    )
    text = PASSES_ON_CPU.format(api="Torch.matmul")
    result.stdout.fnmatch_lines([f"  fp32 probe: {text}"])  # the failure message
    result.stdout.fnmatch_lines(["Torch.matmul.0.forward: *", f"    {text}"])  # the summary
    assert text in messages(pytester.path / "out")["Torch.matmul.0"]
    assert "fp32" not in messages(pytester.path / "out")["Torch.add.0"]
    assert probe_runs == ["Torch.matmul.0.forward"]  # the passing entry does not pay


@pytest.fixture
def device_kernels(monkeypatch):
    """The device under test (the CPU here) with kernels of its own for some APIs, {"Torch.matmul":
    wrap}: the tested callable is wrap(the API), while the benchmark and the dtype standard's
    reference (PyTorch's own CPU kernel, its extra run `low`) stay the API, as on a real device."""
    kernels = {}
    real = pytorch.resolve

    def resolve(name, recorded, device, *references):
        tested, bench = real(name, recorded, device, *references)
        wrap = kernels.get(f"{name.api_type}.{name.api}")
        return (tested if wrap is None or tested is None else wrap(tested)), bench

    monkeypatch.setattr(pytorch, "resolve", resolve)
    return kernels


def bf16_accumulating(real):
    """A kernel that sums bf16 products in bf16 (fp32 and wider inputs: the API itself)."""

    def matmul(a, b, **kwargs):
        return bf16_accumulating_matmul(a, b) if a.dtype == torch.bfloat16 else real(a, b, **kwargs)

    return matmul


def scaled(real):
    """A kernel off by 1% whatever its dtype."""

    def kernel(*args, **kwargs):
        return real(*args, **kwargs) * 1.01

    return kernel


def test_a_kernel_accumulating_in_bf16_passes_in_fp32_on_the_device(pytester, probe_runs, device_kernels):
    dump = matmul_add_dump(pytester.path / "acc", torch.bfloat16)
    device_kernels["Torch.matmul"] = bf16_accumulating
    result = run_msprobe(
        pytester, dump, "--msprobe-device", "cpu", "--msprobe-standard", "dtype", "--msprobe-probe", "fp32"
    )
    assert result.parseoutcomes() == {"failed": 1, "passed": 1}
    assert PASSES.format(api="Torch.matmul") in messages(pytester.path / "out")["Torch.matmul.0"]
    assert probe_runs == ["Torch.matmul.0.forward"]


@pytest.mark.parametrize("standard", ["basic", "dtype"])
def test_a_kernel_off_in_fp32_too_fails_in_fp32_too(pytester, probe_runs, device_kernels, standard):
    dump = matmul_add_dump(pytester.path / "off", torch.float16)
    device_kernels["Torch.matmul"] = scaled
    result = run_msprobe(
        pytester, dump, "--msprobe-device", "cpu", "--msprobe-standard", standard, "--msprobe-probe", "fp32"
    )
    assert result.parseoutcomes()["failed"] >= 1
    found = messages(pytester.path / "out")
    assert KERNEL in found["Torch.matmul.0"]
    result.stdout.fnmatch_lines([f"  fp32 probe: {KERNEL}"])
    assert "Torch.matmul.0.forward" in probe_runs


def test_the_cpu_checked_against_itself_has_nothing_to_probe(pytester, probe_runs):
    """The dtype standard's reference for bf16 is PyTorch's own CPU kernel: the CPU as the device
    under test passes by construction, and nothing fails to be probed."""
    dump = matmul_add_dump(pytester.path / "acc", torch.bfloat16)
    result = run_msprobe(
        pytester, dump, "--msprobe-device", "cpu", "--msprobe-standard", "dtype", "--msprobe-probe", "fp32"
    )
    assert result.parseoutcomes() == {"passed": 2}
    assert probe_runs == []


def test_without_the_option_nothing_is_probed(pytester, probe_runs):
    dump = matmul_add_dump(pytester.path / "acc", torch.bfloat16, bf16_accumulating_matmul)
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype")
    assert result.parseoutcomes() == {"failed": 1, "passed": 1}
    message = messages(pytester.path / "out")["Torch.matmul.0"]
    assert probe_runs == [] and "in fp32" not in message and "probe" not in message


def test_the_option_takes_fp32_or_off_and_an_ini_key(pytester):
    dump = matmul_add_dump(pytester.path / "acc", torch.bfloat16, bf16_accumulating_matmul)
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-probe", "fp16")
    result.stderr.fnmatch_lines(["*--msprobe-probe must be off or fp32, not 'fp16'*"])
    pytester.makeini("[pytest]\nmsprobe_probe = fp32\nmsprobe_standard = dtype\n")
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded")
    assert PASSES_ON_CPU.format(api="Torch.matmul") in messages(pytester.path / "out")["Torch.matmul.0"]


def bf16_accumulating_linear(real):
    """F.linear summing bf16 products in bf16: what autocast hands it (bf16 inputs); in fp32 the API."""

    def linear(x, weight, bias=None):
        if x.dtype != torch.bfloat16:
            return real(x, weight, bias)
        rows = bf16_accumulating_matmul(x.reshape(-1, x.shape[-1]), weight.t())
        out = rows.reshape(*x.shape[:-1], weight.shape[0])
        return out if bias is None else (out.float() + bias.float()).to(torch.bfloat16)

    return linear


@pytest.mark.slow
def test_a_real_autocast_linear_whose_kernel_sums_in_bf16_passes_in_fp32(pytester, copy_dump, device_kernels):
    """examples/pt_tensor_L1's autocast linear (fp32 inputs, a bf16 output): both sides take its inputs
    rounded to bf16, as autocast does, so on PyTorch's CPU kernel it passes the dtype standard. On a
    device whose linear sums in bf16 it fails; in fp32, out of autocast (against the benchmark of the
    inputs as recorded, not rounded), it passes. Under the basic standard a bf16 output breaks
    MaxAbsErr < 1e-4 on its rounding alone, in fp32 too, and the probe says so."""
    dump = copy_dump("pt_tensor_L1")
    device_kernels["Functional.linear"] = bf16_accumulating_linear
    result = run_msprobe(
        pytester, dump, "--msprobe-device", "cpu", "--msprobe-standard", "dtype", "--msprobe-probe", "fp32"
    )
    assert result.parseoutcomes() == {"failed": 1, "passed": 65}  # its gradients sum no bf16 products
    passes = PASSES.format(api="Functional.linear")
    assert messages(pytester.path / "out")["Functional.linear.1"].startswith("forward: ")
    assert passes in messages(pytester.path / "out")["Functional.linear.1"]
    result.stdout.fnmatch_lines([f"  fp32 probe: {passes}"])
    basic = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-probe", "fp32", out="basic")
    assert basic.parseoutcomes()["failed"] >= 2
    forward = messages(pytester.path / "basic")["Functional.linear.1"].split(" | ")[0]
    assert forward.startswith("forward: ")
    assert "fails in fp32 too, within the bf16 rounding budget: rounding to bf16 alone" in forward


@pytest.mark.slow
def test_a_gradient_judged_at_a_node_of_the_graph_is_not_probed(pytester, copy_dump):
    """examples/pt_tensor_L1's autocast linear: msprobe took its weight gradient inside the graph
    (transposed), where the run judges it; a run of the call in fp32 gives the inputs' gradients."""
    dump = copy_dump("pt_tensor_L1")
    path = dump.parent / "dump_tensor_data" / "Functional.linear.1.backward.output.2.pt"
    recorded = torch.load(path, weights_only=True)
    torch.save((recorded.double() * 1.05).to(recorded.dtype), path)
    result = run_msprobe(
        pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype", "--msprobe-probe", "fp32"
    )
    assert result.parseoutcomes() == {"failed": 1, "passed": 65}
    message = messages(pytester.path / "out")["Functional.linear.1"]
    assert "judged against the float64 gradient there" in message
    assert (
        "fp32 probe (on the CPU: the tested side was recorded, there is no device to re-run) could not run: "
        "output 1 was judged at a node of the API's graph" in message
    )


# -- MindSpore ---------------------------------------------------------------------


def test_mindspore_recorded_bf16_off_by_3_percent_passes_in_fp32_on_the_cpu(pytester):
    pytest.importorskip("mindspore")
    dump = mindspore_mul_dump(pytester.path / "ms", torch.bfloat16, scale=1.03)
    result = run_msprobe(
        pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype", "--msprobe-probe", "fp32"
    )
    assert result.parseoutcomes() == {"failed": 1, "passed": 1}
    assert PASSES_ON_CPU.format(api="Mint.mul") in messages(pytester.path / "out")["Mint.mul.0"]


@pytest.mark.parametrize("standard", ["basic", "dtype"])
def test_mindspore_kernel_off_in_fp32_too(pytester, standard):
    """MindSpore's tested side is its own kernel, the benchmark and the reference PyTorch's."""
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
    result = run_msprobe(
        pytester, dump, "--msprobe-device", "cpu", "--msprobe-standard", standard, "--msprobe-probe", "fp32"
    )
    found = messages(pytester.path / "out")["Mint.mul.0"]
    assert found.startswith("forward: ") and KERNEL in found.split(" | ")[0]
    result.stdout.fnmatch_lines(["Mint.mul.0.forward: 1 of 1 outputs break*", f"  fp32 probe: {KERNEL}"])
