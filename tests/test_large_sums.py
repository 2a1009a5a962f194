"""The dtype standard on what a correct kernel does over many terms: long sums, batch statistics,
pooling windows. The first ResNet-50 step a user brings has all three, and a correct fp32 CPU
kernel there must not be called an error (bench/studies/kernel_bounds.md, "Partial sums over K").
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import DATA, read_csv, run_msprobe
from pytest_msprobe.compare import ExtraRuns
from pytest_msprobe.dump import EntryName
from pytest_msprobe.frameworks.magnitudes import family, formula, terms_of, with_magnitudes
from pytest_msprobe.frameworks.torch_engine import Call, Side, Sides, gradients
from pytest_msprobe.standards.budget import FORMATS, read

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


def test_a_fp32_sum_in_order_over_a_million_same_sign_terms_passes_and_a_bf16_one_fails():
    """Sequential fp32 accumulation of positive terms errs like sqrt(K) u |b|, beyond what a constant
    times u m allows once K is large; the length term passes it, and still fails bf16 accumulation."""
    k = 1 << 20
    terms = torch.rand(k, generator=torch.Generator().manual_seed(0), dtype=torch.float64).numpy()
    exact = np.array([terms.sum()])
    in_order = np.array([np.cumsum(terms.astype(np.float32))[-1]], dtype=np.float64)  # numpy's cumsum adds in order
    in_bf16 = exact * (1 + 2.0**-9)  # one bf16 rounding of the result alone is more than fp32 accumulation allows
    fmt = FORMATS["float32"]
    length = ExtraRuns(terms=lambda: k)
    without = read(in_order, exact, fmt, ExtraRuns())
    assert without.ratio > 1  # what the standard said before it knew K
    assert read(in_order, exact, fmt, length).ratio <= 1
    assert read(in_bf16, exact, fmt, length).status(1.1) == "error"


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
