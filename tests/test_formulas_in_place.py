"""The magnitude formulas that work on their largest arrays in place (frameworks/magnitudes.py;
issue 32: scaled_dot_product_attention's (..., L, S) arrays are 268 MB of float64 each at LLaMA-7B
width and seq 1024, cross_entropy's (N, C) 262 MB at a vocabulary of 32000): the same values, to the
bit, as the formulas written out of place, as their docstrings give them."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_msprobe.frameworks import magnitudes


def out_of_place(p: dict, g: torch.Tensor | None, recomputed: bool) -> list:
    """The docstring's formula, every step a new array."""
    q, k, v, mask = p["query"], p["key"], p["value"], p["attn_mask"]
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale
    if p["is_causal"]:
        scores = scores.masked_fill(~torch.ones(scores.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, -1)
    aq, ak, av = q.abs(), k.abs(), v.abs()
    terms = aq @ ak.transpose(-2, -1) * scale
    if g is None:
        moved = probs * terms
        return [probs @ av + moved @ av + moved.sum(-1, keepdim=True) * (probs @ v).abs()]
    weight = probs
    if recomputed:
        shift = torch.where(probs > 0, torch.log(probs).abs(), torch.zeros_like(probs))
        weight = probs * (1 + 2 * terms + shift + math.sqrt(probs.shape[-1]))
    ag = g.abs()
    dp = ag @ av.transpose(-2, -1)
    ds = weight * (dp + (probs * dp).sum(-1, keepdim=True))
    found = [ds @ ak * scale, ds.transpose(-2, -1) @ aq * scale, weight.transpose(-2, -1) @ ag]
    return found + ([None] if mask is not None and mask.is_floating_point() else [])


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("recomputed", [True, False])
@pytest.mark.parametrize(
    ("batch", "mask", "causal"),
    [
        ((2, 3), None, False),
        ((2, 3), None, True),
        ((2, 3), "bool", False),
        ((), "float", False),
        ((1, 2), "float", False),
    ],
)
def test_the_in_place_formula_gives_the_out_of_place_values_to_the_bit(direction, recomputed, batch, mask, causal):
    generator = torch.Generator().manual_seed(7)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64) * 4  # wide scores: P underflows

    q, k, v = draw(*batch, 5, 8), draw(*batch, 6, 8), draw(*batch, 6, 3)
    attn_mask = {None: None, "bool": torch.rand(5, 6, generator=generator) > 0.3, "float": draw(5, 6)}[mask]
    p = dict(
        query=q, key=k, value=v, attn_mask=attn_mask, dropout_p=0.0, is_causal=causal, scale=None, enable_gqa=False
    )
    g = None if direction == "forward" else draw(*batch, 5, 3)

    found = magnitudes._attention(dict(p), g, recomputed=recomputed)
    expected = out_of_place(p, g, recomputed)

    assert len(found) == len(expected)
    for got, want in zip(found, expected):
        assert (got is None and want is None) or torch.equal(got, want)
    assert torch.equal(p["query"], q) and torch.equal(p["key"], k)  # the inputs are not written


def cross_entropy_out_of_place(p: dict, g: torch.Tensor) -> torch.Tensor:
    x, target = p["input"], p["target"]
    kept = target != p["ignore_index"]
    labels = torch.where(kept, target, torch.zeros_like(target)).long()
    scale = 1.0 / max(1, int(kept.sum())) if p["reduction"] == "mean" else 1.0
    onehot = torch.zeros_like(x).scatter_(1, labels[:, None], 1.0)
    per_row = g.abs().reshape(-1, 1) if p["reduction"] == "none" else g.abs().reshape(1, 1)
    return (torch.softmax(x, 1) + onehot) * per_row * kept[:, None] * scale


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropys_gradient_magnitude_is_the_out_of_place_one_to_the_bit(reduction):
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(9, 11, generator=generator, dtype=torch.float64) * 30  # confident rows: p near 1
    target = torch.randint(0, 11, (9,), generator=generator)
    target[2] = -100  # ignored
    p = dict(input=x, target=target, weight=None, ignore_index=-100, reduction=reduction, label_smoothing=0.0)
    p.update(size_average=None, reduce=None)
    g = torch.randn(9 if reduction == "none" else (), generator=generator, dtype=torch.float64)

    (found,) = magnitudes._cross_entropy(dict(p), g)

    assert torch.equal(found, cross_entropy_out_of_place(p, g))
    assert found[2].eq(0).all()  # the ignored row
