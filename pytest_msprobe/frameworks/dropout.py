"""Dropout's calls: which draw a mask (p strictly between 0 and 1, in training), and how each is judged.

A dropout with p 0, p 1 or in eval mode is deterministic (its input, zeros, its input) and is
compared as any API is; one that draws is judged by judging/dropout.py, each side drawing its mask
from a generator seeded by the entry's name and side, so that a verdict does not depend on the
order of the run. msprobe's PyTorch lists name the dropouts below; the NPU's fused ones
(`_npu_dropout`, `npu_dropout_with_add_softmax`) have no CPU reference and stay a SKIP.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..judging.dropout import DropoutRule

# SELU's alpha * scale (PyTorch's Dropout.cpp): alpha dropout's dropped value is -ALPHA * a * (1 - p).
ALPHA = 1.7580993408473766


@dataclass(frozen=True)
class Signature:
    """Where a dropout takes p and its training flag, and what each defaults to (None: required)."""

    training: str  # the flag's name: `training` (torch.nn.functional), `train` (torch)
    training_default: bool | None
    p_default: float | None
    alpha: bool = False  # alpha dropout: a dropped element is a constant, not 0
    feature: bool = False  # whole channels drop


_FUNCTIONAL = Signature("training", True, 0.5)
_TORCH = Signature("train", None, None)
SIGNATURES: dict[tuple[str, str], Signature] = {
    ("Functional", "dropout"): _FUNCTIONAL,
    ("Functional", "dropout1d"): replace(_FUNCTIONAL, feature=True),
    ("Functional", "dropout2d"): replace(_FUNCTIONAL, feature=True),
    ("Functional", "dropout3d"): replace(_FUNCTIONAL, feature=True),
    ("Functional", "alpha_dropout"): Signature("training", False, 0.5, alpha=True),
    ("Functional", "feature_alpha_dropout"): Signature("training", False, 0.5, alpha=True, feature=True),
    **{("Torch", name): _TORCH for name in ("dropout", "dropout_")},
    **{("Torch", name): replace(_TORCH, feature=True) for name in ("feature_dropout", "feature_dropout_")},
    **{("Torch", name): replace(_TORCH, alpha=True) for name in ("alpha_dropout", "alpha_dropout_")},
    **{
        ("Torch", name): replace(_TORCH, alpha=True, feature=True)
        for name in ("feature_alpha_dropout", "feature_alpha_dropout_")
    },
}


def is_dropout(api_type: str, api: str) -> bool:
    return (api_type, api) in SIGNATURES


@dataclass(frozen=True)
class Draw:
    """A dropout call that draws its mask: its p and how its outputs read."""

    api: str
    p: float
    signature: Signature
    input: Any  # the tensor dropped from, as rebuilt (for the share its own zeros take)

    def rule(self, forward: bool, values: Any = None) -> DropoutRule:
        """How an output is judged: forward, the output; else the gradient of the input, whose
        dropped elements are 0 for every kind (`values`: the gradient fed back, for its own zeros)."""
        dims = self.channel_dims(self.input if forward else values)
        if forward and self.signature.alpha:
            return DropoutRule(self.api, self.p, self.dropped_value(), dims, 0.0)
        return DropoutRule(self.api, self.p, 0.0, dims, zero_share(self.input if forward else values, dims))

    def dropped_value(self) -> float:
        a = 1.0 / math.sqrt((ALPHA * ALPHA * self.p + 1) * (1 - self.p))
        return -ALPHA * a * (1 - self.p)

    def channel_dims(self, value: Any) -> int:
        if not self.signature.feature:
            return 0
        ndim = value.dim() if isinstance(value, torch.Tensor) else 0
        # dropout1d takes (C, L) unbatched, dropout3d (C, D, H, W): one leading dim; else (N, C, ...).
        return 1 if (self.api, ndim) in (("dropout1d", 2), ("dropout3d", 4)) else 2


def zero_share(value: Any, channel_dims: int) -> float | None:
    """The share of elements (or channels) already 0 before any is dropped."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() == 0:
        return None
    zeros = value.detach().cpu() == 0
    if channel_dims and zeros.dim() >= channel_dims:
        zeros = zeros.reshape(*zeros.shape[:channel_dims], -1).all(dim=-1)
    return float(zeros.double().mean())


def draw_of(api_type: str, api: str, args: list, kwargs: dict) -> Draw | None:
    """The call's draw, or None where it is deterministic (p 0 or 1, not training) or no dropout."""
    signature = SIGNATURES.get((api_type, api))
    if signature is None:
        return None
    p = _argument(args, kwargs, "p", 1, signature.p_default)
    training = _argument(args, kwargs, signature.training, 2, signature.training_default)
    if isinstance(p, torch.Tensor) or isinstance(training, torch.Tensor):
        return None  # not a dropout msprobe could record as called (the call itself says what is wrong)
    if not training or p is None or not 0 < float(p) < 1:
        return None
    return Draw(api, float(p), signature, args[0] if args else kwargs.get("input"))


def _argument(args: list, kwargs: dict, name: str, position: int, default: Any) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[position] if len(args) > position else default


def seeded(fn: Callable, seed: int) -> Callable:
    """fn drawing from torch's generators seeded by `seed`, the caller's generator state left as it was
    (the CPU's; a device's own is seeded too, as torch.manual_seed does)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return fn(*args, **kwargs)

    return call


def seed_of(seed: int, entry: str, side: str) -> int:
    """A seed per entry and side: the two sides draw two masks, as two devices do."""
    digest = hashlib.blake2b(f"{seed}|{entry}|dropout|{side}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)
