"""A conv call through aten's own kernels: its gradients without the forward, its forward over a part.

`gradients` calls aten's convolution_backward, the kernel a conv's autograd node calls, with no
forward to build the graph first: the same values bit for bit (tests/test_large_sums.py), a third
less work for a backward entry's benchmark, and one gradient alone where only that one is asked
(the dtype standard's magnitudes). `sampled` is the forward over a part of the input channels.
"""

from __future__ import annotations

from typing import Any

import torch

from .torch_engine import Call, Side, floating

CONVS = frozenset({"conv1d", "conv2d", "conv3d"})
CONV_PARAMETERS = (
    ("input", None), ("weight", None), ("bias", None), ("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1),
)  # fmt: skip


def parameters(args: list, kwargs: dict) -> dict[str, Any] | None:
    """A conv call's parameters by name; None where aten's convolution_backward does not take them
    as they are (padding "same" or "valid", floating tensors not in input, weight, bias order)."""
    p = dict(CONV_PARAMETERS)
    p.update(zip(p, args))
    p.update({key: value for key, value in kwargs.items() if key in p})
    given = [t for t in (p["input"], p["weight"], p["bias"]) if isinstance(t, torch.Tensor)]
    if not isinstance(p["weight"], torch.Tensor) or len(given) < 2 or isinstance(p["padding"], str):
        return None
    return p if [id(t) for t in floating(args, kwargs)] == [id(t) for t in given] else None


def takes(call: Call) -> bool:
    """Whether the call is a conv these kernels take as it is."""
    return call.name.api.rsplit(".", 1)[-1] in CONVS and parameters(call.args, call.kwargs) is not None


def bench_gradients(call: Call, grad_outputs: list, side: Side) -> list | None:
    """A conv backward entry's benchmark: its gradients from the backward kernel alone. The
    forward autograd runs first is a third of the work and its output is not compared. None where
    the kernel does not take the call or it took no gradient: autograd then runs, and says why."""
    if not takes(call):
        return None
    try:
        found = gradients(call, grad_outputs, side)
    except (ValueError, RuntimeError):
        return None
    return found if any(grad is not None for grad in found) else None


def gradients(call: Call, grad_outputs: list, side: Side, only: int | None = None, sample: int = 1) -> list:
    """A conv's input gradients on `side` (those it took in the step; with `only`, that one alone,
    the others None) from aten's convolution_backward, the kernel its autograd node calls, without
    the forward that builds the graph first. The call is one `parameters` takes.

    `sample` > 1 (with `only`): over every sample-th output channel for the input's gradient, every
    sample-th batch element for the weight's and the bias's: a part of each element's terms, all
    nonnegative on |inputs|, so a lower bound of the whole (a ValueError where the conv has groups
    or no batch to sample)."""
    p = parameters(call.args, call.kwargs)
    g = next((t for t in grad_outputs if isinstance(t, torch.Tensor)), None)
    if p is None or g is None:
        raise ValueError("not a conv call convolution_backward takes")
    given = 3 if isinstance(p["bias"], torch.Tensor) else 2
    wanted = call.grad_flags[:given] + [True] * (given - len(call.grad_flags))
    mask = [i < given and wanted[i] and only in (None, i) for i in range(3)]
    x, w = p["input"], p["weight"]
    batched = x.dim() == w.dim()
    if sample > 1:
        if only == 0 and p["groups"] == 1:
            g, w = g[:, ::sample] if batched else g[::sample], w[::sample]
        elif only in (1, 2) and batched:
            g, x = g[::sample], x[::sample]
        else:
            raise ValueError("no channels or samples to take a part of")
    # The input's gradient reads the weight, the weight's the input: the other is placed as its shape alone.
    x, w = (side.place(t) if mask[1 - i] else _shape_of(t, side) for i, t in enumerate((x, w)))
    dims = w.dim() - 2
    stride, padding, dilation = ([*v] if isinstance(v, (list, tuple)) else [v] * dims for v in (
        p["stride"], p["padding"], p["dilation"]))  # fmt: skip
    g = side.place_grad(g).to(x.dtype)
    found = torch.ops.aten.convolution_backward(
        g if batched else g.unsqueeze(0),
        x if batched else x.unsqueeze(0),
        w,
        [w.shape[0]] if given > 2 else None,
        stride, padding, dilation, False, [0] * dims, p["groups"], mask,
    )  # fmt: skip
    grads = [found[0] if batched or found[0] is None else found[0].squeeze(0), found[1], found[2]]
    return [grad if asked else None for grad, asked in zip(grads[:given], mask)]


def sampled(call: Call, side: Side, sample: int) -> list:
    """A conv forward on `side` over every sample-th input channel, the bias whole: a part of each
    output's terms, all nonnegative on |inputs| (a ValueError where the conv has groups)."""
    p = parameters(call.args, call.kwargs)
    if p is None or p["groups"] != 1:
        raise ValueError("no input channels to take a part of")
    x, w = p["input"], p["weight"]
    x = x[:, ::sample] if x.dim() == w.dim() else x[::sample]
    options = (p["stride"], p["padding"], p["dilation"], 1)
    return [call.bench_fn(side.place(x), side.place(w[:, ::sample]), side.place(p["bias"]), *options)]


def _shape_of(t: torch.Tensor, side: Side) -> torch.Tensor:
    """A tensor of t's shape and of the dtype side places it in, with no memory of its own."""
    return torch.empty((), dtype=side.floating or t.dtype).expand(t.shape)
