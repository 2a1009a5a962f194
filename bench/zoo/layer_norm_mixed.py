"""PyTorch's CPU layer_norm of a bf16 or fp16 input with an fp32 weight and bias (what CPU autocast hands
it): its fp32 weight and bias gradients against float64, beside a serial sum of the bias gradient in the
input's dtype (bench/studies/clean_dumps.md, bert_amp; frameworks/cpu_kernels.py names the deficit).

    python bench/zoo/layer_norm_mixed.py

prints, per dtype and row count, the largest relative error (over the largest float64 value) of each.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

C = 48


def relative(a: torch.Tensor, reference: torch.Tensor) -> float:
    return float((a.double() - reference).abs().max() / reference.abs().max())


def measure(low: torch.dtype, rows: int) -> tuple[float, float, float]:
    torch.manual_seed(0)
    x = torch.randn(rows, C).to(low).requires_grad_()
    w = (torch.randn(C) * 0.1 + 1).requires_grad_()
    b = torch.randn(C).requires_grad_()
    g = torch.randn(rows, C).to(low)
    F.layer_norm(x, (C,), w, b, 1e-12).backward(g)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    F.layer_norm(x64, (C,), w64, b64, 1e-12).backward(g.double())
    serial = torch.zeros(C, dtype=low)
    for row in g:  # the bias gradient summed in the input's dtype, row after row
        serial = serial + row
    assert w.grad is not None and b.grad is not None and w64.grad is not None and b64.grad is not None
    return relative(w.grad, w64.grad), relative(b.grad, b64.grad), relative(serial, b64.grad)


def main() -> None:
    print("| input | rows | weight gradient | bias gradient | bias gradient summed serially in the input's dtype |")
    print("|---|---:|---:|---:|---:|")
    for low in (torch.bfloat16, torch.float16):
        for rows in (32, 64, 256):
            dw, db, serial = measure(low, rows)
            print(f"| {str(low).removeprefix('torch.')} | {rows} | {dw:.2%} | {db:.2%} | {serial:.2%} |")


if __name__ == "__main__":
    main()
