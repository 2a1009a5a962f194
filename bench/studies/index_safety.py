"""Which allow-listed PyTorch APIs take an index, size or offset argument, and what each got.

For every API of msprobe's PyTorch lists (apis.py: functional, tensor, torch, _VF, aten) that
pytest-msprobe would call, its parameters are read (aten's schemas; for the other types the
schema of the aten op of that name, else the Python signature) and those named like an index,
a size, a stride, an offset, a target or a length are listed. Each API gets one category:

  denied        never called: apis.py's DENIED (its "unchecked kernel" group: raw sizes, strides or
                sparse indices over a storage, checked by nothing; or raw memory, files, ...)
  checked       frameworks/index_checks.py bounds its index arguments before the call (random and
                real data), and draws random ones inside those bounds
  kernel        a public kernel that checks its own indices and raises; fed hostile indices by
                tests/test_index_safety.py to show it (UNRULED there)
  sizes         sizes, strides, lengths, class counts that make an output: bounded by issue 26 item 4
                (output sizes before allocation), not indices into a tensor; torch checks them
  not indices   the name matches but the argument indexes nothing (a target of values, a dim, an offset
                of a diagonal, a split's sizes checked by the kernel)
  UNREVIEWED    an index tensor that none of the above covers: to decide

    python -m bench.studies.index_safety > bench/studies/index_safety.md.table
"""

from __future__ import annotations

import inspect
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402

from pytest_msprobe.dumps import apis  # noqa: E402
from pytest_msprobe.frameworks import Unsupported, index_checks  # noqa: E402

LIKE = re.compile(
    r"(^|_)(index|indices|offsets?|target|targets|lengths?|size|sizes|stride|storage_offset|"
    r"output_size|idx|batch_sizes|num_weights|num_classes|minlength|bins)($|_)"
)
TENSOR_INDICES = re.compile(r"^(index|indices|offsets|targets?|input_lengths|target_lengths|idx)$")
# Names whose tensor is a value, not an index: a regression target, a probability, a sequence's lengths.
VALUE_TARGETS = frozenset(
    {
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "binary_cross_entropy_backward",
        "mse_loss",
        "mse_loss_backward",
        "huber_loss",
        "huber_loss_backward",
        "smooth_l1_loss",
        "smooth_l1_loss_backward",
        "soft_margin_loss",
        "soft_margin_loss_backward",
        "hinge_embedding_loss",
        "margin_ranking_loss",
        "cosine_embedding_loss",
        "poisson_nll_loss",
        "gaussian_nll_loss",
        "kl_div",
        "l1_loss",
        "multilabel_soft_margin_loss",
        "triplet_margin_loss",
        "triplet_margin_with_distance_loss",
        "cummax",
        "cummin",
        "max_pool2d_with_indices",
        "max_pool3d_with_indices",
        "adaptive_max_pool2d",
        "adaptive_max_pool3d",
        "median",
        "nanmedian",
        "mode",
        "sort",
        "topk",
        "min",
        "max",
        "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_flash_attention_backward",
        "gru",
        "lstm",
        "rnn_relu",
        "rnn_tanh",
        "quantized_gru",
        "quantized_lstm",
        "segment_reduce",
        "kthvalue",
        "fractional_max_pool2d",
        "fractional_max_pool3d",
        # Split points: the kernel clamps them to the tensor, they address no element.
        "dsplit",
        "hsplit",
        "vsplit",
        "tensor_split",
    }
)
# Kernels that check their own integer indices (select's int, advanced indexing's tensors): seen
# raising on 10^12 and -10^12 (index_put and __getitem__ fed by tests/test_index_safety.py too).
KERNEL_CHECKS = frozenset({"select", "select_backward", "select_scatter", "index", "index_put", "index_put_"})
SECTIONS = {"Functional": "functional", "Tensor": "tensor", "Torch": "torch", "VF": "_VF", "Aten": "aten"}


def parameters(api_type: str, name: str) -> list[str]:
    """The API's parameters that look like an index, a size or an offset."""
    last = name.rsplit(".", 1)[-1]
    packet = getattr(torch.ops.aten, last, None) if not last.startswith("__") else None
    found: set[str] = set()
    if packet is not None:
        try:
            for overload in packet.overloads():
                for argument in getattr(packet, overload)._schema.arguments:
                    if LIKE.search(argument.name):
                        found.add(argument.name)
        except (AttributeError, RuntimeError):
            pass
    if not found and api_type == "Functional":
        try:
            target = apis.resolve(torch.nn.functional, apis.listed(apis.PYTORCH, api_type, name), "torch")
            found = {p for p in inspect.signature(target).parameters if LIKE.search(p)}
        except (Unsupported, TypeError, ValueError):
            pass
    return sorted(found)


def category(api_type: str, name: str, params: list[str]) -> str:
    from test_index_safety import UNRULED

    last = name.rsplit(".", 1)[-1]
    try:
        apis.listed(apis.PYTORCH, api_type, name)
    except Unsupported as exc:
        return "denied (unchecked kernel)" if "unchecked kernel" in str(exc) else "denied"
    if index_checks.rules_of(api_type, last) is not None:
        return "checked"
    if (api_type, last) in UNRULED or last in KERNEL_CHECKS:
        return "kernel"
    indices = [p for p in params if TENSOR_INDICES.match(p)]
    if not indices or last.rstrip("_") in VALUE_TARGETS or last in VALUE_TARGETS:
        return "sizes" if not indices else "not indices"
    return "UNREVIEWED"


def audit() -> list[tuple[str, str, str]]:
    """(category, API, its index-like arguments) of every allow-listed PyTorch API that has some."""
    rows = []
    for api_type, section in SECTIONS.items():
        for name in sorted(apis.wrapped(apis.PYTORCH, section)):
            params = parameters(api_type, name)
            if params:
                rows.append((category(api_type, name, params), f"{api_type}.{name}", ", ".join(params)))
    return rows


def main() -> None:
    rows = audit()
    counts = Counter(row[0] for row in rows)
    print(f"{len(rows)} allow-listed PyTorch APIs take an index-, size- or offset-like argument:")
    print(", ".join(f"{n} {what}" for what, n in sorted(counts.items())))
    print()
    print("| category | API | arguments |")
    print("|---|---|---|")
    for row in sorted(rows):
        print(f"| {row[0]} | {row[1]} | {row[2]} |")


if __name__ == "__main__":
    main()
