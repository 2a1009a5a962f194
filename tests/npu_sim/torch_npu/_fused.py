"""torch_npu's fused ops on the simulated device: compositions of aten ops on npu tensors.

Written from the ops' documentation (the Ascend op-plugin docs), independently of
pytest_msprobe.frameworks.npu_reference: the plugin benchmarks these calls with that reference, and a
simulation built from it would compare a thing with itself. Each op computes in the dtype of
its inputs, with the aten ops of the device (so a deficit injected into aten::mm reaches
npu_linear and npu_fusion_attention too), autograd through them. Like torch_npu's, they take
npu tensors only.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

from . import _deficits

__all__ = [
    "npu_apply_adam", "npu_apply_adam_w", "npu_confusion_transpose", "npu_fast_gelu", "npu_fusion_attention",
    "npu_group_norm_silu", "npu_layer_norm_eval", "npu_linear", "npu_mish", "npu_moe_gating_top_k_softmax",
    "npu_rms_norm", "npu_rotary_mul", "npu_scaled_masked_softmax", "npu_sort_v2", "npu_swiglu",
]


def _fused(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        tensors = [v for v in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]
        elsewhere = [str(t.device) for t in tensors if t.device.type != "npu"]
        if elsewhere:
            raise RuntimeError(f"{fn.__name__}: expected all tensors on npu, found {', '.join(elsewhere)}")
        return _deficits.fused(fn.__name__, fn, args, kwargs)

    return op


@_fused
def npu_fast_gelu(input: torch.Tensor) -> torch.Tensor:
    """The Atlas training-series formula: x / (1 + e^(-1.702|x|)) * e^(0.851 (x - |x|))."""
    magnitude = input.abs()
    return input / (1 + torch.exp(-1.702 * magnitude)) * torch.exp(0.851 * (input - magnitude))


@_fused
def npu_mish(input: torch.Tensor) -> torch.Tensor:
    """x * tanh(ln(1 + e^x)), the softplus written to stay finite for large x."""
    softplus = torch.log1p(torch.exp(-input.abs())) + input.clamp(min=0)
    return input * torch.tanh(softplus)


@_fused
def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Swish(a) * b of the two halves a, b of `input` along `dim`."""
    half = input.shape[dim] // 2
    a, b = input.narrow(dim, 0, half), input.narrow(dim, half, half)
    return a / (1 + torch.exp(-a)) * b


@_fused
def npu_rotary_mul(input: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half"):
    """x * r1 + rotate(x) * r2; half: (-x2, x1) of the two halves, interleave: (-x1, x0, -x3, x2, ...)."""
    if rotary_mode == "half":
        half = input.shape[-1] // 2
        rotated = torch.cat((-input[..., half:], input[..., :half]), dim=-1)
    elif rotary_mode == "interleave":
        rotated = torch.empty_like(input)
        rotated[..., 0::2] = -input[..., 1::2]
        rotated[..., 1::2] = input[..., 0::2]
    else:
        raise RuntimeError(f"npu_rotary_mul: rotary_mode must be half or interleave, not {rotary_mode!r}")
    return input * r1 + rotated * r2


@_fused
def npu_scaled_masked_softmax(x: torch.Tensor, mask: torch.Tensor, scale: float = 1.0,
                              fixed_triu_mask: bool = False) -> torch.Tensor:
    """softmax over the last dim of x * scale, the positions where mask is True left out."""
    if fixed_triu_mask:
        rows, cols = x.shape[-2:]
        keep = torch.arange(cols, device=x.device) <= torch.arange(rows, device=x.device).unsqueeze(-1)
    else:
        keep = ~mask.bool()
    scores = torch.where(keep, x * scale, torch.full_like(x, float("-inf")))
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return weights / weights.sum(dim=-1, keepdim=True)


@_fused
def npu_confusion_transpose(input: torch.Tensor, perm: Sequence[int], shape: Sequence[int],
                            transpose_first: bool) -> torch.Tensor:
    if transpose_first:
        return input.permute(list(perm)).contiguous().view(list(shape))
    return input.contiguous().view(list(shape)).permute(list(perm))


@_fused
def npu_linear(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """input times weight transposed ([out, in] layout), plus bias."""
    out = torch.matmul(input, weight.transpose(0, 1))
    return out if bias is None else out + bias


@_fused
def npu_sort_v2(input: torch.Tensor, dim: int = -1, descending: bool = False,
                out: Optional[torch.Tensor] = None) -> torch.Tensor:
    values = torch.sort(input, dim=dim, descending=descending).values
    return values if out is None else out.copy_(values)


@_fused
def npu_moe_gating_top_k_softmax(x: torch.Tensor, finished: Optional[torch.Tensor] = None,
                                 k: int = 1) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the k largest softmax probabilities of each row, their experts, row_idx); finished rows
    get the expert index num_expert; row_idx[i, j] = j * rows + i."""
    probs = torch.exp(x - x.amax(dim=-1, keepdim=True))
    probs = probs / probs.sum(dim=-1, keepdim=True)
    y, experts = torch.topk(probs, k, dim=-1)
    experts = experts.to(torch.int32)
    if finished is not None:
        experts = torch.where(finished.bool().unsqueeze(-1), torch.full_like(experts, x.shape[-1]), experts)
    rows = y.numel() // k
    row = torch.arange(rows, dtype=torch.int32, device=x.device).unsqueeze(-1)
    row_idx = row + rows * torch.arange(k, dtype=torch.int32, device=x.device)
    return y, experts, row_idx.reshape(y.shape)


@_fused
def npu_rms_norm(input: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6):
    """(x / sqrt(mean(x^2) + eps) * gamma, rstd) over gamma's dims; rstd float32, reduced dims kept."""
    dims = list(range(input.dim() - gamma.dim(), input.dim()))
    rstd = 1 / torch.sqrt((input * input).mean(dim=dims, keepdim=True) + epsilon)
    return gamma * (input * rstd), rstd.float()


@_fused
def npu_layer_norm_eval(input: torch.Tensor, normalized_shape: Sequence[int], weight: Optional[torch.Tensor] = None,
                        bias: Optional[torch.Tensor] = None, eps: float = 1e-5) -> torch.Tensor:
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    centred = input - input.mean(dim=dims, keepdim=True)
    out = centred / torch.sqrt((centred * centred).mean(dim=dims, keepdim=True) + eps)
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


@_fused
def npu_group_norm_silu(input: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                        group: int, eps: float = 1e-5):
    """(silu(group_norm(x)), mean, rstd), mean and rstd [N, group]; channels are dim 1."""
    n, c = input.shape[:2]
    groups = input.reshape(n, group, c // group, -1)
    mean = groups.mean(dim=(2, 3), keepdim=True)
    variance = ((groups - mean) ** 2).mean(dim=(2, 3), keepdim=True)
    rstd = 1 / torch.sqrt(variance + eps)
    out = ((groups - mean) * rstd).reshape(input.shape)
    channel = [1, c] + [1] * (input.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(channel)
    if bias is not None:
        out = out + bias.reshape(channel)
    return out * torch.sigmoid(out), mean.reshape(n, group), rstd.reshape(n, group)


def _number(value: Any) -> float:
    return value.item() if isinstance(value, torch.Tensor) else float(value)


@_fused
def npu_apply_adam(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad: torch.Tensor,
                   use_locking: Optional[bool], use_nesterov: Optional[bool], *, out=None):
    """TensorFlow's ApplyAdam, in place on out=(var, m, v) (torch_npu has only the out= form)."""
    var, m, v = out
    b1, b2 = _number(beta1), _number(beta2)
    m.add_((grad - m) * (1 - b1))
    v.add_((grad * grad - v) * (1 - b2))
    step = _number(lr) * (1 - _number(beta2_power)) ** 0.5 / (1 - _number(beta1_power))
    direction = m * b1 + grad * (1 - b1) if use_nesterov else m
    var.sub_(step * direction / (v.sqrt() + _number(epsilon)))
    return var, m, v


@_fused
def npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad: torch.Tensor,
                     max_grad_norm: Optional[torch.Tensor], amsgrad: Optional[bool], maximize: Optional[bool], *,
                     out=None):
    """aclnnApplyAdamW in place on out=(var, m, v); beta*_power are beta^(t-1), the op advances them."""
    var, m, v = out
    b1, b2, rate = _number(beta1), _number(beta2), _number(lr)
    g = -grad if maximize else grad
    var.mul_(1 - rate * _number(weight_decay))
    m.mul_(b1).add_(g * (1 - b1))
    v.mul_(b2).add_(g * g * (1 - b2))
    if amsgrad and max_grad_norm is None:
        raise RuntimeError("npu_apply_adam_w: amsgrad needs max_grad_norm")
    second = torch.maximum(max_grad_norm, v) if amsgrad and max_grad_norm is not None else v
    denominator = (second / (1 - _number(beta2_power) * b2)).sqrt() + _number(epsilon)
    var.sub_(rate / (1 - _number(beta1_power) * b1) * m / denominator)
    return var, m, v


# -- npu_fusion_attention ----------------------------------------------------------


@_fused
def npu_fusion_attention(query, key, value, head_num: int, input_layout: str, pse=None, padding_mask=None,
                         atten_mask=None, scale: float = 1.0, keep_prob: float = 1.0, pre_tockens: int = 2147483647,
                         next_tockens: int = 2147483647, inner_precise: int = 0, prefix=None, actual_seq_qlen=None,
                         actual_seq_kvlen=None, sparse_mode: int = 0, gen_mask_parallel: bool = True,
                         sync: bool = False, softmax_layout: str = "", sink=None):
    """softmax(mask(scale * (q k^T + pse))) v per head, and softmax_max / softmax_sum [.., 8] in float32.

    Returns (attention_out, softmax_max, softmax_sum, softmax_out (empty), seed, offset, mask length):
    no dropout is drawn (keep_prob 1), so the last three are 0. A query row that sees no key
    gives zeros, max -inf and sum 0. Simulated: the layouts BSH, SBH, BSND, BNSD and TND,
    sparse_mode 0-4, pse, GQA; not dropout, padding_mask, prefix (mode 6) or sink.
    """
    if keep_prob != 1.0 or padding_mask is not None or sink is not None:
        raise RuntimeError("npu sim: npu_fusion_attention with dropout, padding_mask or sink is not simulated")
    masking = _Masking(sparse_mode, atten_mask, pre_tockens, next_tockens)
    if input_layout == "TND":
        out, row_max, row_sum = _packed(query, key, value, head_num, scale, masking, actual_seq_qlen,
                                        actual_seq_kvlen)
    else:
        kv_heads = key.shape[-1] // (query.shape[-1] // head_num) if input_layout in ("BSH", "SBH") else 0
        q, k, v = (_heads_first(t, input_layout, heads) for t, heads in
                   ((query, head_num), (key, kv_heads), (value, kv_heads)))
        out, row_max, row_sum = _attend(q, k, v, pse, scale, masking.mask(q.shape[2], k.shape[2]))
        out = _heads_back(out, input_layout)
    stats = [s.unsqueeze(-1).repeat_interleave(8, dim=-1).float() for s in (row_max, row_sum)]
    return out, stats[0], stats[1], torch.zeros(0, dtype=query.dtype, device=query.device), 0, 0, 0


class _Masking:
    """Which keys each query may not see, by sparse_mode (the op's docs); no atten_mask: all visible."""

    def __init__(self, mode: int, atten_mask, pre: int, nxt: int):
        if mode not in range(5):
            raise RuntimeError(f"npu sim: npu_fusion_attention sparse_mode={mode} is not simulated")
        self.mode, self.atten_mask, self.pre, self.nxt = mode, atten_mask, pre, nxt

    def mask(self, sq: int, skv: int) -> Optional[torch.Tensor]:
        if self.atten_mask is None:
            return None
        device = self.atten_mask.device
        distance = torch.arange(skv, device=device).unsqueeze(0) - torch.arange(sq, device=device).unsqueeze(1)
        if self.mode == 2:  # causal from the top left corner
            return distance > 0
        if self.mode == 3:  # causal to the bottom right corner
            return distance > skv - sq
        if self.mode == 4:  # a band around the diagonal through the bottom right corner
            shifted = distance - (skv - sq)
            return (shifted > self.nxt) | (shifted < -self.pre)
        mask = self.atten_mask.bool()[..., :sq, :skv]
        if self.mode == 0:
            mask = mask | (distance > self.nxt) | (distance < -self.pre)
        return mask


def _heads_first(x: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    """[B, N, S, D] from BSH / SBH (H = `heads` * D), BSND, BNSD."""
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.permute(0, 2, 1, 3)
    if layout not in ("BSH", "SBH"):
        raise RuntimeError(f"npu_fusion_attention: unknown input_layout {layout!r}")
    if layout == "BSH":
        b, s, h = x.shape
        return x.reshape(b, s, heads, h // heads).permute(0, 2, 1, 3)
    s, b, h = x.shape
    return x.reshape(s, b, heads, h // heads).permute(1, 2, 0, 3)


def _heads_back(x: torch.Tensor, layout: str) -> torch.Tensor:
    b, n, s, d = x.shape
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.permute(0, 2, 1, 3)
    if layout == "BSH":
        return x.permute(0, 2, 1, 3).reshape(b, s, n * d)
    return x.permute(2, 0, 1, 3).reshape(s, b, n * d)


def _attend(q, k, v, pse, scale, mask):
    """BNSD attention; key/value heads shared by groups of query heads (GQA). -> out, row max, row sum."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads != heads:  # query head h reads key/value head h // (heads / kv_heads)
        serving = torch.arange(heads, device=q.device) // (heads // kv_heads)
        k, v = k[:, serving], v[:, serving]
    scores = q @ k.transpose(-1, -2)
    if pse is not None:
        scores = scores + pse
    scores = scores * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    row_max = scores.amax(dim=-1).detach()
    finite_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    weights = torch.exp(scores - finite_max.unsqueeze(-1))
    row_sum = weights.sum(dim=-1)
    safe_sum = torch.where(row_sum == 0, torch.ones_like(row_sum), row_sum)
    return (weights / safe_sum.unsqueeze(-1)) @ v, row_max, row_sum.detach()


def _packed(query, key, value, heads, scale, masking, qlens, kvlens):
    """TND: sequences packed along T, their ends given cumulatively (trailing zeros: none)."""
    if qlens is None or kvlens is None:
        raise RuntimeError("npu_fusion_attention: TND needs actual_seq_qlen and actual_seq_kvlen")
    outs: List[torch.Tensor] = []
    maxes: List[torch.Tensor] = []
    sums: List[torch.Tensor] = []
    q_start = kv_start = 0
    for q_end, kv_end in zip(qlens, kvlens):
        q_end, kv_end = max(int(q_end), q_start), max(int(kv_end), kv_start)
        rows = q_end - q_start
        if rows:
            q = query[q_start:q_end].permute(1, 0, 2).unsqueeze(0)
            k = key[kv_start:kv_end].permute(1, 0, 2).unsqueeze(0)
            v = value[kv_start:kv_end].permute(1, 0, 2).unsqueeze(0)
            if kv_end > kv_start:
                mask = masking.mask(rows, kv_end - kv_start)
                out, row_max, row_sum = _attend(q, k, v, None, scale, mask)
            else:  # no key: the rows see nothing
                out = q.new_zeros(1, heads, rows, value.shape[-1])
                row_max, row_sum = q.new_full((1, heads, rows), float("-inf")), q.new_zeros(1, heads, rows)
            outs.append(out[0].permute(1, 0, 2))
            maxes.append(row_max[0].t())
            sums.append(row_sum[0].t())
        q_start, kv_start = q_end, kv_end
    rest = query.shape[0] - q_start
    if rest:
        outs.append(query.new_zeros(rest, heads, value.shape[-1]))
        maxes.append(query.new_full((rest, heads), float("-inf")))
        sums.append(query.new_zeros(rest, heads))
    return torch.cat(outs), torch.cat(maxes), torch.cat(sums)
