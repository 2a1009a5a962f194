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
from collections.abc import Sequence
from typing import Any, Callable, List, Optional, Tuple

import torch

from . import _deficits, _state

__all__ = [
    "npu_add_rms_norm",
    "npu_apply_adam",
    "npu_apply_adam_w",
    "npu_apply_rotary_pos_emb",
    "npu_confusion_transpose",
    "npu_dynamic_quant",
    "npu_fast_gelu",
    "npu_fused_infer_attention_score",
    "npu_fusion_attention",
    "npu_gelu",
    "npu_group_norm_silu",
    "npu_grouped_matmul",
    "npu_incre_flash_attention",
    "npu_layer_norm_eval",
    "npu_linear",
    "npu_mish",
    "npu_moe_compute_expert_tokens",
    "npu_moe_finalize_routing",
    "npu_moe_gating_top_k_softmax",
    "npu_moe_init_routing",
    "npu_prompt_flash_attention",
    "npu_quant_matmul",
    "npu_quantize",
    "npu_rms_norm",
    "npu_rotary_mul",
    "npu_scaled_masked_softmax",
    "npu_scatter_nd_update",
    "npu_scatter_nd_update_",
    "npu_sort_v2",
    "npu_swiglu",
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
    probabilities = weights / safe_sum.unsqueeze(-1)
    if _state.probabilities_dtype is not None:  # flash_p: P in bf16/fp16 before P V, fp32 accumulation
        probabilities = probabilities.to(_state.probabilities_dtype).to(probabilities.dtype)
    return probabilities @ v, row_max, row_sum.detach()


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


# -- LLM and MoE operators (issue 30) ------------------------------------------------

# What a grouped matmul leaves in the output rows beyond group_list's total: the device does not
# write them, so they hold whatever the memory held; here a fixed value, never a result.
UNWRITTEN = 1.0e4


@_fused
def npu_add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6):
    """(rms_norm(x1 + x2) * gamma, rstd float32, x1 + x2), the residual added first; in float32
    whatever the inputs' dtype, as the device's vector kernels compute, rounded once at the end."""
    x = x1.float() + x2.float()
    dims = list(range(x.dim() - gamma.dim(), x.dim()))
    rstd = 1 / torch.sqrt((x * x).mean(dim=dims, keepdim=True) + epsilon)
    return (gamma.float() * (x * rstd)).to(x1.dtype), rstd, x.to(x1.dtype)


@_fused
def npu_gelu(input: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    """x * (1 + erf(x / sqrt 2)) / 2, or 'tanh': x * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2."""
    x = input.float()  # in float32, rounded once at the end
    if approximate == "tanh":
        return (0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))).to(input.dtype)
    if approximate != "none":
        raise RuntimeError(f"npu_gelu: approximate must be none or tanh, not {approximate!r}")
    return (0.5 * x * (1 + torch.erf(x * 0.7071067811865476))).to(input.dtype)


@_fused
def npu_apply_rotary_pos_emb(query: torch.Tensor, key: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                             layout: str = "BSH", rotary_mode: str = "half"):
    """query and key rotated in place (x cos + rotate(x) sin) and returned, as the op does."""
    if rotary_mode != "half":
        raise RuntimeError(f"npu sim: npu_apply_rotary_pos_emb rotary_mode={rotary_mode!r} is not simulated")
    for x in (query, key):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        x.copy_(x * cos + rotated * sin)
    return query, key


@_fused
def npu_scatter_nd_update(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """input with the slices indices address (over its first indices.shape[-1] dims) set to updates."""
    out = input.clone()
    depth = indices.shape[-1]
    flat_indices = indices.reshape(-1, depth).tolist()
    flat_updates = updates.reshape(len(flat_indices), *input.shape[depth:])
    for row, index in enumerate(flat_indices):
        out[tuple(index)] = flat_updates[row]
    return out


@_fused
def npu_dynamic_quant(input: torch.Tensor, *, smooth_scales: Optional[torch.Tensor] = None,
                      group_index: Optional[torch.Tensor] = None, dst_type: Optional[torch.dtype] = None):
    """(int8 y, float32 scale) per token: scale = max |x smooth| / 127, y = round(x smooth / scale),
    in float32 as the device computes it."""
    if group_index is not None or dst_type not in (None, torch.int8):
        raise RuntimeError("npu sim: npu_dynamic_quant with group_index or dst_type is not simulated")
    x = input.float()
    if smooth_scales is not None:
        x = x * smooth_scales.float()
    scale = x.abs().amax(dim=-1, keepdim=True) / 127.0
    y = torch.round(x / scale).clamp(-128, 127).to(torch.int8)
    return y, scale.squeeze(-1)


@_fused
def npu_grouped_matmul(x: List[torch.Tensor], weight: List[torch.Tensor], *, bias=None, scale=None, offset=None,
                       antiquant_scale=None, antiquant_offset=None, per_token_scale=None, group_list=None,
                       activation_input=None, activation_quant_scale=None, activation_quant_offset=None,
                       split_item: int = 0, group_type=None, group_list_type: int = 0, act_type: int = 0,
                       output_dtype=None, tuning_config=None) -> List[torch.Tensor]:
    """x_i @ weight_i + bias_i per group. Simulated: the non-quantised calls; one x split by
    group_list (cumulative ends, or sizes with group_list_type 1) or one x per weight; weights as
    a list of [k, n] or one [g, k, n]; split_item 0/1 (a tensor per group) or 2/3 (one tensor,
    rows beyond group_list's total left unwritten)."""
    quantised = (scale, offset, antiquant_scale, antiquant_offset, per_token_scale, activation_input,
                 activation_quant_scale, activation_quant_offset)
    if any(v is not None for v in quantised) or act_type:
        raise RuntimeError("npu sim: quantised or activated npu_grouped_matmul is not simulated")
    weights = list(weight[0]) if len(weight) == 1 and weight[0].dim() == 3 else list(weight)
    biases = [None] * len(weights) if bias is None else (list(bias[0]) if len(bias) == 1 and bias[0].dim() == 2
                                                         else list(bias))
    if len(x) == 1 and len(weights) > 1:
        values = group_list.tolist() if isinstance(group_list, torch.Tensor) else list(group_list)
        if isinstance(group_list, torch.Tensor) and group_list_type == 1:
            ends = [sum(values[:i + 1]) for i in range(len(values))]
        else:
            ends = values
        starts = [0, *ends[:-1]]
        pieces = [x[0][start:end] for start, end in zip(starts, ends)]
    else:
        pieces, starts, ends = list(x), [], []
    ys = []
    for piece, w, b in zip(pieces, weights, biases):
        y = piece @ w
        ys.append(y if b is None else y + b)
    if split_item in (0, 1):
        return ys
    if not ends:
        return [torch.cat(ys)]
    out = torch.full((x[0].shape[0], weights[0].shape[-1]), UNWRITTEN, dtype=x[0].dtype, device=x[0].device)
    for start, end, y in zip(starts, ends, ys):
        out[start:end] = y
    return [out]


@_fused
def npu_moe_init_routing(x: torch.Tensor, row_idx: torch.Tensor, expert_idx: torch.Tensor, active_num: int):
    """Rows gathered expert by expert (lowest expert first, then the flattened row-major order of
    expert_idx), expanded_row_idx the position each (row, k) went to, the experts in that order."""
    rows, k = expert_idx.shape
    experts, sources = expert_idx.reshape(-1).tolist(), row_idx.reshape(-1).tolist()
    order = [position for expert in sorted(set(experts)) for position, e in enumerate(experts) if e == expert]
    source = [sources[position] for position in order]
    expanded_row_idx = [0] * len(source)
    for destination, src in enumerate(source):
        expanded_row_idx[src] = destination
    active = min(active_num, rows) * k
    take = torch.tensor([src % rows for src in source[:active]], dtype=torch.long, device=x.device)
    as_int = dict(dtype=torch.int32, device=x.device)
    return (x.index_select(0, take), torch.tensor(expanded_row_idx, **as_int),
            torch.tensor([experts[p] for p in order], **as_int))


@_fused
def npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
                             expert_for_source_row, drop_pad_mode: int = 0, k: int = 1):
    """skip1 + skip2 + sum over k of scales[i, k] (the row token i's k-th expert produced + that
    expert's bias), the k-th row of token i at [k * rows + i] (modes 0, 1) or [i * K + k] (2, 3)."""
    top_k = scales.shape[1] if scales is not None else k
    rows = expanded_src_to_dst_row.shape[0] // top_k
    table = expanded_permuted_rows.reshape(-1, expanded_permuted_rows.shape[-1]).float()  # summed in float32
    out = torch.zeros(rows, table.shape[1], dtype=torch.float32, device=table.device)
    if skip1 is not None:
        out = out + skip1.float()
    if skip2 is not None:
        out = out + skip2.float()
    destinations = expanded_src_to_dst_row.tolist()
    for j in range(top_k):
        at = [j * rows + i if drop_pad_mode in (0, 1) else i * top_k + j for i in range(rows)]
        picked = [destinations[a] for a in at]
        index = torch.tensor([max(p, 0) for p in picked], dtype=torch.long, device=table.device)
        term = table.index_select(0, index)
        kept = torch.tensor([p >= 0 for p in picked], device=table.device).unsqueeze(-1)
        term = torch.where(kept, term, torch.zeros_like(term))
        if bias is not None:
            term = term + bias.index_select(0, expert_for_source_row[:, j].long()).float()
        out = out + (term if scales is None else scales[:, j:j + 1].float() * term)
    return out.to(expanded_permuted_rows.dtype)


@_fused
def npu_moe_compute_expert_tokens(sorted_expert_for_source_row: torch.Tensor, num_expert: int) -> torch.Tensor:
    """How many of the sorted experts are at most e, for each expert e < num_expert."""
    experts = torch.arange(num_expert, device=sorted_expert_for_source_row.device).unsqueeze(-1)
    counts = (sorted_expert_for_source_row.reshape(1, -1) <= experts).sum(dim=-1)
    return counts.to(sorted_expert_for_source_row.dtype)


def _inference_attention(query, key, value, heads, kv_heads, layout, scale, masking, kv_lengths, out_layout,
                         with_lse=False):
    """Batch by batch in float32 (the device's softmax precision): keys beyond kv_lengths[b] left out.
    with_lse: also log(sum exp) of each row's scaled scores, [B, N, S1, 1]."""
    q = _heads_first(query, layout, heads).float()
    k, v = (_heads_first(t, layout, kv_heads).float() for t in (key, value))
    outs, lses = [], []
    for b in range(q.shape[0]):
        length = k.shape[2] if kv_lengths is None else int(kv_lengths[b if len(kv_lengths) > 1 else 0])
        out, row_max, row_sum = _attend(q[b:b + 1], k[b:b + 1, :, :length], v[b:b + 1, :, :length], None, scale,
                                        masking(b, q.shape[2], length))
        outs.append(out)
        lses.append((row_max + torch.log(row_sum)).unsqueeze(-1))
    out = _heads_back(torch.cat(outs).to(query.dtype), out_layout)
    return (out, torch.cat(lses)) if with_lse else out


@_fused
def npu_prompt_flash_attention(query, key, value, *, pse_shift=None, padding_mask=None, atten_mask=None,
                               actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None,
                               quant_scale2=None, quant_offset2=None, num_heads=1, scale_value=1.0,
                               pre_tokens=2147473647, next_tokens=0, input_layout="BSH", num_key_value_heads=0,
                               actual_seq_lengths_kv=None, sparse_mode=0):
    """softmax(scale Q K^T, masked by sparse_mode as npu_fusion_attention's) V. Simulated: BSH, BSND,
    BNSD, BNSD_BSND, GQA, sparse_mode 0-4, actual_seq_lengths_kv; not pse_shift or int8."""
    if any(t is not None for t in (pse_shift, deq_scale1, quant_scale1, deq_scale2, quant_scale2, quant_offset2)):
        raise RuntimeError("npu sim: npu_prompt_flash_attention with pse_shift or quantisation is not simulated")
    layout, out_layout = ("BNSD", "BSND") if input_layout == "BNSD_BSND" else (input_layout, input_layout)
    kv_heads = num_key_value_heads or num_heads
    if layout in ("BSH",):
        kv_heads = key.shape[-1] // (query.shape[-1] // num_heads)

    def masking(b, sq, skv):
        batched = atten_mask is not None and atten_mask.dim() >= 3 and atten_mask.shape[0] > 1
        mask = atten_mask[b] if batched else atten_mask
        return _Masking(sparse_mode, mask, pre_tokens, next_tokens).mask(sq, skv)

    return _inference_attention(query, key, value, num_heads, kv_heads, layout, scale_value, masking,
                                actual_seq_lengths_kv, out_layout)


@_fused
def npu_incre_flash_attention(query, key, value, *, padding_mask=None, pse_shift=None, atten_mask=None,
                              actual_seq_lengths=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
                              quant_scale2=None, quant_offset2=None, antiquant_scale=None, antiquant_offset=None,
                              block_table=None, kv_padding_size=None, num_heads=1, scale_value=1.0,
                              input_layout="BSH", num_key_value_heads=0, block_size=0, inner_precise=1):
    """softmax(scale q K^T + atten_mask) V for one query token per batch, the keys beyond
    actual_seq_lengths[b] left out. Simulated: BSH, BSND, BNSD, GQA, masks [B, S] or [B, 1, 1, S];
    not paged KV, left padding, pse_shift or quantisation."""
    unsimulated = (pse_shift, dequant_scale1, quant_scale1, dequant_scale2, quant_scale2, quant_offset2,
                   antiquant_scale, antiquant_offset, block_table, kv_padding_size)
    if any(t is not None for t in unsimulated):
        raise RuntimeError("npu sim: npu_incre_flash_attention with these arguments is not simulated")
    kv_heads = num_key_value_heads or num_heads
    if input_layout == "BSH":
        kv_heads = key.shape[-1] // (query.shape[-1] // num_heads)

    def masking(b, sq, skv):
        if atten_mask is None:
            return None
        return atten_mask.reshape(atten_mask.shape[0], -1)[b, :skv].bool()

    return _inference_attention(query, key, value, num_heads, kv_heads, input_layout, scale_value, masking,
                                actual_seq_lengths, input_layout)


_FIAS_UNSIMULATED = ("pse_shift", "dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2", "quant_offset2",
                     "antiquant_scale", "antiquant_offset", "block_table", "query_padding_size", "kv_padding_size",
                     "key_antiquant_scale", "key_antiquant_offset", "value_antiquant_scale",
                     "value_antiquant_offset", "key_shared_prefix", "value_shared_prefix", "actual_shared_prefix_len",
                     "query_rope", "key_rope")


@_fused
def npu_fused_infer_attention_score(query, key, value, *, num_heads=1, scale=1.0, pre_tokens=2147483647,
                                    next_tokens=2147483647, input_layout="BSH", num_key_value_heads=0, sparse_mode=0,
                                    atten_mask=None, actual_seq_lengths=None, actual_seq_lengths_kv=None,
                                    softmax_lse_flag=False, inner_precise=0, block_size=0, antiquant_mode=0,
                                    key_antiquant_mode=0, value_antiquant_mode=0, key_rope_antiquant_scale=None,
                                    **others):
    """(attention_out, softmax_lse): the prompt branch (query S > 1) as npu_prompt_flash_attention, the
    decode branch (S = 1) as npu_incre_flash_attention; lse [B, N, S1, 1] float32 with softmax_lse_flag,
    else a [1] zero. Simulated: BSH, BSND, BNSD, BNSD_BSND, TND; not the arguments in _FIAS_UNSIMULATED."""
    given = sorted(name for name, v in others.items() if v is not None)
    if given or set(others) - set(_FIAS_UNSIMULATED):
        raise RuntimeError(f"npu sim: npu_fused_infer_attention_score with {given or sorted(others)} is not simulated")
    if input_layout == "TND":  # packed sequences, as npu_fusion_attention's TND, in float32
        out, row_max, row_sum = _packed(query.float(), key.float(), value.float(), num_heads, scale,
                                        _Masking(sparse_mode, atten_mask, pre_tokens, next_tokens),
                                        actual_seq_lengths, actual_seq_lengths_kv)
        lse = (row_max + torch.log(row_sum)).unsqueeze(-1)
        lse = lse if softmax_lse_flag else torch.zeros(1, dtype=torch.float32, device=query.device)
        return out.to(query.dtype), lse
    layout, out_layout = ("BNSD", "BSND") if input_layout == "BNSD_BSND" else (input_layout, input_layout)
    kv_heads = num_key_value_heads or num_heads
    if layout == "BSH":
        kv_heads = key.shape[-1] // (query.shape[-1] // num_heads)
    decode = _heads_first(query, layout, num_heads).shape[2] == 1

    def masking(b, sq, skv):
        if atten_mask is None:
            return None
        if decode:
            return atten_mask.reshape(atten_mask.shape[0], -1)[b, :skv].bool()
        batched = atten_mask.dim() >= 3 and atten_mask.shape[0] > 1
        return _Masking(sparse_mode, atten_mask[b] if batched else atten_mask, pre_tokens, next_tokens).mask(sq, skv)

    out, lse = _inference_attention(query, key, value, num_heads, kv_heads, layout, scale, masking,
                                    actual_seq_lengths_kv, out_layout, with_lse=True)
    return out, lse if softmax_lse_flag else torch.zeros(1, dtype=torch.float32, device=query.device)


@_fused
def npu_quantize(input: torch.Tensor, scales: torch.Tensor, zero_points: Optional[torch.Tensor], dtype: torch.dtype,
                 axis: int = 1, div_mode: bool = True) -> torch.Tensor:
    """x / scales + zero_points (div_mode) or x * scales + zero_points, rounded to nearest even in
    float32 and saturated to dtype; scales per tensor or per channel (axis; the last axis, or the
    second to last for axis -2, when not div_mode). Simulated: qint8 (or int8), quint8, qint32 (or int32)."""
    ranges = {torch.qint8: (torch.int8, -128, 127), torch.quint8: (torch.uint8, 0, 255),
              torch.qint32: (torch.int32, -2 ** 31, 2 ** 31 - 1)}
    ranges.update({torch.int8: ranges[torch.qint8], torch.int32: ranges[torch.qint32]})
    if dtype not in ranges:
        raise RuntimeError(f"npu sim: npu_quantize to {dtype} is not simulated")
    out_dtype, low, high = ranges[dtype]
    dim = axis % input.dim() if div_mode else input.dim() - (2 if axis == -2 else 1)
    shape = [1] * input.dim()

    def channel(t: torch.Tensor) -> torch.Tensor:
        if t.numel() == 1:
            return t.float().reshape(())
        shape[dim] = t.numel()
        return t.float().reshape(shape)

    x = input.float()
    x = x / channel(scales) if div_mode else x * channel(scales)
    if zero_points is not None:
        x = x + channel(zero_points)
    return torch.round(x).clamp(low, high).to(out_dtype)


@_fused
def npu_scatter_nd_update_(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """npu_scatter_nd_update in place: input itself updated and returned."""
    depth = indices.shape[-1]
    for index, row in zip(indices.reshape(-1, depth).tolist(), updates.reshape(-1, *input.shape[depth:])):
        input[tuple(index)] = row
    return input


@_fused
def npu_quant_matmul(x1: torch.Tensor, x2: torch.Tensor, scale: torch.Tensor, *, offset=None, pertoken_scale=None,
                     bias=None, output_dtype=None, x1_dtype=None, x2_dtype=None, pertoken_scale_dtype=None,
                     scale_dtype=None, group_sizes=None, y_scale=None) -> torch.Tensor:
    """int8 matmul accumulated exactly (float32 holds these integer sums), dequantised in float32:
    (acc + int32 bias) * scale * pertoken_scale + float bias; int8 out: + offset, rounded, saturated.
    Simulated: int8 inputs, float scales and npu_trans_quant_param's int64 ones, int8/bf16/fp16 outputs.
    As op-plugin's QuantMatmul, a float32 scale without pertoken_scale for an int8 or fp16 output is
    packed first (npu_trans_quant_param, round_mode 0): its high 19 bits kept."""
    if any(v is not None for v in (x1_dtype, x2_dtype, pertoken_scale_dtype, scale_dtype, group_sizes, y_scale)):
        raise RuntimeError("npu sim: npu_quant_matmul with these arguments is not simulated")
    if scale.dtype == torch.int64:  # the float32 in the low 32 bits
        low = scale & 0xFFFFFFFF
        scale = torch.where(low >= 2 ** 31, low - 2 ** 32, low).to(torch.int32).view(torch.float32)
    elif scale.dtype == torch.float32 and pertoken_scale is None and output_dtype in (None, torch.int8, torch.float16):
        scale = (scale.view(torch.int32) & ~0x1FFF).view(torch.float32)
    acc = x1.float() @ x2.float()
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias.float()
    y = acc * scale.float()
    if pertoken_scale is not None:
        y = y * pertoken_scale.float().reshape(-1, 1)
    if bias is not None and bias.dtype != torch.int32:
        y = y + bias.float()
    out_dtype = output_dtype or torch.int8
    if out_dtype != torch.int8:
        return y.to(out_dtype)
    if offset is not None:
        y = y + offset.float()
    return torch.round(y).clamp(-128, 127).to(torch.int8)
