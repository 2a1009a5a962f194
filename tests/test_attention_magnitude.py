"""scaled_dot_product_attention's magnitudes (frameworks/magnitudes.py `_attention`) work on their
(..., L, S) arrays in place (issue 32: 268 MB of float64 each at LLaMA-7B width, seq 1024): the
same values, to the bit, as the formula written out of place, as its docstring gives it."""

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
