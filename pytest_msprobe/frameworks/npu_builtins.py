"""The built-in torch_npu references, registered as a user's are: `NPU.<op>` -> the float64 CPU
reference of npu_reference.py or npu_llm_reference.py, with the outputs and elements they leave out
of the comparison. A user's registration of one of these names replaces it.

No torch: the functions are `Deferred`, imported on first call, so that a process that runs no NPU
entry (the xdist controller, a run of a CNN's dump) never imports the references' modules.
tests/test_references.py checks the names against the references those modules define.
"""

from __future__ import annotations

from .references import BUILT_IN, Deferred, Registry

# By module: every function of npu_reference.REFERENCES (npu_ops.py sees both modules' tables).
BUILT_IN_NPU: dict[str, tuple[str, ...]] = {
    "npu_reference": (
        "npu_fast_gelu", "npu_mish", "npu_swiglu", "npu_rotary_mul", "npu_scaled_masked_softmax",
        "npu_confusion_transpose", "npu_linear", "npu_sort_v2", "npu_moe_gating_top_k_softmax", "npu_rms_norm",
        "npu_layer_norm_eval", "npu_group_norm_silu", "npu_apply_adam", "npu_apply_adam_w", "npu_fusion_attention",
    ),
    "npu_llm_reference": (
        "npu_add_rms_norm", "npu_gelu", "npu_apply_rotary_pos_emb", "npu_scatter_nd_update", "npu_scatter_nd_update_",
        "npu_dynamic_quant", "npu_grouped_matmul", "npu_moe_init_routing", "npu_moe_finalize_routing",
        "npu_moe_compute_expert_tokens", "npu_prompt_flash_attention", "npu_incre_flash_attention",
        "npu_fused_infer_attention_score", "npu_quantize", "npu_quant_matmul",
    ),
}  # fmt: skip

# Outputs a reference returns only to keep torch_npu's structure: placeholders and dropout
# bookkeeping that say nothing about precision.
UNCOMPARED_OUTPUTS: dict[str, dict[int, str]] = {
    "npu_fusion_attention": {
        3: "softmax_out is an empty placeholder",
        4: "the dropout seed is not a result",
        5: "the dropout offset is not a result",
        6: "the dropout mask length is not a result",
    },
}

# Outputs whose trailing rows a correct kernel leaves unwritten (padding beyond a group_list).
UNWRITTEN = {"npu_grouped_matmul": Deferred("npu_llm_reference", "grouped_matmul_unwritten")}


def register(registry: Registry) -> None:
    """Every built-in reference, into `registry` (the plugin's own pytest_msprobe_references)."""
    for module, names in BUILT_IN_NPU.items():
        for name in names:
            registry.add(
                f"NPU.{name}",
                Deferred(module, name),
                unwritten=UNWRITTEN.get(name),
                uncompared=UNCOMPARED_OUTPUTS.get(name),
                origin=BUILT_IN,
            )
