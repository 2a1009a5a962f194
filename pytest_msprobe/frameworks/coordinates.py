"""Where a resampling API reads its input, and what a correct kernel's rounding of it moves each output by.

interpolate (every mode), upsample_* and grid_sample compute, for each output element, the source
coordinate it reads (`scale (dst + 0.5) - 0.5`, `(grid + 1) size / 2 - 1/2`, ...) and weights from it.
PyTorch's CPU and CUDA kernels and Ascend's compute them in the kernel's opmath dtype (fp32 for fp32,
bf16 and fp16 tensors); the float64 benchmark computes them in float64. At a non-integer scale an fp32
coordinate is off by a few units of 2^-24 of its size, and the output by that times its slope along
the axis: a correct fp32 bilinear interpolate from 64 to 56 is 30 times the budget of a sum's rounding.

The model: each source coordinate may be off by `ROUNDINGS u (|src| + 1)` (u the opmath dtype's unit
roundoff; three roundings: the scale, its product, the offset), and the term of an output element is
what moving its coordinates that far moves it, axis by axis (`|y(src + d) - y(src)|`, the larger side,
summed over the axes): the slope for linear and cubic weights, a neighbour's value where nearest's
floor may fall on either side of an integer, forward and backward alike (the backward routes each
gradient through the same weights). It is exact arithmetic in float64 on the interpolation's own
weight matrices, one per axis (the separable modes), or on the grid moved (grid_sample): no kernel's
error pattern, any correct kernel's reach. The constant: bench/studies/coordinate_rounding.md.

area (adaptive average pooling) and the integer scales of nearest read integer windows: nothing to
round. affine_grid is a product of its theta and fixed coordinates: magnitudes.py's formula.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

# Roundings of a source coordinate, each at most u (|src| + 1): the scale (in/out or 1/scale_factor), its
# product with the output index and the half-pixel offset (bench/studies/coordinate_rounding.md).
ROUNDINGS = 3.0

# The resampling APIs whose coordinates are computed (msprobe's names; aten's with their overloads cut).
INTERPOLATE = frozenset({"interpolate", "upsample", "upsample_bilinear", "upsample_nearest"})
ATEN_UPSAMPLE = {
    "upsample_nearest1d": ("nearest", False),
    "upsample_nearest2d": ("nearest", False),
    "upsample_nearest3d": ("nearest", False),
    "_upsample_nearest_exact1d": ("nearest-exact", False),
    "_upsample_nearest_exact2d": ("nearest-exact", False),
    "_upsample_nearest_exact3d": ("nearest-exact", False),
    "upsample_linear1d": ("linear", False),
    "upsample_bilinear2d": ("linear", False),
    "upsample_trilinear3d": ("linear", False),
    "upsample_bicubic2d": ("bicubic", False),
    "_upsample_bilinear2d_aa": ("linear", True),
    "_upsample_bicubic2d_aa": ("bicubic", True),
}
GRID_SAMPLE = frozenset({"grid_sample", "grid_sampler", "grid_sampler_2d", "grid_sampler_3d"})
RESAMPLING = INTERPOLATE | frozenset(ATEN_UPSAMPLE) | GRID_SAMPLE


def resamples(api: str) -> bool:
    return api.rsplit(".", 1)[-1] in RESAMPLING


def separable(api: str) -> bool:
    """interpolate and upsample_*: one weight matrix per spatial axis (grid_sample reads a grid)."""
    return resamples(api) and api.rsplit(".", 1)[-1] not in GRID_SAMPLE


@dataclass(frozen=True)
class Resample:
    """A separable resampling as its kernel computes it: per spatial axis the output size, the
    scale_factor given (None: from the sizes), the mode, align_corners and antialias."""

    sizes: tuple[int, ...]
    scale_factors: tuple[float | None, ...]
    mode: str  # nearest, nearest-exact, linear (1 to 3 axes), bicubic, area
    align_corners: bool
    antialias: bool


def unit_of(tensors: Sequence[torch.Tensor]) -> float:
    """The unit roundoff of the dtype a correct kernel computes coordinates in: fp32 (opmath) for
    fp32, bf16 and fp16 tensors, float64's own for float64."""
    wide = any(t.dtype == torch.float64 for t in tensors)
    return 2.0**-53 if wide else 2.0**-24


def coordinate_rounding(api: str, args: Sequence[Any], kwargs: dict[str, Any], grad_outputs: list | None) -> list:
    """What a correct kernel's rounding of its source coordinates (and of cubic and antialiased weights)
    moves each output by (backward: each floating input's gradient), in float64; raises for an API or
    a call without a model."""
    if api.rsplit(".", 1)[-1] in GRID_SAMPLE:
        return _grid_sample(args, kwargs, grad_outputs)
    values, resample, shape, backward = _separable(api, args, kwargs, grad_outputs)
    u = unit_of([args[0] if args else kwargs["input"]])
    exact = [axis_matrix(resample, a, n) for a, n in enumerate(shape)]
    if u < 2.0**-24:  # a float64 kernel computes the benchmark's own coordinates and weights
        return [torch.zeros(values.shape[:2] + (tuple(shape) if backward else resample.sizes), dtype=torch.float64)]
    moved = torch.zeros(values.shape[:2] + (tuple(shape) if backward else resample.sizes), dtype=torch.float64)
    for a, n_in in enumerate(shape):
        # Each output index along the axis has its own coordinate, rounded its own way.
        shifts = [axis_matrix(resample, a, n_in, sign * ROUNDINGS * u) - exact[a] for sign in (1.0, -1.0)]
        if backward:
            # An input's gradient sums outputs whose coordinates err independently: |shift|^T |h|, h the
            # gradient through the other axes' weights.
            others = _along_all(values, exact, skip=a, transpose=True).abs_()
            moved += _along(others, torch.maximum(shifts[0].abs(), shifts[1].abs()), a, transpose=True)
        else:
            others = _along_all(values, exact, skip=a, transpose=False)
            up, down = (_along(others, shift, a, False).abs_() for shift in shifts)
            moved += torch.maximum(up, down)
    weights = [weight_matrix(resample, a, n, u) for a, n in enumerate(shape)]
    if any(bool(rounding.any()) for _, rounding in weights):
        # A product of one weight per axis: each axis's rounding times the others' magnitudes.
        size = values.abs()
        for a in range(len(shape)):
            matrices = [w[1] if b == a else w[0] for b, w in enumerate(weights)]
            moved += _along_all(size, matrices, skip=None, transpose=backward)
    return [moved]


def resampled_magnitude(api: str, args: Sequence[Any], kwargs: dict[str, Any], grad_outputs: list | None) -> list:
    """The magnitude of the terms a separable resampling sums, |W| |x| (backward |W|^T |g|): a cubic
    kernel's negative weights cancel in the benchmark on |x|, not in what its kernel rounds."""
    values, resample, shape, backward = _separable(api, args, kwargs, grad_outputs)
    weights = [axis_matrix(resample, a, n).abs() for a, n in enumerate(shape)]
    return [(_backward if backward else _forward)(values.abs(), weights)]


def _separable(
    api: str, args: Sequence[Any], kwargs: dict[str, Any], grad_outputs: list | None
) -> tuple[torch.Tensor, Resample, tuple[int, ...], bool]:
    """(the values it resamples in float64: the input, or backward the gradient; the resampling; the
    input's spatial shape; whether backward)."""
    name = api.rsplit(".", 1)[-1]
    x = args[0] if args else kwargs.get("input")
    if name in GRID_SAMPLE or not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"{api}: no separable resampling of a floating input")
    resample = resample_of(name, x, args, kwargs)
    g = next((t for t in grad_outputs or () if isinstance(t, torch.Tensor)), None)
    if grad_outputs is not None and g is None:
        raise ValueError("no grad_output")
    values = (g if g is not None else x).detach().to(torch.float64)
    return values, resample, tuple(x.shape[2:]), g is not None


def _along(x: torch.Tensor, matrix: torch.Tensor, axis: int, transpose: bool) -> torch.Tensor:
    """x (N, C, *spatial) through one axis's (out, in) matrix, or its transpose (backward)."""
    m = matrix.T if transpose else matrix
    return torch.movedim(torch.tensordot(x, m, dims=([2 + axis], [1])), -1, 2 + axis)


def _along_all(x: torch.Tensor, matrices: list[torch.Tensor], skip: int | None, transpose: bool) -> torch.Tensor:
    for a, matrix in enumerate(matrices):
        if a != skip:
            x = _along(x, matrix, a, transpose)
    return x


def _forward(x: torch.Tensor, matrices: list[torch.Tensor]) -> torch.Tensor:
    """x (N, C, *in) through each axis's (out, in) matrix."""
    return _along_all(x, matrices, None, False)


def _backward(g: torch.Tensor, matrices: list[torch.Tensor]) -> torch.Tensor:
    """The input's gradient: g (N, C, *out) through each axis's matrix transposed."""
    return _along_all(g, matrices, None, True)


def resample_of(name: str, x: torch.Tensor, args: Sequence[Any], kwargs: dict[str, Any]) -> Resample:
    """The call's resampling in the terms of its kernel (F.interpolate's rules: a size or a
    scale_factor, recompute_scale_factor, the deprecated upsample aliases; aten's upsample_*)."""
    axes = x.dim() - 2
    if axes < 1:
        raise ValueError("an input without spatial dimensions")
    if name in ATEN_UPSAMPLE:
        mode, antialias = ATEN_UPSAMPLE[name]
        bound = _bound_aten(mode, args, kwargs)
        sizes = _per_axis(bound["output_size"], axes)
        given = _per_axis(bound["scales"], axes, allow_none=True)
        return Resample(tuple(int(s) for s in sizes), given, mode, bool(bound["align_corners"]), antialias)
    names: tuple[str, ...] = ("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor")
    names += ("antialias",)
    p: dict[str, Any] = {"size": None, "scale_factor": None, "mode": "nearest", "align_corners": None}
    p.update({"recompute_scale_factor": None, "antialias": False})
    if name in ("upsample_bilinear", "upsample_nearest"):  # (input, size, scale_factor)
        names = names[:3]
        if name == "upsample_bilinear":
            p.update(mode="bilinear", align_corners=True)
    p.update(zip(names, args))
    p.update({k: v for k, v in kwargs.items() if k in names})
    mode = str(p["mode"])
    kind = {"linear": "linear", "bilinear": "linear", "trilinear": "linear", "bicubic": "bicubic"}.get(mode, mode)
    if kind not in ("nearest", "nearest-exact", "linear", "bicubic", "area"):
        raise ValueError(f"interpolate's mode {mode!r} has no model")
    in_sizes = x.shape[2:]
    if p["size"] is not None:
        sizes = tuple(int(s) for s in _per_axis(p["size"], axes))
        factors: tuple[float | None, ...] = (None,) * axes
    else:
        scales = _per_axis(p["scale_factor"], axes)
        sizes = tuple(math.floor(float(n) * float(s)) for n, s in zip(in_sizes, scales))
        # recompute_scale_factor: the kernel is given the sizes alone
        factors = (None,) * axes if p["recompute_scale_factor"] else tuple(float(s) for s in scales)
    return Resample(sizes, factors, kind, bool(p["align_corners"]), bool(p["antialias"]))


def _bound_aten(mode: str, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """aten's upsample_*(input, output_size, [align_corners,] scales...) and their .vec overloads
    (input, output_size, [align_corners,] scale_factors)."""
    rest = list(args[1:])
    p: dict[str, Any] = {"output_size": kwargs.get("output_size"), "align_corners": kwargs.get("align_corners", False)}
    if rest:
        p["output_size"] = rest.pop(0)
    if mode not in ("nearest", "nearest-exact") and rest:
        p["align_corners"] = rest.pop(0)
    scales = [v for k, v in kwargs.items() if k.startswith("scale")]
    p["scales"] = rest[0] if len(rest) == 1 and isinstance(rest[0], (list, tuple)) else rest or scales or None
    if p["output_size"] is None:
        raise ValueError("an upsample without its output_size")
    return p


def _per_axis(value: Any, axes: int, allow_none: bool = False) -> tuple:
    if value is None:
        if allow_none:
            return (None,) * axes
        raise ValueError("neither a size nor a scale_factor")
    if isinstance(value, (list, tuple, torch.Size)):
        values = list(value)
        if len(values) == 1:
            values *= axes
        if len(values) != axes:
            raise ValueError(f"{len(values)} sizes for {axes} spatial dimensions")
        return tuple(values)
    return (value,) * axes


def _scale(n_in: int, n_out: int, align_corners: bool, factor: float | None) -> float:
    """area_pixel_compute_scale: the source step of one output index."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / factor if factor is not None and factor > 0 else n_in / n_out


def axis_matrix(resample: Resample, axis: int, n_in: int, moved: float = 0.0) -> torch.Tensor:
    """(out, in) float64 weights of one axis as PyTorch's float64 kernel computes them, each source
    coordinate moved by `moved` (|src| + 1) (0: the benchmark's own)."""
    n_out, factor = resample.sizes[axis], resample.scale_factors[axis]
    mode = resample.mode
    dst = torch.arange(n_out, dtype=torch.float64)
    matrix = torch.zeros(n_out, n_in, dtype=torch.float64)
    rows = torch.arange(n_out)
    if mode == "area":
        for i in range(n_out):  # adaptive average pooling's integer windows
            start, end = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
            matrix[i, start:end] = 1.0 / (end - start)
        return matrix
    if mode in ("nearest", "nearest-exact"):
        # nearest_idx: float (fp32) arithmetic in every kernel, float64's too; an input as large as the
        # output is copied, and twice its size halves the index.
        exact_step = 1.0 / factor if factor else n_in / n_out
        offset = 0.5 if mode == "nearest-exact" else 0.0
        src = ((dst.float() + offset) * torch.tensor(exact_step, dtype=torch.float32)).double()
        src = src + _moves((dst + offset) * exact_step, exact_step, moved)
        index = src.floor().long().clamp(0, n_in - 1)
        if n_out == n_in:
            index = rows
        elif moved == 0.0 and n_out == 2 * n_in and mode == "nearest":
            index = rows // 2
        matrix[rows, index] = 1.0
        return matrix
    scale = _scale(n_in, n_out, resample.align_corners, factor)
    if resample.antialias:
        return _antialias(mode, scale, n_in, n_out, moved)
    cubic = mode == "bicubic"
    src = scale * dst if resample.align_corners else scale * (dst + 0.5) - 0.5
    src = src + _moves(src, scale, moved, scale * (dst if resample.align_corners else dst + 0.5))
    if not cubic:
        src = src.clamp(min=0.0)
        if n_out == n_in:  # copied, whatever the scale: no coordinate computed
            matrix[rows, rows] = 1.0
            return matrix
    index = src.floor().clamp(max=n_in - 1)
    t = (src - index).clamp(0.0, 1.0)
    index = index.long()
    if not cubic:
        matrix[rows, index] += 1.0 - t
        matrix[rows, (index + 1).clamp(max=n_in - 1)] += t
        return matrix
    for tap, weight in zip(range(-1, 3), _cubic_weights(t, -0.75)):
        matrix.index_put_((rows, (index + tap).clamp(0, n_in - 1)), weight, accumulate=True)
    return matrix


def _moves(src: torch.Tensor, scale: float, moved: float, product: torch.Tensor | None = None) -> torch.Tensor:
    """How far each source coordinate may be moved: `moved` (|src| + 1), but not where fp32 holds the
    scale, its product and the coordinate exactly (twice the size: 0.5 (d + 0.5) - 0.5), which every
    fp32 evaluation then gives as float64 does."""
    if moved == 0.0:
        return torch.zeros_like(src)
    exact = _holds(src) & (_holds(product) if product is not None else True)
    if float(torch.tensor(scale, dtype=torch.float32)) != scale:
        exact = torch.zeros_like(exact)
    return torch.where(exact, 0.0, moved * (src.abs() + 1))


def _holds(values: torch.Tensor) -> torch.Tensor:
    """Whether fp32 holds each float64 value exactly."""
    return values.float().double() == values


def _cubic_weights(t: torch.Tensor, a: float) -> list[torch.Tensor]:
    """Keys' cubic convolution weights of the four taps around a fraction t."""

    def near(x: torch.Tensor) -> torch.Tensor:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: torch.Tensor) -> torch.Tensor:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _aa_filter(mode: str, scale: float) -> tuple[float, float]:
    """The antialiased filter's support (half its width, in input elements) and the factor that maps
    input distances onto it: the triangle's 2 or the cubic's 4 wide, stretched by a downsampling's step."""
    size = 2 if mode == "linear" else 4
    if scale >= 1.0:
        return size / 2 * scale, 1.0 / scale
    return size / 2, 1.0


def _aa_window(center: float, support: float, n_in: int) -> tuple[int, int]:
    """The input elements [start, end) an antialiased output element at center reads."""
    return max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)


def _antialias(mode: str, scale: float, n_in: int, n_out: int, moved: float) -> torch.Tensor:
    """The antialiased kernel's weights (_compute_indices_min_size_weights_aa): a filter of support
    scaled by the step where it is over 1, normalised over the window; its centre is the coordinate."""
    support, invscale = _aa_filter(mode, scale)
    matrix = torch.zeros(n_out, n_in, dtype=torch.float64)
    for i in range(n_out):
        center = scale * (i + 0.5)
        center += float(_moves(torch.tensor([center], dtype=torch.float64), scale, moved)[0])
        start, end = _aa_window(center, support, n_in)
        x = (torch.arange(start, end, dtype=torch.float64) - center + 0.5) * invscale
        weights = torch.clamp(1 - x.abs(), min=0.0) if mode == "linear" else _keys(x.abs(), -0.5)
        total = float(weights.sum())
        matrix[i, start:end] = weights / total if total != 0 else weights
    return matrix


def _keys(x: torch.Tensor, a: float) -> torch.Tensor:
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


# -- grid_sample ---------------------------------------------------------------------------------


def _grid_sample(args: Sequence[Any], kwargs: dict[str, Any], grad_outputs: list | None) -> list:
    """grid_sample's source coordinates are its grid unnormalised, ((g + 1) size - 1) / 2 (or
    (g + 1) (size - 1) / 2 with align_corners), in the kernel's opmath dtype: the grid moved by that
    rounding, each axis in turn, through the float64 benchmark (forward; backward both gradients)."""
    names = ("input", "grid", "mode", "padding_mode", "align_corners")
    p: dict[str, Any] = {"mode": "bilinear", "padding_mode": "zeros", "align_corners": None}
    p.update(zip(names, args))
    p.update({k: v for k, v in kwargs.items() if k in names})
    x, grid = p["input"], p["grid"]
    if not isinstance(p["mode"], str) or not isinstance(p["padding_mode"], str):
        raise ValueError("grid_sampler's integer modes have no model")  # aten's grid_sampler_2d
    if not (isinstance(x, torch.Tensor) and isinstance(grid, torch.Tensor)) or grid.shape[-1] != x.dim() - 2:
        raise ValueError("grid_sample without an input and a grid of its dimensions")
    u = unit_of([x, grid])
    align = bool(p["align_corners"])
    x64, grid64 = x.detach().to(torch.float64), grid.detach().to(torch.float64)
    g = next((t.detach().to(torch.float64) for t in grad_outputs or () if isinstance(t, torch.Tensor)), None)
    if grad_outputs is not None and g is None:
        raise ValueError("no grad_output")
    sizes = list(reversed(x.shape[2:]))  # the grid's last dimension is (x, y[, z]): W, H[, D]

    def run(moved_grid: torch.Tensor) -> list[torch.Tensor]:
        inputs = [x64.clone().requires_grad_(g is not None), moved_grid.requires_grad_(g is not None)]
        with torch.set_grad_enabled(g is not None):
            y = torch.nn.functional.grid_sample(
                inputs[0], inputs[1], mode=p["mode"], padding_mode=p["padding_mode"], align_corners=align
            )
        if g is None:
            return [y.detach()]
        return [t.detach() for t in torch.autograd.grad(y, inputs, g)]

    found = run(grid64.clone())
    moved = [torch.zeros_like(f) for f in found]
    if u < 2.0**-24:  # a float64 kernel unnormalises the grid as the benchmark does
        return moved
    for axis, size in enumerate(sizes):
        span = (size - 1) / 2 if align else size / 2  # source units per grid unit
        coordinate = (grid64[..., axis] + 1) * span - (0.0 if align else 0.5)
        step = ROUNDINGS * u * (coordinate.abs() + 1) / max(span, 1e-300)  # in grid units
        largest = [torch.zeros_like(f) for f in found]
        # Every position's coordinate one way, and (for the input's gradient, which sums positions whose
        # coordinates err independently) each its own way at random, two draws.
        generator = torch.Generator().manual_seed(axis)
        signs = [1.0, -1.0] + [
            torch.randint(0, 2, step.shape, generator=generator).to(torch.float64).mul_(2).sub_(1)
            for _ in range(2 if g is not None else 0)
        ]
        for sign in signs:
            shifted = grid64.clone()
            shifted[..., axis] += sign * step
            for big, exact, other in zip(largest, found, run(shifted)):
                torch.maximum(big, (other - exact).abs_(), out=big)
        for total, big in zip(moved, largest):
            total += big
    return moved


# -- weights -------------------------------------------------------------------------------------


def weight_matrix(resample: Resample, axis: int, n_in: int, u: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(|weights|, a bound of their rounding) of one axis, (out, in) float64: cubic weights are
    polynomials of the fraction whose terms cancel (at a weight near 0 their rounding is many times
    the weight), and the antialiased kernels' are normalised by their window's total; the linear
    and nearest weights' rounding is relative, the magnitude's (0 here)."""
    exact = axis_matrix(resample, axis, n_in)
    rounding = torch.zeros_like(exact)
    if resample.mode == "bicubic" or (resample.antialias and resample.mode == "linear"):
        rounding = _cubic_rounding(resample, axis, n_in, u)
    return exact.abs(), rounding


# What evaluating a cubic weight in fp32 moves it by, in u times the polynomial on absolute coefficients
# (the argument's own rounding, t + 1, 1 - t, 2 - t, included): at most 1.08 over 2 million fractions
# of both Keys kernels (bench/studies/coordinate_rounding.md).
CUBIC_WEIGHT = 1.5


def _cubic_rounding(resample: Resample, axis: int, n_in: int, u: float) -> torch.Tensor:
    """What fp32 evaluation moves each cubic weight by at most: CUBIC_WEIGHT u times the polynomial
    on absolute coefficients."""
    n_out, factor = resample.sizes[axis], resample.scale_factors[axis]
    scale = _scale(n_in, n_out, resample.align_corners, factor)
    matrix = torch.zeros(n_out, n_in, dtype=torch.float64)
    if resample.antialias:
        return _aa_rounding(resample.mode, scale, n_in, n_out, u)
    dst = torch.arange(n_out, dtype=torch.float64)
    src = scale * dst if resample.align_corners else scale * (dst + 0.5) - 0.5
    index = src.floor().clamp(max=n_in - 1)
    t = (src - index).clamp(0.0, 1.0)
    rows = torch.arange(n_out)
    a = 0.75  # |A|
    for tap, x in zip(range(-1, 3), (t + 1, t, 1 - t, 2 - t)):
        matrix.index_put_(
            (rows, (index.long() + tap).clamp(0, n_in - 1)),
            u * CUBIC_WEIGHT * _cubic_terms(x, a, tap in (-1, 2)),
            accumulate=True,
        )
    return matrix


def _cubic_terms(x: torch.Tensor, a: float, far: bool) -> torch.Tensor:
    """Keys' cubic weight at |x| on absolute coefficients (a = |A|): what its evaluation rounds."""
    if far:  # ((A x - 5 A) x + 8 A) x - 4 A
        return a * x**3 + 5 * a * x**2 + 8 * a * x + 4 * a
    return (2 - a) * x**3 + (3 - a) * x**2 + 1  # ((A + 2) x - (A + 3)) x^2 + 1


def _aa_rounding(mode: str, scale: float, n_in: int, n_out: int, u: float) -> torch.Tensor:
    """The antialiased weights' rounding: the filter's (Horner's for the cubic, one subtraction for the
    triangle) over the window's total, and the normalisation's (the total's sum of the window's
    weights, the division) on the weight itself."""
    support, invscale = _aa_filter(mode, scale)
    matrix = torch.zeros(n_out, n_in, dtype=torch.float64)
    for i in range(n_out):
        center = scale * (i + 0.5)
        start, end = _aa_window(center, support, n_in)
        x = ((torch.arange(start, end, dtype=torch.float64) - center + 0.5) * invscale).abs()
        if mode == "linear":
            weights, terms = torch.clamp(1 - x, min=0.0), 1 + x
        else:
            weights = _keys(x, -0.5)
            terms = CUBIC_WEIGHT * torch.where(x < 1, _cubic_terms(x, 0.5, False), _cubic_terms(x, 0.5, True))
        total = float(weights.sum())
        if total == 0:
            continue
        matrix[i, start:end] = u * (terms / abs(total) + (end - start + 2) * weights.abs() / abs(total))
    return matrix
