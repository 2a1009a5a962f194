"""torch.autocast(device_type="npu"): the AutocastPrivateUse1 kernels torch_npu registers in C++.

PyTorch registers no autocast op list for PrivateUse1: a backend brings its own. torch_npu's is
CUDA's; these are its two main policies, for the ops a training step's dump holds: matmuls and
convolutions in the autocast dtype, the precision-sensitive ops in float32. Other ops run in the
dtype of their inputs, as under CUDA autocast.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import torch
from torch.utils._pytree import tree_map

_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)  # type: ignore[attr-defined]
LOWER_PRECISION = (
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "scaled_dot_product_attention",
)
FLOAT32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm", "nuclear_norm",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
)
_LIBRARIES: List[torch.library.Library] = []


def register() -> None:
    if _LIBRARIES:
        return
    every_op, listed = torch.library.Library("_", "IMPL"), torch.library.Library("aten", "IMPL")
    _LIBRARIES.extend((every_op, listed))
    every_op.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")  # the ops not listed
    for names, dtype in ((LOWER_PRECISION, None), (FLOAT32, torch.float32)):
        for name in names:
            packet = getattr(torch.ops.aten, name)
            for overload in packet.overloads():
                if overload.endswith("out"):
                    continue  # autocast leaves out= calls alone
                op = getattr(packet, overload)
                listed.impl(op, _cast_to(op, dtype), "AutocastPrivateUse1")


def _cast_to(op: torch._ops.OpOverload, dtype: Optional[torch.dtype]) -> Callable:
    """A kernel that casts the floating npu tensors (float64 aside) to `dtype` (None: the autocast dtype)."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        target = dtype or torch.get_autocast_dtype("npu")

        def cast(value: Any) -> Any:
            eligible = (isinstance(value, torch.Tensor) and value.device.type == "npu"
                        and value.is_floating_point() and value.dtype != torch.float64)
            return value.to(target) if eligible else value

        with torch._C._ExcludeDispatchKeyGuard(_KEY):
            return op(*tree_map(cast, args), **tree_map(cast, kwargs))

    return kernel
