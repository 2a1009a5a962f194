"""CPU references for torch_npu's LLM and MoE operators (issue 30), registered in npu_reference.

Each is written from the op's page in the Ascend op-plugin docs (``docs/context/torch_npu-<op>.md``
and ``docs/zh/custom_APIs/torch_npu/``) and, where the page gives one, its "equivalent computation"
(等价计算逻辑).  As in npu_reference, every argument of the signature is either modelled or refused
with ReferenceUnsupported naming it; references compute in their floating inputs' dtype (float64 for
the bench) and keep the dtypes torch_npu documents for index and quantised outputs.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Callable, TypeVar, overload

import torch
import torch.nn.functional as F

from .npu_reference import (
    PADDED_ROWS,
    AttentionInBnsd,
    ReferenceUnsupported,
    _attention_bnsd,
    _from_bnsd,
    _reference,
    _repeat_kv,
    _rotate,
    _segments,
    _SparseMask,
    _to_bnsd,
    check_count,
    check_heads,
)
from .references import Unwritten

__all__ = [
    "INFERENCE_CALLS",
    "InferenceAttention",
    "inference_attention_in_bnsd",
    "npu_add_rms_norm",
    "npu_apply_rotary_pos_emb",
    "npu_dynamic_quant",
    "npu_fused_infer_attention_score",
    "npu_gelu",
    "npu_grouped_matmul",
    "npu_incre_flash_attention",
    "npu_moe_compute_expert_tokens",
    "npu_moe_finalize_routing",
    "npu_moe_init_routing",
    "npu_prompt_flash_attention",
    "npu_quant_matmul",
    "npu_quantize",
    "npu_scatter_nd_update",
    "npu_scatter_nd_update_",
]


def _refuse(op: str, **unmodelled: Any) -> None:
    """ReferenceUnsupported naming the first argument given that the reference does not model."""
    for name, value in unmodelled.items():
        if value is not None:
            raise ReferenceUnsupported(f"{op}: {name}")


def _ints(value: Any) -> list[int]:
    """A List[int] or an integer tensor argument as Python ints."""
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1).tolist()]
    return [int(v) for v in value]


# --------------------------------------------------------------------------
# Normalisation, activation, element-wise
# --------------------------------------------------------------------------


@_reference
def npu_add_rms_norm(
    x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, rstd, x): x = x1 + x2, rstd = 1 / sqrt(mean(x^2) + eps) over gamma's dims, y = x * rstd * gamma.

    rstd keeps the reduced dims as size 1 and is float32, as npu_rms_norm's (aclnnAddRmsNorm).
    """
    x = x1 + x2
    reduced = tuple(range(-gamma.dim(), 0))
    rstd = torch.rsqrt(x.pow(2).mean(dim=reduced, keepdim=True) + epsilon)
    return x * rstd * gamma, rstd.to(torch.float32), x


@_reference
def npu_gelu(input: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    """gelu(x): x Phi(x) ('none'), or the tanh approximation ('tanh')."""
    if approximate not in ("none", "tanh"):
        raise ReferenceUnsupported(f"npu_gelu: approximate={approximate!r}")
    return F.gelu(input, approximate=approximate)


@_reference
def npu_apply_rotary_pos_emb(
    query: torch.Tensor,
    key: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str = "BSH",
    rotary_mode: str = "half",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(query * cos + rotate(query) * sin, the same of key), rotate as npu_rotary_mul's.

    The op updates query and key in place and returns them; the reference returns new tensors.
    cos and sin broadcast over the heads in every layout (BSH is [B, S, N, D]), so the layout
    changes nothing but what shapes are valid.
    """
    if layout not in ("BSH", "BSND", "BNSD", "SBND", "TND"):
        raise ReferenceUnsupported(f"npu_apply_rotary_pos_emb: layout={layout!r}")
    if rotary_mode not in ("half", "interleave"):
        raise ReferenceUnsupported(f"npu_apply_rotary_pos_emb: rotary_mode={rotary_mode!r}")
    return tuple(x * cos + _rotate(x, rotary_mode) * sin for x in (query, key))  # type: ignore[return-value]


@_reference
def npu_scatter_nd_update(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """A copy of input with input[indices[..., :]] = updates (TensorFlow's ScatterNdUpdate).

    indices [..., K] address the first K dims; updates are indices.shape[:-1] + input.shape[K:].
    An index that repeats has no defined winner: refused.
    """
    flat = indices.reshape(-1, indices.shape[-1]).long()
    if indices.shape[-1] > input.dim():
        raise ValueError(
            f"npu_scatter_nd_update: indices address {indices.shape[-1]} dims of an input of {input.dim()}"
        )
    sizes = torch.tensor(input.shape[: indices.shape[-1]], dtype=torch.long)
    if flat.numel() and bool(((flat < 0) | (flat >= sizes)).any()):
        raise ValueError(f"npu_scatter_nd_update: indices past the input's sizes {sizes.tolist()}")
    if torch.unique(flat, dim=0).shape[0] != flat.shape[0]:
        raise ReferenceUnsupported("npu_scatter_nd_update: indices with repeats (the device's winner is undefined)")
    out = input.clone()
    out[tuple(flat.t())] = updates.reshape(flat.shape[0], *input.shape[indices.shape[-1] :]).to(input.dtype)
    return out


@_reference
def npu_scatter_nd_update_(input: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """npu_scatter_nd_update in place (a KV cache's update): the op returns input updated; the
    reference returns the updated copy and leaves its input alone."""
    return npu_scatter_nd_update(input, indices, updates)


@_reference
def npu_dynamic_quant(
    input: torch.Tensor,
    *,
    smooth_scales: torch.Tensor | None = None,
    group_index: torch.Tensor | None = None,
    dst_type: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y int8, scale float32) per token (row of the last dim): x' = x * smooth_scales,
    scale = max |x'| / 127, y = round(x' / scale).

    The one_rounding standard judges y by |error| <= 1 unit (a value near a half rounds either
    way) and scale as a float.
    """
    _refuse("npu_dynamic_quant", group_index=group_index)
    if dst_type not in (None, torch.int8):
        raise ReferenceUnsupported(f"npu_dynamic_quant: dst_type={dst_type}")
    if smooth_scales is not None and list(smooth_scales.shape) != list(input.shape[-1:]):
        raise ValueError(
            f"npu_dynamic_quant: smooth_scales of shape {list(smooth_scales.shape)}, not the input's last dim "
            f"{list(input.shape[-1:])}"
        )
    x = input if smooth_scales is None else input * smooth_scales.to(input.dtype)
    scale = x.abs().amax(dim=-1) / 127
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    y = torch.round(x / safe.unsqueeze(-1)).clamp(-128, 127)
    return y.to(torch.int8), scale.to(torch.float32)


# --------------------------------------------------------------------------
# Grouped matmul
# --------------------------------------------------------------------------


def _group_sizes(group_list: Any, group_list_type: int, groups: int, rows: int | None = None) -> list[int]:
    """The rows of each group from group_list: cumulative ends (List[int], or type 0) or sizes (type 1)."""
    values = _ints(group_list)
    if len(values) != groups:
        raise ValueError(f"npu_grouped_matmul: group_list has {len(values)} values for {groups} weights")
    if isinstance(group_list, torch.Tensor) and group_list_type == 1:
        sizes = values
    elif group_list_type not in (0, None) and isinstance(group_list, torch.Tensor):
        raise ReferenceUnsupported(f"npu_grouped_matmul: group_list_type={group_list_type}")
    else:
        sizes = [end - start for start, end in zip([0, *values[:-1]], values)]
    if any(size < 0 for size in sizes):
        kind = "sizes" if isinstance(group_list, torch.Tensor) and group_list_type == 1 else "cumulative ends"
        raise ValueError(f"npu_grouped_matmul: group_list={values[:8]}: {kind} of which a group's rows are negative")
    if rows is not None and sum(sizes) > rows:
        raise ValueError(
            f"npu_grouped_matmul: group_list={values[:8]}: {sum(sizes)} rows in its groups, more than the x's {rows}"
        )
    return sizes


def _weights(weight: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """One [k, n] matrix per group: a list of 2-D tensors, or one 3-D [g, k, n] tensor."""
    if len(weight) == 1 and weight[0].dim() == 3:
        return list(weight[0].unbind(0))
    return list(weight)


def _biases(bias: Sequence[torch.Tensor] | None, groups: int) -> list[torch.Tensor | None]:
    if bias is None:
        return [None] * groups
    if len(bias) == 1 and bias[0].dim() == 2:
        return list(bias[0].unbind(0))
    return list(bias)


@_reference
def npu_grouped_matmul(
    x: Sequence[torch.Tensor],
    weight: Sequence[torch.Tensor],
    *,
    bias: Sequence[torch.Tensor] | None = None,
    scale: Sequence[torch.Tensor] | None = None,
    offset: Sequence[torch.Tensor] | None = None,
    antiquant_scale: Sequence[torch.Tensor] | None = None,
    antiquant_offset: Sequence[torch.Tensor] | None = None,
    per_token_scale: Sequence[torch.Tensor] | None = None,
    group_list: Any = None,
    activation_input: Sequence[torch.Tensor] | None = None,
    activation_quant_scale: Sequence[torch.Tensor] | None = None,
    activation_quant_offset: Sequence[torch.Tensor] | None = None,
    split_item: int = 0,
    group_type: int | None = None,
    group_list_type: int = 0,
    act_type: int = 0,
    output_dtype: torch.dtype | None = None,
    tuning_config: Sequence[int] | None = None,
) -> list[torch.Tensor]:
    """y_i = x_i @ weight_i + bias_i for each group i (the non-quantised formula).

    x is one tensor per group, or one tensor whose rows group_list splits (group_type 0; its values
    the groups' cumulative ends, or their sizes with group_list_type 1). split_item 0/1 return one
    tensor per group, 2/3 the groups' rows in one tensor. Rows of a single x beyond group_list's
    total belong to no group: the kernel leaves those output rows unwritten, the reference zero,
    and PADDED_ROWS keeps them out of the comparison. tuning_config only steers the tiling.
    """
    _refuse(
        "npu_grouped_matmul", scale=scale, offset=offset, antiquant_scale=antiquant_scale,
        antiquant_offset=antiquant_offset, per_token_scale=per_token_scale, activation_input=activation_input,
        activation_quant_scale=activation_quant_scale, activation_quant_offset=activation_quant_offset,
    )  # fmt: skip
    if act_type:
        raise ReferenceUnsupported(f"npu_grouped_matmul: act_type={act_type}")
    if group_type not in (None, -1, 0):
        raise ReferenceUnsupported(f"npu_grouped_matmul: group_type={group_type}")
    if split_item not in (0, 1, 2, 3):
        raise ValueError(f"npu_grouped_matmul: split_item={split_item} (0-3)")
    if output_dtype is not None and not output_dtype.is_floating_point:
        raise ReferenceUnsupported(f"npu_grouped_matmul: output_dtype={output_dtype}")
    weights = _weights(weight)
    biases = _biases(bias, len(weights))
    if len(x) == 1 and len(weights) > 1:  # one x, its rows split by group_list
        if group_list is None:
            raise ValueError("npu_grouped_matmul: one x for several weights needs group_list")
        sizes = _group_sizes(group_list, group_list_type, len(weights), x[0].shape[0])
        pieces = list(x[0][: sum(sizes)].split(sizes))
    else:
        if len(x) != len(weights):
            raise ValueError(f"npu_grouped_matmul: {len(x)} x for {len(weights)} weights")
        pieces = list(x)
    ys = []
    for piece, w, b in zip(pieces, weights, biases):
        y = torch.matmul(piece, w.to(piece.dtype))
        ys.append(y if b is None else y + b.to(y.dtype))
    if split_item in (0, 1):
        return ys
    out = torch.cat(ys)
    if len(x) == 1 and out.shape[0] < x[0].shape[0]:  # the padded rows: zero, not compared
        out = torch.cat((out, out.new_zeros(x[0].shape[0] - out.shape[0], *out.shape[1:])))
    return [out]


def _grouped_matmul_rows(args: Sequence[Any], kwargs: dict[str, Any]) -> dict[int, int]:
    """{output index: rows a correct kernel writes} of a single-x, single-y call."""
    x = kwargs.get("x", args[0] if args else None)
    weight = kwargs.get("weight", args[1] if len(args) > 1 else None)
    group_list = kwargs.get("group_list")
    if x is None or weight is None or group_list is None or len(x) != 1 or kwargs.get("split_item", 0) not in (2, 3):
        return {}
    try:
        sizes = _group_sizes(group_list, kwargs.get("group_list_type", 0), len(_weights(weight)), x[0].shape[0])
    except (ReferenceUnsupported, ValueError):
        return {}
    return {0: sum(sizes)} if sum(sizes) < x[0].shape[0] else {}


PADDED_ROWS["npu_grouped_matmul"] = _grouped_matmul_rows


def grouped_matmul_unwritten(
    outputs: Sequence[Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> dict[int, Unwritten]:
    """The rows beyond group_list's total, as the registry's unwritten mask (npu_builtins.py)."""
    found = {}
    for index, rows in _grouped_matmul_rows(args, kwargs).items():
        output = outputs[index] if index < len(outputs) else None
        if not isinstance(output, torch.Tensor) or output.dim() == 0:
            continue
        total = output.shape[0]
        mask = (torch.arange(total) >= rows).reshape(total, *([1] * (output.dim() - 1)))
        found[index] = Unwritten(mask, f"rows {rows}..{total - 1} of {total} lie beyond group_list (padding)")
    return found


# --------------------------------------------------------------------------
# MoE routing
# --------------------------------------------------------------------------


@_reference
def npu_moe_init_routing(
    x: torch.Tensor, row_idx: torch.Tensor, expert_idx: torch.Tensor, active_num: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(expanded_x, expanded_row_idx, expanded_expert_idx), the page's equivalent computation:

    sorted = stable argsort of expert_idx flattened; expanded_expert_idx = the sorted experts;
    src = row_idx flattened in that order; expanded_row_idx[src[i]] = i;
    expanded_x = x[src[:min(active_num, rows) * k] % rows].
    Equal experts keep their flattened (row-major) order: a kernel that orders them otherwise
    permutes expanded_x's rows within an expert and fails the int32 outputs' equality.
    """
    rows, k = expert_idx.shape
    check_count("npu_moe_init_routing", "active_num", active_num, 0)
    order = torch.sort(expert_idx.reshape(-1), stable=True)
    source = row_idx.reshape(-1).long()[order.indices]
    expanded_row_idx = torch.empty_like(source)
    expanded_row_idx[source] = torch.arange(source.numel(), device=source.device)
    active = min(int(active_num), rows) * k
    expanded_x = x[source[:active] % rows]
    return expanded_x, expanded_row_idx.to(torch.int32), order.values.to(torch.int32)


@_reference
def npu_moe_finalize_routing(
    expanded_permuted_rows: torch.Tensor,
    skip1: torch.Tensor | None,
    skip2: torch.Tensor | None,
    bias: torch.Tensor | None,
    scales: torch.Tensor | None,
    expanded_src_to_dst_row: torch.Tensor,
    expert_for_source_row: torch.Tensor | None,
    drop_pad_mode: int = 0,
    k: int = 1,
) -> torch.Tensor:
    """out[i] = skip1[i] + skip2[i] + sum_k scales[i, k] (rows[dst(i, k)] + bias[expert[i, k]]).

    dst(i, k) = expanded_src_to_dst_row[k * rows + i] (drop_pad_mode 0, 1: by column) or
    [i * K + k] (2, 3: by row); in drop modes (1, 3) the rows are [E, C, H] flattened and a
    dst of -1 (a dropped token) reads zeros. K is scales' second dim, else k.
    """
    if drop_pad_mode not in (0, 1, 2, 3):
        raise ValueError(f"npu_moe_finalize_routing: drop_pad_mode={drop_pad_mode} (0-3)")
    if bias is not None and expert_for_source_row is None:
        raise ValueError("npu_moe_finalize_routing: bias needs expert_for_source_row")
    top_k = scales.shape[1] if scales is not None else int(k)
    hidden = expanded_permuted_rows.shape[-1]
    table = expanded_permuted_rows.reshape(-1, hidden)
    rows = expanded_src_to_dst_row.numel() // top_k
    dst = expanded_src_to_dst_row.reshape(-1).long()
    dst = dst.reshape(top_k, rows).t() if drop_pad_mode in (0, 1) else dst.reshape(rows, top_k)
    dropped = dst < 0
    gathered = table[dst.clamp(min=0)].masked_fill(dropped.unsqueeze(-1), 0)  # [rows, K, H]
    if bias is not None and expert_for_source_row is not None:
        gathered = gathered + bias[expert_for_source_row.long()]
    weights = scales.unsqueeze(-1) if scales is not None else gathered.new_ones(rows, top_k, 1)
    out = (weights.to(gathered.dtype) * gathered).sum(dim=1)
    for skip in (skip1, skip2):
        if skip is not None:
            out = out + skip
    return out


@_reference
def npu_moe_compute_expert_tokens(sorted_expert_for_source_row: torch.Tensor, num_expert: int) -> torch.Tensor:
    """For each expert e < num_expert, the end of its rows in the sorted experts (binary search):
    how many entries are <= e. The dtype of the input (int32)."""
    check_count("npu_moe_compute_expert_tokens", "num_expert", num_expert, 0, 2**31 - 1)
    sorted_experts = sorted_expert_for_source_row.reshape(-1)
    experts = torch.arange(int(num_expert), dtype=sorted_experts.dtype, device=sorted_experts.device)
    ends = torch.searchsorted(sorted_experts.contiguous(), experts, right=True)
    return ends.to(sorted_expert_for_source_row.dtype)


# --------------------------------------------------------------------------
# Inference attentions: softmax(scale Q K^T, masked) V, by batch, in BNSD
# --------------------------------------------------------------------------

_INFERENCE_LAYOUTS = ("BSH", "BSND", "BNSD", "BNSD_BSND")


def _per_batch(lengths: Sequence[int] | None, batch: int, full: int, what: str) -> list[int]:
    """A length per batch: one value for all, or the first `batch` values; None: the tensor's."""
    if lengths is None:
        return [full] * batch
    values = _ints(lengths)
    if len(values) == 1:
        values = values * batch
    if len(values) < batch:
        raise ValueError(f"{what} has {len(values)} values for {batch} batches")
    if any(v > full or v < 0 for v in values[:batch]):
        raise ValueError(f"{what} {values[:batch]} outside 0..{full}")
    return values[:batch]


T = TypeVar("T")


class PerBatch(Sequence[T]):
    """One tensor a batch (a view of the call's tensor, a paged cache's gather), made when asked and
    not kept: a call of a million batches holds no million tensors (each, with its bookkeeping, a
    kilobyte of memory whatever its size)."""

    def __init__(
        self,
        batches: int,
        make: Callable[[int], T],
        many: Callable[[torch.Tensor], Any] | None = None,
        lengths: list[int] | None = None,
    ):
        self.batches = batches
        self.make = make
        self.many = many  # the tensors of many batches (an index tensor) at once, stacked, where one op gives them
        self.lengths = lengths  # each batch's keys (S2_b), where these are keys or values

    def stack(self, members: list[int]) -> Any:
        """The tensors of `members` (batches of one shape) stacked along a new first dimension."""
        if self.many is not None:
            return self.many(torch.tensor(members))
        return torch.stack([self.make(b) for b in members])  # type: ignore[misc]

    def __len__(self) -> int:
        return self.batches

    @overload
    def __getitem__(self, b: int) -> T: ...
    @overload
    def __getitem__(self, b: slice) -> list[T]: ...
    def __getitem__(self, b: int | slice) -> T | list[T]:
        if isinstance(b, slice):
            return [self.make(i) for i in range(*b.indices(self.batches))]
        if not -self.batches <= b < self.batches:
            raise IndexError(b)
        return self.make(b % self.batches)


def _padded_batches(x: torch.Tensor, lengths: list[int]) -> PerBatch[torch.Tensor]:
    """Each batch's [Nkv, S2_b, D] of a [B, Nkv, S2, D] key or value: its first lengths[b] positions."""
    return PerBatch(
        len(lengths), lambda b: x[b, :, : lengths[b]], lambda index: x[index, :, : lengths[int(index[0])]], lengths
    )


def _packed_batches(x: torch.Tensor, segments: list[tuple[int, int]]) -> PerBatch[torch.Tensor]:
    """Each batch's [Nkv, S2_b, D] of a packed [T, Nkv, D] key or value: its segment's rows."""
    starts = torch.tensor([start for start, _ in segments], dtype=torch.long)

    def many(index: torch.Tensor) -> torch.Tensor:
        start, end = segments[int(index[0])]
        rows = (starts[index].unsqueeze(1) + torch.arange(end - start)).reshape(-1)
        return x[rows].reshape(len(index), end - start, *x.shape[1:]).transpose(1, 2)

    lengths = [end - start for start, end in segments]
    return PerBatch(len(segments), lambda b: x[segments[b][0] : segments[b][1]].transpose(0, 1), many, lengths)


def _stacked(batches: Sequence[Any], members: list[int]) -> Any:
    return batches.stack(members) if isinstance(batches, PerBatch) else torch.stack([batches[b] for b in members])


def _mask_by_batch(atten_mask: torch.Tensor | None, batch: int) -> Sequence[torch.Tensor | None]:
    """atten_mask ([S1, S2], [B|1, S1, S2], [B|1, 1|N, S1, S2]) as one [1|N, S1, S2] mask per batch."""
    if atten_mask is None:
        return [None] * batch
    mask = atten_mask.bool()
    while mask.dim() < 4:
        mask = mask.unsqueeze(0) if mask.dim() == 2 else mask.unsqueeze(1)
    last = mask.shape[0] - 1
    return PerBatch(batch, lambda b: mask[min(b, last)], lambda index: mask[index.clamp(max=last)])


def _pse_by_batch(
    op: str, pse_shift: torch.Tensor | None, rows: int, keys: Sequence[torch.Tensor]
) -> Sequence[torch.Tensor] | None:
    """pse_shift ([B|1, N, Q_S, KV_S], KV_S possibly padded past the keys: the padding is not read)
    as each batch's [N, Q_S, S2_b]: its first S2_b columns, as the keys are its first S2_b."""
    if pse_shift is None:
        return None
    lengths = [k.shape[1] for k in keys]
    if pse_shift.dim() != 4 or pse_shift.shape[2] < rows or any(pse_shift.shape[3] < n for n in lengths):
        shown = f"{lengths[:8]}" + (f" and {len(lengths) - 8} more" if len(lengths) > 8 else "")
        raise ValueError(f"{op}: pse_shift of shape {list(pse_shift.shape)} for {rows} query rows and keys of "
                         f"{shown}")  # fmt: skip
    last = pse_shift.shape[0] - 1

    def many(index: torch.Tensor) -> torch.Tensor:
        return pse_shift[index.clamp(max=last), :, :rows, : lengths[int(index[0])]]

    return PerBatch(len(lengths), lambda b: pse_shift[min(b, last), :, :rows, : lengths[b]], many)


def _antiquant(
    op: str,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: torch.Tensor | None,
    offset: torch.Tensor | None,
    mode: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 key and value dequantised into the query's dtype: (kv + antiquant_offset) * antiquant_scale,
    [0] of each for the key and [1] for the value. Per tensor (2,) or per channel ((2, H) BSH,
    (2, N, D) BSND, (2, N, 1, D) BNSD: each broadcasts over the layout's key, the paged caches'
    too); antiquant_mode 1 (per token, (2, B, S)) is refused by name."""
    if scale is None:
        if offset is not None:
            raise ValueError(f"{op}: antiquant_offset without antiquant_scale")
        return key, value
    if mode != 0:
        raise ReferenceUnsupported(f"{op}: antiquant_mode={mode} (per token)")
    if key.dtype != torch.int8 or value.dtype != torch.int8 or scale.shape[0] != 2:
        raise ReferenceUnsupported(f"{op}: antiquant_scale of shape {list(scale.shape)} with key and value of "
                                   f"{key.dtype}, {value.dtype} (int8, and [2, ...] scales modelled)")  # fmt: skip
    out = []
    for i, kv in enumerate((key, value)):
        x = kv.to(dtype)
        if offset is not None:
            x = x + offset[i].to(dtype)
        out.append(x * scale[i].to(dtype))
    return out[0], out[1]


@dataclass(frozen=True)
class InferenceAttention:
    """An inference attention call in BNSD, batch by batch: the query [B, N, S1, D] (TND: the packed
    query [T, N, D], each batch's rows one after another), each batch's keys and values [Nkv, S2_b, D]
    (its actual length, read from a paged cache where there is one), its atten_mask and the sparse
    mode, pre_tokens and next_tokens that apply; the output's layout."""

    op: str
    query: torch.Tensor
    keys: Sequence[torch.Tensor]  # PerBatch: one tensor a batch, made when asked
    values: Sequence[torch.Tensor]
    masks: Sequence[torch.Tensor | None]
    sparse: tuple[int, int, int]
    scale: float
    layout: str
    # TND: each batch's query rows, and the packed query's T
    packed: tuple[list[int], int] | None = None
    # pse_shift: each batch's [N, S1_b, S2_b], added to the scaled scores (scale Q K^T + pse_shift)
    pses: Sequence[torch.Tensor] | None = None

    def rows(self, b: int) -> int:
        return self.query.shape[2] if self.packed is None else self.packed[0][b]

    def masked(self, b: int) -> torch.Tensor | None:
        """Batch b's positions masked out (True), [1|N, S1_b, S2_b], or None."""
        mode, pre_tokens, next_tokens = self.sparse
        sparse = _SparseMask(mode, self.masks[b], pre_tokens, next_tokens, None)
        return sparse.build(self.rows(b), self.keys[b].shape[1])

    def run(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(out in the call's layout, row max [B, N, S1], row sum of exp [B, N, S1]; TND: [T, N]); a
        row that sees no key gives zeros (the docs fill an empty key/value with zeros).

        The batches of one query length and one key length are computed together, their results
        written in place into outputs made once: memory in proportion to the call's elements,
        however many batches it has (a batch each, its tensors and their bookkeeping, took kilobytes
        a batch: gigabytes for a hostile call of a million one-row batches)."""
        heads = self.query.shape[1]
        dim_v = self.values[0].shape[-1] if self.values else self.query.shape[-1]
        if self.packed is None:
            batch, s1 = self.query.shape[0], self.query.shape[2]
            out = self.query.new_zeros(batch, heads, s1, dim_v)
            row_max = self.query.new_full((batch, heads, s1), float("-inf"))
        else:
            total = self.packed[1]
            out = self.query.new_zeros(total, heads, dim_v)
            row_max = self.query.new_full((total, heads), float("-inf"))
        row_sum = torch.zeros_like(row_max)
        starts = torch.tensor(list(itertools.accumulate(self.packed[0], initial=0)) if self.packed else [0])
        groups: dict[tuple[int, int], list[int]] = {}
        for b, length in enumerate(self._key_lengths()):
            groups.setdefault((self.rows(b), length), []).append(b)
        for (rows, length), members in groups.items():
            if rows == 0 or length == 0:
                continue  # no query row, or a row that sees no key: zeros, -inf, 0
            if self.packed is None:
                where: Any = (torch.tensor(members), slice(None), slice(None, rows))
                q = self.query[where]
            else:
                where = (starts[torch.tensor(members)].unsqueeze(1) + torch.arange(rows)).reshape(-1)
                q = self.query[where].reshape(len(members), rows, heads, -1).transpose(1, 2)
            k, v = (_repeat_kv(_stacked(t, members), heads) for t in (self.keys, self.values))
            # _attention_bnsd's pse is npu_fusion_attention's, inside the scale: pse_shift / scale
            pse = None if self.pses is None else (_stacked(self.pses, members) / self.scale).to(q.dtype)
            masked = self._masked_group(members, rows, length)
            group_out, group_max, group_sum = _attention_bnsd(q, k, v, pse, masked, self.scale)
            if self.packed is None:
                out[where], row_max[where], row_sum[where] = group_out, group_max, group_sum
            else:
                out[where] = group_out.transpose(1, 2).reshape(-1, heads, dim_v)
                row_max[where] = group_max.transpose(1, 2).reshape(-1, heads)
                row_sum[where] = group_sum.transpose(1, 2).reshape(-1, heads)
        if self.packed is None:
            return _from_bnsd(out, self.layout), row_max, row_sum
        return out, row_max, row_sum

    def _masked_group(self, members: list[int], rows: int, length: int) -> torch.Tensor | None:
        """The positions masked out (True) of batches of one query and key length, [G|1, 1|N, S1_b,
        S2_b] (each batch's atten_mask, stacked, through the sparse mode), or None."""
        if self.masks[members[0]] is None:
            return None
        mode, pre_tokens, next_tokens = self.sparse
        sparse = _SparseMask(mode, _stacked(self.masks, members), pre_tokens, next_tokens, None)
        return sparse.build(rows, length)

    def _key_lengths(self) -> list[int]:
        """Each batch's number of keys (S2_b)."""
        lengths = getattr(self.keys, "lengths", None)
        return list(lengths) if lengths is not None else [k.shape[1] for k in self.keys]

    def padded_query(self) -> torch.Tensor:
        """The query [B, N, S1, D]: TND's batches each zero-padded to the longest."""
        if self.packed is None:
            return self.query
        rows = self.packed[0]
        longest = max(rows, default=0)
        starts = itertools.accumulate(rows, initial=0)
        return torch.stack([F.pad(self.query[start : start + n].transpose(0, 1), (0, 0, 0, longest - n))
                            for start, n in zip(starts, rows)])  # fmt: skip

    def in_bnsd(self) -> AttentionInBnsd:
        """The same attention as one padded BNSD call (npu_fusion_attention's AttentionInBnsd, which
        the dtype standard models as scaled_dot_product_attention): keys and values zero-padded to the
        longest batch and repeated over the query heads, the padding masked. TND: each batch's query
        rows padded to the longest too (those rows attend every key: their outputs are dropped)."""
        query = self.padded_query()
        heads, s1 = query.shape[1:3]
        longest = max(k.shape[1] for k in self.keys)
        kv_heads = self.keys[0].shape[0]

        def padded(t: torch.Tensor) -> torch.Tensor:
            return F.pad(t, (0, 0, 0, longest - t.shape[1]))

        key = _repeat_kv(torch.stack([padded(k) for k in self.keys]), heads)
        value = _repeat_kv(torch.stack([padded(v) for v in self.values]), heads)
        masks = []
        for b, k in enumerate(self.keys):
            beyond = torch.arange(longest, device=k.device) >= k.shape[1]
            own = self.masked(b)
            rows = self.rows(b)
            if own is None:
                own = beyond.expand(heads, rows, longest)
            else:
                own = F.pad(own, (0, longest - k.shape[1]), value=True)
            own = F.pad(own.expand(heads, rows, longest), (0, 0, 0, s1 - rows), value=False)
            masks.append(own)
        masked = torch.stack(masks)
        pse = None
        if self.pses is not None:  # AttentionInBnsd's pse is inside the scale, as npu_fusion_attention's
            pse = torch.stack([F.pad(p / self.scale, (0, longest - p.shape[-1])) for p in self.pses])
        return AttentionInBnsd(
            query, key, value, pse, masked if bool(masked.any()) else None, self.scale, self.layout, kv_heads,
            packed=None if self.packed is None else (tuple(self.packed[0]), self.packed[1]),
        )  # fmt: skip


def _heads(
    op: str,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: str,
    num_heads: Any,
    num_key_value_heads: Any,
    paged: bool = False,
) -> int:
    """The key/value heads of an inference attention, its num_heads and num_key_value_heads checked
    against each other and against the tensors' layout: ValueError naming the argument, not the
    kernel's words (a division by zero, a reshape of the wrong size)."""
    check_heads(op, "num_heads", num_heads, query, "BNSD" if layout == "BNSD_BSND" else layout)
    kv_heads = check_count(op, "num_key_value_heads", num_key_value_heads, 0) or num_heads
    if num_heads % kv_heads:
        raise ValueError(f"{op}: num_key_value_heads={kv_heads}: num_heads={num_heads} is no multiple of it")
    if not paged:  # a paged cache's layout is its own (blocks, block_size, H)
        for name, x in (("key", key), ("value", value)):
            check_heads(op, "num_key_value_heads" if num_key_value_heads else "num_heads", kv_heads, x, layout, name)
    return kv_heads


def _check_sparse_mode(op: str, sparse_mode: int, atten_mask: torch.Tensor | None) -> None:
    if sparse_mode not in (0, 1, 2, 3, 4):
        raise ReferenceUnsupported(f"{op}: sparse_mode={sparse_mode}")
    if sparse_mode in (2, 3, 4) and atten_mask is None:
        raise ValueError(f"{op}: sparse_mode={sparse_mode} needs the compressed atten_mask")


def _layout_of(op: str, input_layout: str) -> tuple[str, str]:
    """(the inputs' layout, the output's): BNSD_BSND takes BNSD and gives BSND."""
    if input_layout not in _INFERENCE_LAYOUTS:
        raise ReferenceUnsupported(f"{op}: input_layout={input_layout!r}")
    return ("BNSD", "BSND") if input_layout == "BNSD_BSND" else (input_layout, input_layout)


def _prompt_flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    pse_shift: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    actual_seq_lengths: Sequence[int] | None = None,
    deq_scale1: torch.Tensor | None = None,
    quant_scale1: torch.Tensor | None = None,
    deq_scale2: torch.Tensor | None = None,
    quant_scale2: torch.Tensor | None = None,
    quant_offset2: torch.Tensor | None = None,
    num_heads: int = 1,
    scale_value: float = 1.0,
    pre_tokens: int = 2147473647,
    next_tokens: int = 0,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    actual_seq_lengths_kv: Sequence[int] | None = None,
    sparse_mode: int = 0,
) -> InferenceAttention:
    """Full (prompt) attention: softmax(scale_value Q K^T, masked) V per batch and head.

    Layouts BSH, BSND, BNSD and BNSD_BSND (BNSD in, BSND out); GQA by num_key_value_heads; the
    sparse modes 0-4 as npu_fusion_attention's (mode 0 without atten_mask ignores pre_tokens and
    next_tokens, as the docs say); keys beyond actual_seq_lengths_kv[b] take no part, and the
    causal modes align on that length. A query row that sees no key gives zeros. padding_mask is
    reserved (unused by the op). pse_shift ([B|1, N, S1, S2]) is added to the scaled scores.
    Refused: the int8 quantisation arguments, and an actual_seq_lengths shorter than the query's S
    (rows the docs leave undefined).
    """
    op = "npu_prompt_flash_attention"
    _refuse(
        op, deq_scale1=deq_scale1, quant_scale1=quant_scale1, deq_scale2=deq_scale2, quant_scale2=quant_scale2,
        quant_offset2=quant_offset2,
    )  # fmt: skip
    _check_sparse_mode(op, sparse_mode, atten_mask)
    layout, out_layout = _layout_of(op, input_layout)
    kv_heads = _heads(op, query, key, value, layout, num_heads, num_key_value_heads)
    q = _to_bnsd(query, layout, num_heads)
    k, v = _to_bnsd(key, layout, kv_heads), _to_bnsd(value, layout, kv_heads)
    batch, s1, s2 = q.shape[0], q.shape[2], k.shape[2]
    if any(n < s1 for n in _per_batch(actual_seq_lengths, batch, s1, f"{op}: actual_seq_lengths")):
        raise ReferenceUnsupported(f"{op}: actual_seq_lengths shorter than the query's S (rows left undefined)")
    kv_lens = _per_batch(actual_seq_lengths_kv, batch, s2, f"{op}: actual_seq_lengths_kv")
    keys, values = _padded_batches(k, kv_lens), _padded_batches(v, kv_lens)
    masks = _mask_by_batch(atten_mask, batch)
    return InferenceAttention(
        op, q, keys, values, masks, (sparse_mode, pre_tokens, next_tokens), scale_value, out_layout,
        pses=_pse_by_batch(op, pse_shift, s1, keys),
    )  # fmt: skip


def _paged(cache: torch.Tensor, table: torch.Tensor, length: int, kv_heads: int) -> torch.Tensor:
    """One batch's [Nkv, length, D] from a PagedAttention cache, (blocks, block_size, H) or
    (blocks, Nkv, block_size, D), through its row of block_table."""
    block_size = cache.shape[-2] if cache.dim() == 4 else cache.shape[1]
    blocks = cache[table[: -(-length // block_size)].long()]
    if cache.dim() == 4:  # [nb, Nkv, bs, D] -> [Nkv, nb * bs, D]
        return blocks.transpose(0, 1).reshape(kv_heads, -1, cache.shape[-1])[:, :length]
    rows = blocks.reshape(-1, cache.shape[-1])[:length]  # [length, H]
    return rows.reshape(length, kv_heads, -1).transpose(0, 1)


def _incre_flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    padding_mask: torch.Tensor | None = None,
    pse_shift: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    actual_seq_lengths: Sequence[int] | None = None,
    dequant_scale1: torch.Tensor | None = None,
    quant_scale1: torch.Tensor | None = None,
    dequant_scale2: torch.Tensor | None = None,
    quant_scale2: torch.Tensor | None = None,
    quant_offset2: torch.Tensor | None = None,
    antiquant_scale: torch.Tensor | None = None,
    antiquant_offset: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    kv_padding_size: torch.Tensor | None = None,
    num_heads: int = 1,
    scale_value: float = 1.0,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    block_size: int = 0,
    inner_precise: int = 1,
) -> InferenceAttention:
    """Incremental (decode) attention: softmax(scale_value Q K^T + atten_mask) V, atten_mask True
    (1) where a key is left out; keys beyond actual_seq_lengths[b] take no part.

    atten_mask is [B, S2], [B, 1, S2] or [B, 1, 1, S2] (one query row per batch).
    Layouts BSH, BSND, BNSD; GQA by num_key_value_heads; PagedAttention: with block_table, key and
    value are caches of (blocks, block_size, H) or (blocks, Nkv, block_size, D) and batch b reads
    its first ceil(actual_seq_lengths[b] / block_size) blocks. padding_mask is reserved (unused),
    inner_precise chooses the kernel's mode. pse_shift ([B|1, N, 1, S2]) is added to the scaled
    scores; int8 key and value with antiquant_scale (and antiquant_offset) are (kv + offset) * scale,
    per tensor or per channel. Refused: kv_padding_size (left padding) and the int8 quantisation
    arguments.
    """
    op = "npu_incre_flash_attention"
    if inner_precise not in (0, 1):
        raise ReferenceUnsupported(f"{op}: inner_precise={inner_precise}")
    _refuse(
        op, kv_padding_size=kv_padding_size, dequant_scale1=dequant_scale1, quant_scale1=quant_scale1,
        dequant_scale2=dequant_scale2, quant_scale2=quant_scale2, quant_offset2=quant_offset2,
    )  # fmt: skip
    key, value = _antiquant(op, key, value, antiquant_scale, antiquant_offset, 0, query.dtype)
    if input_layout not in ("BSH", "BSND", "BNSD"):
        raise ReferenceUnsupported(f"{op}: input_layout={input_layout!r}")
    kv_heads = _heads(
        op, query, key, value, input_layout, num_heads, num_key_value_heads, paged=block_table is not None
    )
    q = _to_bnsd(query, input_layout, num_heads)
    batch = q.shape[0]
    if block_table is not None:
        if actual_seq_lengths is None:
            raise ValueError(f"{op}: block_table needs actual_seq_lengths")
        lengths = _ints(actual_seq_lengths)
        lengths = lengths * batch if len(lengths) == 1 else lengths[:batch]
        keys = PerBatch(batch, lambda b: _paged(key, block_table[b], lengths[b], kv_heads), lengths=lengths)
        values = PerBatch(batch, lambda b: _paged(value, block_table[b], lengths[b], kv_heads), lengths=lengths)
    else:
        k, v = _to_bnsd(key, input_layout, kv_heads), _to_bnsd(value, input_layout, kv_heads)
        lengths = _per_batch(actual_seq_lengths, batch, k.shape[2], f"{op}: actual_seq_lengths")
        keys, values = _padded_batches(k, lengths), _padded_batches(v, lengths)
    if atten_mask is not None and atten_mask.dim() in (2, 3):  # [B, S2] or [B, 1, S2]: one query row per batch
        atten_mask = atten_mask.reshape(atten_mask.shape[0], 1, 1, atten_mask.shape[-1])
    return InferenceAttention(
        op, q, keys, values, _mask_by_batch(atten_mask, batch), (1, 0, 0), scale_value, input_layout,
        pses=_pse_by_batch(op, pse_shift, 1, keys),
    )  # fmt: skip


def _fused_infer_attention_score(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    pse_shift: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    actual_seq_lengths: Sequence[int] | None = None,
    actual_seq_lengths_kv: Sequence[int] | None = None,
    dequant_scale1: torch.Tensor | None = None,
    quant_scale1: torch.Tensor | None = None,
    dequant_scale2: torch.Tensor | None = None,
    quant_scale2: torch.Tensor | None = None,
    quant_offset2: torch.Tensor | None = None,
    antiquant_scale: torch.Tensor | None = None,
    antiquant_offset: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    query_padding_size: torch.Tensor | None = None,
    kv_padding_size: torch.Tensor | None = None,
    key_antiquant_scale: torch.Tensor | None = None,
    key_antiquant_offset: torch.Tensor | None = None,
    value_antiquant_scale: torch.Tensor | None = None,
    value_antiquant_offset: torch.Tensor | None = None,
    key_shared_prefix: torch.Tensor | None = None,
    value_shared_prefix: torch.Tensor | None = None,
    actual_shared_prefix_len: Sequence[int] | None = None,
    query_rope: torch.Tensor | None = None,
    key_rope: torch.Tensor | None = None,
    key_rope_antiquant_scale: torch.Tensor | None = None,
    num_heads: int = 1,
    scale: float = 1.0,
    pre_tokens: int = 2147483647,
    next_tokens: int = 2147483647,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    inner_precise: int = 0,
    block_size: int = 0,
    antiquant_mode: int = 0,
    softmax_lse_flag: bool = False,
    key_antiquant_mode: int = 0,
    value_antiquant_mode: int = 0,
) -> InferenceAttention:
    """(attention_out, softmax_lse): the prompt branch (query S > 1: npu_prompt_flash_attention's
    masks, sparse_mode 0-4 with pre_tokens and next_tokens) or the incremental one (S = 1: mask
    [B, S2], sparse_mode and the tokens unused), as the op page says.

    Layouts BSH, BSND, BNSD, BNSD_BSND; GQA; actual_seq_lengths_kv; PagedAttention through
    block_table (as npu_incre_flash_attention's); TND, the batches packed along T and their ends
    cumulative in actual_seq_lengths and actual_seq_lengths_kv, the sparse mode applied to each
    batch (its lse [T, N, 1]). softmax_lse is float32 [B, N, S1, 1], the log of
    each row's sum of exp of the scaled scores, with softmax_lse_flag; else the documented [1] zero.
    key_rope_antiquant_scale is reserved, the antiquant modes only read with the antiquant tensors,
    inner_precise picks the kernel's mode (rows that see no key are zeros here either way).
    pse_shift ([B|1, N, S1, S2], S2 possibly padded) is added to the scaled scores; int8 key and
    value with antiquant_scale (and antiquant_offset), per tensor or per channel, are
    (kv + offset) * scale ([0] the key's, [1] the value's). Refused by name: per-token antiquant
    (antiquant_mode 1 with S = 1), the int8 (de)quantisation tensors, the separate key/value antiquant
    tensors, left padding (query/kv_padding_size), shared prefixes, MLA's query_rope/key_rope, the
    NBSD/NTD layouts, pse_shift or paged KV with TND, and an actual_seq_lengths shorter than the
    query's S.
    """
    op = "npu_fused_infer_attention_score"
    _refuse(
        op, dequant_scale1=dequant_scale1, quant_scale1=quant_scale1,
        dequant_scale2=dequant_scale2, quant_scale2=quant_scale2, quant_offset2=quant_offset2,
        query_padding_size=query_padding_size,
        kv_padding_size=kv_padding_size, key_antiquant_scale=key_antiquant_scale,
        key_antiquant_offset=key_antiquant_offset, value_antiquant_scale=value_antiquant_scale,
        value_antiquant_offset=value_antiquant_offset, key_shared_prefix=key_shared_prefix,
        value_shared_prefix=value_shared_prefix, actual_shared_prefix_len=actual_shared_prefix_len,
        query_rope=query_rope, key_rope=key_rope,
    )  # fmt: skip
    if inner_precise not in (0, 1, 2, 3):  # bit 0 precision, bit 1 the row correction: both give these rows
        raise ReferenceUnsupported(f"{op}: inner_precise={inner_precise}")
    # antiquant_mode is read only in the incremental branch (query S = 1), as the page says
    s1_axis = 2 if input_layout in ("BNSD", "BNSD_BSND") else 1
    incremental = input_layout != "TND" and query.shape[s1_axis] == 1
    mode = antiquant_mode if incremental else 0
    key, value = _antiquant(op, key, value, antiquant_scale, antiquant_offset, mode, query.dtype)
    if input_layout == "TND":
        if pse_shift is not None:
            raise ReferenceUnsupported(f"{op}: pse_shift with TND")
        if block_table is None:  # refused below, by name
            _heads(op, query, key, value, "TND", num_heads, num_key_value_heads)
        packed = _packed_call(op, query, key, value, atten_mask, actual_seq_lengths, actual_seq_lengths_kv, block_table)
        _check_sparse_mode(op, sparse_mode, atten_mask)
        return replace(packed, sparse=(sparse_mode, pre_tokens, next_tokens), scale=scale)
    layout, out_layout = _layout_of(op, input_layout)
    kv_heads = _heads(op, query, key, value, layout, num_heads, num_key_value_heads, paged=block_table is not None)
    q = _to_bnsd(query, layout, num_heads)
    batch, s1 = q.shape[0], q.shape[2]
    if any(n < s1 for n in _per_batch(actual_seq_lengths, batch, s1, f"{op}: actual_seq_lengths")):
        raise ReferenceUnsupported(f"{op}: actual_seq_lengths shorter than the query's S (rows left undefined)")
    if block_table is not None:
        if actual_seq_lengths_kv is None:
            raise ValueError(f"{op}: block_table needs actual_seq_lengths_kv")
        lengths = _ints(actual_seq_lengths_kv)
        lengths = lengths * batch if len(lengths) == 1 else lengths[:batch]
        keys = PerBatch(batch, lambda b: _paged(key, block_table[b], lengths[b], kv_heads), lengths=lengths)
        values = PerBatch(batch, lambda b: _paged(value, block_table[b], lengths[b], kv_heads), lengths=lengths)
    else:
        k, v = _to_bnsd(key, layout, kv_heads), _to_bnsd(value, layout, kv_heads)
        lengths = _per_batch(actual_seq_lengths_kv, batch, k.shape[2], f"{op}: actual_seq_lengths_kv")
        keys, values = _padded_batches(k, lengths), _padded_batches(v, lengths)
    if s1 == 1:  # the incremental branch: a mask of one query row per batch, no sparse mode
        if atten_mask is not None and atten_mask.dim() in (2, 3):
            atten_mask = atten_mask.reshape(atten_mask.shape[0], 1, 1, atten_mask.shape[-1])
        sparse = (1, 0, 0)
    else:
        _check_sparse_mode(op, sparse_mode, atten_mask)
        sparse = (sparse_mode, pre_tokens, next_tokens)
    masks = _mask_by_batch(atten_mask, batch)
    return InferenceAttention(
        op, q, keys, values, masks, sparse, scale, out_layout, pses=_pse_by_batch(op, pse_shift, s1, keys)
    )


def _packed_call(
    op: str,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    atten_mask: torch.Tensor | None,
    actual_seq_lengths: Sequence[int] | None,
    actual_seq_lengths_kv: Sequence[int] | None,
    block_table: torch.Tensor | None,
) -> InferenceAttention:
    """A TND call ([T, N, D], the batches packed along T, their ends cumulative in
    actual_seq_lengths and actual_seq_lengths_kv) as an InferenceAttention; sparse and scale to set."""
    if block_table is not None:
        raise ReferenceUnsupported(f"{op}: block_table with TND")
    if actual_seq_lengths is None or actual_seq_lengths_kv is None:
        raise ValueError(f"{op}: TND needs actual_seq_lengths and actual_seq_lengths_kv")
    q_segments = _segments(actual_seq_lengths, f"{op}: actual_seq_lengths", query.shape[0])
    kv_segments = _segments(actual_seq_lengths_kv, f"{op}: actual_seq_lengths_kv", key.shape[0])
    if len(q_segments) != len(kv_segments):
        raise ValueError(f"{op}: {len(q_segments)} query and {len(kv_segments)} key/value lengths")
    rows = [end - start for start, end in q_segments]
    keys, values = _packed_batches(key, kv_segments), _packed_batches(value, kv_segments)
    masks = _mask_by_batch(atten_mask, len(rows))
    return InferenceAttention(op, query, keys, values, masks, (0, 0, 0), 1.0, "TND", (rows, query.shape[0]))


def _out(call: InferenceAttention, arguments: dict[str, Any]) -> torch.Tensor:
    return call.run()[0]


def _out_and_lse(call: InferenceAttention, arguments: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """attention_out and softmax_lse: log of each row's sum of exp of its scaled scores, float32
    [B, N, S1, 1], with softmax_lse_flag; else the documented [1] zero."""
    out, row_max, row_sum = call.run()
    if not arguments.get("softmax_lse_flag", False):
        return out, torch.zeros(1, dtype=torch.float32, device=out.device)
    lse = torch.where(row_sum > 0, row_max + torch.log(row_sum), torch.full_like(row_max, float("-inf")))
    return out, lse.unsqueeze(-1).to(torch.float32)


# Each inference attention's call (its own signature) as an InferenceAttention.
INFERENCE_CALLS: dict[str, Callable[..., InferenceAttention]] = {
    "npu_prompt_flash_attention": _prompt_flash_attention,
    "npu_incre_flash_attention": _incre_flash_attention,
    "npu_fused_infer_attention_score": _fused_infer_attention_score,
}


def _registered(name: str, build: Callable[..., InferenceAttention], finish: Callable[..., Any]) -> Callable:
    """The reference of `name`: `build`'s signature and docstring, `finish` of what it builds (and of
    the call's arguments)."""

    @functools.wraps(build)
    def reference(*args: Any, **kwargs: Any) -> Any:
        arguments = inspect.signature(build).bind(*args, **kwargs).arguments
        return finish(build(*args, **kwargs), arguments)

    reference.__name__ = reference.__qualname__ = name
    return _reference(reference)


npu_prompt_flash_attention = _registered("npu_prompt_flash_attention", _prompt_flash_attention, _out)
npu_incre_flash_attention = _registered("npu_incre_flash_attention", _incre_flash_attention, _out)
npu_fused_infer_attention_score = _registered(
    "npu_fused_infer_attention_score", _fused_infer_attention_score, _out_and_lse
)


def inference_attention_in_bnsd(api: str, *args: Any, **kwargs: Any) -> AttentionInBnsd:
    """An inference attention's call (PFA, IFA, FIAS, by its signature) as one padded BNSD attention
    (AttentionInBnsd: as_sdpa(), output()): the seam by which a magnitude model of
    scaled_dot_product_attention (flash attention's structural budget) can judge them as it judges
    npu_fusion_attention. Raises ReferenceUnsupported as the reference does."""
    return INFERENCE_CALLS[api](*args, **kwargs).in_bnsd()


# --------------------------------------------------------------------------
# Static quantisation
# --------------------------------------------------------------------------

# torch_npu's dtype argument -> (the output's dtype, its range)
_QUANTISED = {
    torch.qint8: (torch.int8, -128, 127),
    torch.int8: (torch.int8, -128, 127),
    torch.quint8: (torch.uint8, 0, 255),
    torch.uint8: (torch.uint8, 0, 255),
    torch.qint32: (torch.int32, -(2**31), 2**31 - 1),
    torch.int32: (torch.int32, -(2**31), 2**31 - 1),
}


def _along(t: torch.Tensor, dim: int, ndim: int) -> torch.Tensor:
    """A 1-D per-channel tensor shaped to broadcast along `dim` of an ndim-D input; others as given."""
    if t.dim() != 1 or t.numel() == 1:
        return t
    return t.reshape(-1, *([1] * (ndim - dim - 1)))


@_reference
def npu_quantize(
    input: torch.Tensor,
    scales: torch.Tensor,
    zero_points: torch.Tensor | None,
    dtype: torch.dtype,
    axis: int = 1,
    div_mode: bool = True,
) -> torch.Tensor:
    """round(input / scales + zero_points) (div_mode) or round(input * scales + zero_points), saturated
    to `dtype` (qint8 -> int8, quint8 -> uint8, qint32 -> int32).

    scales and zero_points are per tensor (one element) or per channel along `axis` (div_mode), or
    along the last axis, the second to last for axis -2 (not div_mode), as the op page says. The
    one_rounding standard judges an 8-bit output by |error| <= 1 unit (a value near a half rounds
    either way). quint4x2 (eight int4 packed in an int32) is refused.
    """
    if dtype not in _QUANTISED:
        raise ReferenceUnsupported(f"npu_quantize: dtype={dtype}")
    out_dtype, low, high = _QUANTISED[dtype]
    ndim = input.dim()
    dim = (axis % ndim) if div_mode else (ndim - 2 if axis == -2 else ndim - 1)
    x = input / _along(scales, dim, ndim).to(input.dtype) if div_mode else input * _along(scales, dim, ndim)
    if zero_points is not None:
        x = x + _along(zero_points, dim, ndim).to(x.dtype)
    return torch.round(x).clamp(low, high).to(out_dtype)


# npu_trans_quant_param's int64: the float32 scale's bits in bits 0-31, their low 13 zero (the scale
# kept to its high 19 bits: sign, exponent, 10 mantissa bits), an offset in bits 37-45, a flag in 46.
_SCALE_BITS = 0xFFFFFFFF
_LOW_13 = 0x1FFF


def _high_19_bits(scale: torch.Tensor) -> torch.Tensor:
    """A float32 scale as npu_trans_quant_param's round_mode 0 keeps it: its low 13 bits cut
    (toward zero), as npu_quant_matmul packs a float32 scale for an int8 or float16 output
    without pertoken_scale (op-plugin's QuantMatmul: use_trans_quant_param)."""
    bits = scale.to(torch.float32).view(torch.int32) & ~_LOW_13
    return bits.view(torch.float32).to(scale.dtype)


def _unpacked_scale(op: str, scale: torch.Tensor, offset: torch.Tensor | None) -> torch.Tensor:
    """An int64 scale (npu_trans_quant_param's) as the float32 its low 32 bits hold. Bits above them
    pack the offset npu_trans_quant_param was given: modelled through the offset argument, which
    the call passes too; without it, refused."""
    packed = scale.to(torch.int64)
    if offset is None and bool((packed & ~_SCALE_BITS).ne(0).any()):
        raise ReferenceUnsupported(f"{op}: scale of int64 packing an offset (bits 37-46) without the offset argument")
    low = (packed & _SCALE_BITS).to(torch.int64)
    return torch.where(low >= 2**31, low - 2**32, low).to(torch.int32).view(torch.float32).to(torch.float64)


@_reference
def npu_quant_matmul(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    *,
    offset: torch.Tensor | None = None,
    pertoken_scale: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    output_dtype: torch.dtype | None = None,
    x1_dtype: torch.dtype | None = None,
    x2_dtype: torch.dtype | None = None,
    pertoken_scale_dtype: torch.dtype | None = None,
    scale_dtype: torch.dtype | None = None,
    group_sizes: Sequence[int] | None = None,
    y_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """int8 x1 @ int8 x2 dequantised: (x1 @ x2 + bias_int32) * scale [* pertoken_scale] (+ a float bias),
    rounded and saturated with offset for an int8 output (the default), as the op page's formulas.

    Modelled: int8 x1 and x2, a float scale per tensor or per channel, or its int64 packing by
    npu_trans_quant_param (the float32 in its low 32 bits); pertoken_scale per row, offset (int8
    output), an int32 or float bias; outputs int8, bfloat16, float16. A float32 scale for an int8 or
    float16 output without pertoken_scale is packed by the op itself (npu_trans_quant_param, round_mode
    0: its high 19 bits kept, the rest cut), so it is cut here too. Refused: int4 (int32-packed) and
    8-bit float inputs and their dtype arguments, group_sizes, y_scale, an int32 output, and an int64
    scale packing an offset without the offset argument.
    """
    op = "npu_quant_matmul"
    _refuse(
        op, x1_dtype=x1_dtype, x2_dtype=x2_dtype, pertoken_scale_dtype=pertoken_scale_dtype,
        scale_dtype=scale_dtype, group_sizes=group_sizes, y_scale=y_scale,
    )  # fmt: skip
    if x1.dtype != torch.int8 or x2.dtype != torch.int8:
        raise ReferenceUnsupported(f"{op}: x1 and x2 of {x1.dtype} and {x2.dtype} (int8 modelled)")
    out_dtype = output_dtype or torch.int8
    if out_dtype not in (torch.int8, torch.bfloat16, torch.float16):
        raise ReferenceUnsupported(f"{op}: output_dtype={out_dtype}")
    if scale.dtype == torch.int64:
        scale = _unpacked_scale(op, scale, offset)
    elif not scale.is_floating_point():
        raise ReferenceUnsupported(f"{op}: scale of {scale.dtype}")
    elif pertoken_scale is None and out_dtype != torch.bfloat16:
        scale = _high_19_bits(scale)
    if offset is not None and out_dtype != torch.int8:
        raise ValueError(f"{op}: offset with output_dtype={out_dtype}")
    acc = torch.matmul(x1.to(scale.dtype), x2.to(scale.dtype))  # exact: integer products and sums
    if bias is not None and not bias.is_floating_point():
        acc = acc + bias.to(acc.dtype)
    y = acc * scale
    if pertoken_scale is not None:
        y = y * pertoken_scale.to(y.dtype).unsqueeze(-1)
    if bias is not None and bias.is_floating_point():
        y = y + bias.to(y.dtype)
    if out_dtype != torch.int8:
        return y
    if offset is not None:
        y = y + offset.to(y.dtype)
    return torch.round(y).clamp(-128, 127).to(torch.int8)
