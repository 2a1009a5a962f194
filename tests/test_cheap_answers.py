"""The dtype standard's cheaper extra runs, asked before the full ones: each at most the full
answer, so the verdict is the one the full answers give (frameworks/magnitudes.py, budget.read)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pytest_msprobe.frameworks.magnitudes import lower_bound, terms_bound
from pytest_msprobe.frameworks.torch_engine import Side, perturbed
from pytest_msprobe.judging.compare import ExtraRuns
from pytest_msprobe.judging.standards.budget import FORMATS, read

CASES = {
    "conv2d": (F.conv2d, [(8, 6, 20, 20), (12, 3, 3, 3), (12,)], {"stride": 2, "padding": 1, "groups": 2}),
    "conv1d": (F.conv1d, [(16, 4, 300), (5, 4, 7)], {}),
    "conv3d": (F.conv3d, [(2, 3, 6, 6, 6), (4, 3, 2, 2, 2)], {}),
    "linear": (F.linear, [(4, 50, 96), (24, 96), (24,)], {}),
    "matmul": (torch.matmul, [(3, 20, 64), (64, 10)], {}),
    "mm": (torch.mm, [(2000, 8), (8, 5)], {}),
    "bmm": (torch.bmm, [(4, 10, 70), (4, 70, 6)], {}),
    "addmm": (torch.addmm, [(6,), (9, 40), (40, 6)], {}),
}


def magnitudes(fn, inputs, kwargs, dtype, ones=False):
    """The forward on |inputs| and every input's gradient with |grad_output|, in `dtype`."""
    leaves = [t.abs().to(dtype).requires_grad_() for t in inputs]
    out = fn(*leaves, **kwargs)
    g = torch.linspace(0.5, 2.0, out.numel(), dtype=torch.float64).reshape(out.shape)
    g = torch.ones_like(g) if ones else g
    grads = torch.autograd.grad(out, leaves, g.to(dtype))
    return [out.detach(), *grads], g


@pytest.mark.parametrize("api", CASES)
def test_a_contraction_in_float32_times_the_factor_is_below_float64(api):
    fn, shapes, kwargs = CASES[api]
    generator = torch.Generator().manual_seed(0)
    # lognormal magnitudes over several binades: every product rounded in float32
    inputs = [torch.exp(3 * torch.randn(s, generator=generator, dtype=torch.float64)).float() for s in shapes]
    exact, g = magnitudes(fn, inputs, kwargs, torch.float64)
    fast, _ = magnitudes(fn, inputs, kwargs, torch.float32)
    terms = terms_bound(api, inputs, [g])
    assert terms is not None
    for low, full in zip(lower_bound(fast, terms), exact):
        assert bool((low <= full).all())
        assert bool((low >= full * (1 - 4 * (terms + 4) * 2.0**-24)).all())  # and not far below it


@pytest.mark.parametrize("api", CASES)
def test_the_bound_counts_every_term(api):
    """On all-ones inputs a contraction's output counts its terms (the bias one more)."""
    fn, shapes, kwargs = CASES[api]
    ones = [torch.ones(s, dtype=torch.float64) for s in shapes]
    counts, g = magnitudes(fn, ones, kwargs, torch.float64, ones=True)
    terms = terms_bound(api, ones, [g])
    assert terms is not None
    assert max(int(c.max()) for c in counts) <= terms + 1


def test_no_bound_for_what_is_no_contraction():
    x = torch.ones(4, 4)
    assert terms_bound("Functional.sum", [x, x], None) is None
    assert terms_bound("Torch.einsum", [x, x], None) is None


def test_the_perturbation_is_1_plus_or_minus_relative_at_random():
    t = torch.randn(3, 40, dtype=torch.float64)
    relative = 2.0**-24
    placed = perturbed(Side("cpu", torch.float64), relative, 7).place(t)
    generator = torch.Generator().manual_seed(7)
    signs = torch.randint(0, 2, t.shape, generator=generator).to(t.dtype) * 2 - 1
    assert torch.equal(placed, t * (1 + relative * signs))


def test_the_float32_magnitude_settles_what_it_can_and_float64_the_rest():
    fmt = FORMATS["float32"]
    bench = np.array([1e-6, 1.0])
    # 2e-12 off where the terms' magnitude is 1 (32 u_acc x 1 = 1.9e-6): far over 1.5 ULP of 1e-6
    tested = bench + np.array([1e-6 * 2.0**-5, 0.0])
    full = np.array([1.0, 1.0])
    asked: list[str] = []

    def probes(low: float) -> ExtraRuns:
        return ExtraRuns(
            magnitude=lambda: asked.append("float64") or full,
            lower_magnitude=lambda: asked.append("float32") or full * low,
        )

    alone = read(tested, bench, fmt, ExtraRuns(magnitude=lambda: full))
    assert alone.ratio <= 1
    settled = read(tested, bench, fmt, probes(0.999))
    assert settled.ratio <= 1 and asked == ["float32"]
    asked.clear()
    # A bound too low to settle it: float64 is asked, and its reading is the one given.
    unsettled = read(tested, bench, fmt, probes(1e-6))
    assert asked == ["float32", "float64"] and unsettled.ratio == alone.ratio


def test_one_seed_first_then_all():
    fmt = FORMATS["float32"]
    bench = np.array([1e-3, 1.0])
    tested = bench + np.array([1e-3 * 2.0**-12, 0.0])  # 2^11 ULP off
    asked: list[str] = []

    def spread(name: str, value: float):
        return lambda _u: asked.append(name) or np.array([value, 0.0])

    for once, settled_by in ((1e-7, ["once"]), (1e-12, ["once", "all"])):
        asked.clear()
        reading = read(tested, bench, fmt, ExtraRuns(spread_once=spread("once", once), spread=spread("all", 1e-7)))
        assert reading.ratio <= 1 and asked == settled_by
