"""The inference attentions' pse_shift and antiquant arguments (issue 30), against torch's SDPA.

pse_shift is added to the scaled scores (softmax(scale Q K^T + pse_shift) V, the op pages'
formula with the position bias); int8 key and value with antiquant_scale/offset are
(kv + offset) * scale, [0] the key's and [1] the value's, per tensor or per channel. What is not
modelled is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from dumpwriter import DumpWriter

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks.npu_ops import ReferenceUnsupported, lookup


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def in_layout(x, layout):
    """A [B, N, S, D] tensor in BSH / BSND / BNSD."""
    return {"BNSD": x, "BSND": x.transpose(1, 2), "BSH": x.transpose(1, 2).flatten(2)}[layout]


def sdpa(q, k, v, scale, bias):
    """torch's SDPA (math) with an additive float mask: softmax(scale q k^T + bias) v."""
    k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)


def assert_close(actual, expected):
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("layout", ["BSH", "BNSD"])
def test_prompt_flash_attention_adds_pse_shift_to_the_scaled_scores(layout):
    # pse_shift [1, N, S1, KV_S] padded past the keys (KV_S 8 for 6 keys: the padding is not read)
    q, k, v = rand(2, 2, 4, 8, seed=1), rand(2, 2, 6, 8, seed=2), rand(2, 2, 6, 8, seed=3)
    pse = rand(1, 2, 4, 8, seed=4) * 3
    pse[..., 6:] = 1e6
    out = lookup("npu_prompt_flash_attention")(
        in_layout(q, layout),
        in_layout(k, layout),
        in_layout(v, layout),
        pse_shift=pse,
        num_heads=2,
        scale_value=0.3,
        input_layout=layout,
        next_tokens=100,
    )
    assert_close(out, in_layout(sdpa(q, k, v, 0.3, pse[..., :6]), layout))


def test_incre_flash_attention_pse_shift_per_batch_and_int8_kv_dequantised_per_channel():
    # Decode: query S 1, pse_shift [B, N, 1, S2]; int8 key and value, antiquant per channel (2, H) in BSH.
    batch, heads, dim, s2 = 2, 2, 4, 5
    q = rand(batch, heads, 1, dim, seed=5)
    generator = torch.Generator().manual_seed(6)
    k8, v8 = (torch.randint(-128, 128, (batch, heads, s2, dim), generator=generator, dtype=torch.int8) for _ in "kv")
    scale, offset = rand(2, heads * dim, seed=7).abs() / 50, rand(2, heads * dim, seed=8)
    pse = rand(batch, heads, 1, s2, seed=9)
    out = lookup("npu_incre_flash_attention")(
        in_layout(q, "BSH"),
        in_layout(k8, "BSH"),
        in_layout(v8, "BSH"),
        pse_shift=pse,
        antiquant_scale=scale,
        antiquant_offset=offset,
        num_heads=heads,
        scale_value=0.5,
        input_layout="BSH",
        actual_seq_lengths=[5, 3],
    )
    per_head = lambda t, i: t[i].reshape(heads, 1, dim)  # noqa: E731  (H = N * D)
    k = (k8.double() + per_head(offset, 0)) * per_head(scale, 0)
    v = (v8.double() + per_head(offset, 1)) * per_head(scale, 1)
    for b, length in enumerate([5, 3]):
        expected = sdpa(q[b : b + 1], k[b : b + 1, :, :length], v[b : b + 1, :, :length], 0.5, pse[b, :, :, :length])
        assert_close(out[b : b + 1], in_layout(expected, "BSH"))


def test_fused_infer_attention_score_pse_shift_and_per_tensor_antiquant_without_offset():
    # The decode branch (query S 1, BNSD): antiquant per tensor (shape (2,)), symmetric (no offset).
    q = rand(1, 2, 1, 4, seed=10)
    generator = torch.Generator().manual_seed(11)
    k8, v8 = (torch.randint(-128, 128, (1, 2, 6, 4), generator=generator, dtype=torch.int8) for _ in "kv")
    scale, pse = torch.tensor([0.02, 0.03], dtype=torch.float64), rand(1, 2, 1, 6, seed=12)
    out, _ = lookup("npu_fused_infer_attention_score")(
        q, k8, v8, pse_shift=pse, antiquant_scale=scale, num_heads=2, scale=0.4, input_layout="BNSD"
    )
    assert_close(out, sdpa(q, k8.double() * 0.02, v8.double() * 0.03, 0.4, pse))
    # The prompt branch: pse_shift [B, N, S1, S2] beside a mask.
    q, k, v = rand(2, 2, 3, 4, seed=13), rand(2, 2, 5, 4, seed=14), rand(2, 2, 5, 4, seed=15)
    pse = rand(2, 2, 3, 5, seed=16)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[:, 4] = True
    out, _ = lookup("npu_fused_infer_attention_score")(
        q, k, v, pse_shift=pse, atten_mask=mask, num_heads=2, scale=0.4, input_layout="BNSD"
    )
    assert_close(out, sdpa(q, k, v, 0.4, pse.masked_fill(mask, float("-inf"))))


def test_the_padded_bnsd_seam_carries_pse_shift():
    # inference_attention_in_bnsd (the dtype standard's model of them): SDPA of its call gives the reference's output.
    from pytest_msprobe.frameworks.npu_llm_reference import inference_attention_in_bnsd

    q, k, v = rand(2, 2, 4, 8, seed=17), rand(2, 2, 6, 8, seed=18), rand(2, 2, 6, 8, seed=19)
    kwargs = {
        "pse_shift": rand(2, 2, 4, 6, seed=20),
        "num_heads": 2,
        "scale_value": 0.3,
        "input_layout": "BNSD",
        "actual_seq_lengths_kv": [6, 4],
    }
    call = inference_attention_in_bnsd("npu_prompt_flash_attention", q, k, v, **kwargs)
    assert_close(
        call.output(F.scaled_dot_product_attention(**call.as_sdpa())),
        lookup("npu_prompt_flash_attention")(q, k, v, **kwargs),
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"antiquant_scale": torch.ones(2, 1, 2, 4), "antiquant_mode": 1}, "antiquant_mode=1"),
        ({"key_antiquant_scale": torch.ones(2)}, "key_antiquant_scale"),
        ({"kv_padding_size": torch.zeros(1, dtype=torch.int64)}, "kv_padding_size"),
        ({"query_padding_size": torch.zeros(1, dtype=torch.int64)}, "query_padding_size"),
        ({"inner_precise": 4}, "inner_precise=4"),
        ({"sparse_mode": 7}, "sparse_mode=7"),
    ],
)
def test_fused_infer_attention_score_refuses_the_rest_by_name(kwargs, message):
    q = rand(1, 2, 1, 4, seed=21)
    kv = torch.ones(1, 2, 3, 4, dtype=torch.int8) if "antiquant_scale" in kwargs else rand(1, 2, 3, 4, seed=22)
    call = {"num_heads": 2, "input_layout": "BNSD", **kwargs}
    if "sparse_mode" in kwargs:
        q = rand(1, 2, 3, 4, seed=23)
    with pytest.raises(ReferenceUnsupported, match=f"npu_fused_infer_attention_score: {message}"):
        lookup("npu_fused_infer_attention_score")(q, kv, kv, **call)


def test_pse_shift_with_tnd_is_refused_by_name():
    q = rand(4, 2, 4, seed=24)
    with pytest.raises(ReferenceUnsupported, match="npu_fused_infer_attention_score: pse_shift with TND"):
        lookup("npu_fused_infer_attention_score")(
            q,
            q,
            q,
            pse_shift=torch.zeros(1, 2, 4, 4),
            num_heads=2,
            input_layout="TND",
            actual_seq_lengths=[4],
            actual_seq_lengths_kv=[4],
        )


def _device(q, k, v, scale, bias):
    """A correct bf16 kernel: the attention in float32 from the bf16 inputs, rounded once to bf16."""
    return sdpa(q.float(), k.float(), v.float(), scale, bias.float()).to(torch.bfloat16)


def _attention_dump(folder) -> None:
    """msprobe-format entries of the inference attentions with pse_shift and int8 antiquant, bf16: .0
    as a correct kernel computes them, .1 by a kernel that drops pse_shift / antiquant_offset."""
    writer = DumpWriter(folder)
    bf16 = lambda *shape, seed: rand(*shape, seed=seed).to(torch.bfloat16)  # noqa: E731
    q, k, v, pse = (
        bf16(1, 2, 4, 8, seed=30),
        bf16(1, 2, 6, 8, seed=31),
        bf16(1, 2, 6, 8, seed=32),
        bf16(1, 2, 4, 6, seed=33),
    )
    for i, bias in enumerate((pse, torch.zeros_like(pse))):
        writer.record(f"NPU.npu_prompt_flash_attention.{i}", lambda *a, bias=bias, **kw: _device(q, k, v, 0.35, bias),
                      [q, k, v], {"pse_shift": pse, "num_heads": 2, "scale_value": 0.35, "input_layout": "BNSD",
                                  "next_tokens": 65535})  # fmt: skip
    decode_q = bf16(1, 2, 1, 8, seed=34)
    generator = torch.Generator().manual_seed(35)
    k8, v8 = (torch.randint(-128, 128, (1, 2, 6, 8), generator=generator, dtype=torch.int8) for _ in "kv")
    scale, offset = (rand(2, 2, 1, 8, seed=36).abs() / 40).to(torch.bfloat16), bf16(2, 2, 1, 8, seed=37) * 4
    for i, used in enumerate((offset, torch.zeros_like(offset))):
        key, value = ((t.double() + used[j].double()) * scale[j].double() for j, t in enumerate((k8, v8)))
        writer.record(f"NPU.npu_incre_flash_attention.{i}",
                      lambda *a, key=key, value=value, **kw: _device(decode_q, key, value, 0.35, torch.zeros(1, 1)),
                      [decode_q, k8, v8], {"antiquant_scale": scale, "antiquant_offset": offset, "num_heads": 2,
                                           "scale_value": 0.35, "input_layout": "BNSD"})  # fmt: skip
    writer.write()


def test_pse_shift_and_antiquant_entries_are_judged_and_a_kernel_dropping_them_is_an_error(pytester):
    _attention_dump(pytester.path / "attention")
    result = run_msprobe(pytester, pytester.path / "attention", "--msprobe-standard", "dtype", device="recorded")
    result.assert_outcomes(passed=2, failed=2)
    outcome = {row["API Name"]: row["Forward Test Success"] for row in read_csv(pytester.path / "out", "result")}
    assert outcome == {
        "NPU.npu_prompt_flash_attention.0": "pass",
        "NPU.npu_prompt_flash_attention.1": "error",
        "NPU.npu_incre_flash_attention.0": "pass",
        "NPU.npu_incre_flash_attention.1": "error",
    }
