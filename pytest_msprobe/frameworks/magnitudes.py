"""The magnitude of the terms an API's kernel rounds: what the dtype standard scales u_acc by.

- Sums and products (every floating input enters linearly: linear, matmul, conv, sum, mean,
  add, mul, div, cat, embedding, masked_fill, and copies whose gradient sums the copies: repeat_interleave,
  expand, gather, index_add, ...): the benchmark itself on |inputs|, grad_outputs included, gives it
  (|A||B|, sum |x|), forward and backward alike.
- softmax, layer_norm, batch_norm, gelu, cross_entropy, scaled_dot_product_attention: their
  formula subtracts, so the API on |inputs| means nothing; the formula with every difference made
  a sum of magnitudes does (softmax's gradient y (g - sum y g) -> y (|g| + sum y |g|),
  cross_entropy's (p - onehot) g / N -> (p + onehot) |g| / N): `formula`, in float64; batch_norm's
  in float32 where the call's tensors are no wider (a factor of the budget needs no more; float64
  where float32 overflows).
- A normalisation's statistics are sums over its row (layer_norm), group (group_norm) or channel
  (batch_norm in training): a correct fp32 kernel rounds the mean at the scale of its terms,
  mean(|x|), as every sum's magnitude is the sum of its terms' (on centred groups |mean| is near 0:
  the U-Net's fp32 group_norm summed in order over 2,560 elements was 1.5 u_acc std off where
  |mean| is 0.008 std, 2.4 times the budget of |x| + |mean|: bench/studies/norm_statistics.md).
  Where a floating tensor of the call is bf16/fp16 the budget's L term, PyTorch's own kernel
  computing the same fp32 statistics, carries that rounding at each element, and the mean stays at
  |mean|: there mean(|x|) passed no correct kernel more but a 12-bit rsqrt (the GPT's bf16/fp16
  layer_norms, 1.2-2.3 times the budget, 0.6-0.8 with it). A running mean is a number: |mean|.
- Pooling and interpolation route each grad_output element to inputs with nonnegative weights
  that the input chooses (a window's max, its mean, the interpolation's weights): their gradient's
  magnitude is the benchmark on |grad_output| with the inputs as they are (|x| would move a max
  pool's argmax); their forward is a sum of |x| like a sum's (`ROUTES`).
- How many terms one element sums (`terms_of`, K): a correct kernel's partial sums grow with the
  result where the terms share a sign, and its rounding with them, like sqrt(K) u |b| (the
  standard's length term).
- Contractions among them (conv, linear, matmul and the like) first get a cheaper lower bound:
  the same run in float32 (mkldnn and BLAS have fast float32 kernels, none for float64). Its
  terms are all nonnegative, so whatever the order, float32 gives M (1 + t) with |t| <= gamma_n =
  n u / (1 - n u), u = 2^-24, n = the terms of one element + 4 (bias, beta, the scalings, the
  inputs' own rounding to float32); M32 (1 - 2 n u), rounded in float32 (one more term), is then
  at most M and at most what float64 computes (`lower_bound`). The standard asks the float64 run
  only where that bound leaves the output over its budget, so the verdict is the float64 one's.
- A conv's gradients call aten's convolution_backward on |inputs| (`conv.gradients`), one gradient
  at a time (the one the standard asks: the weight's passes by its length term on a ResNet, the
  input's asks), without the forward the autograd graph would run first. The same kernel: the
  same values bit for bit. Before it, the same over a quarter of the output channels (the input's
  gradient) or of the batch (the weight's), and a forward over a quarter of the input channels
  (`conv.sampled`): a lower bound again, of a quarter of the work; a pass it gives says "bounded"
  (budget.Reading.bounded).
- A linear's gradients alike (`linear_grads.gradients`: |grad| |W| for the input's, |grad|^T |x|
  for the weight's, sum |grad| for the bias's, autograd's own kernels on the same layouts), float32
  for the lower bound, float64 for the whole: an LLM's linear backward entries compare the input's
  gradient alone, and the forward GEMM and the weight's gradient were most of their extra runs'
  time (bench/llm_width/results_where.md).
- Anything else has no magnitude model: the standard measures its conditioning instead (the
  spread of the benchmark under perturbed inputs), but for the forward of a unary elementwise
  function (cos, exp, tanh, rsqrt, silu, ...: `UNARY`): a correct kernel of an exact input is a
  few ULP off whatever the argument (cos at 4000 rad too) and perturbs no input, so the spread
  (which moves the input by u_acc, 2e-4 at cos(4000)) would let a fast-math kernel pass.
- `structural`: what a correct kernel's own roundings to a low dtype move an output by, a term of
  its own (the standard scales it by c_round alone): a gradient formula that reads the forward's
  output as it was saved, rounded to fp32 (tanh's g (1 - y^2) cancels where |y| is near 1;
  `SAVED_OUTPUT`), |d grad / d y| u |y| (in bf16/fp16 the standard's low run reads the same saved
  output and follows its rounding); flash attention (FlashAttention-2, CUDA's flash SDPA: what
  scaled_dot_product_attention runs on a GPU) rounds the probabilities P to bf16/fp16 before P V and
  dS before dS K, dS^T Q, accumulating in fp32: u_low (P |V|) forward and u_low times the gradients'
  magnitudes backward. Any kernel of that family is within it, not one implementation's error
  pattern. torch_npu's npu_fusion_attention computes alike: its padded layouts (BSH, SBH, BSND,
  BNSD), grouped key/value heads, pse and sparse modes are brought to the same terms.

The models and their constants: bench/studies/kernel_bounds.md.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Callable

import torch

from . import conv, linear_grads
from .coordinates import ATEN_UPSAMPLE, coordinate_rounding, resampled_magnitude, resamples, separable
from .npu_reference import AttentionInBnsd, fusion_attention_in_bnsd
from .torch_engine import Call, Side, Sides, absolute, flat_outputs, floating

SUMS_AND_PRODUCTS = frozenset({
    "linear", "matmul", "__matmul__", "mm", "bmm", "baddbmm", "addmm", "conv1d", "conv2d", "conv3d", "einsum",
    "mean", "sum", "embedding", "add", "__add__", "__radd__", "add_", "mul", "__mul__", "__rmul__", "mul_", "cat",
    "masked_fill", "masked_fill_",
    # copies whose gradient sums the copies of each element (GQA's key/value heads repeated over
    # their query heads, a gather's repeated indices): sums that cancel, backward
    "repeat_interleave", "repeat", "expand", "expand_as", "broadcast_to", "tile", "gather", "index_select",
    "take_along_dim", "index_add", "index_add_", "scatter_add", "scatter_add_",
    # a quotient is a product too: on |inputs| its divisor's gradient sums |g| |x| / d^2 over what
    # the divisor was broadcast to (a router's weights over their sum: a gradient that cancels)
    "div", "div_", "divide", "true_divide", "__truediv__", "__rtruediv__", "__itruediv__",
})  # fmt: skip

ROUTES = frozenset({
    "max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "interpolate", "upsample", "upsample_nearest", "upsample_bilinear", *ATEN_UPSAMPLE,
})  # fmt: skip

CONTRACTIONS = frozenset({
    "linear", "matmul", "__matmul__", "mm", "bmm", "baddbmm", "addmm", "conv1d", "conv2d", "conv3d",
})  # fmt: skip
U_FLOAT32 = 2.0**-24

# The parameters each formula reads, in positional order, with their defaults.
PARAMETERS: dict[str, tuple[tuple[str, Any], ...]] = {
    "softmax": (("input", None), ("dim", -1)),
    "layer_norm": (("input", None), ("normalized_shape", None), ("weight", None), ("bias", None), ("eps", 1e-5)),
    "group_norm": (("input", None), ("num_groups", None), ("weight", None), ("bias", None), ("eps", 1e-5)),
    "batch_norm": (
        ("input", None), ("running_mean", None), ("running_var", None), ("weight", None), ("bias", None),
        ("training", False), ("momentum", 0.1), ("eps", 1e-5),
    ),
    "instance_norm": (
        ("input", None), ("running_mean", None), ("running_var", None), ("weight", None), ("bias", None),
        ("use_input_stats", True), ("momentum", 0.1), ("eps", 1e-5),
    ),
    "gelu": (("input", None), ("approximate", "none")),
    "cross_entropy": (
        ("input", None), ("target", None), ("weight", None), ("size_average", None), ("ignore_index", -100),
        ("reduce", None), ("reduction", "mean"), ("label_smoothing", 0.0),
    ),
    "affine_grid": (("theta", None), ("size", None), ("align_corners", None)),
    "scaled_dot_product_attention": (
        ("query", None), ("key", None), ("value", None), ("attn_mask", None), ("dropout_p", 0.0),
        ("is_causal", False), ("scale", None), ("enable_gqa", False),
    ),
}  # fmt: skip
# torch.nn.MultiheadAttention's function, in its signature's order.
PARAMETERS["multi_head_attention_forward"] = tuple(
    (name, None if p.default is inspect.Parameter.empty else p.default)
    for name, p in inspect.signature(torch.nn.functional.multi_head_attention_forward).parameters.items()
)
# torch_npu's fused attention, in its own signature's order: brought to scaled_dot_product_attention's
# terms (npu_reference.fusion_attention_in_bnsd) and modelled as it is.
PARAMETERS["npu_fusion_attention"] = tuple(
    (name, None if p.default is inspect.Parameter.empty else p.default)
    for name, p in inspect.signature(fusion_attention_in_bnsd).parameters.items()
)


# Unary elementwise math: a correct kernel computes each element of an exact input to a few ULP
# (opmath in fp32 for bf16/fp16), whatever the argument; in-place forms too.
UNARY = frozenset({
    "cos", "sin", "tan", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal",
    "tanh", "sigmoid", "silu", "erf", "sinh", "cosh", "atan",
})  # fmt: skip


# How many ULP a correct fp32 kernel of each is off the correctly rounded result at most: the larger of
# CUDA's documented bound (CUDA C++ Programming Guide, "Mathematical Functions", single precision) and
# glibc's (its manual's "Errors in Math Functions", x86_64 float); sqrt and 1/x are IEEE's, correctly
# rounded, but for CUDA without -prec-sqrt / -prec-div: 1. sigmoid and silu are composites in PyTorch's
# kernels (1 / (1 + exp(-x)), x times that): exp's 2 and a rounding each for the add and the quotient (and
# silu's product). The final rounding and a 1-ULP library (c_out, 1.5) come on top; PyTorch's own CPU
# kernels are at 0.33 of that budget at most (bench/studies/unary_library.md). The forward of these
# functions gets it instead of the accumulation term: it sums nothing, and 32 u_acc |b| (16 to 32 fp32
# ULP) passed an exp whose argument is rounded to fp32 before exp2 (a fast-math exp, |x| ULP off).
LIBRARY_ULPS = {
    "exp": 2, "exp2": 2, "expm1": 1, "log": 1, "log2": 1, "log10": 2, "log1p": 1, "sqrt": 1, "rsqrt": 2,
    "reciprocal": 1, "tanh": 2, "sigmoid": 3, "silu": 4, "erf": 2, "sinh": 3, "cosh": 2, "atan": 2, "cos": 2,
    "sin": 2, "tan": 4,
}  # fmt: skip


def library_ulps(api: str, forward: bool) -> float | None:
    """A correct math library's error in ULP for the forward of elementwise math of one input, else None."""
    name = _base(api.rsplit(".", 1)[-1])
    return LIBRARY_ULPS.get(name) if forward else None


def _base(name: str) -> str:
    """An in-place method's name without its underscore (tanh_ -> tanh; __add__ stays)."""
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def family(api: str) -> str:
    """ "sum" (a sum or product), "formula" (softmax, layer_norm, batch_norm, gelu, cross_entropy), "routes"
    (pooling, interpolation), "unary" (elementwise math of one input) or "" of an API's last name."""
    name = api.rsplit(".", 1)[-1]
    if name in SUMS_AND_PRODUCTS:
        return "sum"
    if name in PARAMETERS:
        return "formula"
    return "routes" if name in ROUTES else "unary" if _base(name) in UNARY else ""


# Formulas that run in float32 where every floating tensor of the call is float32 or narrower: a
# magnitude scales a budget, 24 bits are plenty, and half the memory is half the time on a CNN's
# activations. Where float32 overflows (a statistic or a result not finite), float64 again.
IN_FLOAT32 = frozenset({"batch_norm"})


def formula(api: str, args: Sequence[Any], kwargs: dict[str, Any], grad_outputs: list | None) -> list:
    """The magnitude of each output (backward: of each floating input's gradient), in float64, or
    float32 for the IN_FLOAT32 formulas where the call's tensors are no wider."""
    name = api.rsplit(".", 1)[-1]
    tensors = [t for t in (*args, *kwargs.values(), *(grad_outputs or ())) if isinstance(t, torch.Tensor)]
    if name in IN_FLOAT32 and all(t.itemsize <= 4 for t in tensors if t.is_floating_point()):
        try:
            found = _formula(name, args, kwargs, grad_outputs, torch.float32)
        except FloatingPointError:
            pass
        else:
            # Nonnegative: a finite sum says every element is (one overflowing sum: float64, no harm).
            if all(math.isfinite(float(t.sum())) for t in found if isinstance(t, torch.Tensor)):
                return found
    return _formula(name, args, kwargs, grad_outputs, torch.float64)


def _formula(
    name: str, args: Sequence[Any], kwargs: dict[str, Any], grad_outputs: list | None, dtype: torch.dtype
) -> list:
    bound = _bind(name, args, kwargs, dtype)
    if name in _NORMS:  # where the call computes in bf16/fp16, the L term carries its mean's rounding
        low = (torch.bfloat16, torch.float16)
        bound[_TERMS] = not any(isinstance(t, torch.Tensor) and t.dtype in low for t in (*args, *kwargs.values()))
    g = next((_copy(t, dtype) for t in grad_outputs or () if isinstance(t, torch.Tensor)), None)
    if grad_outputs is not None and g is None:
        raise ValueError("no grad_output")
    return FORMULAS[name](bound, g)


def _bind(name: str, args: Sequence[Any], kwargs: dict[str, Any], dtype: torch.dtype = torch.float64) -> dict[str, Any]:
    bound = dict(PARAMETERS[name])
    bound.update(zip(bound, args))
    bound.update({key: value for key, value in kwargs.items() if key in bound})
    return {key: _copy(value, dtype) for key, value in bound.items()}


def _copy(value: Any, dtype: torch.dtype = torch.float64) -> Any:
    """A floating tensor as the formula's own copy in `dtype` (the formulas write in place), else as it is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(dtype, copy=True)
    return value


def _softmax(p: dict[str, Any], g: torch.Tensor | None) -> list:
    dim = p["dim"] if p["dim"] is not None else -1
    y = torch.softmax(p["input"], dim)
    if g is None:
        return [y]
    ag = g.abs()
    return [y * (ag + (y * ag).sum(dim, keepdim=True))]


# What a normalisation's mean is rounded at the scale of: "fp32", mean(|x|) where no floating tensor of the call
# is bf16/fp16 (their L term carries it), else |mean|; "terms", mean(|x|) always; "mean", |mean| always (as
# before bench/studies/norm_statistics.md, which measures the three).
MEAN_SCALE = "fp32"
_TERMS = "mean_at_terms"  # the key formula() adds to a norm's parameters: whether its mean is rounded at mean(|x|)
_NORMS = frozenset({"layer_norm", "group_norm", "batch_norm"})


def _at_terms(p: dict[str, Any]) -> bool:
    return MEAN_SCALE == "terms" or (MEAN_SCALE == "fp32" and bool(p.get(_TERMS, True)))


def _mean_scale(
    p: dict[str, Any], x: torch.Tensor, dims: int | tuple[int, ...], mean: torch.Tensor | None = None
) -> torch.Tensor:
    """The magnitude a correct kernel rounds the statistics' mean of x over dims at (keepdim)."""
    if not _at_terms(p):
        return (x.mean(dims, keepdim=True) if mean is None else mean).abs()
    return x.abs().mean(dims, keepdim=True)


def _layer_norm(p: dict[str, Any], g: torch.Tensor | None) -> list:
    shape = p["normalized_shape"]
    n = int(math.prod(shape if isinstance(shape, (list, tuple, torch.Size)) else [shape]))
    x = p["input"]
    rows = x.reshape(-1, n)
    mean = rows.mean(1, keepdim=True)
    rstd = 1 / torch.sqrt(((rows - mean) ** 2).mean(1, keepdim=True) + p["eps"])
    grads = None if g is None else g.reshape(-1, n)
    dx, dw, db = _normalised(rows, _mean_scale(p, rows, 1, mean), rstd, p["weight"], p["bias"], grads, n)
    return [dx.reshape(x.shape)] + [found for found in (dw, db) if found is not None]


def _normalised(
    x: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    g: torch.Tensor | None,
    n: int,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(y or dx, dw, db) of layer_norm's rows of n (x and g, written in place), normalised with
    their statistics (x's gradient sums through them too), the weight's and bias's gradients
    summed over the rows. `mean`: the magnitude of the row's mean, mean(|x|)."""
    centred = x.abs_().add_(mean).mul_(rstd)  # x - mean is rounded at the scale of |x| + mean(|x|)
    w = weight.reshape(1, n).abs() if weight is not None else None
    if g is None:
        y = centred if w is None else centred.mul_(w)
        return (y if bias is None else y.add_(bias.reshape(1, n).abs())), None, None
    ag = g.abs_()
    db = ag.sum(0).reshape(bias.shape) if bias is not None else None
    product = ag * centred
    dw = product.sum(0).reshape(weight.shape) if weight is not None else None
    gw = ag if w is None else ag.mul_(w)
    weighted = (product if w is None else product.mul_(w)).mean(1, keepdim=True)  # of |g| w centred
    del product
    dx = centred.mul_(weighted).add_(gw).add_(gw.mean(1, keepdim=True)).mul_(rstd)
    return dx, dw, db


def _group_norm(p: dict[str, Any], g: torch.Tensor | None) -> list:
    """layer_norm's formula over each sample's groups of channels (N, G, C / G, the rest), the
    weight and bias per channel: the weight's and bias's gradients sum over the samples and the
    positions of their channel."""
    x, groups = p["input"], int(p["num_groups"])
    n, c = x.shape[0], x.shape[1]
    view = (n, groups, c // groups, -1)
    x4 = x.reshape(view)
    mean = x4.mean((2, 3), keepdim=True)
    rstd = 1 / torch.sqrt(((x4 - mean) ** 2).mean((2, 3), keepdim=True) + p["eps"])
    scale = _mean_scale(p, x4, (2, 3), mean)
    centred = x4.abs_().add_(scale).mul_(rstd)  # x - mean is rounded at the scale of |x| + mean(|x|)
    weight, bias = p["weight"], p["bias"]
    w = weight.abs().reshape(1, groups, -1, 1) if weight is not None else None
    if g is None:
        y = centred if w is None else centred.mul_(w)
        y = y if bias is None else y.add_(bias.abs().reshape(1, groups, -1, 1))
        return [y.reshape(x.shape)]
    ag = g.reshape(view).abs()
    db = ag.sum((0, 3)).reshape(bias.shape) if bias is not None else None
    product = ag * centred
    dw = product.sum((0, 3)).reshape(weight.shape) if weight is not None else None
    gw = ag if w is None else ag.mul_(w)
    weighted = (product if w is None else product.mul_(w)).mean((2, 3), keepdim=True)  # of |g| w centred
    del product
    dx = centred.mul_(weighted).add_(gw).add_(gw.mean((2, 3), keepdim=True)).mul_(rstd)
    return [dx.reshape(x.shape)] + [found for found in (dw, db) if found is not None]


def _instance_norm(p: dict[str, Any], g: torch.Tensor | None) -> list:
    """group_norm's formula with a group per channel (each sample's channel normalised alone), the
    weight's and bias's gradients summed over the samples; with running statistics instead of the
    input's, batch_norm's affine map."""
    if not p["use_input_stats"] and p["running_mean"] is not None and p["running_var"] is not None:
        return _batch_norm({**p, "training": False}, g)
    x = p["input"]
    grouped = {"input": x, "num_groups": x.shape[1], "weight": p["weight"], "bias": p["bias"], "eps": p["eps"]}
    found = _group_norm(grouped, g)
    if g is None:
        return found
    named = dict(zip(("input", *(n for n in ("weight", "bias") if p[n] is not None)), found))
    # One per floating input, in argument order: the running statistics take no gradient.
    return [named.get(name) for name, _ in PARAMETERS["instance_norm"] if isinstance(p[name], torch.Tensor)]


def _batch_norm(p: dict[str, Any], g: torch.Tensor | None) -> list:
    """Over every dimension but the channel (1): the batch's statistics in training (or without
    running ones), the running ones else (an affine map: no sum in the gradient of x).

    The formula is layer_norm's, with x - mean rounded at the scale of |x| + |mean|; each channel's
    statistics, weight and bias are numbers, so it is an affine map of |x| and |g| per channel:
        y  = |x| a|w| + (|mean| a|w| + |b|)                          a = rstd
        dx = |x| a^2 W + |g| a|w| + (|mean| a^2 W + a|w| S_g / n)    W = |w| dw / n (batch
             statistics; with running ones dx = |g| a|w|)
        dw = a (S_gx + |mean| S_g),  db = S_g                        S_g = sum |g|, S_gx = sum |g||x|
    two full-size buffers besides x and g (the formula's own copies, written in place): a
    ResNet's are hundreds of MB each."""
    x = p["input"]
    over = tuple(d for d in range(x.dim()) if d != 1)
    shape = (1, -1, *[1] * (x.dim() - 2)) if x.dim() > 1 else (-1,)
    n = x.numel() // max(1, x.shape[1] if x.dim() > 1 else 1)
    batch = p["training"] or p["running_mean"] is None or p["running_var"] is None
    buffer = torch.empty_like(x)
    if batch:
        mean = x.mean(over, keepdim=True)
        # the mean's magnitude (_mean_scale, in the buffer: no full-size copy more)
        m = torch.abs(x, out=buffer).mean(over, keepdim=True) if _at_terms(p) else mean.abs()
        variance = torch.sub(x, mean, out=buffer).square_().mean(over, keepdim=True)
    else:
        mean, variance = p["running_mean"].reshape(shape), p["running_var"].reshape(shape)
        m = mean.abs()  # a running mean is a number: no sum of this call's
    if x.dtype == torch.float32 and not bool(torch.isfinite(variance).all()):  # formula() runs it in float64
        raise FloatingPointError("batch_norm's variance overflowed float32")
    a = (variance + p["eps"]).rsqrt_()
    aw = a if p["weight"] is None else a * p["weight"].reshape(shape).abs()
    ab = 0.0 if p["bias"] is None else p["bias"].reshape(shape).abs()
    if g is None:
        return [x.abs_().mul_(aw).add_(m * aw + ab)]
    ag = g.abs_()
    s_g = ag.sum(over, keepdim=True)
    s_gx = torch.mul(x.abs_(), ag, out=buffer).sum(over, keepdim=True)
    dw = a * (s_gx + m * s_g)
    if batch:
        alpha = a * (aw * dw / n)  # a^2 W
        dx = torch.mul(x, alpha, out=buffer).addcmul_(ag, aw).add_(m * alpha + aw * s_g / n)
    else:
        dx = ag.mul_(aw)
    # One per floating input, in argument order: the running statistics take no gradient.
    found = {"input": dx, "weight": dw.reshape(-1), "bias": s_g.reshape(-1)}
    return [found.get(name) for name, _ in PARAMETERS["batch_norm"] if isinstance(p[name], torch.Tensor)]


def _gelu(p: dict[str, Any], g: torch.Tensor | None) -> list:
    x = p["input"]
    if g is None:  # x/2 + x/2 erf(x/sqrt 2): the two halves cancel for x << 0
        return [0.5 * x.abs() * (1 + torch.erf(x / math.sqrt(2)).abs())]
    return [
        g.abs()
        * (0.5 * (1 + torch.erf(x / math.sqrt(2)).abs()) + x.abs() * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
    ]


def _cross_entropy(p: dict[str, Any], g: torch.Tensor | None) -> list:
    """Class indices over (N, C) logits, no class weights or label smoothing (others raise: no
    magnitude). The loss lse - x_t, lse = max + log sum exp(x - max); its gradient (p - onehot) g / N,
    which cancels where a row is confident (p near 1 at its target)."""
    x, target = p["input"], p["target"]
    if (
        x.dim() != 2
        or target.is_floating_point()
        or p["weight"] is not None
        or p["label_smoothing"]
        or p["size_average"] is not None
        or p["reduce"] is not None
        or p["reduction"] not in ("mean", "sum", "none")
    ):
        raise ValueError("cross_entropy with class probabilities, weights, label smoothing or legacy reductions")
    kept = target != p["ignore_index"]
    labels = torch.where(kept, target, torch.zeros_like(target)).long()
    scale = 1.0 / max(1, int(kept.sum())) if p["reduction"] == "mean" else 1.0
    if g is None:
        top = x.amax(1)
        rows = top.abs() + torch.log(torch.exp(x - top[:, None]).sum(1)) + x.gather(1, labels[:, None])[:, 0].abs()
        rows = rows * kept
        return [rows if p["reduction"] == "none" else rows.sum() * scale]
    per_row = g.abs().reshape(-1, 1) if p["reduction"] == "none" else g.abs().reshape(1, 1)
    # (p + onehot) |g| kept scale, in place on p: (N, C) is 262 MB of float64 at a vocabulary of 32000
    found = torch.softmax(x, 1).scatter_add_(1, labels[:, None], torch.ones(len(labels), 1, dtype=x.dtype))
    return [found.mul_(per_row).mul_(kept[:, None]).mul_(scale)]


def _affine_grid(p: dict[str, Any], g: torch.Tensor | None) -> list:
    """theta (N, k, k + 1) times the base grid's coordinates (x, y[, z], 1), built in the kernel's dtype
    (linspace, then scaled by (size - 1) / size): the grid's magnitude |base| |theta|^T; theta's
    gradient sums |g| |base| over the grid's positions."""
    theta, size = p["theta"], [int(n) for n in p["size"]]
    k = theta.shape[-2]
    if theta.dim() != 3 or theta.shape[-1] != k + 1 or len(size) != k + 2:
        raise ValueError("affine_grid of a theta that is not (N, k, k + 1) for a size of k spatial dimensions")
    identity = torch.eye(k, k + 1, dtype=theta.dtype)[None]
    coordinates = torch.nn.functional.affine_grid(identity, [1, *size[1:]], align_corners=bool(p["align_corners"]))[0]
    base = torch.cat([coordinates.abs(), torch.ones(*coordinates.shape[:-1], 1, dtype=theta.dtype)], -1)
    if g is None:
        return [torch.einsum("...j,nkj->n...k", base, theta.abs())]
    return [torch.einsum("...j,n...k->nkj", base, g.abs())]


def _probabilities(p: dict[str, Any]) -> tuple[torch.Tensor, float]:
    """(softmax(Q K^T scale + mask), |scale|) of scaled_dot_product_attention's call; raises
    without a model (dropout, grouped heads)."""
    q, k, v, mask = p["query"], p["key"], p["value"], p["attn_mask"]
    if p["dropout_p"] or p["enable_gqa"] or q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError("scaled_dot_product_attention with dropout or grouped heads")
    scale = abs(p["scale"]) if p["scale"] is not None else 1 / math.sqrt(q.shape[-1])
    # In place on the (..., L, S) scores, the same values as out of place: at seq 1024 and 32 heads
    # each such array is 268 MB of float64, and a fresh one costs its page faults.
    scores = (q @ k.transpose(-2, -1)).mul_(scale)
    if p["is_causal"]:
        rows, columns = scores.shape[-2:]
        scores.masked_fill_(~torch.ones(rows, columns, dtype=torch.bool).tril(), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return torch.softmax(scores, -1), scale


def _attention(p: dict[str, Any], g: torch.Tensor | None, recomputed: bool = True, flushed: bool = False) -> list:
    """softmax(Q K^T scale + mask) V with softmax's magnitudes: the output P |V| plus what the
    scores' own rounding (the terms |Q| |K|^T |scale| each sums) moves through P; the gradients
    W^T |g| for V, and for Q and K the softmax gradient's P (|dP| + sum P |dP|) with |dP| = |g| |V|^T,
    through |K| and |Q|. W is P and, `recomputed`, what moves P where the backward recomputes it
    from fp32 scores and log-sum-exp (PyTorch's CPU kernel, flash): exp(s - lse) is off by
    (|s - lse| + twice the scores' terms + sqrt(keys), the lse's sum) relative units, P times them.
    Without dropout or grouped heads
    (others raise: no magnitude). `flushed`: what the probabilities below fp32's normal range move
    each output by, instead (_FLUSHED)."""
    q, k, v, mask = p["query"], p["key"], p["value"], p["attn_mask"]
    probs, scale = _probabilities(p)
    if flushed:
        return _flushed(probs, scale, q, k, v, g, mask)
    # Q, K and V's magnitudes: |Q|, |K|, |V|, or their own terms' where they were computed in the call
    aq, ak, av = p.get("magnitudes") or (q.abs(), k.abs(), v.abs())
    terms = (aq @ ak.transpose(-2, -1)).mul_(scale)  # the magnitude of each score's terms
    if g is None:
        moved = terms.mul_(probs)  # P times the magnitude of each score's terms
        return [probs @ av + moved @ av + moved.sum(-1, keepdim=True) * (probs @ v).abs()]
    # The (..., L, S) arrays below are made in place where the value is the same (see _probabilities).
    weight = probs
    shift = None
    if recomputed:
        # |s - lse|, 0 where P is 0 (masked or underflowed: the log is -inf there)
        shift = torch.log(probs).abs_().masked_fill_(~(probs > 0), 0.0)
        # The scores are rounded twice, once by the forward that saved lse and once by the backward
        # that recomputes s: 2 terms. The saved lse sums a row's exponentials: its rounding, like a sum
        # of that many positive terms (the standard's length term), moves every P of the row alike.
        # (PyTorch's fp32 dV and dK at 0.96 and 0.9 of the budget with the scores' terms once, a
        # statistics dump's uniform q and k of LLaMA-7B width, scores of std 58: bench/llm_width.)
        keys = math.sqrt(probs.shape[-1])
        weight = terms.mul_(2).add_(1).add_(shift).add_(keys).mul_(probs)  # P (1 + 2 terms + shift + keys)
    ag = g.abs()
    dp = ag @ av.transpose(-2, -1)
    # dS = P (dP - D) and dV = P^T dO, with P as the backward recomputes it: dV has no other term (6.6x
    # its budget without, seq 1024); dS's own terms outweigh it where the scores are narrow (0.46 of the
    # budget without, seq 1024), not where they are wide: a statistics dump's keys drawn uniform between
    # the recorded Min and Max put PyTorch's fp32 dQ and dK at 4x (LLaMA-7B width, seq 1024).
    products = torch.mul(probs, dp, out=shift) if shift is not None else probs * dp  # into shift's array
    ds = dp.add_(products.sum(-1, keepdim=True)).mul_(weight)  # weight (dP + D)
    found = [ds @ ak * scale, ds.transpose(-2, -1) @ aq * scale, weight.transpose(-2, -1) @ ag]
    # One per floating input, in argument order: a floating mask's gradient has no model here.
    return found + ([None] if mask is not None and mask.is_floating_point() else [])


def _multi_head_attention(p: dict[str, Any], g: torch.Tensor | None) -> list:
    """F.multi_head_attention_forward (torch.nn.MultiheadAttention) as the three calls it makes: the
    in-projections (linear), scaled_dot_product_attention with the projections' magnitudes as Q, K
    and V's (what their fp32 rounding moves the scores and the output by), the out-projection.
    Forward: the output's magnitude (the attention weights, where asked, have none). Backward: one
    per floating input in argument order (query, key, value, the projections' weights and biases).
    Without dropout, bias_k/bias_v, add_zero_attn or static keys (others raise: no magnitude)."""
    if (
        (p["dropout_p"] and p["training"])
        or p["add_zero_attn"]
        or any(p[name] is not None for name in ("bias_k", "bias_v", "static_k", "static_v"))
    ):
        raise ValueError("multi_head_attention_forward with dropout, bias_k/bias_v, add_zero_attn or static keys")
    query, key, value, heads = p["query"], p["key"], p["value"], int(p["num_heads"])
    if query.dim() != 3:
        raise ValueError("multi_head_attention_forward of an unbatched query")
    (length, batch, embed), keys = query.shape, key.shape[0]
    if p["use_separate_proj_weight"]:
        weights = [p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]]
    else:
        weights = list(p["in_proj_weight"].chunk(3))
    biases = list(p["in_proj_bias"].chunk(3)) if p["in_proj_bias"] is not None else [None] * 3

    def heads_first(x: torch.Tensor, rows: int) -> torch.Tensor:  # (rows, N, E) -> (N, H, rows, E / H)
        return x.reshape(rows, batch, heads, -1).permute(1, 2, 0, 3)

    def project(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, magnitude: bool) -> torch.Tensor:
        if magnitude:
            x, w, b = x.abs(), w.abs(), None if b is None else b.abs()
        return x @ w.transpose(0, 1) + (0 if b is None else b)

    inputs = (query, key, value)
    rows = (length, keys, keys)
    exact = [heads_first(project(x, w, b, False), n) for x, w, b, n in zip(inputs, weights, biases, rows)]
    magnitudes = tuple(heads_first(project(x, w, b, True), n) for x, w, b, n in zip(inputs, weights, biases, rows))
    mask = None if p["attn_mask"] is None else _additive(p["attn_mask"], query.dtype)
    if p["key_padding_mask"] is not None:
        padding = _additive(p["key_padding_mask"].reshape(batch, 1, 1, keys), query.dtype)
        mask = padding if mask is None else mask + padding
    sdpa = {
        "query": exact[0], "key": exact[1], "value": exact[2], "attn_mask": mask, "dropout_p": 0.0,
        "is_causal": bool(p["is_causal"]) and mask is None, "scale": None, "enable_gqa": False,
        "magnitudes": magnitudes,
    }  # fmt: skip
    out_w, out_b = p["out_proj_weight"], p["out_proj_bias"]

    def merged(x: torch.Tensor, n: int) -> torch.Tensor:  # (N, H, n, E / H) -> (n, N, E)
        return x.permute(2, 0, 1, 3).reshape(n, batch, embed)

    attended = merged(_attention(sdpa, None)[0], length)  # the out-projection's input's magnitude
    if g is None:
        return [project(attended, out_w, out_b, True)]
    ag = g.abs()
    d_attended = heads_first(ag @ out_w.abs(), length)
    dq, dk, dv = _attention(sdpa, d_attended)[:3]
    d_projections = [merged(d, n) for d, n in zip((dq, dk, dv), rows)]
    d_inputs = [d @ w.abs() for d, w in zip(d_projections, weights)]
    d_weights = [
        d.reshape(-1, embed).transpose(0, 1) @ x.abs().reshape(-1, x.shape[-1]) for d, x in zip(d_projections, inputs)
    ]
    d_biases = [d.reshape(-1, embed).sum(0) for d in d_projections]
    # One per floating input, in argument order; the masks' gradients have no model here.
    found: list = d_inputs
    found += [torch.cat(d_weights)] if p["in_proj_weight"] is not None else []
    found += [torch.cat(d_biases)] if p["in_proj_bias"] is not None else []
    found += [ag.reshape(-1, embed).transpose(0, 1) @ attended.reshape(-1, embed)]
    found += [ag.reshape(-1, embed).sum(0)] if out_b is not None else []
    for name in ("key_padding_mask", "attn_mask"):
        found += [None] if p[name] is not None and p[name].is_floating_point() else []
    return found + (d_weights if p["use_separate_proj_weight"] else [])


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """multi_head_attention_forward's mask as the scores' addend: a boolean one is -inf where True."""
    if mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(mask, float("-inf"))


# torch_npu's inference attentions (prompt, incremental, fused): forward only, modelled as one padded
# BNSD attention (npu_llm_reference.inference_attention_in_bnsd), the flash family's terms as
# npu_fusion_attention's. Wired by with_magnitudes alone: repro.py's copy of this module has none.
INFERENCE_ATTENTION = frozenset(
    {"npu_prompt_flash_attention", "npu_incre_flash_attention", "npu_fused_infer_attention_score"}
)


def _inference_attention(api: str, args: Sequence[Any], kwargs: dict[str, Any]) -> AttentionInBnsd:
    from .npu_llm_reference import inference_attention_in_bnsd

    name = api.rsplit(".", 1)[-1]
    return inference_attention_in_bnsd(name, *(_copy(a) for a in args), **{k: _copy(v) for k, v in kwargs.items()})


def inference_magnitude(api: str, args: Sequence[Any], kwargs: dict[str, Any]) -> list:
    """attention_out's magnitude as _attention models scaled_dot_product_attention's (the softmax
    statistics of the fused one, softmax_lse, sum nothing: their own |b|)."""
    call = _inference_attention(api, args, kwargs)
    return [call.output(_attention(call.as_sdpa(), None)[0])]


def inference_structural(api: str, args: Sequence[Any], kwargs: dict[str, Any]) -> list:
    """The flash family's own roundings: P rounded to the call's dtype before P V, and the
    probabilities below fp32's normal range (_flushed), as npu_fusion_attention's."""
    call = _inference_attention(api, args, kwargs)
    sdpa = call.as_sdpa()
    probs, _ = _probabilities(sdpa)
    low = next(a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
    return [call.output(probs @ call.value.abs() * _unit(low) + _attention(sdpa, None, flushed=True)[0])]


def _fusion_attention(
    p: dict[str, Any], g: torch.Tensor | None, recomputed: bool = True, flushed: bool = False
) -> list:
    """npu_fusion_attention's attention_out as _attention models scaled_dot_product_attention's, in the
    call's layout: forward the output's alone (the softmax statistics sum nothing: their own |b|);
    backward the gradients of query, key and value (a key/value head's summed over the query heads
    it serves), and none for pse."""
    call = fusion_attention_in_bnsd(**p)
    sdpa = call.as_sdpa()
    if g is None:
        return [call.output(_attention(sdpa, None, flushed=flushed)[0])]
    dq, dk, dv = _attention(sdpa, call.to_bnsd(g), recomputed, flushed)[:3]
    return [call.output(dq), call.key_gradient(dk), call.key_gradient(dv)] + ([None] if p["pse"] is not None else [])


# A kernel computes attention's probabilities in fp32 whatever the inputs' dtype, and those below fp32's
# normal range it may flush to 0 (a vector exp, flush-to-zero) or round to the subnormal spacing: each is
# held to the smallest normal number, absolutely, not relatively. Wide scores (a statistics dump's keys
# drawn uniform between their Min and Max: scores of std 58 at LLaMA-7B width) put whole gradients of late
# keys there: PyTorch's fp32 dK 0 where float64 gives 6e-44, 19x its budget without this.
_FLUSHED = 2.0**-126


def _flushed(
    probs: torch.Tensor,
    scale: float,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor | None,
    mask: torch.Tensor | None,
) -> list:
    """_attention's outputs as moved by every P in (0, _FLUSHED) lost whole: forward lost |V|; backward
    dV by lost^T |g|, dQ and dK through dS's lost (|dP| + D)."""
    lost = torch.where((probs > 0) & (probs < _FLUSHED), _FLUSHED, 0.0).to(probs.dtype)
    av = v.abs()
    if g is None:
        return [lost @ av]
    ag = g.abs()
    dp = ag @ av.transpose(-2, -1)
    ds = lost * (dp + (probs * dp).sum(-1, keepdim=True))
    found = [ds @ k.abs() * scale, ds.transpose(-2, -1) @ q.abs() * scale, lost.transpose(-2, -1) @ ag]
    return found + ([None] if mask is not None and mask.is_floating_point() else [])


FORMULAS: dict[str, Callable[[dict[str, Any], torch.Tensor | None], list]] = {
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "group_norm": _group_norm,
    "batch_norm": _batch_norm,
    "instance_norm": _instance_norm,
    "gelu": _gelu,
    "cross_entropy": _cross_entropy,
    "scaled_dot_product_attention": _attention,
    "npu_fusion_attention": _fusion_attention,
    "multi_head_attention_forward": _multi_head_attention,
    "affine_grid": _affine_grid,
}


# Backward formulas that read the forward's output as saved (rounded to its dtype), by API: y and
# |g| -> |d grad / d y| |y|, what a rounding of y by u |y| moves the gradient by, over u.
SAVED_OUTPUT: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "tanh": lambda y, g: 2 * g * y * y,  # g (1 - y^2)
    "sigmoid": lambda y, g: g * (1 - 2 * y).abs() * y.abs(),  # g y (1 - y)
    "exp": lambda y, g: g * y.abs(),  # g y
    "exp2": lambda y, g: math.log(2) * g * y.abs(),  # g y ln 2
    "expm1": lambda y, g: g * y.abs(),  # g (y + 1)
    "sqrt": lambda y, g: g / (2 * y.abs()),  # g / (2 y)
    "rsqrt": lambda y, g: 1.5 * g * y.abs() ** 3,  # -g y^3 / 2
    "reciprocal": lambda y, g: 2 * g * y * y,  # -g y^2
}
_UNARY_FNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
}  # fmt: skip
ATTENTION = frozenset({"scaled_dot_product_attention", "npu_fusion_attention"})
# Composites of several kernels, each rounding its output to the call's dtype.
COMPOSITES = frozenset({"multi_head_attention_forward"})
STRUCTURAL = frozenset({*SAVED_OUTPUT, "softmax", "log_softmax", *ATTENTION, *COMPOSITES})
# GEMMs that add a bias (beta times an input) to their product: a correct kernel may round the product
# to the output dtype first (PyTorch's linear on a non-contiguous N-D input is a matmul, then an add).
# Their parameters in positional order, the bias's name, and the product in float64 of the operands.
BIASED_GEMMS: dict[str, tuple[tuple[str, ...], str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = {
    "linear": (("input", "weight", "bias"), "bias", lambda input, weight: input @ weight.transpose(-1, -2)),
    "addmm": (("input", "mat1", "mat2", "beta", "alpha"), "input", torch.matmul),
    "baddbmm": (("input", "batch1", "batch2", "beta", "alpha"), "input", torch.matmul),
    "addbmm": (("input", "batch1", "batch2", "beta", "alpha"), "input", lambda b1, b2: (b1 @ b2).sum(0)),
    "addmv": (("input", "mat", "vec", "beta", "alpha"), "input", torch.mv),
    "addr": (("input", "vec1", "vec2", "beta", "alpha"), "input", torch.outer),
}


_SHORT = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _unit(dtype: torch.dtype) -> float:
    """The unit roundoff of a floating dtype: 2^-8 for bf16, 2^-24 for fp32."""
    return torch.finfo(dtype).eps / 2


def rounded_before_bias(api: str, dtype: torch.dtype) -> Callable[..., torch.Tensor]:
    """A biased GEMM computed as a matmul whose product is rounded to `dtype`, then an add of the
    bias (PyTorch's linear on a non-contiguous N-D input; an unfused kernel anywhere): called with
    the bench's arguments. Raises where the call adds no bias (none given, or beta 0)."""
    names, bias, product = BIASED_GEMMS[_base(api.rsplit(".", 1)[-1])]

    def compute(*args: Any, **kwargs: Any) -> torch.Tensor:
        p: dict[str, Any] = {"beta": 1, "alpha": 1, "bias": None}
        p.update(zip(names, args))
        p.update({key: value for key, value in kwargs.items() if key in names})
        if not isinstance(p[bias], torch.Tensor) or p["beta"] == 0:
            raise ValueError(f"{api} adds no bias to its product")
        a, b = (p[name] for name in names if name not in (bias, "beta", "alpha"))
        rounded = (product(a, b) * p["alpha"]).to(dtype).to(a.dtype)
        return rounded + p["beta"] * p[bias]

    return compute


def structural(
    api: str,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    grad_outputs: list | None,
    autocast: torch.dtype | None = None,
) -> list:
    """What a correct kernel's own roundings in the call's dtype move each output (backward: each
    floating input's gradient) by, in float64: at most, but for softmax's dot (three standard
    deviations of its roundings) (the module docstring; None for an output without one). Raises for
    an API without a model. `autocast`: the dtype the call ran under autocast in, which its attention
    and its composites' intermediates (projections, attention) are computed and rounded in, whatever
    the dtype of the inputs it was given."""
    if resamples(api):
        return coordinate_rounding(api, args, kwargs, grad_outputs)
    name = _base(api.rsplit(".", 1)[-1])
    tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    g = next((t for t in grad_outputs or () if isinstance(t, torch.Tensor)), None)
    if not tensors or name not in STRUCTURAL or (grad_outputs is not None and g is None):
        raise ValueError(f"no structural term for {api}")
    computed_in = autocast or tensors[0].dtype
    if name in COMPOSITES:
        # Its intermediates (MultiheadAttention's projections and attention output) rounded to the
        # call's dtype, a unit roundoff each, move the output as their terms' magnitudes say.
        u = _unit(computed_in)
        return [None if m is None else m * u for m in formula(api, args, kwargs, grad_outputs)]
    if name in ATTENTION:
        p = _bind(name, args, kwargs)
        u = _unit(computed_in)
        grad = None if g is None else g.detach().to(torch.float64)
        lost = FORMULAS[name](p, grad, recomputed=False, flushed=True)  # type: ignore[call-arg]
        if grad is None:
            if name == "npu_fusion_attention":
                call = fusion_attention_in_bnsd(**p)
                probs, _ = _probabilities(call.as_sdpa())
                return [call.output(probs @ call.value.abs()) * u + lost[0]]
            probs, _ = _probabilities(p)
            return [probs @ p["value"].abs() * u + lost[0]]  # P rounded before P V
        # dV = P^T dO with P rounded, dQ = dS K and dK = dS^T Q with dS rounded (and the saved
        # output's rounding in dS's rowsum(dO O)): the gradients' magnitudes, at u_low.
        found = FORMULAS[name](p, grad, recomputed=False)  # type: ignore[call-arg]
        return [None if m is None else m * u + f for m, f in zip(found, lost)]
    if g is None:
        raise ValueError(f"{api}'s forward rounds no intermediate to its dtype")
    saved = kwargs.get("dtype") if name in ("softmax", "log_softmax") else None
    saved = saved if isinstance(saved, torch.dtype) else tensors[0].dtype
    if saved.itemsize < 4:
        # bf16/fp16: the standard's `low` run, PyTorch's kernel in that dtype, reads the same saved
        # output, rounded alike, and follows its error element by element; a worst-case term on top
        # would pass a softmax gradient whose dot is summed in bf16 (tests/test_repro.py's corpus).
        raise ValueError(f"{api}: the saved output's rounding in {saved} is the low run's")
    x = tensors[0].detach().to(torch.float64)
    ag = g.detach().to(torch.float64).abs()
    if name in ("softmax", "log_softmax"):
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        dim = dim if isinstance(dim, int) else -1
        u = _unit(saved)
        signed = g.detach().to(torch.float64)
        if name == "softmax":
            # y (g - dot), dot = sum y g: y_i's own rounding moves it by u y_i |g_i - dot|, and the
            # dot's rounded terms y_j g_j by a sum of n independent roundings: sqrt(3) u ||y g||_2 is
            # three of its standard deviations (u / sqrt 3 each). Their worst case, u sum y |g|, is
            # sqrt(n) times that on long rows and would pass a dot summed in fp16 over 512 keys.
            y = torch.softmax(x, dim)
            dot = (y * signed).sum(dim, keepdim=True)
            spread = (y * signed).square().sum(dim, keepdim=True).sqrt() * math.sqrt(3)
            return [y * ((signed - dot).abs() + spread) * u]
        y = torch.log_softmax(x, dim)  # g - exp(y) sum g
        return [y.exp() * y.abs() * signed.sum(dim, keepdim=True).abs() * u]
    y = _UNARY_FNS[name](x)
    return [SAVED_OUTPUT[name](y, ag) * _unit(tensors[0].dtype)]


def terms_bound(api: str, inputs: Sequence[torch.Tensor], grad_outputs: Sequence[Any] | None) -> int | None:
    """At most how many products one element of a contraction's output (forward) or of an input's
    gradient (backward) sums; None for an API that is no contraction.

    conv: Cin/groups x kernel forward, Cout/groups x kernel for the input's gradient, N x the
    output's spatial size for the weight's and the bias's. The matmul family: one dimension of an
    operand or of the gradient (the inner one), or the gradient's size over one of its last two
    dimensions (a weight's gradient sums over the batch), so each tensor's size over its smallest
    last dimension bounds it."""
    name = api.rsplit(".", 1)[-1]
    if name not in CONTRACTIONS or len(inputs) < 2:
        return None
    grads = [g for g in grad_outputs or () if isinstance(g, torch.Tensor)]
    if name.startswith("conv"):
        w = inputs[1]
        channel = -(w.dim() - 1)  # the gradient's channel dimension, batched or not
        if w.dim() < 3 or 0 in w.shape or any(g.dim() < w.dim() - 1 or not g.shape[channel] for g in grads):
            return None
        return max([w.numel() // w.shape[0], w.numel() // w.shape[1], *(g.numel() // g.shape[channel] for g in grads)])
    # A vector's every element may be a term of one sum (a dot product): its whole size.
    return max(t.numel() // max(1, min(t.shape[-2:])) if t.dim() >= 2 else t.numel() for t in [*inputs, *grads])


# Outputs divided by a sum of exponentials (softmax's normaliser, the log-sum-exp a cross entropy or
# a log_softmax gradient reads back): every element carries the relative rounding of that sum of
# positive terms, like a sum's result. Forward for softmax alone: the others subtract a log of it.
NORMALISED = {"softmax": True, "log_softmax": False, "logsumexp": False, "cross_entropy": False}


def normaliser_terms(api: str, args: Sequence[Any], kwargs: dict[str, Any], forward: bool) -> int | None:
    """How many terms the normaliser of a softmax-like call sums (the class dimension of
    cross_entropy's (N, C, ...) input, the size over `dim` of the others), where its relative
    rounding reaches each element of the output (NORMALISED); else None."""
    name = _base(api.rsplit(".", 1)[-1])
    x = args[0] if args else kwargs.get("input")
    if name not in NORMALISED or (forward and not NORMALISED[name]) or not isinstance(x, torch.Tensor):
        return None
    if name == "cross_entropy":
        return x.shape[1] if x.dim() >= 2 else x.shape[0] if x.dim() == 1 else None
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    dims = [dim] if isinstance(dim, int) else list(dim) if isinstance(dim, (list, tuple)) else []
    if not dims or not all(isinstance(d, int) and -x.dim() <= d < max(1, x.dim()) for d in dims):
        return None
    return math.prod(x.shape[d] for d in dims) if x.dim() else 1


# Their weight's and bias's gradients sum a batch.
NORMS = frozenset({"batch_norm", "layer_norm", "group_norm", "instance_norm"})


def terms_of(
    api: str, inputs: Sequence[torch.Tensor], grad_outputs: Sequence[Any] | None, index: int, numel: int
) -> int | None:
    """At most how many terms one element of output `index` (backward: of floating input `index`'s
    gradient) sums, `numel` its size; None where the API says nothing or an element sums no more than 1.

    A reduction's output (sum, mean forward) and a gradient summed over the batch (a norm's weight
    and bias, a linear's or a conv's weight and bias) sum the input's size over their own; conv and
    linear per output as their shapes say; other contractions `terms_bound`, their every output's."""
    name = api.rsplit(".", 1)[-1]
    x = inputs[0] if inputs else None
    found: int | None = None
    forward = grad_outputs is None
    if x is None or numel < 1:
        return None
    if (forward and name in ("sum", "mean")) or (not forward and name in NORMS and index > 0):
        found = x.numel() // numel
    elif name == "affine_grid" and not forward and grad_outputs and isinstance(grad_outputs[0], torch.Tensor):
        g = grad_outputs[0]  # (N, *spatial, k): theta's gradient sums the positions
        found = g.numel() // max(1, g.shape[0] * g.shape[-1])
    elif name == "linear" and len(inputs) >= 2:
        rows = x.numel() // max(1, x.shape[-1])
        found = x.shape[-1] if forward else inputs[1].shape[0] if index == 0 else rows
    elif name.startswith("conv") and len(inputs) >= 2 and inputs[1].dim() >= 3:
        w = inputs[1]
        grads = [g for g in grad_outputs or () if isinstance(g, torch.Tensor)]
        if forward or index == 0:
            found = w.numel() // w.shape[0 if forward else 1]
        elif grads and grads[0].dim() >= w.dim() - 1:
            g = grads[0]
            found = g.numel() // g.shape[-(w.dim() - 1)]
    elif name in CONTRACTIONS:
        found = terms_bound(api, inputs, grad_outputs)
    return found if found is not None and found > 1 else None


# A conv's first magnitude: a quarter of the terms, a quarter of the work. On the public ResNet
# step the conv outputs that ask a magnitude are within 0.16 of their budget with the whole one
# (bench/timing/results_conv_work.md): with a quarter, about 0.6; one that is not passes on to the
# whole float32 run.
CONV_SAMPLE = 4


def lower_bound(outputs: list, terms: int) -> list:
    """float32 magnitudes of a contraction of `terms` products made lower bounds of the float64
    ones (the module docstring), kept in float32 (half the memory a look reads): the scaling is
    one more rounding, so n counts it, and its factor is rounded down to float32."""
    n = terms + 5
    factor = math.floor((1 - 2 * n * U_FLOAT32) * 2**24) / 2**24  # float32's spacing is 2^-24 on [0.5, 1)
    return [o.detach().mul(factor) if isinstance(o, torch.Tensor) else o for o in outputs]


def with_magnitudes(sides: Sides, api: str, call: Call) -> Sides:
    """The entry's sides with what the dtype standard's extra runs need for this API."""
    kind = family(api)
    inputs = floating(call.args, call.kwargs)
    grad_outputs = None if sides.grad_outputs is None else flat_outputs(sides.grad_outputs)
    normaliser = normaliser_terms(api, call.args, call.kwargs, grad_outputs is None)
    sides = replace(sides, terms=lambda index, numel: terms_of(api, inputs, grad_outputs, index, numel) or normaliser)
    if resamples(api):  # interpolate, upsample_*, grid_sample: their source coordinates' rounding
        sides = replace(sides, structural=lambda side: coordinate_rounding(api, call.args, call.kwargs, grad_outputs))
    low = call.autocast or max((t.dtype for t in inputs), key=_unit, default=torch.float64)
    if grad_outputs is None and _base(api.rsplit(".", 1)[-1]) in BIASED_GEMMS and low.itemsize < 4:
        sides = replace(
            sides,
            alternative=replace(call, bench_fn=rounded_before_bias(api, low)),
            alternative_kernel=f"the product rounded to {_SHORT.get(low, low)} before the bias is added",
        )
    if separable(api):  # its weights' magnitudes (a cubic's cancel in the bench on |x|), no extra bench run
        return replace(
            sides, magnitude=lambda side: resampled_magnitude(api, call.args, call.kwargs, grad_outputs), spread=False
        )
    if kind == "sum" or (kind == "routes" and grad_outputs is None):
        exact = replace(sides, magnitude=lambda side: sides.compared_run(absolute(side)), spread=False)
        is_conv = conv.takes(call)
        grads = grad_outputs or []
        # A conv's or a linear's gradients one at a time, without the forward (linear_grads: autograd's
        # own kernels). Not where recorded mode judges a gradient at another node of the graph: that
        # node's, not the kernel's.
        by_gradient: Callable[[Side, int], list] | None = None
        if grad_outputs is not None and sides.compared_bench is None:
            if is_conv:
                by_gradient = functools.partial(conv.gradients, call, grads)
            elif linear_grads.takes(call, grad_outputs):
                by_gradient = functools.partial(linear_grads.gradients, call, grads)
        if by_gradient is not None:
            gradients = by_gradient
            exact = replace(exact, magnitude_of=lambda side, index: gradients(absolute(side), index))
        terms = terms_bound(api, inputs, grad_outputs)
        # Only where 2 n u stays small and float32 GEMMs are not allowed a lower precision.
        if terms is None or 4 * (terms + 5) * U_FLOAT32 > 1 or torch.get_float32_matmul_precision() != "highest":
            return exact
        bound = terms

        def in_float32(side: Side) -> Side:
            return replace(absolute(side), floating=torch.float32)

        if is_conv and grad_outputs is None:
            exact = replace(
                exact,
                sampled_magnitude_of=lambda side, index: lower_bound(
                    conv.sampled(call, in_float32(side), CONV_SAMPLE), bound
                ),
            )
        if by_gradient is not None:
            exact = replace(
                exact, lower_magnitude_of=lambda side, index: lower_bound(gradients(in_float32(side), index), bound)
            )
            if not is_conv:
                return exact
            return replace(
                exact,
                sampled_magnitude_of=lambda side, index: lower_bound(
                    conv.gradients(call, grads, in_float32(side), index, CONV_SAMPLE), bound
                ),
            )
        return replace(exact, lower_magnitude=lambda side: lower_bound(sides.compared_run(in_float32(side)), bound))
    if kind == "routes":
        return replace(
            sides,
            magnitude=lambda side: sides.compared_run(replace(side, grad_transform=torch.Tensor.abs_)),
            spread=False,
        )
    if api.rsplit(".", 1)[-1] in INFERENCE_ATTENTION and grad_outputs is None:
        return replace(
            sides,
            magnitude=lambda side: inference_magnitude(api, call.args, call.kwargs),
            structural=lambda side: inference_structural(api, call.args, call.kwargs),
        )
    if _base(api.rsplit(".", 1)[-1]) in STRUCTURAL:
        sides = replace(
            sides, structural=lambda side: structural(api, call.args, call.kwargs, grad_outputs, call.autocast)
        )
    if kind == "unary" and grad_outputs is None:  # an exact input: no perturbation to spread, no terms summed
        sides = replace(sides, spread=False, library_ulps=library_ulps(api, forward=True))
    if kind == "formula":
        return replace(sides, magnitude=lambda side: formula(api, call.args, call.kwargs, grad_outputs))
    return sides
