"""Write tests/data/npu_llm_sim: a tensor dump of torch_npu's LLM and MoE operators (issue 30), outputs
computed on the simulated NPU (tests/npu_sim), in msprobe's format (tests/dumpwriter.py): lists of
tensors (npu_grouped_matmul's x and weight, its output list), optional tensors given as None, int
lists and an int64 group_list tensor, as msprobe 26.2.0 records a call's arguments. fp32 and bf16.

Run from the repository root:
    PYTHONPATH=tests/npu_sim:tests python tests/data/make/npu_llm_sim.py tests/data/npu_llm_sim
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
import torch_npu
from dumpwriter import DumpWriter

assert "npusim" in torch_npu.__version__, "run with tests/npu_sim first on PYTHONPATH, never a real torch_npu"

# Ops that update inputs in place: msprobe records their inputs before the call.
IN_PLACE = ("npu_apply_rotary_pos_emb", "npu_scatter_nd_update_")
# Ops a training step differentiates: their backward entries are recorded too.
BACKWARD = ("npu_add_rms_norm", "npu_gelu")


def calls(g: torch.Generator, dtype: torch.dtype, tag: int):
    """(entry, callable, args, kwargs) in the order an MoE decoder layer makes them, on npu:0."""

    def randn(*shape, of=dtype):
        return torch.randn(*shape, generator=g).to(of).npu()

    def int8(*shape):
        return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8).npu()

    def ints(values):
        return torch.tensor(values, dtype=torch.int32).npu()

    experts, rows, k, hidden = 4, 6, 2, 16
    logits = torch.randn(rows, experts, generator=g)
    expert_idx = torch.topk(torch.softmax(logits, -1), k, dim=-1).indices.to(torch.int32)
    row_idx = torch.arange(rows * k, dtype=torch.int32).reshape(k, rows).t().contiguous()
    sorted_experts = torch.sort(expert_idx.reshape(-1)).values
    permutation = torch.randperm(rows * k, generator=g).to(torch.int32)
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1).npu()
    right_down = torch.stack([torch.triu(torch.ones(4, 6, dtype=torch.bool), diagonal=1 + length - 4)
                              for length in (6, 5)]).unsqueeze(1).npu()  # [B, 1, 4, 6], causal to each key length
    # sparse_mode 3 reads no mask values (the op wants the compressed 2048 x 2048 triangle; a smaller one
    # keeps the dump small and is what the simulated device and the reference both ignore)
    tnd_mask = torch.triu(torch.ones(8, 8, dtype=torch.bool), diagonal=1).npu()
    decode_mask = torch.zeros(2, 9, dtype=torch.bool)
    decode_mask[0, 3] = True
    n = f"{tag}"
    return [
        (f"NPU.npu_add_rms_norm.{n}", torch_npu.npu_add_rms_norm, [randn(4, 32), randn(4, 32), randn(32)],
         {"epsilon": 1e-6}),
        (f"NPU.npu_gelu.{n}", torch_npu.npu_gelu, [randn(4, 32)], {"approximate": "tanh" if tag else "none"}),
        (f"NPU.npu_apply_rotary_pos_emb.{n}", torch_npu.npu_apply_rotary_pos_emb,
         [randn(1, 8, 2, 16), randn(1, 8, 2, 16), randn(1, 8, 1, 16), randn(1, 8, 1, 16)], {"layout": "BSH"}),
        (f"NPU.npu_scatter_nd_update.{n}", torch_npu.npu_scatter_nd_update,
         [randn(6, 8), torch.tensor([[1], [4]]).npu(), randn(2, 8)], {}),
        # A KV cache [blocks 4, 8 slots, 16] updated in place at two (block, slot) positions.
        (f"NPU.npu_scatter_nd_update_.{n}", torch_npu.npu_scatter_nd_update_,
         [randn(4, 8, 16), torch.tensor([[0, 3], [2, 7]]).npu(), randn(2, 16)], {}),
        # int8 matmuls: to int8 with an int32 bias and an offset; to bf16 per token with an int32 bias, the
        # op page's pertoken combination (a bfloat16 scale, a float32 pertoken_scale).
        (f"NPU.npu_quant_matmul.{2 * tag}", torch_npu.npu_quant_matmul,
         [int8(6, 32), int8(32, 8), (torch.rand(8, generator=g) * 1e-3 + 1e-4).npu()],
         {"offset": torch.randn(8, generator=g).npu(), "bias": torch.randint(-500, 500, (8,), generator=g,
                                                                            dtype=torch.int32).npu()}),
        (f"NPU.npu_quant_matmul.{2 * tag + 1}", torch_npu.npu_quant_matmul,
         [int8(6, 32), int8(32, 8), (torch.rand(8, generator=g) * 1e-3 + 1e-4).to(torch.bfloat16).npu()],
         {"pertoken_scale": (torch.rand(6, generator=g) + 0.5).npu(), "output_dtype": torch.bfloat16,
          "bias": torch.randint(-500, 500, (8,), generator=g, dtype=torch.int32).npu()}),
        (f"NPU.npu_dynamic_quant.{n}", torch_npu.npu_dynamic_quant, [randn(4, 32)], {"smooth_scales": randn(32)}),
        # Static quantisation per channel: along axis 1 by division, along the last axis by multiplication;
        # dtype torch.int8, as callers pass it: the plugin reads no quantised dtype (torch.qint8) from a dump.
        (f"NPU.npu_quantize.{2 * tag}", torch_npu.npu_quantize,
         [randn(4, 8, 3), (torch.rand(8, generator=g) * 0.05 + 0.01).npu(),
          torch.randint(-4, 5, (8,), generator=g, dtype=torch.int8).npu(), torch.int8, 1, True], {}),
        (f"NPU.npu_quantize.{2 * tag + 1}", torch_npu.npu_quantize,
         [randn(4, 16), (torch.rand(16, generator=g) * 40 + 5).to(dtype).npu(), None, torch.int8, -1, False],
         {}),
        # One x split by an int64 group_list of cumulative ends, 2 padded rows beyond its total.
        (f"NPU.npu_grouped_matmul.{2 * tag}", torch_npu.npu_grouped_matmul, [[randn(12, hidden)],
         [randn(3, hidden, 8)]], {"bias": [randn(3, 8)], "group_list": torch.tensor([3, 7, 10]).npu(),
                                  "split_item": 3, "group_type": 0, "group_list_type": 0}),
        # One x per weight, a tensor per group out, no bias.
        (f"NPU.npu_grouped_matmul.{2 * tag + 1}", torch_npu.npu_grouped_matmul,
         [[randn(3, hidden), randn(5, hidden)], [randn(hidden, 8), randn(hidden, 8)]],
         {"bias": None, "group_list": None, "split_item": 0}),
        (f"NPU.npu_moe_init_routing.{n}", torch_npu.npu_moe_init_routing,
         [randn(rows, hidden), row_idx.npu(), expert_idx.npu(), rows], {}),
        (f"NPU.npu_moe_compute_expert_tokens.{n}", torch_npu.npu_moe_compute_expert_tokens,
         [sorted_experts.npu(), experts], {}),
        (f"NPU.npu_moe_finalize_routing.{n}", torch_npu.npu_moe_finalize_routing,
         [randn(rows * k, hidden), randn(rows, hidden), None, randn(experts, hidden), randn(rows, k),
          permutation.npu(), expert_idx.npu()], {"drop_pad_mode": 0}),
        # Prefill: BSH with 4 query heads on 2 key/value heads, no mask; BNSD causal by a given mask
        # (sparse_mode 0, next_tokens 0); BNSD_BSND with a whole mask per batch (sparse_mode 1), causal to
        # each batch's key length.
        (f"NPU.npu_prompt_flash_attention.{3 * tag}", torch_npu.npu_prompt_flash_attention,
         [randn(2, 6, 64), randn(2, 6, 32), randn(2, 6, 32)],
         {"num_heads": 4, "num_key_value_heads": 2, "scale_value": 0.25, "input_layout": "BSH"}),
        (f"NPU.npu_prompt_flash_attention.{3 * tag + 1}", torch_npu.npu_prompt_flash_attention,
         [randn(1, 2, 6, 16), randn(1, 2, 6, 16), randn(1, 2, 6, 16)],
         {"atten_mask": causal, "num_heads": 2, "scale_value": 0.25, "next_tokens": 0, "input_layout": "BNSD"}),
        (f"NPU.npu_prompt_flash_attention.{3 * tag + 2}", torch_npu.npu_prompt_flash_attention,
         [randn(2, 2, 4, 16), randn(2, 2, 6, 16), randn(2, 2, 6, 16)],
         {"atten_mask": right_down, "sparse_mode": 1, "actual_seq_lengths_kv": [6, 5], "num_heads": 2,
          "scale_value": 0.25, "input_layout": "BNSD_BSND"}),
        # Decode: one query token per batch against a KV cache of 9, the second batch's 7 long.
        (f"NPU.npu_incre_flash_attention.{n}", torch_npu.npu_incre_flash_attention,
         [randn(2, 1, 64), randn(2, 9, 32), randn(2, 9, 32)],
         {"atten_mask": decode_mask.npu(), "actual_seq_lengths": [9, 7], "num_heads": 4, "num_key_value_heads": 2,
          "scale_value": 0.25, "input_layout": "BSH"}),
        # The fused inference attention: a prompt (BNSD, causal by a given mask, with softmax_lse) and a
        # decode step (BSH, a [B, S] mask, key lengths, no lse: the [1] zero).
        (f"NPU.npu_fused_infer_attention_score.{3 * tag}", torch_npu.npu_fused_infer_attention_score,
         [randn(1, 2, 6, 16), randn(1, 2, 6, 16), randn(1, 2, 6, 16)],
         {"atten_mask": causal, "num_heads": 2, "scale": 0.25, "next_tokens": 0, "input_layout": "BNSD",
          "softmax_lse_flag": True}),
        (f"NPU.npu_fused_infer_attention_score.{3 * tag + 1}", torch_npu.npu_fused_infer_attention_score,
         [randn(2, 1, 64), randn(2, 9, 32), randn(2, 9, 32)],
         {"atten_mask": decode_mask.npu(), "actual_seq_lengths_kv": [9, 7], "num_heads": 4,
          "num_key_value_heads": 2, "scale": 0.25, "input_layout": "BSH"}),
        # TND: a prompt of 3 and one of 4 queries on 5 and 6 keys, packed, causal to each key length.
        (f"NPU.npu_fused_infer_attention_score.{3 * tag + 2}", torch_npu.npu_fused_infer_attention_score,
         [randn(7, 4, 16), randn(11, 2, 16), randn(11, 2, 16)],
         {"atten_mask": tnd_mask, "sparse_mode": 3, "actual_seq_lengths": [3, 7], "actual_seq_lengths_kv": [5, 11],
          "num_heads": 4, "num_key_value_heads": 2, "scale": 0.25, "input_layout": "TND", "softmax_lse_flag": True}),
    ]


def main(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    torch.npu.set_device(0)
    writer = DumpWriter(folder)
    generator = torch.Generator().manual_seed(2026)
    for tag, dtype in enumerate((torch.float32, torch.bfloat16)):
        for prefix, fn, args, kwargs in calls(generator, dtype, tag):
            before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            writer.record(prefix, fn, args, kwargs, backward=fn.__name__ in BACKWARD, seed=len(writer.data))
            if fn.__name__ in IN_PLACE:
                writer.data[f"{prefix}.forward"]["input_args"] = [
                    writer.spec(a, f"{prefix}.forward.input.{i}") for i, a in enumerate(before)]
    writer.write()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
