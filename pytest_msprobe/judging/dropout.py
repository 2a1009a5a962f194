"""Dropout as msprobe judges it, and the values it keeps as any output's.

Two runs of a dropout draw two masks, so no element-by-element rule can judge its output. msprobe
26.2.0 (compare.py, `_compare_dropout`, for every API whose name holds "dropout") compares the share
of zeros instead: with N >= 100 elements, pass iff |zeros(bench) - zeros(tested)| / N < 0.1; with
fewer, pass. The same rule here, and three things it leaves out:

- the elements both sides kept are the same call's (x / (1 - p) on either side of a zeroing
  dropout): they are judged by the run's standard, so a kernel that keeps the right share with the
  wrong scale fails;
- feature dropout (dropout1d/2d/3d, feature_alpha_dropout) drops whole channels: its share is of
  channels, and its N the number of channels (256 channels of a dropout2d are 256 draws, not the
  elements msprobe counts: over 16 channels, two clean draws' shares differ by 10% or more 60% of the
  time);
- alpha dropout sets a dropped element to a constant, not 0 (msprobe's zeros count sees nothing
  drop): its share is of elements at that constant (its backward's dropped gradients are 0).

Besides, NaN and inf must sit at the same places (a dropped inf is NaN, a kept one inf: both are
non-finite on either side). No framework: the tested and bench outputs come as arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..results import ERROR, PASS, worst_status
from .compare import Comparison, Metrics, compare, incomparable

if TYPE_CHECKING:
    from .standards import Standard, Verdict

MIN_DRAWS = 100  # msprobe: with fewer elements, the share says nothing and the output passes
MAX_SHARE_GAP = 0.1  # msprobe: the shares of the two sides may differ by less than this
# How near alpha dropout's constant a dropped element is, relatively: bf16 rounds it by 2^-8. A kept
# element is that near only where its input is within a hundredth of -1.758 (on both sides alike).
DROPPED_TOLERANCE = 0.01
# The Message of a dropout's row in msprobe's PyTorch layout, whose 17 metric cells are left blank.
NO_MSPROBE_METRICS = (
    "msprobe's metrics left blank: each side drew its own mask, so they would compare two masks element by "
    "element (msprobe's acc_check writes no details row for a dropout)"
)


@dataclass(frozen=True)
class DropoutRule:
    """How one output of a random dropout is judged (frameworks/dropout.py makes it)."""

    api: str  # "dropout2d"
    p: float  # the probability to drop
    dropped: float = 0.0  # what a dropped element is: 0, or alpha dropout's constant (forward)
    channel_dims: int = 0  # 0: elements drop one by one; k: whole slices over the first k dims
    # The share of units already 0 before any is dropped (a masked softmax's, a ReLU's), where known.
    zeros: float | None = None

    @property
    def unit(self) -> str:
        return "channels" if self.channel_dims else "elements"

    def expected(self) -> str:
        """`p gives 10.0%`, `p=0.1 and the input's 43.8% zeros give 49.4%`, or "" where not known."""
        if self.zeros is None:
            return ""
        if not self.zeros:
            return f"p gives {self.p:.1%}"
        return f"p and the {self.zeros:.1%} already zero give {self.zeros + (1 - self.zeros) * self.p:.1%}"


def dropped_units(values: np.ndarray, rule: DropoutRule) -> tuple[np.ndarray, np.ndarray]:
    """(the elements that read as dropped, the units dropped): a channel is dropped when all its
    elements are."""
    values = np.asarray(values, dtype=np.float64)
    if rule.dropped == 0.0:
        elements = values == 0.0
    else:
        elements = np.abs(values - rule.dropped) <= DROPPED_TOLERANCE * abs(rule.dropped)
    if not rule.channel_dims or values.ndim < rule.channel_dims:
        return elements, elements.reshape(-1)
    units = elements.reshape((*values.shape[: rule.channel_dims], -1)).all(axis=-1).reshape(-1)
    return elements, units


def judge(c: Comparison, rule: DropoutRule, standard: Standard) -> tuple[Metrics, Verdict]:
    """The share rule and the kept elements' verdict; the metrics are the kept elements'."""
    from .standards import Verdict

    fault = incomparable(c)
    if fault:
        return Metrics(None, math.nan, math.nan), Verdict(ERROR, [fault], severity=math.inf)
    tested, bench = np.asarray(c.tested, np.float64), np.asarray(c.bench, np.float64)
    finite = np.isfinite(tested), np.isfinite(bench)
    if (finite[0] != finite[1]).any():
        off = int((finite[0] != finite[1]).sum())
        why = f"NaN or inf at {off} position(s) where the other side is finite (a dropped inf is NaN, a kept one inf)"
        return Metrics(None, math.nan, math.nan), Verdict(ERROR, [why], severity=math.inf, nonfinite=True)
    dropped_t, units_t = dropped_units(tested, rule)
    dropped_b, units_b = dropped_units(bench, rule)
    share = share_verdict(int(units_t.sum()), int(units_b.sum()), units_t.size, rule)
    kept = ~dropped_t & ~dropped_b & finite[0]
    if getattr(standard, "uses_reference", False):
        # The benchmark standard puts a whole output's msprobe metrics over a reference run's: no
        # reference has them for the elements both sides kept. The share alone judges it.
        share.reasons.append(
            f"the elements both sides kept are not judged: --msprobe-standard {standard.name} compares "
            "whole outputs with a reference run"
        )
        return Metrics(None, 0.0, 0.0), share
    if not kept.any():
        return Metrics(None, 0.0, 0.0), share
    metrics, values = compare(Comparison(tested[kept], bench[kept], c.tested_dtype, c.name), standard)
    if values.status != PASS:
        values.reasons = [f"the {int(kept.sum())} elements both sides kept: {'; '.join(values.reasons)}"]
    status = worst_status([share.status, values.status])
    return metrics, Verdict(
        status,
        [*share.reasons, *values.reasons],
        values.floor if values.status == status else "",
        values.ratio,
        max(share.severity or 0.0, values.severity or 0.0),
        values.nonfinite,
    )


def share_verdict(tested: int, bench: int, n: int, rule: DropoutRule) -> Verdict:
    """msprobe's rule on the counts of dropped units of each side."""
    from .standards import Verdict

    what = f"{rule.api} p={rule.p:g} draws over {n} {rule.unit}"
    expected = f" ({rule.expected()})" if rule.expected() else ""
    if n < MIN_DRAWS:
        return Verdict(
            PASS, [f"{what}: fewer than {MIN_DRAWS}, so the share dropped is not judged (msprobe passes it)"]
        )
    gap = abs(tested - bench) / n
    shares = f"{tested / n:.1%} dropped on the tested side, {bench / n:.1%} on the bench{expected}"
    severity = gap / MAX_SHARE_GAP
    if gap < MAX_SHARE_GAP:
        return Verdict(PASS, [f"{what}: {shares}, {gap:.1%} apart (under msprobe's 10%)"], severity=severity)
    return Verdict(ERROR, [f"{what}: {shares}, {gap:.1%} apart: not under msprobe's 10%"], severity=severity)
