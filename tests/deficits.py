"""Deficient kernels, and correct kernels that merely differ, computed from an entry's recorded inputs.

A *deficit* is what a real kernel that loses precision computes: TF32/HF32 GEMM (and convolution)
operands, accumulation in fp16/bf16 (GEMMs, reductions, batch statistics, pooling gradients where
windows overlap), tanh GELU for erf GELU, a 12-bit rsqrt estimate in layer_norm and batch_norm, a
one-pass E[x^2]-E[x]^2 variance, a softmax denominator summed in the low dtype, a gradient missing a
term. A *control* is a correct kernel that computes differently: another summation order, a 1-ULP
math library, online softmax, Welford layer_norm and batch_norm. Every kind returns an entry's outputs
laid out as msprobe records them (for a backward entry, its recorded gradients), in the entry's dtype.

The arithmetic is simulated in float64 with explicit roundings: a value "in fp32" is a float64 that
holds an fp32 number. A product of two fp32 (or narrower) numbers is exact in float64, so rounding
`acc + a * b` to the accumulator is a fused multiply-add, as GEMM kernels do. A correct kernel keeps
its intermediates in fp32 ("opmath", as PyTorch's CPU and CUDA kernels and Ascend's cube unit do for
fp16/bf16) and rounds the result once to the output dtype.

build_corpus() copies a dump and replaces the recorded outputs of chosen entries with a kind's.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

F64 = torch.float64
F32 = torch.float32
LOW = frozenset({torch.bfloat16, torch.float16})
FLOATS = frozenset({torch.bfloat16, torch.float16, torch.float32})
BLOCK = 16  # a cube unit's K block, and online softmax's block
FORWARD, BACKWARD = "forward", "backward"
ERROR, PASS = "error", "pass"


class NotApplicable(Exception):
    """The kind does not change this entry (another family, dtype or direction), or the entry's
    call is outside what is modelled (groups, label smoothing, an inner-node gradient)."""


# -- rounding ------------------------------------------------------------------


def rnd(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x rounded to dtype (to nearest, ties to even), held in float64."""
    return x if dtype == F64 else x.to(dtype).to(F64)


def round_mantissa(x: torch.Tensor, bits: int, ties: str = "even") -> torch.Tensor:
    """x rounded to `bits` explicit mantissa bits (TF32/HF32: 10), exponent range unchanged."""
    mantissa, exponent = torch.frexp(x)  # x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    scaled = mantissa * 2.0 ** (bits + 1)
    if ties == "even":
        cut = torch.round(scaled)
    else:  # ties away from zero
        cut = torch.sign(scaled) * torch.floor(scaled.abs() + 0.5)
    out = torch.ldexp(cut / 2.0 ** (bits + 1), exponent)
    return torch.where(torch.isfinite(x), out, x)


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of dtype's numbers at |x| (subnormal spacing below the normal range)."""
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(x.abs().clamp(min=info.tiny))
    return info.eps * torch.pow(2.0, (exponent - 1).to(F64))


# -- kernels -------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """How one kernel computes. The default is the textbook correct one: fp32 intermediates,
    sums in order with fused multiply-adds, two-pass layer_norm, erf GELU."""

    order: str = "sequential"  # sequential, reverse, pairwise, blocked (BLOCK terms, then the blocks)
    accumulate: str = "fp32"  # GEMMs and reductions: fp32, low (each partial sum in the entry's dtype),
    #                           low_blocked (fp32 within BLOCK terms, the running sum in the entry's dtype)
    softmax_sum: str = "fp32"  # softmax's denominator (and backward dot): fp32 or low
    softmax: str = "standard"  # standard or online (blocks of BLOCK, running max and rescaled sum)
    gemm_inputs: str | None = None  # tf32 (ties to even) or hf32 (ties away): operands cut to 10 bits
    gelu: str = "erf"  # erf or tanh
    rsqrt_bits: int | None = None  # significant bits of a norm's rstd (an estimate), None: fp32
    variance: str = "two_pass"  # two_pass, welford, one_pass (E[x^2] - E[x]^2 summed in the low dtype)
    drop_term: bool = False  # backward: layer_norm without mean(g*w), batch_norm without mean(g),
    #                          softmax without the dot term
    fma: bool = True  # GEMMs: each product added exactly (a fused multiply-add); False: rounded to fp32 first
    flash: bool = False  # attention as FlashAttention-2: P (backward: dS too) rounded to the entry's dtype before
    #                      its GEMM, the output normalised after P V
    bias_after: bool = False  # linear: the product rounded to the entry's dtype, then the bias added
    fast_math: bool = False  # unary math from a fast exp or a one-constant range reduction (fast_exp, fast_trig),
    #                         softplus as log(1 + exp(x)) in fp32
    exact: bool = False  # float64 throughout: the benchmark
    ulp_noise: bool = False  # the exact result rounded, then moved by -1, 0 or +1 ULP at random


EXACT = Kernel(exact=True)


@dataclass(frozen=True)
class Kind:
    name: str
    deficit: bool
    families: frozenset
    dtypes: frozenset
    directions: frozenset
    kernel: Kernel
    what: str


_BOTH = frozenset({FORWARD, BACKWARD})
_GEMM = frozenset({"linear", "matmul", "conv", "conv_transpose", "sdpa"})
_NORMS = frozenset({"layer_norm", "batch_norm", "group_norm"})
_POOLS = frozenset({"max_pool", "adaptive_avg_pool", "avg_pool"})  # their gradients sum where windows overlap
_SCANS = frozenset({"cumsum", "cumprod"})
_LOSSES = frozenset({"cross_entropy", "nll_loss", "mse_loss"})
_GATHERS = frozenset({"embedding", "embedding_bag", "index_select"})  # their gradients sum where indices repeat
_SUMS = _GEMM | _NORMS | _POOLS | _SCANS | _LOSSES | _GATHERS | {"reduction"}
_SOFTMAXES = frozenset({"softmax", "log_softmax", "cross_entropy", "sdpa"})
_ALL_SUMS = _SUMS | _SOFTMAXES
_UNARY = frozenset({"exp", "sin", "cos", "sigmoid", "tanh", "silu", "softplus"})  # computed in float64, rounded
_MATH = frozenset({"gelu", "softmax", "log_softmax", "cross_entropy"}) | _NORMS | _UNARY


def _kind(
    name: str,
    deficit: bool,
    families: Iterable[str],
    kernel: Kernel,
    what: str,
    dtypes: Iterable[torch.dtype] = FLOATS,
    directions: Iterable[str] = _BOTH,
) -> Kind:
    return Kind(name, deficit, frozenset(families), frozenset(dtypes), frozenset(directions), kernel, what)


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        # deficits
        _kind(
            "tf32",
            True,
            _GEMM,
            Kernel(gemm_inputs="tf32", order="blocked"),
            "GEMM operands rounded to TF32 (10 mantissa bits, ties to even), fp32 accumulation",
            dtypes=[F32],
        ),
        _kind(
            "hf32",
            True,
            _GEMM,
            Kernel(gemm_inputs="hf32", order="blocked"),
            "GEMM operands rounded to HF32 (10 mantissa bits, ties away), fp32 accumulation",
            dtypes=[F32],
        ),
        _kind(
            "accumulate_low",
            True,
            _SUMS,
            Kernel(accumulate="low"),
            "every partial sum of GEMMs and reductions (a norm's statistics, a pooling gradient's overlapping "
            "windows) rounded to the entry's dtype, in order",
            dtypes=LOW,
        ),
        _kind(
            "accumulate_low_blocked",
            True,
            _GEMM,
            Kernel(accumulate="low_blocked"),
            "GEMM: fp32 within K blocks of 16, the running sum kept in the entry's dtype (split-K in a "
            "low-precision workspace)",
            dtypes=LOW,
        ),
        _kind("gelu_tanh", True, ["gelu"], Kernel(gelu="tanh"), "tanh-approximated GELU for erf GELU"),
        _kind("rsqrt12", True, _NORMS, Kernel(rsqrt_bits=12), "a norm's rstd from a 12-bit rsqrt estimate"),
        _kind(
            "one_pass_variance",
            True,
            _NORMS,
            Kernel(variance="one_pass"),
            "a norm's variance as E[x^2] - E[x]^2, both sums and the difference in the entry's dtype",
        ),
        _kind(
            "softmax_sum_low",
            True,
            _SOFTMAXES,
            Kernel(softmax_sum="low"),
            "softmax's denominator (backward: its dot product) summed in the entry's dtype",
            dtypes=LOW,
        ),
        _kind(
            "missing_term",
            True,
            [*_NORMS, "softmax", "log_softmax", "sdpa", "silu"],
            Kernel(drop_term=True),
            "input gradient without a term: layer_norm and group_norm without mean(g*w), batch_norm without "
            "mean(g), softmax without the dot term, log_softmax without exp(y) sum(g), attention's dS without "
            "rowsum(dO O), silu's without x sigmoid(x) (1 - sigmoid(x))",
            directions=[BACKWARD],
        ),
        _kind(
            "fast_math",
            True,
            _UNARY,
            Kernel(fast_math=True),
            "exp, sigmoid, silu and tanh from a fast exp (2^f a cubic, 2.2e-4 relative), sin and cos with one fp32 "
            "constant for pi/2, softplus as log(1 + exp(x)) in fp32 (no log1p)",
            directions=[FORWARD],
        ),
        # controls
        _kind("sequential", False, _ALL_SUMS, Kernel(), "fp32 sums in order (two-pass norms)"),
        _kind("reverse", False, _ALL_SUMS, Kernel(order="reverse"), "fp32 sums in reverse order"),
        _kind("pairwise", False, _ALL_SUMS, Kernel(order="pairwise"), "fp32 pairwise (tree) sums"),
        _kind(
            "blocked",
            False,
            _ALL_SUMS,
            Kernel(order="blocked"),
            "fp32 sums in K blocks of 16, then over the blocks, as a cube unit",
        ),
        _kind(
            "ulp1",
            False,
            _MATH,
            Kernel(ulp_noise=True),
            "a 1-ULP math library: the exact result rounded, moved by -1, 0 or +1 ULP at random",
        ),
        _kind(
            "no_fma",
            False,
            _GEMM,
            Kernel(fma=False),
            "GEMMs with each product rounded to fp32 before it is added (no fused multiply-add), in order",
        ),
        _kind(
            "flash",
            False,
            ["sdpa"],
            Kernel(flash=True, softmax="online"),
            "FlashAttention-2: online softmax, P and dS rounded to the entry's dtype before their GEMMs, fp32 "
            "accumulation, the output divided by the row's sum after P V",
            dtypes=LOW,
        ),
        _kind(
            "online_softmax",
            False,
            ["softmax", "log_softmax", "cross_entropy", "sdpa"],
            Kernel(softmax="online"),
            "online softmax: blocks of 16, running max, rescaled fp32 sum",
            directions=[FORWARD],
        ),
        _kind("welford", False, _NORMS, Kernel(variance="welford"), "Welford mean and variance in fp32"),
    )
}
DEFICITS = [k for k in KINDS.values() if k.deficit]
CONTROLS = [k for k in KINDS.values() if not k.deficit]


class Arith:
    """One kernel's arithmetic for one entry: where intermediates round and how sums go."""

    def __init__(self, kernel: Kernel, dtype: torch.dtype):
        self.kernel = kernel
        self.out = dtype
        wide = kernel.exact or kernel.ulp_noise or dtype == F64
        self.mid = F64 if wide else F32  # intermediates

    def r(self, x: torch.Tensor) -> torch.Tensor:
        """An intermediate operation's rounding."""
        return rnd(x, self.mid)

    def result(self, x: torch.Tensor) -> torch.Tensor:
        return rnd(x, self.out)

    def acc_dtype(self, role: str) -> torch.dtype:
        mode = self.kernel.softmax_sum if role == "softmax" else self.kernel.accumulate
        return self.out if mode == "low" and self.mid == F32 else self.mid

    def racc(self, x: torch.Tensor, role: str = "reduction") -> torch.Tensor:
        return rnd(x, self.acc_dtype(role))

    def sum(self, terms: torch.Tensor, dim: int, role: str = "reduction") -> torch.Tensor:
        """Sum over dim as the kernel does; terms are exact float64 products or values."""
        t = terms.movedim(dim, 0)
        if self.mid == F64:
            return t.sum(0)
        acc = self.acc_dtype(role)
        order = self.kernel.order
        if role != "softmax" and self.kernel.accumulate == "low_blocked":
            blocks = _sequential(_blocks(t), F32)  # (n_blocks, ...) block sums in fp32
            return _sequential(blocks, self.out)
        if order == "sequential":
            return _sequential(t, acc)
        if order == "reverse":
            return _sequential(t.flip(0), acc)
        if order == "pairwise":
            t = rnd(t, acc)
            while t.shape[0] > 1:
                if t.shape[0] % 2:
                    t = torch.cat([t, torch.zeros_like(t[:1])])
                t = rnd(t[0::2] + t[1::2], acc)
            return t[0] if t.shape[0] else torch.zeros_like(terms.sum(dim))
        if order == "blocked":
            return _sequential(_sequential(_blocks(t), acc), acc)
        raise ValueError(f"unknown summation order {order!r}")

    def operands(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A GEMM's operands as the kernel reads them (TF32/HF32: cut to 10 mantissa bits)."""
        if not self.kernel.gemm_inputs:
            return a, b
        ties = "even" if self.kernel.gemm_inputs == "tf32" else "away"
        return round_mantissa(a, 10, ties), round_mantissa(b, 10, ties)

    def gemm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a (..., M, K) @ b (..., K, N), in the accumulator's precision (not yet rounded to the output)."""
        a, b = self.operands(a, b)
        if self.mid == F64:
            return torch.matmul(a, b)
        product = None if self.kernel.fma else self.mid
        if self.kernel.order in ("sequential", "reverse") and self.kernel.accumulate != "low_blocked":
            acc = self.acc_dtype("reduction")
            return _sequential_products(a, b, acc, reverse=self.kernel.order == "reverse", product=product)
        products = a.unsqueeze(-1) * b.unsqueeze(-3)
        return self.sum(products if product is None else rnd(products, product), dim=-2)


def _sequential(t: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    """Sum over dim 0 in order, each partial sum rounded to acc (a fused multiply-add for products)."""
    return _in_order(t, t.shape[1:], acc)


def _in_order(terms: Iterable[torch.Tensor], shape: Sequence[int], acc: torch.dtype) -> torch.Tensor:
    """The terms summed in order, each partial sum rounded to acc: in place, through one buffer of
    acc, the same roundings as rnd(total + term, acc) without two new tensors a term."""
    total = torch.zeros(tuple(shape), dtype=F64)
    low = None if acc == F64 else torch.empty_like(total, dtype=acc)
    for term in terms:
        total.add_(term)
        if low is not None:
            low.copy_(total)
            total.copy_(low)
    return total


def _sequential_products(
    a: torch.Tensor, b: torch.Tensor, acc: torch.dtype, reverse: bool, product: torch.dtype | None = None
) -> torch.Tensor:
    """_sequential over the K products of a (..., M, K) @ b (..., K, N), each formed as it is added:
    the same sums, without the (..., M, K, N) tensor of every product (exact in float64 either way).
    `product`: each product rounded to that dtype before it is added (no fused multiply-add)."""
    shape = torch.broadcast_shapes((*a.shape[:-1], 1), (*b.shape[:-2], 1, b.shape[-1]))
    steps = range(a.shape[-1] - 1, -1, -1) if reverse else range(a.shape[-1])
    terms = (a[..., :, k, None] * b[..., k, None, :] for k in steps)
    return _in_order(terms if product is None else (rnd(t, product) for t in terms), shape, acc)


def _blocks(t: torch.Tensor) -> torch.Tensor:
    """(K, ...) -> (BLOCK, K/BLOCK, ...): iterating dim 0 walks each block in order, all blocks at once."""
    pad = (-t.shape[0]) % BLOCK
    if pad:
        t = torch.cat([t, torch.zeros((pad, *tuple(t.shape[1:])), dtype=t.dtype)])
    return t.reshape((t.shape[0] // BLOCK, BLOCK, *tuple(t.shape[1:]))).movedim(1, 0)


# -- the APIs ------------------------------------------------------------------

FAMILIES = {
    "linear": "linear",
    "matmul": "matmul",
    "__matmul__": "matmul",
    "mm": "matmul",
    "bmm": "matmul",
    "conv2d": "conv",
    "softmax": "softmax",
    "layer_norm": "layer_norm",
    "batch_norm": "batch_norm",
    "max_pool2d": "max_pool",
    "adaptive_avg_pool2d": "adaptive_avg_pool",
    "gelu": "gelu",
    "embedding": "embedding",
    "cross_entropy": "cross_entropy",
    "sum": "reduction",
    "mean": "reduction",
    "conv1d": "conv",
    "conv_transpose2d": "conv_transpose",
    "group_norm": "group_norm",
    "avg_pool2d": "avg_pool",
    "scaled_dot_product_attention": "sdpa",
    "log_softmax": "log_softmax",
    "cumsum": "cumsum",
    "cumprod": "cumprod",
    "nll_loss": "nll_loss",
    "mse_loss": "mse_loss",
    "embedding_bag": "embedding_bag",
    "index_select": "index_select",
    **{name: name for name in _UNARY},
}
PARAMS = {
    "linear": ("input", "weight", "bias"),
    "matmul": ("input", "other"),
    "conv": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "softmax": ("input", "dim"),
    "layer_norm": ("input", "normalized_shape", "weight", "bias", "eps"),
    "batch_norm": ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
    "max_pool": ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
    "adaptive_avg_pool": ("input", "output_size"),
    "gelu": ("input", "approximate"),
    "embedding": ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"),
    "cross_entropy": (
        "input",
        "target",
        "weight",
        "size_average",
        "ignore_index",
        "reduce",
        "reduction",
        "label_smoothing",
    ),
    "reduction": ("input", "dim", "keepdim"),
    "conv_transpose": ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
    "group_norm": ("input", "num_groups", "weight", "bias", "eps"),
    "avg_pool": ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"),
    "sdpa": ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"),
    "log_softmax": ("input", "dim", "_stacklevel", "dtype"),
    "cumsum": ("input", "dim", "dtype"),
    "cumprod": ("input", "dim", "dtype"),
    "nll_loss": ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction"),
    "mse_loss": ("input", "target", "size_average", "reduce", "reduction"),
    "embedding_bag": (
        "input",
        "weight",
        "offsets",
        "max_norm",
        "norm_type",
        "scale_grad_by_freq",
        "mode",
        "sparse",
        "per_sample_weights",
        "include_last_offset",
        "padding_idx",
    ),
    "index_select": ("input", "dim", "index"),
    **{name: ("input",) for name in _UNARY - {"softplus"}},
    "softplus": ("input", "beta", "threshold"),
}
DEFAULTS = {
    "stride": 1,
    "padding": 0,
    "dilation": 1,
    "groups": 1,
    "eps": 1e-5,
    "approximate": "none",
    "reduction": "mean",
    "ignore_index": -100,
    "label_smoothing": 0.0,
    "keepdim": False,
    "training": False,
    "ceil_mode": False,
    "return_indices": False,
}
FAMILY_DEFAULTS = {
    "max_pool": {"stride": None},  # max_pool2d's and avg_pool2d's stride default to the kernel_size
    "avg_pool": {"stride": None, "count_include_pad": True},
    "conv_transpose": {"output_padding": 0},
    "sdpa": {"dropout_p": 0.0, "is_causal": False},
    "embedding_bag": {"mode": "mean", "include_last_offset": False},
    "softplus": {"beta": 1.0, "threshold": 20.0},
}


def family_of(api: str) -> str | None:
    return FAMILIES.get(api.rsplit(".", 1)[-1])


def bind(family: str, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = PARAMS[family]
    bound = dict(DEFAULTS)
    bound.update(FAMILY_DEFAULTS.get(family, {}))
    bound.update({n: None for n in names if n not in bound})
    bound.update(zip(names, args))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    if family == "matmul" and "other" not in kwargs and len(args) < 2 and "mat2" in kwargs:
        bound["other"] = kwargs["mat2"]
    return bound


def _f64(x: Any) -> Any:
    return x.detach().to(F64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


# forward: (arith, bound inputs as float64) -> outputs, float64


def linear_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    y = ar.gemm(p["input"], p["weight"].transpose(-1, -2))
    if p["bias"] is not None:
        y = ar.racc((ar.result(y) if ar.kernel.bias_after else y) + p["bias"])
    return [ar.result(y)]


def matmul_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    a, b = p["input"], p["other"]
    if a.dim() < 2 or b.dim() < 2:
        raise NotApplicable("matmul of a vector")
    return [ar.result(ar.gemm(a, b))]


def _conv_columns(p: dict) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    x, w = p["input"], p["weight"]
    if p["groups"] != 1 or isinstance(p["padding"], str) or x.dim() != 4:
        raise NotApplicable("conv2d with groups, string padding or a 3-D input is not modelled")
    kernel_size = tuple(w.shape[-2:])
    stride, padding, dilation = _pair(p["stride"]), _pair(p["padding"]), _pair(p["dilation"])
    cols = F.unfold(x, kernel_size, dilation=dilation, padding=padding, stride=stride)  # (N, C*kh*kw, L)
    h = (x.shape[2] + 2 * padding[0] - dilation[0] * (kernel_size[0] - 1) - 1) // stride[0] + 1
    wd = (x.shape[3] + 2 * padding[1] - dilation[1] * (kernel_size[1] - 1) - 1) // stride[1] + 1
    return cols, w.reshape(w.shape[0], -1), (h, wd)


def _single(v: Any) -> int:
    return v if isinstance(v, int) else int(v[0])


def _conv2d_form(p: dict) -> dict:
    """A conv1d as the conv2d of a height-1 image (the same products and sums); a conv2d as it is."""
    x = p["input"]
    if x.dim() == 4:
        return p
    if x.dim() != 3 or isinstance(p["padding"], str):
        raise NotApplicable("an unbatched conv, a conv3d or string padding is not modelled")
    return {
        **p,
        "input": x.unsqueeze(2),
        "weight": p["weight"].unsqueeze(2),
        "stride": (1, _single(p["stride"])),
        "dilation": (1, _single(p["dilation"])),
        "padding": (0, _single(p["padding"])),
    }


def _groups(p: dict) -> list[dict]:
    """A grouped conv as its groups' convs (each group's channels and filters alone)."""
    groups = int(p["groups"] or 1)
    if groups == 1:
        return [p]
    x, w, b = p["input"], p["weight"], p["bias"]
    cin, cout = x.shape[1] // groups, w.shape[0] // groups
    return [
        {
            **p,
            "groups": 1,
            "input": x[:, i * cin : (i + 1) * cin],
            "weight": w[i * cout : (i + 1) * cout],
            "bias": None if b is None else b[i * cout : (i + 1) * cout],
        }
        for i in range(groups)
    ]


def conv_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    """conv1d and conv2d, grouped (depthwise) or not: each group an implicit GEMM."""
    q = _conv2d_form(p)
    y = torch.cat([_conv2d_forward(ar, part)[0] for part in _groups(q)], 1)
    return [y if q is p else y.squeeze(2)]


def conv_backward(ar: Arith, p: dict, g: torch.Tensor, y: Any) -> list[torch.Tensor | None]:
    q = _conv2d_form(p)
    g = g if q is p else g.unsqueeze(2)
    parts = _groups(q)
    cout = g.shape[1] // len(parts)
    found = [_conv2d_backward(ar, part, g[:, i * cout : (i + 1) * cout], y) for i, part in enumerate(parts)]
    dx = torch.cat([f[0] for f in found], 1)
    dw = torch.cat([f[1] for f in found], 0)
    db = None if found[0][2] is None else torch.cat([f[2] for f in found], 0)
    if q is not p:
        dx, dw = dx.squeeze(2), dw.squeeze(2)
    return [dx, dw, db]


def _transposed_as_conv(p: dict) -> tuple[dict, tuple[slice, slice]]:
    """conv_transpose2d as the conv2d of its input with zeros between its elements (stride - 1 of them),
    padded by dilation (kernel - 1) - padding, and of its weight flipped with its channels swapped: the
    same products and sums; and where the input's elements sit in that input."""
    x, w = p["input"], p["weight"]
    if x.dim() != 4 or int(p["groups"] or 1) != 1 or isinstance(p["padding"], str):
        raise NotApplicable("conv_transpose2d of a 3-D input or with groups is not modelled")
    stride, padding = _pair(p["stride"]), _pair(p["padding"])
    extra, dilation = _pair(p["output_padding"]), _pair(p["dilation"])
    n, c, h, wd = x.shape
    spread = torch.zeros((n, c, (h - 1) * stride[0] + 1, (wd - 1) * stride[1] + 1), dtype=x.dtype)
    spread[:, :, :: stride[0], :: stride[1]] = x
    low = [dilation[i] * (w.shape[2 + i] - 1) - padding[i] for i in range(2)]
    if min(low) < 0:
        raise NotApplicable("conv_transpose2d with padding beyond its kernel is not modelled")
    padded = F.pad(spread, (low[1], low[1] + extra[1], low[0], low[0] + extra[0]))
    conv = {
        "input": padded,
        "weight": w.flip(-1, -2).transpose(0, 1),
        "bias": p["bias"],
        "stride": 1,
        "padding": 0,
        "dilation": dilation,
        "groups": 1,
    }
    rows = slice(low[0], low[0] + spread.shape[2], stride[0])
    cols = slice(low[1], low[1] + spread.shape[3], stride[1])
    return conv, (rows, cols)


def conv_transpose_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    conv, _ = _transposed_as_conv(p)
    return _conv2d_forward(ar, conv)


def conv_transpose_backward(ar: Arith, p: dict, g: torch.Tensor, y: Any) -> list[torch.Tensor | None]:
    conv, (rows, cols) = _transposed_as_conv(p)
    dx, dw, db = _conv2d_backward(ar, conv, g, y)
    assert dx is not None and dw is not None
    return [dx[:, :, rows, cols], dw.transpose(0, 1).flip(-1, -2), db]


def _conv2d_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    cols, w2, (h, wd) = _conv_columns(p)
    y = ar.gemm(w2.unsqueeze(0), cols)  # (N, O, L)
    if p["bias"] is not None:
        y = ar.racc(y + p["bias"][:, None])
    return [ar.result(y.reshape(y.shape[0], y.shape[1], h, wd))]


def _last(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x.movedim(dim, -1)


def _softmax_parts(ar: Arith, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(exp(x - max) in fp32, their sum), rows on the last dim; online softmax rescales block by block."""
    if ar.kernel.softmax == "online" and ar.mid != F64:
        return _online(ar, x)
    m = x.amax(-1, keepdim=True)
    e = ar.r(torch.exp(ar.r(x - m)))
    return e, ar.sum(e, -1, "softmax").unsqueeze(-1)


def _online(ar: Arith, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m = torch.full((*x.shape[:-1], 1), -math.inf, dtype=F64)
    total = torch.zeros_like(m)
    for start in range(0, x.shape[-1], BLOCK):
        block = x[..., start : start + BLOCK]
        new = torch.maximum(m, block.amax(-1, keepdim=True))
        scale = torch.where(new == -math.inf, torch.ones_like(m), ar.r(torch.exp(ar.r(m - new))))
        part = ar.r(torch.exp(ar.r(block - new)))
        total = ar.r(total * scale)
        total = ar.racc(total + ar.sum(part, -1, "softmax").unsqueeze(-1), "softmax")
        m = new
    return ar.r(torch.exp(ar.r(x - m))), total


def softmax_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    dim = p["dim"] if p["dim"] is not None else -1
    x = _last(p["input"], dim)
    e, s = _softmax_parts(ar, x)
    return [ar.result(ar.r(e / s)).movedim(-1, dim)]


def _rows(p: dict) -> tuple[torch.Tensor, int]:
    shape = p["normalized_shape"]
    n = int(math.prod(shape if isinstance(shape, (list, tuple)) else [shape]))
    x = p["input"]
    return x.reshape(-1, n), n


def _stats(ar: Arith, rows: torch.Tensor, n: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, rstd) per row, shaped (rows, 1)."""
    k = ar.kernel
    if ar.mid == F64:
        mean = rows.mean(1, keepdim=True)
        var = ((rows - mean) ** 2).mean(1, keepdim=True)
    elif k.variance == "welford":
        mean = torch.zeros(rows.shape[0], 1, dtype=F64)
        m2 = torch.zeros_like(mean)
        for i in range(n):
            x = rows[:, i : i + 1]
            delta = ar.r(x - mean)
            mean = ar.r(mean + ar.r(delta / (i + 1)))
            m2 = ar.r(m2 + delta * ar.r(x - mean))
        var = ar.r(m2 / n)
    elif k.variance == "one_pass":
        low = ar.out if ar.mid == F32 else ar.mid
        s1 = _sequential(rows.T, low)
        s2 = _sequential(rnd(rows * rows, low).T, low)
        mean = rnd(s1 / n, low).unsqueeze(1)
        var = rnd(rnd(s2 / n, low).unsqueeze(1) - rnd(mean * mean, low), low).clamp(min=0)
    else:
        mean = ar.racc(ar.sum(rows, 1) / n).unsqueeze(1)
        d = ar.r(rows - mean)
        var = ar.racc(ar.sum(d * d, 1) / n).unsqueeze(1)
    rstd = 1 / torch.sqrt(ar.r(var + eps))
    rstd = round_mantissa(rstd, k.rsqrt_bits - 1) if k.rsqrt_bits and ar.mid != F64 else ar.r(rstd)
    return mean, rstd


def layer_norm_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    rows, n = _rows(p)
    mean, rstd = _stats(ar, rows, n, p["eps"])
    y = ar.r(ar.r(rows - mean) * rstd)
    if p["weight"] is not None:
        y = ar.r(y * p["weight"].reshape(1, n))
    if p["bias"] is not None:
        y = ar.r(y + p["bias"].reshape(1, n))
    return [ar.result(y).reshape(p["input"].shape)]


def _channels(x: torch.Tensor) -> torch.Tensor:
    """(N, C, ...) -> (C, N*...): batch_norm's statistics are over every dimension but the channel."""
    return x.movedim(1, 0).reshape(x.shape[1], -1)


def _unchannels(rows: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    return rows.reshape(shape[1], shape[0], *shape[2:]).movedim(0, 1)


def _batch_stats(ar: Arith, p: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the input as channel rows, mean, rstd): a training batch_norm's batch statistics."""
    if not p["training"] and p["running_mean"] is not None and p["running_var"] is not None:
        raise NotApplicable("batch_norm with running statistics is an affine map: no sum, no statistics")
    if p["input"].dim() < 2:
        raise NotApplicable("batch_norm of a vector")
    rows = _channels(p["input"])
    mean, rstd = _stats(ar, rows, rows.shape[1], p["eps"])
    return rows, mean, rstd


def batch_norm_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    rows, mean, rstd = _batch_stats(ar, p)
    y = ar.r(ar.r(rows - mean) * rstd)
    if p["weight"] is not None:
        y = ar.r(y * p["weight"].reshape(-1, 1))
    if p["bias"] is not None:
        y = ar.r(y + p["bias"].reshape(-1, 1))
    return [ar.result(_unchannels(y, p["input"].shape))]


def _max_pool_indices(p: dict) -> torch.Tensor:
    """The input element each window chose (the first of its largest, as the kernels choose)."""
    x = p["input"]
    if x.dim() != 4 or p["return_indices"]:
        raise NotApplicable("max_pool2d of a 3-D input or returning indices is not modelled")
    stride = p["stride"] if p["stride"] not in (None, []) else p["kernel_size"]
    _, index = F.max_pool2d(
        x, p["kernel_size"], stride, p["padding"], p["dilation"], ceil_mode=p["ceil_mode"], return_indices=True
    )  # float64 compares as the tested dtype does: the same values, the same argmax
    return index


def max_pool_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    """Each grad_output element added to the input element its window chose, in output order: where
    windows overlap one element sums the gradients of every window that chose it."""
    x = p["input"]
    n, c = x.shape[:2]
    index = _max_pool_indices(p).reshape(n, c, -1).permute(2, 0, 1)  # (L, N, C)
    terms = torch.zeros((index.shape[0], n, c, x[0, 0].numel()), dtype=F64)
    terms.scatter_(-1, index.unsqueeze(-1), g.reshape(n, c, -1).permute(2, 0, 1).unsqueeze(-1))
    return [ar.result(ar.sum(terms, 0).reshape(x.shape))]


def _adaptive_windows(p: dict) -> tuple[list[tuple[slice, slice]], tuple[int, int]]:
    """Each output element's window over the input's last two dimensions, row-major (PyTorch's
    bounds), and the output's size."""
    x, size = p["input"], p["output_size"]
    if x.dim() != 4:
        raise NotApplicable("adaptive_avg_pool2d of a 3-D input is not modelled")
    (h, wd), (oh, ow) = x.shape[2:], _pair(size)
    oh, ow = oh or h, ow or wd  # None keeps the input's size

    def bounds(i: int, out: int, size: int) -> slice:
        return slice(i * size // out, -(-(i + 1) * size // out))

    return [(bounds(i, oh, h), bounds(j, ow, wd)) for i in range(oh) for j in range(ow)], (oh, ow)


def adaptive_avg_pool_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    x, (windows, size) = p["input"], _adaptive_windows(p)
    means = []
    for rows, cols in windows:
        window = x[:, :, rows, cols].reshape(x.shape[0], x.shape[1], -1)
        means.append(ar.racc(ar.sum(window, -1) / window.shape[-1]))
    return [ar.result(torch.stack(means, -1).reshape(*x.shape[:2], *size))]


def adaptive_avg_pool_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    """Each window's gradient over its area added to every element of the window, window by window."""
    x, (windows, _) = p["input"], _adaptive_windows(p)
    g = g.reshape(x.shape[0], x.shape[1], -1)
    terms = torch.zeros((len(windows), *x.shape), dtype=F64)
    for k, (rows, cols) in enumerate(windows):
        area = (rows.stop - rows.start) * (cols.stop - cols.start)
        terms[k, :, :, rows, cols] = ar.r(g[:, :, k] / area)[:, :, None, None]
    return [ar.result(ar.sum(terms, 0))]


def _gelu(x: torch.Tensor, how: str) -> torch.Tensor:
    if how == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1 + torch.tanh(inner))
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _gelu_grad(x: torch.Tensor, how: str) -> torch.Tensor:
    if how == "tanh":
        c = math.sqrt(2 / math.pi)
        t = torch.tanh(c * (x + 0.044715 * x**3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def gelu_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    if p["approximate"] != "none":
        raise NotApplicable("the recorded GELU is already the tanh approximation")
    # Computed in float64 then rounded: a correctly rounded GELU (the approximation's error is the point).
    return [ar.result(_gelu(p["input"], ar.kernel.gelu))]


def cross_entropy_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    x, target = p["input"], p["target"]
    if (
        p["weight"] is not None
        or p["label_smoothing"]
        or p["reduction"] != "mean"
        or x.dim() != 2
        or bool((target == p["ignore_index"]).any())
    ):
        raise NotApplicable("cross_entropy with weights, label smoothing, ignored targets or not a mean")
    m = x.amax(-1, keepdim=True)
    _, s = _softmax_parts(ar, x)
    lse = ar.r(m + ar.r(torch.log(s)))[:, 0]
    losses = ar.r(lse - x.gather(1, target.long()[:, None])[:, 0])
    return [ar.result(ar.racc(ar.sum(losses, 0) / x.shape[0]))]


def reduction_forward(ar: Arith, p: dict, api: str) -> list[torch.Tensor]:
    x, dim = p["input"], p["dim"]
    dims = list(range(x.dim())) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    dims = [d % x.dim() for d in dims]
    rest = [d for d in range(x.dim()) if d not in dims]
    flat = x.permute(dims + rest).reshape((-1, *tuple(x.shape[d] for d in rest)))
    total = ar.sum(flat, 0)
    if api.endswith("mean"):
        total = ar.racc(total / flat.shape[0])
    if p["keepdim"]:
        for d in sorted(dims):
            total = total.unsqueeze(d)
    return [ar.result(total)]


# backward: (arith, bound inputs as float64, grad_output, forward output) -> the gradients of the
# floating inputs, in argument order (None where an input takes none)


def linear_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    x, w = p["input"], p["weight"]
    dx = ar.result(ar.gemm(g, w))
    rows_x, rows_g = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
    dw = ar.result(ar.gemm(rows_x.T, rows_g)).T  # as x^T g, the node msprobe records
    db = ar.result(ar.sum(rows_g, 0)) if p["bias"] is not None else None
    return [dx, dw, db]


def matmul_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    a, b = p["input"], p["other"]
    if a.dim() != 2 or b.dim() != 2:
        raise NotApplicable("msprobe records a batched matmul's gradient at an inner node (its grad_output)")
    return [ar.result(ar.gemm(g, b.T)), ar.result(ar.gemm(a.T, g))]


def _conv2d_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    cols, _, _ = _conv_columns(p)
    n, o = g.shape[:2]
    g2 = g.reshape(n, o, -1)  # (N, O, L)
    # dW: one GEMM over the batch and the positions, K = N * L
    dw = ar.gemm(g2.permute(1, 0, 2).reshape(o, -1), cols.permute(0, 2, 1).reshape(-1, cols.shape[1]))
    db = ar.sum(g2.permute(1, 0, 2).reshape(o, -1), 1) if p["bias"] is not None else None
    dx = ar.sum(_conv_input_terms(ar, p, g), 0)
    return [ar.result(dx), ar.result(dw).reshape(p["weight"].shape), None if db is None else ar.result(db)]


def _conv_input_terms(ar: Arith, p: dict, g: torch.Tensor) -> torch.Tensor:
    """The products the input's gradient sums, (O*kh*kw, N, C, H, W): one reduction of K = O*kh*kw
    terms per input element, as an implicit-GEMM kernel sums them (a term is 0 where the kernel
    offset reads no output position: adding it changes no rounded sum)."""
    x, w = p["input"], p["weight"]
    n, c, h, wd = x.shape
    o, taps = w.shape[0], w.shape[2] * w.shape[3]
    # The input element each (kernel offset, output position) reads: an unfolded index image, -1 in the padding.
    where = torch.arange(1, h * wd + 1, dtype=F64).reshape(1, 1, h, wd)
    unfolded = F.unfold(
        where,
        tuple(w.shape[-2:]),
        dilation=_pair(p["dilation"]),
        padding=_pair(p["padding"]),
        stride=_pair(p["stride"]),
    )
    read = unfolded[0].long() - 1  # (taps, L)
    weights, grads = ar.operands(w.reshape(o, c, taps), g.reshape(n, o, -1))
    products = weights.permute(0, 2, 1)[:, :, None, :, None] * grads.permute(1, 0, 2)[:, None, :, None, :]
    terms = torch.zeros((o, taps, n, c, h * wd + 1), dtype=F64)  # the last column takes the padding's
    index = read.masked_fill(read < 0, h * wd)[None, :, None, None, :].expand(products.shape)
    terms.scatter_(-1, index, products)  # one offset reads each element at most once
    return terms[..., : h * wd].reshape(o * taps, n, c, h, wd)


def softmax_backward(ar: Arith, p: dict, g: torch.Tensor, y: torch.Tensor | None) -> list[torch.Tensor | None]:
    dim = p["dim"] if p["dim"] is not None else -1
    if ar.mid == F64 or y is None:  # the benchmark recomputes y; a kernel uses the one the forward saved
        y = softmax_forward(Arith(EXACT, F64) if ar.mid == F64 else ar, p)[0]
    y, g = _last(y, dim), _last(g, dim)
    if ar.kernel.drop_term:
        dx = ar.r(y * g)
    else:
        dot = ar.sum(y * g, -1, "softmax").unsqueeze(-1)
        dx = ar.r(y * ar.r(g - dot))
    return [ar.result(dx).movedim(-1, dim)]


def layer_norm_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    rows, n = _rows(p)
    g = g.reshape(-1, n)
    mean, rstd = _stats(ar, rows, n, p["eps"])
    xhat = ar.r(ar.r(rows - mean) * rstd)
    w = p["weight"]
    gw = ar.r(g * w.reshape(1, n)) if w is not None else g
    a = ar.racc(ar.sum(gw, 1) / n).unsqueeze(1)
    c = ar.racc(ar.sum(gw * xhat, 1) / n).unsqueeze(1)
    inner = ar.r(gw - ar.r(xhat * c)) if ar.kernel.drop_term else ar.r(ar.r(gw - a) - ar.r(xhat * c))
    dx = ar.result(ar.r(rstd * inner)).reshape(p["input"].shape)
    dw = ar.result(ar.sum(g * xhat, 0)).reshape(w.shape) if w is not None else None
    db = ar.result(ar.sum(g, 0)).reshape(p["bias"].shape) if p["bias"] is not None else None
    return [dx, dw, db]


def batch_norm_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    """The gradients of input, weight and bias (the running statistics take none)."""
    rows, mean, rstd = _batch_stats(ar, p)
    n = rows.shape[1]
    g = _channels(g)
    xhat = ar.r(ar.r(rows - mean) * rstd)
    sum_g = ar.sum(g, 1).unsqueeze(1)  # the bias's gradient
    sum_gx = ar.sum(g * xhat, 1).unsqueeze(1)  # the weight's
    a, c = ar.r(sum_g / n), ar.r(sum_gx / n)
    inner = ar.r(g - ar.r(xhat * c)) if ar.kernel.drop_term else ar.r(ar.r(g - a) - ar.r(xhat * c))
    w = p["weight"]
    scale = ar.r(rstd * w.reshape(-1, 1)) if w is not None else rstd
    dx = ar.result(_unchannels(ar.r(scale * inner), p["input"].shape))
    dw = ar.result(sum_gx[:, 0]).reshape(w.shape) if w is not None else None
    db = ar.result(sum_g[:, 0]).reshape(p["bias"].shape) if p["bias"] is not None else None
    return [dx, dw, db]


def gelu_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    if p["approximate"] != "none":
        raise NotApplicable("the recorded GELU is already the tanh approximation")
    return [ar.result(g * _gelu_grad(p["input"], ar.kernel.gelu))]


def embedding_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    if p["padding_idx"] is not None or p["max_norm"] is not None or p["scale_grad_by_freq"]:
        raise NotApplicable("embedding with padding_idx, max_norm or scale_grad_by_freq")
    idx = p["input"].reshape(-1).long()
    g = g.reshape(idx.shape[0], -1)
    onehot = F.one_hot(idx, p["weight"].shape[0]).to(F64)  # (P, V): adding zeros changes no sum
    return [ar.result(ar.sum(onehot[:, :, None] * g[:, None, :], 0))]


# -- the families of the diffusion U-Net and the sequence model (issue 47's held-out check) ---------


def _group_rows(p: dict) -> tuple[torch.Tensor, int]:
    """group_norm's statistics rows: (N * groups, C / groups * spatial)."""
    x, groups = p["input"], int(p["num_groups"])
    if x.dim() < 2 or x.shape[1] % groups:
        raise NotApplicable("group_norm of a vector")
    rows = x.reshape(x.shape[0] * groups, -1)
    return rows, rows.shape[1]


def _per_channel(v: torch.Tensor) -> torch.Tensor:
    """A weight or bias of C channels against (N, C, positions)."""
    return v.reshape(1, -1, 1)


def group_norm_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    x = p["input"]
    rows, n = _group_rows(p)
    mean, rstd = _stats(ar, rows, n, p["eps"])
    y = ar.r(ar.r(rows - mean) * rstd).reshape(x.shape[0], x.shape[1], -1)
    if p["weight"] is not None:
        y = ar.r(y * _per_channel(p["weight"]))
    if p["bias"] is not None:
        y = ar.r(y + _per_channel(p["bias"]))
    return [ar.result(y).reshape(x.shape)]


def group_norm_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    """layer_norm's input gradient over each group's rows, with the weight per channel; the weight's
    and bias's gradients summed per channel over the batch and the positions."""
    x, w = p["input"], p["weight"]
    rows, n = _group_rows(p)
    mean, rstd = _stats(ar, rows, n, p["eps"])
    xhat = ar.r(ar.r(rows - mean) * rstd)
    g3 = g.reshape(x.shape[0], x.shape[1], -1)
    gw = (ar.r(g3 * _per_channel(w)) if w is not None else g3).reshape(rows.shape)
    a = ar.racc(ar.sum(gw, 1) / n).unsqueeze(1)
    c = ar.racc(ar.sum(gw * xhat, 1) / n).unsqueeze(1)
    inner = ar.r(gw - ar.r(xhat * c)) if ar.kernel.drop_term else ar.r(ar.r(gw - a) - ar.r(xhat * c))
    dx = ar.result(ar.r(rstd * inner)).reshape(x.shape)

    def per_channel(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(x.shape[0], x.shape[1], -1).movedim(1, 0).reshape(x.shape[1], -1)

    dw = ar.result(ar.sum(per_channel(g3.reshape(rows.shape) * xhat), 1)) if w is not None else None
    db = ar.result(ar.sum(per_channel(g3), 1)) if p["bias"] is not None else None
    return [dx, dw, db]


def _avg_as_adaptive(p: dict) -> dict:
    """avg_pool2d whose windows tile the input (stride = kernel, no padding) is adaptive_avg_pool2d's."""
    x, kernel = p["input"], _pair(p["kernel_size"])
    stride = _pair(p["stride"]) if p["stride"] not in (None, []) else kernel
    if (
        x.dim() != 4
        or stride != kernel
        or _pair(p["padding"]) != (0, 0)
        or p["ceil_mode"]
        or p["divisor_override"]
        or x.shape[2] % kernel[0]
        or x.shape[3] % kernel[1]
    ):
        raise NotApplicable("avg_pool2d of overlapping or padded windows is not modelled")
    return {"input": x, "output_size": (x.shape[2] // kernel[0], x.shape[3] // kernel[1])}


def avg_pool_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    return adaptive_avg_pool_forward(ar, _avg_as_adaptive(p))


def avg_pool_backward(ar: Arith, p: dict, g: torch.Tensor, y: Any) -> list[torch.Tensor | None]:
    return adaptive_avg_pool_backward(ar, _avg_as_adaptive(p), g, y)


def _attention(ar: Arith, p: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float, torch.Tensor]:
    """(q, k, v, scale, P): the probabilities as the kernel computes them (S = Q K^T scale, softmax)."""
    q, k, v = p["query"], p["key"], p["value"]
    if p["attn_mask"] is not None or p["dropout_p"] or p["enable_gqa"] or q.shape[:-2] != k.shape[:-2]:
        raise NotApplicable("attention with a mask, dropout or grouped keys is not modelled")
    scale = float(p["scale"]) if p["scale"] is not None else 1 / math.sqrt(q.shape[-1])
    scores = ar.r(ar.racc(ar.gemm(q, k.transpose(-1, -2))) * scale)
    if p["is_causal"]:
        scores = _causal(scores)
    e, total = _softmax_parts(ar, scores)
    return q, k, v, scale, ar.r(e / total)


def sdpa_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    if ar.kernel.flash and ar.mid != F64:
        return [ar.result(_flash_output(ar, p))]
    _, _, v, _, probs = _attention(ar, p)
    return [ar.result(ar.gemm(probs, v))]


def _flash_output(ar: Arith, p: dict) -> torch.Tensor:
    """O = (exp(S - max) rounded to the entry's dtype) V / their fp32 sum: FlashAttention-2's forward."""
    q, k, v = p["query"], p["key"], p["value"]
    _, _, _, scale, _ = _attention(ar, p)  # checks what is modelled
    scores = ar.r(ar.racc(ar.gemm(q, k.transpose(-1, -2))) * scale)
    if p["is_causal"]:
        scores = _causal(scores)
    e, total = _softmax_parts(ar, scores)
    return ar.r(ar.r(ar.gemm(rnd(e, ar.out), v)) / total)


def sdpa_backward(ar: Arith, p: dict, g: torch.Tensor, y: torch.Tensor | None) -> list[torch.Tensor | None]:
    """dV = P^T dO, dS = P (dO V^T - rowsum(dO O)), dQ = dS K scale, dK = dS^T Q scale; O the output the
    forward saved (the benchmark: its own)."""
    q, k, v, scale, probs = _attention(ar, p)
    if ar.mid == F64 or y is None:
        y = sdpa_forward(Arith(EXACT, F64) if ar.mid == F64 else ar, p)[0]
    flash = ar.kernel.flash and ar.mid != F64  # P and dS rounded to the entry's dtype before their GEMMs
    dv = ar.gemm((rnd(probs, ar.out) if flash else probs).transpose(-1, -2), g)
    dp = ar.r(ar.racc(ar.gemm(g, v.transpose(-1, -2))))
    if ar.kernel.drop_term:
        ds = ar.r(probs * dp)
    else:
        rowsum = ar.sum(g * y, -1, "softmax").unsqueeze(-1)
        ds = ar.r(probs * ar.r(dp - rowsum))
    ds = ar.r(ds * scale)
    ds = rnd(ds, ar.out) if flash else ds
    return [ar.result(ar.gemm(ds, k)), ar.result(ar.gemm(ds.transpose(-1, -2), q)), ar.result(dv)]


def log_softmax_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    dim = p["dim"] if p["dim"] is not None else -1
    x = _last(p["input"], dim)
    _, total = _softmax_parts(ar, x)
    y = ar.r(ar.r(x - x.amax(-1, keepdim=True)) - ar.r(torch.log(total)))
    return [ar.result(y).movedim(-1, dim)]


def log_softmax_backward(ar: Arith, p: dict, g: torch.Tensor, y: torch.Tensor | None) -> list[torch.Tensor | None]:
    """dx = g - exp(y) sum(g), y the output the forward saved; the missing term: g alone."""
    dim = p["dim"] if p["dim"] is not None else -1
    if ar.mid == F64 or y is None:
        y = log_softmax_forward(Arith(EXACT, F64) if ar.mid == F64 else ar, p)[0]
    y, g = _last(y, dim), _last(g, dim)
    if ar.kernel.drop_term:
        dx = g
    else:
        total = ar.sum(g, -1, "softmax").unsqueeze(-1)
        dx = ar.r(g - ar.r(ar.r(torch.exp(y)) * total))
    return [ar.result(dx).movedim(-1, dim)]


def _prefixes(x: torch.Tensor, suffix: bool = False) -> torch.Tensor:
    """(..., T) -> (..., T, T): row i holds the terms of prefix i (suffix i), zeros elsewhere: summed in
    order, row i is a running sum's i-th value (adding a 0 rounds nothing)."""
    n = x.shape[-1]
    mask = torch.ones(n, n, dtype=torch.bool)
    mask = mask.triu() if suffix else mask.tril()
    return torch.where(mask, x.unsqueeze(-2), torch.zeros((), dtype=x.dtype))


def cumsum_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    if p["dtype"] is not None:
        raise NotApplicable("cumsum into another dtype is not modelled")
    x = _last(p["input"], p["dim"])
    return [ar.result(ar.sum(_prefixes(x), -1)).movedim(-1, p["dim"])]


def cumsum_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    """dx_i = the sum of g_j over j >= i (a reversed cumsum)."""
    g = _last(g, p["dim"])
    return [ar.result(ar.sum(_prefixes(g, suffix=True), -1)).movedim(-1, p["dim"])]


def _products(ar: Arith, x: torch.Tensor) -> torch.Tensor:
    """The prefix products of (..., T) along T, each partial product rounded to the accumulator, in the
    kernel's order (pairwise: a tree)."""
    if ar.mid == F64:
        return torch.cumprod(x, -1)
    acc = ar.acc_dtype("reduction")
    n = x.shape[-1]
    terms = torch.where(torch.ones(n, n, dtype=torch.bool).tril(), x.unsqueeze(-2), torch.ones((), dtype=x.dtype))
    t = terms.movedim(-1, 0)  # (T_j, ..., T_i)
    if ar.kernel.order == "pairwise":
        t = rnd(t, acc)
        while t.shape[0] > 1:
            if t.shape[0] % 2:
                t = torch.cat([t, torch.ones_like(t[:1])])
            t = rnd(t[0::2] * t[1::2], acc)
        return t[0]
    total = torch.ones(t.shape[1:], dtype=F64)
    for term in t.flip(0) if ar.kernel.order == "reverse" else t:
        total = rnd(total * term, acc)
    return total


def cumprod_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    if p["dtype"] is not None:
        raise NotApplicable("cumprod into another dtype is not modelled")
    x = _last(p["input"], p["dim"])
    return [ar.result(_products(ar, x)).movedim(-1, p["dim"])]


def cumprod_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    """dx_i = (the sum of g_j y_j over j >= i) / x_i where no x_i is 0, the prefix products y computed
    again from x in the kernel's precision (PyTorch's bf16 kernel is within an ULP of the float64 one:
    it does not read its bf16 output; one that did would be 8 ULP off where the sum cancels)."""
    x = _last(p["input"], p["dim"])
    if bool((x == 0).any()):
        raise NotApplicable("cumprod's gradient at a 0 is not modelled")
    y, g = _products(ar, x), _last(g, p["dim"])
    sums = ar.racc(ar.sum(_prefixes(ar.r(g * y), suffix=True), -1))
    return [ar.result(ar.r(sums / x)).movedim(-1, p["dim"])]


def nll_loss_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    x, target = p["input"], p["target"]
    if p["weight"] is not None or p["reduction"] != "mean" or x.dim() != 2 or bool((target == p["ignore_index"]).any()):
        raise NotApplicable("nll_loss with weights, ignored targets or not a mean")
    picked = -x.gather(1, target.long()[:, None])[:, 0]
    return [ar.result(ar.racc(ar.sum(picked, 0) / x.shape[0]))]


def mse_loss_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    x, target = p["input"], p["target"]
    if p["reduction"] != "mean" or not isinstance(target, torch.Tensor) or x.shape != target.shape:
        raise NotApplicable("mse_loss not a mean, or broadcast")
    d = ar.r(x - target).reshape(-1)
    return [ar.result(ar.racc(ar.sum(ar.r(d * d), 0) / d.numel()))]


def _index_add(ar: Arith, index: torch.Tensor, g: torch.Tensor, rows: int) -> torch.Tensor:
    """g's rows added into a table of `rows` rows at `index`, in order (an embedding's gradient)."""
    onehot = F.one_hot(index.reshape(-1).long(), rows).to(F64)  # (P, V): adding zeros changes no sum
    return ar.result(ar.sum(onehot[:, :, None] * g.reshape(onehot.shape[0], -1)[:, None, :], 0))


def _bags(p: dict) -> torch.Tensor:
    bags = p["input"]
    if (
        bags.dim() != 2
        or p["offsets"] is not None
        or p["per_sample_weights"] is not None
        or p["max_norm"] is not None
        or p["padding_idx"] is not None
        or p["scale_grad_by_freq"]
        or p["mode"] not in ("sum", "mean")
    ):
        raise NotApplicable("embedding_bag with offsets, weights, max_norm, padding_idx or max mode")
    return bags.long()


def embedding_bag_forward(ar: Arith, p: dict) -> list[torch.Tensor]:
    bags = _bags(p)
    total = ar.sum(p["weight"][bags], 1)  # (B, bag, D): each bag's rows in order
    if p["mode"] == "mean":
        total = ar.racc(total / bags.shape[1])
    return [ar.result(total)]


def embedding_bag_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    bags = _bags(p)
    each = g[:, None, :].expand(bags.shape[0], bags.shape[1], g.shape[-1])
    if p["mode"] == "mean":
        each = ar.r(each / bags.shape[1])
    return [_index_add(ar, bags, each, p["weight"].shape[0])]


def index_select_backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
    if p["dim"] not in (0, -p["input"].dim()):
        raise NotApplicable("index_select along another dimension than the first is not modelled")
    return [_index_add(ar, p["index"], g, p["input"].shape[0]).reshape(p["input"].shape)]


def _softplus(x: torch.Tensor, p: dict, naive: Arith | None = None) -> torch.Tensor:
    beta, threshold = float(p["beta"]), float(p["threshold"])
    if naive is None:
        soft = torch.log1p(torch.exp(beta * x)) / beta
    else:  # log(1 + exp(x)) in fp32: 1 + exp(x) rounds away what log1p keeps
        soft = naive.r(naive.r(torch.log(naive.r(1 + naive.r(torch.exp(naive.r(beta * x)))))) / beta)
    return torch.where(beta * x > threshold, x, soft)


def _fast_tanh(ar: Arith, x: torch.Tensor) -> torch.Tensor:
    """tanh as (1 - e) / (1 + e), e = a fast exp(-2|x|), in fp32: the cancellation near 0 a tanh from
    exp makes, and the fast exp's error."""
    e = ar.r(fast_exp(-2 * x.abs()))
    return torch.sign(x) * ar.r(ar.r(1 - e) / ar.r(1 + e))


def _unary_value(name: str, ar: Arith, p: dict) -> torch.Tensor:
    x = p["input"]
    if ar.kernel.fast_math and ar.mid != F64:
        if name == "exp":
            return fast_exp(x)
        if name in ("sin", "cos"):
            return fast_trig(x, getattr(torch, name)).to(F64)
        if name == "sigmoid":
            return 1 / (1 + fast_exp(-x))
        if name == "silu":
            return x / (1 + fast_exp(-x))
        if name == "tanh":
            return _fast_tanh(ar, x)
        return _softplus(x, p, naive=ar)
    if name == "silu":
        return x * torch.sigmoid(x)
    if name == "softplus":
        return _softplus(x, p)
    return getattr(torch, name)(x)


def _unary_grad(name: str, ar: Arith, p: dict) -> torch.Tensor:
    """The derivative at x, float64 (a correctly rounded gradient; silu's missing term: sigmoid(x) alone)."""
    x = p["input"]
    s = torch.sigmoid(x)
    if name == "silu":
        return s if ar.kernel.drop_term else s * (1 + x * (1 - s))
    if name == "softplus":
        beta, threshold = float(p["beta"]), float(p["threshold"])
        return torch.where(beta * x > threshold, torch.ones_like(x), torch.sigmoid(beta * x))
    derivative = {
        "exp": torch.exp(x),
        "sin": torch.cos(x),
        "cos": -torch.sin(x),
        "sigmoid": s * (1 - s),
        "tanh": 1 - torch.tanh(x) ** 2,
    }
    return derivative[name]


def _unary_forward(name: str) -> Callable:
    def forward(ar: Arith, p: dict) -> list[torch.Tensor]:
        return [ar.result(_unary_value(name, ar, p))]

    return forward


def _unary_backward(name: str) -> Callable:
    def backward(ar: Arith, p: dict, g: torch.Tensor, _y: Any) -> list[torch.Tensor | None]:
        return [ar.result(g * _unary_grad(name, ar, p))]

    return backward


FORWARD_FNS: dict[str, Callable] = {
    "linear": linear_forward,
    "matmul": matmul_forward,
    "conv": conv_forward,
    "softmax": softmax_forward,
    "layer_norm": layer_norm_forward,
    "batch_norm": batch_norm_forward,
    "adaptive_avg_pool": adaptive_avg_pool_forward,
    "gelu": gelu_forward,
    "cross_entropy": cross_entropy_forward,
    "conv_transpose": conv_transpose_forward,
    "group_norm": group_norm_forward,
    "avg_pool": avg_pool_forward,
    "sdpa": sdpa_forward,
    "log_softmax": log_softmax_forward,
    "cumsum": cumsum_forward,
    "cumprod": cumprod_forward,
    "nll_loss": nll_loss_forward,
    "mse_loss": mse_loss_forward,
    "embedding_bag": embedding_bag_forward,
    **{name: _unary_forward(name) for name in _UNARY},
}
BACKWARD_FNS: dict[str, Callable] = {
    "linear": linear_backward,
    "matmul": matmul_backward,
    "conv": conv_backward,
    "softmax": softmax_backward,
    "layer_norm": layer_norm_backward,
    "batch_norm": batch_norm_backward,
    "max_pool": max_pool_backward,
    "adaptive_avg_pool": adaptive_avg_pool_backward,
    "gelu": gelu_backward,
    "embedding": embedding_backward,
    "conv_transpose": conv_transpose_backward,
    "group_norm": group_norm_backward,
    "avg_pool": avg_pool_backward,
    "sdpa": sdpa_backward,
    "log_softmax": log_softmax_backward,
    "cumsum": cumsum_backward,
    "cumprod": cumprod_backward,
    "embedding_bag": embedding_bag_backward,
    "index_select": index_select_backward,
    **{name: _unary_backward(name) for name in _UNARY},
}


def recorded_layout(family: str | None, p: dict, grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """Gradients of the floating inputs in argument order -> the order and nodes msprobe records.

    linear on a 2-D input records addmm's gradients: bias, input, weight transposed (no bias: input,
    weight transposed). Where msprobe records an inner node of the API's graph (linear or matmul on
    more dimensions: the grad_output; cross_entropy: the gradient at log_softmax's output) there is
    nothing to compare: NotApplicable.
    """
    if family == "linear":
        if p["input"].dim() != 2:
            raise NotApplicable("msprobe records a linear of a >2-D input at an inner node")
        dx, dw, db = ([*list(grads), None, None])[:3]
        wt = None if dw is None else dw.T
        return [db, dx, wt] if p["bias"] is not None else [dx, wt]
    if family == "matmul" and (p["input"].dim() != 2 or p["other"].dim() != 2):
        raise NotApplicable("msprobe records a batched matmul's gradient at an inner node (its grad_output)")
    if family == "cross_entropy":
        raise NotApplicable("msprobe records cross_entropy's gradient at log_softmax's output")
    return list(grads)


API_ROOTS = {"Functional": F, "Torch": torch, "Tensor": torch.Tensor}
NO_GRAD = frozenset({"running_mean", "running_var"})  # batch_norm updates them in place: no leaves


def torch_kernel(entry: Entry, threads: int | None = None, onednn: bool = True) -> list[torch.Tensor | None]:
    """PyTorch's own CPU kernel for the entry in its recorded dtypes (autocast: the inputs rounded to
    the output's dtype, as autocast does), in the recorded layout, at `threads` intra-op threads; with
    oneDNN's kernels or ATen's own (`onednn`: which a CPU runs depends on its bf16/fp16 units, and the
    standard's low run takes both: bench/studies/cpu_kernels.md)."""
    fn = getattr(API_ROOTS[entry.name.split(".", 1)[0]], entry.api)
    dtype = entry.dtype

    def place(x: Any, name: str = "") -> Any:
        if isinstance(x, list):
            return [place(v) for v in x]
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            return x
        if dtype in LOW and x.dtype.itemsize > dtype.itemsize:
            x = x.to(dtype)
        return x.detach().clone().requires_grad_(entry.direction == BACKWARD and name not in NO_GRAD)

    before, onednn_before = torch.get_num_threads(), torch.backends.mkldnn.enabled
    if threads:
        torch.set_num_threads(threads)
    torch.backends.mkldnn.enabled = onednn
    try:
        names = PARAMS.get(entry.family or "", ())
        args = [place(a, names[i] if i < len(names) else "") for i, a in enumerate(entry.args)]
        kwargs = {k: place(v, k) for k, v in entry.kwargs.items()}
        with torch.set_grad_enabled(entry.direction == BACKWARD):
            out = fn(*args, **kwargs)
        if entry.direction == FORWARD:
            return [o.detach() if isinstance(o, torch.Tensor) else None for o in flat(list(_as_list(out)))]
        leaves = [t for t in flat([*args, *kwargs.values()]) if isinstance(t, torch.Tensor) and t.requires_grad]
        g = next(g for g in entry.grad_outputs if isinstance(g, torch.Tensor))
        grads = torch.autograd.grad((out * g.to(out.dtype)).sum(), leaves, allow_unused=True)
    finally:
        torch.set_num_threads(before)
        torch.backends.mkldnn.enabled = onednn_before
    family = entry.family
    return recorded_layout(family, bind(family, args, kwargs) if family else {}, [g for g in grads])


def _as_list(out: Any) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


# -- entries of a dump ---------------------------------------------------------


@dataclass
class Entry:
    """One entry of a tensor dump with the values a kind needs."""

    name: str  # Functional.linear.3.forward
    api: str  # linear
    family: str | None
    direction: str
    dtype: torch.dtype | None  # of the entry's first floating recorded output
    args: list  # the forward's recorded inputs, recorded dtypes
    kwargs: dict
    grad_outputs: list  # backward: the recorded grad_outputs
    forward_outputs: list  # the forward's recorded outputs
    output_specs: list  # this entry's recorded outputs (flat spec dicts, None kept)
    recorded: list = field(default_factory=list)  # this entry's recorded output values

    @property
    def prefix(self) -> str:
        return self.name.rsplit(".", 1)[0]


_DTYPES = {"torch.float64": F64, "torch.float32": F32, "torch.float16": torch.float16, "torch.bfloat16": torch.bfloat16}


def flat(specs: Any) -> list:
    if isinstance(specs, list):
        return [leaf for item in specs for leaf in flat(item)]
    return [specs]


def _loader(folder: Path) -> Callable[[Any], Any]:
    def load(spec: Any) -> Any:
        if isinstance(spec, list):
            return [load(s) for s in spec]
        if isinstance(spec, dict) and "data_name" in spec:
            return torch.load(folder / spec["data_name"], weights_only=True)
        if isinstance(spec, dict) and spec.get("type") == "torch.dtype":
            return getattr(torch, str(spec["value"]).replace("torch.", ""))
        if isinstance(spec, dict):
            value = spec.get("value")
            return tuple(value) if spec.get("type") in ("tuple", "torch.Size") and value is not None else value
        return spec

    return load


def load_entry(dump_dir: Path, name: str, data: dict | None = None) -> Entry:
    """name: "Functional.linear.3.forward" or ".backward"; data: dump.json's "data", if already read."""
    dump_dir = Path(dump_dir)
    if data is None:
        data = json.loads((dump_dir / "dump.json").read_text())["data"]
    load = _loader(dump_dir / "dump_tensor_data")
    prefix, direction = name.rsplit(".", 1)
    forward = data[f"{prefix}.forward"]
    body = data[name]
    api = prefix.split(".", 1)[1].rsplit(".", 1)[0]
    specs = flat(body.get("output", []))
    dtype = next((_DTYPES[s["dtype"]] for s in specs if isinstance(s, dict) and s.get("dtype") in _DTYPES), None)
    entry = Entry(
        name,
        api,
        family_of(api),
        direction,
        dtype,
        load(forward.get("input_args", [])),
        {k: load(v) for k, v in (forward.get("input_kwargs") or {}).items()},
        flat(load(body.get("input", []))) if direction == BACKWARD else [],
        flat(load(forward.get("output", []))),
        specs,
    )
    entry.recorded = [None if s is None else load(s) for s in specs]
    return entry


def compute(kind: str, entry: Entry, seed: int = 0) -> list[torch.Tensor | None]:
    """The entry's outputs (backward: recorded gradients) as kind's kernel computes them, in the
    recorded layout and dtypes; NotApplicable where the kind does not change this entry."""
    spec = KINDS[kind]
    if entry.family is None or entry.family not in spec.families:
        raise NotApplicable(f"{kind} does not apply to {entry.api}")
    if entry.direction not in spec.directions:
        raise NotApplicable(f"{kind} has no {entry.direction}")
    dtype = entry.dtype
    if dtype is None or dtype not in spec.dtypes:
        raise NotApplicable(f"{kind} does not apply to {dtype}")
    values = run(spec.kernel, entry)
    if spec.kernel.ulp_noise:
        generator = torch.Generator().manual_seed(seed)
        values = [None if v is None else _one_ulp(v, dtype, generator) for v in values]
    return _in_recorded_dtypes(entry, values)


def run(kernel: Kernel, entry: Entry) -> list[torch.Tensor | None]:
    """kernel's outputs for the entry in the recorded layout, float64 (EXACT: the benchmark)."""
    family = entry.family
    if family is None:
        raise NotApplicable(f"{entry.api} is not modelled")
    dtype = F64 if kernel.exact else entry.dtype
    if dtype is None:
        raise NotApplicable("no floating output")
    floating = {a.dtype for a in flat([*entry.args, *entry.kwargs.values()]) if _floating(a)}
    if family in _NORMS and len(floating) > 1:
        # batch_norm of a bf16 activation with fp32 parameters (an autocast model's): its kernel keeps the
        # parameters and their gradients in fp32, each output in its own dtype
        raise NotApplicable("a norm of mixed dtypes (a low-precision input, fp32 parameters) is not modelled")
    cast = _autocast(entry.dtype) if not kernel.exact else _f64
    p = bind(family, [cast(a) for a in entry.args], {k: cast(v) for k, v in entry.kwargs.items()})
    ar = Arith(kernel, dtype)
    if entry.direction == FORWARD:
        if family == "reduction":
            return list(reduction_forward(ar, p, entry.api))
        if family not in FORWARD_FNS:
            raise NotApplicable(f"{entry.api} forward computes no sum or function a kind changes")
        return list(FORWARD_FNS[family](ar, p))
    if family not in BACKWARD_FNS:
        raise NotApplicable(f"{entry.api} backward is not modelled")
    grads_out = [g for g in entry.grad_outputs if isinstance(g, torch.Tensor)]
    if not grads_out:
        raise NotApplicable("no grad_output recorded")
    y = (
        _f64(entry.forward_outputs[0])
        if entry.forward_outputs and isinstance(entry.forward_outputs[0], torch.Tensor)
        else None
    )
    grads = BACKWARD_FNS[family](ar, p, _f64(grads_out[0]), y)
    return recorded_layout(family, p, grads)


def _autocast(dtype: torch.dtype | None) -> Callable[[Any], Any]:
    """Inputs wider than a bf16/fp16 output (an autocast call) are rounded to it first, as the kernel does."""

    def cast(x: Any) -> Any:
        x = _f64(x) if not isinstance(x, list) else [cast(v) for v in x]
        if dtype in LOW and isinstance(x, torch.Tensor) and x.dtype == F64:
            return rnd(x, dtype)
        return x

    return cast


def _one_ulp(exact: torch.Tensor, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    rounded = rnd(exact, dtype)
    step = torch.randint(-1, 2, exact.shape, generator=generator).to(F64)
    return rnd(rounded + step * ulp(rounded, dtype), dtype)


def _in_recorded_dtypes(entry: Entry, values: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
    out: list[torch.Tensor | None] = []
    for spec, value in zip(entry.output_specs, values):
        if value is None or not isinstance(spec, dict) or "dtype" not in spec:
            out.append(None)
            continue
        dtype = getattr(torch, spec["dtype"].replace("torch.", ""))
        if list(value.shape) != list(spec["shape"]):
            raise NotApplicable(
                f"the kernel's output has shape {list(value.shape)}, msprobe recorded {spec['shape']}: another node"
            )
        out.append(value.to(dtype).contiguous())
    return out


def applicable(entry: Entry, kinds: Iterable[str] | None = None) -> list[str]:
    """The kinds that change this entry."""
    found = [
        name
        for name in (kinds or KINDS)
        if entry.family in KINDS[name].families
        and entry.direction in KINDS[name].directions
        and entry.dtype in KINDS[name].dtypes
    ]
    if found:
        try:
            _in_recorded_dtypes(entry, run(EXACT, entry))
        except NotApplicable:
            return []
    return found


def centring(entry: Entry) -> float:
    """The largest |mean| / std over a normalisation's statistics rows (layer_norm's rows, group_norm's
    groups, batch_norm's channels) of the entry's recorded input: near 0, a one-pass variance loses
    nothing a two-pass one keeps (bench/studies/kernel_bounds.md, "Where separation is impossible")."""
    if entry.family not in _NORMS:
        raise NotApplicable(f"{entry.api} is no normalisation")
    p = bind(entry.family, [_f64(a) for a in entry.args], {k: _f64(v) for k, v in entry.kwargs.items()})
    rows = {"layer_norm": lambda: _rows(p)[0], "group_norm": lambda: _group_rows(p)[0]}.get(
        entry.family, lambda: _channels(p["input"])
    )()
    return float((rows.mean(1).abs() / rows.std(1)).max())


ONE_ULP_LIBRARY = 1.5  # a 1-ULP library's farthest from the exact result, in ULP of the rounded result
SEPARABLE = 2.0  # a warning band's width: what lies within it of a correct kernel cannot be called an error


def changed(kind: str, entry: Entry, values: Sequence[torch.Tensor | None]) -> list[int]:
    """The outputs a deficit makes differ from the same kernel done right (layer_norm's missing term:
    the input gradient alone; TF32: not the bias gradient); a control changes all."""
    return Kernels(entry).changed(kind, values)


def correct_outputs(entry: Entry) -> list[list[torch.Tensor | None]]:
    """What correct kernels give for the entry: the recorded outputs and every control's."""
    return Kernels(entry).correct


def separation(value: torch.Tensor, exact: torch.Tensor, correct: Iterable[torch.Tensor | None]) -> float:
    """How far beyond every correct kernel a deficit's output gets at its worst element:
    max_i |t_i - b_i| / max(E_i, 1.5 ulp_i), with E_i the largest error of the correct outputs at i
    (recorded and controls) and 1.5 ULP a 1-ULP library's reach."""
    error = (value.to(F64) - exact).abs()
    reference = ONE_ULP_LIBRARY * ulp(rnd(exact, value.dtype), value.dtype)
    for other in correct:
        if other is not None and other.shape == value.shape:
            reference = torch.maximum(reference, (other.to(F64) - exact).abs())
    ratio = torch.where(error > 0, error / reference, torch.zeros_like(error)).nan_to_num(nan=math.inf)
    return float(ratio.max()) if ratio.numel() else 0.0


def material(value: torch.Tensor, exact: torch.Tensor, correct: Iterable[torch.Tensor | None]) -> bool:
    """Whether a deficit's output is, at some element, more than twice as far from the benchmark as every
    correct kernel (and a 1-ULP library) is there. Below that no per-element rule can call it an
    error and still pass the correct kernels with room to spare: it is immaterial."""
    return separation(value, exact, correct) > SEPARABLE


def expected_verdict(kind: str, entry: Entry, values: Sequence[torch.Tensor | None]) -> tuple[str, float]:
    """(error or pass, separation): error for a deficit that is material at some output it changes."""
    worst = max(Kernels(entry).separations(kind, values).values(), default=0.0)
    return (ERROR if worst > SEPARABLE else PASS), worst


class Kernels:
    """One entry's kernels, each computed once: what a corpus needs to plant several kinds of the
    entry in several copies of a dump (the correct outputs behind every deficit's separation)."""

    def __init__(self, entry: Entry, cpu_threads: Sequence[int] = ()):
        self.entry = entry
        self.cpu_threads = tuple(cpu_threads)
        self._outputs: dict[tuple[str, int], list[torch.Tensor | None]] = {}
        self._exact: list[torch.Tensor | None] | None = None
        self._reference: list[torch.Tensor | None] | None = None
        self._correct: list[list[torch.Tensor | None]] | None = None

    def outputs(self, kind: str, seed: int = 0, factor: float = 1.0) -> list[torch.Tensor | None]:
        """compute(kind, entry, seed), once; with `factor`, each output the kind changes that many times
        as far from the benchmark (amplified), the others as they are."""
        if (kind, seed) not in self._outputs:
            self._outputs[(kind, seed)] = compute(kind, self.entry, seed)
        values = self._outputs[(kind, seed)]
        if factor == 1.0:
            return values
        changed = set(self.changed(kind, values))
        moved = amplified(values, self.exact, factor)
        return [moved[i] if i in changed else value for i, value in enumerate(values)]

    @property
    def exact(self) -> list[torch.Tensor | None]:
        if self._exact is None:
            self._exact = run(EXACT, self.entry)
        return self._exact

    @property
    def correct(self) -> list[list[torch.Tensor | None]]:
        """The recorded outputs, every control's and, in bf16/fp16, PyTorch's own CPU kernel at each of
        `cpu_threads` (its weight gradients sum per-thread partials in that dtype)."""
        if self._correct is None:
            self._correct = [list(self.entry.recorded)]
            for spec in CONTROLS:
                try:
                    self._correct.append(self.outputs(spec.name))
                except NotApplicable:
                    continue
            if self.entry.dtype in LOW and self.entry.family == "linear" and self.entry.direction == FORWARD:
                # the product rounded to the entry's dtype, then the bias added: the other correct kernel of a
                # biased GEMM (docs/dtype-budget.md, "Two correct kernels"). Not a planted control: where the
                # product's fp32 sum and its exact value round to different bf16 neighbours, the standard's
                # reading of that kernel (the exact product rounded) is a bf16 ULP of the product off.
                self._correct.append(_in_recorded_dtypes(self.entry, run(Kernel(bias_after=True), self.entry)))
            if self.entry.dtype in LOW:
                self._correct += [
                    torch_kernel(self.entry, threads, onednn)
                    for threads in self.cpu_threads
                    for onednn in (True, False)
                ]
        return self._correct

    def changed(self, kind: str, values: Sequence[torch.Tensor | None]) -> list[int]:
        if not KINDS[kind].deficit:
            return [i for i, v in enumerate(values) if v is not None]
        if self._reference is None:
            self._reference = _in_recorded_dtypes(self.entry, run(Kernel(), self.entry))
        return [
            i
            for i, (v, r) in enumerate(zip(values, self._reference))
            if v is not None and (r is None or not torch.equal(v, r))
        ]

    def separations(self, kind: str, values: Sequence[torch.Tensor | None]) -> dict[int, float]:
        """A deficit's separation at each output it changes (a control: none)."""
        if not KINDS[kind].deficit:
            return {}
        found = {}
        for i in self.changed(kind, values):
            value, exact = values[i], self.exact[i]
            if value is not None and exact is not None:
                found[i] = separation(value, exact, [c[i] for c in self.correct if i < len(c)])
        return found


# -- a corpus ------------------------------------------------------------------


@dataclass(frozen=True)
class Planted:
    entry: str  # Functional.linear.3.forward
    kind: str
    expected: str  # error or pass
    outputs: tuple[int, ...]  # the recorded outputs replaced (positions in the entry's output list)
    separation: float = 0.0  # a deficit's worst element over every correct kernel's error there (see separation)
    separations: tuple[float, ...] = ()  # a deficit's separation at each of `outputs`
    # Each of `outputs` as a report numbers it: forward, its position; backward, the floating input whose
    # gradient it is (`<entry>.output.i` of the details CSV; linear on 2-D inputs records bias, input, weight).
    reported: tuple[int, ...] = ()
    factor: float = 1.0  # the kind's outputs that many times as far from the benchmark (amplified)
    unamplified: tuple[float, ...] = ()  # amplified: the separation of each of `outputs` before


def plan_all(dump_dir: Path, kinds: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """Every (entry, kind) of a dump that the kinds change."""
    data = json.loads((Path(dump_dir) / "dump.json").read_text())["data"]
    plan = []
    for name in data:
        if not name.endswith((".forward", ".backward")) or f"{name.rsplit('.', 1)[0]}.forward" not in data:
            continue
        entry = load_entry(dump_dir, name, data)
        plan += [(name, kind) for kind in applicable(entry, kinds)]
    return plan


def amplified(
    values: Sequence[torch.Tensor | None], exact: Sequence[torch.Tensor | None], factor: float
) -> list[torch.Tensor | None]:
    """Each value `factor` times as far from the exact one, in its own dtype: a kernel ten times as
    deficient (exact + factor (value - exact), rounded once)."""
    found: list[torch.Tensor | None] = []
    for value, reference in zip(values, exact):
        if value is None or reference is None:
            found.append(value)
            continue
        moved = reference.to(F64) + factor * (value.to(F64) - reference.to(F64))
        found.append(moved.to(value.dtype))
    return found


# The older study's fault injections (bench/studies/kernel_bounds.py), on a recorded output.
def _scaled(t: torch.Tensor) -> torch.Tensor:
    return (t.double() * 1.03).to(t.dtype)


def _noisy(t: torch.Tensor) -> torch.Tensor:
    signs = torch.randint(0, 2, t.shape, generator=torch.Generator().manual_seed(0)).double() * 2 - 1
    return (t.double() * (1 + 0.03 * signs)).to(t.dtype)


def _cut(t: torch.Tensor) -> torch.Tensor:
    return round_mantissa(t.double(), 3).to(t.dtype)  # 3 explicit mantissa bits, to nearest


def _swapped(t: torch.Tensor) -> torch.Tensor:
    flat = t.clone().reshape(t.shape[0], -1) if t.dim() and t.shape[0] > 1 else t.clone().reshape(-1, 1)
    if flat.shape[0] > 1:
        flat[[0, 1]] = flat[[1, 0]]
    return flat.reshape(t.shape)


def _one_off(t: torch.Tensor) -> torch.Tensor:
    out = t.double().clone().reshape(-1)
    if out.numel():
        out[0] += 1.0
    return out.reshape(t.shape).to(t.dtype)


FAULTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "fault x1.03": _scaled,
    "fault 3% noise": _noisy,
    "fault 3-bit mantissa": _cut,
    "fault swapped rows": _swapped,
    "fault one element +1.0": _one_off,
}


def faulty(fault: str, recorded: torch.Tensor, factor: float = 1.0) -> torch.Tensor:
    """A recorded output with one of FAULTS injected, `factor` times as far from it."""
    injected = FAULTS[fault](recorded)
    if factor == 1.0:
        return injected
    return (recorded.double() + factor * (injected.double() - recorded.double())).to(recorded.dtype)


def build_corpus(source: Path, target: Path, plan: Iterable[tuple[str, str]], seed: int = 0) -> list[Planted]:
    """Copy the dump at source to target and replace, for each (entry, kind) of plan, the entry's
    recorded outputs (backward: recorded gradients) with kind's; one kind per entry. Returns what was
    planted and the verdict a standard should give it."""
    return _plant(source, target, plan, seed, {}, ())


def build_corpora(
    source: Path,
    folder: Path,
    plan: Iterable[tuple[str, str]],
    seed: int = 0,
    cpu_threads: Sequence[int] = (),
    factor: float = 1.0,
) -> list[Corpus]:
    """Every (entry, kind) of plan planted, in as few copies of the dump (folder/0, folder/1, ...) as
    one kind per entry allows: copy j holds the j-th kind of each entry, its deficits first (so the
    first copies hold every deficit). Each entry's kernels are computed once for all copies.

    cpu_threads: PyTorch's own bf16/fp16 CPU kernel at these thread counts is a correct kernel too,
    for the separations (a clean dump may have been written by it at any of them).

    factor: each kind's outputs that many times as far from the benchmark (amplified)."""
    kinds: dict[str, list[str]] = {}
    for name, kind in plan:
        kinds.setdefault(name, []).append(kind)
    for names in kinds.values():
        names.sort(key=lambda kind: not KINDS[kind].deficit)  # stable: the plan's order otherwise
    count = max((len(names) for names in kinds.values()), default=0)
    memo: dict[str, Kernels] = {}
    corpora = []
    for j in range(count):
        target = Path(folder) / str(j)
        copy = [(name, names[j]) for name, names in kinds.items() if j < len(names)]
        corpora.append(Corpus(target, _plant(source, target, copy, seed, memo, cpu_threads, factor)))
    return corpora


@dataclass(frozen=True)
class Corpus:
    path: Path  # a copy of the dump, planted: path / "dump.json"
    planted: list[Planted]


def _plant(
    source: Path,
    target: Path,
    plan: Iterable[tuple[str, str]],
    seed: int,
    memo: dict[str, Kernels],
    cpu_threads: Sequence[int],
    factor: float = 1.0,
) -> list[Planted]:
    source, target = Path(source), Path(target)
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o644 if path.is_file() else 0o755)
    dump = json.loads((target / "dump.json").read_text())
    data = dump["data"]
    planted, seen = [], set()
    for name, kind in plan:
        if name in seen:
            raise ValueError(f"{name} is planted twice: one kind per entry")
        seen.add(name)
        if name not in memo:
            memo[name] = Kernels(load_entry(source, name, data), cpu_threads)
        kernels = memo[name]
        entry = kernels.entry
        values = kernels.outputs(kind, seed, factor)
        replaced = kernels.changed(kind, values)
        for position in replaced:
            spec, value = data_spec(data, name, position), values[position]
            assert value is not None
            torch.save(value.clone(), target / "dump_tensor_data" / spec["data_name"])
            _restat(spec, value)  # spec is the dict inside `data`: the json is updated in place
        separations = kernels.separations(kind, values)
        before = kernels.separations(kind, kernels.outputs(kind, seed)) if factor != 1.0 else {}
        margin = max(separations.values(), default=0.0)
        expected = ERROR if margin > SEPARABLE else PASS
        planted.append(
            Planted(
                name,
                kind,
                expected,
                tuple(replaced),
                margin,
                tuple(separations.get(i, 0.0) for i in replaced),
                tuple(reported_index(entry, i) for i in replaced),
                factor,
                tuple(before.get(i, 0.0) for i in replaced) if before else (),
            )
        )
    (target / "dump.json").write_text(json.dumps(dump, indent=1))
    return planted


def data_spec(data: dict, name: str, position: int) -> dict:
    """The spec dict of an entry's recorded output at `position`, inside dump.json's data."""
    spec = flat(data[name].get("output", []))[position]
    assert isinstance(spec, dict)
    return spec


# The parameters whose gradients a family's backward returns, in order (BACKWARD_FNS).
GRAD_PARAMS = {
    "linear": ("input", "weight", "bias"),
    "matmul": ("input", "other"),
    "conv": ("input", "weight", "bias"),
    "softmax": ("input",),
    "layer_norm": ("input", "weight", "bias"),
    "batch_norm": ("input", "weight", "bias"),
    "max_pool": ("input",),
    "adaptive_avg_pool": ("input",),
    "gelu": ("input",),
    "embedding": ("weight",),
    "conv_transpose": ("input", "weight", "bias"),
    "group_norm": ("input", "weight", "bias"),
    "avg_pool": ("input",),
    "sdpa": ("query", "key", "value"),
    "log_softmax": ("input",),
    "cumsum": ("input",),
    "cumprod": ("input",),
    "embedding_bag": ("weight",),
    "index_select": ("input",),
    **{name: ("input",) for name in _UNARY},
}


def reported_index(entry: Entry, position: int) -> int:
    """The index a report gives the entry's recorded output at `position`: forward, the position;
    backward, the floating input whose gradient msprobe recorded there (argument order)."""
    if entry.direction == FORWARD or entry.family not in GRAD_PARAMS:
        return position
    p = bind(entry.family, entry.args, entry.kwargs)
    if entry.family == "linear":  # addmm's order: bias, input, weight (transposed)
        recorded = ["bias", "input", "weight"] if p["bias"] is not None else ["input", "weight"]
    else:
        recorded = list(GRAD_PARAMS[entry.family])
    # Every floating input counts, those that take no gradient too (batch_norm's running statistics).
    floating = [n for n in PARAMS[entry.family] if isinstance(p[n], torch.Tensor) and p[n].is_floating_point()]
    return floating.index(recorded[position])


def _restat(spec: dict, value: torch.Tensor) -> None:
    v = value.to(F64)
    spec.update({"Max": float(v.max()), "Min": float(v.min()), "Mean": float(v.mean()), "Norm": float(v.norm())})


def call_entry(
    api: str,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    *,
    direction: str = FORWARD,
    grad_output: torch.Tensor | None = None,
    forward_output: torch.Tensor | None = None,
) -> Entry:
    """An entry for a call that no dump recorded ("Functional.linear"), its outputs in the dtype of its
    first floating input, for tests and studies at other sizes."""
    kwargs = kwargs or {}
    dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
    name = f"{api}.0.{direction}"
    short = api.split(".", 1)[1]
    entry = Entry(
        name,
        short,
        family_of(short),
        direction,
        dtype,
        list(args),
        dict(kwargs),
        [grad_output] if grad_output is not None else [],
        [forward_output] if forward_output is not None else [],
        [],
    )
    shapes = run(EXACT, entry)
    entry.output_specs = [None if v is None else {"dtype": str(dtype), "shape": list(v.shape)} for v in shapes]
    return entry


# -- LLaMA-style kernels: entries of APIs the shipped dumps do not record -------
#
# A LLaMA-style decoder (RMSNorm, RoPE at positions in the thousands, SDPA, SwiGLU) and an MoE router
# run kernels the GPT and CNN dumps hold no entry of. Each case is one entry written in msprobe's
# layout from inputs drawn like the model's: a deficit's recorded outputs are what that deficient
# kernel gives, a control's what a correct one gives (PyTorch's own CPU kernel, or a flash-style
# attention: tiles of keys, online softmax, P rounded to bf16/fp16 before P V, fp32 accumulation).

LLAMA_HEADS, LLAMA_SEQ, LLAMA_HEAD_DIM, LLAMA_WIDTH = 4, 256, 64, 256
POSITION = 4000  # RoPE's first position: a long context's angles reach thousands of radians
EXPERTS = 8
PIO2_F32 = float(torch.tensor(math.pi / 2, dtype=F32))  # one fp32 constant: a fast-math range reduction
TWO_OVER_PI_F32 = float(torch.tensor(2 / math.pi, dtype=F32))


@dataclass
class Recorded:
    """What msprobe records of one call: its inputs and outputs, and for a backward entry the
    gradients fed to the outputs and those of the floating inputs (argument order)."""

    args: list
    kwargs: dict
    outputs: list
    grad_outputs: list | None = None
    grads: list | None = None


@dataclass(frozen=True)
class Case:
    name: str  # "flash_bf16"
    deficit: bool
    api: str  # "Functional.scaled_dot_product_attention"
    direction: str  # the entry judged: forward or backward (a backward case records its forward too)
    what: str
    build: Callable[[], Recorded]


@dataclass
class Draw:
    """Which inputs the cases draw: `offset` moves every seed (a study's other draws), `seq` the
    sequence length (keys of attention, rows elsewhere)."""

    offset: int = 0
    seq: int = LLAMA_SEQ


_DRAW = Draw()  # the draw write_cases is building (its `draw` argument)


def _randn(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed + 1000 * _DRAW.offset)
    return torch.randn(*shape, generator=generator, dtype=F64) * scale


def _attention_inputs(
    dtype: torch.dtype, seed: int = 10, peak: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v of a causal self-attention (1, heads, seq, 64): values with per-channel means, as a
    trained model's (the output then does not average to 0); `peak` scales q and k (scores peak^2
    times as wide: a trained model's sharper attention)."""
    shape = (1, LLAMA_HEADS, _DRAW.seq, LLAMA_HEAD_DIM)
    q, k = _randn(seed, *shape, scale=peak), _randn(seed + 1, *shape, scale=peak)
    v = _randn(seed + 2, *shape, scale=0.5) + _randn(seed + 3, 1, LLAMA_HEADS, 1, LLAMA_HEAD_DIM)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _causal(scores: torch.Tensor, keys: slice | None = None) -> torch.Tensor:
    rows, columns = scores.shape[-2], scores.shape[-1]
    start = 0 if keys is None else keys.start
    hidden = torch.arange(start, start + columns)[None, :] > torch.arange(rows)[:, None]
    return scores.masked_fill(hidden, -math.inf)


def flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(output in q's dtype, log-sum-exp in fp32) of causal attention as FlashAttention-2 computes it:
    keys in tiles, a running max and rescaled fp32 sum (online softmax), P rounded to the input dtype
    before P V, every product accumulated in fp32."""
    low = q.dtype
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=F64)
    total = torch.zeros_like(m)
    acc = torch.zeros_like(q)
    for start in range(0, k.shape[-2], tile):
        keys = slice(start, start + tile)
        s = _causal(rnd(rnd(q @ k[..., keys, :].transpose(-1, -2), F32) * scale, F32), keys)
        new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha = rnd(torch.exp(m - new), F32)  # exp(-inf) = 0 before any key
        p = rnd(torch.exp(rnd(s - new, F32)), F32)
        total = rnd(rnd(total * alpha, F32) + rnd(p.sum(-1, keepdim=True), F32), F32)
        acc = rnd(rnd(acc * alpha, F32) + rnd(rnd(p, low) @ v[..., keys, :], F32), F32)
        m = new
    out = rnd(acc / total, F32).to(low)
    return out, rnd(m + torch.log(total), F32)


def flash_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    g: torch.Tensor,
    tile: int,
    keep_fp32: bool = False,
) -> list[torch.Tensor]:
    """dQ, dK, dV as FlashAttention-2's backward computes them: P recomputed in fp32 from the saved
    log-sum-exp, D = rowsum(dO O) from the saved (rounded) output, P and dS rounded to the input dtype
    before the GEMMs, fp32 accumulation. `keep_fp32`: the fp32 accumulators (in float64), not yet
    rounded to the input dtype (a grouped key's gradient sums them first)."""
    low = q.dtype
    q, k, v, out, g = (t.to(F64) for t in (q, k, v, out, g))
    scale = 1 / math.sqrt(q.shape[-1])
    d = rnd((g * out).sum(-1, keepdim=True), F32)
    dq = torch.zeros_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for start in range(0, k.shape[-2], tile):
        keys = slice(start, start + tile)
        s = _causal(rnd(rnd(q @ k[..., keys, :].transpose(-1, -2), F32) * scale, F32), keys)
        p = rnd(torch.exp(rnd(s - lse, F32)), F32)
        dv[..., keys, :] = rnd(rnd(p, low).transpose(-1, -2) @ g, F32)
        dp = rnd(g @ v[..., keys, :].transpose(-1, -2), F32)
        ds = rnd(rnd(p * rnd(dp - d, F32), F32) * scale, F32)
        dq = rnd(dq + rnd(rnd(ds, low) @ k[..., keys, :], F32), F32)
        dk[..., keys, :] = rnd(rnd(ds, low).transpose(-1, -2) @ q, F32)
    return [dq, dk, dv] if keep_fp32 else [dq.to(low), dk.to(low), dv.to(low)]


def _grad_output(seed: int, like: torch.Tensor) -> torch.Tensor:
    return _randn(seed, *like.shape).to(like.dtype)


def _torch_backward(fn: Callable, args: list, kwargs: dict, g: torch.Tensor) -> tuple[list, list]:
    """(PyTorch's CPU outputs, the gradients of the floating tensor args) of fn(*args, **kwargs)."""
    leaves = [a.detach().clone().requires_grad_(True) if _floating(a) else a for a in args]
    out = fn(*leaves, **kwargs)
    grads = torch.autograd.grad(out, [a for a in leaves if _floating(a)], g)
    return [out.detach()], [t.detach() for t in grads]


def _floating(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.is_floating_point()


def _flash_case(dtype: torch.dtype, tile: int) -> Recorded:
    q, k, v = _attention_inputs(dtype)
    out, lse = flash_forward(q, k, v, tile)
    g = _grad_output(20, out)
    return Recorded([q, k, v], {"is_causal": True}, [out], [g], flash_backward(q, k, v, out, lse, g, tile))


def _sdpa_pv_low(dtype: torch.dtype) -> Recorded:
    """softmax in fp32, P rounded to the dtype, P V summed key by key with the running sum in the dtype."""
    q, k, v = _attention_inputs(dtype)
    p = rnd(torch.softmax(_causal(q.to(F64) @ k.to(F64).transpose(-1, -2) / math.sqrt(q.shape[-1])), -1), dtype)
    total = torch.zeros(q.shape, dtype=F64)
    for j in range(k.shape[-2]):
        total = rnd(total + p[..., j : j + 1] * v.to(F64)[..., j : j + 1, :], dtype)
    return Recorded([q, k, v], {"is_causal": True}, [total.to(dtype)])


def _bsh(x: torch.Tensor) -> torch.Tensor:
    """(B, N, S, D) -> torch_npu's BSH layout (B, S, N * D)."""
    batch, heads, seq, dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * dim)


def _fusion_attention(dtype: torch.dtype, how: str) -> Recorded:
    """torch_npu.npu_fusion_attention in BSH with 2 key/value heads for 4 query heads and a causal
    atten_mask (True masks), as a kernel computes it: `how` "flash16"/"flash64", FlashAttention-2 with
    tiles of that many keys (P in the input dtype, fp32 accumulation; a key/value head's gradient
    summed over its query heads in fp32, rounded once), or "pv_low", P V summed key by key in the
    input dtype (forward only). softmax_max and softmax_sum: the rows' max and sum of exp, in fp32."""
    q, k, v = _attention_inputs(dtype)
    k, v = k[:, ::2], v[:, ::2]  # 2 key/value heads
    kr, vr = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    scale = 1 / math.sqrt(q.shape[-1])
    scores = _causal(q.to(F64) @ kr.to(F64).transpose(-1, -2) * scale)
    row_max = scores.amax(-1, keepdim=True)
    row_sum = torch.exp(scores - row_max).sum(-1, keepdim=True)
    stats = [x.expand(*x.shape[:-1], 8).to(F32) for x in (row_max, row_sum)]
    seq = q.shape[-2]
    kwargs = {"atten_mask": torch.ones(seq, seq, dtype=torch.bool).triu(1), "scale": scale, "sparse_mode": 0}
    args = [_bsh(q), _bsh(k), _bsh(v), q.shape[1], "BSH"]
    if how == "pv_low":
        p = rnd(torch.softmax(scores, -1), dtype)
        total = torch.zeros(q.shape, dtype=F64)
        for j in range(seq):
            total = rnd(total + p[..., j : j + 1] * vr.to(F64)[..., j : j + 1, :], dtype)
        return Recorded(args, kwargs, [_bsh(total.to(dtype)), *stats, torch.empty(0, dtype=dtype), 0, 0, 0])
    tile = int(how.removeprefix("flash"))
    out, lse = flash_forward(q, kr, vr, tile)
    g = _grad_output(20, out)
    dq, dkr, dvr = flash_backward(q, kr, vr, out, lse, g, tile, keep_fp32=True)
    dk, dv = (rnd(x.reshape(*k.shape[:2], 2, *k.shape[2:]).sum(2), F32) for x in (dkr, dvr))
    outputs = [_bsh(out), *stats, torch.empty(0, dtype=dtype), 0, 0, 0]
    grads = [_bsh(x.to(dtype)) for x in (dq, dk, dv)]
    return Recorded(args, kwargs, outputs, [_bsh(g), None, None, None, None, None, None], grads)


def _grouped_kv(api: str, dtype: torch.dtype, low_sums: bool = False) -> Recorded:
    """GQA's key heads repeated over their query heads (2 key/value heads for 8 query heads) by
    repeat_interleave or by expand, and the backward's sum over each group: PyTorch's CPU kernel, or
    (`low_sums`) the group's gradients summed one by one with every partial sum rounded to the dtype.
    Gradients of random sign: some of the sums cancel far below their terms."""
    k = _randn(80, 1, 2, _DRAW.seq, LLAMA_HEAD_DIM).to(dtype)
    if api == "repeat_interleave":
        args, kwargs, fn = [k, 4], {"dim": 1}, torch.repeat_interleave
        g = _randn(81, 1, 8, _DRAW.seq, LLAMA_HEAD_DIM).to(dtype)
        grouped = g.to(F64).reshape(1, 2, 4, *g.shape[2:])
    else:
        k = k[:, :, None]
        args, kwargs, fn = [k, 1, 2, 4, _DRAW.seq, LLAMA_HEAD_DIM], {}, torch.Tensor.expand
        g = _randn(81, 1, 2, 4, _DRAW.seq, LLAMA_HEAD_DIM).to(dtype)
        grouped = g.to(F64)
    outs, grads = _torch_backward(fn, args, kwargs, g)
    if low_sums:
        total = grouped[:, :, 0]
        for j in range(1, 4):
            total = rnd(total + grouped[:, :, j], dtype)
        grads = [total.reshape(k.shape).to(dtype)]
    return Recorded(args, kwargs, outs, [g], grads)


def _sdpa_qk_tf32() -> Recorded:
    """fp32 attention whose Q K^T reads TF32 operands (10 mantissa bits); the rest exact, then rounded."""
    q, k, v = _attention_inputs(F32)
    qt, kt = round_mantissa(q.to(F64), 10), round_mantissa(k.to(F64), 10)
    p = torch.softmax(_causal(qt @ kt.transpose(-1, -2) / math.sqrt(q.shape[-1])), -1)
    return Recorded([q, k, v], {"is_causal": True}, [(p @ v.to(F64)).to(F32)])


def _sdpa_torch(dtype: torch.dtype, peak: float = 1.0) -> Recorded:
    q, k, v = _attention_inputs(dtype, peak=peak)
    g = _grad_output(20, q)
    outs, grads = _torch_backward(F.scaled_dot_product_attention, [q, k, v], {"is_causal": True}, g)
    return Recorded([q, k, v], {"is_causal": True}, outs, [g], grads)


def _sdpa_missing_rowsum(dtype: torch.dtype) -> Recorded:
    """PyTorch's CPU attention forward; backward as a kernel that drops the rowsum(dO O) correction
    from dS = P (dP - D): dQ = P dP scale K and dK = (P dP)^T scale Q, exact otherwise (dV as PyTorch's)."""
    q, k, v = _attention_inputs(dtype)
    g = _grad_output(20, q)
    outs, grads = _torch_backward(F.scaled_dot_product_attention, [q, k, v], {"is_causal": True}, g)
    q64, k64, v64, g64 = (t.to(F64) for t in (q, k, v, g))
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.softmax(_causal(q64 @ k64.transpose(-1, -2) * scale), -1)
    ds = p * (g64 @ v64.transpose(-1, -2)) * scale  # without - rowsum(dO O)
    grads[:2] = [(ds @ k64).to(dtype), (ds.transpose(-1, -2) @ q64).to(dtype)]
    return Recorded([q, k, v], {"is_causal": True}, outs, [g], grads)


def _rope_parts() -> tuple[torch.Tensor, torch.Tensor]:
    """LLaMA's rotary inputs: inv_freq (1, 32, 1) and positions (1, 1, seq) from POSITION on, fp32."""
    half = LLAMA_HEAD_DIM // 2
    inv_freq = (1.0 / (10000.0 ** (torch.arange(0, LLAMA_HEAD_DIM, 2, dtype=F64) / LLAMA_HEAD_DIM))).to(F32)
    positions = torch.arange(POSITION, POSITION + _DRAW.seq, dtype=F32)
    return inv_freq.reshape(1, half, 1), positions.reshape(1, 1, -1)


def _angles() -> torch.Tensor:
    """The rotary angles (1, seq, 64) as LLaMA builds them in fp32: cat(freqs, freqs)."""
    inv_freq, positions = _rope_parts()
    freqs = torch.matmul(inv_freq, positions).transpose(1, 2)
    return torch.cat([freqs, freqs], -1)


def _rope_matmul(bf16: bool) -> Recorded:
    """The angles' matmul (1, 32, 1) @ (1, 1, seq) in fp32; `bf16`: its product rounded to bf16."""
    inv_freq, positions = _rope_parts()
    exact = inv_freq.to(F64) @ positions.to(F64)
    out = rnd(exact, torch.bfloat16) if bf16 else torch.matmul(inv_freq, positions).to(F64)
    return Recorded([inv_freq, positions], {}, [out.to(F32)])


def fast_trig(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """cos or sin of fp32 x with a one-constant range reduction: k = rint(x 2/pi), r = x - k fp32(pi/2)
    rounded to fp32, then the function of r + k pi/2 exactly (a perfect polynomial): off by k times
    pi/2 - fp32(pi/2) (4.4e-8), about 1e-4 at 4000 rad."""
    x = x.to(F64)
    turns = torch.round(rnd(x * TWO_OVER_PI_F32, F32))
    reduced = rnd(x - turns * PIO2_F32, F32)
    return fn(reduced + turns * (math.pi / 2)).to(F32)


def _trig(name: str, fast: bool) -> Recorded:
    x = _angles()
    fn = getattr(torch, name)
    return Recorded([x], {}, [fast_trig(x, fn) if fast else fn(x)])


def _rms_variance() -> torch.Tensor:
    """hidden.pow(2).mean(-1, keepdim=True) + eps of LLaMA's RMSNorm, fp32 (1, seq, 1)."""
    hidden = _randn(30, 1, _DRAW.seq, LLAMA_WIDTH, scale=3.0).to(F32)
    return hidden.pow(2).mean(-1, keepdim=True) + 1e-6


def _rsqrt(bits: int | None) -> Recorded:
    x = _rms_variance()
    out = torch.rsqrt(x) if bits is None else round_mantissa(torch.rsqrt(x.to(F64)), bits - 1).to(F32)
    return Recorded([x], {}, [out])


# exp's 2^f on [0, 1) as a cubic: a fast exp off by up to 2.2e-4 relative (a fast-math library's)
_EXP2_CUBIC = [1.0, 0.6951786, 0.2261583, 0.0782451]


def fast_exp(x: torch.Tensor) -> torch.Tensor:
    """exp(x) = 2^n 2^f with n = floor(x log2 e) and 2^f a cubic: relative error up to 2.2e-4."""
    t = x.to(F64) * math.log2(math.e)
    n = torch.floor(t)
    f = t - n
    c = _EXP2_CUBIC
    return torch.ldexp(c[0] + f * (c[1] + f * (c[2] + f * c[3])), n)


def _silu_input(dtype: torch.dtype) -> torch.Tensor:
    return _randn(40, 1, _DRAW.seq, 2 * LLAMA_WIDTH, scale=3.0).to(dtype)


def _silu(dtype: torch.dtype, how: str) -> Recorded:
    """SwiGLU's silu; `how`: torch (PyTorch's CPU kernel), fast_exp (forward with fast_exp) or
    missing_term (backward g sigmoid(x), without g x sigmoid(x)(1 - sigmoid(x)))."""
    x = _silu_input(dtype)
    g = _grad_output(41, x)
    outs, grads = _torch_backward(F.silu, [x], {}, g)
    if how == "fast_exp":
        return Recorded([x], {}, [rnd(x.to(F64) / (1 + fast_exp(-x.to(F64))), dtype).to(dtype)])
    if how == "missing_term":
        grads = [(g.to(F64) * torch.sigmoid(x.to(F64))).to(dtype)]
    return Recorded([x], {}, outs, [g], grads)


def _router_logits() -> torch.Tensor:
    return _randn(50, _DRAW.seq, EXPERTS, scale=2.0).to(F32)


def _router_softmax(bf16: bool) -> Recorded:
    """The router's softmax over experts, fp32 logits; `bf16`: every step in bf16 (x - max, exp, the
    sum in order, the division), the result returned in fp32."""
    x = _router_logits()
    if not bf16:
        return Recorded([x], {"dim": -1}, [torch.softmax(x, -1)])
    b = torch.bfloat16
    xb = rnd(x.to(F64), b)
    e = rnd(torch.exp(rnd(xb - xb.amax(-1, keepdim=True), b)), b)
    return Recorded([x], {"dim": -1}, [rnd(e / _sequential(e.movedim(-1, 0), b).unsqueeze(-1), b).to(F32)])


def _rms_norm(dtype: torch.dtype, missing_term: bool) -> Recorded:
    """torch_npu.npu_rms_norm(x, gamma, epsilon=1e-6), the fused RMSNorm ((y, rstd) in fp32), as a
    correct kernel computes it: in float64 from the recorded inputs, each result rounded once
    (rstd takes no gradient: a zero one is fed to it). `missing_term`: the input's gradient
    rstd g gamma alone, without - rstd xhat mean(g gamma xhat)."""
    x = _randn(60, 1, _DRAW.seq, LLAMA_WIDTH).to(dtype)
    w = (1 + _randn(61, LLAMA_WIDTH, scale=0.1)).to(dtype)
    x64, w64 = x.to(F64).requires_grad_(True), w.to(F64).requires_grad_(True)
    rstd = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
    y = x64 * rstd * w64
    g = _grad_output(62, x)
    dx, dw = torch.autograd.grad(y, [x64, w64], g.to(F64))
    if missing_term:
        dx = rstd.detach() * g.to(F64) * w.to(F64)
    outputs = [y.detach().to(dtype), rstd.detach().to(F32)]
    return Recorded([x, w], {"epsilon": 1e-6}, outputs, [g, torch.zeros_like(outputs[1])], [dx.to(dtype), dw.to(dtype)])


def _saved_output(name: str, dtype: torch.dtype) -> Recorded:
    """PyTorch's own forward and backward of a function whose gradient reads its saved output."""
    fn, kwargs = (getattr(F, name), {"dim": -1}) if name.endswith("softmax") else (getattr(torch, name), {})
    x = _randn(70, 1, _DRAW.seq, LLAMA_WIDTH, scale=3.0).to(dtype)
    g = _grad_output(71, x)
    outs, grads = _torch_backward(fn, [x], kwargs, g)
    return Recorded([x], kwargs, outs, [g], grads)


BF16, FP16 = torch.bfloat16, torch.float16
_API = {
    "sdpa": "Functional.scaled_dot_product_attention",
    "matmul": "Torch.matmul",
    "cos": "Tensor.cos",
    "sin": "Tensor.sin",
    "rsqrt": "Torch.rsqrt",
    "silu": "Functional.silu",
    "softmax": "Functional.softmax",
    "log_softmax": "Functional.log_softmax",
    "rms_norm": "NPU.npu_rms_norm",
    "fusion_attention": "NPU.npu_fusion_attention",
    "repeat_interleave": "Torch.repeat_interleave",
    "expand": "Tensor.expand",
    "tanh": "Torch.tanh",
    "sigmoid": "Torch.sigmoid",
    "exp": "Torch.exp",
}


def _case(name: str, deficit: bool, api: str, direction: str, what: str, build: Callable[[], Recorded]) -> Case:
    return Case(name, deficit, _API[api], direction, what, build)


LLAMA_CASES: list[Case] = [
    # deficits
    _case("sdpa_pv_bf16", True, "sdpa", FORWARD, "P V accumulated in bf16, key by key", lambda: _sdpa_pv_low(BF16)),
    _case("sdpa_pv_fp16", True, "sdpa", FORWARD, "P V accumulated in fp16, key by key", lambda: _sdpa_pv_low(FP16)),
    _case("sdpa_qk_tf32", True, "sdpa", FORWARD, "fp32 attention with Q K^T on TF32 operands", _sdpa_qk_tf32),
    _case("rope_angles_bf16", True, "matmul", FORWARD, "RoPE's angles rounded to bf16", lambda: _rope_matmul(True)),
    _case("fast_cos", True, "cos", FORWARD, "cos with a one-constant range reduction", lambda: _trig("cos", True)),
    _case("fast_sin", True, "sin", FORWARD, "sin with a one-constant range reduction", lambda: _trig("sin", True)),
    _case("rsqrt12", True, "rsqrt", FORWARD, "RMSNorm's rsqrt from a 12-bit estimate", lambda: _rsqrt(12)),
    _case("silu_fast_exp", True, "silu", FORWARD, "SiLU with a fast exp (2e-4)", lambda: _silu(F32, "fast_exp")),
    _case(
        "router_softmax_bf16",
        True,
        "softmax",
        FORWARD,
        "the router's fp32 softmax computed in bf16",
        lambda: _router_softmax(True),
    ),
    *(
        _case(
            f"rms_norm_missing_term_{short}",
            True,
            "rms_norm",
            BACKWARD,
            "RMSNorm's input gradient without its mean term",
            lambda dtype=dtype: _rms_norm(dtype, True),
        )
        for short, dtype in (("fp32", F32), ("bf16", BF16))
    ),
    *(
        _case(
            f"silu_missing_term_{short}",
            True,
            "silu",
            BACKWARD,
            "SiLU's gradient g sigmoid(x) alone",
            lambda dtype=dtype: _silu(dtype, "missing_term"),
        )
        for short, dtype in (("fp32", F32), ("bf16", BF16))
    ),
    *(
        _case(
            f"sdpa_missing_rowsum_{short}",
            True,
            "sdpa",
            BACKWARD,
            "attention's dQ and dK without the rowsum(dO O) correction of dS",
            lambda dtype=dtype: _sdpa_missing_rowsum(dtype),
        )
        for short, dtype in (("fp32", F32), ("bf16", BF16))
    ),
    *(
        _case(
            f"fusion_attention_pv_{short}",
            True,
            "fusion_attention",
            FORWARD,
            f"npu_fusion_attention (BSH, grouped heads) with P V accumulated in {short}, key by key",
            lambda dtype=dtype: _fusion_attention(dtype, "pv_low"),
        )
        for short, dtype in (("bf16", BF16), ("fp16", FP16))
    ),
    *(
        _case(
            f"{api}_sums_bf16",
            True,
            api,
            BACKWARD,
            f"GQA's key gradient by {api}, its group summed with partial sums in bf16",
            lambda api=api: _grouped_kv(api, BF16, low_sums=True),
        )
        for api in ("repeat_interleave", "expand")
    ),
    # controls: flash attention (forward and backward) and PyTorch's own CPU kernels
    *(
        _case(
            f"{api}_{short}",
            False,
            api,
            BACKWARD,
            f"PyTorch's {api} over GQA's groups, gradients of random sign",
            lambda api=api, dtype=dtype: _grouped_kv(api, dtype),
        )
        for api in ("repeat_interleave", "expand")
        for short, dtype in (("fp32", F32), ("bf16", BF16))
    ),
    *(
        _case(
            f"fusion_attention_flash_{short}_tile{tile}",
            False,
            "fusion_attention",
            BACKWARD,
            f"npu_fusion_attention (BSH, grouped heads) as flash attention, tiles of {tile} keys, P in {short}",
            lambda dtype=dtype, tile=tile: _fusion_attention(dtype, f"flash{tile}"),
        )
        for short, dtype, tile in (("bf16", BF16, 16), ("bf16", BF16, 64), ("fp16", FP16, 64))
    ),
    *(
        _case(
            f"flash_{short}_tile{tile}",
            False,
            "sdpa",
            BACKWARD,
            f"flash attention, tiles of {tile} keys, P in {short}, fp32 accumulation",
            lambda dtype=dtype, tile=tile: _flash_case(dtype, tile),
        )
        for short, dtype, tile in (("bf16", BF16, 16), ("bf16", BF16, 64), ("fp16", FP16, 32))
    ),
    *(
        _case(
            f"sdpa_torch_{short}",
            False,
            "sdpa",
            BACKWARD,
            "PyTorch's CPU attention",
            lambda dtype=dtype: _sdpa_torch(dtype),
        )
        for short, dtype in (("fp32", F32), ("bf16", BF16))
    ),
    _case(
        "sdpa_torch_fp32_peaked",
        False,
        "sdpa",
        BACKWARD,
        "PyTorch's CPU attention, scores 16 times as wide (dV from P recomputed in fp32)",
        lambda: _sdpa_torch(F32, peak=4.0),
    ),
    _case("rope_angles", False, "matmul", FORWARD, "PyTorch's fp32 matmul", lambda: _rope_matmul(False)),
    _case("cos", False, "cos", FORWARD, "PyTorch's cos at thousands of radians", lambda: _trig("cos", False)),
    _case("sin", False, "sin", FORWARD, "PyTorch's sin at thousands of radians", lambda: _trig("sin", False)),
    _case("rsqrt", False, "rsqrt", FORWARD, "PyTorch's rsqrt", lambda: _rsqrt(None)),
    _case("router_softmax", False, "softmax", FORWARD, "PyTorch's fp32 softmax", lambda: _router_softmax(False)),
    *(
        _case(f"{api}_{short}", False, api, BACKWARD, f"PyTorch's {api}", build)
        for short, dtype in (("fp32", F32), ("bf16", BF16))
        for api, build in (
            ("silu", lambda dtype=dtype: _silu(dtype, "torch")),
            ("rms_norm", lambda dtype=dtype: _rms_norm(dtype, False)),
            *(
                (name, lambda dtype=dtype, name=name: _saved_output(name, dtype))
                for name in ("tanh", "sigmoid", "exp", "softmax", "log_softmax")
            ),
        )
    ),
]


# Each backward deficit of LLAMA_CASES and the correct kernel of the same inputs.
LLAMA_PAIRS = {
    **{f"silu_missing_term_{short}": f"silu_{short}" for short in ("fp32", "bf16")},
    **{f"rms_norm_missing_term_{short}": f"rms_norm_{short}" for short in ("fp32", "bf16")},
    **{f"sdpa_missing_rowsum_{short}": f"sdpa_torch_{short}" for short in ("fp32", "bf16")},
    **{f"{api}_sums_bf16": f"{api}_bf16" for api in ("repeat_interleave", "expand")},
}


def amplified_case(deficit: Case, correct: Case, factor: float) -> Case:
    """The deficit's backward case with its gradients `factor` times as far from the correct kernel's
    (same inputs): correct + factor (deficit - correct), in the recorded dtypes."""

    def build() -> Recorded:
        found, right = deficit.build(), correct.build()
        assert found.grads is not None and right.grads is not None
        grads = [
            None if g is None or r is None else (r.to(F64) + factor * (g.to(F64) - r.to(F64))).to(g.dtype)
            for g, r in zip(found.grads, right.grads)
        ]
        return replace(found, grads=grads)

    return Case(
        f"{deficit.name}_x{factor:g}", True, deficit.api, deficit.direction, f"{deficit.what}, x{factor:g}", build
    )


def _spec(value: Any, folder: Path, name: str) -> Any:
    """msprobe's record of one value (a tensor's file written under folder/dump_tensor_data)."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        torch.save(tensor.clone(), folder / "dump_tensor_data" / f"{name}.pt")
        stats = tensor.to(F64)
        return {
            "type": "torch.Tensor",
            "dtype": str(tensor.dtype),
            "shape": list(tensor.shape),
            # an empty tensor has no statistics: msprobe writes null
            **{
                key: float(fn(stats)) if stats.numel() else None
                for key, fn in (("Max", torch.max), ("Min", torch.min), ("Mean", torch.mean))
            },
            "Norm": float(stats.norm()) if stats.numel() else None,
            "requires_grad": tensor.is_floating_point(),
            "data_name": f"{name}.pt",
        }
    if isinstance(value, (list, tuple)):
        return [_spec(v, folder, f"{name}.{i}") for i, v in enumerate(value)]
    return None if value is None else {"type": type(value).__name__, "value": value}


def write_cases(folder: Path, cases: Iterable[Case], draw: Draw | None = None) -> dict[str, str]:
    """A tensor dump at folder holding each case's entries (forward, and backward for a backward
    case) in msprobe's layout, their inputs drawn as `draw` says; returns each case's judged entry
    by case name ("Functional.scaled_dot_product_attention.2.backward")."""
    global _DRAW
    before, _DRAW = _DRAW, draw or Draw()
    try:
        return _write_cases(Path(folder), cases)
    finally:
        _DRAW = before


def _write_cases(folder: Path, cases: Iterable[Case]) -> dict[str, str]:
    (folder / "dump_tensor_data").mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {}
    counts: dict[str, int] = {}
    judged = {}
    for case in cases:
        recorded = case.build()
        prefix = f"{case.api}.{counts.setdefault(case.api, 0)}"
        counts[case.api] += 1
        forward = f"{prefix}.forward"
        data[forward] = {
            "input_args": [_spec(a, folder, f"{forward}.input.{i}") for i, a in enumerate(recorded.args)],
            "input_kwargs": {k: _spec(v, folder, f"{forward}.input.{k}") for k, v in recorded.kwargs.items()},
            "output": [_spec(o, folder, f"{forward}.output.{i}") for i, o in enumerate(recorded.outputs)],
        }
        if recorded.grads is not None and recorded.grad_outputs is not None:
            backward = f"{prefix}.backward"
            data[backward] = {
                "input": [_spec(g, folder, f"{backward}.input.{i}") for i, g in enumerate(recorded.grad_outputs)],
                "output": [_spec(g, folder, f"{backward}.output.{i}") for i, g in enumerate(recorded.grads)],
            }
        judged[case.name] = f"{prefix}.{case.direction}"
    dump = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": str(folder), "data": data}
    (folder / "dump.json").write_text(json.dumps(dump, indent=1))
    return judged
