"""npu_quant_matmul's scale as the op uses it (issue 30).

op-plugin's QuantMatmul packs a float32 scale with npu_trans_quant_param when there is no
pertoken_scale and the output is int8 or float16; an int64 scale is that packing done by the
caller. npu_trans_quant_param's page: the float32's bits in an int64, round_mode 0 keeping its
high 19 bits (sign, exponent, 10 mantissa bits); its example's outputs have the low 13 bits zero.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from dumpwriter import DumpWriter

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks.npu_ops import lookup

# npu_trans_quant_param's example (round_mode 1, with an offset): the low 32 bits are a float32 with
# its low 13 bits zero; bit 46 and a 9-bit offset in bits 37-45 above them.
PAGE_EXAMPLE = [70507248869376, 70509369614336, 70507209793536, 140463653937152]


def packed(values: list[float]) -> torch.Tensor:
    """float32 scales packed as npu_trans_quant_param's round_mode 0 (no offset): high 19 bits."""
    return torch.tensor([struct.unpack("<I", struct.pack("<f", v))[0] & 0xFFFFE000 for v in values],
                        dtype=torch.int64)  # fmt: skip


def high_19(values: list[float]) -> np.ndarray:
    return np.array([struct.unpack("<f", struct.pack("<I", int(b)))[0] for b in packed(values)], dtype=np.float64)


def operands(m=3, k=16, n=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x1 = torch.randint(-128, 128, (m, k), generator=generator, dtype=torch.int8)
    x2 = torch.randint(-128, 128, (k, n), generator=generator, dtype=torch.int8)
    return x1, x2, x1.numpy().astype(np.int64) @ x2.numpy().astype(np.int64)


def test_the_page_examples_low_32_bits_are_float32_with_19_significant_bits():
    for value in PAGE_EXAMPLE:
        assert value & 0x1FFF == 0 and (value >> 46) & 1 == 1


def test_an_int64_scale_is_the_float32_in_its_low_bits():
    x1, x2, acc = operands()
    scales = [1.2345678e-3, -7.654321e-4, 3.3e-3, 9.99e-4]
    out = lookup("npu_quant_matmul")(x1, x2, packed(scales), output_dtype=torch.float16)
    np.testing.assert_array_equal(out.numpy(), acc * high_19(scales))


@pytest.mark.parametrize("output_dtype", [torch.float16, None])
def test_a_float32_scale_without_pertoken_scale_keeps_its_high_19_bits(output_dtype):
    # 1 + 2^-12: its mantissa bits below the 10th are cut, so the op scales by exactly 1.
    x1, x2, acc = operands(seed=1)
    scale = torch.full((4,), 1 + 2.0**-12, dtype=torch.float64)
    out = lookup("npu_quant_matmul")(x1, x2, scale, output_dtype=output_dtype)
    expected = acc if output_dtype else np.clip(acc, -128, 127)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_with_pertoken_scale_or_a_bf16_output_the_scale_is_used_whole():
    x1, x2, acc = operands(seed=2)
    scale = torch.full((4,), 1e-3 * (1 + 2.0**-12), dtype=torch.float64)
    out = lookup("npu_quant_matmul")(x1, x2, scale, output_dtype=torch.bfloat16)
    np.testing.assert_allclose(out.numpy(), acc * scale.numpy(), rtol=1e-15)
    pertoken = torch.ones(3, dtype=torch.float64)
    out = lookup("npu_quant_matmul")(x1, x2, scale, pertoken_scale=pertoken, output_dtype=torch.float16)
    np.testing.assert_allclose(out.numpy(), acc * scale.numpy(), rtol=1e-15)


def test_int64_and_float32_scales_for_a_float16_output_are_judged_end_to_end(pytester):
    """msprobe-format entries (the scale an int64, or a float32 the op packs itself) with float16
    outputs as a correct kernel gives them pass under dtype; one whose scale goes to the wrong
    channels is an error. Both were SKIPped. The fp32 scales beside a float16 or bfloat16 output
    (.2, and .3's W8A8 call with pertoken_scale) are the op's signature, not autocast: the bench
    keeps them whole (autocast's fp16 scale made .2 a warning at 1.5 ULP)."""
    writer = DumpWriter(pytester.path / "quant")
    x1, x2, acc = operands(m=4, k=32, n=6, seed=3)
    scales = [1.2345678e-3, 7.654321e-4, 3.3e-3, 9.99e-4, 2.5e-3, 1.7e-3]
    right, wrong = acc * high_19(scales), acc * high_19(scales)[::-1]
    entries = {"NPU.npu_quant_matmul.0": (packed(scales), right), "NPU.npu_quant_matmul.1": (packed(scales), wrong),
               "NPU.npu_quant_matmul.2": (torch.tensor(scales, dtype=torch.float32), right)}  # fmt: skip
    for name, (scale, out) in entries.items():
        result = torch.from_numpy(out).to(torch.float16)
        writer.record(name, lambda *a, result=result, **kw: result, [x1, x2, scale], {"output_dtype": torch.float16})
    pertoken = torch.tensor([0.5, 1.25, 0.75, 2.0], dtype=torch.float32)
    w8a8 = torch.from_numpy(acc * np.array(scales, dtype=np.float32)[None, :] * pertoken.numpy()[:, None])
    writer.record("NPU.npu_quant_matmul.3", lambda *a, **kw: w8a8.to(torch.bfloat16),
                  [x1, x2, torch.tensor(scales, dtype=torch.float32)],
                  {"pertoken_scale": pertoken, "output_dtype": torch.bfloat16})  # fmt: skip
    writer.write()
    result = run_msprobe(pytester, pytester.path / "quant", "--msprobe-standard", "dtype", device="recorded")
    outcome = {row["API Name"]: row["Forward Test Success"] for row in read_csv(pytester.path / "out", "result")}
    assert outcome == {"NPU.npu_quant_matmul.0": "pass", "NPU.npu_quant_matmul.1": "error",
                       "NPU.npu_quant_matmul.2": "pass", "NPU.npu_quant_matmul.3": "pass"}  # fmt: skip
    result.assert_outcomes(passed=3, failed=1)
    assert not [row for row in read_csv(pytester.path / "out", "details") if "autocast" in row["Message"]]
