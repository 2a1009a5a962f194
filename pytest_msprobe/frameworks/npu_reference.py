"""CPU references for torch_npu's fused Ascend operators (``torch_npu.npu_*``).

The fused kernels have no CPU implementation, so a recorded call cannot be
replayed on a host.  Each function here re-derives one op from its documented
semantics (the Ascend op-plugin docs, ``docs/context/torch_npu-<op>.md``, and
the matching ``aclnn`` operator pages), with the op's own argument names and
defaults, so that a recorded ``torch_npu.npu_rms_norm(x, gamma, epsilon=1e-6)``
replays as ``lookup("npu_rms_norm")(x, gamma, epsilon=1e-6)``.

References compute in the dtype of their floating inputs (float64 for the
benchmark), are built from differentiable torch ops, and return the same
structure as torch_npu.  Outputs torch_npu documents with a fixed dtype keep
it (int32 expert indices, float32 attention statistics and RmsNorm rstd).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .npu_builtins import UNCOMPARED_OUTPUTS
from .references import ReferenceUnsupported

__all__ = ["PADDED_ROWS", "REFERENCES", "UNCOMPARED_OUTPUTS", "ReferenceUnsupported", "lookup"]


REFERENCES: dict[str, Callable] = {}

# Outputs whose trailing rows a correct kernel leaves unwritten (padding beyond a group_list): by op,
# (args, kwargs) of the call -> {output index: the rows written}. The rows beyond are not compared.
PADDED_ROWS: dict[str, Callable[[Sequence[Any], dict[str, Any]], dict[int, int]]] = {}


def lookup(op_name: str) -> Callable | None:
    """The CPU reference of torch_npu.<op_name>, or None when there is none."""
    return REFERENCES.get(op_name)


def _reference(fn: Callable) -> Callable:
    REFERENCES[fn.__name__] = fn
    return fn


# --------------------------------------------------------------------------
# Activations and element-wise ops
# --------------------------------------------------------------------------


def check_count(op: str, name: str, value: Any, least: int = 0, most: int | None = None) -> int:
    """An integer argument (a count, a size, an index) within its range, else a ValueError naming
    the argument: a hostile value is refused in its own words, not by the kernel's (a division by
    zero, a reshape of the wrong size)."""
    try:
        number = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        number = None
    if number is None or number < least or (most is not None and number > most):
        within = f"from {least} to {most}" if most is not None else f"of at least {least}"
        raise ValueError(f"{op}: {name}={value!r}: an integer {within}")
    return number


def check_heads(op: str, name: str, heads: Any, x: torch.Tensor, layout: str, what: str = "query") -> int:
    """`heads` of the tensor x in `layout`: at least 1, and what the layout holds (BSH/SBH: a
    divisor of the hidden size; BNSD, BSND, TND: its N), else a ValueError naming the argument."""
    check_count(op, name, heads, 1)
    if layout in ("BSH", "SBH"):
        if x.dim() != 3 or x.shape[-1] % heads:
            raise ValueError(
                f"{op}: {name}={heads}: the {what}'s hidden size {list(x.shape)[-1:]} is no multiple of it"
            )
        return heads
    axis = {"BNSD": 1, "BNSD_BSND": 1, "BSND": 2, "TND": 1}.get(layout)
    if axis is not None and (x.dim() <= axis or x.shape[axis] != heads):
        raise ValueError(f"{op}: {name}={heads}, and the {layout} {what} of shape {list(x.shape)} holds other heads")
    return heads


@_reference
def npu_fast_gelu(input: torch.Tensor) -> torch.Tensor:
    """fast_gelu(x) = x / (1 + exp(-1.702 x)).

    The Atlas training-series formula, x / (1 + e^{-1.702|x|}) * e^{0.851 (x - |x|)},
    is the same function written to avoid overflow.
    """
    return input * torch.sigmoid(1.702 * input)


@_reference
def npu_mish(input: torch.Tensor) -> torch.Tensor:
    """mish(x) = x * tanh(softplus(x))."""
    return input * torch.tanh(F.softplus(input))


@_reference
def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Split ``input`` in two halves a, b along ``dim``; return silu(a) * b."""
    check_count("npu_swiglu", "dim", dim, -input.dim(), input.dim() - 1)
    gate, value = input.chunk(2, dim=dim)
    return F.silu(gate) * value


@_reference
def npu_rotary_mul(input: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half") -> torch.Tensor:
    """Rotary position embedding: ``r1 * input + r2 * rotate(input)``."""
    return r1 * input + r2 * _rotate(input, rotary_mode)


def _rotate(x: torch.Tensor, rotary_mode: str) -> torch.Tensor:
    if rotary_mode == "half":  # cat(-x2, x1) of the two halves of the last dim
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    if rotary_mode == "interleave":  # (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
    raise ReferenceUnsupported(f"npu_rotary_mul: rotary_mode={rotary_mode!r}")


@_reference
def npu_scaled_masked_softmax(
    x: torch.Tensor, mask: torch.Tensor, scale: float = 1.0, fixed_triu_mask: bool = False
) -> torch.Tensor:
    """softmax((x * scale).masked_fill(mask, -inf), dim=-1), as the op's migration guide states.

    With ``fixed_triu_mask`` the op builds the strict upper-triangular mask itself.
    """
    if fixed_triu_mask:
        rows, cols = x.shape[-2:]
        mask = torch.ones(rows, cols, dtype=torch.bool, device=x.device).triu(diagonal=1)
    return torch.softmax((x * scale).masked_fill(mask.bool(), float("-inf")), dim=-1)


@_reference
def npu_confusion_transpose(
    input: torch.Tensor, perm: Sequence[int], shape: Sequence[int], transpose_first: bool
) -> torch.Tensor:
    """Permute then reshape (``transpose_first``), or reshape then permute."""
    dims = input.dim() if transpose_first else len(shape)
    if sorted(perm) != list(range(dims)):
        raise ValueError(f"npu_confusion_transpose: perm={list(perm)[:8]} is no order of {dims} dimensions")
    if math.prod(shape) != input.numel() or any(d < 0 for d in shape):
        raise ValueError(
            f"npu_confusion_transpose: shape={list(shape)[:8]} does not hold the input's {input.numel()} elements"
        )
    if transpose_first:
        return input.permute(*perm).reshape(shape)
    return input.reshape(shape).permute(*perm)


@_reference
def npu_linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """input @ weight.T + bias, weight laid out [out_features, in_features]."""
    return F.linear(input, weight, bias)


@_reference
def npu_sort_v2(
    input: torch.Tensor, dim: int = -1, descending: bool = False, out: torch.Tensor | None = None
) -> torch.Tensor:
    """The sorted values only (SortV2 computes no indices).

    ``out`` is accepted for call compatibility; the reference never writes into it.
    """
    return torch.sort(input, dim=dim, descending=descending).values


@_reference
def npu_moe_gating_top_k_softmax(
    x: torch.Tensor, finished: torch.Tensor | None = None, k: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, expert_idx, row_idx) of softmax(x) followed by top-k over experts.

    Documented: rows with ``finished`` True get expert index num_expert, and
    row_idx = arange(rows * k).reshape(k, rows).transpose(1, 0).  Equal
    probabilities rank the lower expert index first.
    """
    check_count("npu_moe_gating_top_k_softmax", "k", k, 1, x.shape[-1])
    probs = torch.softmax(x, dim=-1)
    top = torch.sort(probs, dim=-1, descending=True, stable=True).indices[..., :k]
    y = probs.gather(-1, top)
    expert_idx = top.to(torch.int32)
    if finished is not None:
        expert_idx = expert_idx.masked_fill(finished.bool().unsqueeze(-1), x.shape[-1])
    rows = x.numel() // x.shape[-1]
    row_idx = torch.arange(rows * k, dtype=torch.int32, device=x.device).reshape(k, rows).t()
    return y, expert_idx, row_idx.reshape(y.shape)


# --------------------------------------------------------------------------
# Normalisations
# --------------------------------------------------------------------------


@_reference
def npu_rms_norm(input: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd): rstd = 1 / sqrt(mean(x^2) + eps) over gamma's trailing dims; y = x * rstd * gamma.

    rstd keeps the reduced dims as size 1 and is float32, as the RmsNorm IR declares it.
    """
    reduced = tuple(range(-gamma.dim(), 0))
    rstd = torch.rsqrt(input.pow(2).mean(dim=reduced, keepdim=True) + epsilon)
    return input * rstd * gamma, rstd.to(torch.float32)


@_reference
def npu_layer_norm_eval(
    input: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-05,
) -> torch.Tensor:
    """Inference-mode layer norm: (x - mean) / sqrt(var + eps) * weight + bias."""
    return F.layer_norm(input, list(normalized_shape), weight, bias, eps)


@_reference
def npu_group_norm_silu(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, group: int, eps: float = 0.00001
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(silu(group_norm(input)), mean, rstd), mean and rstd of shape (N, group).

    Channels are dim 1 and are split into ``group`` groups; weight and bias are
    per channel.  rstd is 1 / sqrt(biased variance + eps).
    """
    batch, channels = input.shape[:2]
    check_count("npu_group_norm_silu", "group", group, 1, channels)
    if channels % group:
        raise ValueError(f"npu_group_norm_silu: group={group}: the input's {channels} channels are no multiple of it")
    grouped = input.reshape(batch, group, -1)
    mean = grouped.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(grouped.var(dim=-1, unbiased=False, keepdim=True) + eps)
    normed = ((grouped - mean) * rstd).reshape(input.shape)
    per_channel = (1, channels) + (1,) * (input.dim() - 2)
    if weight is not None:
        normed = normed * weight.reshape(per_channel)
    if bias is not None:
        normed = normed + bias.reshape(per_channel)
    return F.silu(normed), mean.squeeze(-1), rstd.squeeze(-1)


# --------------------------------------------------------------------------
# Optimisers
#
# torch_npu only implements the out= form of these ops; the out-of-place
# overload raises "not implemented for Tensor".  A recorded call therefore
# reads  npu_apply_adam*(<scalars...>, grad, ..., out=(var, m, v)).  The
# references take that same call, leave var/m/v untouched, and return the
# updated (var, m, v).  Argument order (op-plugin op_plugin_functions.yaml):
#   npu_apply_adam(Scalar beta1_power, Scalar beta2_power, Scalar lr, Scalar beta1,
#       Scalar beta2, Scalar epsilon, Tensor grad, bool? use_locking, bool? use_nesterov,
#       *, Tensor(a!) var, Tensor(b!) m, Tensor(c!) v)
#   npu_apply_adam_w(Scalar beta1_power, Scalar beta2_power, Scalar lr, Scalar weight_decay,
#       Scalar beta1, Scalar beta2, Scalar epsilon, Tensor grad, Tensor? max_grad_norm,
#       bool? amsgrad, bool? maximize, *, Tensor(a!) var, Tensor(b!) m, Tensor(c!) v)
# https://gitcode.com/Ascend/op-plugin/blob/master/op_plugin/ops/opapi/ApplyAdamWKernelNpuOpApi.cpp
# --------------------------------------------------------------------------


def _scalar(value) -> float:
    """A Scalar argument as recorded: Python number, numpy scalar, or one-element tensor."""
    return torch.as_tensor(value, dtype=torch.float64).item()  # a Python float would become float32


def _optimizer_state(op: str, out) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if out is None or len(out) != 3:
        raise TypeError(f"{op} needs out=(var, m, v), as torch_npu only has the out= form")
    return tuple(out)


@_reference
def npu_apply_adam(
    beta1_power,
    beta2_power,
    lr,
    beta1,
    beta2,
    epsilon,
    grad: torch.Tensor,
    use_locking: bool | None,
    use_nesterov: bool | None,
    *,
    out=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Adam step with TensorFlow ``ApplyAdam`` semantics (beta*_power = beta*^t).

    lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
    m_t = m + (1 - beta1)(g - m);  v_t = v + (1 - beta2)(g^2 - v)
    var_t = var - lr_t * m_t / (sqrt(v_t) + eps)   (Nesterov: beta1 m_t + (1 - beta1) g)
    """
    var, m, v = _optimizer_state("npu_apply_adam", out)
    b1, b2 = _scalar(beta1), _scalar(beta2)
    m_t = m + (1 - b1) * (grad - m)
    v_t = v + (1 - b2) * (grad * grad - v)
    lr_t = _scalar(lr) * math.sqrt(1 - _scalar(beta2_power)) / (1 - _scalar(beta1_power))
    step = b1 * m_t + (1 - b1) * grad if use_nesterov else m_t
    return var - lr_t * step / (v_t.sqrt() + _scalar(epsilon)), m_t, v_t


@_reference
def npu_apply_adam_w(
    beta1_power,
    beta2_power,
    lr,
    weight_decay,
    beta1,
    beta2,
    epsilon,
    grad: torch.Tensor,
    max_grad_norm: torch.Tensor | None,
    amsgrad: bool | None,
    maximize: bool | None,
    *,
    out=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One AdamW step as aclnnApplyAdamW documents it, which is torch.optim.AdamW's step.

    https://gitcode.com/cann/ops-nn/blob/master/optim/apply_adam_w/docs/aclnnApplyAdamW.md

    beta*_power is beta*^(t-1): the op advances it itself (beta^t = beta^(t-1) * beta).
    With amsgrad the denominator uses max(max_grad_norm, v_t) -- max_grad_norm is
    the running maximum of v, torch's ``max_exp_avg_sq`` -- while v_t itself is
    returned unclipped.
    """
    var, m, v = _optimizer_state("npu_apply_adam_w", out)
    if amsgrad and max_grad_norm is None:
        raise ValueError("npu_apply_adam_w: amsgrad needs max_grad_norm (the running max of v)")
    b1, b2, lr = _scalar(beta1), _scalar(beta2), _scalar(lr)
    g = -grad if maximize else grad
    m_t = b1 * m + (1 - b1) * g
    v_t = b2 * v + (1 - b2) * g * g
    bias1 = 1 - _scalar(beta1_power) * b1
    bias2 = 1 - _scalar(beta2_power) * b2
    v_used = torch.maximum(max_grad_norm, v_t) if amsgrad and max_grad_norm is not None else v_t
    denom = (v_used / bias2).sqrt() + _scalar(epsilon)
    var_t = var * (1 - lr * _scalar(weight_decay)) - lr * (m_t / bias1) / denom
    return var_t, m_t, v_t


# --------------------------------------------------------------------------
# npu_fusion_attention
#
# attention_out = Dropout(Softmax(Mask(scale * (pse + Q K^T), atten_mask)), keep_prob) V
# (op-plugin docs/context/torch_npu-npu_fusion_attention.md).  Everything is
# brought to BNSD, computed there, and put back in the caller's layout.
# --------------------------------------------------------------------------

_PADDED_LAYOUTS = ("BSH", "SBH", "BSND", "BNSD")
_SOFTMAX_STAT_WIDTH = 8  # softmax_max / softmax_sum repeat each row statistic 8 times


@_reference
def npu_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = 2147483647,
    next_tockens: int = 2147483647,
    inner_precise: int = 0,
    prefix: Sequence[int] | None = None,
    actual_seq_qlen: Sequence[int] | None = None,
    actual_seq_kvlen: Sequence[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    softmax_layout: str = "",
    sink: torch.Tensor | None = None,
):
    """(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels).

    softmax_max/softmax_sum are float32 [B, N, Sq, 8]; for TND they are
    [T, N, 8], the shape op-plugin's fake registration gives them, whatever
    softmax_layout says.  softmax_out is the documented empty placeholder, and
    the dropout seed, offset and mask length are 0 since no dropout mask is
    drawn.  A query row that sees no key gets a zero output, softmax_max -inf
    and softmax_sum 0.  inner_precise, gen_mask_parallel and sync only steer
    the kernel's speed and do not change the values.
    """
    _check_attention_features(input_layout, padding_mask, keep_prob, sink)
    check_heads("npu_fusion_attention", "head_num", head_num, query, input_layout)
    sparse = _SparseMask(sparse_mode, atten_mask, pre_tockens, next_tockens, prefix)
    if input_layout == "TND":
        out, row_max, row_sum = _varlen_attention(
            query, key, value, head_num, pse, scale, sparse, actual_seq_qlen, actual_seq_kvlen
        )
    else:
        out, row_max, row_sum = _padded_attention(query, key, value, head_num, input_layout, pse, scale, sparse)
    return (out, _softmax_stat(row_max), _softmax_stat(row_sum), query.new_empty(0), 0, 0, 0)


@dataclass(frozen=True)
class AttentionInBnsd:
    """An npu_fusion_attention call of a padded layout in BNSD: query, key and value (key and value
    repeated over the query heads each serves), pse, the positions the sparse mode masks (True), and
    the way back to the call's layout. The reference computes it; the dtype standard models it as
    scaled_dot_product_attention (`as_sdpa`)."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    pse: torch.Tensor | None
    masked: torch.Tensor | None
    scale: float
    layout: str
    kv_heads: int
    # TND (inference attentions): each batch's query rows and the packed query's T; output() packs them
    packed: tuple[tuple[int, ...], int] | None = None

    @property
    def mask(self) -> torch.Tensor | None:
        """One additive mask: pse times scale (scale (pse + Q K^T)), -inf where masked."""
        mask = None if self.pse is None else self.pse.to(self.query.dtype) * self.scale
        if self.masked is not None:
            mask = (torch.zeros((), dtype=self.query.dtype) if mask is None else mask).masked_fill(
                self.masked, float("-inf")
            )
        return mask

    def as_sdpa(self) -> dict:
        """scaled_dot_product_attention's parameters of the same attention."""
        return {
            "query": self.query, "key": self.key, "value": self.value, "attn_mask": self.mask,
            "dropout_p": 0.0, "is_causal": False, "scale": self.scale, "enable_gqa": False,
        }  # fmt: skip

    def to_bnsd(self, x: torch.Tensor) -> torch.Tensor:
        """A tensor of attention_out's shape (its gradient) in BNSD."""
        return _to_bnsd(x, self.layout, self.query.shape[1])

    def output(self, x: torch.Tensor) -> torch.Tensor:
        """attention_out (or its magnitude) from BNSD to the call's layout (TND: each batch's rows, one
        batch after another, rows past the last batch zero)."""
        if self.packed is None:
            return _from_bnsd(x, self.layout)
        rows, total = self.packed
        parts = [x[b, :, :n].transpose(0, 1) for b, n in enumerate(rows)]
        parts.append(x.new_zeros(total - sum(rows), x.shape[1], x.shape[-1]))
        return torch.cat(parts)

    def key_gradient(self, x: torch.Tensor) -> torch.Tensor:
        """A key's or value's gradient (or its magnitude) over the repeated heads: summed over each
        key/value head's group, in the call's layout."""
        batch, heads, seq, dim = x.shape
        grouped = x.reshape(batch, self.kv_heads, heads // self.kv_heads, seq, dim).sum(2)
        return _from_bnsd(grouped, self.layout)


def fusion_attention_in_bnsd(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = 2147483647,
    next_tockens: int = 2147483647,
    inner_precise: int = 0,
    prefix: Sequence[int] | None = None,
    actual_seq_qlen: Sequence[int] | None = None,
    actual_seq_kvlen: Sequence[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    softmax_layout: str = "",
    sink: torch.Tensor | None = None,
) -> AttentionInBnsd:
    """npu_fusion_attention's arguments (its signature) as AttentionInBnsd, for the padded layouts;
    raises for TND and for what the reference does not model."""
    _check_attention_features(input_layout, padding_mask, keep_prob, sink)
    check_heads("npu_fusion_attention", "head_num", head_num, query, input_layout)
    if input_layout == "TND":
        raise ReferenceUnsupported("npu_fusion_attention: TND layout as one BNSD attention")
    sparse = _SparseMask(sparse_mode, atten_mask, pre_tockens, next_tockens, prefix)
    return _padded_in_bnsd(query, key, value, head_num, input_layout, pse, scale, sparse)


def _check_attention_features(input_layout: str, padding_mask, keep_prob: float, sink) -> None:
    if input_layout not in (*_PADDED_LAYOUTS, "TND"):
        raise ValueError(f"npu_fusion_attention: unknown input_layout {input_layout!r}")
    if keep_prob < 1:
        raise ReferenceUnsupported(f"npu_fusion_attention: keep_prob={keep_prob} (dropout draws a device-random mask)")
    if padding_mask is not None:
        raise ReferenceUnsupported("npu_fusion_attention: padding_mask (unsupported by the op too)")
    if sink is not None:
        raise ReferenceUnsupported("npu_fusion_attention: sink")


@dataclass(frozen=True)
class _SparseMask:
    """Which (query, key) positions a call masks out, per the sparse_mode table of the docs.

    Offsets are key index minus query index.  Without atten_mask the docs fix the
    op to full attention, whatever sparse_mode, pre_tockens and next_tockens say.
    """

    sparse_mode: int
    atten_mask: torch.Tensor | None
    pre_tockens: int
    next_tockens: int
    prefix: Sequence[int] | None

    def build(self, sq: int, skv: int, batch: int | None = None) -> torch.Tensor | None:
        """Boolean mask broadcastable to [B, N, sq, skv], True = masked out.

        ``batch`` picks one sequence of a varlen (TND) call.
        """
        if self.atten_mask is None:
            return None
        mode = self.sparse_mode
        if mode == 5 and batch is not None:
            raise ReferenceUnsupported("npu_fusion_attention: sparse_mode=5 with TND layout")
        device = self.atten_mask.device
        offset = torch.arange(skv, device=device) - torch.arange(sq, device=device).unsqueeze(-1)
        if mode in (0, 1, 5):  # the real mask: SS/11SS/B1SS/BNSS (varlen: maxSq x maxSkv)
            given = self.atten_mask.bool()[..., :sq, :skv]
            return given | self._outside_band(offset) if mode == 0 else given
        if mode == 2:  # leftUpCausal; atten_mask is the compressed 2048x2048 triangle
            return offset > 0
        if mode == 3:  # rightDownCausal
            return offset > skv - sq
        if mode == 4:  # band around the diagonal through the bottom-right corner
            return self._outside_band(offset - (skv - sq))
        if mode == 6:  # rightDownCausal, plus the first prefix[b] keys visible to every query
            return (offset > skv - sq) & self._beyond_prefix(skv, batch, device)
        raise ReferenceUnsupported(f"npu_fusion_attention: sparse_mode={mode}")

    def build_many(self, sq: int, skv: int, batches: list[int]) -> torch.Tensor | None:
        """build() for sequences of one varlen (TND) call of the same lengths: one mask for all, but
        sparse_mode 6's prefix, one a sequence ([G, 1, sq, skv])."""
        if self.atten_mask is None or self.sparse_mode != 6:
            return self.build(sq, skv, batches[0])
        device = self.atten_mask.device
        offset = torch.arange(skv, device=device) - torch.arange(sq, device=device).unsqueeze(-1)
        return (offset > skv - sq) & self._beyond_prefix(skv, batches, device)

    def _outside_band(self, offset: torch.Tensor) -> torch.Tensor:
        return (offset > self.next_tockens) | (offset < -self.pre_tockens)

    def _beyond_prefix(self, skv: int, batch: int | list[int] | None, device) -> torch.Tensor:
        if self.prefix is None:
            raise ValueError("npu_fusion_attention: sparse_mode=6 needs prefix")
        batches = [] if batch is None else [batch] if isinstance(batch, int) else batch
        if batches and max(batches) >= len(self.prefix):
            raise ValueError(
                f"npu_fusion_attention: prefix has {len(self.prefix)} values for {max(batches) + 1} batches"
            )
        lengths = list(self.prefix) if batch is None else [self.prefix[b] for b in batches]
        limits = torch.tensor(lengths, device=device).reshape(-1, 1, 1, 1)
        return torch.arange(skv, device=device) >= limits


def _padded_in_bnsd(query, key, value, head_num, layout, pse, scale, sparse) -> AttentionInBnsd:
    """A call of BSH/SBH/BSND/BNSD brought to BNSD, its key/value heads repeated over their groups."""
    kv_heads = _kv_head_count(query, key, head_num, layout)
    q = _to_bnsd(query, layout, head_num)
    if q.shape[1] != head_num:
        raise ValueError(f"npu_fusion_attention: query has {q.shape[1]} heads, head_num={head_num}")
    k = _repeat_kv(_to_bnsd(key, layout, kv_heads), head_num)
    v = _repeat_kv(_to_bnsd(value, layout, kv_heads), head_num)
    _check_pse(pse, q.shape[2])
    return AttentionInBnsd(q, k, v, pse, sparse.build(q.shape[2], k.shape[2]), scale, layout, kv_heads)


def _padded_attention(query, key, value, head_num, layout, pse, scale, sparse):
    """Attention for BSH/SBH/BSND/BNSD: out in ``layout``, row statistics [B, N, Sq]."""
    call = _padded_in_bnsd(query, key, value, head_num, layout, pse, scale, sparse)
    out, row_max, row_sum = _attention_bnsd(call.query, call.key, call.value, call.pse, call.masked, scale)
    return call.output(out), row_max, row_sum


def _varlen_attention(query, key, value, head_num, pse, scale, sparse, actual_seq_qlen, actual_seq_kvlen):
    """TND attention: out [T, N, Dv], statistics [T, N]. The packed sequences of one query length and
    one key length are computed together and written in place into outputs made once: memory in
    proportion to the call's elements however many sequences it packs (one a loop, each with its
    tensors, took kilobytes a sequence: gigabytes for a million one-row sequences)."""
    if actual_seq_qlen is None or actual_seq_kvlen is None:
        raise ValueError("npu_fusion_attention: TND needs actual_seq_qlen and actual_seq_kvlen")
    if pse is not None:
        raise ReferenceUnsupported("npu_fusion_attention: pse with TND layout")
    q_segments = _segments(actual_seq_qlen, "npu_fusion_attention: actual_seq_qlen", query.shape[0])
    kv_segments = _segments(actual_seq_kvlen, "npu_fusion_attention: actual_seq_kvlen", key.shape[0])
    if len(q_segments) != len(kv_segments):
        raise ValueError(
            f"npu_fusion_attention: actual_seq_qlen has {len(q_segments)} values, actual_seq_kvlen "
            f"{len(kv_segments)}: one a packed sequence"
        )
    out = query.new_zeros(query.shape[0], head_num, value.shape[-1])
    row_max = query.new_full((query.shape[0], head_num), float("-inf"))  # rows that see no key: 0, -inf, 0
    row_sum = query.new_zeros(query.shape[0], head_num)
    groups: dict[tuple[int, int], list[int]] = {}
    for batch, ((q_start, q_end), (kv_start, kv_end)) in enumerate(zip(q_segments, kv_segments)):
        groups.setdefault((q_end - q_start, kv_end - kv_start), []).append(batch)
    q_starts = torch.tensor([start for start, _ in q_segments] or [0])
    kv_starts = torch.tensor([start for start, _ in kv_segments] or [0])
    for (sq, skv), members in groups.items():
        if sq == 0 or skv == 0:
            continue
        index = torch.tensor(members)
        q_rows = (q_starts[index].unsqueeze(1) + torch.arange(sq)).reshape(-1)
        kv_rows = (kv_starts[index].unsqueeze(1) + torch.arange(skv)).reshape(-1)
        q = query[q_rows].reshape(len(members), sq, *query.shape[1:]).transpose(1, 2)
        k, v = (
            _repeat_kv(t[kv_rows].reshape(len(members), skv, *t.shape[1:]).transpose(1, 2), head_num)
            for t in (key, value)
        )
        group_out, group_max, group_sum = _attention_bnsd(q, k, v, None, sparse.build_many(sq, skv, members), scale)
        out[q_rows] = group_out.transpose(1, 2).reshape(-1, head_num, value.shape[-1])
        row_max[q_rows] = group_max.transpose(1, 2).reshape(-1, head_num)
        row_sum[q_rows] = group_sum.transpose(1, 2).reshape(-1, head_num)
    return out, row_max, row_sum


def _segments(
    cumulative_lengths: Sequence[int], name: str = "cumulative lengths", rows: int | None = None
) -> list[tuple[int, int]]:
    """(start, end) rows of each packed sequence from torch_npu's cumulative lengths.

    Trailing zeros ([2, 5, 9, 0, 0]) mark batches that take no part: empty segments. Anything else
    that is no cumulative length is refused naming it (ValueError): a value that is no integer, a
    negative one, one less than the one before it (a decreasing length would read the rows of a
    sequence twice), one past the `rows` of the packed tensor.
    """
    values = list(cumulative_lengths)
    ends = []
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise ValueError(f"{name}[{i}]: {value!r} is not a length")
        ends.append(int(value))
    last = len(ends)
    while last and ends[last - 1] == 0:
        last -= 1  # trailing zeros: batches that take no part
    bounds, start = [], 0
    for i, end in enumerate(ends[:last]):
        if end < start:
            raise ValueError(
                f"{name}[{i}] is {end}, {'negative' if end < 0 else f'less than the {start} before it'}: "
                "cumulative lengths never decrease (trailing zeros aside)"
            )
        if rows is not None and end > rows:
            raise ValueError(f"{name}[{i}] is {end}, past the {rows} rows of the packed tensor")
        bounds.append((start, end))
        start = end
    return bounds + [(start, start)] * (len(ends) - last)


def _attention_bnsd(q, k, v, pse, mask, scale):
    """softmax(scale * (q k^T + pse), masked) v with the row max and row sum of exp.

    Fully masked rows give zeros instead of 0/0; the max is taken out of the
    graph as the result does not depend on it.
    """
    scores = torch.matmul(q, k.transpose(-2, -1))
    if pse is not None:
        scores = scores + pse
    scores = scores * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True).detach()
    shift = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    weights = torch.exp(scores - shift)
    row_sum = weights.sum(dim=-1, keepdim=True)
    probs = weights / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum))
    return torch.matmul(probs, v), row_max.squeeze(-1), row_sum.detach().squeeze(-1)


def _softmax_stat(row_stat: torch.Tensor) -> torch.Tensor:
    shape = (*row_stat.shape, _SOFTMAX_STAT_WIDTH)
    return row_stat.unsqueeze(-1).expand(shape).to(torch.float32).contiguous()


def _kv_head_count(query, key, head_num: int, layout: str) -> int:
    if layout in ("BSH", "SBH"):  # H = N * D, and D is shared by query and key
        dim = query.shape[-1] // head_num
        if key.dim() != 3 or key.shape[-1] % dim or not key.shape[-1]:
            raise ValueError(
                f"npu_fusion_attention: head_num={head_num}: heads of {dim} (the query's hidden size over it) do not "
                f"make the key's {list(key.shape)[-1:]}"
            )
        return key.shape[-1] // dim
    return key.shape[1] if layout == "BNSD" else key.shape[2]


def _to_bnsd(x: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BSH":
        batch, seq, hidden = x.shape
        return x.reshape(batch, seq, heads, hidden // heads).transpose(1, 2)
    seq, batch, hidden = x.shape  # SBH
    return x.reshape(seq, batch, heads, hidden // heads).permute(1, 2, 0, 3)


def _from_bnsd(x: torch.Tensor, layout: str) -> torch.Tensor:
    batch, heads, seq, dim = x.shape
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BSH":
        return x.transpose(1, 2).reshape(batch, seq, heads * dim)
    return x.permute(2, 0, 1, 3).reshape(seq, batch, heads * dim)  # SBH


def _repeat_kv(x: torch.Tensor, query_heads: int) -> torch.Tensor:
    """GQA: key/value head j serves query heads j*g .. j*g + g - 1, g = Nq / Nkv."""
    kv_heads = x.shape[1]
    if kv_heads == 0 or query_heads % kv_heads:
        raise ValueError(
            f"npu_fusion_attention: {query_heads} query heads are not a multiple of {kv_heads} key/value heads"
        )
    return x.repeat_interleave(query_heads // kv_heads, dim=1)


def _check_pse(pse: torch.Tensor | None, sq: int) -> None:
    # BNSS, BN1Skv and 1NSS broadcast as they are; the alibi-compressed form
    # (only the last 1024 rows, for Sq > 1024) is a different tensor.
    if pse is not None and pse.shape[-2] not in (1, sq):
        raise ReferenceUnsupported("npu_fusion_attention: compressed (last-1024-rows) pse")
