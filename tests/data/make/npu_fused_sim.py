"""Write tests/data/npu_fused_sim: a tensor dump of torch_npu fused ops, outputs computed on the
simulated NPU (tests/npu_sim), in msprobe's format (tests/dumpwriter.py), as msprobe writes a step
that calls them on an Ascend NPU: inputs and outputs copied to the host, `NPU.<op>.<n>` entries.

Run from the repository root:
    PYTHONPATH=tests/npu_sim:tests python tests/data/make/npu_fused_sim.py tests/data/npu_fused_sim
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
import torch_npu
from dumpwriter import DumpWriter

assert "npusim" in torch_npu.__version__, "run with tests/npu_sim first on PYTHONPATH, never a real torch_npu"


def calls(g: torch.Generator):
    """(entry, callable, args, kwargs, backward) in the order a training step makes them, on npu:0."""

    def randn(*shape):
        return torch.randn(*shape, generator=g).npu()

    def positive(*shape):
        return torch.rand(*shape, generator=g).npu() + 0.1

    q, k, v = randn(1, 2, 8, 16), randn(1, 2, 8, 16), randn(1, 2, 8, 16)
    causal = torch.triu(torch.ones(8, 8, dtype=torch.bool), diagonal=1).npu()
    gqa_q, gqa_kv = randn(2, 8, 64), randn(2, 8, 32)  # BSH, 4 query heads on 2 key/value heads of 16
    packed = randn(10, 2, 16), randn(12, 2, 16), randn(12, 2, 16)  # TND: sequences of 3 and 5 queries, 5 and 7 keys
    return [
        ("NPU.npu_rms_norm.0", torch_npu.npu_rms_norm, [randn(4, 32), randn(32)], {"epsilon": 1e-6}, True),
        ("NPU.npu_swiglu.0", torch_npu.npu_swiglu, [randn(4, 64)], {"dim": -1}, True),
        ("NPU.npu_rotary_mul.0", torch_npu.npu_rotary_mul,
         [randn(1, 8, 2, 16), randn(1, 8, 1, 16), randn(1, 8, 1, 16)], {}, True),
        ("NPU.npu_rotary_mul.1", torch_npu.npu_rotary_mul,
         [randn(1, 8, 2, 16), randn(1, 8, 1, 16), randn(1, 8, 1, 16)], {"rotary_mode": "interleave"}, True),
        ("NPU.npu_fast_gelu.0", torch_npu.npu_fast_gelu, [randn(4, 32)], {}, True),
        ("NPU.npu_mish.0", torch_npu.npu_mish, [randn(4, 32)], {}, True),
        ("NPU.npu_fusion_attention.0", torch_npu.npu_fusion_attention, [q, k, v, 2, "BNSD"],
         {"atten_mask": causal, "scale": 0.25, "sparse_mode": 0}, True),
        ("NPU.npu_fusion_attention.1", torch_npu.npu_fusion_attention, [gqa_q, gqa_kv, randn(2, 8, 32), 4, "BSH"],
         {"scale": 0.25}, True),
        ("NPU.npu_fusion_attention.2", torch_npu.npu_fusion_attention,
         [randn(8, 1, 32), randn(8, 1, 32), randn(8, 1, 32), 2, "SBH"],
         {"atten_mask": causal, "scale": 0.3, "sparse_mode": 2}, True),
        ("NPU.npu_fusion_attention.3", torch_npu.npu_fusion_attention,
         [randn(1, 8, 2, 16), randn(1, 8, 2, 16), randn(1, 8, 2, 16), 2, "BSND"],
         {"atten_mask": causal, "scale": 0.25, "sparse_mode": 4, "pre_tockens": 2, "next_tockens": 1}, True),
        ("NPU.npu_fusion_attention.4", torch_npu.npu_fusion_attention, [*packed, 2, "TND"],
         {"atten_mask": causal, "scale": 0.25, "sparse_mode": 3, "actual_seq_qlen": [3, 8, 8],
          "actual_seq_kvlen": [5, 12, 12]}, True),
        ("NPU.npu_scaled_masked_softmax.0", torch_npu.npu_scaled_masked_softmax, [randn(2, 2, 8, 8), causal],
         {"scale": 0.5}, True),
        ("NPU.npu_confusion_transpose.0", torch_npu.npu_confusion_transpose, [randn(2, 3, 4)],
         {"perm": [1, 0, 2], "shape": [3, 8], "transpose_first": True}, True),
        ("NPU.npu_linear.0", torch_npu.npu_linear, [randn(4, 16), randn(8, 16), randn(8)], {}, True),
        ("NPU.npu_layer_norm_eval.0", torch_npu.npu_layer_norm_eval, [randn(4, 32), [32], randn(32), randn(32)],
         {"eps": 1e-5}, False),
        ("NPU.npu_group_norm_silu.0", torch_npu.npu_group_norm_silu, [randn(2, 6, 4, 4), randn(6), randn(6), 3],
         {"eps": 1e-5}, True),
        ("NPU.npu_moe_gating_top_k_softmax.0", torch_npu.npu_moe_gating_top_k_softmax, [randn(6, 8)], {"k": 2},
         False),
        ("NPU.npu_moe_gating_top_k_softmax.1", torch_npu.npu_moe_gating_top_k_softmax,
         [randn(4, 8), torch.tensor([False, True, False, False]).npu()], {"k": 3}, False),
        ("NPU.npu_sort_v2.0", torch_npu.npu_sort_v2, [randn(4, 16)], {"descending": True}, False),
        ("NPU.npu_apply_adam.0", torch_npu.npu_apply_adam,
         [0.9 ** 3, 0.999 ** 3, 1e-3, 0.9, 0.999, 1e-8, randn(32), False, True],
         {"out": [randn(32), randn(32) * 0.1, positive(32) * 0.01]}, False),
        ("NPU.npu_apply_adam_w.0", torch_npu.npu_apply_adam_w,
         [0.9 ** 3, 0.999 ** 3, 1e-3, 0.01, 0.9, 0.999, 1e-8, randn(32), None, False, False],
         {"out": [randn(32), randn(32) * 0.1, positive(32) * 0.01]}, False),
        ("Functional.gelu.0", torch.nn.functional.gelu, [randn(4, 32)], {}, True),
    ]


def main(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    torch.npu.set_device(0)
    writer = DumpWriter(folder)
    generator = torch.Generator().manual_seed(2026)
    for seed, (prefix, fn, args, kwargs, backward) in enumerate(calls(generator)):
        if "out" in kwargs:  # the state an optimiser step updates in place: msprobe records it before
            before = [t.clone() for t in kwargs["out"]]
            writer.record(prefix, fn, args, kwargs, backward=backward, seed=seed)
            writer.data[f"{prefix}.forward"]["input_kwargs"]["out"] = writer.spec(before, f"{prefix}.forward.input.out")
        else:
            writer.record(prefix, fn, args, kwargs, backward=backward, seed=seed)
    writer.write()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
