"""group_norm's magnitude model (frameworks/magnitudes.py) is layer_norm's over each sample's
groups of channels: with one group and no affine map they are the same function, forward and
backward; the weight's and bias's gradients sum over the samples and positions of their channel."""

from __future__ import annotations

import torch

from pytest_msprobe.frameworks.magnitudes import formula, terms_of


def test_group_norm_with_one_group_is_layer_norm_over_the_channels_and_positions():
    torch.manual_seed(0)
    x, g = torch.randn(3, 4, 5), torch.randn(3, 4, 5)
    grouped = formula("Functional.group_norm", [x, 1], {}, [g])
    rows = formula("Functional.layer_norm", [x, [4, 5]], {}, [g])
    assert torch.allclose(grouped[0], rows[0], rtol=1e-12, atol=0)
    forward = formula("Functional.group_norm", [x, 1], {}, None)
    assert torch.allclose(forward[0], formula("Functional.layer_norm", [x, [4, 5]], {}, None)[0], rtol=1e-12, atol=0)


def test_group_norm_affine_gradients_are_per_channel_sums_of_their_group():
    torch.manual_seed(1)
    x, g = torch.randn(2, 6, 7), torch.randn(2, 6, 7)
    w, b = torch.randn(6), torch.randn(6)
    dx, dw, db = formula("Functional.group_norm", [x, 3, w, b], {}, [g])
    assert dx.shape == x.shape and dw.shape == db.shape == (6,)
    assert torch.allclose(db, g.abs().double().sum((0, 2)), rtol=1e-12, atol=0)
    # every magnitude bounds the float64 gradient it stands for
    xs, ws, bs = (t.double().requires_grad_() for t in (x, w, b))
    torch.nn.functional.group_norm(xs, 3, ws, bs).backward(g.double())
    for magnitude, exact in zip((dx, dw, db), (xs.grad, ws.grad, bs.grad)):
        assert bool((magnitude >= exact.abs() * (1 - 1e-12)).all())
    assert terms_of("Functional.group_norm", [x, w, b], [g], 1, 6) == 2 * 6 * 7 // 6


def test_instance_norm_is_group_norm_with_a_group_per_channel():
    """F.instance_norm normalises each sample's channel alone (segdet in bench/zoo, whose fp32 input
    gradient had no model and was 2.36x its budget in cpu mode); its running statistics take no
    gradient, so the gradients come in the order of the floating inputs that take one."""
    torch.manual_seed(2)
    x, g = torch.randn(2, 5, 4, 3), torch.randn(2, 5, 4, 3)
    w, b = torch.randn(5), torch.randn(5)
    per_channel = formula("Functional.instance_norm", [x], {"weight": w, "bias": b}, [g])
    grouped = formula("Functional.group_norm", [x, 5, w, b], {}, [g])
    assert len(per_channel) == 3
    for mine, theirs in zip(per_channel, grouped):
        assert torch.allclose(mine, theirs, rtol=1e-12, atol=0)
    xs, ws, bs = (t.double().requires_grad_() for t in (x, w, b))
    y = torch.nn.functional.instance_norm(xs, weight=ws, bias=bs)
    assert bool((formula("Functional.instance_norm", [x], {"weight": w, "bias": b}, None)[0] >= y.abs() - 1e-12).all())
    y.backward(g.double())
    for magnitude, exact in zip(per_channel, (xs.grad, ws.grad, bs.grad)):
        assert bool((magnitude >= exact.abs() * (1 - 1e-12)).all())
    running = [torch.zeros(5), torch.ones(5)]  # tensors, but no gradient: None in their places
    with_running = formula("Functional.instance_norm", [x, *running, w, b], {}, [g])
    assert with_running[1] is None and with_running[2] is None and with_running[0].shape == x.shape
