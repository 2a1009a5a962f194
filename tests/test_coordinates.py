"""The rounding of a resampling's source coordinates in the dtype standard (frameworks/coordinates.py).

A correct fp32 kernel computes each output's source coordinate in fp32: at a non-integer scale (64 to
56) PyTorch's own bilinear interpolate was 30 times its budget. The model moves every coordinate by what
fp32 may round it by, through the float64 benchmark's own weights: PyTorch's kernels in fp32, bf16 and
fp16, scales up and down, align_corners both, every mode, pass; a half-pixel offset, weights or
coordinates in bf16, nearest that rounds, a grid without its half pixel are errors
(tests/deficits_resample.py; bench/studies/coordinate_rounding.md).
"""

from __future__ import annotations

import deficits as d
import deficits_resample as r
import pytest
import torch
import torch.nn.functional as F
from test_deficits_e2e import judge_cases

from conftest import read_csv, run_msprobe
from pytest_msprobe.frameworks import coordinates
from pytest_msprobe.frameworks.magnitudes import structural, terms_of

CALLS = [
    (1, {"size": 37, "mode": "linear", "align_corners": False}),
    (1, {"scale_factor": 0.6, "mode": "nearest"}),
    (2, {"size": (56, 56), "mode": "bilinear", "align_corners": False}),
    (2, {"size": (61, 61), "mode": "bilinear", "align_corners": True}),
    (2, {"scale_factor": 1.7, "mode": "bilinear", "align_corners": False}),
    (2, {"size": (7, 7), "mode": "bicubic", "align_corners": False}),
    (2, {"size": (24, 24), "mode": "bicubic", "align_corners": True}),
    (2, {"scale_factor": 2, "mode": "nearest"}),
    (2, {"size": (9, 9), "mode": "nearest-exact"}),
    (2, {"size": (5, 5), "mode": "area"}),
    (2, {"size": (24, 24), "mode": "bilinear", "antialias": True}),
    (2, {"size": (27, 27), "mode": "bicubic", "antialias": True, "align_corners": True}),
    (3, {"size": (9, 5, 7), "mode": "trilinear", "align_corners": False}),
    (3, {"scale_factor": 1.5, "mode": "nearest"}),
]


@pytest.mark.parametrize("dims, kwargs", CALLS)
def test_the_weights_are_the_float64_kernels_own(dims, kwargs):
    """The model's per-axis weights give PyTorch's float64 interpolate and its gradient (to 1e-12):
    the term moves the benchmark's own coordinates, not another kernel's."""
    x = torch.randn(2, 3, *([13] if dims == 1 else [14, 16] if dims == 2 else [6, 7, 8]), dtype=torch.float64)
    leaf = x.clone().requires_grad_(True)
    y = F.interpolate(leaf, **kwargs)
    g = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, leaf, g)
    resample = coordinates.resample_of("interpolate", x, [x], kwargs)
    matrices = [coordinates.axis_matrix(resample, a, n) for a, n in enumerate(x.shape[2:])]
    assert torch.allclose(coordinates._forward(x, matrices), y, rtol=0, atol=1e-12)
    assert torch.allclose(coordinates._backward(g, matrices), dx, rtol=0, atol=1e-12)


def test_a_correct_fp32_bilinear_at_a_non_integer_scale_is_within_the_coordinates_rounding():
    """PyTorch's fp32 bilinear 64 -> 56 is off the float64 benchmark by up to 4e-6 (35 ULP at 1), the
    coordinates' rounding through the slope; the term reaches it, and twice it (c_round) covers it."""
    x = torch.rand(1, 3, 64, 64)
    kwargs = {"size": (56, 56), "mode": "bilinear", "align_corners": False}
    error = (F.interpolate(x, **kwargs).double() - F.interpolate(x.double(), **kwargs)).abs()
    term = structural("Functional.interpolate", [x], kwargs, None)[0]
    magnitude = F.interpolate(x.double().abs(), **kwargs)
    assert float(error.max()) > 30 * 2.0**-23
    assert bool((error <= 2 * term + 32 * 2.0**-24 * magnitude + 1.5 * 2.0**-23).all())


@pytest.mark.parametrize("kwargs", [{"size": (16, 16), "mode": "bilinear"}, {"size": (5, 5), "mode": "area"}])
def test_nothing_is_rounded_where_no_coordinate_is_computed(kwargs):
    """An input as large as its output is copied (interpolate's kernels compute no coordinate), and
    area reads integer windows: the term is 0."""
    x = torch.randn(1, 2, 16, 16) if kwargs["mode"] == "bilinear" else torch.randn(1, 2, 15, 15)
    assert not structural("Functional.interpolate", [x], kwargs, None)[0].any()


def test_nearest_may_read_either_neighbour_where_its_coordinate_is_an_integer_in_exact_arithmetic():
    """20 outputs of 14 inputs: d 14/20 is an integer at d = 10, where fp32 may fall on either side of
    it: the term there is the neighbour's difference, elsewhere 0."""
    x = torch.arange(14.0).reshape(1, 1, 14) ** 2
    term = structural("Functional.interpolate", [x], {"size": 20, "mode": "nearest"}, None)[0][0, 0]
    assert float(term[10]) == 7.0**2 - 6.0**2 and not term[torch.arange(20) != 10].any()


def test_the_backward_sums_what_each_output_coordinate_may_move():
    """An input's gradient sums outputs whose coordinates round independently: the term bounds every
    pattern of their signs, where moving them all one way would cancel between neighbours."""
    x = torch.randn(1, 1, 64)
    kwargs = {"size": 56, "mode": "linear", "align_corners": False}
    g = torch.randn(1, 1, 56, dtype=torch.float64)
    back = structural("Functional.interpolate", [x], kwargs, [g])[0][0, 0]
    resample = coordinates.resample_of("interpolate", x, [x], kwargs)
    exact = coordinates.axis_matrix(resample, 0, 64)
    step = coordinates.ROUNDINGS * 2.0**-24
    up, down = (coordinates.axis_matrix(resample, 0, 64, sign * step) - exact for sign in (1.0, -1.0))
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        signs = torch.randint(0, 2, (56, 1), generator=generator).bool()
        moved = (torch.where(signs, up, down).T @ g[0, 0]).abs()
        assert bool((moved <= back * (1 + 1e-9)).all())
    assert float((up.T @ g[0, 0]).abs().sum()) < float(back.sum()) / 1.5


def test_affine_grids_magnitude_is_its_terms_and_its_gradient_sums_the_positions():
    theta = torch.tensor([[[0.5, -0.4, 0.1], [0.4, 0.5, -0.2]]], dtype=torch.float64)
    size = [1, 3, 5, 6]
    from pytest_msprobe.frameworks.magnitudes import formula

    (forward,) = formula("Functional.affine_grid", [theta, size], {"align_corners": False}, None)
    base = F.affine_grid(torch.eye(2, 3, dtype=torch.float64)[None], size, align_corners=False)[0]
    expected = (
        base[..., :1].abs() * theta[0, :, 0].abs() + base[..., 1:].abs() * theta[0, :, 1].abs() + theta[0, :, 2].abs()
    )
    assert torch.allclose(forward[0], expected)
    g = torch.ones(1, 5, 6, 2, dtype=torch.float64)
    assert terms_of("Functional.affine_grid", [theta], [g], 0, 6) == 30


# -- end to end: the cases of tests/deficits_resample.py through the plugin -------------------------


@pytest.mark.slow
def test_resampling_deficits_are_errors_and_correct_kernels_pass_in_recorded_mode(pytester):
    """PyTorch's interpolate in fp32, bf16 and fp16 (bilinear, bicubic, nearest, nearest-exact, linear,
    trilinear, area, antialiased; scales up and down, align_corners both), a bilinear whose coordinate is
    fused otherwise, grid_sample and affine_grid pass; a half-pixel offset, weights in bf16, coordinates in
    bf16 or fp16, nearest rounding its coordinate, a grid without its half pixel or in bf16 and a base grid
    in bf16 are errors, forward and backward."""
    cases = list(r.RESAMPLE_CASES)
    assert {case.deficit for case in cases} == {True, False}
    problems = judge_cases(pytester, cases, "resample")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("standard", ["dtype", "basic"])
def test_pytorchs_resampling_kernels_are_judged_by_running_them_on_the_cpu(pytester, standard):
    """cpu mode runs PyTorch's own kernels again: under dtype every entry passes; under basic (Cosine >
    0.99, MaxAbsErr < 1e-4) the bf16 and fp16 ones fail at their dtype's rounding floor, and say so."""
    cases = [case for case in r.RESAMPLE_CASES if not case.deficit and case.name.startswith("torch_")]
    d.write_cases(pytester.path / "dump", cases)
    result = run_msprobe(pytester, pytester.path / "dump" / "dump.json", "--msprobe-standard", standard, device="cpu")
    rows = read_csv(pytester.path / "out", "details")
    failing = [row for row in rows if row["Status"] != "pass"]
    if standard == "dtype":
        assert result.ret == 0 and not failing, [(row["API Name"], row["Message"]) for row in failing]
    else:
        assert failing and all(row["Tested Dtype"] in ("torch.bfloat16", "torch.float16") for row in failing)
        assert all("rounding budget (--msprobe-standard dtype passes it)" in row["Message"] for row in failing)
