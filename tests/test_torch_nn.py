"""torch.nn's own blocks in clean real dumps (tests/data/torch_nn_<dtype>, make/torch_nn.py): the
dtype standard gives no error on them in either mode (issue 27). nn.MultiheadAttention is one entry
(F.multi_head_attention_forward) made of in-projections, attention and an out-projection: its budget
composes theirs, and in bf16 counts their outputs rounded to bf16 (frameworks/magnitudes.py); group_norm
has layer_norm's magnitude model over its groups."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks.magnitudes import formula, structural
from pytest_msprobe.judging.compare import ExtraRuns
from pytest_msprobe.judging.standards.budget import FORMATS, Constants, read


@pytest.mark.slow
@pytest.mark.parametrize("device", ["recorded", "cpu"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_multihead_attention_and_group_norm_pass_the_dtype_standard(pytester, copy_dump, dtype, device):
    result = run_msprobe(pytester, copy_dump(f"torch_nn_{dtype}"), "--msprobe-standard", "dtype", device=device)
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    for api in ("Functional.multi_head_attention_forward.0", "Functional.group_norm.0"):
        assert rows[api]["Forward Test Success"] == "pass", rows[api]["Message"]
    details = read_csv(pytester.path / "out", "details")
    assert [row["API Name"] for row in details if row["Status"] == "error"] == []
    judged = {row["API Name"] for row in details if row["Status"] == "pass"}
    assert "Functional.multi_head_attention_forward.0.forward.output.0" in judged
    assert "Functional.group_norm.0.backward.output.0" in judged
    assert result.ret == 0


def test_the_multihead_attention_magnitudes_bound_its_float64_output_and_gradients():
    torch.manual_seed(0)
    length, batch, embed, heads = 6, 2, 8, 2
    q, k, v = (torch.randn(length, batch, embed) for _ in range(3))
    w, b, wo, bo = torch.randn(3 * embed, embed), torch.randn(3 * embed), torch.randn(embed, embed), torch.randn(embed)
    mask = torch.triu(torch.ones(length, length, dtype=torch.bool), 1)
    args = [q, k, v, embed, heads, w, b, None, None, False, 0.0, wo, bo]
    kwargs = {"training": True, "need_weights": False, "attn_mask": mask}
    leaves = [t.double().requires_grad_() for t in (q, k, v, w, b, wo, bo)]
    out, _ = F.multi_head_attention_forward(
        *leaves[:3], embed, heads, leaves[3], leaves[4], None, None, False, 0.0, leaves[5], leaves[6], **kwargs
    )
    (forward,) = formula("Functional.multi_head_attention_forward", args, kwargs, None)
    assert bool((forward >= out.detach().abs() * (1 - 1e-12)).all())
    g = torch.randn(length, batch, embed)
    out.backward(g.double())
    backward = formula("Functional.multi_head_attention_forward", args, kwargs, [g, None])
    assert len(backward) == len(leaves)  # one per floating input: the boolean mask takes none
    for magnitude, leaf in zip(backward, leaves):
        assert magnitude.shape == leaf.shape and bool((magnitude >= leaf.grad.abs() * (1 - 1e-9)).all())


def test_under_autocast_its_intermediates_are_rounded_in_the_autocast_dtype():
    """nn.MultiheadAttention under CPU autocast takes fp32 inputs and computes in bf16: its projections
    and attention output are rounded to bf16 as the same call's on bf16 inputs are, and batch_first
    hands it a transposed query, on which PyTorch's linear rounds the product to bf16 before adding the
    bias. Its structural term is the bf16 call's (it took fp32's unit roundoff: a zoo dump written on an
    AMX machine was 1.11x its budget in recorded mode), and the autocast kernel is within its budget."""
    torch.manual_seed(0)
    length, batch, embed, heads = 16, 2, 48, 4
    bf16 = lambda t: t.bfloat16().float()  # noqa: E731 - values autocast's casts leave as they are
    x = bf16(torch.randn(batch, length, embed)).transpose(0, 1)  # batch_first's query, key and value
    w, b = bf16(torch.randn(3 * embed, embed) / 7), bf16(torch.randn(3 * embed))
    wo, bo = bf16(torch.randn(embed, embed) / 7), bf16(torch.randn(embed))
    mask = torch.triu(torch.ones(length, length, dtype=torch.bool), 1)
    kwargs = {"training": True, "need_weights": False, "attn_mask": mask}
    args = [x, x, x, embed, heads, w, b, None, None, False, 0.0, wo, bo]
    api = "Functional.multi_head_attention_forward"
    (under,) = structural(api, args, kwargs, None, torch.bfloat16)
    (low,) = structural(api, [a.bfloat16() if isinstance(a, torch.Tensor) else a for a in args], kwargs, None)
    assert torch.equal(under, low)
    (unaware,) = structural(api, args, kwargs, None)
    assert torch.equal(under, unaware * 2.0**16)  # bf16's unit roundoff over fp32's

    with torch.autocast("cpu", dtype=torch.bfloat16):
        tested = F.multi_head_attention_forward(*args, **kwargs)[0]
    wide = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
    bench = F.multi_head_attention_forward(*wide, **kwargs)[0]
    (magnitude,) = formula(api, args, kwargs, None)
    extra = ExtraRuns(magnitude=lambda: magnitude.numpy(), structural=lambda: under.numpy())
    reading = read(tested.double().numpy(), bench.detach().numpy(), FORMATS["bfloat16"], extra)
    assert reading.status(Constants().band) == "pass", reading
