"""The 8-bit formats (judging/standards/formats8.py) and the exact rules (one_rounding.py).

Each float8 format against torch's own dtype (its 256 encodings, its casts); HiFloat8 against a
decoder of its encodings written from the paper's definition; the dtype standard's verdicts on
8-bit outputs, casts into them and quantisations' integer outputs; and a real dump written by
msprobe 26.2.0 (tests/data/fp8_casts), clean and with deficient casts (tests/deficits_fp8.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from deficits_fp8 import FAULTS, away_from_zero, flushed, not_saturating, truncated, write_faulty
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DUMPS, read_csv, run_msprobe
from pytest_msprobe.frameworks.torch_engine import CODEC
from pytest_msprobe.inputs import tensor_files
from pytest_msprobe.inputs.rebuild import InputError, Rebuilder
from pytest_msprobe.judging.compare import Comparison, compare
from pytest_msprobe.judging.standards.basic import BasicStandard
from pytest_msprobe.judging.standards.dtype import DtypeStandard
from pytest_msprobe.judging.standards.formats8 import NAN, SATURATE, Float8, HiFloat8, format_of
from pytest_msprobe.judging.standards.tolerances import Tolerances
from pytest_msprobe.results import ERROR, PASS

FLOAT8 = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]


def fmt8(name: str) -> Float8:
    fmt = format_of(f"torch.{name}")
    assert isinstance(fmt, Float8)
    return fmt


def encodings(dtype: torch.dtype) -> np.ndarray:
    """The value of each of the 256 encodings, as torch decodes them."""
    return torch.arange(256, dtype=torch.uint8).view(dtype).double().numpy()


def verdict(tested, bench, dtype: str, name: str = "Torch.matmul.0.forward.output.0", standard=None):
    c = Comparison(np.asarray(tested), np.asarray(bench), dtype, name)
    return compare(c, standard or DtypeStandard())[1]


# -- the float8 formats against torch's dtypes ----------------------------------


@pytest.mark.parametrize("name", FLOAT8)
def test_every_finite_value_and_the_range_are_torchs(name):
    dtype, fmt = getattr(torch, name), fmt8(name)
    decoded = encodings(dtype)
    assert np.array_equal(fmt.values(), np.unique(decoded[np.isfinite(decoded)]))
    info = torch.finfo(dtype)
    assert fmt.largest == info.max and math.ldexp(1.0, fmt.min_exponent) == info.smallest_normal
    assert fmt.infinity == bool(np.isinf(decoded).any())
    assert fmt.negative_zero == bool(np.signbit(decoded[decoded == 0]).any())


@pytest.mark.parametrize("name", FLOAT8)
def test_the_ulp_is_the_gap_to_the_next_value_normal_subnormal_and_largest(name):
    fmt = fmt8(name)
    values = fmt.values()
    positive = values[values >= 0]
    assert np.array_equal(fmt.spacing(positive[:-1]), np.diff(positive))
    # The largest finite value's ULP is its binade's; the subnormals' is the smallest normal's.
    assert fmt.spacing(np.array([fmt.largest]))[0] == math.ldexp(1.0, fmt.max_exponent - fmt.mantissa_bits)
    tiny = math.ldexp(1.0, fmt.min_exponent - 1)
    assert fmt.spacing(np.array([tiny, 0.0]))[0] == math.ldexp(1.0, fmt.min_exponent - fmt.mantissa_bits)


@pytest.mark.parametrize("name", FLOAT8)
def test_cast_is_torchs_cast_ties_overflow_and_nan_included(name):
    dtype, fmt = getattr(torch, name), fmt8(name)
    values = fmt.values()
    rng = np.random.default_rng(8)
    x = np.concatenate(
        [
            rng.standard_normal(50_000) * 10.0 ** rng.integers(-8, 6, 50_000),
            (values[1:] + values[:-1]) / 2,  # every tie
            values,
            [np.inf, -np.inf, np.nan, 1e9, -1e9, fmt.largest * 1.04, -fmt.largest * 1.1],
        ]
    ).astype(np.float32)
    theirs = torch.from_numpy(x).to(dtype).double().numpy()
    ours = fmt.cast(x.astype(np.float64))
    same = (theirs == ours) | (np.isnan(theirs) & np.isnan(ours))
    assert same.all(), (x[~same][:5], theirs[~same][:5], ours[~same][:5])


def test_e4m3fn_saturates_and_has_nan_at_s1111111_and_the_fnuz_nan_is_0x80():
    e4m3fn = fmt8("float8_e4m3fn")
    assert e4m3fn.cast(np.array([464.0, 500.0, np.inf, -np.inf])).tolist() == [448.0, 448.0, 448.0, -448.0]
    assert np.isnan(e4m3fn.rounded(np.array([500.0]))).all()  # the format's own overflow: no inf, NaN
    assert e4m3fn.cast(np.array([500.0]), SATURATE)[0] == 448.0 and np.isnan(e4m3fn.cast(np.array([500.0]), NAN)).all()
    decoded = encodings(torch.float8_e4m3fn)
    assert np.isnan(decoded[[0x7F, 0xFF]]).all() and np.isfinite(np.delete(decoded, [0x7F, 0xFF])).all()
    assert decoded[0x7E] == 448.0
    e5m2 = fmt8("float8_e5m2")
    assert e5m2.cast(np.array([61439.0, 61440.0])).tolist() == [57344.0, math.inf]  # the tie goes to even: up
    for name in ("float8_e4m3fnuz", "float8_e5m2fnuz"):
        decoded = encodings(getattr(torch, name))
        assert np.isnan(decoded).sum() == 1 and np.isnan(decoded[0x80])
        cast = fmt8(name).cast(np.array([-0.0, -1e-30, 1e9]))
        assert not np.signbit(cast[:2]).any() and np.isnan(cast[2])  # no negative zero; overflow NaN


# -- HiFloat8 --------------------------------------------------------------------


def hif8_decoded(code: int) -> float:
    """One HiFloat8 encoding's value, from the definition (arXiv:2409.16626, Table 1): sign, dot
    code (0000 denormal, 0001 D=0, 001 D=1, 01 D=2, 10 D=3, 11 D=4), a D-bit sign-magnitude
    exponent with an implicit leading 1, the remaining bits mantissa."""
    sign = -1.0 if code & 0x80 else 1.0
    bits = f"{code & 0x7F:07b}"
    if code == 0x80:
        return math.nan
    if code & 0x7F == 0x6F:
        return sign * math.inf
    codes = (("0000", -1), ("0001", 0), ("001", 1), ("01", 2), ("10", 3), ("11", 4))
    dot, width = next((dot, width) for dot, width in codes if bits.startswith(dot))
    rest = bits[len(dot) :]
    if width == -1:
        m = int(rest, 2)
        return 0.0 if m == 0 else sign * math.ldexp(1.0, m - 23)
    exponent = 0
    if width:
        magnitude = (1 << (width - 1)) + int(rest[1:width] or "0", 2)
        exponent = -magnitude if rest[0] == "1" else magnitude
    mantissa = rest[width:]
    return sign * math.ldexp(1.0 + int(mantissa, 2) / (1 << len(mantissa)), exponent)


def test_hifloat8_values_are_its_encodings_and_its_ulp_tapers():
    hif8 = format_of("torch_npu.HiFloat8Tensor")
    assert isinstance(hif8, HiFloat8) and format_of("HiFloat8") is hif8  # msprobe's two names
    decoded = np.array([hif8_decoded(code) for code in range(256)])
    assert np.array_equal(hif8.values(), np.unique(decoded[np.isfinite(decoded)]))
    assert hif8.largest == 2.0**15 and np.isinf(decoded[[0x6F, 0xEF]]).all()
    # ULP: 3 mantissa bits for |e| <= 3, 2 up to 7, 1 up to 15; a power of two a binade below 2^-15.
    at = np.array([1.0, 8.0, 16.0, 128.0, 256.0, 2.0**15, 2.0**-3, 2.0**-4, 2.0**-8, 2.0**-15, 2.0**-16, 2.0**-22, 0])
    expected = [2**-3, 1, 4, 32, 128, 2**14, 2**-6, 2**-6, 2**-9, 2**-16, 2**-16, 2**-22, 2**-22]
    assert hif8.spacing(at).tolist() == expected
    positive = hif8.values()[hif8.values() >= 0]
    assert np.array_equal(hif8.spacing(positive[:-1]), np.diff(positive))
    ties = (positive[1:] + positive[:-1]) / 2
    assert np.array_equal(hif8.rounded(ties), positive[1:])  # ties away from zero
    assert hif8.rounded(np.array([40959.0, 40960.0]))[0] == 2.0**15 and np.isinf(hif8.rounded(np.array([40960.0])))


def test_a_hifloat8_output_given_as_float_data_is_judged_by_its_ulp():
    hif8 = format_of("torch_npu.HiFloat8Tensor")
    bench = np.random.default_rng(3).standard_normal(256) * 30
    rounded = hif8.rounded(bench)
    result = verdict(rounded, bench, "torch_npu.HiFloat8Tensor")
    assert result.status == PASS and "within budget (hif8)" in result.message
    off = rounded + 2 * hif8.spacing(bench)  # two ULP off everywhere
    result = verdict(off, bench, "torch_npu.HiFloat8Tensor")
    assert result.status == ERROR and result.message.startswith("hif8 budget: element ")


# -- the dtype standard on 8-bit outputs -----------------------------------------


@pytest.mark.parametrize("name", FLOAT8)
def test_a_correctly_rounded_float8_output_passes_and_two_ulp_off_is_an_error(name):
    fmt = fmt8(name)
    bench = np.random.default_rng(1).standard_normal((8, 32)) * fmt.largest / 64
    rounded = fmt.cast(bench)
    result = verdict(rounded, bench, f"torch.{name}")
    assert result.status == PASS and f"within budget ({fmt.name})" in result.message
    result = verdict(rounded + 2 * fmt.spacing(bench), bench, f"torch.{name}")
    assert result.status == ERROR and result.message.startswith(f"{fmt.name} budget: element ")
    # The basic standard fails the rounding alone (MaxAbsErr >= 1e-4) and says the format holds it.
    floor = compare(Comparison(rounded, bench, f"torch.{name}"), BasicStandard())[1]
    assert floor.status == ERROR and floor.floor == f"torch.{name}"


def test_a_cast_into_float8_must_equal_the_bench_cast_where_the_budget_would_pass_one_ulp():
    x = torch.randn(512, generator=torch.Generator().manual_seed(2)) * 3
    bench = fmt8("float8_e4m3fn").cast(x.double().numpy())
    cut = truncated(x, torch.float8_e4m3fn).double().numpy()
    assert np.all(np.abs(cut) <= np.abs(x.double().numpy())) and not np.array_equal(cut, bench)
    cast = "Tensor.to.0.forward.output.0"
    assert verdict(bench, bench, "torch.float8_e4m3fn", cast).status == PASS
    result = verdict(cut, bench, "torch.float8_e4m3fn", cast)
    assert result.status == ERROR
    assert result.message.startswith(
        "a cast into e4m3fn rounds once, to nearest (ties to even), beyond +-448 saturated"
    )
    assert "every one toward zero (truncated?)" in result.message and "1 ULP of e4m3fn" in result.message
    # The same values from an API that is no cast: within the budget's 1.5 ULP, which is why casts have their rule.
    assert verdict(cut, bench, "torch.float8_e4m3fn", "Torch.mul.0.forward.output.0").status == PASS


# -- quantisation ------------------------------------------------------------------


def test_a_quantisations_integer_output_is_within_one_unit_and_its_scale_is_a_float():
    rng = np.random.default_rng(4)
    bench = rng.integers(-128, 128, (16, 32)).astype(np.int8)
    one_off = bench.copy()
    one_off[0, :5] += 1
    name = "NPU.npu_dynamic_quant.0.forward.output.0"
    result = verdict(one_off, bench, "torch.int8", name)
    assert result.status == PASS
    assert result.message == (
        "quantisation rule (an integer output of npu_dynamic_quant): |error| <= 1 unit: max |error| 1 "
        "(5 of 512 elements 1 unit off)"
    )
    two_off = bench.copy()
    two_off[3, 4] -= 2
    result = verdict(two_off, bench, "torch.int8", name)
    assert result.status == ERROR and "max |error| 2 at [3, 4]" in result.message
    assert "1 of 512 elements more than 1 off" in result.message
    # Elsewhere integers are equal or wrong: another API's, or the basic standard's.
    assert verdict(one_off, bench, "torch.int8", "Torch.argmax.0.forward.output.0").status == ERROR
    assert verdict(one_off, bench, "torch.int8", name, BasicStandard()).status == ERROR
    for other in ("NPU.npu_quant_lightning_indexer", "Torch.quantile", "Tensor.nanquantile"):
        assert verdict(one_off, bench, "torch.int8", f"{other}.0.forward.output.0").status == ERROR
    # A position or a count of a quantising call (int32, int64) is no quantised value: equal.
    rows = bench.astype(np.int32)
    result = verdict(rows + 1, rows, "torch.int32", "NPU.npu_moe_init_routing_quant.0.forward.output.1")
    assert result.status == ERROR and "integer/bool outputs must be equal" in result.message
    # The scale output of the same call is a float, judged by its budget.
    scale = rng.random(16) + 0.5
    result = verdict(scale.astype(np.float32), scale, "torch.float32", "NPU.npu_dynamic_quant.0.forward.output.1")
    assert result.status == PASS and result.message.startswith("within budget (fp32)")


# -- the dump reader ---------------------------------------------------------------


@pytest.mark.parametrize("name", FLOAT8)
def test_a_float8_tensor_file_declares_its_dtype_and_shape(tmp_path, name):
    path = tmp_path / "t.pt"
    torch.save(torch.zeros(3, 5).to(getattr(torch, name)), path)  # torch 2.x: _rebuild_tensor_v3, untyped bytes
    held = tensor_files.declared(path)
    assert (held.holds, held.dtype, held.shape, held.elements, held.fault) == ("tensor", name, [3, 5], 15, "")


# -- a real dump -------------------------------------------------------------------


@pytest.mark.parametrize("device", ["recorded", "cpu"])
def test_the_fp8_dump_passes_under_dtype_its_casts_by_their_rule(pytester, copy_dump, device):
    dump = copy_dump("fp8_casts")
    result = run_msprobe(pytester, dump, "--msprobe-device", device, "--msprobe-standard", "dtype")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == 21 and outcomes.get("failed", 0) == 0 and outcomes.get("skipped", 0) == 0
    rows = read_csv(pytester.path / "out", "details")
    casts = [row for row in rows if row["Tested Dtype"].startswith("torch.float8")]
    assert len(casts) == 6 and {row["Tested Dtype"] for row in casts} == {"torch.float8_e4m3fn", "torch.float8_e5m2"}
    assert all(
        row["Message"].startswith("a cast into e") and "every element equal to it" in row["Message"] for row in casts
    )


def test_deficient_float8_casts_in_a_real_dump_are_errors_and_the_rest_pass(pytester):
    dump = write_faulty(DUMPS["fp8_casts"], pytester.path / "faulty")
    result = run_msprobe(pytester, dump, "--msprobe-device", "recorded", "--msprobe-standard", "dtype")
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "result")}
    failed = {name for name, row in rows.items() if row["Forward Test Success"] != "pass"}
    assert failed == {entry.rsplit(".", 1)[0] for entry in FAULTS}
    assert all(rows[name]["Forward Test Success"] == "error" for name in failed)
    assert result.parseoutcomes()["passed"] == 21 - len(FAULTS)
    details = {row["API Name"]: row["Message"] for row in read_csv(pytester.path / "out", "details")}
    assert "every one toward zero (truncated?)" in details["Tensor.to.0.forward.output.0"]
    assert details["Tensor.to.1.forward.output.0"].startswith("NaN at 27 position(s) where the other side has none")
    assert "every one away from zero" in details["Tensor.to.3.forward.output.0"]


def test_the_faults_are_what_their_names_say():
    x = torch.tensor([0.3, -0.3, 1.0, 2.9, -2.9, 500.0, 0.004])
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    assert truncated(x, e4).float().tolist()[:5] == [0.28125, -0.28125, 1.0, 2.75, -2.75]
    assert away_from_zero(x[:5], e5).float().tolist() == [0.3125, -0.3125, 1.0, 3.0, -3.0]
    assert math.isnan(not_saturating(x, e4).float()[5]) and x.to(e4).float()[5] == 448
    assert flushed(x, e4).float()[6] == 0 and x.to(e4).float()[6] > 0


def test_the_dump_is_msprobes():
    """tests/data/fp8_casts as msprobe 26.2.0 wrote it: float8 specs without statistics."""
    data = json.loads((DUMPS["fp8_casts"] / "dump.json").read_text(encoding="utf-8"))["data"]
    spec = data["Tensor.float.0.forward"]["input_args"][0]
    assert spec["dtype"] == "torch.float8_e4m3fn" and spec["Max"] is None


@pytest.mark.parametrize("dtype", ["torch_npu.HiFloat8Tensor", "HiFloat8"])
def test_a_hifloat8_tensor_that_cannot_be_built_says_so(dtype):
    spec = {"type": "torch.Tensor", "dtype": dtype, "shape": [2, 3], "Max": 1.0, "Min": -1.0}
    with pytest.raises(InputError) as info:
        Rebuilder(CODEC, "NPU.npu_quant_matmul.0.forward", Path("/nonexistent"), "auto", 1234).value(
            spec, "input_args[0]"
        )
    assert str(info.value).startswith(
        f"NPU.npu_quant_matmul.0.forward: input_args[0].dtype: dtype {dtype!r} is HiFloat8, "
    )
    assert "no tensor of it can be built" in str(info.value)


def test_the_fp8_statistics_dump_passes_on_random_data_and_a_hifloat8_input_is_a_skip_that_says_why(
    pytester, copy_dump
):
    dump = copy_dump("fp8_stats")
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-standard", "dtype")
    assert result.parseoutcomes()["passed"] == 21
    rows = read_csv(pytester.path / "out", "details")
    assert sum(row["Message"].startswith("a cast into e") for row in rows) == 6
    # The same read-back of a HiFloat8 tensor (msprobe's PyTorch name for it): no tensor to build here.
    data = json.loads(dump.read_text(encoding="utf-8"))
    data["data"]["Tensor.float.0.forward"]["input_args"][0]["dtype"] = "torch_npu.HiFloat8Tensor"
    dump.write_text(json.dumps(data), encoding="utf-8")
    result = run_msprobe(pytester, dump, "--msprobe-device", "cpu", "--msprobe-standard", "dtype", out="hif8")
    assert result.parseoutcomes()["passed"] == 20 and result.parseoutcomes()["skipped"] == 1
    result.stdout.fnmatch_lines(
        ["*dtype 'torch_npu.HiFloat8Tensor' is HiFloat8, torch_npu's own format: no tensor of it can be built*"]
    )


EIGHT = [*FLOAT8, "hifloat8"]


@given(st.sampled_from(EIGHT), st.floats(allow_nan=False, allow_infinity=False, width=32))
@settings(max_examples=400, deadline=None)
def test_rounding_gives_a_nearest_value_of_the_format(name, x):
    """Within the range, no value of the format is nearer x than the rounded one, and a tie goes
    to the even encoding (float8) or away from zero (HiFloat8); beyond it, the overflow."""
    fmt = format_of(name)
    assert isinstance(fmt, (Float8, HiFloat8))
    values = fmt.values()
    r = float(fmt.rounded(np.array([x]))[0])
    if abs(x) > fmt.largest + fmt.spacing(np.array([fmt.largest]))[0] / 2:
        assert not math.isfinite(r)
        return
    if not math.isfinite(r):  # a tie at the top rounds up, beyond the range
        assert abs(x) == fmt.largest + fmt.spacing(np.array([fmt.largest]))[0] / 2
        return
    assert r in values and abs(r - x) == np.min(np.abs(values - x))
    nearest = values[np.abs(values - x) == abs(r - x)]
    if nearest.size == 2:  # a tie
        if isinstance(fmt, HiFloat8):
            assert abs(r) == np.max(np.abs(nearest))
        else:
            bits = torch.tensor([r], dtype=torch.float64).to(getattr(torch, name)).view(torch.uint8)
            assert int(bits[0]) % 2 == 0


def test_an_allowance_for_float8_operands_makes_their_rounding_the_budget():
    """A kernel that rounds its wider operands to e4m3fn itself (a float8 product on bf16/fp32
    recorded inputs, scaled into the format's normal range as float8 kernels scale them) errs by up
    to 2 u |a||b|, u = 2^-4: an error undeclared, a pass with inputs=e4m3fn, and operands rounded
    coarser (e5m2) still an error there."""
    rng = np.random.default_rng(5)
    a, b = (rng.uniform(2.0**-6, 400, 4096) * rng.choice([-1, 1], 4096) for _ in range(2))
    bench = a * b

    def product(fmt: str) -> np.ndarray:
        rounded = format_of(fmt).cast
        return (rounded(a) * rounded(b)).astype(np.float32)

    def judged(tested: np.ndarray, line: str = ""):
        standard = DtypeStandard(Tolerances.parse([line] if line else []))
        return verdict(tested, bench, "torch.float32", "Torch.mul.0.forward.output.0", standard)

    e4m3 = product("float8_e4m3fn")
    assert judged(e4m3).status == ERROR
    allowed = judged(e4m3, "Torch.mul.*: inputs=e4m3fn")
    assert allowed.status == PASS and "(allowed: Torch.mul.*: inputs=e4m3fn)" in allowed.message
    assert judged(product("float8_e5m2"), "Torch.mul.*: inputs=e4m3fn").status == ERROR
    assert judged(product("float8_e5m2"), "Torch.mul.*: inputs=e5m2").status == PASS
    with pytest.raises(ValueError, match="an 8-bit format holds operands"):
        Tolerances.parse(["Torch.mul.*: accumulate=e4m3fn"])
