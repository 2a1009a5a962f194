"""A linear call's gradients without its forward, one at a time: as autograd's kernels compute them.

F.linear's autograd node (addmm on the input flattened to rows, or mm under matmul) computes the
input's gradient as grad @ W, the weight's as grad^T @ x (the rows of every batch dimension summed
by the one GEMM) and the bias's as grad summed to the bias's shape: `gradients` calls the same
kernels on the same layouts, without the forward GEMM that builds the graph first, and only the
gradient asked. The same values bit for bit, float32 and float64, 1-D to N-D inputs, with and
without a bias, whichever inputs take a gradient (tests/test_linear_magnitudes.py).
"""

from __future__ import annotations

from typing import Any

import torch

from .torch_engine import Call, Side, floating

LINEAR_PARAMETERS = (("input", None), ("weight", None), ("bias", None))


def parameters(call: Call) -> dict[str, Any] | None:
    """A torch linear call's (input, weight, bias) by name; None where `gradients` does not take
    it as it is: another benchmark callable (MindSpore's), floating tensors not in that order, a
    weight that is no matrix, a bias that is no vector, or a tensor whose layout is not contiguous
    (autograd's matmul then chooses between kernels by what requires a gradient)."""
    if call.bench_fn is not torch.nn.functional.linear:
        return None
    p = dict(LINEAR_PARAMETERS)
    p.update(zip(p, call.args))
    p.update({key: value for key, value in call.kwargs.items() if key in p})
    x, w, b = p["input"], p["weight"], p["bias"]
    given = [t for t in (x, w, b) if isinstance(t, torch.Tensor)]
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or (b is not None and len(given) < 3):
        return None
    if x.dim() < 1 or x.numel() == 0 or w.dim() != 2 or (b is not None and b.dim() != 1) or x.shape[-1] != w.shape[1]:
        return None
    if not all(t.is_floating_point() and t.is_contiguous() for t in given):
        return None
    return p if [id(t) for t in floating(call.args, call.kwargs)] == [id(t) for t in given] else None


def takes(call: Call, grad_outputs: list) -> bool:
    """Whether `gradients` computes this backward call's gradients as autograd does."""
    g = next((t for t in grad_outputs if isinstance(t, torch.Tensor)), None)
    p = parameters(call)
    return (
        p is not None
        and g is not None
        and g.is_contiguous()
        and list(g.shape) == [*p["input"].shape[:-1], p["weight"].shape[0]]
    )


def bench_gradients(call: Call, grad_outputs: list, side: Side) -> list | None:
    """A linear backward entry's benchmark: every gradient it took in the step, from the GEMMs
    autograd's node runs, without the forward GEMM that builds the graph first (a third of the
    float64 work of an entry that compares the weight's gradient: a MoE expert's). None where
    `takes` does not take the call or it took no gradient: autograd then runs."""
    if not takes(call, grad_outputs):
        return None
    found = gradients(call, grad_outputs, side)
    return found if any(grad is not None for grad in found) else None


def gradients(call: Call, grad_outputs: list, side: Side, only: int | None = None) -> list:
    """The gradients (0 the input's, 1 the weight's, 2 the bias's) of a call `takes` takes on
    `side`, or with `only`, that one alone, the others None: None too where an input took no
    gradient in the step."""
    p = parameters(call)
    g = next((t for t in grad_outputs if isinstance(t, torch.Tensor)), None)
    if p is None or g is None:
        raise ValueError("not a linear call these kernels take")
    given = 3 if isinstance(p["bias"], torch.Tensor) else 2
    wanted = call.grad_flags[:given] + [True] * (given - len(call.grad_flags))
    found: list = [None] * given
    asked = [i for i in range(given) if wanted[i] and only in (None, i)]
    if not asked:
        return found
    x = p["input"]
    grad = side.place_grad(g)
    rows = grad.unsqueeze(0) if grad.dim() == 1 else grad.reshape(-1, grad.shape[-1])
    # The input's gradient reads the weight alone, the weight's the input alone; the grad_output
    # in the output's dtype, as autograd hands it over.
    if 0 in asked:
        w = side.place(p["weight"])
        found[0] = rows.to(w.dtype).mm(w).reshape(x.shape)
    if 1 in asked:
        placed = side.place(x)
        found[1] = rows.to(placed.dtype).t().mm(placed.reshape(-1, placed.shape[-1]))
    if 2 in asked:
        found[2] = grad.to(side.floating or grad.dtype).sum_to_size(p["bias"].shape)
    return found
