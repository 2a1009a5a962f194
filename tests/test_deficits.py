"""The deficit generator: each deficit errs the way it claims, each control stays a correct kernel."""

from __future__ import annotations

import json
import math

import deficits as d
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DATA

U32 = 2.0**-24
GPT = {dtype: DATA / f"gpt_{dtype}" for dtype in ("fp32", "bf16", "fp16")}
LOW_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def gamma(n: int, u: float = U32) -> float:
    return n * u / (1 - n * u)


def seeded(seed: int, *shape, scale: float = 1.0, mean: float = 0.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale + mean


def out(kind: str, entry: d.Entry, index: int = 0) -> torch.Tensor:
    return d.compute(kind, entry)[index].double()


def bench(entry: d.Entry, index: int = 0) -> torch.Tensor:
    return d.run(d.EXACT, entry)[index]


# -- rounding ------------------------------------------------------------------


@given(st.floats(min_value=-1e30, max_value=1e30, allow_nan=False, allow_subnormal=False).filter(lambda v: v != 0))
def test_round_mantissa_keeps_ten_bits_to_nearest(value):
    x = torch.tensor([value], dtype=torch.float64)
    r = d.round_mantissa(x, 10)
    mantissa, _ = torch.frexp(r)
    assert float(mantissa * 2**11) == round(float(mantissa * 2**11))  # 11 significant bits
    assert abs(float(r - x)) <= 2.0**-11 * abs(value) * 1.0000001  # within half its ULP


def test_tf32_and_hf32_differ_only_on_ties():
    tie = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11], dtype=torch.float64)  # halfway between 10-bit neighbours
    assert d.round_mantissa(tie, 10, "even").tolist() == [1.0, 1 + 2 * 2**-10]
    assert d.round_mantissa(tie, 10, "away").tolist() == [1 + 2**-10, 1 + 2 * 2**-10]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_ulp_is_the_spacing_of_the_format(dtype):
    x = torch.tensor([1.0, 1.5, 3.0, 1e-3], dtype=torch.float64)
    eps = torch.finfo(dtype).eps
    assert d.ulp(x, dtype).tolist() == pytest.approx([eps, eps, 2 * eps, eps * 2.0 ** math.floor(math.log2(1e-3))])
    tiny = torch.tensor([0.0], dtype=torch.float64)
    assert float(d.ulp(tiny, dtype)) == torch.finfo(dtype).tiny * eps  # the subnormal spacing


# -- deficits ------------------------------------------------------------------


def test_tf32_gemm_errs_by_the_tf32_unit_times_the_absolute_product():
    x, w = seeded(0, 16, 512).float(), seeded(1, 32, 512).float()
    entry = d.call_entry("Functional.linear", [x, w])
    error = (out("tf32", entry) - bench(entry)).abs()
    magnitude = x.double().abs() @ w.double().abs().T
    ratio = float((error / magnitude).max())
    fp32 = float(((out("sequential", entry) - bench(entry)).abs() / magnitude).max())
    # each operand off by up to 2^-11 relative: at most 2 * 2^-11 of |x||w|, and far above an fp32 kernel
    # (though only 2x the worst-case gamma_K(fp32) |x||w| at K = 512: that bound is of no use here)
    assert 100 * fp32 < ratio <= 2 * 2.0**-11
    # and it is the GEMM of the rounded operands, accumulated in fp32
    rounded = d.round_mantissa(x.double(), 10) @ d.round_mantissa(w.double(), 10).T
    assert float(((out("tf32", entry) - rounded).abs() / magnitude).max()) <= gamma(512) + U32


@pytest.mark.parametrize("name, numpy_dtype", [("fp16", np.float16)])
def test_low_accumulation_rounds_every_partial_sum(name, numpy_dtype):
    """Bit for bit against a scalar loop in numpy's float16 (correctly rounded casts)."""
    a, b = seeded(2, 3, 70).to(torch.float16), seeded(3, 70, 2).to(torch.float16)
    entry = d.call_entry("Torch.matmul", [a, b])
    got = out("accumulate_low", entry)
    for i in range(3):
        for j in range(2):
            total = numpy_dtype(0)
            for k in range(70):
                total = numpy_dtype(float(total) + float(a[i, k]) * float(b[k, j]))
            assert float(got[i, j]) == float(total)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@settings(max_examples=15, deadline=None)
@given(k=st.integers(64, 512), seed=st.integers(0, 2**16))
def test_low_accumulation_over_64_terms_breaks_the_fp32_bound(dtype, k, seed):
    """fp16/bf16 accumulation over K >= 64 leaves what a correct kernel may do: some element is off by
    more than its final rounding plus gamma_K(fp32) of |A||B|."""
    a, b = seeded(seed, 8, k).to(dtype), seeded(seed + 1, k, 8).to(dtype)
    entry = d.call_entry("Torch.matmul", [a, b])
    exact = bench(entry)
    u_out = torch.finfo(dtype).eps / 2
    correct = u_out * exact.abs() + gamma(k) * (a.double().abs() @ b.double().abs())
    assert bool(((out("accumulate_low", entry) - exact).abs() > correct).any())
    assert bool(((out("sequential", entry) - exact).abs() <= correct).all())


def test_blocked_low_accumulation_keeps_fp32_within_blocks():
    a, b = seeded(4, 2, 64).to(torch.float16), seeded(5, 64, 3).to(torch.float16)
    entry = d.call_entry("Torch.matmul", [a, b])
    got = out("accumulate_low_blocked", entry)
    products = a.double().unsqueeze(-1) * b.double().unsqueeze(0)  # (2, 64, 3)
    blocks = products.reshape(2, 4, 16, 3)
    running = torch.zeros(2, 3, dtype=torch.float64)
    for block in range(4):
        inner = torch.zeros(2, 3, dtype=torch.float64)
        for j in range(16):
            inner = (inner + blocks[:, block, j]).float().double()
        running = (running + inner).half().double()
    assert torch.equal(got, running)


def test_tanh_gelu_is_the_tanh_formula_and_not_erf():
    x = torch.linspace(-6, 6, 2001, dtype=torch.float64).float()
    entry = d.call_entry("Functional.gelu", [x])
    tanh = out("gelu_tanh", entry)
    assert torch.equal(tanh, F.gelu(x.double(), approximate="tanh").float().double())
    error = (tanh - bench(entry)).abs()
    assert 1e-4 < float(error.max()) < 1e-3  # the approximation's known gap (3e-4 near |x| = 2.2)
    far_tail = x < -4.5  # relative error grows in the negative tail, where GELU is tiny
    assert float((error[far_tail] / bench(entry)[far_tail].abs()).max()) > 0.1


def test_tanh_gelu_gradient_is_the_approximation_s_derivative():
    x = torch.linspace(-4, 4, 801, dtype=torch.float64)
    g = seeded(6, 801)
    entry = d.call_entry("Functional.gelu", [x.float()], direction=d.BACKWARD, grad_output=g.float())
    xx = x.float().double().requires_grad_()
    (F.gelu(xx, approximate="tanh") * g.float().double()).sum().backward()
    assert torch.equal(out("gelu_tanh", entry), xx.grad.float().double())
    assert float((out("gelu_tanh", entry) - bench(entry)).abs().max()) > 1e-4  # not erf's derivative


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rsqrt12_misses_rstd_by_up_to_2_to_the_minus_12(dtype):
    x = seeded(7, 64, 256).to(dtype)
    entry = d.call_entry("Functional.layer_norm", [x, [256]])
    error = (out("rsqrt12", entry) - bench(entry)).abs() / bench(entry).abs().clamp(min=1e-3)
    u_out = torch.finfo(dtype).eps / 2
    assert float(error.max()) <= 2.0**-12 + 4 * u_out
    if dtype == torch.float32:  # in fp32 the estimate shows: 2^-13 typical is ~2^10 ULP
        assert float(error.max()) > 2.0**-14


def test_one_pass_variance_cancels_when_the_mean_dominates():
    """E[x^2] - E[x]^2 in fp32 for rows of mean 300 and std 1: the difference of two numbers near 9e4
    keeps about 2^-24 * 9e4 = 5e-3 of the variance 1. A two-pass kernel loses only its mean's
    accumulation, n u |mean| / std = 5e-3 at worst, 1e-4 as the roundings fall."""
    x = seeded(8, 16, 256, mean=300.0).float()
    entry = d.call_entry("Functional.layer_norm", [x, [256]])
    one_pass = (out("one_pass_variance", entry) - bench(entry)).abs().max()
    two_pass = (out("sequential", entry) - bench(entry)).abs().max()
    assert float(one_pass) > 1e-3 and float(one_pass) > 10 * float(two_pass)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_softmax_sum_in_the_low_dtype_misses_the_row_sum(dtype):
    x = seeded(9, 8, 512).to(dtype)
    entry = d.call_entry("Torch.softmax", [x, -1])
    low, exact = out("softmax_sum_low", entry), bench(entry)
    relative = ((low - exact).abs() / exact).amax(-1)  # one error for the whole row: its denominator
    u_out = torch.finfo(dtype).eps / 2
    assert float(relative.max()) > 4 * u_out
    floor = torch.finfo(dtype).tiny  # below it the spacing stops shrinking (subnormals)
    assert float(((out("sequential", entry) - exact).abs() / exact.clamp(min=floor)).max()) <= u_out * 1.01


def test_layer_norm_gradient_missing_its_mean_term_is_off_by_exactly_that_term():
    x, g = seeded(10, 8, 64, mean=0.5).float(), seeded(11, 8, 64, mean=0.3).float()
    w = (1 + seeded(12, 64, scale=0.1)).float()
    entry = d.call_entry("Functional.layer_norm", [x, [64], w, None], direction=d.BACKWARD, grad_output=g)
    gap = out("missing_term", entry) - out("sequential", entry)
    rstd = 1 / torch.sqrt(x.double().var(-1, unbiased=False, keepdim=True) + 1e-5)
    term = rstd * (g.double() * w.double()).mean(-1, keepdim=True)
    assert torch.allclose(gap, term.expand_as(gap), rtol=1e-4, atol=1e-6)


def test_softmax_gradient_missing_its_dot_term_is_y_times_g():
    x, g = seeded(13, 4, 32).float(), seeded(14, 4, 32).float()
    y = torch.softmax(x, -1)
    entry = d.call_entry("Torch.softmax", [x, -1], direction=d.BACKWARD, grad_output=g, forward_output=y)
    assert torch.allclose(out("missing_term", entry), (y * g).double(), rtol=0, atol=1e-7)


# -- controls ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sequential", "reverse", "pairwise", "blocked"])
@settings(max_examples=20, deadline=None)
@given(
    k=st.integers(1, 300),
    seed=st.integers(0, 2**16),
    mean=st.sampled_from([0.0, 1.0, -3.0]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
)
def test_other_summation_orders_stay_within_the_deterministic_bound(kind, k, seed, mean, dtype):
    """|c - c*| <= u_out |c*| + gamma_K(fp32) (|A||B|)_ij for every order (Higham, chapter 3), with
    same-sign data (mean 1) and cancelling data alike."""
    a, b = seeded(seed, 4, k, mean=mean).to(dtype), seeded(seed + 7, k, 5).to(dtype)
    entry = d.call_entry("Torch.matmul", [a, b])
    exact = bench(entry)
    u_out = torch.finfo(dtype).eps / 2
    bound = u_out * exact.abs() + gamma(k) * (a.double().abs() @ b.double().abs()) * (1 + u_out)
    assert bool(((out(kind, entry) - exact).abs() <= bound).all())


@pytest.mark.parametrize(
    "api, args",
    [
        ("Functional.gelu", lambda: [seeded(15, 64, 64).to(torch.bfloat16)]),
        ("Torch.softmax", lambda: [seeded(16, 64, 64).float(), -1]),
        ("Functional.layer_norm", lambda: [seeded(17, 64, 64).to(torch.float16), [64]]),
    ],
)
def test_one_ulp_library_is_within_one_ulp_of_the_rounded_result(api, args):
    entry = d.call_entry(api, args())
    got, exact = out("ulp1", entry), bench(entry)
    rounded = d.rnd(exact, entry.dtype)
    steps = ((got - rounded) / d.ulp(rounded, entry.dtype)).abs()
    assert float(steps.max()) <= 1.0
    assert {0.0, 1.0} <= set(steps.unique().tolist())  # moved at random, not everywhere


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 600),
    seed=st.integers(0, 2**16),
    scale=st.sampled_from([1.0, 10.0]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)
def test_online_softmax_is_a_correct_softmax(n, seed, scale, dtype):
    """Each output within its rounding plus, in fp32 units, exp's conditioning |x - max| (x - max is
    rounded first), the rescalings and the row's sum."""
    x = seeded(seed, 3, n, scale=scale).to(dtype)
    entry = d.call_entry("Torch.softmax", [x, -1])
    exact = bench(entry)
    u_out = torch.finfo(dtype).eps / 2
    shift = (x.double() - x.double().amax(-1, keepdim=True)).abs()
    bound = u_out * exact.clamp(min=torch.finfo(dtype).tiny) + (8 + shift + gamma(n) / U32) * U32 * exact
    assert bool(((out("online_softmax", entry) - exact).abs() <= bound).all())


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), mean=st.sampled_from([0.0, 5.0, 300.0]))
def test_welford_layer_norm_is_a_correct_layer_norm(seed, mean):
    x = seeded(seed, 8, 256, mean=mean).float()
    entry = d.call_entry("Functional.layer_norm", [x, [256]])
    error = (out("welford", entry) - bench(entry)).abs()
    # the mean good to gamma_n |mean| (so the centred value to n u |mean| / std), the variance to gamma_n
    assert float(error.max()) <= 2 * 256 * U32 * (1 + abs(mean)) + 8 * U32


# -- the recorded layout and the corpus ----------------------------------------


def test_exact_kernel_is_the_float64_benchmark_in_msprobe_s_layout():
    """The float64 kernel of every modelled entry of the GPT dump matches torch in float64, in the
    layout msprobe records (linear: bias, input, weight transposed)."""
    assert len(_exact_against(GPT["bf16"], _torch_float64)) >= 30


def _exact_against(root, reference) -> list[tuple[str, str]]:
    """(api, direction) of every output of the dump's modelled entries whose float64 kernel
    (deficits.EXACT) was compared with `reference`'s float64 torch, each found equal."""
    data = json.loads((root / "dump.json").read_text())["data"]
    checked = []
    for name in data:
        entry = d.load_entry(root, name, data)
        try:
            ours = d.run(d.EXACT, entry)
        except d.NotApplicable:
            continue
        for a, b in zip(ours, reference(entry)):
            if a is not None and b is not None:
                assert a.shape == b.shape, name
                assert float((a - b).abs().max()) <= 1e-12 * float(b.abs().max()) + 1e-300, name
                checked.append((entry.api, entry.direction))
    return checked


def _torch_float64(entry: d.Entry):
    api_type = entry.name.split(".", 1)[0]
    fn = getattr({"Tensor": torch.Tensor, "Torch": torch, "Functional": F}[api_type], entry.api)
    args = [
        a.detach().double().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
        for a in entry.args
    ]
    result = fn(*args, **entry.kwargs)
    if entry.direction == d.FORWARD:
        return [result.detach()]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = iter(torch.autograd.grad((result * entry.grad_outputs[0].double()).sum(), leaves, allow_unused=True))
    return d.recorded_layout(entry.family, d.bind(entry.family, args, entry.kwargs), [next(grads) for _ in leaves])


def test_the_cpu_embedding_gradient_accumulates_in_the_low_dtype():
    """PyTorch's own bf16/fp16 CPU kernel is the accumulate_low deficit, bit for bit: a corpus
    cannot plant it there, and the study reports it."""
    for name in ("bf16", "fp16"):
        entry = d.load_entry(GPT[name], "Functional.embedding.0.backward")
        assert torch.equal(d.compute("accumulate_low", entry)[0], entry.recorded[0])
        assert not torch.equal(d.compute("sequential", entry)[0], entry.recorded[0])


def test_kinds_apply_by_family_dtype_and_direction():
    fp32 = d.load_entry(GPT["fp32"], "Functional.linear.3.forward")
    bf16 = d.load_entry(GPT["bf16"], "Functional.linear.3.forward")
    assert {"tf32", "hf32", "reverse"} <= set(d.applicable(fp32)) and "accumulate_low" not in d.applicable(fp32)
    assert "accumulate_low" in d.applicable(bf16) and "tf32" not in d.applicable(bf16)
    inner = d.load_entry(GPT["bf16"], "Torch.matmul.1.backward")  # msprobe recorded its grad_output
    assert d.applicable(inner) == []
    assert d.applicable(d.load_entry(GPT["bf16"], "Tensor.__add__.1.forward")) == []
    with pytest.raises(d.NotApplicable):
        d.compute("missing_term", d.load_entry(GPT["bf16"], "Functional.layer_norm.1.forward"))


def test_build_corpus_replaces_the_chosen_outputs_only(tmp_path):
    plan = [
        ("Functional.linear.3.forward", "accumulate_low"),
        ("Functional.layer_norm.1.backward", "missing_term"),
        ("Torch.softmax.0.forward", "online_softmax"),
        ("Functional.gelu.0.forward", "ulp1"),
    ]
    planted = d.build_corpus(GPT["bf16"], tmp_path / "corpus", plan)
    assert [(p.entry, p.kind, p.expected) for p in planted] == [
        ("Functional.linear.3.forward", "accumulate_low", d.ERROR),
        ("Functional.layer_norm.1.backward", "missing_term", d.ERROR),
        ("Torch.softmax.0.forward", "online_softmax", d.PASS),
        ("Functional.gelu.0.forward", "ulp1", d.PASS),
    ]
    assert planted[1].outputs == (0,)  # only the input gradient loses a term
    source = json.loads((GPT["bf16"] / "dump.json").read_text())["data"]
    written = json.loads((tmp_path / "corpus" / "dump.json").read_text())["data"]
    changed = {name for name in source if source[name] != written[name]}
    assert {"Functional.linear.3.forward", "Functional.layer_norm.1.backward"} <= changed <= {p.entry for p in planted}
    for p in planted:
        for position in p.outputs:
            spec = d.flat(written[p.entry]["output"])[position]
            value = torch.load(tmp_path / "corpus" / "dump_tensor_data" / spec["data_name"], weights_only=True)
            assert str(value.dtype) == spec["dtype"] and list(value.shape) == spec["shape"]
            assert spec["Max"] == pytest.approx(float(value.double().max()))
    untouched = tmp_path / "corpus" / "dump_tensor_data" / "Functional.linear.2.forward.output.0.pt"
    assert untouched.read_bytes() == (GPT["bf16"] / "dump_tensor_data" / untouched.name).read_bytes()


def test_build_corpus_refuses_two_kinds_for_one_entry(tmp_path):
    plan = [("Functional.gelu.0.forward", "ulp1"), ("Functional.gelu.0.forward", "gelu_tanh")]
    with pytest.raises(ValueError, match="planted twice"):
        d.build_corpus(GPT["bf16"], tmp_path / "corpus", plan)


def test_immaterial_deficits_are_expected_to_pass():
    """A 12-bit rstd in a bf16 layer_norm moves no element farther than a 1-ULP library could: it
    cannot be told from a correct kernel. In fp32 it is 2^11 ULP off: an error."""
    x = seeded(18, 16, 128).to(torch.bfloat16)
    entry = d.call_entry("Functional.layer_norm", [x, [128]])
    assert d.expected_verdict("rsqrt12", entry, d.compute("rsqrt12", entry))[0] == d.PASS
    entry32 = d.call_entry("Functional.layer_norm", [x.float(), [128]])
    verdict, margin = d.expected_verdict("rsqrt12", entry32, d.compute("rsqrt12", entry32))
    assert verdict == d.ERROR and margin > 100


def test_a_deficit_the_recorded_kernel_shares_is_immaterial():
    """PyTorch's CPU embedding gradient accumulates in bf16 itself: planting that changes nothing."""
    entry = d.load_entry(GPT["bf16"], "Functional.embedding.0.backward")
    assert d.expected_verdict("accumulate_low", entry, d.compute("accumulate_low", entry)) == (d.PASS, 1.0)


def test_material_is_twice_beyond_every_correct_kernel_at_some_element():
    exact = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    one_ulp = torch.finfo(torch.bfloat16).eps
    correct = [exact.to(torch.bfloat16), (exact * (1 + 2 * one_ulp)).to(torch.bfloat16)]  # 2 ULP off
    within = (exact * (1 + 3.9 * one_ulp)).to(torch.bfloat16)  # under twice the worst correct one
    beyond = (exact * (1 + 5 * one_ulp)).to(torch.bfloat16)
    assert not d.material(within, exact, correct)
    assert d.material(beyond, exact, correct)
    assert not d.material(beyond, exact, [(exact * (1 + 4 * one_ulp)).to(torch.bfloat16)])


# -- the CNN's kernels: conv2d, batch_norm in training, pooling ------------------------------------

CNN = {dtype: DATA / f"cnn_{dtype}" for dtype in ("fp32", "bf16", "fp16")}


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_exact_kernels_of_the_cnn_dump_are_the_float64_benchmark(dtype):
    """conv2d (3x3 and 1x1, stride 1 and 2, with and without bias), batch_norm in training,
    max_pool2d, adaptive_avg_pool2d and linear: float64 as torch computes them, forward and backward,
    in the layout msprobe records (batch_norm: input, weight, bias; conv2d: None for the images)."""
    checked = set(_exact_against(CNN[dtype], _torch_float64_cnn))
    apis = {"conv2d", "batch_norm", "adaptive_avg_pool2d", "linear"}
    assert checked >= {(api, direction) for api in apis for direction in (d.FORWARD, d.BACKWARD)}
    assert ("max_pool2d", d.BACKWARD) in checked


def _torch_float64_cnn(entry: d.Entry):
    names = d.PARAMS[entry.family]
    args = [
        a.detach().double().requires_grad_(names[i] not in d.NO_GRAD)
        if isinstance(a, torch.Tensor) and a.is_floating_point()
        else a
        for i, a in enumerate(entry.args)
    ]
    result = getattr(F, entry.api)(*args, **entry.kwargs)
    if entry.direction == d.FORWARD:
        return [result.detach()]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = torch.autograd.grad((result * entry.grad_outputs[0].double()).sum(), leaves, allow_unused=True)
    return d.recorded_layout(entry.family, d.bind(entry.family, args, entry.kwargs), list(grads))


def _batch_norm_entry(dtype: torch.dtype, mean: float = 0.0, backward: bool = False) -> d.Entry:
    x = seeded(20, 4, 8, 16, 16, mean=mean).to(dtype)
    w, b = (1 + seeded(21, 8, scale=0.1)).to(dtype), seeded(22, 8, scale=0.1).to(dtype)
    stats = [torch.zeros(8, dtype=dtype), torch.ones(8, dtype=dtype)]
    args = [x, *stats, w, b, True, 0.1, 1e-5]
    if not backward:
        return d.call_entry("Functional.batch_norm", args)
    g = seeded(23, 4, 8, 16, 16, mean=0.3).to(dtype)
    return d.call_entry("Functional.batch_norm", args, direction=d.BACKWARD, grad_output=g)


def test_cnn_batch_norm_one_pass_variance_cancels_when_the_mean_dominates():
    """Channels of mean 30 and std 1 over 1,024 elements: E[x^2] - E[x]^2 in fp32 keeps about
    2^-24 * 900 of the variance 1, the two-pass and Welford kernels lose only their sums' rounding."""
    entry = _batch_norm_entry(torch.float32, mean=30.0)
    exact = bench(entry)
    one_pass = float((out("one_pass_variance", entry) - exact).abs().max())
    for control in ("sequential", "welford", "pairwise"):
        assert one_pass > 10 * float((out(control, entry) - exact).abs().max()), control
    assert d.expected_verdict("one_pass_variance", entry, d.compute("one_pass_variance", entry))[0] == d.ERROR


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cnn_batch_norm_statistics_summed_in_the_low_dtype_are_material(dtype):
    for backward in (False, True):
        entry = _batch_norm_entry(dtype, mean=1.0, backward=backward)
        verdict, separation = d.expected_verdict("accumulate_low", entry, d.compute("accumulate_low", entry))
        assert verdict == d.ERROR and separation > 8, (backward, separation)


def test_cnn_batch_norm_gradient_missing_its_mean_term_is_off_by_exactly_that_term():
    entry = _batch_norm_entry(torch.float32, mean=0.5, backward=True)
    x, w = entry.args[0].double(), entry.args[3].double()
    g = entry.grad_outputs[0].double()
    gap = out("missing_term", entry) - out("sequential", entry)
    dims = (0, 2, 3)
    rstd = 1 / torch.sqrt(x.var(dims, unbiased=False, keepdim=True) + 1e-5)
    term = rstd * w.reshape(1, -1, 1, 1) * g.mean(dims, keepdim=True)
    assert torch.allclose(gap, term.expand_as(gap), rtol=1e-4, atol=1e-6)
    assert d.changed("missing_term", entry, d.compute("missing_term", entry)) == [0]  # dw and db keep their terms


@pytest.mark.parametrize("stride", [1, 2])
def test_cnn_conv_input_gradient_sums_every_kernel_tap_in_one_reduction(stride):
    """An implicit-GEMM kernel sums O x kh x kw products per input element (not O, then the taps
    exactly): the terms add up to torch's input gradient, an interior element has all of them."""
    x, w = seeded(24, 2, 3, 9, 9), seeded(25, 5, 3, 3, 3)
    g = seeded(26, 2, 5, *F.conv2d(x, w, None, stride, 1).shape[2:])
    p = d.bind("conv", [x, w, None, stride, 1], {})
    terms = d._conv_input_terms(d.Arith(d.EXACT, torch.float64), p, g)
    assert terms.shape == (5 * 9, 2, 3, 9, 9)
    leaf = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(F.conv2d(leaf, w, None, stride, 1), [leaf], g)
    assert torch.allclose(terms.sum(0), expected, rtol=1e-12, atol=1e-12)
    # Stride 1: every tap of every output channel reads an interior element; stride 2: at most 2 x 2 taps.
    assert int((terms != 0).sum(0).max()) == 5 * (9 if stride == 1 else 4)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_cpu_max_pool_gradient_of_the_cnn_sums_overlapping_windows_in_the_low_dtype(dtype):
    """PyTorch's own bf16/fp16 CPU max_pool2d backward is the accumulate_low deficit bit for bit
    (80 ULP off at a cancelling element in bf16): a corpus cannot plant it there (separation 1),
    while an fp32 sum of the windows is within its final rounding."""
    entry = d.load_entry(CNN[dtype], "Functional.max_pool2d.0.backward")
    low, exact = d.compute("accumulate_low", entry)[0], bench(entry)
    assert torch.equal(low, entry.recorded[0])
    sequential = out("sequential", entry)
    assert not torch.equal(sequential, low.double())
    units = d.ulp(d.rnd(exact, entry.dtype), entry.dtype)
    assert float(((sequential - exact).abs() / units).max()) <= 0.5
    assert float(((low.double() - exact).abs() / units).max()) >= 4
    assert d.expected_verdict("accumulate_low", entry, [low])[0] == d.PASS


def test_cnn_kinds_apply_to_conv_batch_norm_and_pooling():
    fp32, bf16 = (d.plan_all(CNN[name]) for name in ("fp32", "bf16"))
    kinds = {(entry.split(".")[1], entry.rsplit(".", 1)[1], kind) for entry, kind in fp32 + bf16}
    for direction in (d.FORWARD, d.BACKWARD):
        for kind in ("tf32", "hf32", "accumulate_low", "accumulate_low_blocked", "sequential", "reverse", "pairwise"):
            assert ("conv2d", direction, kind) in kinds
        for kind in ("rsqrt12", "one_pass_variance", "accumulate_low", "welford", "blocked", "ulp1"):
            assert ("batch_norm", direction, kind) in kinds
        assert ("adaptive_avg_pool2d", direction, "accumulate_low") in kinds
    assert ("batch_norm", d.BACKWARD, "missing_term") in kinds
    assert ("max_pool2d", d.BACKWARD, "accumulate_low") in kinds
    assert not any(api == "max_pool2d" and direction == d.FORWARD for api, direction, _ in kinds)  # exact: a max


# -- LLaMA-style kernels (d.LLAMA_CASES) -----------------------------------------


def _exact_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, P) of causal attention in float64."""
    q, k, v = q.double(), k.double(), v.double()
    p = torch.softmax(d._causal(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])), -1)
    return p @ v, p


@pytest.mark.parametrize("dtype, tile", [(torch.bfloat16, 16), (torch.bfloat16, 64), (torch.float16, 32)])
def test_flash_attention_is_within_the_rounding_of_p_and_differs_from_the_cpu_kernel(dtype, tile):
    """A flash-style output is within its final rounding plus u_low (P |V|) (P rounded to the dtype) and a
    few fp32 units: a correct kernel; its errors fall elsewhere than PyTorch's CPU kernel's."""
    q, k, v = d._attention_inputs(dtype)
    got, _ = d.flash_forward(q, k, v, tile)
    exact, p = _exact_attention(q, k, v)
    u = torch.finfo(dtype).eps / 2
    magnitude = p @ v.double().abs()
    bound = u * exact.abs() + u * magnitude + 64 * U32 * magnitude
    assert bool(((got.double() - exact).abs() <= bound).all())
    cpu = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.equal(got, cpu)


def test_flash_backward_value_gradient_is_within_the_rounding_of_p():
    q, k, v = d._attention_inputs(torch.bfloat16)
    o, lse = d.flash_forward(q, k, v, 32)
    g = d._grad_output(20, o)
    dv = d.flash_backward(q, k, v, o, lse, g, 32)[2]
    _, p = _exact_attention(q, k, v)
    exact = p.transpose(-1, -2) @ g.double()
    magnitude = p.transpose(-1, -2) @ g.double().abs()
    u = 2.0**-8
    # P from the saved lse (fp32) and the rounding of P, then dV's own
    assert bool(((dv.double() - exact).abs() <= u * exact.abs() + u * magnitude + 64 * U32 * magnitude).all())


def test_fast_trig_is_off_by_the_range_reduction_s_constant_at_thousands_of_radians():
    x = d._angles()
    exact = torch.cos(x.double())
    fast = (d.fast_trig(x, torch.cos).double() - exact).abs()
    library = (torch.cos(x).double() - exact).abs()
    turns = torch.round(x.double() * 2 / math.pi)
    assert float(library.max()) <= 2 * 2.0**-24  # a 1-ULP library: exact input, exact argument
    assert 5e-5 < float(fast.max()) <= float((turns * abs(math.pi / 2 - d.PIO2_F32)).max()) + 2.0**-23


def test_fast_exp_is_off_by_about_2e_4():
    x = torch.linspace(-20, 20, 4001, dtype=torch.float64)
    relative = ((d.fast_exp(x) - torch.exp(x)) / torch.exp(x)).abs()
    assert 1e-4 < float(relative.max()) < 3e-4


def _exact_of(case: d.Case, recorded: d.Recorded) -> list[torch.Tensor]:
    """The judged entry's float64 values: the API on the recorded inputs (backward: their gradients)."""
    root, name = case.api.split(".", 1)
    fn = getattr({"Functional": F, "Torch": torch, "Tensor": torch.Tensor}[root], name)
    args = [a.double().requires_grad_(True) if isinstance(a, torch.Tensor) else a for a in recorded.args]
    out = fn(*args, **recorded.kwargs)
    if case.direction == d.FORWARD:
        return [out.detach()]
    assert recorded.grad_outputs is not None
    return [t.detach() for t in torch.autograd.grad(out, args[:1], recorded.grad_outputs[0].double())]


@pytest.mark.parametrize("name", [c.name for c in d.LLAMA_CASES if c.deficit and not c.api.startswith("NPU.")])
def test_every_llama_deficit_is_material(name):
    """More than twice as far from float64 as PyTorch's own CPU kernel and a 1-ULP library at some element
    (and, for attention in bf16/fp16, every flash-style control)."""
    case = next(c for c in d.LLAMA_CASES if c.name == name)
    recorded = case.build()
    value = (recorded.outputs if case.direction == d.FORWARD else recorded.grads or [])[0]
    exact = _exact_of(case, recorded)[0]
    correct = [_cpu_of(case, recorded)]
    if case.api.endswith("attention") and value.dtype in (torch.bfloat16, torch.float16):
        q, k, v = recorded.args
        correct += [d.flash_forward(q, k, v, tile)[0] for tile in (16, 32, 64)]
    assert d.material(value, exact, correct)


def _cpu_of(case: d.Case, recorded: d.Recorded) -> torch.Tensor:
    root, name = case.api.split(".", 1)
    fn = getattr({"Functional": F, "Torch": torch, "Tensor": torch.Tensor}[root], name)
    args = [a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) else a for a in recorded.args]
    out = fn(*args, **recorded.kwargs)
    if case.direction == d.FORWARD:
        return out.detach()
    assert recorded.grad_outputs is not None
    return torch.autograd.grad(out, args[:1], recorded.grad_outputs[0])[0]


def test_write_cases_lays_the_entries_out_as_msprobe_does(tmp_path):
    cases = [c for c in d.LLAMA_CASES if c.name in ("flash_bf16_tile16", "fast_cos")]
    judged = d.write_cases(tmp_path, cases)
    assert judged == {
        "flash_bf16_tile16": "Functional.scaled_dot_product_attention.0.backward",
        "fast_cos": "Tensor.cos.0.forward",
    }
    data = json.loads((tmp_path / "dump.json").read_text())["data"]
    backward = data["Functional.scaled_dot_product_attention.0.backward"]
    assert [s["shape"] for s in backward["output"]] == [[1, d.LLAMA_HEADS, d.LLAMA_SEQ, d.LLAMA_HEAD_DIM]] * 3
    forward = data["Functional.scaled_dot_product_attention.0.forward"]
    assert forward["input_kwargs"] == {"is_causal": {"type": "bool", "value": True}}
    saved = torch.load(tmp_path / "dump_tensor_data" / backward["output"][0]["data_name"])
    assert saved.dtype == torch.bfloat16
    other = d.write_cases(tmp_path / "other", cases, d.Draw(offset=1, seq=32))
    assert other == judged
    angles = json.loads((tmp_path / "other" / "dump.json").read_text())["data"]["Tensor.cos.0.forward"]
    assert angles["input_args"][0]["shape"] == [1, 32, d.LLAMA_HEAD_DIM]
