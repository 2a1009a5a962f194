"""PyTorch's quantized dtypes in a dump (issue 30): msprobe 26.2.0 writes str(dtype), "torch.qint8".

A torch.dtype argument naming one (npu_quantize's dtype=torch.qint8, torch_npu's documented call)
is read as that dtype and the entry judged; a tensor of one (its scale and zero point are not in
dump.json) is refused with a message naming the entry and the field, and the run goes on.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks.torch_engine import TorchCodec

LLM = "npu_llm_sim"


def test_the_codec_reads_quantized_dtype_names_as_torch_dtypes():
    codec = TorchCodec()
    assert [codec.dtype(f"torch.{name}") for name in ("qint8", "quint8", "qint32")] == [
        torch.qint8, torch.quint8, torch.qint32]  # fmt: skip


def _quantized(dump: Path) -> dict:
    """npu_quantize's entries of npu_llm_sim: .1 called with dtype=torch.qint8 (its int8 output
    as torch_npu gives it), .0's output and .2's zero points recorded as quantized tensors."""
    data = json.loads(dump.read_text())
    entries = {name: data["data"][name] for name in (f"NPU.npu_quantize.{i}.forward" for i in range(3))}
    entries["NPU.npu_quantize.1.forward"]["input_args"][3]["value"] = "torch.qint8"
    entries["NPU.npu_quantize.0.forward"]["output"][0]["dtype"] = "torch.qint8"
    entries["NPU.npu_quantize.2.forward"]["input_args"][2]["dtype"] = "torch.quint8"
    data["data"] = entries
    dump.write_text(json.dumps(data))
    return entries


def test_a_qint8_argument_is_judged_and_quantized_tensors_are_refused_by_field(pytester, copy_dump):
    dump = copy_dump(LLM)
    _quantized(dump)
    result = run_msprobe(pytester, dump, "--msprobe-standard", "dtype", device="recorded")
    result.assert_outcomes(passed=1, skipped=2)
    results = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    assert results["NPU.npu_quantize.1"]["Forward Test Success"] == "pass"
    details = {row["API Name"]: row for row in read_csv(pytester.path / "out", "details")}
    assert details["NPU.npu_quantize.1.forward.output.0"]["Message"].startswith("quantisation rule")
    quantized = "is a PyTorch quantized dtype (integers with a scale and zero point that dump.json does not record)"
    assert results["NPU.npu_quantize.0"]["Forward Test Success"] == "SKIP"
    assert results["NPU.npu_quantize.0"]["Message"].startswith(
        f"NPU.npu_quantize.0.forward: output[0].dtype: dtype 'torch.qint8' {quantized}"
    )
    assert results["NPU.npu_quantize.2"]["Message"].startswith(
        f"NPU.npu_quantize.2.forward: input_args[2].dtype: dtype 'torch.quint8' {quantized}"
    )
    assert "INTERNALERROR" not in result.stdout.str()
