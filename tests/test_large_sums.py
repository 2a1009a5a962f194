"""The dtype standard on what a correct kernel does over many terms: long sums, batch statistics,
pooling windows. The first ResNet-50 step a user brings has all three, and a correct fp32 CPU
kernel there must not be called an error (bench/studies/kernel_bounds.md, "Partial sums over K").
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import deficits as d
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import DATA, read_csv, run_msprobe
from pytest_msprobe.dumps.dump import EntryName
from pytest_msprobe.frameworks import conv
from pytest_msprobe.frameworks.magnitudes import family, formula, lower_bound, terms_bound, terms_of, with_magnitudes
from pytest_msprobe.frameworks.torch_engine import Call, ExtraBenchRuns, Side, Sides, absolute, forward, gradients
from pytest_msprobe.judging.compare import ExtraRuns
from pytest_msprobe.judging.standards.budget import FORMATS, Constants, read

RESNET = DATA / "public" / "gpu_resnet" / "dump.json"


def test_how_many_terms_each_output_of_conv_and_linear_sums():
    x, w, b = torch.ones(4, 3, 10, 10), torch.ones(8, 3, 3, 3), torch.ones(8)
    g = torch.ones(4, 8, 8, 8)
    assert terms_of("Functional.conv2d", [x, w, b], None, 0, g.numel()) == 3 * 9
    grads = [terms_of("Functional.conv2d", [x, w, b], [g], i, t.numel()) for i, t in enumerate((x, w, b))]
    assert grads == [8 * 9, 4 * 8 * 8, 4 * 8 * 8]
    x, w, b = torch.ones(5, 6, 16), torch.ones(32, 16), torch.ones(32)
    assert terms_of("Functional.linear", [x, w, b], None, 0, 5 * 6 * 32) == 16
    g = torch.ones(5, 6, 32)
    assert [terms_of("Functional.linear", [x, w, b], [g], i, t.numel()) for i, t in enumerate((x, w, b))] == [
        32,
        30,
        30,
    ]


def test_how_many_terms_a_reduction_and_a_norms_weight_gradient_sum():
    x = torch.ones(4, 64, 7, 7)
    assert terms_of("Torch.sum", [x], None, 0, 1) == x.numel()
    assert terms_of("Torch.mean", [x], None, 0, 64) == 4 * 49
    bn = [x, torch.ones(64), torch.ones(64)]  # input, weight, bias (running statistics take no gradient)
    assert [terms_of("Functional.batch_norm", bn, [x], i, t.numel()) for i, t in enumerate(bn)] == [None, 196, 196]
    assert terms_of("Functional.relu", [x], None, 0, x.numel()) is None  # elementwise: one term
    assert terms_of("Torch.add", [x, x], None, 0, x.numel()) is None


def _batch_norm_call(training: bool, seed: int = 0) -> tuple[list, dict]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 5, 4, 4, generator=g, dtype=torch.float64) * 3 + 2
    stats = [torch.rand(5, generator=g, dtype=torch.float64), torch.rand(5, generator=g, dtype=torch.float64) + 0.5]
    w, b = torch.randn(5, generator=g, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64)
    return [x, *stats, w, b, training, 0.1, 1e-5], {}


@pytest.mark.parametrize("training", [True, False])
def test_the_batch_norm_magnitude_bounds_every_output_and_gradient(training):
    """The formula with every difference made a sum of magnitudes is at least |the result|: the
    triangle inequality, forward and backward, batch statistics and running ones."""
    args, kwargs = _batch_norm_call(training)
    assert family("Functional.batch_norm") == "formula"
    y = F.batch_norm(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    (magnitude,) = formula("Functional.batch_norm", args, kwargs, None)
    assert magnitude.shape == y.shape and bool((magnitude >= y.abs() * (1 - 1e-12)).all())

    leaves = [args[0].clone().requires_grad_(), args[3].clone().requires_grad_(), args[4].clone().requires_grad_()]
    out = F.batch_norm(leaves[0], args[1].clone(), args[2].clone(), leaves[1], leaves[2], training, 0.1, 1e-5)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    exact = torch.autograd.grad(out, leaves, grad)
    found = formula("Functional.batch_norm", args, kwargs, [grad])
    assert [f is None for f in found] == [False, True, True, False, False]  # one per floating input
    for magnitude, value in zip([found[0], found[3], found[4]], exact):
        assert magnitude.shape == value.shape and bool((magnitude >= value.abs() * (1 - 1e-12)).all())


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, False)])
def test_the_batch_norm_magnitude_per_channel_is_the_elementwise_formula(training, affine):
    """magnitudes._batch_norm works per channel (an affine map of |x| and |g| with two full-size
    buffers); it is the elementwise formula, layer_norm's, to the last few bits, and leaves the
    call's own tensors (float64 here, which a cast would not copy) as they were."""
    args, kwargs = _batch_norm_call(training, seed=2)
    args[3], args[4] = (t if keep else None for t, keep in zip(args[3:5], affine))
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    x, mean_r, var_r, w, b = args[:5]
    over, shape = (0, 2, 3), (1, -1, 1, 1)
    mean = x.mean(over, keepdim=True) if training else mean_r.reshape(shape)
    var = ((x - mean) ** 2).mean(over, keepdim=True) if training else var_r.reshape(shape)
    rstd = 1 / torch.sqrt(var + 1e-5)
    aw = w.abs().reshape(shape) if w is not None else 1.0
    # batch statistics: the mean is a sum of the channel's terms, rounded at mean(|x|) (float64 here, no bf16)
    scale = x.abs().mean(over, keepdim=True) if training else mean.abs()
    centred = (x.abs() + scale) * rstd
    expected_y = centred * aw + (b.abs().reshape(shape) if b is not None else 0.0)
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ag = grad.abs()
    weighted = (ag * aw * centred).mean(over, keepdim=True)
    gw = ag * aw
    expected_dx = (centred * weighted + gw + gw.mean(over, keepdim=True)) * rstd if training else gw * rstd
    expected = {0: expected_dx, 3: (ag * centred).sum(over), 4: ag.sum(over)}

    def close(found: torch.Tensor, want: torch.Tensor) -> bool:
        return found.shape == want.shape and bool(((found - want).abs() <= 1e-14 * want.abs()).all())

    (y,) = formula("Functional.batch_norm", args, kwargs, None)
    assert close(y, expected_y)
    found = formula("Functional.batch_norm", args, kwargs, [grad])
    assert len(found) == 3 + sum(affine) and close(found[0], expected[0])
    assert all(close(found[i], expected[i]) for i in (3, 4) if i < len(found) and args[i] is not None)
    assert all(torch.equal(a, c) if isinstance(a, torch.Tensor) else a is c for a, c in zip(args, before))


@pytest.mark.parametrize("training", [True, False])
def test_a_float32_call_s_batch_norm_magnitude_runs_in_float32_and_in_float64_where_it_overflows(training):
    """A float32 call's batch_norm magnitude is the float64 formula's to a few float32 ULP (24 bits
    for a factor of the budget); where float32 squares overflow (|x| ~ 1e20), float64 again."""
    args, kwargs = _batch_norm_call(training, seed=4)
    grad = torch.randn(args[0].shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for scale in (1.0, 1e20):
        wide = [a * scale if i == 0 else a for i, a in enumerate(args)]
        narrow = [a.float() if isinstance(a, torch.Tensor) else a for a in wide]
        for grads in (None, [grad]):
            exact = formula("Functional.batch_norm", wide, kwargs, grads)
            found = formula("Functional.batch_norm", narrow, kwargs, None if grads is None else [grad.float()])
            overflows = training and scale > 1
            for f, e in zip(found, exact):
                if f is None:
                    continue
                assert f.dtype == (torch.float64 if overflows else torch.float32)
                assert bool(((f.double() - e).abs() <= 2e-6 * e.abs()).all())


def test_a_float32_batch_norm_magnitude_that_overflows_runs_in_float64():
    """Running statistics: no variance to overflow, but |x| a |w| beyond float32's largest value."""
    x = torch.full((2, 3, 2, 2), 1e37)
    args = [x, torch.zeros(3), torch.full((3,), 1e-3), torch.full((3,), 2.0), torch.zeros(3), False, 0.1, 1e-5]
    (found,) = formula("Functional.batch_norm", args, {}, None)
    wide = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
    assert found.dtype == torch.float64 and torch.equal(found, formula("Functional.batch_norm", wide, {}, None)[0])


def test_a_fp32_sum_in_order_of_262144_same_sign_terms_passes_and_a_bf16_rounding_fails():
    """Sequential fp32 accumulation of positive terms errs like sqrt(K) u |b|, beyond what a constant
    times u m allows once K is large; the length term passes it, and still fails bf16 accumulation."""
    k = 1 << 18  # the study's in-order sums pass up to here (kernel_bounds.md, "Partial sums over K")
    terms = torch.rand(k, generator=torch.Generator().manual_seed(0), dtype=torch.float64).numpy()
    exact = np.array([terms.sum()])
    in_order = np.array([np.cumsum(terms.astype(np.float32))[-1]], dtype=np.float64)  # numpy's cumsum adds in order
    in_bf16 = exact * (1 + 2.0**-9)  # one bf16 rounding of the result alone is more than fp32 accumulation allows
    fmt = FORMATS["float32"]
    length = ExtraRuns(terms=lambda: k)
    without = read(in_order, exact, fmt, ExtraRuns())
    assert without.ratio > 1  # what the standard said before it knew K
    assert read(in_order, exact, fmt, length).ratio <= 1
    assert read(in_bf16, exact, fmt, length).status(Constants().band) == "error"


def test_max_pool_gradient_magnitude_routes_the_absolute_grad_output():
    """Overlapping windows add gradients that cancel; the magnitude sums their absolute values at
    the argmax the input chose (|x| would choose others)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 9, 9, generator=g)
    grad = torch.randn(1, 2, 4, 4, generator=g)
    name = EntryName("Functional.max_pool2d.0.backward", "Functional", "max_pool2d", 0, "backward")
    call = Call(name, F.max_pool2d, F.max_pool2d, [x, 3, 2], {}, [], grad_flags=[True])
    bench = Sides(
        bench=lambda side: gradients(side, call, [grad]), tested=list, pair=lambda t, b: [], grad_outputs=[grad]
    )
    sides = with_magnitudes(bench, "Functional.max_pool2d", call)
    assert sides.magnitude is not None and not sides.spread
    side = Side("cpu", torch.float64, None, True)
    (magnitude,) = sides.magnitude(side)
    (signed,) = sides.bench(side)
    leaf = x.double().requires_grad_()
    (expected,) = torch.autograd.grad(F.max_pool2d(leaf, 3, 2), [leaf], grad.double().abs())
    assert torch.equal(magnitude, expected)
    assert bool((magnitude >= signed.abs()).all()) and bool((magnitude > signed.abs()).any())  # some cancel


@pytest.mark.slow
def test_the_resnet_steps_long_sums_batch_norms_and_pooling_pass_in_cpu_mode(pytester):
    """The entries of the public ResNet-50 step that a correct fp32 CPU kernel took beyond the budget
    before it knew K, batch_norm's formula and pooling's routes: conv2d.0's weight gradient sums
    401,408 terms, batch_norm's gradients sum 25,088 to 100,352, max_pool2d's windows overlap."""
    entries = "conv2d.0. or batch_norm.7. or batch_norm.13. or batch_norm.23. or max_pool2d.0."
    result = run_msprobe(pytester, RESNET, "--msprobe-device", "cpu", "--msprobe-standard", "dtype", "-k", entries)
    result.assert_outcomes(passed=10)
    rows = {row["API Name"]: row for row in read_csv(pytester.path / "out", "details")}
    weight = rows["Functional.conv2d.0.backward.output.1"]
    assert weight["Status"] == "pass" and weight["Shape"] == "[64, 3, 7, 7]"
    assert {row["Status"] for row in rows.values()} == {"pass"}
    assert math.isfinite(float(weight["MaxRelativeErr"]))


# -- what the new terms must not let through: deficient CNN kernels stay errors ----------------


def _judged(api: str, fn, args: list, tested: list[torch.Tensor], grad: torch.Tensor | None = None) -> list[str]:
    """The dtype standard's status of each output (backward: each floating input's gradient) that a
    kernel under test computed, with the extra runs the plugin would ask, on its float64 benchmark."""
    direction = "forward" if grad is None else "backward"
    api_type, short = api.split(".", 1)
    name = EntryName(f"{api}.0.{direction}", api_type, short, 0, direction)
    call = Call(name, fn, fn, args, {}, [], grad_flags=[True] * len(args))
    compute = (lambda side: forward(side, call)) if grad is None else (lambda side: gradients(side, call, [grad]))
    grads = None if grad is None else [grad]
    sides = with_magnitudes(Sides(bench=compute, tested=list, pair=lambda t, b: [], grad_outputs=grads), api, call)
    side = Side("cpu", torch.float64, None, True)
    bench = sides.bench(side)
    extra = ExtraBenchRuns(call, sides, side, bench)
    fmt = FORMATS["float32"]
    return [
        read(t.double().numpy(), b.numpy(), fmt, extra.for_output(i)).status(Constants().band)
        for i, (t, b) in enumerate(zip(tested, bench))
        if t is not None
    ]


def _activations(shape: tuple[int, ...], mean: float, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) + mean


def _batch_norm_fp32(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, variance: str = "two-pass", rsqrt_bits: int = 0
):
    """batch_norm in training as a kernel might compute it in fp32: statistics over N, H, W, the
    variance in two passes or one (E[x^2] - E[x]^2), rstd exact in fp32 or to `rsqrt_bits` bits."""
    dims = (0, 2, 3)
    mean = x.mean(dims, keepdim=True)
    if variance == "two-pass":
        var = ((x - mean) ** 2).mean(dims, keepdim=True)
    else:
        var = (x * x).mean(dims, keepdim=True) - mean * mean
    rstd = torch.rsqrt(var + 1e-5)
    if rsqrt_bits:
        mantissa, exponent = torch.frexp(rstd.double())
        rstd = torch.ldexp(torch.round(mantissa * 2.0**rsqrt_bits) / 2.0**rsqrt_bits, exponent).float()
    return (x - mean) * rstd * w.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)


def test_batch_norm_deficits_are_errors_and_a_correct_fp32_kernel_passes():
    x = _activations((8, 16, 12, 12), mean=10.0)  # a channel mean ten times its spread
    w, b = torch.rand(16) + 0.5, torch.randn(16)
    args = [x, None, None, w, b, True, 0.1, 1e-5]
    kernels = {
        "torch's fp32": F.batch_norm(*args),
        "fp32 two-pass": _batch_norm_fp32(x, w, b),
        "one-pass variance": _batch_norm_fp32(x, w, b, variance="one-pass"),
        "12-bit rsqrt": _batch_norm_fp32(x, w, b, rsqrt_bits=12),
    }
    found = {kind: _judged("Functional.batch_norm", F.batch_norm, args, [y])[0] for kind, y in kernels.items()}
    assert found == {
        "torch's fp32": "pass",
        "fp32 two-pass": "pass",
        "one-pass variance": "error",
        "12-bit rsqrt": "error",
    }


def test_a_batch_norm_gradient_missing_a_term_is_an_error():
    x, grad = _activations((8, 16, 12, 12), mean=1.0), _activations((8, 16, 12, 12), mean=0.0, seed=1)
    w, b = torch.rand(16) + 0.5, torch.randn(16)
    leaves = [x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()]
    correct = torch.autograd.grad(F.batch_norm(leaves[0], None, None, leaves[1], leaves[2], True), leaves, grad)
    dims = (0, 2, 3)
    rstd = torch.rsqrt(x.var(dims, unbiased=False, keepdim=True) + 1e-5)
    missing = rstd * w.reshape(1, -1, 1, 1) * (grad - grad.mean(dims, keepdim=True))  # without x-hat mean(g x-hat)
    args = [x, None, None, w, b, True, 0.1, 1e-5]
    assert _judged("Functional.batch_norm", F.batch_norm, args, list(correct), grad) == ["pass"] * 3
    assert _judged("Functional.batch_norm", F.batch_norm, args, [missing], grad)[0] == "error"


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_hf32_conv_operands_are_an_error_and_fp32_passes(direction):
    """ResNet's layers: K = 64 x 9 = 576 forward and for the input's gradient, 4 x 8 x 8 = 256 for the
    weight's; operands rounded to 10 mantissa bits as the cube unit's HF32 does."""
    x, w = _activations((4, 64, 8, 8), mean=1.0), torch.randn(64, 64, 3, 3) * 0.05
    hf32 = [d.round_mantissa(t.double(), 10, "away").float() for t in (x, w)]
    if direction == "forward":
        statuses = [
            _judged("Functional.conv2d", F.conv2d, [x, w, None, 1, 1], [y])[0]
            for y in (F.conv2d(x, w, None, 1, 1), F.conv2d(*hf32, None, 1, 1))
        ]
    else:
        grad = _activations((4, 64, 8, 8), mean=0.0, seed=2)
        statuses = []
        for operands in ((x, w), hf32):
            leaves = [t.clone().requires_grad_() for t in operands]
            found = torch.autograd.grad(F.conv2d(*leaves, None, 1, 1), leaves, grad)
            judged = _judged("Functional.conv2d", F.conv2d, [x, w, None, 1, 1], list(found), grad)
            statuses.append("error" if "error" in judged else judged[0] if set(judged) == {judged[0]} else "mixed")
    assert statuses == ["pass", "error"]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_cross_entropy_magnitude_bounds_the_loss_and_its_gradient(reduction):
    """Confident rows (p = 0.99 at the target) make the gradient p - 1 cancel: a correct fp32 kernel
    is off by u p / N there, 100 ULP of that small element (tests/data/cnn_fp32's cross_entropy, in
    cpu mode). The formula's (p + onehot) |g| / N is at least |the gradient| everywhere, and the loss's
    |max| + log sum exp(x - max) + |x_t| at least |the loss|; an ignored row has no magnitude."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 10, generator=g, dtype=torch.float64) * 4
    target = torch.randint(0, 10, (6,), generator=g)
    x[torch.arange(6), target] += 8.0
    target[5] = -100
    kwargs = {"reduction": reduction}
    loss = F.cross_entropy(x, target, **kwargs)
    (magnitude,) = formula("Functional.cross_entropy", [x, target], kwargs, None)
    assert family("Functional.cross_entropy") == "formula"
    assert magnitude.shape == loss.shape and bool((magnitude >= loss.abs() * (1 - 1e-12)).all())
    leaf = x.clone().requires_grad_()
    grad = torch.randn(loss.shape, generator=g, dtype=torch.float64)
    (exact,) = torch.autograd.grad(F.cross_entropy(leaf, target, **kwargs), [leaf], grad)
    (found,) = formula("Functional.cross_entropy", [x, target], kwargs, [grad])
    assert found.shape == exact.shape and bool((found >= exact.abs() * (1 - 1e-12)).all())
    assert bool((found[5] == 0).all())
    with pytest.raises(ValueError):
        formula("Functional.cross_entropy", [x, target], {"label_smoothing": 0.1}, None)


@pytest.mark.parametrize("masking", ["none", "causal", "bool mask"])
def test_the_attention_magnitude_bounds_its_output_and_gradients(masking):
    """softmax(Q K^T s) V with every difference a sum of magnitudes is at least |the result|,
    forward and each of Q's, K's and V's gradients (the triangle inequality)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64) for _ in range(3))
    kwargs: dict = {"is_causal": masking == "causal"}
    if masking == "bool mask":
        kwargs["attn_mask"] = torch.rand(5, 5, generator=g) > 0.3
        kwargs["attn_mask"][:, 0] = True  # no row without a key
    api = "Functional.scaled_dot_product_attention"
    (magnitude,) = formula(api, [q, k, v], kwargs, None)
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert bool((magnitude >= out.abs() * (1 - 1e-12)).all())
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    grad = torch.randn(out.shape, generator=g, dtype=torch.float64)
    exact = torch.autograd.grad(F.scaled_dot_product_attention(*leaves, **kwargs), leaves, grad)
    for found, value in zip(formula(api, [q, k, v], kwargs, [grad]), exact):
        assert found.shape == value.shape and bool((found >= value.abs() * (1 - 1e-12)).all())


def test_tf32_attention_operands_are_an_error_and_fp32_passes_with_the_formula():
    """The attention formula makes room for what fp32 rounds, not for TF32's 10-bit operands: 64 queries
    and keys of 64, forward and the three gradients."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 64, generator=g) for _ in range(3))
    tf32 = [d.round_mantissa(t.double(), 10).float() for t in (q, k, v)]
    api = "Functional.scaled_dot_product_attention"
    fn = F.scaled_dot_product_attention
    assert _judged(api, fn, [q, k, v], [fn(q, k, v)]) == ["pass"]
    assert _judged(api, fn, [q, k, v], [fn(*tf32)]) == ["error"]
    grad = torch.randn(2, 4, 64, 64, generator=g)
    for operands, expected in (((q, k, v), "pass"), (tf32, "error")):
        leaves = [t.clone().requires_grad_() for t in operands]
        found = torch.autograd.grad(fn(*leaves), leaves, grad)
        assert _judged(api, fn, [q, k, v], list(found), grad) == [expected] * 3


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_conv_magnitude_without_the_forward_is_the_autograd_one_to_the_bit(dims, dtype):
    """conv.gradients calls the backward kernel the autograd node calls, without the forward: the
    same gradients bit for bit, all together or one at a time, over stride, padding, dilation,
    groups, bias, unbatched inputs, keyword arguments and an input that took no gradient (the
    step's first conv)."""
    fn = F.conv1d if dims == 1 else F.conv2d
    torch.manual_seed(dims)
    compared = 0
    for stride, padding, dilation, groups, bias, batched, by_keyword, flags in itertools.product(
        (1, 2), (0, 1), (1, 2), (1, 2), (True, False), (True, False), (False, True), ([], [False, True, True])
    ):
        x = torch.randn(*([3] if batched else []), 4, *([9] * dims))
        w = torch.randn(6, 4 // groups, *([3] * dims))
        b = torch.randn(6) if bias else None
        g = torch.randn_like(fn(x, w, b, stride, padding, dilation, groups))
        options = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        args, kwargs = ([x, w], {"bias": b, **options}) if by_keyword else ([x, w, b, *options.values()], {})
        name = EntryName(f"Functional.conv{dims}d.0.backward", "Functional", f"conv{dims}d", 0, "backward")
        call = Call(name, fn, fn, args, kwargs, [], grad_flags=flags)
        side = absolute(Side("cpu", dtype, None, True))
        expected, found = gradients(side, call, [g]), conv.gradients(call, [g], side)
        assert len(found) == len(expected)
        for index, (want, got) in enumerate(zip(expected, found)):
            assert (want is None and got is None) or torch.equal(want, got)
            alone = conv.gradients(call, [g], side, only=index)  # that gradient's run alone
            assert (want is None and alone[index] is None) or torch.equal(want, alone[index])
            assert all(other is None for i, other in enumerate(alone) if i != index)
            compared += want is not None
    assert compared > 256


def test_a_conv_magnitude_over_a_quarter_of_its_terms_is_a_lower_bound():
    """The first magnitude the dtype standard asks of a conv: over every 4th output channel (the
    input's gradient), batch element (the weight's, the bias's) or input channel (the forward), in
    float32, times the float32 run's factor. At every element at most the float64 magnitude of all
    the terms, and near a quarter of it; none where there is no such part to take (groups, no batch)."""
    torch.manual_seed(0)
    for groups, batched in itertools.product((1, 2), (True, False)):
        x = torch.randn(*([8] if batched else []), 4, 9, 9)
        w, b = torch.randn(8, 4 // groups, 3, 3), torch.randn(8)
        g = torch.randn_like(F.conv2d(x, w, b, 1, 1, 1, groups))
        args = [x, w, b, 1, 1, 1, groups]
        call = Call(EntryName("Functional.conv2d.0.backward", "Functional", "conv2d", 0, "backward"), F.conv2d,
                    F.conv2d, args, {}, [])  # fmt: skip
        whole = conv.gradients(call, [g], absolute(Side("cpu", torch.float64, None, True)))
        terms = terms_bound("Functional.conv2d", [x, w, b], [g])
        for index in range(3):
            if (index == 0 and groups > 1) or (index > 0 and not batched):
                with pytest.raises(ValueError):
                    conv.gradients(call, [g], absolute(Side("cpu", torch.float32, None, True)), index, 4)
                continue
            part = conv.gradients(call, [g], absolute(Side("cpu", torch.float32, None, True)), index, 4)
            bound = lower_bound(part, terms)[index]
            assert all(other is None for i, other in enumerate(part) if i != index)
            assert bound.dtype == torch.float32 and torch.all(bound <= whole[index])
            assert 0.1 < float(bound.sum() / whole[index].sum()) < 0.5
        on = replace(call, name=EntryName("Functional.conv2d.0.forward", "Functional", "conv2d", 0, "forward"))
        whole_forward = forward(absolute(Side("cpu", torch.float64, None, True)), on)[0]
        if groups > 1:
            with pytest.raises(ValueError):
                conv.sampled(on, absolute(Side("cpu", torch.float32, None, True)), 4)
            continue
        part = lower_bound(conv.sampled(on, absolute(Side("cpu", torch.float32, None, True)), 4), terms)[0]
        assert torch.all(part <= whole_forward) and 0.1 < float(part.sum() / whole_forward.sum()) < 0.6


@pytest.mark.parametrize("mode", ["random", "real"])
def test_a_conv_backward_entry_s_benchmark_runs_its_backward_kernel_alone(mode):
    """The float64 benchmark of a conv's backward entry calls convolution_backward without the forward
    autograd would run first (a third of its work); the tested side runs through autograd as the
    step did. Its gradients are autograd's bit for bit (tests/data/cnn_fp32's conv entries)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from pytest_msprobe.dumps.dump import parse_entry_name, read_dump
    from pytest_msprobe.frameworks import RunOptions, Tested
    from pytest_msprobe.frameworks import pytorch as pt

    class Float64Kernels(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in args):
                self.seen.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    dump = read_dump(DATA / "cnn_fp32" / "dump.json")
    names = [name for name in dump.entries if name.startswith("Functional.conv2d.") and name.endswith(".backward")]
    options = RunOptions("cpu", Tested.DEVICE, mode, 1234)
    assert names
    for full in names:
        entry = parse_entry_name(full)
        with Float64Kernels() as kernels:
            run = pt.PyTorch().run(dump, entry, options)
        assert "convolution_backward" in kernels.seen and "convolution" not in kernels.seen
        call = pt.build_call(dump, entry, pt.resolve(entry, False, "cpu"), mode, 1234)
        grad_outputs = pt.backward_sides(dump, call, options).grad_outputs
        expected = gradients(Side("cpu", torch.float64, call.autocast, True), call, grad_outputs)
        compared = [pair for pair in run.pairs if not pair.skip]
        assert compared and all(np.array_equal(pair.bench, expected[pair.index].numpy()) for pair in compared)
