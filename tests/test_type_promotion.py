"""Calls whose inputs are wider than their bf16 output without being wrong (issue 27: CLIP and Swin
under CPU autocast in bench/zoo). tests/data/promotion is a real msprobe 26.2.0 dump of them
(make/promotion.py)."""

from __future__ import annotations

import pytest

from conftest import read_csv, run_msprobe


@pytest.mark.parametrize("device", ["recorded", "cpu"])
def test_inputs_wider_than_a_bf16_output(pytester, copy_dump, device):
    result = run_msprobe(pytester, copy_dump("promotion"), "--msprobe-standard", "dtype", device=device)
    details = {row["API Name"]: row for row in read_csv(pytester.path / "out", "details")}

    # fp32 0-dim scale * bf16 features is bf16: the scale's gradient is a bf16 sum cast up to fp32,
    # judged in bf16 and said so (it was 214x its fp32 budget in CLIP's logits).
    scale = details["Tensor.__mul__.0.backward.output.0"]
    assert scale["Status"] == "pass", scale["Message"]
    assert "computed in torch.bfloat16 (a 0-dim torch.float32 input of a torch.bfloat16 result" in scale["Message"]
    assert "computed in" not in details["Tensor.__mul__.0.backward.output.1"]["Message"]  # the bf16 input's own
    # softmax's fp32 output @ bf16 v under autocast: matmul's autocast, both sides on bf16 inputs (it
    # was 87x-445x its budget in recorded mode, and raised a dtype mismatch in cpu mode).
    matmul = details["Tensor.__matmul__.0.forward.output.0"]
    assert matmul["Status"] == "pass", matmul["Message"]
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    assert "autocast to torch.bfloat16 applied" in rows["Tensor.__matmul__.0"]["Message"]
    # A 1-D fp32 weight beside a bf16 input is no type promotion: layer_norm's CPU kernel returns the
    # fp32 weight and bias gradients at bf16 precision, and that stays an error.
    # The message says whose deficit it is (frameworks/cpu_kernels.py); the input's own gradient says nothing of it.
    for index in (1, 2):
        row = details[f"Functional.layer_norm.0.backward.output.{index}"]
        assert row["Status"] == "error" and "the CPU kernel's own deficit" in row["Message"], row
    assert "own deficit" not in details["Functional.layer_norm.0.backward.output.0"]["Message"]
    others = [name for name, row in details.items() if row["Status"] == "error" and "layer_norm" not in name]
    assert not others, others
    # In recorded mode msprobe took matmul's gradients through its hook, no input's: softmax's recorded incoming
    # gradient is its first input's, bit for bit (softmax's output read by it alone), judged in bf16 as autocast
    # computed it; v's, a leaf's, is a SKIP saying what to run.
    if device == "recorded":
        taken = details["Tensor.__matmul__.0.backward.output.0"]
        assert taken["Status"] == "pass" and "recorded incoming gradient" in taken["Message"], taken
        assert details["Tensor.__matmul__.0.backward.output.1"]["Status"] == "SKIP"
    result.assert_outcomes(failed=1, passed=31, skipped=0)
