"""The spacing and rounding behind the dtype standard's budget (pytest_msprobe/judging/standards/budget.py)."""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given

from pytest_msprobe.judging.compare import ExtraRuns
from pytest_msprobe.judging.standards.budget import format_of, read

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
finite = st.floats(-6e4, 6e4, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize("dtype", list(DTYPES))
@given(values=hnp.arrays(np.float64, st.integers(1, 64), elements=st.floats(-1e30, 1e30, allow_nan=False)))
def test_rounded_is_torch_s_rounding(dtype, values):
    expected = torch.from_numpy(values).to(DTYPES[dtype]).double().numpy()
    assert np.array_equal(format_of(dtype).rounded(values), expected)


@pytest.mark.parametrize("dtype", list(DTYPES))
@given(values=hnp.arrays(np.float64, st.integers(1, 64), elements=finite))
def test_spacing_is_the_distance_to_the_next_value_away_from_zero(dtype, values):
    fmt = format_of(dtype)
    rounded = torch.from_numpy(values).to(DTYPES[dtype])
    following = torch.nextafter(rounded.abs(), torch.tensor(float("inf"), dtype=DTYPES[dtype]))
    assert np.array_equal(fmt.spacing(values), (following.double() - rounded.abs().double()).numpy())


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_zero_has_the_smallest_subnormal_spacing(dtype):
    """0 is below the normal range: a tested 0.004 where the benchmark is exactly 0 is no rounding (bf16
    once allowed 1.5 x 2^-8 there, frexp(0) giving 0 the exponent of 0.5)."""
    fmt = format_of(dtype)
    assert fmt.spacing(np.array([0.0, -0.0]))[0] == np.ldexp(1.0, fmt.min_exponent - fmt.mantissa_bits)
    bench = np.array([0.0, 1.0])
    assert read(np.array([0.004, 1.0]), bench, fmt, ExtraRuns()).ratio > 2
    assert read(bench, bench, fmt, ExtraRuns()).ratio == 0


@pytest.mark.parametrize("dtype", list(DTYPES))
@given(bench=hnp.arrays(np.float64, st.integers(1, 200), elements=finite), seed=st.integers(0, 2**16))
def test_a_one_ulp_library_passes(dtype, bench, seed):
    fmt = format_of(dtype)
    rounded = fmt.rounded(bench)
    steps = np.random.default_rng(seed).integers(-1, 2, bench.shape)
    tested = fmt.rounded(rounded + steps * fmt.spacing(rounded))
    assert read(tested, bench, fmt, ExtraRuns()).ratio <= 1


def test_subnormal_results_have_the_subnormal_spacing_as_floor():
    fmt = format_of("float16")
    bench = np.array([1e-7, -3e-8, 0.0])  # fp16 subnormals: spacing 2^-24 = 6e-8
    assert read(bench + np.array([5e-8, -5e-8, 5e-8]), bench, fmt, ExtraRuns()).ratio <= 1
    assert read(bench + 2e-7, bench, fmt, ExtraRuns()).ratio > 2


def test_the_accumulation_unit_is_fp32_s_down_to_fp32_and_fp64_s_for_fp64():
    assert format_of("bf16").accumulation == 2.0**-24
    assert format_of("torch.float32").accumulation == 2.0**-24
    assert format_of("float64").accumulation == 2.0**-53


def test_the_rounded_intermediates_term_is_asked_after_the_magnitude_and_named():
    """An output over its budget asks the magnitude, then the structural term (before the spread), and
    c_round times it joins the budget under its name."""
    fmt = format_of("float32")
    bench = np.array([1e-8, 0.5])
    tested = bench + np.array([4e-8, 0.0])
    asked: list[str] = []

    def answer(name: str, values: np.ndarray):
        return lambda *_: asked.append(name) or values

    extra = ExtraRuns(
        magnitude=answer("magnitude", np.abs(bench)),
        structural=answer("structural", np.array([3e-8, 0.0])),
        spread=answer("spread", np.zeros(2)),
    )
    reading = read(tested, bench, fmt, extra)
    assert reading.ratio <= 1 and asked == ["magnitude", "structural"]
    assert reading.parts["rounded intermediates"] == pytest.approx(2 * 3e-8 / fmt.spacing(bench)[0])
    assert read(tested, bench, fmt, ExtraRuns()).ratio > 1


def test_pytorch_s_fp32_tanh_gradient_is_within_its_saved_output_s_rounding():
    """tanh's gradient g (1 - y^2) from y rounded to fp32: where |y| rounds to 1 it is 0, off by all of
    the float64 value; 2 |g| y^2 u bounds it (the conditioning of the saved output's rounding)."""
    from pytest_msprobe.frameworks.magnitudes import structural

    x = torch.linspace(-12, 12, 2001, dtype=torch.float32).requires_grad_(True)
    g = torch.ones_like(x)
    (tested,) = torch.autograd.grad(torch.tanh(x), x, g)
    x64 = x.detach().double().requires_grad_(True)
    (bench,) = torch.autograd.grad(torch.tanh(x64), x64, g.double())
    fmt = format_of("float32")
    (term,) = structural("Torch.tanh", [x.detach()], {}, [g])
    assert float((tested.double() - bench).abs().max()) > 100 * float(bench.abs().min())  # the cancellation
    extra = ExtraRuns(structural=lambda: term.numpy())
    assert read(tested.double().numpy(), bench.numpy(), fmt, extra).ratio <= 1
    assert read(tested.double().numpy(), bench.numpy(), fmt, ExtraRuns()).ratio > 1


@pytest.mark.parametrize("api", ["Torch.cos", "Tensor.exp", "Functional.silu", "Torch.rsqrt_"])
def test_unary_math_is_a_family_of_its_own_and_saved_outputs_have_a_structural_term(api):
    """A correct kernel of an exact input perturbs no input: the unary family asks no spread forward
    (its backward still does: g f'(x) is a composite; end to end: test_deficits_e2e's fast cos), and
    the APIs whose gradient reads their saved output have a structural term."""
    from pytest_msprobe.frameworks import magnitudes

    assert magnitudes.family(api) == "unary"
    assert magnitudes.family("Functional.softmax") == "formula"
    assert "rsqrt" in magnitudes.STRUCTURAL and "cos" not in magnitudes.STRUCTURAL


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_fused_attention_gets_the_flash_terms_of_the_same_attention_written_as_sdpa(layout):
    """npu_fusion_attention (grouped key/value heads, a causal atten_mask, True masks) is modelled as
    scaled_dot_product_attention of the same attention with each key/value head repeated over its query
    heads: the same magnitudes and flash terms, in the call's layout, a key's summed over its group."""
    from pytest_msprobe.frameworks.magnitudes import formula, structural

    batch, seq, heads, kv_heads, dim = 2, 12, 4, 2, 8
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, n, seq, dim, generator=generator, dtype=torch.bfloat16) for n in (heads, 2, 2))
    g = torch.randn(batch, heads, seq, dim, generator=generator, dtype=torch.bfloat16)

    def to_layout(x: torch.Tensor) -> torch.Tensor:
        b, n, s, d = x.shape
        return {
            "BNSD": x,
            "BSND": x.transpose(1, 2),
            "BSH": x.transpose(1, 2).reshape(b, s, n * d),
            "SBH": x.permute(2, 0, 1, 3).reshape(s, b, n * d),
        }[layout]

    args = [to_layout(q), to_layout(k), to_layout(v), heads, layout]
    kwargs = {"atten_mask": torch.ones(seq, seq, dtype=torch.bool).triu(1), "scale": dim**-0.5, "sparse_mode": 0}
    sdpa = [q, k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)]

    def grouped(x: torch.Tensor) -> torch.Tensor:
        return to_layout(x.reshape(batch, kv_heads, heads // kv_heads, seq, dim).sum(2))

    for run in (structural, formula):
        (fused,) = run("NPU.npu_fusion_attention", args, kwargs, None)
        (plain,) = run("Functional.scaled_dot_product_attention", sdpa, {"is_causal": True}, None)
        torch.testing.assert_close(fused, to_layout(plain))
        fused = run("NPU.npu_fusion_attention", args, kwargs, [to_layout(g), None, None])
        plain = run("Functional.scaled_dot_product_attention", sdpa, {"is_causal": True}, [g])
        torch.testing.assert_close(fused, [to_layout(plain[0]), grouped(plain[1]), grouped(plain[2])])


def test_a_gradient_through_a_log_sum_exp_carries_its_sums_rounding():
    """cross_entropy's gradient softmax(x) - onehot reads back the log-sum-exp of every class: its
    rounding, like a sum of C positive terms, moves each element by the same relative amount. PyTorch's
    fp32 kernel over a 32,000-class vocabulary with wide logits is over its budget without that length
    term (the sum's, not the kernel's fault) and within it with it; softmax forward and log_softmax,
    logsumexp backward count the same terms over their `dim`."""
    from pytest_msprobe.frameworks.magnitudes import formula, normaliser_terms

    generator = torch.Generator().manual_seed(0)
    x = (torch.rand(32, 32000, generator=generator) * 30 - 15).requires_grad_(True)
    target = torch.randint(0, 32000, (32,), generator=generator)
    (tested,) = torch.autograd.grad(torch.nn.functional.cross_entropy(x, target), x)
    x64 = x.detach().double().requires_grad_(True)
    (bench,) = torch.autograd.grad(torch.nn.functional.cross_entropy(x64, target), x64)
    api, args = "Functional.cross_entropy", [x.detach(), target]
    (magnitude,) = formula(api, args, {}, [torch.ones(())])
    terms = normaliser_terms(api, args, {}, forward=False)
    assert terms == 32000
    fmt = format_of("float32")
    judged = {
        k: read(tested.double().numpy(), bench.numpy(), fmt, ExtraRuns(magnitude=magnitude.numpy, terms=lambda: k))
        for k in (None, terms)
    }
    assert judged[None].ratio > 1 and judged[terms].ratio <= 1, {k: r.ratio for k, r in judged.items()}
    assert normaliser_terms("Functional.cross_entropy", args, {}, forward=True) is None
    assert normaliser_terms("Functional.softmax", [x], {"dim": 1}, forward=True) == 32000
    assert normaliser_terms("Torch.logsumexp", [x, (0, 1)], {}, forward=False) == 32 * 32000
    assert normaliser_terms("Functional.log_softmax", [x, -1], {}, forward=True) is None


def test_a_divisors_gradient_summed_over_its_broadcast_gets_the_sums_magnitude():
    """A router's top-k weights over their sum (w / w.sum(-1, keepdim=True)): the divisor's gradient
    sums -g w / d^2 over the k weights, and where g's signs differ it cancels far below its terms.
    A quotient is a product: its run on |inputs| gives the terms' magnitude, which holds PyTorch's
    fp32 kernel; without it the same gradient is over its budget."""
    from pytest_msprobe.frameworks.magnitudes import family

    assert family("Tensor.__truediv__") == family("Torch.div") == "sum"
    generator = torch.Generator().manual_seed(0)
    w = torch.rand(4096, 2, generator=generator) + 0.1
    d = w.sum(-1, keepdim=True)
    g = torch.randn(4096, 2, generator=generator)

    def divisor_gradient(w: torch.Tensor, d: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        d = d.clone().requires_grad_(True)
        (found,) = torch.autograd.grad(w / d, d, g)
        return found

    tested = divisor_gradient(w, d, g).double().numpy()
    bench = divisor_gradient(w.double(), d.double(), g.double()).numpy()
    magnitude = divisor_gradient(w.double(), d.double(), g.double().abs()).abs().numpy()
    fmt = format_of("float32")
    assert read(tested, bench, fmt, ExtraRuns()).ratio > 1
    assert read(tested, bench, fmt, ExtraRuns(magnitude=lambda: magnitude)).ratio <= 1
