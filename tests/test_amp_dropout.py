"""Calls of a clean step that no re-run reproduces as recorded (issue 27, found on GPT-2 and BERT dumps
of bench/zoo): an autocast GEMM whose recorded inputs mix bf16 and fp32, attention with dropout, and a linear whose
product was rounded before its bias was added.
tests/data/amp_dropout is a real msprobe 26.2.0 dump of them (make/amp_dropout.py)."""

from __future__ import annotations

import pytest

from conftest import read_csv, run_msprobe


@pytest.mark.parametrize("device", ["recorded", "cpu"])
def test_autocast_gemm_with_mixed_inputs_and_attention_dropout(pytester, copy_dump, device):
    """addmm(fp32 bias, bf16 activation, fp32 weight) -> bf16 ran under autocast: both sides take the
    inputs rounded to bf16, as the kernel did (it was an error at 25x its budget, or raised 'mat1 and
    mat2 must have the same dtype' in cpu mode). SDPA with dropout_p 0.1 is random: a SKIP saying so;
    the same call with dropout_p 0 is checked and passes."""
    result = run_msprobe(pytester, copy_dump("amp_dropout"), "--msprobe-standard", "dtype", "-rs", device=device)
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}

    addmm = rows["Torch.addmm.0"]
    assert (addmm["Forward Test Success"], addmm["Backward Test Success"]) == ("pass", "pass")
    assert "autocast to torch.bfloat16 applied" in addmm["Message"]
    dropped = rows["Functional.scaled_dot_product_attention.0"]
    assert (dropped["Forward Test Success"], dropped["Backward Test Success"]) == ("SKIP", "SKIP")
    assert "dropout_p 0.1 is random: two runs never agree" in dropped["Message"]
    kept = rows["Functional.scaled_dot_product_attention.1"]
    assert (kept["Forward Test Success"], kept["Backward Test Success"]) == ("pass", "pass")
    # linear(bias) on a split of a wider tensor: PyTorch rounded the product to bf16, then added the
    # bias (44x its budget in the Mamba dump where product and bias cancel); the rebuilt input is
    # contiguous and cpu mode's linear rounds once. Both are correct kernels.
    linear = rows["Functional.linear.0"]
    assert linear["Forward Test Success"] == "pass", linear["Message"]
    unfused = "against the product rounded to bf16 before the bias is added, as a correct kernel may compute it"
    details = {row["API Name"]: row for row in read_csv(pytester.path / "out", "details")}
    assert (unfused in details["Functional.linear.0.forward.output.0"]["Message"]) == (device == "recorded")
    assert "error" not in {row["Status"] for row in details.values()}
    result.stdout.fnmatch_lines(["*scaled_dot_product_attention with dropout_p 0.1 is random*"])
    assert result.ret == 0
