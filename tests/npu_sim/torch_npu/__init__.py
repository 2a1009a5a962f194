"""A simulated torch_npu, for pytest-msprobe's own tests only: never installed with the package.

Tests that want an NPU put tests/npu_sim first on PYTHONPATH of a subprocess; importing this
package then gives that process an `npu` device on PyTorch's Python PrivateUse1 backend
(_backend), torch.npu (npu), torch.autocast(device_type="npu") (_autocast), torch_npu's fused
ops (_fused), and the deficits a test injects (_deficits).
"""

from __future__ import annotations

import torch  # noqa: F401  (torch_npu extends torch: it is imported first, as by the real one)

from . import _autocast, _backend, npu
from ._fused import (  # noqa: F401  (torch_npu.npu_*)
    npu_add_rms_norm,
    npu_apply_adam,
    npu_apply_adam_w,
    npu_apply_rotary_pos_emb,
    npu_confusion_transpose,
    npu_dynamic_quant,
    npu_fast_gelu,
    npu_fused_infer_attention_score,
    npu_fusion_attention,
    npu_gelu,
    npu_group_norm_silu,
    npu_grouped_matmul,
    npu_incre_flash_attention,
    npu_layer_norm_eval,
    npu_linear,
    npu_mish,
    npu_moe_compute_expert_tokens,
    npu_moe_finalize_routing,
    npu_moe_gating_top_k_softmax,
    npu_moe_init_routing,
    npu_prompt_flash_attention,
    npu_quant_matmul,
    npu_quantize,
    npu_rms_norm,
    npu_rotary_mul,
    npu_scaled_masked_softmax,
    npu_scatter_nd_update,
    npu_scatter_nd_update_,
    npu_sort_v2,
    npu_swiglu,
)

__version__ = "2.13.0+npusim"

_backend.register(npu)
_autocast.register()
